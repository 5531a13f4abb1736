"""The data every rank trains on: the same data set, split into disjoint, covering shards."""

from __future__ import annotations

from datetime import timedelta

import torch
from torch.utils.data import TensorDataset

from ddp_smoke import train
from ddp_smoke.collectives import all_gather
from ddp_smoke.judge import CheckResult, Peers, listing, shard_problems

# Fingerprint weights: position-dependent, so reordered data changes the sum.
_WEIGHT_MODULUS = 65521


def fingerprint(dataset: TensorDataset) -> torch.Tensor:
    """Two int64 sums over the raw bits of the inputs: exact and alike on every CPU.

    Only the inputs count: they come straight from the seeded generator, while the
    targets pass through a matmul whose last bit may differ between CPU types.
    """
    words = dataset.tensors[0].contiguous().view(torch.int32).reshape(-1).to(torch.int64)
    weights = torch.arange(words.numel(), dtype=torch.int64) % _WEIGHT_MODULUS + 1
    return torch.stack([words.sum(), (words * weights).sum()])


def check_data_identical(
    dataset: TensorDataset, peers: Peers, device: torch.device, timeout: timedelta
) -> CheckResult:
    """Every rank's data set must be bit-identical to rank 0's."""
    mine = fingerprint(dataset).to(device)
    gathered = [item.cpu() for item in all_gather(mine, timeout, "data fingerprint all_gather")]
    reference = gathered[0]
    problems = [
        f"data set of {peers.name(peer)} differs from {peers.name(0)} "
        f"(fingerprint {_hex(item)} expected {_hex(reference)})"
        for peer, item in enumerate(gathered)
        if not torch.equal(item, reference)
    ]
    if problems:
        return CheckResult("data_identical", False, listing(problems, "; "))
    count = len(dataset)
    detail = f"{count} samples identical on {peers.world_size} ranks ({_hex(reference)})"
    return CheckResult("data_identical", True, detail)


def check_sampler_shards(
    dataset: TensorDataset,
    config: train.TrainConfig,
    peers: Peers,
    device: torch.device,
    timeout: timedelta,
) -> CheckResult:
    """Each epoch, DistributedSampler's shards must be disjoint and cover the data set."""
    sampler = train.make_sampler(dataset, config)
    problems: list[str] = []
    for epoch in range(config.epochs):
        sampler.set_epoch(epoch)
        mine = torch.tensor(list(sampler), dtype=torch.int64, device=device)
        shards = all_gather(mine, timeout, f"epoch {epoch} shard all_gather")
        found = shard_problems([shard.tolist() for shard in shards], len(dataset), peers.hosts)
        problems += [f"epoch {epoch}: {problem}" for problem in found]
    if problems:
        return CheckResult("sampler_shards", False, listing(problems, "; "))
    detail = (
        f"{config.epochs} epochs: {peers.world_size} disjoint shards of {len(sampler)} "
        f"cover all {len(dataset)} samples"
    )
    return CheckResult("sampler_shards", True, detail)


def _hex(values: torch.Tensor) -> str:
    return "/".join(f"{int(value) & 0xFFFFFFFFFFFFFFFF:016x}" for value in values.tolist())
