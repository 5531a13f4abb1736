"""Per-rank result records and the atomic JSON writes every result goes through."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ddp_smoke.judge import PEERS_PASSED, CheckResult
from ddp_smoke.launch import SlurmContext
from ddp_smoke.report import RESULT_FILE, rank_file, write_json_atomic

__all__ = ["RESULT_FILE", "SCHEMA_VERSION", "RankRecord", "rank_file", "write_json_atomic"]

SCHEMA_VERSION = 2


@dataclass
class RankRecord:
    """What one rank saw; filled in as the run goes and written once at the end."""

    context: SlurmContext
    label: str = ""
    iface: dict[str, str | None] = field(default_factory=dict)
    backend: str | None = None
    device: str | None = None
    nodes: list[str] = field(default_factory=list)
    checks: list[CheckResult] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    measurements: dict[str, object] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)
    elapsed_s: float = 0.0
    error: str | None = None
    # Not written: every rank's host, by rank, to name peers in messages.
    peer_hosts: tuple[str, ...] = ()

    @property
    def who(self) -> str:
        return f"rank {self.context.rank} on {self.context.host}"

    @property
    def checks_ok(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.checks) and self.checks_ok

    def failure(self) -> str | None:
        """Why this rank failed, without the rank/host prefix; ``None`` if it passed.

        ``peers_passed`` is left out when a local check failed too: the local
        failure is the news, and the message then reads the same on every rank.
        """
        if self.error is not None:
            return self.error
        failed = [check for check in self.checks if not check.ok]
        local = [check for check in failed if check.name != PEERS_PASSED]
        if failed:
            return "; ".join(check.detail for check in (local or failed))
        return None if self.checks else "no checks ran"

    def to_dict(self) -> dict[str, object]:
        ctx = self.context
        return {
            "schema": SCHEMA_VERSION,
            "rank": ctx.rank,
            "local_rank": ctx.local_rank,
            "world_size": ctx.world_size,
            "job_id": ctx.job_id,
            "host": ctx.host,
            "master": ctx.master,
            "mode": ctx.mode,
            "label": self.label or ctx.mode,
            "rendezvous": ctx.rendezvous,
            "iface": self.iface,
            "backend": self.backend,
            "device": self.device,
            "torch": torch.__version__,
            "nodes": self.nodes,
            "checks": [check.to_dict() for check in self.checks],
            "losses": self.losses,
            "measurements": self.measurements,
            "timings_s": self.timings_s,
            "elapsed_s": self.elapsed_s,
            "status": "pass" if self.ok else "fail",
            "error": self.failure(),
        }

    def summary(self) -> dict[str, object]:
        """What rank 0 writes to ``result.json`` when the whole job passed."""
        return {
            "schema": SCHEMA_VERSION,
            "job_id": self.context.job_id,
            "mode": self.context.mode,
            "label": self.label or self.context.mode,
            "nodes": self.nodes,
            "world_size": self.context.world_size,
            "backend": self.backend,
            "torch": torch.__version__,
            "first_loss": self.losses[0] if self.losses else None,
            "last_loss": self.losses[-1] if self.losses else None,
            "measurements": self.measurements,
            "elapsed_s": self.elapsed_s,
        }
