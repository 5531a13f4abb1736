"""``plot`` with matplotlib (skipped where it is not installed) and without it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_smoke.cli import main

TRAINING = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_report(path: Path, label: str, scale: float) -> Path:
    rows = [
        {"bytes": size, "busbw_GBps": scale * size / (64 << 20)}
        for size in (4096, 65536, 1 << 20, 64 << 20)
    ]
    ranks = [
        {"rank": rank, "host": f"n{rank}", "step_ms": 10.0, "samples_per_s": 100.0 * scale}
        for rank in range(2)
    ]
    body = {
        "verdict": "PASS",
        "mode": "srun",
        "label": label,
        "measurements": {"sweep": {"rows": rows}, "throughput": {"ranks": ranks}},
    }
    path.write_text(json.dumps(body))
    return path


def test_plot_of_two_modes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    first = write_report(tmp_path / "srun.json", "srun", 1.0)
    second = write_report(tmp_path / "sbatch.json", "sbatch", 0.8)
    failed = tmp_path / "failed.json"
    failed.write_text(json.dumps({"verdict": "FAIL", "cause": "x", "causes": ["x"]}))
    out = tmp_path / "plots" / "smoke.png"
    assert main(["plot", str(first), str(second), str(failed), "--out", str(out)]) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert outcome == {
        "plot": str(out),
        "reports": ["srun", "sbatch"],
        "ignored": [f"{failed}: no measurements (verdict FAIL)"],
        "error": None,
    }
    assert out.read_bytes().startswith(PNG_MAGIC)


def test_plot_without_reports_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "absent.json"
    assert main(["plot", str(missing), "--out", str(tmp_path / "x.png")]) == 1
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["error"] == "no report with measurements to plot"
    assert outcome["ignored"][0].startswith(f"{missing}: unreadable: ")
    assert not (tmp_path / "x.png").exists()


def run_without(modules: list[str], args: list[str]) -> subprocess.CompletedProcess[str]:
    """``python -m ddp_smoke ARGS`` in a Python where ``modules`` cannot be imported."""
    blocked = "; ".join(f"sys.modules[{name!r}] = None" for name in modules)
    code = f"import sys; {blocked}; from ddp_smoke.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env={"PYTHONPATH": str(TRAINING), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_plot_without_matplotlib_or_torch_skips_with_a_note(tmp_path: Path) -> None:
    report = write_report(tmp_path / "srun.json", "srun", 1.0)
    out = tmp_path / "smoke.png"
    done = run_without(["torch", "matplotlib"], ["plot", str(report), "--out", str(out)])
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["plot"] is None
    assert outcome["skipped"].startswith("matplotlib is not installed")
    assert not out.exists()


def test_torchrun_args_without_torch() -> None:
    done = run_without(["torch"], ["torchrun-args", "--nproc-per-node", "2"])
    assert done.returncode == 1  # no Slurm variables here
    assert "ddp_smoke: cannot start: SLURM_NTASKS is not set" in done.stderr
    assert "ModuleNotFoundError" not in done.stderr
