"""Where this process sits in the job, worked out before torch is imported.

Standard library only: the controller runs ``torchrun-args`` and ``torchrun`` with
the system Python, and ``run`` refuses an environment that does not fit its mode
before it pays for importing torch.

- Run options: what ``run`` was asked to do (``RunOptions``, ``MeasureOptions``).
- ``srun`` mode: one task per rank; rank, world size and local rank are Slurm's own
  ``SLURM_PROCID``, ``SLURM_NTASKS`` and ``SLURM_LOCALID``, so nodes may run
  different numbers of tasks (``SLURM_TASKS_PER_NODE=2(x1),1``). The rendezvous
  is ``tcp://`` on the first host of the step.
- ``torchrun`` mode: ``srun --ntasks-per-node=1`` starts one torchrun agent per
  node, which starts ``--nproc-per-node`` workers and hands each one ``RANK``,
  ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``
  (``init_method="env://"``). ``torchrun_argv`` builds the agent's command line.
- ``spawn`` mode: ``srun --ntasks-per-node=1`` starts one ddp_smoke process per
  node, which ``torch.multiprocessing``-spawns ``--nproc-per-node`` workers; they
  meet at a ``file://`` rendezvous on the shared filesystem.
- ``--nproc-per-node auto`` (``gpus_on_node``) and ``--iface`` (``select_interface``).
- What this host has, for the measurements: the speed of an interface's link
  (``link_of``, from sysfs) and the GPU topology (``gpu_topology``, ``nvidia-smi``).
"""

from __future__ import annotations

import fcntl
import itertools
import os
import re
import shlex
import shutil
import socket
import struct
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path

# --- Run options -----------------------------------------------------------------

MODES = ("srun", "torchrun", "spawn")
CHECK_GROUPS = ("collectives", "data", "train")
MEASURE_GROUPS = ("sweep", "tcp", "throughput", "scaling")
# Measurements run by default only where they are wanted: in the plain srun mode.
DEFAULT_MEASURE = {"srun": MEASURE_GROUPS, "torchrun": (), "spawn": ()}


@dataclass(frozen=True)
class MeasureOptions:
    """Sizes and floors of the measurements (see README.md, "Measurements")."""

    groups: frozenset[str] = frozenset()
    sweep_sizes: tuple[int, ...] = ()
    sweep_iters: int | None = None
    tcp_bytes: int = 64 << 20
    bench_steps: int = 20
    straggler_ratio: float = 1.5
    min_busbw_gbps: float | None = None
    max_straggler_ratio: float | None = None


@dataclass(frozen=True)
class RunOptions:
    result_dir: Path
    expected_world_size: int | None
    epochs: int
    timeout_s: float
    master_port: int | None
    seed: int
    mode: str = "srun"
    label: str = ""
    checks: frozenset[str] = frozenset(CHECK_GROUPS)
    iface: str | None = None
    nproc_per_node: int | None = None
    rdzv_dir: Path | None = None
    measure: MeasureOptions = field(default_factory=MeasureOptions)

    @property
    def timeout(self) -> timedelta:
        return timedelta(seconds=self.timeout_s)

    @property
    def run_label(self) -> str:
        return self.label or self.mode


def parse_groups(text: str, known: tuple[str, ...], what: str) -> frozenset[str]:
    """``"all"``, ``"none"`` or a comma-separated subset of ``known``."""
    if text.strip() == "all":
        return frozenset(known)
    if text.strip() in ("none", ""):
        return frozenset()
    names = {part.strip() for part in text.split(",") if part.strip()}
    unknown = sorted(names - set(known))
    if unknown:
        raise ValueError(f"unknown {what} {', '.join(unknown)}: choose from {', '.join(known)}")
    return frozenset(names)


# --- srun mode: Slurm's task variables ----------------------------------------------

# Derived ports stay in 20000-29999: above the well-known and registered service
# ports most clusters run, and below Linux's default ephemeral range (32768-60999)
# so an outgoing connection cannot already hold the port.
PORT_BASE = 20000
PORT_SPAN = 10000

# A host list that expands to more names than this is a typo, not a cluster.
MAX_HOSTS = 65536

SCONTROL_TIMEOUT_S = 10.0

_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
_BRACKET = re.compile(r"(\[[^\[\]]*\])")


@dataclass(frozen=True)
class SlurmContext:
    """Everything one rank needs to join the process group."""

    rank: int
    world_size: int
    local_rank: int
    job_id: str
    host: str
    master_addr: str
    master_port: int
    # How the ranks were started (srun, torchrun, spawn) and, when not plain
    # tcp://MASTER_ADDR:MASTER_PORT, the init_method they meet at.
    mode: str = "srun"
    init_method: str = ""

    @property
    def rendezvous(self) -> str:
        """The ``init_method`` for ``init_process_group``."""
        if self.init_method:
            return self.init_method
        return f"tcp://{url_host(self.master_addr)}:{self.master_port}"

    @property
    def master(self) -> str | None:
        """``host:port`` of the rendezvous, ``None`` for a file:// rendezvous."""
        return f"{self.master_addr}:{self.master_port}" if self.master_addr else None


def url_host(addr: str) -> str:
    """``addr`` as the host part of a URL: IPv6 addresses go in brackets."""
    return f"[{addr}]" if ":" in addr and not addr.startswith("[") else addr


def expand_hostlist(expr: str) -> list[str]:
    """Expand a Slurm host list (``node[01-03,07],gpu-a1``) in pure Python.

    Ranges keep the zero padding of their lower bound, several bracket groups in
    one name expand as a product with the leftmost group varying slowest, and a
    malformed expression raises ``ValueError`` instead of guessing.
    """
    hosts: list[str] = []
    for item in _split_top_level(expr):
        hosts.extend(_expand_item(item))
        if len(hosts) > MAX_HOSTS:
            raise ValueError(f"host list {expr!r} expands to more than {MAX_HOSTS} names")
    if not hosts:
        raise ValueError(f"host list {expr!r} names no hosts")
    return hosts


def _split_top_level(expr: str) -> list[str]:
    """Split on the commas that are not inside brackets."""
    items: list[str] = []
    current: list[str] = []
    depth = 0
    for char in expr:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if depth not in (0, 1):
            raise ValueError(f"unbalanced or nested brackets in host list {expr!r}")
        if char == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise ValueError(f"unbalanced brackets in host list {expr!r}")
    items.append("".join(current))
    return [item.strip() for item in items if item.strip()]


def _expand_item(item: str) -> list[str]:
    choices: list[list[str]] = []
    for part in _BRACKET.split(item):
        if part.startswith("["):
            choices.append(_expand_ranges(part[1:-1], item))
        elif "[" in part or "]" in part:
            raise ValueError(f"unbalanced brackets in host name {item!r}")
        elif part:
            choices.append([part])
    return ["".join(parts) for parts in itertools.product(*choices)]


def _expand_ranges(body: str, item: str) -> list[str]:
    names: list[str] = []
    for piece in body.split(","):
        match = _RANGE.fullmatch(piece.strip())
        if match is None:
            raise ValueError(f"bad range {piece!r} in host name {item!r}")
        low_text, high_text = match.group(1), match.group(2) or match.group(1)
        low, high = int(low_text), int(high_text)
        if high < low:
            raise ValueError(f"range {piece!r} in host name {item!r} runs backwards")
        if high - low >= MAX_HOSTS:
            raise ValueError(f"range {piece!r} in host name {item!r} is too large")
        width = len(low_text)
        names.extend(f"{number:0{width}d}" for number in range(low, high + 1))
    return names


def resolve_hostlist(expr: str, scontrol: str | None) -> list[str]:
    """Expand ``expr`` with ``scontrol show hostnames`` when given, else in Python.

    A failing or hanging ``scontrol`` (no slurm.conf on this host, say) falls back
    to the Python expansion, which understands the same syntax.
    """
    if scontrol is not None:
        try:
            done = subprocess.run(
                [scontrol, "show", "hostnames", expr],
                capture_output=True,
                text=True,
                timeout=SCONTROL_TIMEOUT_S,
                check=True,
            )
        except (OSError, subprocess.SubprocessError):
            return expand_hostlist(expr)
        hosts = done.stdout.split()
        if hosts:
            return hosts
    return expand_hostlist(expr)


def derive_port(job_id: str) -> int:
    """A rendezvous port every rank of the job computes alike from the job id."""
    number = parse_int("SLURM_JOB_ID", job_id, minimum=0)
    return PORT_BASE + number % PORT_SPAN


def srun_context(
    env: Mapping[str, str],
    master_port: int | None = None,
    which: Callable[[str], str | None] = shutil.which,
) -> SlurmContext:
    """An srun task's context from Slurm's task variables; ``ValueError`` naming what is wrong.

    Rank and world size are ``SLURM_PROCID`` and ``SLURM_NTASKS``, the local rank
    ``LOCAL_RANK`` or else ``SLURM_LOCALID``: Slurm's own numbering, which holds
    when nodes run different numbers of tasks, so nothing here divides the world
    by the node count. ``MASTER_ADDR`` wins over the first host of
    ``SLURM_STEP_NODELIST`` (then ``SLURM_JOB_NODELIST``); ``master_port`` over
    ``MASTER_PORT`` over a port derived from ``SLURM_JOB_ID``.
    """
    world_size = parse_int("SLURM_NTASKS", require(env, "SLURM_NTASKS"), minimum=1)
    rank = parse_int("SLURM_PROCID", require(env, "SLURM_PROCID"), minimum=0)
    if rank >= world_size:
        raise ValueError(f"SLURM_PROCID={rank} is not below SLURM_NTASKS={world_size}")
    local_text = env.get("LOCAL_RANK") or require(env, "SLURM_LOCALID")
    job_id = env.get("SLURM_JOB_ID", "")
    return SlurmContext(
        rank=rank,
        world_size=world_size,
        local_rank=parse_int("LOCAL_RANK/SLURM_LOCALID", local_text, minimum=0),
        job_id=job_id,
        host=node_name(env),
        master_addr=rendezvous_host(env, which),
        master_port=rendezvous_port(env, master_port, job_id),
    )


def rendezvous_host(env: Mapping[str, str], which: Callable[[str], str | None]) -> str:
    """``MASTER_ADDR``, else the first host of the step's (then the job's) node list."""
    if env.get("MASTER_ADDR"):
        return env["MASTER_ADDR"]
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise ValueError(
            "neither MASTER_ADDR nor SLURM_STEP_NODELIST/SLURM_JOB_NODELIST is set: "
            "launch with srun or export MASTER_ADDR"
        )
    return resolve_hostlist(nodelist, which("scontrol"))[0]


def rendezvous_port(env: Mapping[str, str], given: int | None, job_id: str) -> int:
    """``given``, else ``MASTER_PORT``, else the port derived from the job id."""
    if given is not None:
        port = given
    elif env.get("MASTER_PORT"):
        port = parse_int("MASTER_PORT", env["MASTER_PORT"], minimum=1)
    elif job_id:
        port = derive_port(job_id)
    else:
        raise ValueError("SLURM_JOB_ID is not set and no master port was given")
    if not 1 <= port <= 65535:
        raise ValueError(f"master port {port} is outside 1-65535")
    return port


def require(env: Mapping[str, str], name: str, hint: str = "launch each rank with srun") -> str:
    """The non-empty value of ``name``; raise ``ValueError`` with ``hint`` otherwise."""
    value = env.get(name, "")
    if not value:
        raise ValueError(f"{name} is not set: {hint}")
    return value


def parse_int(name: str, text: str, minimum: int) -> int:
    """``text`` as an integer of at least ``minimum``; the error names ``name``."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer") from None
    if value < minimum:
        raise ValueError(f"{name}={value} is below {minimum}")
    return value


# --- torchrun and spawn modes: one task per node ---------------------------------------

TORCHRUN_HINT = "launch the workers with torchrun (python -m ddp_smoke torchrun ...)"
ONE_TASK_PER_NODE = "srun --ntasks-per-node=1"


@dataclass(frozen=True)
class SpawnPlan:
    """One node's share of a spawn-mode job.

    ``workers`` holds the worker count of every node, by node rank. ``spawn_plan``
    knows only this node's count and takes it for every node (what an integer
    ``--nproc-per-node`` promises); the node process replaces it with the counts
    the nodes report to each other (``placed``), since ``--nproc-per-node auto``
    differs between uneven nodes.
    """

    node_rank: int
    nodes: int
    nproc_per_node: int
    job_id: str
    host: str
    rdzv_file: Path
    workers: tuple[int, ...]

    @property
    def init_method(self) -> str:
        return self.rdzv_file.as_uri()

    @property
    def counts_file(self) -> Path:
        """Where the nodes tell each other their worker counts, beside the rendezvous."""
        return self.rdzv_file.with_name(f"{self.rdzv_file.name}.workers")

    @property
    def world_size(self) -> int:
        return sum(self.workers)

    @property
    def first_rank(self) -> int:
        """The rank of this node's worker 0: the workers of the nodes before it."""
        return sum(self.workers[: self.node_rank])

    def placed(self, workers: tuple[int, ...]) -> SpawnPlan:
        """This plan with every node's reported worker count; ``ValueError`` if they misfit."""
        if len(workers) != self.nodes or min(workers, default=0) < 1:
            raise ValueError(f"worker counts {list(workers)} do not fit {self.nodes} nodes")
        if workers[self.node_rank] != self.nproc_per_node:
            raise ValueError(
                f"node {self.node_rank} starts {self.nproc_per_node} workers, "
                f"but {workers[self.node_rank]} were reported for it"
            )
        return replace(self, workers=tuple(workers))

    def context(self, local_rank: int) -> SlurmContext:
        """The context of this node's worker ``local_rank``."""
        return SlurmContext(
            rank=self.first_rank + local_rank,
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
    return srun_context(env, options.master_port)


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
    """This node's plan from ``srun --ntasks-per-node=1``: node rank = ``SLURM_PROCID``.

    ``nproc_per_node`` ``None`` means ``auto`` (``gpus_on_node``).
    """
    node_rank, nodes = _one_task_per_node(env)
    job_id = require(env, "SLURM_JOB_ID")
    step = env.get("SLURM_STEP_ID", "")
    name = f"rdzv-{job_id}.{step}" if step else f"rdzv-{job_id}"
    count = nproc_per_node or gpus_on_node(env)
    return SpawnPlan(
        node_rank=node_rank,
        nodes=nodes,
        nproc_per_node=count,
        job_id=job_id,
        host=node_name(env),
        rdzv_file=rdzv_dir.resolve() / name,
        workers=(count,) * nodes,
    )


def torchrun_options(
    env: Mapping[str, str],
    nproc_per_node: int | None,
    port: int | None,
    timeout_s: float,
    which: Callable[[str], str | None] = shutil.which,
) -> list[str]:
    """torchrun's options for this node: c10d rendezvous on the first host, id = job id.

    ``nproc_per_node`` ``None`` means ``auto`` (``gpus_on_node``). torchrun itself
    numbers the workers of nodes that start different counts.
    """
    _, nodes = _one_task_per_node(env)
    job_id = require(env, "SLURM_JOB_ID")
    host = rendezvous_host(env, which)
    return [
        f"--nnodes={nodes}",
        f"--nproc-per-node={nproc_per_node or gpus_on_node(env)}",
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


def gpus_on_node(env: Mapping[str, str]) -> int:
    """``--nproc-per-node auto``: the GPUs Slurm gave this node's task.

    ``SLURM_GPUS_ON_NODE``, else the number of entries in ``CUDA_VISIBLE_DEVICES``
    (comma-separated, empty entries ignored), else 1: a CPU node runs one worker.
    Read on each node, so uneven nodes start different numbers of workers.
    """
    text = env.get("SLURM_GPUS_ON_NODE", "")
    if text:
        return parse_int("SLURM_GPUS_ON_NODE", text, minimum=1)
    visible = [entry for entry in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if entry.strip()]
    return len(visible) or 1


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


# --- The network interface (--iface) ---------------------------------------------------

IFACE_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
_SIOCGIFADDR = 0x8915  # Linux ioctl: the IPv4 address of an interface
_IFNAMSIZ = 16


def interface_names() -> list[str]:
    return [name for _, name in socket.if_nameindex()]


def process_age_s(stat: str = "/proc/self/stat", uptime: str = "/proc/uptime") -> float | None:
    """Seconds since this process started (Linux), ``None`` where /proc cannot tell.

    A rank reads it once torch is imported: the time python, ddp_smoke and torch
    took to start, which no rank timer holds (the report's "import" phase).
    """
    try:
        fields = Path(stat).read_text().rpartition(")")[2].split()
        started_ticks = int(fields[19])  # field 22, starttime, counted after the name
        now_s = float(Path(uptime).read_text().split()[0])
        age = now_s - started_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return round(age, 3) if age >= 0 else None


def interface_address(name: str) -> str:
    """The IPv4 address of interface ``name``; ``ValueError`` naming it otherwise."""
    if name not in interface_names():
        raise ValueError(
            f"network interface {name!r} does not exist here (have: {', '.join(interface_names())})"
        )
    packed = struct.pack("256s", name.encode()[: _IFNAMSIZ - 1])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            answer = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, packed)
        except OSError as exc:
            raise ValueError(f"network interface {name!r} has no IPv4 address: {exc}") from None
    return socket.inet_ntoa(answer[20:24])


def select_interface(iface: str | None, env: Mapping[str, str]) -> dict[str, str]:
    """Point gloo and NCCL at ``iface``; ``ValueError`` if this host lacks it.

    Both libraries read the variables from the process environment, so this is the
    one place the package changes ``os.environ``; spawned workers inherit it.
    """
    merged = dict(env)
    if iface is None:
        return merged
    interface_address(iface)
    for name in IFACE_VARIABLES:
        os.environ[name] = iface
        merged[name] = iface
    return merged


def iface_report(iface: str | None, env: Mapping[str, str]) -> dict[str, str | None]:
    """What ``--iface`` asked for and what gloo and NCCL were told, for the result files."""
    info: dict[str, str | None] = {"requested": iface}
    info.update({name: env.get(name) or None for name in IFACE_VARIABLES})
    return info


# --- What this host has: link speeds and the GPU topology ---------------------------------

SYS_CLASS_NET = Path("/sys/class/net")
TOPOLOGY_TIMEOUT_S = 10.0
# nvidia-smi underlines its header with ANSI escapes, even into a pipe.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def interface_with_address(address: str) -> str | None:
    """The interface whose IPv4 address is ``address``; ``None`` if no interface has it."""
    try:
        names = interface_names()
    except OSError:
        return None
    for name in names:
        try:
            if interface_address(name) == address:
                return name
        except ValueError:
            continue
    return None


def link_speed_mbps(iface: str, sysfs: Path = SYS_CLASS_NET) -> int | None:
    """``<sysfs>/<iface>/speed`` in Mbit/s; ``None`` if missing, unreadable or not positive.

    Virtual interfaces report nothing (loopback: EINVAL) or -1 (a link that is down);
    a veth reports 10000 whatever it moves.
    """
    try:
        speed = int((sysfs / iface / "speed").read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None
    return speed if speed > 0 else None


def link_of(
    iface: str | None, local_address: str | None, sysfs: Path = SYS_CLASS_NET
) -> dict[str, object]:
    """``{"iface", "link_Mbps"}`` of ``--iface`` if given, else of the interface holding
    ``local_address`` (this end of a connection); ``None`` values where unknown."""
    name = iface or (interface_with_address(local_address) if local_address else None)
    return {"iface": name, "link_Mbps": link_speed_mbps(name, sysfs) if name else None}


def parse_gpu_topology(text: str) -> dict[str, str]:
    """``nvidia-smi topo -m`` as ``{"GPU0|GPU1": "NV12", "GPU0|NIC0": "PIX", ...}``.

    One entry per pair of devices (GPUs and NICs), in the matrix's order, row
    before column; the affinity columns and the legend are left out.
    """
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    header = next((tokens for tokens in map(str.split, lines) if _is_header(tokens)), [])
    devices = list(itertools.takewhile(lambda token: token != "CPU", header))
    links: dict[str, str] = {}
    for line in lines:
        tokens = line.split()
        if not tokens or tokens[0] not in devices or len(tokens) <= len(devices):
            continue
        row = devices.index(tokens[0])
        for column, value in enumerate(tokens[1 : len(devices) + 1]):
            if column > row:
                links[f"{devices[row]}|{devices[column]}"] = value
    return links


def _is_header(tokens: list[str]) -> bool:
    """The column line: it starts with GPU0 as GPU0's row does, but without the self ``X``."""
    return tokens[:1] == ["GPU0"] and tokens[1:2] != ["X"]


def gpu_topology(nvidia_smi: str = "nvidia-smi") -> dict[str, str] | None:
    """This host's GPU topology from ``nvidia-smi topo -m``; ``None`` if that cannot run."""
    try:
        done = subprocess.run(
            [nvidia_smi, "topo", "-m"],
            capture_output=True,
            text=True,
            timeout=TOPOLOGY_TIMEOUT_S,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_gpu_topology(done.stdout) or None
