from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddp_smoke.__main__ import main
from ddp_smoke.report import compact_ranks, report

HOSTS = ("nodeA", "nodeB", "nodeC")
PARAMS_ERROR = (
    "parameters of rank 1 on nodeB differ from rank 0 on nodeA: "
    "max abs diff 1.000e-02 in 321 of 321 values"
)


def rank_record(rank: int, world_size: int = 2, **changes: object) -> dict[str, object]:
    record: dict[str, object] = {
        "schema": 1,
        "rank": rank,
        "local_rank": 0,
        "world_size": world_size,
        "job_id": "4242",
        "host": HOSTS[rank],
        "master": "nodeA:24242",
        "backend": "gloo",
        "device": "cpu",
        "torch": "2.13.0+cpu",
        "nodes": list(HOSTS[:world_size]),
        "checks": [{"name": "world_size", "ok": True, "detail": "world size 2"}],
        "losses": [0.6, 0.3, 0.2],
        "elapsed_s": 3.0 + rank,
        "status": "pass",
        "error": None,
    }
    record.update(changes)
    return record


def write(result_dir: Path, name: str, record: dict[str, object]) -> None:
    (result_dir / name).write_text(json.dumps(record))


def failed_record(rank: int, error: str) -> dict[str, object]:
    check = {"name": "params_identical", "ok": False, "detail": error}
    return rank_record(rank, status="fail", error=error, checks=[check])


def test_pass_summary(tmp_path: Path) -> None:
    for rank in (0, 1):
        write(tmp_path, f"rank-{rank}.json", rank_record(rank))
    verdict = report(tmp_path, expected=2)
    assert verdict.passed
    assert verdict.to_dict() == {
        "verdict": "PASS",
        "job_id": "4242",
        "nodes": ["nodeA", "nodeB"],
        "world_size": 2,
        "backend": "gloo",
        "torch": "2.13.0+cpu",
        "first_loss": 0.6,
        "last_loss": 0.2,
        "elapsed_s": 4.0,
    }


def test_pass_without_expected_world_size(tmp_path: Path) -> None:
    for rank in (0, 1, 2):
        write(tmp_path, f"rank-{rank}.json", rank_record(rank, world_size=3))
    verdict = report(tmp_path, expected=None)
    assert verdict.passed
    assert verdict.summary["nodes"] == ["nodeA", "nodeB", "nodeC"]
    assert verdict.summary["world_size"] == 3


def test_missing_rank(tmp_path: Path) -> None:
    write(tmp_path, "rank-0.json", rank_record(0))
    verdict = report(tmp_path, expected=2)
    assert not verdict.passed
    assert verdict.causes == ["rank 1 wrote no result: it did not finish"]


def test_several_missing_ranks_are_compacted(tmp_path: Path) -> None:
    write(tmp_path, "rank-2.json", rank_record(2, world_size=5))
    verdict = report(tmp_path, expected=5)
    assert verdict.causes == ["ranks 0-1, 3-4 wrote no result: they did not finish"]


def test_empty_directory(tmp_path: Path) -> None:
    verdict = report(tmp_path, expected=None)
    assert verdict.causes == ["no rank-*.json files: no rank finished (did the job start?)"]


def test_missing_directory(tmp_path: Path) -> None:
    verdict = report(tmp_path / "absent", expected=2)
    assert verdict.causes[0] == f"result directory {tmp_path / 'absent'} does not exist"
    assert "ranks 0-1 wrote no result: they did not finish" in verdict.causes


def test_failed_rank_quotes_host_and_error(tmp_path: Path) -> None:
    write(tmp_path, "rank-0.json", rank_record(0))
    write(tmp_path, "rank-1.json", failed_record(1, "RuntimeError: CUDA error: ECC"))
    verdict = report(tmp_path, expected=2)
    assert verdict.causes == ["rank 1 on nodeB failed: RuntimeError: CUDA error: ECC"]


def test_same_failure_on_all_ranks_is_one_cause(tmp_path: Path) -> None:
    for rank in (0, 1):
        write(tmp_path, f"rank-{rank}.json", failed_record(rank, PARAMS_ERROR))
    verdict = report(tmp_path, expected=2)
    assert verdict.causes == [f"ranks 0-1 on nodeA, nodeB failed: {PARAMS_ERROR}"]


def test_failed_check_with_pass_status_still_fails(tmp_path: Path) -> None:
    write(tmp_path, "rank-0.json", rank_record(0))
    bad_check = [{"name": "world_size", "ok": False, "detail": "world size 1 expected 2"}]
    write(tmp_path, "rank-1.json", rank_record(1, checks=bad_check))
    verdict = report(tmp_path, expected=2)
    assert verdict.causes == ["rank 1 on nodeB failed: a check failed without an error message"]


def test_duplicate_rank(tmp_path: Path) -> None:
    write(tmp_path, "rank-0.json", rank_record(0))
    write(tmp_path, "rank-1.json", rank_record(0))
    verdict = report(tmp_path, expected=2)
    assert verdict.causes == [
        "rank-1.json holds the result of rank 0",
        "rank 0 reported twice: rank-0.json and rank-1.json",
        "rank 1 wrote no result: it did not finish",
    ]


def test_world_size_mismatch(tmp_path: Path) -> None:
    for rank in (0, 1):
        write(tmp_path, f"rank-{rank}.json", rank_record(rank))
    verdict = report(tmp_path, expected=3)
    assert verdict.causes == [
        "rank 2 wrote no result: it did not finish",
        "ranks 0-1 on nodeA, nodeB ran with world size 2, expected 3",
    ]


def test_extra_rank(tmp_path: Path) -> None:
    for rank in (0, 1, 2):
        write(tmp_path, f"rank-{rank}.json", rank_record(rank, world_size=2 if rank < 2 else 3))
    verdict = report(tmp_path, expected=2)
    assert verdict.causes == [
        "unexpected result from rank 2 on nodeC: the world size is 2",
        "rank 2 on nodeC ran with world size 3, expected 2",
    ]


def test_mixed_jobs(tmp_path: Path) -> None:
    write(tmp_path, "rank-0.json", rank_record(0))
    write(tmp_path, "rank-1.json", rank_record(1, job_id="4100"))
    verdict = report(tmp_path, expected=2)
    assert verdict.causes == [
        "rank files come from different jobs: job 4100 (ranks [1]), job 4242 (ranks [0])"
    ]


def test_unreadable_rank_file(tmp_path: Path) -> None:
    write(tmp_path, "rank-0.json", rank_record(0))
    (tmp_path / "rank-1.json").write_text("{not json")
    verdict = report(tmp_path, expected=2)
    assert verdict.causes[0].startswith("rank-1.json is unreadable: ")
    assert verdict.causes[1:] == ["rank 1 wrote no result: it did not finish"]


@pytest.mark.parametrize(
    ("ranks", "text"), [([0], "0"), ([0, 1, 2], "0-2"), ([0, 2, 3, 4, 9], "0, 2-4, 9")]
)
def test_compact_ranks(ranks: list[int], text: str) -> None:
    assert compact_ranks(ranks) == text


def test_cli_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for rank in (0, 1):
        write(tmp_path, f"rank-{rank}.json", rank_record(rank))
    assert main(["report", str(tmp_path), "--expected-world-size", "2"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["verdict"] == "PASS"
    assert err == ""


def test_cli_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "rank-0.json", rank_record(0))
    assert main(["report", str(tmp_path), "--expected-world-size", "2"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out) == {
        "verdict": "FAIL",
        "cause": "rank 1 wrote no result: it did not finish",
        "causes": ["rank 1 wrote no result: it did not finish"],
    }
    assert "  - rank 1 wrote no result: it did not finish" in err


def test_report_runs_without_torch(tmp_path: Path) -> None:
    """The controller judges results with the system Python, which has no torch."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['torch'] = None; "
        "from ddp_smoke.__main__ import main; sys.exit(main(['report', sys.argv[1]]))"
    )
    training = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        env={"PYTHONPATH": str(training), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert '"verdict": "FAIL"' in proc.stdout
    assert "no rank-*.json files" in proc.stdout
    assert "ModuleNotFoundError" not in proc.stderr
