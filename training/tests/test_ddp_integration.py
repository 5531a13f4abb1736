"""Two real ranks on this machine over gloo, as srun would start them."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from ddp_launch import JOB_ID, Launcher, run_cli

pytestmark = pytest.mark.integration

CHECK_NAMES = [
    "world_size",
    "all_reduce_int64_size_1024",
    "all_reduce_int64_size_1048576",
    "all_reduce_float32_size_1024",
    "all_reduce_float32_size_1048576",
    "loss_decreased",
    "params_identical",
    "peers_passed",
]
PARAMS_DISAGREE = "parameters of rank 1 on nodeB differ from rank 0 on nodeA"


def read(path: Path) -> Any:  # noqa: ANN401 - parsed JSON
    return json.loads(path.read_text())


def test_two_ranks_pass(tmp_path: Path, launch_ranks: Launcher) -> None:
    ranks = launch_ranks(tmp_path, extra_args=("--expected-world-size", "2", "--epochs", "3"))
    assert [rank.returncode for rank in ranks] == [0, 0], [rank.stderr for rank in ranks]
    assert ranks[0].stdout.startswith("ddp_smoke: PASS rank 0 on nodeA: 8 checks")

    records = [read(tmp_path / f"rank-{rank}.json") for rank in (0, 1)]
    for rank, record in enumerate(records):
        assert record["rank"] == rank
        assert record["local_rank"] == rank
        assert record["world_size"] == 2
        assert record["host"] == ("nodeA", "nodeB")[rank]
        assert record["job_id"] == JOB_ID
        assert (record["backend"], record["device"], record["status"]) == ("gloo", "cpu", "pass")
        assert record["error"] is None
        assert [check["name"] for check in record["checks"]] == CHECK_NAMES
        assert all(check["ok"] for check in record["checks"])
        assert len(record["losses"]) == 3
    assert records[0]["losses"] == records[1]["losses"]

    result = read(tmp_path / "result.json")
    assert result["world_size"] == 2
    assert result["nodes"] == ["nodeA", "nodeB"]
    assert result["backend"] == "gloo"
    assert result["last_loss"] < result["first_loss"]
    assert result["first_loss"] == records[0]["losses"][0]
    written = sorted(path.name for path in tmp_path.iterdir())
    assert written == ["rank-0.json", "rank-1.json", "result.json"]

    verdict = run_cli(["report", str(tmp_path), "--expected-world-size", "2"])
    assert verdict.returncode == 0, verdict.stderr
    summary = json.loads(verdict.stdout)
    assert summary["verdict"] == "PASS"
    assert summary["nodes"] == ["nodeA", "nodeB"]
    assert (summary["first_loss"], summary["last_loss"]) == (
        result["first_loss"],
        result["last_loss"],
    )


def test_perturbed_params_fail_on_every_rank(tmp_path: Path, launch_ranks: Launcher) -> None:
    ranks = launch_ranks(tmp_path, fault="perturb_params:1")
    assert [rank.returncode for rank in ranks] == [1, 1]
    assert f"ddp_smoke: FAIL rank 0 on nodeA: {PARAMS_DISAGREE}" in ranks[0].stderr
    assert f"ddp_smoke: FAIL rank 1 on nodeB: {PARAMS_DISAGREE}" in ranks[1].stderr
    assert not (tmp_path / "result.json").exists()
    record = read(tmp_path / "rank-0.json")
    assert record["status"] == "fail"
    failed = [check["name"] for check in record["checks"] if not check["ok"]]
    assert failed == ["params_identical", "peers_passed"]

    verdict = run_cli(["report", str(tmp_path), "--expected-world-size", "2"])
    assert verdict.returncode == 1
    body = json.loads(verdict.stdout)
    assert body["verdict"] == "FAIL"
    assert body["cause"].startswith(f"ranks 0-1 on nodeA, nodeB failed: {PARAMS_DISAGREE}")
    assert PARAMS_DISAGREE in verdict.stderr


def test_bad_allreduce_contribution_is_blamed(tmp_path: Path, launch_ranks: Launcher) -> None:
    ranks = launch_ranks(tmp_path, fault="allreduce:1")
    assert [rank.returncode for rank in ranks] == [1, 1]
    for rank in ranks:
        assert (
            "all_reduce int64 size 1024 got 4 expected 3 at element 0 "
            "(1024 of 1024 elements wrong); rank 1 on nodeB sent 3 expected 2"
        ) in rank.stderr
        assert "all_reduce float32 size 1024 got 4.0 expected 3.0" in rank.stderr
    checks = {check["name"]: check["ok"] for check in read(tmp_path / "rank-1.json")["checks"]}
    assert checks["all_reduce_int64_size_1024"] is False
    assert checks["loss_decreased"] is True
    assert checks["params_identical"] is True


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
