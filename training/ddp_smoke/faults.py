"""Test-only fault injection, read from ``DDP_SMOKE_FAULT``.

Never set this variable on a real cluster run. The format is a comma-separated
list of ``kind:rank`` pairs:

``perturb_params:R``
    rank R nudges its parameters after training, so ``params_identical`` fails.
``allreduce:R``
    rank R adds 1 to its all_reduce contributions, so the all_reduce checks fail.
``data:R``
    rank R builds its data set from another seed, so ``data_identical`` fails.
``sleep:R``
    rank R sleeps three times ``--timeout`` before the collectives, so its peers
    time out waiting for it and name it as the rank that did not arrive.
``exit:R``
    rank R exits with status ``EXIT_STATUS`` before the collectives, without
    writing its rank file, like a crashed process.
``slow:R``
    rank R sleeps ``SLOW_STEP_S`` in every timed compute step, so the throughput
    measurement names it as a straggler.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

FAULT_ENV = "DDP_SMOKE_FAULT"
KINDS = ("perturb_params", "allreduce", "data", "sleep", "exit", "slow")
EXIT_STATUS = 3
SLEEP_TIMEOUTS = 3
SLOW_STEP_S = 0.05
DATA_SEED_SHIFT = 1


@dataclass(frozen=True)
class Faults:
    """The ranks each fault applies to; empty on every real run."""

    perturb_params: frozenset[int] = frozenset()
    allreduce: frozenset[int] = frozenset()
    data: frozenset[int] = frozenset()
    sleep: frozenset[int] = frozenset()
    exit: frozenset[int] = frozenset()
    slow: frozenset[int] = frozenset()

    def perturbs_params(self, rank: int) -> bool:
        return rank in self.perturb_params

    def allreduce_offset(self, rank: int) -> int:
        return 1 if rank in self.allreduce else 0

    def data_seed(self, rank: int, seed: int) -> int:
        return seed + DATA_SEED_SHIFT if rank in self.data else seed

    def step_delay_s(self, rank: int) -> float:
        return SLOW_STEP_S if rank in self.slow else 0.0

    def stall(self, rank: int, timeout_s: float) -> None:
        """Apply ``exit`` or ``sleep`` to this rank; a no-op on every real run."""
        if rank in self.exit:
            os._exit(EXIT_STATUS)  # no cleanup and no rank file: like a crash
        if rank in self.sleep:
            time.sleep(SLEEP_TIMEOUTS * timeout_s)


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
    return Faults(**{kind: frozenset(members) for kind, members in ranks.items()})
