from __future__ import annotations

import pytest

from ddp_smoke import judge
from ddp_smoke.benchmarks import sweep_iterations
from ddp_smoke.cli import parse_size, sweep_sizes
from ddp_smoke.report import format_bytes


@pytest.mark.parametrize(
    ("text", "size"),
    [("4096", 4096), ("4K", 4096), ("4KiB", 4096), ("64M", 64 << 20), ("1g", 1 << 30)],
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "4X", "-4K", "0", "1.5M"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


def test_default_sweep_sizes() -> None:
    sizes = sweep_sizes(4 << 10, 64 << 20, 4)
    assert [format_bytes(size) for size in sizes] == [
        "4 KiB",
        "16 KiB",
        "64 KiB",
        "256 KiB",
        "1 MiB",
        "4 MiB",
        "16 MiB",
        "64 MiB",
    ]
    assert sweep_sizes(1024, 5000, 2) == [1024, 2048, 4096]


def test_sweep_sizes_rejects_bad_ranges() -> None:
    with pytest.raises(ValueError, match="bad sweep"):
        sweep_sizes(64, 4, 2)
    with pytest.raises(ValueError, match="factor 2"):
        sweep_sizes(4, 64, 1)


@pytest.mark.parametrize(
    ("size", "backend", "fixed", "plan"),
    [
        (4096, "gloo", None, (1, 20)),
        (4 << 20, "gloo", None, (1, 16)),
        (64 << 20, "gloo", None, (1, 2)),
        (4096, "nccl", None, (5, 50)),
        (1 << 30, "nccl", None, (5, 8)),
        (4096, "nccl", 7, (5, 7)),
    ],
)
def test_sweep_iterations(
    size: int, backend: str, fixed: int | None, plan: tuple[int, int]
) -> None:
    assert sweep_iterations(size, backend, fixed) == plan


@pytest.mark.parametrize(("world", "factor"), [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)])
def test_bus_factor(world: int, factor: float) -> None:
    assert judge.bus_factor(world) == factor


def test_bandwidth_row_follows_nccl_tests() -> None:
    # 64 MiB in 10 ms on 8 ranks: algbw = 6.7108864 GB/s, busbw = algbw * 2*7/8.
    row = judge.bandwidth_row(64 << 20, 16 << 20, 20, 0.010, 8)
    assert row == {
        "bytes": 67108864,
        "count": 16777216,
        "iters": 20,
        "time_us": 10000.0,
        "algbw_GBps": 6.710886,
        "busbw_GBps": 11.744051,
    }


def test_peak_row_and_gbps() -> None:
    rows = [{"bytes": 1, "busbw_GBps": 2.0}, {"bytes": 2, "busbw_GBps": 5.0}, {"bytes": 3}]
    assert judge.peak_row(rows) == {"bytes": 2, "busbw_GBps": 5.0}
    assert judge.peak_row([]) is None
    assert judge.gbps(125_000_000, 1.0) == 1.0  # 10^9 bits in one second


@pytest.mark.parametrize(
    ("busbw", "tcp", "fraction"), [(8.0, 10.0, 0.8), (None, 10.0, None), (8.0, None, None)]
)
def test_busbw_fraction(busbw: float | None, tcp: float | None, fraction: float | None) -> None:
    assert judge.busbw_fraction(busbw, tcp) == fraction


def test_two_ranks_one_slow_is_a_straggler() -> None:
    # The lower median of two ranks is the faster one, so the slow one stands out.
    found = judge.stragglers([0.010, 0.030], ("nodeA", "nodeB"), 1.5)
    assert found == [{"rank": 1, "host": "nodeB", "step_ms": 30.0, "ratio": 3.0}]
    assert judge.worst_ratio([0.010, 0.030]) == 3.0


def test_stragglers_sorted_slowest_first_and_ratio_respected() -> None:
    times = [0.010, 0.010, 0.014, 0.025, 0.016, 0.010]
    hosts = ("a", "a", "b", "b", "c", "c")
    found = judge.stragglers(times, hosts, 1.5)
    assert [(row["rank"], row["ratio"]) for row in found] == [(3, 2.5), (4, 1.6)]
    assert judge.stragglers(times, hosts, 3.0) == []
    assert judge.stragglers([], (), 1.5) == []


def test_scaling_efficiency() -> None:
    # 2 nodes giving 1800 samples/s against one node's 1000: 0.9 of linear.
    assert judge.scaling_efficiency(1800.0, 2, 1000.0) == 0.9
    assert judge.scaling_efficiency(4000.0, 4, 1000.0) == 1.0
    assert judge.scaling_efficiency(1800.0, 2, 0.0) is None


def test_scaling_efficiency_on_uneven_nodes_is_per_rank() -> None:
    # One node of 2 ranks at 1000 samples/s; 3 ranks on 2 nodes are 1.5 times as many.
    assert judge.scaling_efficiency(1500.0, 3 / 2, 1000.0) == 1.0
    assert judge.scaling_efficiency(1350.0, 3 / 2, 1000.0) == 0.9


@pytest.mark.parametrize(
    ("size", "text"), [(512, "512 B"), (4096, "4 KiB"), (6144, "6 KiB"), (1 << 30, "1 GiB")]
)
def test_format_bytes(size: int, text: str) -> None:
    assert format_bytes(size) == text
