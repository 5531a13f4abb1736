"""Rank layout for the torchrun and spawn launch modes; standard library only.

- ``torchrun``: ``srun --ntasks-per-node=1`` starts one torchrun agent per node,
  which starts ``--nproc-per-node`` workers and hands each one ``RANK``,
  ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``
  (``init_method="env://"``). ``torchrun_argv`` builds the agent's command line.
- ``spawn``: ``srun --ntasks-per-node=1`` starts one ddp_smoke process per node,
  which ``torch.multiprocessing``-spawns ``--nproc-per-node`` workers; they meet at
  a ``file://`` rendezvous on the shared filesystem.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ddp_smoke import tcp_probe
from ddp_smoke.options import RunOptions
from ddp_smoke.slurm_env import (
    SlurmContext,
    from_env,
    parse_int,
    rendezvous_host,
    rendezvous_port,
    require,
    url_host,
)

IFACE_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
TORCHRUN_HINT = "launch the workers with torchrun (python -m ddp_smoke torchrun ...)"
ONE_TASK_PER_NODE = "srun --ntasks-per-node=1"


@dataclass(frozen=True)
class SpawnPlan:
    """One node's share of a spawn-mode job."""

    node_rank: int
    nodes: int
    nproc_per_node: int
    job_id: str
    host: str
    init_method: str

    @property
    def world_size(self) -> int:
        return self.nodes * self.nproc_per_node

    def context(self, local_rank: int) -> SlurmContext:
        """The context of this node's worker ``local_rank``."""
        return SlurmContext(
            rank=self.node_rank * self.nproc_per_node + local_rank,
            world_size=self.world_size,
            local_rank=local_rank,
            job_id=self.job_id,
            host=self.host,
            master_addr="",
            master_port=0,
            mode="spawn",
            init_method=self.init_method,
        )


def resolve(options: RunOptions, env: Mapping[str, str]) -> SlurmContext | SpawnPlan:
    """This process's place in the job for ``options.mode``; ``ValueError`` if it has none."""
    if options.mode == "spawn":
        rdzv_dir = options.rdzv_dir or options.result_dir
        return spawn_plan(env, options.nproc_per_node, rdzv_dir)
    if options.mode == "torchrun":
        return torchrun_context(env)
    return from_env(env, options.master_port)


def select_interface(iface: str | None, env: Mapping[str, str]) -> dict[str, str]:
    """Point gloo and NCCL at ``iface``; ``ValueError`` if this host lacks it.

    Both libraries read the variables from the process environment, so this is the
    one place the package changes ``os.environ``; spawned workers inherit it.
    """
    merged = dict(env)
    if iface is None:
        return merged
    tcp_probe.interface_address(iface)
    for name in IFACE_VARIABLES:
        os.environ[name] = iface
        merged[name] = iface
    return merged


def iface_report(iface: str | None, env: Mapping[str, str]) -> dict[str, str | None]:
    """What ``--iface`` asked for and what gloo and NCCL were told, for the result files."""
    info: dict[str, str | None] = {"requested": iface}
    info.update({name: env.get(name) or None for name in IFACE_VARIABLES})
    return info


def torchrun_context(env: Mapping[str, str]) -> SlurmContext:
    """A torchrun worker's context from the variables torchrun sets."""
    world_size = parse_int("WORLD_SIZE", require(env, "WORLD_SIZE", TORCHRUN_HINT), minimum=1)
    rank = parse_int("RANK", require(env, "RANK", TORCHRUN_HINT), minimum=0)
    if rank >= world_size:
        raise ValueError(f"RANK={rank} is not below WORLD_SIZE={world_size}")
    local_rank = parse_int("LOCAL_RANK", require(env, "LOCAL_RANK", TORCHRUN_HINT), minimum=0)
    port = parse_int("MASTER_PORT", require(env, "MASTER_PORT", TORCHRUN_HINT), minimum=1)
    return SlurmContext(
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        job_id=env.get("SLURM_JOB_ID") or env.get("TORCHELASTIC_RUN_ID", ""),
        host=node_name(env),
        master_addr=require(env, "MASTER_ADDR", TORCHRUN_HINT),
        master_port=port,
        mode="torchrun",
        init_method="env://",
    )


def spawn_plan(env: Mapping[str, str], nproc_per_node: int | None, rdzv_dir: Path) -> SpawnPlan:
    """This node's plan from ``srun --ntasks-per-node=1``: node rank = ``SLURM_PROCID``."""
    node_rank, nodes = _one_task_per_node(env)
    job_id = require(env, "SLURM_JOB_ID")
    step = env.get("SLURM_STEP_ID", "")
    name = f"rdzv-{job_id}.{step}" if step else f"rdzv-{job_id}"
    return SpawnPlan(
        node_rank=node_rank,
        nodes=nodes,
        nproc_per_node=nproc_per_node or default_nproc(env),
        job_id=job_id,
        host=node_name(env),
        init_method=(rdzv_dir.resolve() / name).as_uri(),
    )


def torchrun_options(
    env: Mapping[str, str],
    nproc_per_node: int | None,
    port: int | None,
    timeout_s: float,
    which: Callable[[str], str | None] = shutil.which,
) -> list[str]:
    """torchrun's options for this node: c10d rendezvous on the first host, id = job id."""
    _, nodes = _one_task_per_node(env)
    job_id = require(env, "SLURM_JOB_ID")
    host = rendezvous_host(env, which)
    return [
        f"--nnodes={nodes}",
        f"--nproc-per-node={nproc_per_node or default_nproc(env)}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={url_host(host)}:{rendezvous_port(env, port, job_id)}",
        f"--rdzv-id={job_id}",
        # torchrun waits 600 s for all nodes by default: bound it like every other wait.
        f"--rdzv-conf=join_timeout={max(1, round(timeout_s))}",
        "--max-restarts=0",
    ]


def torchrun_argv(options: list[str], run_args: list[str]) -> list[str]:
    """This Python running torchrun with ``options``; torchrun runs ``ddp_smoke run``."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *options,
        "-m",
        "ddp_smoke",
        "run",
        "--mode",
        "torchrun",
        *run_args,
    ]


def shell_line(argv: list[str]) -> str:
    return " ".join(shlex.quote(arg) for arg in argv)


def default_nproc(env: Mapping[str, str]) -> int:
    """GPUs Slurm gave this node (``SLURM_GPUS_ON_NODE``), else 1."""
    text = env.get("SLURM_GPUS_ON_NODE", "")
    return parse_int("SLURM_GPUS_ON_NODE", text, minimum=1) if text else 1


def node_name(env: Mapping[str, str]) -> str:
    return env.get("SLURMD_NODENAME") or socket.gethostname()


def _one_task_per_node(env: Mapping[str, str]) -> tuple[int, int]:
    """``(node rank, node count)`` of a step that runs one task on each node."""
    tasks = parse_int("SLURM_NTASKS", require(env, "SLURM_NTASKS"), minimum=1)
    node_rank = parse_int("SLURM_PROCID", require(env, "SLURM_PROCID"), minimum=0)
    nodes_text = env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_NNODES") or str(tasks)
    nodes = parse_int("SLURM_STEP_NUM_NODES/SLURM_NNODES", nodes_text, minimum=1)
    if tasks != nodes:
        raise ValueError(
            f"this mode needs one task per node ({ONE_TASK_PER_NODE}): "
            f"SLURM_NTASKS={tasks} on {nodes} nodes"
        )
    if node_rank >= nodes:
        raise ValueError(f"SLURM_PROCID={node_rank} is not below the node count {nodes}")
    return node_rank, nodes
