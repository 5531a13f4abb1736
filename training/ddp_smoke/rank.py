"""A rank's run, with torch: ``run`` from rendezvous to rank file.

Imported only by ``run`` once the environment fits its mode (``ddp_smoke.launch``);
the controller never imports it. In the order a rank meets them:

- running a rank: device, ``init_process_group`` with a timeout, the checks
  (``ddp_smoke.checks``) and measurements (``ddp_smoke.benchmarks``) in the same
  order on every rank, teardown in ``finally``; faults and progress records from
  ``ddp_smoke.faults``; the GPU topology of rank 0's node;
- in spawn mode, the node process that starts the workers;
- the ``rank-<N>.json`` file.

What passes is decided in ``ddp_smoke.judge``, from what the ranks gathered.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from multiprocessing.connection import wait as wait_for_exit
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import TensorDataset

from ddp_smoke import judge, launch, network
from ddp_smoke.benchmarks import MEASUREMENTS, Bench, busbw_share
from ddp_smoke.checks import (
    TrainConfig,
    check_all_gather,
    check_all_reduce,
    check_broadcast,
    check_data_identical,
    check_name,
    check_params_identical,
    check_peers_passed,
    check_sampler_shards,
    collective_plan,
    gather_identities,
    gpu_uuid,
    make_dataset,
    make_model,
    perturb,
    train,
    wrap,
)
from ddp_smoke.faults import FAULT_ENV, Faults, Progress, Store, parse_faults
from ddp_smoke.judge import PEERS_PASSED, CheckResult, Identity, Peers, listing
from ddp_smoke.launch import RunOptions, SlurmContext, SpawnPlan
from ddp_smoke.report import RESULT_FILE, rank_file, write_json_atomic

# --- Running a rank -------------------------------------------------------------------


def start(target: SlurmContext | SpawnPlan, options: RunOptions, env: Mapping[str, str]) -> int:
    """Run one rank, or spawn this node's ranks; 0 if every check passed."""
    if isinstance(target, SpawnPlan):
        return run_node(target, options, env)
    return run_rank(target, options, env)


def run_rank(ctx: SlurmContext, options: RunOptions, env: Mapping[str, str]) -> int:
    """Run this rank's checks, write ``rank-<N>.json``; return 0 if all passed, else 1."""
    started = time.monotonic()
    import_s = launch.process_age_s()
    preload_ddp()
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
    if import_s is not None:
        record.timings_s = {"import": import_s, **record.timings_s}
    return _finish(record, options.result_dir)


# DDP's constructor imports torch._dynamo (about 1 s of CPU per rank, with its
# bytecode): imported in the background from the start of a rank, it overlaps
# the rendezvous and the collective checks, where a rank mostly waits for its
# peers. DDP's own import then finds the module (or waits for the one under
# way: Python's import lock); a failure here is raised again there, in place.
DDP_IMPORTS = ("torch._dynamo",)


def preload_ddp() -> threading.Thread:
    thread = threading.Thread(target=_import_quietly, args=DDP_IMPORTS, daemon=True)
    thread.start()
    return thread


def _import_quietly(*names: str) -> None:
    for name in names:
        # Any failure: DDP imports it again and raises where it matters.
        with contextlib.suppress(Exception):
            importlib.import_module(name)


def describe(exc: BaseException, note: str | None = None) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return f"{text}; {note}" if note else text


def _run_rank(ctx: SlurmContext, options: RunOptions, faults: Faults, record: RankRecord) -> None:
    device = select_device(ctx.local_rank)
    record.backend = "nccl" if device.type == "cuda" else "gloo"
    record.device = str(device)
    started = time.monotonic()
    refused = network.wait_for_store(ctx, options.timeout_s)
    if refused:
        raise RuntimeError(f"rendezvous at {ctx.rendezvous} failed: {refused}")
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
        results["busbw_fraction"] = busbw_share(
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
        plan, nodes_store = share_worker_counts(plan, options.timeout)
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
    remove_rendezvous_when_last(nodes_store, plan)
    return 1 if failed else 0


def remove_rendezvous_when_last(nodes_store: dist.Store, plan: SpawnPlan) -> bool:
    """Delete the rendezvous file once every node's workers are gone; True if this did.

    torch's ``FileStore`` deletes its file only when its last instance is destroyed
    in every worker. Once a DDP module has run, the process group and its store outlive
    ``destroy_process_group()``, the module and ``gc.collect()`` (tried, torch 2.13 with
    gloo): the file goes, if at all, as the worker's process tears down, and now and
    then it stays on the shared folder. Each node process counts itself done after its
    workers have exited; the last one deletes the file, as no rank can open it any more.
    """
    if int(nodes_store.add("nodes-done", 1)) < plan.nodes:
        return False
    plan.rdzv_file.unlink(missing_ok=True)
    return True


def share_worker_counts(plan: SpawnPlan, timeout: timedelta) -> tuple[SpawnPlan, dist.Store]:
    """``plan`` with every node's worker count, exchanged within ``timeout``, and the store.

    Each node process writes its count to a ``FileStore`` beside the rendezvous file
    and waits for the others'; the store stays open for ``remove_rendezvous_when_last``,
    and the last node process to drop it deletes its file.
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
    return plan.placed(tuple(int(store.get(key)) for key in keys)), store


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
