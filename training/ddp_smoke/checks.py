"""The named checks each rank runs; every one returns a result instead of asserting.

All ranks issue the same collectives in the same order whatever their local
results are, so a failing rank never leaves its peers waiting in a collective.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from ddp_smoke.collectives import all_gather, all_reduce_sum

ALL_REDUCE_DTYPES = (torch.int64, torch.float32)
# float32 holds n(n+1)/2 exactly for world sizes below 5792, far above any smoke job.
ALL_REDUCE_SIZES = (1024, 1 << 20)
PEERS_PASSED = "peers_passed"
# Messages about many ranks name this many, then a count, to stay readable.
MAX_NAMED = 8


@dataclass(frozen=True)
class CheckResult:
    """One named check; ``detail`` says what was seen, and on failure what disagreed."""

    name: str
    ok: bool
    detail: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Peers:
    """The host of every rank, indexed by rank, so messages can name both."""

    hosts: tuple[str, ...]

    @property
    def world_size(self) -> int:
        return len(self.hosts)

    def name(self, rank: int) -> str:
        return f"rank {rank} on {self.hosts[rank]}"

    def nodes(self) -> list[str]:
        """Distinct hosts in rank order."""
        return list(dict.fromkeys(self.hosts))


def gather_peers(host: str) -> Peers:
    """Exchange host names; bounded by the process group's timeout."""
    hosts: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, host)
    return Peers(hosts=tuple(str(name) for name in hosts))


def check_world_size(actual: int, expected: int | None) -> CheckResult:
    if expected is None:
        return CheckResult("world_size", True, f"world size {actual} (no expectation given)")
    if actual != expected:
        return CheckResult("world_size", False, f"world size {actual} expected {expected}")
    return CheckResult("world_size", True, f"world size {actual}")


def check_all_reduce(
    dtype: torch.dtype,
    size: int,
    rank: int,
    peers: Peers,
    device: torch.device,
    offset: int,
    timeout: timedelta,
) -> CheckResult:
    """Sum ``rank + 1`` over all ranks and demand exactly ``n(n+1)/2`` in every element."""
    label = f"all_reduce {str(dtype).removeprefix('torch.')} size {size}"
    name = label.replace(" ", "_")
    contribution = torch.full((size,), rank + 1 + offset, dtype=dtype, device=device)
    total = contribution.clone()
    all_reduce_sum(total, timeout, label)
    sent = all_gather(contribution[:1].clone(), timeout, f"{label} contributions")
    expected = _as_dtype(peers.world_size * (peers.world_size + 1) // 2, dtype)
    wrong = (total != expected).nonzero()
    if wrong.numel() == 0:
        return CheckResult(name, True, f"{label} sum {expected} in every element")
    index = int(wrong[0, 0].item())
    detail = (
        f"{label} got {total[index].item()} expected {expected} at element {index} "
        f"({wrong.shape[0]} of {size} elements wrong); {_blame(sent, peers, dtype)}"
    )
    return CheckResult(name, False, detail)


def _as_dtype(value: int, dtype: torch.dtype) -> int | float:
    """``value`` as the tensor would print it, so messages read ``4.0 expected 3.0``."""
    return float(value) if dtype.is_floating_point else value


def _blame(sent: list[torch.Tensor], peers: Peers, dtype: torch.dtype) -> str:
    culprits = [
        f"{peers.name(peer)} sent {value.item()} expected {_as_dtype(peer + 1, dtype)}"
        for peer, value in enumerate(sent)
        if value.item() != peer + 1
    ]
    return _listing(culprits, ", ") if culprits else "every rank sent the right value"


def _listing(items: list[str], separator: str) -> str:
    """Join ``items``, naming at most ``MAX_NAMED`` and counting the rest."""
    text = separator.join(items[:MAX_NAMED])
    if len(items) > MAX_NAMED:
        text += f"{separator}and {len(items) - MAX_NAMED} more"
    return text


def check_loss_decreased(losses: list[float]) -> CheckResult:
    """The global mean loss of the last epoch must be finite and below the first's."""
    if len(losses) < 2:
        return CheckResult("loss_decreased", False, f"needs 2 or more epochs, got {len(losses)}")
    if not all(math.isfinite(loss) for loss in losses):
        return CheckResult("loss_decreased", False, f"non-finite loss in {losses}")
    first, last = losses[0], losses[-1]
    detail = f"mean loss first epoch {first:.6g} last epoch {last:.6g}"
    if last >= first:
        return CheckResult("loss_decreased", False, f"loss did not decrease: {detail}")
    return CheckResult("loss_decreased", True, detail)


def check_params_identical(model: nn.Module, peers: Peers, timeout: timedelta) -> CheckResult:
    """Every rank's flattened parameters must equal rank 0's bit for bit."""
    vector = torch.cat([param.detach().reshape(-1) for param in model.parameters()])
    gathered = all_gather(vector, timeout, "parameter all_gather")
    reference = gathered[0]
    problems = [
        _param_difference(peers, peer, other, reference)
        for peer, other in enumerate(gathered)
        if peer != 0 and not torch.equal(other, reference)
    ]
    if problems:
        return CheckResult("params_identical", False, _listing(problems, "; "))
    checksum = float(vector.double().sum().item())
    detail = f"{vector.numel()} values identical on {peers.world_size} ranks (sum {checksum:.9g})"
    return CheckResult("params_identical", True, detail)


def _param_difference(peers: Peers, peer: int, other: torch.Tensor, reference: torch.Tensor) -> str:
    differ = int((other != reference).sum().item())
    max_diff = float((other.double() - reference.double()).abs().max().item())
    return (
        f"parameters of {peers.name(peer)} differ from {peers.name(0)}: "
        f"max abs diff {max_diff:.3e} in {differ} of {reference.numel()} values"
    )


def check_peers_passed(
    local_ok: bool, rank: int, peers: Peers, device: torch.device, timeout: timedelta
) -> CheckResult:
    """Tell every rank which other ranks failed a check, so rank 0 speaks for the job."""
    flag = torch.tensor([1 if local_ok else 0], dtype=torch.int64, device=device)
    flags = all_gather(flag, timeout, "pass/fail flag all_gather")
    failed = [
        peers.name(peer) for peer, value in enumerate(flags) if peer != rank and value.item() == 0
    ]
    if failed:
        return CheckResult(PEERS_PASSED, False, f"checks failed on {_listing(failed, ', ')}")
    return CheckResult(PEERS_PASSED, True, f"all {peers.world_size - 1} other ranks passed")
