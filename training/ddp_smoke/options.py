"""What ``run`` was asked to do; standard library only, so the CLI can build it cheaply."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

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
