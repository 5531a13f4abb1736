"""Faults, injected and diagnosed, inside a rank: standard library only, no torch.

- fault injection (tests only): ``DDP_SMOKE_FAULT`` makes chosen ranks misbehave;
- progress records in the rendezvous store, which name the rank its peers waited for.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol

from ddp_smoke.judge import listing

# --- Fault injection (tests only) -----------------------------------------------------

# Read from ``DDP_SMOKE_FAULT``; never set it on a real cluster run. The format is a
# comma-separated list of ``kind:rank`` pairs:
#
# ``perturb_params:R``
#     rank R nudges its parameters after training, so ``params_identical`` fails.
# ``allreduce:R``
#     rank R adds 1 to its all_reduce contributions, so the all_reduce checks fail.
# ``data:R``
#     rank R builds its data set from another seed, so ``data_identical`` fails.
# ``sleep:R``
#     rank R sleeps three times ``--timeout`` before the collectives, so its peers
#     time out waiting for it and name it as the rank that did not arrive.
# ``exit:R``
#     rank R exits with status ``EXIT_STATUS`` before the collectives, without
#     writing its rank file, like a crashed process.
# ``slow:R``
#     rank R sleeps ``SLOW_STEP_S`` in every timed compute step, so the throughput
#     measurement names it as a straggler.


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


# --- Progress: naming the rank that lags ----------------------------------------------

# Which step each rank has reached, kept in the rendezvous store, to name a stuck rank.
#
# Every rank records ``<index>:<step>`` in the process group's store before each
# step. When a collective fails or times out, the rank reads the other ranks'
# records: a rank whose index is lower never reached the step, so it is the one its
# peers waited for (asleep, hung, or dead). Store reads go only to keys that exist,
# and under a short timeout, so the diagnosis itself cannot hang.


KEY_PREFIX = "ddp_smoke/step/"
DIAGNOSIS_TIMEOUT = timedelta(seconds=10)


class Store(Protocol):
    """The part of ``torch.distributed.Store`` this module uses."""

    def set(self, key: str, value: str) -> None: ...

    def get(self, key: str) -> bytes: ...

    def check(self, keys: list[str]) -> bool: ...

    def set_timeout(self, timeout: timedelta) -> None: ...


@dataclass
class Progress:
    """This rank's position in the sequence of steps every rank walks through."""

    store: Store | None
    rank: int
    index: int = 0
    step: str = "rendezvous"
    # Seconds spent in each step so far; the current step is added by ``finish``.
    timings: dict[str, float] = field(default_factory=dict)
    _started: float = field(default_factory=time.monotonic)

    def enter(self, step: str) -> None:
        self.finish()
        self.index += 1
        self.step = step
        if self.store is not None:
            self.store.set(f"{KEY_PREFIX}{self.rank}", f"{self.index}:{step}")

    def finish(self) -> None:
        """Close the current step's timing."""
        now = time.monotonic()
        self.timings[self.step] = round(self.timings.get(self.step, 0.0) + now - self._started, 4)
        self._started = now

    def laggards(self, hosts: Sequence[str], world_size: int) -> str | None:
        """Name the ranks that have not reached this rank's step; ``None`` if none lag."""
        if self.store is None or world_size < 2:
            return None
        try:
            self.store.set_timeout(DIAGNOSIS_TIMEOUT)
            behind = [_behind(self.store, rank, self.index) for rank in range(world_size)]
        except RuntimeError as exc:  # the store's host (rank 0) is gone as well
            return f"progress of the other ranks unknown: {exc}"
        return describe_laggards(behind, hosts, self.step)


def _behind(store: Store, rank: int, index: int) -> str | None:
    """``rank``'s last step if it is behind ``index``, else ``None``."""
    key = f"{KEY_PREFIX}{rank}"
    if not store.check([key]):
        return "none"
    their_index, _, their_step = store.get(key).decode().partition(":")
    return their_step if int(their_index) < index else None


def describe_laggards(behind: Sequence[str | None], hosts: Sequence[str], step: str) -> str | None:
    """``behind[rank]`` is that rank's last step when it lags, else ``None``."""
    parts = [
        f"rank {rank}{_on(hosts, rank)} has not reached step {step} (last entered: {last})"
        for rank, last in enumerate(behind)
        if last is not None
    ]
    return listing(parts, "; ") if parts else None


def _on(hosts: Sequence[str], rank: int) -> str:
    return f" on {hosts[rank]}" if rank < len(hosts) else ""
