"""Run the real smoke_train.yml against the molecule cluster: PASS, and a named FAIL."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "results"


def newest_report() -> dict:
    reports = sorted(RESULTS.glob("*.json"), key=lambda p: p.stat().st_mtime)
    assert reports, f"no report in {RESULTS}"
    return json.loads(reports[-1].read_text())


def test_smoke_job_passes_on_both_nodes(run_playbook) -> None:
    result = run_playbook("smoke_train.yml")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "Smoke job PASS: 2 ranks on 2 nodes (node1, node2), backend gloo" in out
    report = newest_report()
    assert report["verdict"] == "PASS"
    assert report["world_size"] == 2
    assert sorted(report["nodes"]) == ["node1", "node2"]
    assert report["last_loss"] < report["first_loss"]
    assert int(report["srun_rc"]) == 0


def test_smoke_job_fails_naming_the_bad_rank(run_playbook) -> None:
    result = run_playbook("smoke_train.yml", "-e", "smoke_train_fault=perturb_params:1")
    out = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0, out
    assert "Smoke job FAILED:" in out
    assert "parameters of rank 1 on node2 differ" in out
    report = newest_report()
    assert report["verdict"] == "FAIL"
