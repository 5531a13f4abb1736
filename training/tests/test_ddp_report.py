from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ddp_smoke.cli import main
from ddp_smoke.judge import compact_ranks
from ddp_smoke.report import render, report

HOSTS = ("nodeA", "nodeB", "nodeC")
MEASUREMENTS: dict[str, object] = {
    "sweep": {
        "op": "all_reduce",
        "dtype": "float32",
        "ranks": 2,
        "bus_factor": 1.0,
        "rows": [
            {
                "bytes": 4096,
                "count": 1024,
                "iters": 20,
                "time_us": 100.0,
                "algbw_GBps": 0.04096,
                "busbw_GBps": 0.04096,
            },
            {
                "bytes": 67108864,
                "count": 16777216,
                "iters": 2,
                "time_us": 50000.0,
                "algbw_GBps": 1.342177,
                "busbw_GBps": 1.342177,
            },
        ],
        "peak_bytes": 67108864,
        "peak_busbw_GBps": 1.342177,
        "peak_busbw_Gbps": 10.737416,
    },
    "tcp": {
        "ranks": [0, 1],
        "hosts": ["nodeA", "nodeB"],
        "same_host": False,
        "address": "nodeA:40000",
        "bytes": 67108864,
        "error": None,
        "to_peer_Gbps": 20.0,
        "from_peer_Gbps": 16.0,
        "Gbps": 16.0,
        "ifaces": ["eth0", "eth0"],
        "link_Mbps": 10000,
        "link_fraction": 1.6,
    },
    "busbw_fraction": 0.6711,
    "throughput": {
        "model": "mlp 256-1024-256-1",
        "batch": 64,
        "steps": 20,
        "ranks": [
            {"rank": 0, "host": "nodeA", "step_ms": 10.0, "samples_per_s": 6400.0},
            {"rank": 1, "host": "nodeB", "step_ms": 20.0, "samples_per_s": 3200.0},
        ],
        "typical_step_ms": 10.0,
        "worst_ratio": 2.0,
        "straggler_ratio": 1.5,
        "stragglers": [{"rank": 1, "host": "nodeB", "step_ms": 20.0, "ratio": 2.0}],
    },
    "scaling": {
        "nodes": 2,
        "steps": 20,
        "batch_per_rank": 64,
        "one_node": {"host": "nodeA", "ranks": 1, "samples_per_s": 5000.0},
        "all_nodes": {"ranks": 2, "samples_per_s": 9000.0},
        "efficiency": 0.9,
    },
}
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


NO_HEADLINE = {
    "peak_busbw_GBps": None,
    "peak_busbw_Gbps": None,
    "tcp_Gbps": None,
    "link_fraction": None,
    "busbw_fraction": None,
    "stragglers": None,
    "scaling_efficiency": None,
}


def test_pass_summary_of_schema_1_files(tmp_path: Path) -> None:
    """Rank files from before the launch modes and measurements still pass."""
    for rank in (0, 1):
        write(tmp_path, f"rank-{rank}.json", rank_record(rank))
    verdict = report(tmp_path, expected=2)
    assert verdict.passed
    assert verdict.to_dict() == {
        "verdict": "PASS",
        "job_id": "4242",
        "mode": "srun",
        "label": "srun",
        "nodes": ["nodeA", "nodeB"],
        "world_size": 2,
        "uids": [],
        "backend": "gloo",
        "torch": "2.13.0+cpu",
        "iface": None,
        "checks_passed": 1,
        "first_loss": 0.6,
        "last_loss": 0.2,
        "elapsed_s": 4.0,
        "phases_s": {},
        **NO_HEADLINE,
        "gpu_topology": None,
        "measurements": {},
    }


def measured_record(rank: int) -> dict[str, object]:
    iface = {"requested": "eth0", "GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth0"}
    return rank_record(
        rank, schema=2, mode="srun", label="sbatch", iface=iface, measurements=MEASUREMENTS
    )


def test_pass_summary_lifts_the_measurements(tmp_path: Path) -> None:
    for rank in (0, 1):
        write(tmp_path, f"rank-{rank}.json", measured_record(rank))
    body = report(tmp_path, expected=2).to_dict()
    assert (body["verdict"], body["mode"], body["label"]) == ("PASS", "srun", "sbatch")
    assert body["iface"] == {
        "requested": "eth0",
        "GLOO_SOCKET_IFNAME": "eth0",
        "NCCL_SOCKET_IFNAME": "eth0",
    }
    assert body["measurements"] == MEASUREMENTS
    assert {key: body[key] for key in NO_HEADLINE} == {
        "peak_busbw_GBps": 1.342177,
        "peak_busbw_Gbps": 10.737416,
        "tcp_Gbps": 16.0,
        "link_fraction": 1.6,
        "busbw_fraction": 0.6711,
        "stragglers": [{"rank": 1, "host": "nodeB", "step_ms": 20.0, "ratio": 2.0}],
        "scaling_efficiency": 0.9,
    }


def test_text_table_of_a_pass(tmp_path: Path) -> None:
    for rank in (0, 1):
        write(tmp_path, f"rank-{rank}.json", measured_record(rank))
    text = render(report(tmp_path, expected=2).to_dict())
    assert text.splitlines() == [
        "ddp_smoke PASS srun (label sbatch), job 4242: 2 ranks on nodeA, nodeB, backend gloo, "
        "torch 2.13.0+cpu, iface eth0",
        "checks: 1 passed; loss 0.6000 -> 0.2000; 4.0 s",
        "all_reduce float32 over 2 ranks (busbw = algbw x 1.000):",
        "      size     time us  algbw GB/s  busbw GB/s",
        "     4 KiB       100.0       0.041       0.041",
        "    64 MiB     50000.0       1.342       1.342",
        "peak busbw 1.342 GB/s = 10.74 Gbit/s at 64 MiB",
        "tcp nodeA <-> nodeB: 16.00 Gbit/s (rank 0 -> peer 20.00, peer -> rank 0 16.00), "
        "1.60x the 10000 Mbit/s link; peak busbw / tcp = 0.671",
        "compute throughput (mlp 256-1024-256-1, batch 64, 20 steps, no communication):",
        "  rank host               step ms   samples/s",
        "     0 nodeA               10.000      6400.0",
        "     1 nodeB               20.000      3200.0",
        "stragglers (> 1.5x typical 10.000 ms): rank 1 on nodeB (2.0x)",
        "scaling: 1 node (nodeA, 1 ranks) 5000.0 samples/s, 2 nodes (2 ranks) 9000.0 samples/s, "
        "efficiency 0.900",
    ]


def test_text_table_of_skipped_and_failed_measurements() -> None:
    measurements = {
        "sweep": {"skipped": "the sweep needs 2 or more ranks"},
        "tcp": {"error": "between rank 0 on a and rank 1 on b: rank 1 on b: TimeoutError: x"},
        "scaling": {"nodes": 1, "efficiency": None, "skipped": "one node: nothing to scale"},
    }
    body = {
        "verdict": "PASS",
        "mode": "spawn",
        "world_size": 1,
        "nodes": ["a"],
        "checks_passed": 3,
        "measurements": measurements,
    }
    assert render(body).splitlines()[2:] == [
        "sweep: skipped (the sweep needs 2 or more ranks)",
        "tcp: FAILED between rank 0 on a and rank 1 on b: rank 1 on b: TimeoutError: x",
        "scaling: skipped (one node: nothing to scale)",
    ]


def test_text_of_a_fail() -> None:
    body = {
        "verdict": "FAIL",
        "causes": ["rank 1 wrote no result: it did not finish"],
        "mode": "torchrun",
        "label": "torchrun",
        "job_id": "7",
    }
    assert render(body) == (
        "ddp_smoke FAIL torchrun, job 7\n  - rank 1 wrote no result: it did not finish"
    )


def test_fail_verdict_names_the_launch(tmp_path: Path) -> None:
    write(tmp_path, "rank-0.json", measured_record(0))
    assert report(tmp_path, expected=2).to_dict() == {
        "verdict": "FAIL",
        "cause": "rank 1 wrote no result: it did not finish",
        "causes": ["rank 1 wrote no result: it did not finish"],
        "mode": "srun",
        "label": "sbatch",
        "job_id": "4242",
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


def test_cli_text_format_and_json_copy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for rank in (0, 1):
        write(tmp_path, f"rank-{rank}.json", measured_record(rank))
    copy = tmp_path / "out" / "report.json"
    assert main(["report", str(tmp_path), "--format", "text", "--out", str(copy)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("ddp_smoke PASS srun (label sbatch), job 4242: 2 ranks on nodeA")
    assert "efficiency 0.900" in out
    assert err == ""
    saved = json.loads(copy.read_text())
    assert (saved["verdict"], saved["tcp_Gbps"]) == ("PASS", 16.0)


def test_report_runs_without_torch(tmp_path: Path) -> None:
    """The controller judges results with the system Python, which has no torch."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['torch'] = None; "
        "from ddp_smoke.cli import main; sys.exit(main(['report', sys.argv[1]]))"
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


def test_phases_are_the_slowest_ranks_time_per_phase() -> None:
    from ddp_smoke.judge import phases

    records = [
        {
            "timings_s": {
                "rendezvous": 0.1,
                "identify": 0.01,
                "train": 3.0,
                "sweep": 0.7,
                "tcp": 0.1,
                "params_identical": 0.002,
                "teardown": 0.001,
            }
        },
        {
            "timings_s": {
                "import": 1.2,
                "rendezvous": 0.5,
                "train": 2.5,
                "all_reduce_float32_size_1024": 0.01,
            }
        },
        {"no": "timings"},
    ]
    assert phases(records) == {
        "checks": 0.01,
        "import": 1.2,
        "measure": 0.8,
        "rendezvous": 0.5,
        "teardown": 0.001,
        "train": 3.0,
    }


def test_process_age_is_read_from_proc(tmp_path: Path) -> None:
    """The import phase: this process's age from its start tick and the uptime."""
    from ddp_smoke.launch import process_age_s

    hz = os.sysconf("SC_CLK_TCK")
    stat = tmp_path / "stat"
    # The name may hold spaces and parentheses: fields are counted after the last ")".
    stat.write_text("4242 (python3 (x) y) S " + " ".join(["0"] * 18) + f" {100 * hz} 0 0\n")
    uptime = tmp_path / "uptime"
    uptime.write_text("101.25 7.00\n")
    assert process_age_s(str(stat), str(uptime)) == 1.25
    uptime.write_text("99.0 7.00\n")  # a start after "now": not an age
    assert process_age_s(str(stat), str(uptime)) is None
    assert process_age_s(str(tmp_path / "missing"), str(uptime)) is None
    age = process_age_s()  # this very process, on Linux
    assert age is not None
    assert 0 <= age < 24 * 3600


def test_a_rank_preloads_what_ddp_imports() -> None:
    """The preload runs in the background and leaves torch._dynamo imported; a failing
    import stays quiet there (DDP imports it again and raises in place).

    In a process of its own, as a rank: Ansible's module_utils, which other tests
    of a pytest session import, patch sys.intern in a way torch._dynamo refuses.
    """
    import subprocess
    import sys

    pytest.importorskip("torch")
    script = (
        "import sys; from ddp_smoke import rank; t = rank.preload_ddp(); t.join(120); "
        "rank._import_quietly('ddp_smoke.no_such_module'); "
        "print(t.is_alive(), 'torch._dynamo' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert proc.stdout.split() == ["False", "True"], proc.stderr
