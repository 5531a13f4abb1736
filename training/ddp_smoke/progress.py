"""Which step each rank has reached, kept in the rendezvous store, to name a stuck rank.

Every rank records ``<index>:<step>`` in the process group's store before each
step. When a collective fails or times out, the rank reads the other ranks'
records: a rank whose index is lower never reached the step, so it is the one its
peers waited for (asleep, hung, or dead). Store reads go only to keys that exist,
and under a short timeout, so the diagnosis itself cannot hang.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol

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
    if not parts:
        return None
    shown = "; ".join(parts[:8])
    return shown if len(parts) <= 8 else f"{shown}; and {len(parts) - 8} more"


def _on(hosts: Sequence[str], rank: int) -> str:
    return f" on {hosts[rank]}" if rank < len(hosts) else ""
