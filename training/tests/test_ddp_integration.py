"""Two real ranks on this machine over gloo, as srun would start them."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from ddp_launch import JOB_ID, Launcher, run_cli

pytestmark = pytest.mark.integration

COLLECTIVE_NAMES = [
    f"{operation}_{dtype}_size_{size}"
    for operation, dtypes in (
        ("all_reduce", ("int64", "float32")),
        ("broadcast", ("int64", "float32", "bfloat16")),
        ("all_gather", ("int64", "float32", "bfloat16")),
    )
    for dtype in dtypes
    for size in (1024, 1048576)
]
CHECK_NAMES = [
    "world_size",
    "unique_ranks",
    *COLLECTIVE_NAMES,
    "data_identical",
    "sampler_shards",
    "loss_decreased",
    "params_identical",
    "tcp_transfer",
    "peers_passed",
]
SWEEP_BYTES = [4096 * 4**power for power in range(8)]  # 4 KiB .. 64 MiB
PARAMS_DISAGREE = "parameters of rank 1 on nodeB differ from rank 0 on nodeA"
NO_MEASURE = ("--measure", "none")


def read(path: Path) -> Any:  # noqa: ANN401 - parsed JSON
    return json.loads(path.read_text())


def test_two_ranks_pass_with_measurements(tmp_path: Path, launch_ranks: Launcher) -> None:
    started = time.monotonic()
    ranks = launch_ranks(tmp_path, extra_args=("--expected-world-size", "2", "--epochs", "3"))
    took = time.monotonic() - started
    assert [rank.returncode for rank in ranks] == [0, 0], [rank.stderr for rank in ranks]
    assert ranks[0].stdout.startswith(f"ddp_smoke: PASS rank 0 on nodeA: {len(CHECK_NAMES)} checks")
    assert took < 60, f"a 2-rank srun-mode job took {took:.0f} s"

    records = [read(tmp_path / f"rank-{rank}.json") for rank in (0, 1)]
    for rank, record in enumerate(records):
        assert record["schema"] == 2
        assert (record["rank"], record["local_rank"], record["world_size"]) == (rank, rank, 2)
        assert record["host"] == ("nodeA", "nodeB")[rank]
        assert record["job_id"] == JOB_ID
        assert (record["mode"], record["label"]) == ("srun", "srun")
        assert record["rendezvous"].startswith("tcp://127.0.0.1:")
        assert record["iface"] == {
            "requested": None,
            "GLOO_SOCKET_IFNAME": None,
            "NCCL_SOCKET_IFNAME": None,
        }
        assert (record["backend"], record["device"], record["status"]) == ("gloo", "cpu", "pass")
        assert record["error"] is None
        assert [check["name"] for check in record["checks"]] == CHECK_NAMES
        assert all(check["ok"] for check in record["checks"])
        assert len(record["losses"]) == 3
        assert {"rendezvous", "train", "sweep", "teardown"} <= set(record["timings_s"])
    assert records[0]["losses"] == records[1]["losses"]
    assert records[0]["measurements"] == records[1]["measurements"]
    assert_measurements(records[0]["measurements"])

    result = read(tmp_path / "result.json")
    assert (result["world_size"], result["mode"]) == (2, "srun")
    assert result["nodes"] == ["nodeA", "nodeB"]
    assert result["last_loss"] < result["first_loss"]
    assert result["measurements"] == records[0]["measurements"]
    written = sorted(path.name for path in tmp_path.iterdir())
    assert written == ["rank-0.json", "rank-1.json", "result.json"]

    verdict = run_cli(["report", str(tmp_path), "--expected-world-size", "2"])
    assert verdict.returncode == 0, verdict.stderr
    summary = json.loads(verdict.stdout)
    assert summary["verdict"] == "PASS"
    assert (summary["nodes"], summary["checks_passed"], summary["mode"]) == (
        ["nodeA", "nodeB"],
        len(CHECK_NAMES),
        "srun",
    )
    assert (summary["first_loss"], summary["last_loss"]) == (
        result["first_loss"],
        result["last_loss"],
    )
    measured = records[0]["measurements"]
    assert summary["measurements"] == measured
    assert summary["tcp_Gbps"] == measured["tcp"]["Gbps"]
    assert summary["peak_busbw_GBps"] == measured["sweep"]["peak_busbw_GBps"]
    assert summary["busbw_fraction"] == measured["busbw_fraction"]
    assert (summary["link_fraction"], summary["gpu_topology"]) == (None, None)
    assert all(record["gpu_topology"] is None for record in records)  # CPU: no nvidia-smi
    assert summary["scaling_efficiency"] == measured["scaling"]["efficiency"]


def assert_measurements(measured: dict[str, Any]) -> None:
    sweep = measured["sweep"]
    assert (sweep["op"], sweep["dtype"], sweep["ranks"], sweep["bus_factor"]) == (
        "all_reduce",
        "float32",
        2,
        1.0,
    )
    assert [row["bytes"] for row in sweep["rows"]] == SWEEP_BYTES
    assert [row["iters"] for row in sweep["rows"]] == [20, 20, 20, 20, 20, 16, 4, 2]
    for row in sweep["rows"]:
        assert row["count"] == row["bytes"] // 4
        assert row["time_us"] > 0
        # nccl-tests: algbw = bytes / time; busbw = algbw * 2(n-1)/n = algbw for n = 2.
        assert row["algbw_GBps"] == pytest.approx(row["bytes"] / row["time_us"] / 1e3, rel=1e-3)
        assert row["busbw_GBps"] == row["algbw_GBps"]
    assert sweep["peak_busbw_GBps"] == max(row["busbw_GBps"] for row in sweep["rows"])
    assert sweep["peak_busbw_Gbps"] == pytest.approx(8 * sweep["peak_busbw_GBps"])

    tcp = measured["tcp"]
    assert (tcp["ranks"], tcp["hosts"], tcp["same_host"]) == ([0, 1], ["nodeA", "nodeB"], False)
    assert (tcp["bytes"], tcp["error"]) == (64 << 20, None)
    assert tcp["address"].startswith("127.0.0.1:")  # MASTER_ADDR, the first candidate
    assert tcp["Gbps"] == min(tcp["to_peer_Gbps"], tcp["from_peer_Gbps"]) > 0
    # Both ends talk over loopback, whose sysfs speed is unreadable: no expectation.
    assert (tcp["ifaces"], tcp["link_Mbps"], tcp["link_fraction"]) == (["lo", "lo"], None, None)
    assert measured["busbw_fraction"] == pytest.approx(
        sweep["peak_busbw_Gbps"] / tcp["Gbps"], rel=1e-3
    )

    throughput = measured["throughput"]
    assert [(row["rank"], row["host"]) for row in throughput["ranks"]] == [
        (0, "nodeA"),
        (1, "nodeB"),
    ]
    for row in throughput["ranks"]:
        assert row["samples_per_s"] == pytest.approx(64 / row["step_ms"] * 1e3, rel=1e-3)
    assert throughput["straggler_ratio"] == 1.5

    scaling = measured["scaling"]
    assert scaling["nodes"] == 2
    assert scaling["one_node"]["host"] == "nodeA"
    assert (scaling["one_node"]["ranks"], scaling["all_nodes"]["ranks"]) == (1, 2)
    expected = scaling["all_nodes"]["samples_per_s"] / 2 / scaling["one_node"]["samples_per_s"]
    assert scaling["efficiency"] == pytest.approx(expected, rel=1e-3)


def test_three_ranks_on_uneven_nodes(tmp_path: Path, launch_ranks: Launcher) -> None:
    """srun --ntasks=3 over nodes of 2 and 1 tasks (SLURM_TASKS_PER_NODE=2,1)."""
    hosts = ("nodeA", "nodeA", "nodeB")
    args = ("--expected-world-size", "3", "--checks", "collectives")
    args += ("--measure", "tcp,scaling", "--bench-steps", "5", "--tcp-mib", "4")
    ranks = launch_ranks(tmp_path, ranks=(0, 1, 2), world_size=3, extra_args=args, hosts=hosts)
    assert [rank.returncode for rank in ranks] == [0, 0, 0], [rank.stderr for rank in ranks]
    records = [read(tmp_path / f"rank-{rank}.json") for rank in (0, 1, 2)]
    layout = [(r["rank"], r["local_rank"], r["world_size"], r["host"]) for r in records]
    assert layout == [(0, 0, 3, "nodeA"), (1, 1, 3, "nodeA"), (2, 0, 3, "nodeB")]
    checks = {check["name"]: check for check in records[0]["checks"]}
    assert checks["unique_ranks"]["detail"] == "3 distinct ranks on 2 hosts"
    measured = records[0]["measurements"]
    assert (measured["tcp"]["ranks"], measured["tcp"]["hosts"]) == ([0, 2], ["nodeA", "nodeB"])
    scaling = measured["scaling"]
    assert scaling["nodes"] == 2
    assert (scaling["one_node"]["ranks"], scaling["all_nodes"]["ranks"]) == (2, 3)
    # Per rank: 3 ranks are 1.5 times the first node's 2, not 2 nodes' worth.
    expected = scaling["all_nodes"]["samples_per_s"] / 1.5 / scaling["one_node"]["samples_per_s"]
    assert scaling["efficiency"] == pytest.approx(expected, rel=1e-3)

    verdict = run_cli(["report", str(tmp_path), "--expected-world-size", "3"])
    assert verdict.returncode == 0, verdict.stderr
    assert json.loads(verdict.stdout)["nodes"] == ["nodeA", "nodeB"]


def test_bad_allreduce_contribution_is_blamed(tmp_path: Path, launch_ranks: Launcher) -> None:
    args = ("--checks", "collectives", *NO_MEASURE)
    ranks = launch_ranks(tmp_path, fault="allreduce:1", extra_args=args)
    assert [rank.returncode for rank in ranks] == [1, 1]
    for rank in ranks:
        assert (
            "all_reduce int64 size 1024 got 4 expected 3 at element 0 "
            "(1024 of 1024 elements wrong); rank 1 on nodeB sent 3 expected 2"
        ) in rank.stderr
        assert "all_reduce float32 size 1024 got 4.0 expected 3.0" in rank.stderr
    checks = {check["name"]: check["ok"] for check in read(tmp_path / "rank-1.json")["checks"]}
    # The checks after the failed ones still ran, in the same order on both ranks.
    assert [name for name, ok in checks.items() if not ok] == [
        "all_reduce_int64_size_1024",
        "all_reduce_int64_size_1048576",
        "all_reduce_float32_size_1024",
        "all_reduce_float32_size_1048576",
        "peers_passed",
    ]
    assert checks["broadcast_bfloat16_size_1048576"] is True
    assert checks["all_gather_int64_size_1024"] is True


def test_other_data_perturbed_params_and_slow_rank_are_named(
    tmp_path: Path, launch_ranks: Launcher
) -> None:
    """Three faults on rank 1 in one run (to save a run): each check names rank 1."""
    args = (
        *("--checks", "data,train", "--measure", "throughput", "--bench-steps", "5"),
        *("--max-straggler-ratio", "1.5"),
    )
    ranks = launch_ranks(tmp_path, fault="data:1,perturb_params:1,slow:1", extra_args=args)
    assert [rank.returncode for rank in ranks] == [1, 1]
    records = [read(tmp_path / f"rank-{rank}.json") for rank in (0, 1)]
    for record in records:
        failed = [check["name"] for check in record["checks"] if not check["ok"]]
        assert failed == ["data_identical", "params_identical", "straggler_floor", "peers_passed"]
        assert record["measurements"]["throughput"]["stragglers"][0]["rank"] == 1
    error = records[0]["error"]
    assert records[1]["error"] == error
    data_error, params_error, straggler_error = error.split("; ")
    assert data_error.startswith("data set of rank 1 on nodeB differs from rank 0 on nodeA")
    assert params_error.startswith(PARAMS_DISAGREE)
    assert straggler_error.startswith("rank 1 on nodeB takes ")
    assert straggler_error.endswith("(limit 1.5x)")
    checks = {check["name"]: check["ok"] for check in records[0]["checks"]}
    assert (checks["sampler_shards"], checks["loss_decreased"]) == (True, True)
    assert f"ddp_smoke: FAIL rank 0 on nodeA: {data_error}" in ranks[0].stderr
    assert not (tmp_path / "result.json").exists()

    verdict = run_cli(["report", str(tmp_path), "--expected-world-size", "2"])
    assert verdict.returncode == 1
    body = json.loads(verdict.stdout)
    assert (body["mode"], body["label"], body["job_id"]) == ("srun", "srun", JOB_ID)
    assert body["causes"] == [f"ranks 0-1 on nodeA, nodeB failed: {error}"]
    assert PARAMS_DISAGREE in verdict.stderr


def test_rank_sleeping_past_timeout_is_named(tmp_path: Path, launch_ranks: Launcher) -> None:
    # 10 s: the limit is the rendezvous's too, and two ranks importing torch beside a
    # busy scenario (make test) started 6 s apart under a 5 s limit.
    args = ("--timeout", "10", "--checks", "collectives", *NO_MEASURE)
    started = time.monotonic()
    rank0, rank1 = launch_ranks(tmp_path, fault="sleep:1", extra_args=args, kill_on_bad_exit=True)
    assert time.monotonic() - started < 120  # no hang (imports beside a busy scenario are slow)
    assert rank0.returncode == 1
    assert rank1.returncode != 0  # killed, like srun --kill-on-bad-exit does
    record = read(tmp_path / "rank-0.json")
    # Rank 0 gave up at its limit, not after rank 1's sleep (3 limits), whatever the imports
    # and the rendezvous took (26 s and 22 s beside two busy cores).
    assert 10 <= record["timings_s"]["all_reduce_int64_size_1024"] < 20, record
    error = record["error"]
    assert "all_reduce int64 size 1024 failed or timed out (limit 0:00:10)" in error
    assert error.endswith(
        "rank 1 on nodeB has not reached step all_reduce_int64_size_1024 (last entered: identify)"
    )

    verdict = run_cli(["report", str(tmp_path), "--expected-world-size", "2"])
    assert verdict.returncode == 1
    assert json.loads(verdict.stdout)["causes"] == [
        "rank 1 wrote no result: it did not finish",
        f"rank 0 on nodeA failed: {error}",
    ]


def test_rank_that_exits_is_named(tmp_path: Path, launch_ranks: Launcher) -> None:
    args = ("--checks", "collectives", *NO_MEASURE)
    rank0, rank1 = launch_ranks(tmp_path, fault="exit:1", extra_args=args)
    assert (rank0.returncode, rank1.returncode) == (1, 3)
    assert not (tmp_path / "rank-1.json").exists()
    error = read(tmp_path / "rank-0.json")["error"]
    assert error.startswith("RuntimeError: all_reduce int64 size 1024 failed or timed out")
    assert "rank 1 on nodeB has not reached step all_reduce_int64_size_1024" in error

    verdict = run_cli(["report", str(tmp_path), "--expected-world-size", "2", "--format", "text"])
    assert verdict.returncode == 1
    assert verdict.stdout.splitlines()[:3] == [
        f"ddp_smoke FAIL srun, job {JOB_ID}",
        "  - rank 1 wrote no result: it did not finish",
        f"  - rank 0 on nodeA failed: {error}",
    ]


def test_missing_peer_fails_within_timeout(tmp_path: Path, launch_ranks: Launcher) -> None:
    started = time.monotonic()
    (rank0,) = launch_ranks(tmp_path, ranks=(0,), extra_args=("--timeout", "3"))
    assert time.monotonic() - started < 30
    assert rank0.returncode == 1
    record = read(tmp_path / "rank-0.json")
    assert record["status"] == "fail"
    assert record["error"].startswith("RuntimeError: rendezvous at tcp://127.0.0.1:")
    assert record["checks"] == []

    verdict = run_cli(["report", str(tmp_path), "--expected-world-size", "2"])
    assert verdict.returncode == 1
    assert json.loads(verdict.stdout)["causes"] == [
        "rank 1 wrote no result: it did not finish",
        f"rank 0 on nodeA failed: {record['error']}",
    ]


def test_run_without_slurm_env_fails_clearly(tmp_path: Path) -> None:
    done = run_cli(["run", "--result-dir", str(tmp_path)])
    assert done.returncode == 1
    assert "ddp_smoke: cannot start: SLURM_NTASKS is not set: launch each rank with srun" in (
        done.stderr
    )
    assert list(tmp_path.iterdir()) == []
