"""The ``run`` subcommand: one rank's whole smoke test, from rendezvous to result file."""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from ddp_smoke import checks, train
from ddp_smoke.faults import FAULT_ENV, Faults, parse_faults
from ddp_smoke.results import RESULT_FILE, RankRecord, rank_file, write_json_atomic
from ddp_smoke.slurm_env import SlurmContext, from_env


@dataclass(frozen=True)
class RunOptions:
    result_dir: Path
    expected_world_size: int | None
    epochs: int
    timeout_s: float
    master_port: int | None
    seed: int

    @property
    def timeout(self) -> timedelta:
        return timedelta(seconds=self.timeout_s)


def run(options: RunOptions, env: Mapping[str, str]) -> int:
    """Run this rank's checks, write ``rank-<N>.json``; return 0 if all passed, else 1."""
    started = time.monotonic()
    try:
        ctx = from_env(env, options.master_port)
    except ValueError as exc:
        print(f"ddp_smoke: cannot start: {exc}", file=sys.stderr)
        return 1
    if ctx.rank == 0:
        (options.result_dir / RESULT_FILE).unlink(missing_ok=True)
    record = RankRecord(context=ctx)
    try:
        _run_rank(ctx, options, parse_faults(env.get(FAULT_ENV, "")), record)
    except Exception as exc:  # noqa: BLE001 - every failure must reach the rank file and exit 1
        record.error = f"{type(exc).__name__}: {exc}"
        traceback.print_exc(file=sys.stderr)
    record.elapsed_s = round(time.monotonic() - started, 3)
    return _finish(record, options.result_dir)


def _run_rank(ctx: SlurmContext, options: RunOptions, faults: Faults, record: RankRecord) -> None:
    device = select_device(ctx.local_rank)
    record.backend = "nccl" if device.type == "cuda" else "gloo"
    record.device = str(device)
    init_method = f"tcp://{_url_host(ctx.master_addr)}:{ctx.master_port}"
    try:
        dist.init_process_group(
            record.backend,
            init_method=init_method,
            rank=ctx.rank,
            world_size=ctx.world_size,
            timeout=options.timeout,
            device_id=device if device.type == "cuda" else None,
        )
    except Exception as exc:
        raise RuntimeError(f"rendezvous at {init_method} failed: {exc}") from exc
    try:
        _run_checks(ctx, options, faults, record, device)
    finally:
        dist.destroy_process_group()


def _run_checks(
    ctx: SlurmContext,
    options: RunOptions,
    faults: Faults,
    record: RankRecord,
    device: torch.device,
) -> None:
    timeout = options.timeout
    peers = checks.gather_peers(ctx.host)
    record.nodes = peers.nodes()
    record.checks.append(checks.check_world_size(peers.world_size, options.expected_world_size))
    for dtype in checks.ALL_REDUCE_DTYPES:
        for size in checks.ALL_REDUCE_SIZES:
            offset = faults.allreduce_offset(ctx.rank)
            result = checks.check_all_reduce(dtype, size, ctx.rank, peers, device, offset, timeout)
            record.checks.append(result)
    config = train.TrainConfig(epochs=options.epochs, seed=options.seed)
    model = train.make_model(options.seed, device)
    dataset = train.make_dataset(peers.world_size, config)
    record.losses = train.train(train.wrap(model, device), dataset, config, device, timeout)
    record.checks.append(checks.check_loss_decreased(record.losses))
    if faults.perturbs_params(ctx.rank):
        train.perturb(model)
    record.checks.append(checks.check_params_identical(model, peers, timeout))
    passed = checks.check_peers_passed(record.checks_ok, ctx.rank, peers, device, timeout)
    record.checks.append(passed)


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


def _url_host(addr: str) -> str:
    return f"[{addr}]" if ":" in addr and not addr.startswith("[") else addr


def _finish(record: RankRecord, result_dir: Path) -> int:
    write_json_atomic(rank_file(result_dir, record.context.rank), record.to_dict())
    failure = record.failure()
    if failure is not None:
        print(f"ddp_smoke: FAIL {record.who}: {failure}", file=sys.stderr)
        return 1
    if record.context.rank == 0:
        write_json_atomic(result_dir / RESULT_FILE, record.summary())
    first, last = record.losses[0], record.losses[-1]
    print(
        f"ddp_smoke: PASS {record.who}: {len(record.checks)} checks, "
        f"loss {first:.4g} -> {last:.4g}, {record.elapsed_s:.1f} s"
    )
    return 0
