"""Rank, world size and rendezvous address from the environment Slurm gives each task."""

from __future__ import annotations

import itertools
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass

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


def from_env(
    env: Mapping[str, str],
    master_port: int | None = None,
    which: Callable[[str], str | None] = shutil.which,
) -> SlurmContext:
    """Build the context from Slurm's task variables; raise ``ValueError`` naming what is wrong.

    Precedence: ``LOCAL_RANK`` over ``SLURM_LOCALID``; ``MASTER_ADDR`` over the first
    host of ``SLURM_STEP_NODELIST`` (then ``SLURM_JOB_NODELIST``); ``master_port``
    over ``MASTER_PORT`` over a port derived from ``SLURM_JOB_ID``.
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
        host=env.get("SLURMD_NODENAME") or socket.gethostname(),
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
