"""The ``run`` subcommand: one rank's whole smoke test, from rendezvous to result file."""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist

from ddp_smoke import checks, collective_checks, data_checks, judge, launch, measure, train
from ddp_smoke.faults import FAULT_ENV, Faults, parse_faults
from ddp_smoke.judge import PEERS_PASSED, CheckResult, Identity, Peers
from ddp_smoke.launch import RunOptions, SlurmContext, SpawnPlan
from ddp_smoke.progress import Progress, Store
from ddp_smoke.results import RESULT_FILE, RankRecord, rank_file, write_json_atomic

MEASUREMENTS: dict[str, Callable[[measure.Bench], dict[str, object]]] = {
    "sweep": measure.run_sweep,
    "tcp": measure.run_tcp,
    "throughput": measure.run_throughput,
    "scaling": measure.run_scaling,
}


def start(target: SlurmContext | SpawnPlan, options: RunOptions, env: Mapping[str, str]) -> int:
    """Run one rank, or spawn this node's ranks; 0 if every check passed."""
    if isinstance(target, SpawnPlan):
        from ddp_smoke.spawn import run_node  # here, not above: spawn imports this module

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
        self.faults.stall(self.ctx.rank, self.options.timeout_s)
        if "collectives" in self.options.checks:
            self._collectives()
        config = train.TrainConfig(epochs=self.options.epochs, seed=self.options.seed)
        seed = self.faults.data_seed(self.ctx.rank, self.options.seed)
        dataset = train.make_dataset(self.peers.world_size, config, seed)
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
            lambda: checks.check_peers_passed(
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
        me = Identity(
            self.ctx.rank, self.ctx.host, self.ctx.local_rank, checks.gpu_uuid(self.device)
        )
        identities = checks.gather_identities(me)
        self.peers = Peers(hosts=tuple(ident.host for ident in identities))
        self.record.nodes = self.peers.nodes()
        self.record.peer_hosts = self.peers.hosts
        self.record.checks.append(
            judge.check_world_size(self.peers.world_size, self.options.expected_world_size)
        )
        self.record.checks.append(judge.check_unique_ranks(identities))

    def _collectives(self) -> None:
        for operation, dtype, size in collective_checks.plan():
            name = collective_checks.check_name(operation, dtype, size)
            self.step(name, partial(self._collective, operation, dtype, size))

    def _collective(self, operation: str, dtype: torch.dtype, size: int) -> CheckResult:
        rank, peers, device, timeout = self.ctx.rank, self.peers, self.device, self.timeout
        if operation == "all_reduce":
            offset = self.faults.allreduce_offset(rank)
            return collective_checks.check_all_reduce(
                dtype, size, rank, peers, device, offset, timeout
            )
        if operation == "broadcast":
            return collective_checks.check_broadcast(dtype, size, rank, peers, device, timeout)
        return collective_checks.check_all_gather(dtype, size, rank, peers, device, timeout)

    def _data(self, dataset: train.TensorDataset, config: train.TrainConfig) -> None:
        peers, device, timeout = self.peers, self.device, self.timeout
        self.step(
            "data_identical",
            lambda: data_checks.check_data_identical(dataset, peers, device, timeout),
        )
        self.step(
            "sampler_shards",
            lambda: data_checks.check_sampler_shards(dataset, config, peers, device, timeout),
        )

    def _train(self, dataset: train.TensorDataset, config: train.TrainConfig) -> None:
        self.progress.enter("train")
        model = train.make_model(self.options.seed, self.device)
        wrapped = train.wrap(model, self.device)
        self.record.losses = train.train(wrapped, dataset, config, self.device, self.timeout)
        self.record.checks.append(judge.check_loss_decreased(self.record.losses))
        if self.faults.perturbs_params(self.ctx.rank):
            train.perturb(model)
        self.step(
            "params_identical",
            lambda: checks.check_params_identical(model, self.peers, self.timeout),
        )

    def _measure(self) -> dict[str, object]:
        """Every measurement group's result (``None`` where not asked for)."""
        bench = measure.Bench(
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
        )
        results: dict[str, object] = {}
        for name, action in MEASUREMENTS.items():
            results[name] = None
            if name in self.options.measure.groups:
                self.progress.enter(name)
                results[name] = action(bench)
        results["busbw_fraction"] = measure.busbw_fraction(
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
