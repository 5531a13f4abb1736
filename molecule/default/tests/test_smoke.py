"""Run the real smoke_train.yml against the molecule cluster: PASS, and a named FAIL."""

from __future__ import annotations

import json

from conftest import RESULTS, host

MODES = ["srun", "torchrun", "sbatch", "spawn"]


def newest_report() -> dict:
    reports = sorted(RESULTS.glob("*.json"), key=lambda p: p.stat().st_mtime)
    assert reports, f"no report in {RESULTS}"
    return json.loads(reports[-1].read_text())


def test_smoke_job_passes_on_both_nodes(run_playbook) -> None:
    result = run_playbook("smoke_train.yml")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert (
        "Smoke job PASS: srun, torchrun, sbatch, spawn; partition gpu: 2 ranks on 2 nodes "
        "(node1, node2), "
        "backend gloo" in " ".join(out.split())
    )
    summary = newest_report()
    assert summary["verdict"] == "PASS"
    assert [m["mode"] for m in summary["modes"]] == MODES
    assert all(m["passed"] and int(m["launch_rc"]) == 0 for m in summary["modes"])
    run = RESULTS / summary["run_id"] / "gpu"
    for mode in MODES:
        report = json.loads((run / f"{mode}.json").read_text())
        assert report["verdict"] == "PASS", mode
        assert report["world_size"] == 2
        assert sorted(report["nodes"]) == ["node1", "node2"]
        assert report["last_loss"] < report["first_loss"]
        # Every rank ran as the proof account (cluster_proof_uid), never as root.
        assert report["uids"] == [59000], mode
    srun = json.loads((run / "srun.json").read_text())
    assert srun["tcp_Gbps"] > 0
    assert srun["peak_busbw_GBps"] > 0
    assert srun["scaling_efficiency"] > 0
    assert (run / "smoke.png").read_bytes()[:4] == b"\x89PNG"


def test_smoke_job_fails_naming_the_bad_rank(run_playbook) -> None:
    result = run_playbook(
        "smoke_train.yml",
        "-e",
        '{"smoke_train_fault": "perturb_params:1", "smoke_train_modes": ["srun", "sbatch"]}',
    )
    out = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0, out
    assert "Smoke job FAILED in srun, sbatch:" in out
    assert "parameters of rank 1 on node2 differ" in out
    summary = newest_report()
    assert summary["verdict"] == "FAIL"
    assert [m["passed"] for m in summary["modes"]] == [False, False]


def test_a_venv_without_torch_stops_the_smoke_job_naming_that_node(run_playbook) -> None:
    """torch gone from node2's venv: the doctor finds it (without importing torch) before
    anything launches, naming node2 and the import error; node1 is not blamed.
    doctor.yml names it too, though the role's check kept a passing report there."""
    node2 = host("node2")
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = node2.check_output(f'/opt/pytorch/venv/bin/python -I -c "{where}"')
    moved = node2.run(f"mv {site}/torch {site}/torch.hidden-by-test")
    assert moved.rc == 0, moved.stderr
    try:
        result = run_playbook("smoke_train.yml", "-e", '{"smoke_train_modes": ["srun"]}')
        # doctor.yml reads the report the pytorch role's check kept: node2's
        # no longer holds (a folder beside torch's changed), so it imports.
        doctor = run_playbook("playbooks/doctor.yml")
    finally:
        node2.run(f"mv {site}/torch.hidden-by-test {site}/torch")
    said = " ".join((doctor.stdout + doctor.stderr).split())
    assert doctor.returncode != 0, said[-3000:]
    assert (
        "node2 torch.venv: import torch failed in /opt/pytorch/venv/bin/python: "
        "ModuleNotFoundError: No module named 'torch'" in said
    ), said[-3000:]
    assert "node1 torch.venv" not in said.split("Doctor FAIL: ", 1)[-1]
    out = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0, out
    assert (
        "node2 torch.venv: torch not found in /opt/pytorch/venv/bin/python: "
        "ModuleNotFoundError: No module named 'torch'" in out
    )
    assert "node1 torch.venv" not in out
    # Stopped at the doctor: no rank was launched.
    assert "Smoke job FAILED" not in out
    assert "Doctor FAIL" in out
