"""Start ``python -m ddp_smoke`` processes with a simulated Slurm environment.

A module with a distinctive name rather than helpers in ``conftest.py``: the
repository runs several test trees in one pytest session, where ``import conftest``
could pick up another tree's file.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryFile
from typing import IO

TRAINING_DIR = Path(__file__).resolve().parent.parent
HOSTS = ("nodeA", "nodeB")
JOB_ID = "4242"
# Generous per-process ceiling; a healthy 2-rank run takes a few seconds.
PROCESS_TIMEOUT_S = 90


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str


Launcher = Callable[..., list[Finished]]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_env(extra: Mapping[str, str]) -> dict[str, str]:
    """This environment minus any real Slurm/rendezvous settings, plus ``extra``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("SLURM", "MASTER_", "DDP_SMOKE_")) and key != "LOCAL_RANK"
    }
    env.update({"PYTHONPATH": str(TRAINING_DIR), "OMP_NUM_THREADS": "1", **extra})
    return env


def rank_env(rank: int, world_size: int, port: int, fault: str | None) -> dict[str, str]:
    env = {
        "SLURM_PROCID": str(rank),
        "SLURM_NTASKS": str(world_size),
        "SLURM_LOCALID": str(rank),
        "SLURM_JOB_ID": JOB_ID,
        "SLURM_STEP_NODELIST": "localhost",
        "SLURMD_NODENAME": HOSTS[rank],
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    if fault is not None:
        env["DDP_SMOKE_FAULT"] = fault
    return child_env(env)


def slurm_node_env(job_id: str, host: str = "nodeA") -> dict[str, str]:
    """The variables ``srun --ntasks-per-node=1`` gives the one task on a one-node step."""
    return {
        "SLURM_JOB_ID": job_id,
        "SLURM_NTASKS": "1",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NNODES": "1",
        "SLURM_STEP_NUM_NODES": "1",
        "SLURM_STEP_NODELIST": "localhost",
        "SLURMD_NODENAME": host,
    }


def run_cli(args: list[str], env: Mapping[str, str] | None = None) -> Finished:
    done = subprocess.run(
        [sys.executable, "-m", "ddp_smoke", *args],
        env=child_env(env or {}),
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
        check=False,
    )
    return Finished(done.returncode, done.stdout, done.stderr)


def launch_ranks_impl(
    result_dir: Path,
    ranks: tuple[int, ...] = (0, 1),
    world_size: int = 2,
    fault: str | None = None,
    extra_args: tuple[str, ...] = (),
    kill_on_bad_exit: bool = False,
) -> list[Finished]:
    """Start ``ranks`` of a ``world_size`` job on a free local port; wait for all of them.

    ``kill_on_bad_exit`` does what ``srun --kill-on-bad-exit=1`` does: as soon as one
    rank exits non-zero, the others are killed.
    """
    port = free_port()
    args = ["run", "--result-dir", str(result_dir), *extra_args]
    with ExitStack() as stack:
        outputs = [
            (stack.enter_context(TemporaryFile("w+")), stack.enter_context(TemporaryFile("w+")))
            for _ in ranks
        ]
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "ddp_smoke", *args],
                env=rank_env(rank, world_size, port, fault),
                stdout=out,
                stderr=err,
                text=True,
            )
            for rank, (out, err) in zip(ranks, outputs, strict=True)
        ]
        try:
            _wait_all(procs, kill_on_bad_exit)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=10)
        return [
            Finished(proc.returncode, _read(out), _read(err))
            for proc, (out, err) in zip(procs, outputs, strict=True)
        ]


def _wait_all(procs: list[subprocess.Popen[str]], kill_on_bad_exit: bool) -> None:
    deadline = time.monotonic() + PROCESS_TIMEOUT_S
    while time.monotonic() < deadline:
        codes = [proc.poll() for proc in procs]
        if all(code is not None for code in codes):
            return
        if kill_on_bad_exit and any(code not in (None, 0) for code in codes):
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
            return
        time.sleep(0.1)
    raise TimeoutError(f"ranks still running after {PROCESS_TIMEOUT_S} s")


def _read(stream: IO[str]) -> str:
    stream.seek(0)
    return stream.read()
