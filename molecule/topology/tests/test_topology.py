"""The smoke job fitted to an uneven lab: partitions, GPU counts per node, refusals."""

from __future__ import annotations

import json
import time
from pathlib import Path

from conftest import host

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "results"
CTL = host("ctl")


def newest_summary() -> dict:
    """The newest smoke_train.yml verdict (results/<run id>.json; not the doctor's)."""
    found = []
    for path in RESULTS.glob("*.json"):
        if path.name.startswith(("doctor-", "fault-suite")):
            continue
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "partitions" in data:
            found.append((path.stat().st_mtime, data))
    assert found, f"no smoke verdict in {RESULTS}"
    return max(found, key=lambda f: f[0])[1]


def test_slurm_sees_the_uneven_layout() -> None:
    out = CTL.check_output("sinfo --noheader --Node --format='%P %N %G' | sort")
    assert out.splitlines() == ["cpu ctl (null)", "gpu* node1 gpu:2", "gpu* node2 gpu:1"]
    # The inventory name gpu-big is node1 to Slurm.
    assert host("gpu-big").check_output("hostname") == "node1"


def test_every_partition_passes_with_one_rank_per_gpu(run_playbook) -> None:
    done = run_playbook("smoke_train.yml", "-e", "smoke_train_partitions=all")
    out = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 0, out[-4000:]
    assert "partition cpu: 1 ranks on 1 nodes (ctl)" in out
    assert "partition gpu: 3 ranks on 2 nodes (node1, node2)" in out
    summary = newest_summary()
    assert summary["verdict"] == "PASS"
    layout = {p["partition"]: p for p in summary["partitions"]}
    assert layout["gpu"]["gpus"] == {"node1": 2, "node2": 1}
    assert layout["gpu"]["world_size"] == 3 and layout["cpu"]["world_size"] == 1
    run = RESULTS / summary["run_id"]
    for mode in ("srun", "torchrun", "sbatch", "spawn"):
        report = json.loads((run / "gpu" / f"{mode}.json").read_text())
        assert report["verdict"] == "PASS", mode
        assert report["world_size"] == 3, mode
        assert sorted(report["nodes"]) == ["node1", "node2"], mode


def test_no_options_tests_the_default_partition_only(run_playbook) -> None:
    done = run_playbook("smoke_train.yml", "-e", '{"smoke_train_modes": ["srun"]}')
    assert done.returncode == 0, done.stdout[-3000:]
    summary = newest_summary()
    assert [p["partition"] for p in summary["partitions"]] == ["gpu"]


def test_a_request_slurm_cannot_satisfy_is_refused_in_seconds(run_playbook) -> None:
    for extra, words in (
        (
            "smoke_train_nodes=3",
            "partition gpu has 2 node(s) (node1, node2) but smoke_train_nodes=3",
        ),
        ("smoke_train_partition=big", "partition big does not exist or has no nodes"),
    ):
        start = time.monotonic()
        done = run_playbook("smoke_train.yml", "-e", extra)
        took = time.monotonic() - start
        out = " ".join(done.stdout.split())
        assert done.returncode != 0
        assert words in out, out[-3000:]
        assert "Launch mode" not in out  # nothing was submitted
        assert took < 30, took
