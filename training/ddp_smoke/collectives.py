"""Collectives that wait with an explicit timeout instead of the library default.

The process group is also created with the same timeout, which bounds the
collectives issued inside DDP and ``all_gather_object``.
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

Group = dist.ProcessGroup | None


def wait(work: dist.Work | None, timeout: timedelta, what: str) -> None:
    """Block until ``work`` finishes; raise naming ``what`` if it fails or times out."""
    if work is None:
        raise RuntimeError(f"{what}: async collective returned no work handle")
    try:
        finished = work.wait(timeout=timeout)
    except RuntimeError as exc:
        raise RuntimeError(f"{what} failed or timed out (limit {timeout}): {exc}") from exc
    if finished is False:
        raise TimeoutError(f"{what} did not finish within {timeout}")


def all_reduce_sum(
    tensor: torch.Tensor, timeout: timedelta, what: str, group: Group = None
) -> None:
    """In-place sum of ``tensor`` over all ranks, bounded by ``timeout``."""
    work = dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group, async_op=True)
    wait(work, timeout, what)


def all_reduce_max(
    tensor: torch.Tensor, timeout: timedelta, what: str, group: Group = None
) -> None:
    """In-place maximum of ``tensor`` over all ranks, bounded by ``timeout``."""
    work = dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=group, async_op=True)
    wait(work, timeout, what)


def broadcast(tensor: torch.Tensor, src: int, timeout: timedelta, what: str) -> None:
    """In-place copy of rank ``src``'s ``tensor`` to every rank, bounded by ``timeout``."""
    wait(dist.broadcast(tensor, src=src, async_op=True), timeout, what)


def all_gather(tensor: torch.Tensor, timeout: timedelta, what: str) -> list[torch.Tensor]:
    """Every rank's copy of ``tensor`` (same shape on all ranks), bounded by ``timeout``."""
    gathered = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    wait(dist.all_gather(gathered, tensor, async_op=True), timeout, what)
    return gathered


def barrier(device: torch.device, timeout: timedelta, what: str, group: Group = None) -> None:
    """A barrier made of a one-element all_reduce, because ``wait`` bounds it."""
    all_reduce_sum(torch.zeros(1, device=device), timeout, what, group)
