"""The spawn mode: one process per node starts one worker per GPU with torch.multiprocessing.

``srun --ntasks-per-node=1`` starts ``python -m ddp_smoke run --mode spawn`` on each
node. That process spawns ``--nproc-per-node`` workers; worker ``l`` of node ``n``
is rank ``n * nproc_per_node + l``. The workers meet at a ``file://`` rendezvous on
the shared filesystem. The node process exits 0 only if all its workers did.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from multiprocessing.connection import wait as wait_for_exit

import torch.multiprocessing as mp

from ddp_smoke.launch import RunOptions, SpawnPlan
from ddp_smoke.runner import run_rank

# After one worker fails, the others get this long past --timeout to report too.
GRACE_S = 30.0


def run_node(plan: SpawnPlan, options: RunOptions, env: Mapping[str, str]) -> int:
    """Spawn this node's workers and wait for all of them; 0 if every one exited 0."""
    options.result_dir.mkdir(parents=True, exist_ok=True)
    (options.rdzv_dir or options.result_dir).mkdir(parents=True, exist_ok=True)
    context = mp.start_processes(
        _worker,
        args=(plan, options, dict(env)),
        nprocs=plan.nproc_per_node,
        join=False,
        start_method="spawn",
    )
    codes = _wait(list(context.processes), options.timeout_s + GRACE_S)
    failed = [(local, code) for local, code in enumerate(codes) if code != 0]
    for local, code in failed:
        print(
            f"ddp_smoke: FAIL node {plan.node_rank} on {plan.host}: worker {local} "
            f"(rank {plan.context(local).rank}) exited with status {code}",
            file=sys.stderr,
        )
    return 1 if failed else 0


def _worker(local_rank: int, plan: SpawnPlan, options: RunOptions, env: dict[str, str]) -> None:
    """Runs in the spawned process; the exit status is the rank's verdict."""
    raise SystemExit(run_rank(plan.context(local_rank), options, env))


def _wait(processes: list[mp.Process], grace_s: float) -> list[int]:
    """Exit status of every worker; once one fails, the rest get ``grace_s`` before a kill."""
    deadline: float | None = None
    pending = list(processes)
    while pending:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not wait_for_exit([proc.sentinel for proc in pending], timeout=left):
            for proc in pending:
                proc.kill()
            break
        for proc in [proc for proc in pending if proc.exitcode is not None]:
            pending.remove(proc)
            if proc.exitcode != 0 and deadline is None:
                deadline = time.monotonic() + grace_s
    for proc in processes:
        proc.join(timeout=10)
    return [proc.exitcode if proc.exitcode is not None else -9 for proc in processes]
