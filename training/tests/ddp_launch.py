"""Start ``python -m ddp_smoke`` processes with a simulated Slurm environment.

A module with a distinctive name rather than helpers in ``conftest.py``: the
repository runs several test trees in one pytest session, where ``import conftest``
could pick up another tree's file.
"""

from __future__ import annotations

import os
import shutil
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

import pytest

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


def rank_env(
    rank: int,
    world_size: int,
    port: int,
    fault: str | None,
    hosts: tuple[str, ...] | None = None,
) -> dict[str, str]:
    """srun's variables for task ``rank``.

    Without ``hosts``, task ``r`` runs on ``HOSTS[r]`` with ``SLURM_LOCALID=r``. With
    ``hosts`` (the host of every task, by rank), the tasks of one host are numbered
    from 0 as Slurm does, and ``SLURM_NODEID``/``SLURM_TASKS_PER_NODE`` describe the
    layout: ``("nodeA", "nodeA", "nodeB")`` is ``2(x1),1``.
    """
    env = {
        "SLURM_PROCID": str(rank),
        "SLURM_NTASKS": str(world_size),
        "SLURM_LOCALID": str(rank),
        "SLURM_JOB_ID": JOB_ID,
        "SLURM_STEP_NODELIST": "localhost",
        "SLURMD_NODENAME": HOSTS[rank] if hosts is None else hosts[rank],
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    if hosts is not None:
        nodes = list(dict.fromkeys(hosts))
        env["SLURM_LOCALID"] = str(hosts[:rank].count(hosts[rank]))
        env["SLURM_NODEID"] = str(nodes.index(hosts[rank]))
        env["SLURM_NNODES"] = str(len(nodes))
        env["SLURM_TASKS_PER_NODE"] = tasks_per_node([hosts.count(node) for node in nodes])
    if fault is not None:
        env["DDP_SMOKE_FAULT"] = fault
    return child_env(env)


def tasks_per_node(counts: list[int]) -> str:
    """Slurm's compressed form: ``[2, 1]`` -> ``2,1``, ``[2, 2, 1]`` -> ``2(x2),1``."""
    groups: list[list[int]] = []
    for count in counts:
        if groups and groups[-1][0] == count:
            groups[-1][1] += 1
        else:
            groups.append([count, 1])
    return ",".join(f"{count}(x{times})" if times > 1 else str(count) for count, times in groups)


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
    hosts: tuple[str, ...] | None = None,
) -> list[Finished]:
    """Start ``ranks`` of a ``world_size`` job on a free local port; wait for all of them.

    ``kill_on_bad_exit`` does what ``srun --kill-on-bad-exit=1`` does: as soon as one
    rank exits non-zero, the others are killed. ``hosts`` lays the tasks out on
    hosts as ``rank_env`` says.
    """
    port = free_port()
    args = ["run", "--result-dir", str(result_dir), *extra_args]
    envs = [rank_env(rank, world_size, port, fault, hosts) for rank in ranks]
    return run_parallel([(args, env) for env in envs], kill_on_bad_exit)


def run_parallel(
    commands: list[tuple[list[str], dict[str, str]]], kill_on_bad_exit: bool = False
) -> list[Finished]:
    """Run ``python -m ddp_smoke ARGS`` with each ``(ARGS, environment)`` at once; wait for all."""
    with ExitStack() as stack:
        outputs = [
            (stack.enter_context(TemporaryFile("w+")), stack.enter_context(TemporaryFile("w+")))
            for _ in commands
        ]
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "ddp_smoke", *args],
                env=env,
                stdout=out,
                stderr=err,
                text=True,
            )
            for (args, env), (out, err) in zip(commands, outputs, strict=True)
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


# --- Interpreters: this one, and the nodes' Ubuntu 22.04 Python where there is one ---


def python_310() -> str | None:
    """A Python 3.10 (the nodes' Ubuntu 22.04 Python), if this machine has a working one."""
    found = shutil.which("python3.10")
    if found is None:
        return None
    probe = subprocess.run(
        [found, "-c", "import sys; print(sys.version_info[:2] == (3, 10))"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return found if probe.stdout.strip() == "True" else None


def interpreters() -> list[object]:
    old = python_310()
    reason = "no working python3.10 on this machine"
    return [
        pytest.param(sys.executable, id="this-python"),
        pytest.param(old, id="python3.10", marks=pytest.mark.skipif(old is None, reason=reason)),
    ]
