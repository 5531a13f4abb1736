"""all_reduce, broadcast and all_gather, each demanded exact for several sizes and dtypes.

Every check returns a result instead of asserting, and every rank runs all of
them in the same order, so a failing rank never leaves its peers waiting.
"""

from __future__ import annotations

from datetime import timedelta

import torch

from ddp_smoke.collectives import all_gather, all_reduce_sum, broadcast
from ddp_smoke.judge import CheckResult, Peers, listing

ALL_REDUCE_DTYPES = (torch.int64, torch.float32)
# float32 holds n(n+1)/2 exactly for world sizes below 5792, far above any smoke job.
ALL_REDUCE_SIZES = (1024, 1 << 20)
# Moving data needs no arithmetic, so the 16-bit type is exact for any value here.
COPY_DTYPES = (torch.int64, torch.float32, torch.bfloat16)
COPY_SIZES = ALL_REDUCE_SIZES
# Broadcast pattern: small integers every dtype above holds exactly.
PATTERN_MODULUS = 251
BROADCAST_SOURCE = 0


def plan() -> list[tuple[str, torch.dtype, int]]:
    """``(operation, dtype, size)`` of every collective check, in the order they run."""
    steps = [
        ("all_reduce", dtype, size) for dtype in ALL_REDUCE_DTYPES for size in ALL_REDUCE_SIZES
    ]
    for operation in ("broadcast", "all_gather"):
        steps += [(operation, dtype, size) for dtype in COPY_DTYPES for size in COPY_SIZES]
    return steps


def label(operation: str, dtype: torch.dtype, size: int) -> str:
    return f"{operation} {str(dtype).removeprefix('torch.')} size {size}"


def check_name(operation: str, dtype: torch.dtype, size: int) -> str:
    return label(operation, dtype, size).replace(" ", "_")


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
    text = label("all_reduce", dtype, size)
    name = check_name("all_reduce", dtype, size)
    contribution = torch.full((size,), rank + 1 + offset, dtype=dtype, device=device)
    total = contribution.clone()
    all_reduce_sum(total, timeout, text)
    sent = all_gather(contribution[:1].clone(), timeout, f"{text} contributions")
    expected = _as_dtype(peers.world_size * (peers.world_size + 1) // 2, dtype)
    wrong = (total != expected).nonzero()
    if wrong.numel() == 0:
        return CheckResult(name, True, f"{text} sum {expected} in every element")
    index = int(wrong[0, 0].item())
    detail = (
        f"{text} got {total[index].item()} expected {expected} at element {index} "
        f"({wrong.shape[0]} of {size} elements wrong); {_blame(sent, peers, dtype)}"
    )
    return CheckResult(name, False, detail)


def check_broadcast(
    dtype: torch.dtype, size: int, rank: int, peers: Peers, device: torch.device, timeout: timedelta
) -> CheckResult:
    """Rank 0 sends a known pattern; every rank must receive it bit for bit."""
    text = label("broadcast", dtype, size)
    expected = pattern(size, dtype, device)
    tensor = expected.clone() if rank == BROADCAST_SOURCE else torch.zeros_like(expected)
    broadcast(tensor, BROADCAST_SOURCE, timeout, text)
    wrong = (tensor != expected).nonzero()
    name = check_name("broadcast", dtype, size)
    source = peers.name(BROADCAST_SOURCE)
    if wrong.numel() == 0:
        return CheckResult(name, True, f"{text} from {source} arrived intact")
    index = int(wrong[0, 0].item())
    detail = (
        f"{text} from {source}: {peers.name(rank)} got {tensor[index].item()} expected "
        f"{expected[index].item()} at element {index} ({wrong.shape[0]} of {size} elements wrong)"
    )
    return CheckResult(name, False, detail)


def check_all_gather(
    dtype: torch.dtype, size: int, rank: int, peers: Peers, device: torch.device, timeout: timedelta
) -> CheckResult:
    """Each rank contributes its mark everywhere; part ``p`` must hold rank ``p``'s mark."""
    text = label("all_gather", dtype, size)
    contribution = torch.full((size,), mark(rank), dtype=dtype, device=device)
    parts = all_gather(contribution, timeout, text)
    problems = [
        _gather_problem(part, peer, peers, dtype)
        for peer, part in enumerate(parts)
        if not bool((part == mark(peer)).all())
    ]
    name = check_name("all_gather", dtype, size)
    if problems:
        return CheckResult(name, False, f"{text}: {listing(problems, ', ')}")
    return CheckResult(name, True, f"{text}: all {peers.world_size} parts exact")


def mark(rank: int) -> int:
    """``rank + 1``, wrapped below 252 so that bfloat16 holds it exactly on any world size."""
    return rank % PATTERN_MODULUS + 1


def pattern(size: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``1, 2, ..., 251, 1, 2, ...``: no zeros, so a missing copy cannot pass."""
    values = torch.arange(size, dtype=torch.int64) % PATTERN_MODULUS + 1
    return values.to(dtype=dtype, device=device)


def _gather_problem(part: torch.Tensor, peer: int, peers: Peers, dtype: torch.dtype) -> str:
    wrong = part != mark(peer)
    index = int(wrong.nonzero()[0, 0].item())
    return (
        f"the part from {peers.name(peer)} holds {part[index].item()} expected "
        f"{_as_dtype(mark(peer), dtype)} at element {index} "
        f"({int(wrong.sum().item())} of {part.numel()} elements wrong)"
    )


def _as_dtype(value: int, dtype: torch.dtype) -> int | float:
    """``value`` as the tensor would print it, so messages read ``4.0 expected 3.0``."""
    return float(value) if dtype.is_floating_point else value


def _blame(sent: list[torch.Tensor], peers: Peers, dtype: torch.dtype) -> str:
    culprits = [
        f"{peers.name(peer)} sent {value.item()} expected {_as_dtype(peer + 1, dtype)}"
        for peer, value in enumerate(sent)
        if value.item() != peer + 1
    ]
    return listing(culprits, ", ") if culprits else "every rank sent the right value"
