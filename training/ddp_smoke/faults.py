"""Test-only fault injection, read from ``DDP_SMOKE_FAULT``.

Never set this variable on a real cluster run. The format is a comma-separated
list of ``kind:rank`` pairs:

``perturb_params:R``
    rank R nudges its parameters after training, so ``params_identical`` fails.
``allreduce:R``
    rank R adds 1 to its all_reduce contributions, so the all_reduce checks fail.
"""

from __future__ import annotations

from dataclasses import dataclass

FAULT_ENV = "DDP_SMOKE_FAULT"
KINDS = ("perturb_params", "allreduce")


@dataclass(frozen=True)
class Faults:
    """The ranks each fault applies to; empty on every real run."""

    perturb_params: frozenset[int] = frozenset()
    allreduce: frozenset[int] = frozenset()

    def perturbs_params(self, rank: int) -> bool:
        return rank in self.perturb_params

    def allreduce_offset(self, rank: int) -> int:
        return 1 if rank in self.allreduce else 0


def parse_faults(spec: str) -> Faults:
    """Parse ``kind:rank[,kind:rank...]``; raise ``ValueError`` on anything else."""
    ranks: dict[str, set[int]] = {kind: set() for kind in KINDS}
    for entry in (part.strip() for part in spec.split(",")):
        if not entry:
            continue
        kind, _, rank_text = entry.partition(":")
        if kind not in ranks or not rank_text.isdigit():
            raise ValueError(
                f"{FAULT_ENV} entry {entry!r} is not kind:rank with kind in {', '.join(KINDS)}"
            )
        ranks[kind].add(int(rank_text))
    return Faults(
        perturb_params=frozenset(ranks["perturb_params"]),
        allreduce=frozenset(ranks["allreduce"]),
    )
