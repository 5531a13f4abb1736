"""A few epochs of SGD under DDP on a small synthetic regression problem."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from ddp_smoke.collectives import all_reduce_sum

FEATURES = 8
HIDDEN = 32
NOISE = 0.05
PERTURBATION = 0.01

Batch = tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class TrainConfig:
    """Sizes scale with the world so every rank takes the same number of steps."""

    epochs: int
    seed: int
    samples_per_rank: int = 256
    batch_size: int = 32
    learning_rate: float = 0.05


def make_dataset(world_size: int, config: TrainConfig, seed: int | None = None) -> TensorDataset:
    """The same data on every rank: generated on the CPU from ``seed`` (``config.seed``)."""
    generator = torch.Generator().manual_seed(config.seed if seed is None else seed)
    count = config.samples_per_rank * world_size
    inputs = torch.randn(count, FEATURES, generator=generator)
    weights = torch.randn(FEATURES, 1, generator=generator)
    targets = torch.tanh(inputs @ weights) + NOISE * torch.randn(count, 1, generator=generator)
    return TensorDataset(inputs, targets)


def make_model(seed: int, device: torch.device) -> nn.Module:
    """A tiny MLP; DDP also broadcasts rank 0's initial weights to every rank."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))
    return model.to(device)


def make_sampler(dataset: TensorDataset, config: TrainConfig) -> DistributedSampler[Batch]:
    """This rank's shard of ``dataset``, reshuffled by ``set_epoch``; the same seed everywhere."""
    return DistributedSampler(
        dataset,
        num_replicas=dist.get_world_size(),
        rank=dist.get_rank(),
        shuffle=True,
        seed=config.seed,
    )


def wrap(model: nn.Module, device: torch.device) -> DistributedDataParallel:
    device_ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def train(
    model: DistributedDataParallel,
    dataset: TensorDataset,
    config: TrainConfig,
    device: torch.device,
    timeout: timedelta,
) -> list[float]:
    """Train and return the mean loss of each epoch over all ranks (the same on every rank)."""
    sampler = make_sampler(dataset, config)
    loader: DataLoader[Batch] = DataLoader(dataset, batch_size=config.batch_size, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.learning_rate)
    losses: list[float] = []
    for epoch in range(config.epochs):
        sampler.set_epoch(epoch)
        local = _run_epoch(model, loader, optimizer, device)
        all_reduce_sum(local, timeout, f"epoch {epoch} loss all_reduce")
        losses.append(float((local[0] / local[1]).item()))
    return losses


def _run_epoch(
    model: DistributedDataParallel,
    loader: DataLoader[Batch],
    optimizer: torch.optim.Optimizer,
    device: torch.device,
) -> torch.Tensor:
    """One pass over this rank's shard; returns ``[sum of sample losses, sample count]``."""
    totals = torch.zeros(2, dtype=torch.float64, device=device)
    loss_fn = nn.MSELoss()
    for inputs, targets in loader:
        inputs, targets = inputs.to(device), targets.to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        totals[0] += loss.detach().double() * inputs.shape[0]
        totals[1] += inputs.shape[0]
    return totals


def perturb(model: nn.Module) -> None:
    """Test-only fault: nudge every parameter so ranks no longer agree."""
    with torch.no_grad():
        for param in model.parameters():
            param.add_(PERTURBATION)
