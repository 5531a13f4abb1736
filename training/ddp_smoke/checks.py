"""The named checks each rank runs; every one returns a result instead of asserting.

All ranks issue the same collectives in the same order whatever their local
results are, so a failing rank never leaves its peers waiting in a collective.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import cast

import torch
import torch.distributed as dist
from torch import nn

from ddp_smoke.collectives import all_gather

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


@dataclass(frozen=True)
class Identity:
    """Who a rank says it is: its launcher's rank, its host and local rank, its GPU."""

    rank: int
    host: str
    local_rank: int
    gpu: str | None = None


def gather_identities(me: Identity) -> list[Identity]:
    """Every rank's identity, indexed by process group rank; bounded by the group's timeout."""
    gathered: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, asdict(me))
    return [Identity(**cast(dict[str, object], item)) for item in gathered]


def gpu_uuid(device: torch.device) -> str | None:
    """The UUID of ``device``'s GPU, so two ranks on one GPU can be told apart; else ``None``."""
    if device.type != "cuda":
        return None
    return str(getattr(torch.cuda.get_device_properties(device), "uuid", "")) or None


def check_unique_ranks(identities: list[Identity]) -> CheckResult:
    """Each process group rank is its launcher's rank; no host has a local rank or GPU twice."""
    problems = [
        f"process group rank {index} on {ident.host} was launched as rank {ident.rank}"
        for index, ident in enumerate(identities)
        if ident.rank != index
    ]
    problems += _shared(identities, "local rank", lambda ident: ident.local_rank)
    problems += _shared(identities, "GPU", lambda ident: ident.gpu)
    if problems:
        return CheckResult("unique_ranks", False, _listing(problems, "; "))
    hosts = len({ident.host for ident in identities})
    return CheckResult("unique_ranks", True, f"{len(identities)} distinct ranks on {hosts} hosts")


def _shared(identities: list[Identity], what: str, key: Callable[[Identity], object]) -> list[str]:
    """``ranks 0, 2 on gpu01 share local rank 0`` for every (host, key) held twice."""
    owners: dict[tuple[str, object], list[int]] = {}
    for index, ident in enumerate(identities):
        value = key(ident)
        if value is not None:
            owners.setdefault((ident.host, value), []).append(index)
    return [
        f"ranks {', '.join(map(str, ranks))} on {host} share {what} {value}"
        for (host, value), ranks in owners.items()
        if len(ranks) > 1
    ]


def check_world_size(actual: int, expected: int | None) -> CheckResult:
    if expected is None:
        return CheckResult("world_size", True, f"world size {actual} (no expectation given)")
    if actual != expected:
        return CheckResult("world_size", False, f"world size {actual} expected {expected}")
    return CheckResult("world_size", True, f"world size {actual}")


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
