"""The measurements, run inside a rank: all_reduce sweep, TCP rate, throughput, scaling.

Every rank runs each measurement group it is asked for, in the order of
``MEASUREMENTS``, and ends with the same job-wide result, so every rank file holds
the same ``measurements`` block. The TCP group moves its bytes with
``ddp_smoke.network`` and reads both ends' link speeds from sysfs. The figures (bus
bandwidth, stragglers, scaling efficiency) come from ``ddp_smoke.judge``, and so do
the floors (``judge.floor_checks``) that turn measurements into checks; they are off
unless asked for.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ddp_smoke import judge, launch
from ddp_smoke.checks import all_reduce_max, all_reduce_sum, barrier
from ddp_smoke.faults import Faults
from ddp_smoke.judge import Peers
from ddp_smoke.launch import MeasureOptions
from ddp_smoke.network import Listener, candidate_addresses, connect_any, listen, serve
from ddp_smoke.report import format_bytes

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


def busbw_share(sweep: Result | None, tcp: Result | None) -> float | None:
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
