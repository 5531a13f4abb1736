"""Bandwidth, straggler and scaling arithmetic. Standard library only: ``report`` uses it.

Bandwidths follow the nccl-tests definitions (``doc/PERFORMANCE.md`` there):
``algbw = bytes / time`` and, for all_reduce, ``busbw = algbw * 2(n-1)/n``.
``GBps`` means 10^9 bytes per second (the nccl-tests unit) and ``Gbps`` means
10^9 bits per second (the unit networks are sold in): ``Gbps = 8 * GBps``.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence

Row = dict[str, object]

GIGA = 1e9
BITS_PER_BYTE = 8
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE = re.compile(r"(\d+)\s*([KMG]?)(?:i?B)?", re.IGNORECASE)

# Iterations per message size: enough data to time each size, never fewer
# than MIN or more than MAX. Gloo runs on the CPU and moves far less data.
ITERATIONS = {
    "gloo": {"warmup": 1, "min": 2, "max": 20, "budget_bytes": 64 << 20},
    "nccl": {"warmup": 5, "min": 5, "max": 50, "budget_bytes": 8 << 30},
}


def parse_size(text: str) -> int:
    """``"4K"``, ``"64MiB"``, ``"1G"`` or ``"4096"`` as a byte count (binary units)."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a size like 4096, 4K, 64M or 1G")
    value = int(match.group(1)) * _UNITS[match.group(2).upper()]
    if value < 1:
        raise ValueError(f"size {text!r} is zero")
    return value


def sweep_sizes(low: int, high: int, factor: int) -> list[int]:
    """``low, low*factor, ...`` up to and including ``high`` when it is on the grid."""
    if low < 1 or high < low or factor < 2:
        raise ValueError(f"bad sweep {low}:{high} factor {factor}: need 1 <= MIN <= MAX, factor 2+")
    sizes = [low]
    while sizes[-1] * factor <= high:
        sizes.append(sizes[-1] * factor)
    return sizes


def sweep_iterations(size: int, backend: str, fixed: int | None) -> tuple[int, int]:
    """``(warmup, timed)`` iterations for one message size; every rank computes the same."""
    plan = ITERATIONS.get(backend, ITERATIONS["gloo"])
    if fixed is not None:
        return plan["warmup"], fixed
    timed = max(plan["min"], min(plan["max"], plan["budget_bytes"] // size))
    return plan["warmup"], timed


def bus_factor(world_size: int) -> float:
    """all_reduce's ``2(n-1)/n``: the share of the data each rank's link carries twice."""
    return 2 * (world_size - 1) / world_size


def bandwidth_row(size: int, count: int, iters: int, seconds: float, world_size: int) -> Row:
    """One sweep line; ``seconds`` is the time of one all_reduce on the slowest rank."""
    algbw = size / seconds / GIGA
    return {
        "bytes": size,
        "count": count,
        "iters": iters,
        "time_us": round(seconds * 1e6, 3),
        "algbw_GBps": round(algbw, 6),
        "busbw_GBps": round(algbw * bus_factor(world_size), 6),
    }


def peak_row(rows: Sequence[Row]) -> Row | None:
    """The sweep line with the highest bus bandwidth (the first one on a tie)."""
    return max(rows, key=lambda row: _number(row.get("busbw_GBps")), default=None)


def gbps(nbytes: int, seconds: float) -> float:
    """Gigabits per second for ``nbytes`` moved in ``seconds``."""
    return nbytes * BITS_PER_BYTE / seconds / GIGA


def busbw_fraction(peak_busbw_gbps: float | None, tcp_gbps: float | None) -> float | None:
    """Peak all_reduce busbw as a share of the raw TCP rate; ``None`` if either is missing."""
    if peak_busbw_gbps is None or not tcp_gbps:
        return None
    return round(peak_busbw_gbps / tcp_gbps, 4)


def typical(values: Sequence[float]) -> float:
    """The lower median: with two ranks it is the faster one, so one slow rank stands out."""
    return statistics.median_low(values)


def stragglers(step_s: Sequence[float], hosts: Sequence[str], ratio: float) -> list[Row]:
    """Ranks whose step time exceeds ``ratio`` times the lower median, slowest first."""
    if not step_s:
        return []
    base = typical(step_s)
    slow = [
        {
            "rank": rank,
            "host": hosts[rank],
            "step_ms": round(value * 1e3, 3),
            "ratio": round(value / base, 3),
        }
        for rank, value in enumerate(step_s)
        if base > 0 and value > ratio * base
    ]
    return sorted(slow, key=lambda row: -_number(row["ratio"]))


def worst_ratio(step_s: Sequence[float]) -> float | None:
    """The slowest rank's step time over the lower median."""
    if not step_s or typical(step_s) <= 0:
        return None
    return round(max(step_s) / typical(step_s), 3)


def scaling_efficiency(all_nodes: float, nodes: int, one_node: float) -> float | None:
    """``(throughput on all nodes / nodes) / throughput on one node``; 1.0 is perfect."""
    if nodes < 1 or one_node <= 0:
        return None
    return round(all_nodes / nodes / one_node, 4)


def format_bytes(size: int) -> str:
    """``4096`` -> ``"4 KiB"``; exact multiples only, otherwise bytes."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) else float("-inf")
