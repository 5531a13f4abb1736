"""Everything that runs inside a rank, with torch: ``run`` from rendezvous to rank file.

Imported only by ``run`` once the environment fits its mode (``ddp_smoke.launch``);
the controller never imports it. In the order a rank meets them:

- running a rank: device, ``init_process_group`` with a timeout, the checks and
  measurements in the same order on every rank, teardown in ``finally``, and the
  ``rank-<N>.json`` file; in spawn mode, the node process that starts the workers;
- collectives that wait with an explicit timeout;
- the checks that need torch: identities, all_reduce/broadcast/all_gather, the
  data set and its shards, DDP training and the parameters after it, the peers;
- the measurements: all_reduce sweep, raw TCP transfer (with the link speed of
  both ends), throughput, scaling; the GPU topology of rank 0's node;
- fault injection (tests only) and progress records that name a lagging rank.

What passes is decided in ``ddp_smoke.judge``, from what this module gathered.
"""

from __future__ import annotations

import os
import socket
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from functools import partial
from multiprocessing.connection import wait as wait_for_exit
from pathlib import Path
from typing import Protocol, TypeVar, cast

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from ddp_smoke import judge, launch
from ddp_smoke.judge import PEERS_PASSED, CheckResult, Identity, Peers, listing, shard_problems
from ddp_smoke.launch import MeasureOptions, RunOptions, SlurmContext, SpawnPlan
from ddp_smoke.report import RESULT_FILE, format_bytes, rank_file, write_json_atomic

# --- Running a rank -------------------------------------------------------------------


def start(target: SlurmContext | SpawnPlan, options: RunOptions, env: Mapping[str, str]) -> int:
    """Run one rank, or spawn this node's ranks; 0 if every check passed."""
    if isinstance(target, SpawnPlan):
        return run_node(target, options, env)
    return run_rank(target, options, env)


def run_rank(ctx: SlurmContext, options: RunOptions, env: Mapping[str, str]) -> int:
    """Run this rank's checks, write ``rank-<N>.json``; return 0 if all passed, else 1."""
    started = time.monotonic()
    if ctx.rank == 0:
        (options.result_dir / RESULT_FILE).unlink(missing_ok=True)
    record = RankRecord(
        context=ctx, label=options.run_label, iface=launch.iface_report(options.iface, env)
    )
    try:
        _run_rank(ctx, options, parse_faults(env.get(FAULT_ENV, "")), record)
    except Exception as exc:  # noqa: BLE001 - every failure must reach the rank file and exit 1
        record.error = describe(exc)
        traceback.print_exc(file=sys.stderr)
    record.elapsed_s = round(time.monotonic() - started, 3)
    return _finish(record, options.result_dir)


def describe(exc: BaseException, note: str | None = None) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return f"{text}; {note}" if note else text


def _run_rank(ctx: SlurmContext, options: RunOptions, faults: Faults, record: RankRecord) -> None:
    device = select_device(ctx.local_rank)
    record.backend = "nccl" if device.type == "cuda" else "gloo"
    record.device = str(device)
    started = time.monotonic()
    try:
        dist.init_process_group(
            record.backend,
            init_method=ctx.rendezvous,
            rank=ctx.rank,
            world_size=ctx.world_size,
            timeout=options.timeout,
            device_id=device if device.type == "cuda" else None,
        )
    except Exception as exc:
        raise RuntimeError(f"rendezvous at {ctx.rendezvous} failed: {exc}") from exc
    timings = {"rendezvous": round(time.monotonic() - started, 4)}
    progress = Progress(_default_store(), ctx.rank, timings=timings)
    rank = RankRun(ctx, options, faults, record, device, progress)
    try:
        rank.run()
    except Exception as exc:  # noqa: BLE001 - name the ranks that lag, then record it
        note = rank.progress.laggards(record.peer_hosts, ctx.world_size)
        record.error = describe(exc, note)
        traceback.print_exc(file=sys.stderr)
    finally:
        rank.progress.finish()
        started = time.monotonic()
        dist.destroy_process_group()
        teardown = round(time.monotonic() - started, 4)
        record.timings_s = {**rank.progress.timings, "teardown": teardown}


def _default_store() -> Store | None:
    """The process group's store, where ranks record their progress; ``None`` if hidden."""
    getter = getattr(dist.distributed_c10d, "_get_default_store", None)
    try:
        return getter() if getter is not None else None
    except (RuntimeError, ValueError):
        return None


@dataclass
class RankRun:
    """One rank's walk through the checks and measurements, in the same order on all ranks."""

    ctx: SlurmContext
    options: RunOptions
    faults: Faults
    record: RankRecord
    device: torch.device
    progress: Progress
    peers: Peers = field(default_factory=lambda: Peers(hosts=()))

    def run(self) -> None:
        self._identify()
        self._topology()
        self.faults.stall(self.ctx.rank, self.options.timeout_s)
        if "collectives" in self.options.checks:
            self._collectives()
        config = TrainConfig(epochs=self.options.epochs, seed=self.options.seed)
        seed = self.faults.data_seed(self.ctx.rank, self.options.seed)
        dataset = make_dataset(self.peers.world_size, config, seed)
        if "data" in self.options.checks:
            self._data(dataset, config)
        if "train" in self.options.checks:
            self._train(dataset, config)
        self.record.measurements = self._measure()
        self.record.checks += judge.floor_checks(
            self.record.measurements, self.options.measure, self.peers
        )
        self.step(
            PEERS_PASSED,
            lambda: check_peers_passed(
                self.record.checks_ok, self.ctx.rank, self.peers, self.device, self.timeout
            ),
        )

    @property
    def timeout(self) -> timedelta:
        return self.options.timeout

    def step(self, name: str, check: Callable[[], CheckResult]) -> None:
        self.progress.enter(name)
        self.record.checks.append(check())

    def _identify(self) -> None:
        self.progress.enter("identify")
        me = Identity(self.ctx.rank, self.ctx.host, self.ctx.local_rank, gpu_uuid(self.device))
        identities = gather_identities(me)
        self.peers = Peers(hosts=tuple(ident.host for ident in identities))
        self.record.nodes = self.peers.nodes()
        self.record.peer_hosts = self.peers.hosts
        self.record.checks.append(
            judge.check_world_size(self.peers.world_size, self.options.expected_world_size)
        )
        self.record.checks.append(judge.check_unique_ranks(identities))

    def _topology(self) -> None:
        """Local rank 0 of rank 0's node records its GPU topology: reported, never judged."""
        first_node = bool(self.peers.hosts) and self.ctx.host == self.peers.hosts[0]
        if self.device.type == "cuda" and self.ctx.local_rank == 0 and first_node:
            self.progress.enter("gpu_topology")
            self.record.gpu_topology = launch.gpu_topology()

    def _collectives(self) -> None:
        for operation, dtype, size in collective_plan():
            name = check_name(operation, dtype, size)
            self.step(name, partial(self._collective, operation, dtype, size))

    def _collective(self, operation: str, dtype: torch.dtype, size: int) -> CheckResult:
        rank, peers, device, timeout = self.ctx.rank, self.peers, self.device, self.timeout
        if operation == "all_reduce":
            offset = self.faults.allreduce_offset(rank)
            return check_all_reduce(dtype, size, rank, peers, device, offset, timeout)
        if operation == "broadcast":
            return check_broadcast(dtype, size, rank, peers, device, timeout)
        return check_all_gather(dtype, size, rank, peers, device, timeout)

    def _data(self, dataset: TensorDataset, config: TrainConfig) -> None:
        peers, device, timeout = self.peers, self.device, self.timeout
        self.step(
            "data_identical",
            lambda: check_data_identical(dataset, peers, device, timeout),
        )
        self.step(
            "sampler_shards",
            lambda: check_sampler_shards(dataset, config, peers, device, timeout),
        )

    def _train(self, dataset: TensorDataset, config: TrainConfig) -> None:
        self.progress.enter("train")
        model = make_model(self.options.seed, self.device)
        wrapped = wrap(model, self.device)
        self.record.losses = train(wrapped, dataset, config, self.device, self.timeout)
        self.record.checks.append(judge.check_loss_decreased(self.record.losses))
        if self.faults.perturbs_params(self.ctx.rank):
            perturb(model)
        self.step(
            "params_identical",
            lambda: check_params_identical(model, self.peers, self.timeout),
        )

    def _measure(self) -> dict[str, object]:
        """Every measurement group's result (``None`` where not asked for)."""
        bench = Bench(
            rank=self.ctx.rank,
            peers=self.peers,
            device=self.device,
            backend=self.record.backend or "gloo",
            timeout=self.timeout,
            options=self.options.measure,
            faults=self.faults,
            seed=self.options.seed,
            iface_addr=_iface_address(self.options.iface),
            master_addr=self.ctx.master_addr or None,
            iface=self.options.iface,
        )
        results: dict[str, object] = {}
        for name, action in MEASUREMENTS.items():
            results[name] = None
            if name in self.options.measure.groups:
                self.progress.enter(name)
                results[name] = action(bench)
        results["busbw_fraction"] = _busbw_share(
            _as_dict(results["sweep"]), _as_dict(results["tcp"])
        )
        return results


def _as_dict(value: object) -> dict[str, object] | None:
    return value if isinstance(value, dict) else None


def _iface_address(iface: str | None) -> str | None:
    return launch.interface_address(iface) if iface else None


def select_device(local_rank: int) -> torch.device:
    """The GPU for this local rank (``cuda:0`` when Slurm binds one GPU per task), else CPU."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    count = torch.cuda.device_count()
    index = 0 if count == 1 else local_rank
    if index >= count:
        raise RuntimeError(f"local rank {local_rank} has no GPU: this task sees {count} GPUs")
    device = torch.device("cuda", index)
    torch.cuda.set_device(device)
    return device


def _finish(record: RankRecord, result_dir: Path) -> int:
    write_json_atomic(rank_file(result_dir, record.context.rank), record.to_dict())
    failure = record.failure()
    if failure is not None:
        print(f"ddp_smoke: FAIL {record.who}: {failure}", file=sys.stderr)
        return 1
    if record.context.rank == 0:
        write_json_atomic(result_dir / RESULT_FILE, record.summary())
    print(f"ddp_smoke: PASS {record.who}: {_pass_line(record)}")
    return 0


def _pass_line(record: RankRecord) -> str:
    parts = [f"{len(record.checks)} checks"]
    if record.losses:
        parts.append(f"loss {record.losses[0]:.4g} -> {record.losses[-1]:.4g}")
    parts.append(f"{record.elapsed_s:.1f} s")
    return ", ".join(parts)


# --- spawn mode: the node process and its workers -------------------------------------

# ``srun --ntasks-per-node=1`` starts ``python -m ddp_smoke run --mode spawn`` on each
# node. That process spawns ``--nproc-per-node`` workers; nodes may start different
# numbers (``auto`` on uneven nodes), so the node processes first tell each other
# their counts, and worker ``l`` of node ``n`` is rank ``l`` plus the workers of the
# nodes before ``n``. The workers meet at a ``file://`` rendezvous on the shared
# filesystem. The node process exits 0 only if all its workers did.


# After one worker fails, the others get this long past --timeout to report too.
GRACE_S = 30.0


def run_node(plan: SpawnPlan, options: RunOptions, env: Mapping[str, str]) -> int:
    """Spawn this node's workers and wait for all of them; 0 if every one exited 0."""
    options.result_dir.mkdir(parents=True, exist_ok=True)
    (options.rdzv_dir or options.result_dir).mkdir(parents=True, exist_ok=True)
    try:
        plan = share_worker_counts(plan, options.timeout)
    except (RuntimeError, ValueError) as exc:
        print(f"ddp_smoke: FAIL node {plan.node_rank} on {plan.host}: {exc}", file=sys.stderr)
        return 1
    context = mp.start_processes(
        _worker,
        args=(plan, options, dict(env)),
        nprocs=plan.nproc_per_node,
        join=False,
        start_method="spawn",
    )
    codes = _wait_workers(list(context.processes), options.timeout_s + GRACE_S)
    failed = [(local, code) for local, code in enumerate(codes) if code != 0]
    for local, code in failed:
        print(
            f"ddp_smoke: FAIL node {plan.node_rank} on {plan.host}: worker {local} "
            f"(rank {plan.context(local).rank}) exited with status {code}",
            file=sys.stderr,
        )
    return 1 if failed else 0


def share_worker_counts(plan: SpawnPlan, timeout: timedelta) -> SpawnPlan:
    """``plan`` with every node's worker count, exchanged within ``timeout``.

    Each node process writes its count to a ``FileStore`` beside the rendezvous file
    and waits for the others'; the last one to leave deletes the file.
    """
    store = dist.FileStore(str(plan.counts_file), plan.nodes)
    store.set_timeout(timeout)
    keys = [f"workers/{node}" for node in range(plan.nodes)]
    store.set(keys[plan.node_rank], str(plan.nproc_per_node))
    try:
        store.wait(keys, timeout)
    except RuntimeError as exc:
        missing = [str(node) for node, key in enumerate(keys) if not store.check([key])]
        raise RuntimeError(
            f"node(s) {listing(missing, ', ')} did not report their worker count within "
            f"{timeout} in {plan.counts_file}: is every node of the step running ddp_smoke?"
        ) from exc
    return plan.placed(tuple(int(store.get(key)) for key in keys))


def _worker(local_rank: int, plan: SpawnPlan, options: RunOptions, env: dict[str, str]) -> None:
    """Runs in the spawned process; the exit status is the rank's verdict."""
    raise SystemExit(run_rank(plan.context(local_rank), options, env))


def _wait_workers(processes: list[mp.Process], grace_s: float) -> list[int]:
    """Exit status of every worker; once one fails, the rest get ``grace_s`` before a kill."""
    deadline: float | None = None
    pending = list(processes)
    while pending:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not wait_for_exit([proc.sentinel for proc in pending], timeout=left):
            for proc in pending:
                proc.kill()
            break
        for proc in [proc for proc in pending if proc.exitcode is not None]:
            pending.remove(proc)
            if proc.exitcode != 0 and deadline is None:
                deadline = time.monotonic() + grace_s
    for proc in processes:
        proc.join(timeout=10)
    return [proc.exitcode if proc.exitcode is not None else -9 for proc in processes]


# --- The rank file --------------------------------------------------------------------


SCHEMA_VERSION = 2


@dataclass
class RankRecord:
    """What one rank saw; filled in as the run goes and written once at the end."""

    context: SlurmContext
    label: str = ""
    iface: dict[str, str | None] = field(default_factory=dict)
    backend: str | None = None
    device: str | None = None
    nodes: list[str] = field(default_factory=list)
    checks: list[CheckResult] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    measurements: dict[str, object] = field(default_factory=dict)
    # ``nvidia-smi topo -m`` of rank 0's node, recorded by its local rank 0 (CUDA only).
    gpu_topology: dict[str, str] | None = None
    timings_s: dict[str, float] = field(default_factory=dict)
    elapsed_s: float = 0.0
    error: str | None = None
    # Not written: every rank's host, by rank, to name peers in messages.
    peer_hosts: tuple[str, ...] = ()

    @property
    def who(self) -> str:
        return f"rank {self.context.rank} on {self.context.host}"

    @property
    def checks_ok(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.checks) and self.checks_ok

    def failure(self) -> str | None:
        """Why this rank failed, without the rank/host prefix; ``None`` if it passed.

        ``peers_passed`` is left out when a local check failed too: the local
        failure is the news, and the message then reads the same on every rank.
        """
        if self.error is not None:
            return self.error
        failed = [check for check in self.checks if not check.ok]
        local = [check for check in failed if check.name != PEERS_PASSED]
        if failed:
            return "; ".join(check.detail for check in (local or failed))
        return None if self.checks else "no checks ran"

    def to_dict(self) -> dict[str, object]:
        ctx = self.context
        return {
            "schema": SCHEMA_VERSION,
            "rank": ctx.rank,
            "local_rank": ctx.local_rank,
            "world_size": ctx.world_size,
            "job_id": ctx.job_id,
            "host": ctx.host,
            # The user the rank ran as (the proof account, never root).
            "uid": os.getuid(),
            "master": ctx.master,
            "mode": ctx.mode,
            "label": self.label or ctx.mode,
            "rendezvous": ctx.rendezvous,
            "iface": self.iface,
            "backend": self.backend,
            "device": self.device,
            "torch": torch.__version__,
            "nodes": self.nodes,
            "checks": [check.to_dict() for check in self.checks],
            "losses": self.losses,
            "measurements": self.measurements,
            "gpu_topology": self.gpu_topology,
            "timings_s": self.timings_s,
            "elapsed_s": self.elapsed_s,
            "status": "pass" if self.ok else "fail",
            "error": self.failure(),
        }

    def summary(self) -> dict[str, object]:
        """What rank 0 writes to ``result.json`` when the whole job passed."""
        return {
            "schema": SCHEMA_VERSION,
            "job_id": self.context.job_id,
            "mode": self.context.mode,
            "label": self.label or self.context.mode,
            "nodes": self.nodes,
            "world_size": self.context.world_size,
            "backend": self.backend,
            "torch": torch.__version__,
            "first_loss": self.losses[0] if self.losses else None,
            "last_loss": self.losses[-1] if self.losses else None,
            "measurements": self.measurements,
            "elapsed_s": self.elapsed_s,
        }


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


# --- Measurements ---------------------------------------------------------------------

# all_reduce bandwidth sweep, raw TCP rate, per-rank throughput, scaling. Every rank
# runs each measurement and ends with the same job-wide result, so every rank file
# holds the same ``measurements`` block. The floors (``judge.floor_checks``) turn
# measurements into checks; they are off unless asked for.


Result = dict[str, object]
# What rank 0 tells the TCP peer: addresses to try, and the port.
Offer = tuple[list[str], int]
T = TypeVar("T")

SWEEP_DTYPE = torch.float32
WARMUP_STEPS = 3
BENCH_LR = 1e-4
# The benchmark model: an MLP big enough that a step is compute, not overhead.
BENCH = {
    "cpu": {"width": 256, "hidden": 1024, "batch": 64},
    "cuda": {"width": 1024, "hidden": 4096, "batch": 256},
}


# Iterations per message size: enough data to time each size, never fewer
# than MIN or more than MAX. Gloo runs on the CPU and moves far less data.
ITERATIONS = {
    "gloo": {"warmup": 1, "min": 2, "max": 20, "budget_bytes": 64 << 20},
    "nccl": {"warmup": 5, "min": 5, "max": 50, "budget_bytes": 8 << 30},
}


@dataclass(frozen=True)
class Bench:
    """What every measurement needs to know about this rank and the job."""

    rank: int
    peers: Peers
    device: torch.device
    backend: str
    timeout: timedelta
    options: MeasureOptions
    faults: Faults
    seed: int
    iface_addr: str | None = None
    master_addr: str | None = None
    iface: str | None = None
    sysfs: Path = launch.SYS_CLASS_NET

    @property
    def world_size(self) -> int:
        return self.peers.world_size

    @property
    def shape(self) -> dict[str, int]:
        return BENCH["cuda" if self.device.type == "cuda" else "cpu"]


def run_sweep(bench: Bench) -> Result:
    """all_reduce of float32 messages over the sweep sizes; time of the slowest rank."""
    if bench.world_size < 2:
        return {"skipped": "the sweep needs 2 or more ranks"}
    timed = [_time_all_reduce(bench, size) for size in bench.options.sweep_sizes]
    slowest = torch.tensor([seconds for _, _, seconds in timed], dtype=torch.float64)
    slowest = slowest.to(bench.device)
    all_reduce_max(slowest, bench.timeout, "sweep time all_reduce")
    rows = [
        judge.bandwidth_row(size, size // _element_size(), iters, seconds, bench.world_size)
        for (size, iters, _), seconds in zip(timed, slowest.tolist(), strict=True)
    ]
    peak = judge.peak_row(rows) or {}
    busbw = float(peak.get("busbw_GBps", 0.0))  # type: ignore[arg-type]
    return {
        "op": "all_reduce",
        "dtype": str(SWEEP_DTYPE).removeprefix("torch."),
        "ranks": bench.world_size,
        "bus_factor": round(judge.bus_factor(bench.world_size), 6),
        "rows": rows,
        "peak_bytes": peak.get("bytes"),
        "peak_busbw_GBps": busbw,
        "peak_busbw_Gbps": round(busbw * judge.BITS_PER_BYTE, 6),
    }


def _time_all_reduce(bench: Bench, size: int) -> tuple[int, int, float]:
    """``(bytes, iterations, seconds per all_reduce)`` on this rank."""
    count = max(1, size // _element_size())
    warmup, iters = sweep_iterations(
        count * _element_size(), bench.backend, bench.options.sweep_iters
    )
    # Zeros stay zero however often they are summed, so no value overflows.
    tensor = torch.zeros(count, dtype=SWEEP_DTYPE, device=bench.device)
    what = f"sweep all_reduce of {format_bytes(count * _element_size())}"
    for _ in range(warmup):
        all_reduce_sum(tensor, bench.timeout, what)
    barrier(bench.device, bench.timeout, f"{what} barrier")
    _synchronize(bench.device)
    started = time.perf_counter()
    for _ in range(iters):
        all_reduce_sum(tensor, bench.timeout, what)
    _synchronize(bench.device)
    return count * _element_size(), iters, (time.perf_counter() - started) / iters


def tcp_peer(hosts: tuple[str, ...]) -> int:
    """The first rank on another host than rank 0, else rank 1."""
    return next((rank for rank, host in enumerate(hosts) if host != hosts[0]), 1)


def run_tcp(bench: Bench) -> Result:
    """Raw TCP between rank 0 and ``tcp_peer``, both directions, over a fresh socket."""
    if bench.world_size < 2:
        return {"skipped": "the TCP transfer needs 2 or more ranks"}
    peer = tcp_peer(bench.peers.hosts)
    # Half the collective timeout, so a failed transfer is reported before peers give up.
    limit = bench.timeout.total_seconds() / 2
    listener, offer, error = _listen(bench, limit) if bench.rank == 0 else (None, None, None)
    offer = _broadcast_offer(offer)
    seconds: float | None = None
    address: str | None = None
    local: str | None = None
    if bench.rank == 0 and listener is not None:
        served, error = _attempt(lambda: serve(listener, bench.options.tcp_bytes, limit))
        seconds, local = served or (None, None)
    elif bench.rank == peer and offer is not None:
        addresses, port = offer
        outcome, error = _attempt(
            lambda: connect_any(addresses, port, bench.options.tcp_bytes, limit)
        )
        seconds, address, local = outcome or (None, None, None)
    mine: Result = {"seconds": seconds, "error": error, "address": address}
    if bench.rank in (0, peer):
        mine.update(launch.link_of(bench.iface, local, bench.sysfs))
    gathered: list[object] = [None] * bench.world_size
    dist.all_gather_object(gathered, mine)
    return _tcp_result(bench, peer, offer, gathered)


def _listen(bench: Bench, limit: float) -> tuple[Listener | None, Offer | None, str | None]:
    try:
        listener = listen(bench.iface_addr or "", limit)
    except OSError as exc:
        return None, None, f"cannot listen: {exc}"
    addresses = candidate_addresses(bench.iface_addr, bench.master_addr)
    return listener, (addresses, listener.port), None


def _attempt(action: Callable[[], T]) -> tuple[T | None, str | None]:
    try:
        return action(), None
    except (OSError, ValueError) as exc:  # TimeoutError and ConnectionError are OSErrors
        return None, f"{type(exc).__name__}: {exc}"


def _broadcast_offer(offer: Offer | None) -> Offer | None:
    """Rank 0's addresses and port on every rank (bounded by the process group's timeout)."""
    box: list[object] = [offer]
    dist.broadcast_object_list(box, src=0)
    item = box[0]
    if not isinstance(item, tuple | list) or len(item) != 2:
        return None
    return [str(address) for address in item[0]], int(item[1])


def _tcp_result(bench: Bench, peer: int, offer: Offer | None, gathered: list[object]) -> Result:
    server, client = _as_result(gathered[0]), _as_result(gathered[peer])
    peers = bench.peers
    errors = [
        f"{peers.name(rank)}: {part['error']}"
        for rank, part in ((0, server), (peer, client))
        if part.get("error")
    ]
    nbytes = bench.options.tcp_bytes
    result: Result = {
        "ranks": [0, peer],
        "hosts": [peers.hosts[0], peers.hosts[peer]],
        "same_host": peers.hosts[0] == peers.hosts[peer],
        "address": f"{client['address']}:{offer[1]}" if offer and client.get("address") else None,
        "bytes": nbytes,
        "error": None,
        # The hardware's expectation: each end's interface and its sysfs speed.
        "ifaces": [server.get("iface"), client.get("iface")],
        "link_Mbps": judge.lower_link([server.get("link_Mbps"), client.get("link_Mbps")]),
        "link_fraction": None,
    }
    if errors or not server.get("seconds") or not client.get("seconds"):
        why = "; ".join(errors) or "no timing came back"
        result["error"] = f"between {peers.name(0)} and {peers.name(peer)}: {why}"
        return result
    to_peer = judge.gbps(nbytes, float(server["seconds"]))  # type: ignore[arg-type]
    from_peer = judge.gbps(nbytes, float(client["seconds"]))  # type: ignore[arg-type]
    result.update(
        to_peer_Gbps=round(to_peer, 4),
        from_peer_Gbps=round(from_peer, 4),
        Gbps=round(min(to_peer, from_peer), 4),
    )
    result["link_fraction"] = judge.link_fraction(
        float(result["Gbps"]),  # type: ignore[arg-type]
        result["link_Mbps"],  # type: ignore[arg-type]
    )
    return result


def _as_result(item: object) -> dict[str, object]:
    return item if isinstance(item, dict) else {}


def bench_model(bench: Bench) -> nn.Module:
    """The same initial weights on every rank."""
    torch.manual_seed(bench.seed)
    width, hidden = bench.shape["width"], bench.shape["hidden"]
    model = nn.Sequential(
        nn.Linear(width, hidden),
        nn.ReLU(),
        nn.Linear(hidden, width),
        nn.ReLU(),
        nn.Linear(width, 1),
    )
    return model.to(bench.device)


def _model_name(bench: Bench) -> str:
    width, hidden = bench.shape["width"], bench.shape["hidden"]
    return f"mlp {width}-{hidden}-{width}-1"


def _bench_batch(bench: Bench) -> torch.Tensor:
    generator = torch.Generator().manual_seed(bench.seed)
    batch = torch.randn(bench.shape["batch"], bench.shape["width"], generator=generator)
    return batch.to(bench.device)


def run_throughput(bench: Bench) -> Result:
    """Each rank's compute step time without communication; slow ranks are stragglers."""
    model, batch = bench_model(bench), _bench_batch(bench)
    delay = bench.faults.step_delay_s(bench.rank)
    for _ in range(WARMUP_STEPS):
        _train_step(model, batch)
    times = []
    for _ in range(bench.options.bench_steps):
        started = time.perf_counter()
        _train_step(model, batch)
        time.sleep(delay)
        _synchronize(bench.device)
        times.append(time.perf_counter() - started)
    step_s = _gather_floats(statistics.median(times), bench)
    return _throughput_result(bench, step_s)


def _throughput_result(bench: Bench, step_s: list[float]) -> Result:
    size = bench.shape["batch"]
    ratio = bench.options.straggler_ratio
    return {
        "model": _model_name(bench),
        "batch": size,
        "steps": bench.options.bench_steps,
        "ranks": [
            {
                "rank": rank,
                "host": bench.peers.hosts[rank],
                "step_ms": round(seconds * 1e3, 4),
                "samples_per_s": round(size / seconds, 2),
            }
            for rank, seconds in enumerate(step_s)
        ],
        "typical_step_ms": round(judge.typical(step_s) * 1e3, 4),
        "worst_ratio": judge.worst_ratio(step_s),
        "straggler_ratio": ratio,
        "stragglers": judge.stragglers(step_s, bench.peers.hosts, ratio),
    }


def run_scaling(bench: Bench) -> Result:
    """DDP training throughput on the first node's ranks alone, then on every rank."""
    hosts = bench.peers.hosts
    nodes = len(set(hosts))
    if nodes < 2:
        return {"nodes": 1, "efficiency": None, "skipped": "one node: nothing to scale"}
    first = [rank for rank, host in enumerate(hosts) if host == hosts[0]]
    group = dist.new_group(first, timeout=bench.timeout)
    one = _ddp_throughput(bench, group, len(first)) if bench.rank in first else 0.0
    one_node = torch.tensor([one], dtype=torch.float64, device=bench.device)
    all_reduce_max(one_node, bench.timeout, "one-node throughput all_reduce")
    every = _ddp_throughput(bench, None, bench.world_size)
    one_rate = float(one_node.item())
    return {
        "nodes": nodes,
        "steps": bench.options.bench_steps,
        "batch_per_rank": bench.shape["batch"],
        "one_node": {"host": hosts[0], "ranks": len(first), "samples_per_s": round(one_rate, 2)},
        "all_nodes": {"ranks": bench.world_size, "samples_per_s": round(every, 2)},
        # Per rank: nodes may run different numbers of ranks.
        "efficiency": judge.scaling_efficiency(every, bench.world_size / len(first), one_rate),
    }


def _ddp_throughput(bench: Bench, group: dist.ProcessGroup | None, ranks: int) -> float:
    """Samples per second of ``ranks`` ranks training together under DDP."""
    device_ids = [bench.device.index] if bench.device.type == "cuda" else None
    model = DistributedDataParallel(bench_model(bench), device_ids=device_ids, process_group=group)
    batch = _bench_batch(bench)
    for _ in range(WARMUP_STEPS):
        _train_step(model, batch)
    barrier(bench.device, bench.timeout, f"scaling barrier of {ranks} ranks", group)
    _synchronize(bench.device)
    started = time.perf_counter()
    for _ in range(bench.options.bench_steps):
        _train_step(model, batch)
    _synchronize(bench.device)
    elapsed = torch.tensor([time.perf_counter() - started], dtype=torch.float64)
    elapsed = elapsed.to(bench.device)
    all_reduce_max(elapsed, bench.timeout, f"scaling time of {ranks} ranks", group)
    return ranks * bench.shape["batch"] * bench.options.bench_steps / float(elapsed.item())


def _train_step(model: nn.Module, batch: torch.Tensor) -> None:
    """Forward, backward and a plain SGD update.

    Written out rather than ``torch.optim.SGD``, whose first use imports
    ``torch._dynamo`` (seconds of CPU), so a throughput-only run starts fast.
    """
    model.zero_grad(set_to_none=True)
    model(batch).square().mean().backward()
    with torch.no_grad():
        for param in model.parameters():
            if param.grad is not None:
                param.add_(param.grad, alpha=-BENCH_LR)


def _gather_floats(value: float, bench: Bench) -> list[float]:
    """Every rank's ``value``, indexed by rank."""
    mine = torch.zeros(bench.world_size, dtype=torch.float64, device=bench.device)
    mine[bench.rank] = value
    all_reduce_sum(mine, bench.timeout, "per-rank measurement all_reduce")
    return [float(item) for item in mine.tolist()]


def _element_size() -> int:
    return torch.empty(0, dtype=SWEEP_DTYPE).element_size()


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _busbw_share(sweep: Result | None, tcp: Result | None) -> float | None:
    """Peak busbw over the raw TCP rate, when both were measured."""
    if not sweep or not tcp or "peak_busbw_Gbps" not in sweep or "Gbps" not in tcp:
        return None
    return judge.busbw_fraction(
        float(sweep["peak_busbw_Gbps"]),  # type: ignore[arg-type]
        float(tcp["Gbps"]),  # type: ignore[arg-type]
    )


def sweep_iterations(size: int, backend: str, fixed: int | None) -> tuple[int, int]:
    """``(warmup, timed)`` iterations for one message size; every rank computes the same."""
    plan = ITERATIONS.get(backend, ITERATIONS["gloo"])
    if fixed is not None:
        return plan["warmup"], fixed
    timed = max(plan["min"], min(plan["max"], plan["budget_bytes"] // size))
    return plan["warmup"], timed


# The measurement groups, in the order every rank runs them.
MEASUREMENTS: dict[str, Callable[[Bench], dict[str, object]]] = {
    "sweep": run_sweep,
    "tcp": run_tcp,
    "throughput": run_throughput,
    "scaling": run_scaling,
}


# --- The raw TCP transfer -------------------------------------------------------------

# A raw TCP transfer between two hosts, the yardstick for all_reduce bandwidth.
#
# The server sends first-come bytes from one
# buffer, so the figure is the network and kernel rate, not the speed of any
# serialisation.
#
# Protocol, on one connection: the client sends ``nbytes`` and waits for a one-byte
# acknowledgement (that time is the client -> server rate); then the server does
# the same towards the client (the server -> client rate). Every socket operation
# and the whole transfer are bounded by ``timeout_s``.


CHUNK = 1 << 20
ACK = b"\x06"


CONNECT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Listener:
    sock: socket.socket
    port: int


def listen(bind_host: str, timeout_s: float) -> Listener:
    """Listen on an ephemeral port of ``bind_host`` ("" = all interfaces)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    sock.bind((bind_host, 0))
    sock.listen(1)
    return Listener(sock=sock, port=int(sock.getsockname()[1]))


def candidate_addresses(iface_addr: str | None, master_addr: str | None) -> list[str]:
    """Addresses a peer may reach this host by, most trustworthy first.

    The address of ``--iface``; the rendezvous host, which every rank has already
    reached; the address this host's name resolves to here (what gloo binds to),
    unless that is loopback; and the name itself.
    """
    name = socket.gethostname()
    try:
        resolved = socket.gethostbyname(name)
    except OSError:
        resolved = ""
    candidates = [iface_addr or "", master_addr or ""]
    candidates.append("" if resolved.startswith("127.") else resolved)
    candidates.append(name)
    return list(dict.fromkeys(address for address in candidates if address))


def connect_any(
    addresses: list[str], port: int, nbytes: int, timeout_s: float
) -> tuple[float, str, str]:
    """Run the protocol with the first address that accepts.

    Returns ``(seconds, address, local address)``: the client -> server time, the
    address of rank 0 that answered, and this end's address of the connection.
    """
    tried = []
    for address in addresses:
        try:
            conn = socket.create_connection(
                (address, port), timeout=min(CONNECT_TIMEOUT_S, timeout_s)
            )
        except OSError as exc:
            tried.append(f"{address}: {exc}")
            continue
        with conn:
            local = str(conn.getsockname()[0])
            return _client(conn, nbytes, timeout_s), address, local
    raise ConnectionError(f"no address of rank 0 answered on port {port}: {'; '.join(tried)}")


def serve(listener: Listener, nbytes: int, timeout_s: float) -> tuple[float, str]:
    """Accept one client, run the protocol.

    Returns ``(seconds, local address)``: the server -> client time and this end's
    address of the connection (the one the client reached).
    """
    deadline = time.monotonic() + timeout_s
    with listener.sock:
        conn, _ = listener.sock.accept()
    with conn:
        conn.settimeout(timeout_s)
        _receive(conn, nbytes, deadline)
        conn.sendall(ACK)
        return _send_timed(conn, nbytes, deadline), str(conn.getsockname()[0])


def _client(conn: socket.socket, nbytes: int, timeout_s: float) -> float:
    """The client's side of the protocol; return the client -> server seconds."""
    deadline = time.monotonic() + timeout_s
    conn.settimeout(timeout_s)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    seconds = _send_timed(conn, nbytes, deadline)
    _receive(conn, nbytes, deadline)
    conn.sendall(ACK)
    return seconds


def _send_timed(conn: socket.socket, nbytes: int, deadline: float) -> float:
    """Send ``nbytes`` and wait for the peer's acknowledgement; return the seconds taken."""
    chunk = memoryview(bytes(min(CHUNK, nbytes)))
    started = time.monotonic()
    left = nbytes
    while left > 0:
        _check_deadline(deadline, "sending")
        piece = chunk[: min(left, len(chunk))]
        conn.sendall(piece)
        left -= len(piece)
    _receive(conn, len(ACK), deadline)
    return time.monotonic() - started


def _receive(conn: socket.socket, nbytes: int, deadline: float) -> None:
    buffer = bytearray(min(CHUNK, nbytes))
    view = memoryview(buffer)
    left = nbytes
    while left > 0:
        _check_deadline(deadline, "receiving")
        got = conn.recv_into(view[: min(left, len(buffer))])
        if got == 0:
            raise ConnectionError(f"peer closed the connection with {left} of {nbytes} bytes due")
        left -= got


def _check_deadline(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise TimeoutError(f"TCP transfer timed out while {what}")


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
