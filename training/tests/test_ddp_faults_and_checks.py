from __future__ import annotations

import pytest

from ddp_smoke.benchmarks import tcp_peer
from ddp_smoke.faults import Faults, parse_faults
from ddp_smoke.judge import (
    CheckResult,
    Identity,
    Peers,
    check_loss_decreased,
    check_unique_ranks,
    check_world_size,
    floor_checks,
    listing,
    shard_problems,
)
from ddp_smoke.launch import MeasureOptions


def test_no_fault_by_default() -> None:
    faults = parse_faults("")
    assert faults == Faults()
    assert not faults.perturbs_params(0)
    assert faults.allreduce_offset(0) == 0


def test_parse_faults() -> None:
    faults = parse_faults("perturb_params:1, allreduce:0,allreduce:2")
    assert faults.perturb_params == frozenset({1})
    assert faults.allreduce == frozenset({0, 2})
    assert faults.perturbs_params(1)
    assert not faults.perturbs_params(0)
    assert [faults.allreduce_offset(rank) for rank in range(3)] == [1, 0, 1]


def test_parse_new_fault_kinds() -> None:
    faults = parse_faults("data:1,sleep:2,exit:3,slow:0")
    assert (faults.data, faults.sleep, faults.exit, faults.slow) == (
        frozenset({1}),
        frozenset({2}),
        frozenset({3}),
        frozenset({0}),
    )
    assert [faults.data_seed(rank, 10) for rank in (0, 1)] == [10, 11]
    assert [faults.step_delay_s(rank) for rank in (0, 1)] == [0.05, 0.0]
    Faults().stall(0, 1.0)  # no fault: returns at once


@pytest.mark.parametrize("spec", ["perturb_params", "explode:1", "allreduce:x", "allreduce:-1"])
def test_parse_faults_rejects(spec: str) -> None:
    with pytest.raises(ValueError, match="DDP_SMOKE_FAULT"):
        parse_faults(spec)


def test_world_size_checks() -> None:
    assert check_world_size(4, 4) == CheckResult("world_size", True, "world size 4")
    assert check_world_size(3, 4) == CheckResult("world_size", False, "world size 3 expected 4")
    assert check_world_size(3, None).ok


def test_loss_decreased() -> None:
    result = check_loss_decreased([0.5, 0.3, 0.25])
    assert result == CheckResult(
        "loss_decreased", True, "mean loss first epoch 0.5 last epoch 0.25"
    )


@pytest.mark.parametrize(
    ("losses", "message"),
    [
        ([0.5, 0.6], "loss did not decrease: mean loss first epoch 0.5 last epoch 0.6"),
        ([0.5, 0.5], "loss did not decrease"),
        ([0.5, float("nan")], "non-finite loss"),
        ([0.5], "needs 2 or more epochs, got 1"),
    ],
)
def test_loss_not_decreased(losses: list[float], message: str) -> None:
    result = check_loss_decreased(losses)
    assert not result.ok
    assert message in result.detail


def test_listing_caps_long_lists() -> None:
    names = [f"rank {rank}" for rank in range(10)]
    assert listing(names[:2], ", ") == "rank 0, rank 1"
    assert listing(names, ", ") == (
        "rank 0, rank 1, rank 2, rank 3, rank 4, rank 5, rank 6, rank 7, and 2 more"
    )


def test_unique_ranks_pass() -> None:
    identities = [Identity(0, "a", 0), Identity(1, "a", 1), Identity(2, "b", 0)]
    assert check_unique_ranks(identities) == CheckResult(
        "unique_ranks", True, "3 distinct ranks on 2 hosts"
    )


def test_unique_ranks_names_shared_local_rank_and_gpu() -> None:
    identities = [
        Identity(0, "gpu01", 0, "GPU-1"),
        Identity(1, "gpu01", 0, "GPU-1"),
        Identity(3, "gpu02", 0, "GPU-2"),
    ]
    result = check_unique_ranks(identities)
    assert not result.ok
    assert result.detail == (
        "process group rank 2 on gpu02 was launched as rank 3; "
        "ranks 0, 1 on gpu01 share local rank 0; ranks 0, 1 on gpu01 share GPU GPU-1"
    )


HOSTS = ("nodeA", "nodeB", "nodeC")


def test_shards_disjoint_and_covering() -> None:
    assert shard_problems([[0, 3], [1, 4], [2, 5]], 6, HOSTS) == []


def test_shards_overlap_missing_and_outside() -> None:
    problems = shard_problems([[0, 1, 2], [2, 3, 1], [7, 9, 9]], 8, HOSTS)
    assert problems == [
        "rank 0 on nodeA and rank 1 on nodeB both hold 2 samples (first: 1)",
        "rank 2 on nodeC holds twice 1 samples (first: 9)",
        "3 samples are on no rank (first: 4)",
        "1 indices outside 0-7 (first: 9)",
    ]


def test_tcp_peer_prefers_another_host() -> None:
    assert tcp_peer(("a", "a", "b", "b")) == 2
    assert tcp_peer(("a", "a")) == 1


THROUGHPUT = {
    "ranks": [
        {"rank": 0, "host": "a", "step_ms": 10.0, "samples_per_s": 6400.0},
        {"rank": 1, "host": "b", "step_ms": 13.0, "samples_per_s": 4923.08},
    ]
}
SWEEP = {"peak_busbw_Gbps": 9.5}
PEERS = Peers(hosts=("a", "b"))


def test_floors_off_by_default_check_only_tcp() -> None:
    tcp = {"hosts": ["a", "b"], "Gbps": 9.0, "error": None}
    measured = {"sweep": SWEEP, "tcp": tcp, "throughput": THROUGHPUT}
    assert floor_checks(measured, MeasureOptions(), PEERS) == [
        CheckResult("tcp_transfer", True, "9.0 Gbit/s between a and b")
    ]


def test_floors_pass() -> None:
    chosen = MeasureOptions(min_busbw_gbps=9.0, max_straggler_ratio=1.5)
    measured = {"sweep": SWEEP, "tcp": None, "throughput": THROUGHPUT}
    assert floor_checks(measured, chosen, PEERS) == [
        CheckResult(
            "busbw_floor",
            True,
            "peak all_reduce busbw 9.500 Gbit/s over 2 ranks on a, b, floor 9.0 Gbit/s",
        ),
        CheckResult("straggler_floor", True, "slowest rank 1.3x typical, limit 1.5x"),
    ]


def test_floors_fail_naming_the_cause() -> None:
    chosen = MeasureOptions(min_busbw_gbps=10.0, max_straggler_ratio=1.2)
    tcp = {"error": "between rank 0 on a and rank 1 on b: rank 1 on b: TimeoutError: x"}
    measured = {"sweep": SWEEP, "tcp": tcp, "throughput": THROUGHPUT}
    assert [
        (check.name, check.ok, check.detail) for check in floor_checks(measured, chosen, PEERS)
    ] == [
        (
            "tcp_transfer",
            False,
            "TCP transfer between rank 0 on a and rank 1 on b: rank 1 on b: TimeoutError: x",
        ),
        (
            "busbw_floor",
            False,
            "peak all_reduce busbw 9.500 Gbit/s over 2 ranks on a, b, floor 10.0 Gbit/s: "
            "below the floor",
        ),
        (
            "straggler_floor",
            False,
            "rank 1 on b takes 13.0 ms per step, 1.3x the typical 10 ms (limit 1.2x)",
        ),
    ]


def test_floors_without_their_measurement_fail() -> None:
    chosen = MeasureOptions(min_busbw_gbps=1.0, max_straggler_ratio=2.0)
    results = floor_checks(
        {"sweep": {"skipped": "one rank"}, "tcp": {"skipped": "x"}}, chosen, PEERS
    )
    assert [(check.name, check.ok) for check in results] == [
        ("busbw_floor", False),
        ("straggler_floor", False),
    ]
    assert "the all_reduce sweep did not run" in results[0].detail
    assert "the throughput measurement did not run" in results[1].detail
