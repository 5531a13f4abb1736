"""The checks that need torch, run inside a rank; each returns a ``CheckResult``.

In the order a rank meets them:

- collectives that wait with an explicit timeout (the measurements use them too);
- who the ranks are, and whether they agree: identities, parameters, the peers;
- all_reduce, broadcast and all_gather, each demanded exact;
- the data set every rank trains on, and its shards;
- a few epochs of DDP training (``loss_decreased`` and ``params_identical`` follow).

Rules that need no torch (world size, unique ranks, shards, the loss) live in
``ddp_smoke.judge``; ``ddp_smoke.rank`` runs the checks in the same order on every rank.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import cast

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from ddp_smoke.judge import PEERS_PASSED, CheckResult, Identity, Peers, listing, shard_problems

# --- Collectives with a timeout -------------------------------------------------------

# Each one waits with an explicit timeout instead of the library default. The process
# group is also created with the same timeout, which bounds the collectives issued
# inside DDP and ``all_gather_object``.


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


# --- Who the ranks are, and whether they agree ----------------------------------------

# Every check returns a result instead of asserting (``ddp_smoke.judge`` decides the
# pure ones). All ranks issue the same collectives in the same order whatever their
# local results are, so a failing rank never leaves its peers waiting in a collective.


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


# --- Collective checks ----------------------------------------------------------------

# all_reduce, broadcast and all_gather, each demanded exact for several sizes and dtypes.


ALL_REDUCE_DTYPES = (torch.int64, torch.float32)
# float32 holds n(n+1)/2 exactly for world sizes below 5792, far above any smoke job.
ALL_REDUCE_SIZES = (1024, 1 << 20)
# Moving data needs no arithmetic, so the 16-bit type is exact for any value here.
COPY_DTYPES = (torch.int64, torch.float32, torch.bfloat16)
COPY_SIZES = ALL_REDUCE_SIZES
# Broadcast pattern: small integers every dtype above holds exactly.
PATTERN_MODULUS = 251
BROADCAST_SOURCE = 0


def collective_plan() -> list[tuple[str, torch.dtype, int]]:
    """``(operation, dtype, size)`` of every collective check, in the order they run."""
    steps = [
        ("all_reduce", dtype, size) for dtype in ALL_REDUCE_DTYPES for size in ALL_REDUCE_SIZES
    ]
    for operation in ("broadcast", "all_gather"):
        steps += [(operation, dtype, size) for dtype in COPY_DTYPES for size in COPY_SIZES]
    return steps


def collective_label(operation: str, dtype: torch.dtype, size: int) -> str:
    return f"{operation} {str(dtype).removeprefix('torch.')} size {size}"


def check_name(operation: str, dtype: torch.dtype, size: int) -> str:
    return collective_label(operation, dtype, size).replace(" ", "_")


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
    text = collective_label("all_reduce", dtype, size)
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
    text = collective_label("broadcast", dtype, size)
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
    text = collective_label("all_gather", dtype, size)
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


# --- Data checks ----------------------------------------------------------------------

# The data every rank trains on: the same data set, split into disjoint, covering shards.


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
    config: TrainConfig,
    peers: Peers,
    device: torch.device,
    timeout: timedelta,
) -> CheckResult:
    """Each epoch, DistributedSampler's shards must be disjoint and cover the data set."""
    sampler = make_sampler(dataset, config)
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


# --- Training -------------------------------------------------------------------------

# A few epochs of SGD under DDP on a small synthetic regression problem.


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
