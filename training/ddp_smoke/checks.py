"""The named checks each rank runs; every one returns a result instead of asserting.

All ranks issue the same collectives in the same order whatever their local
results are, so a failing rank never leaves its peers waiting in a collective.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import timedelta
from typing import cast

import torch
import torch.distributed as dist
from torch import nn

from ddp_smoke.collectives import all_gather
from ddp_smoke.judge import PEERS_PASSED, CheckResult, Identity, Peers, listing


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
        return CheckResult("params_identical", False, listing(problems, "; "))
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
        return CheckResult(PEERS_PASSED, False, f"checks failed on {listing(failed, ', ')}")
    return CheckResult(PEERS_PASSED, True, f"all {peers.world_size - 1} other ranks passed")
