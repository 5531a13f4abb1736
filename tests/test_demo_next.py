"""tools/demo_next.py: what `make demo` ends with, read from the run's files and the inventory."""

from __future__ import annotations

import importlib.util
import json
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("demo_next", ROOT / "tools" / "demo_next.py")
demo_next = importlib.util.module_from_spec(spec)
spec.loader.exec_module(demo_next)


def write_run(folder: Path, name: str, verdict: str, age: float) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    modes = [{"mode": m, "passed": verdict == "PASS"} for m in ("srun", "sbatch")]
    path.write_text(json.dumps({"run_id": name, "verdict": verdict, "modes": modes}))
    stamp = time.time() - age
    os.utime(path, (stamp, stamp))
    return path


def test_the_newest_verdict_the_report_and_the_way_in(tmp_path: Path) -> None:
    local = tmp_path / "local"
    write_run(local, "20261204T100000Z-1", "FAIL", age=60)
    newest = write_run(local, "20261204T100100Z-2", "PASS", age=0)
    # A doctor's report is not the smoke job's verdict, even the newest.
    (local / "doctor-20261204T100200Z-3.json").write_text(json.dumps({"verdict": "FAIL"}))
    (local / "cluster-report.html").write_text("<html></html>")
    rc, text = demo_next.summary(ROOT / "inventory" / "local", tmp_path)
    assert rc == 0, text
    lines = text.splitlines()
    assert lines[0] == f"Verdict: PASS (sbatch, srun), kept in {newest}"
    assert lines[1] == f"Report:  {local / 'cluster-report.html'} (open it in a browser)"
    # The demo inventory's first login host and first lab user.
    assert lines[2].startswith("As a lab user: docker exec -it login su - alice")


def test_a_fail_fails(tmp_path: Path) -> None:
    write_run(tmp_path / "local", "20261204T100000Z-1", "FAIL", age=0)
    rc, text = demo_next.summary(ROOT / "inventory" / "local", tmp_path)
    assert rc == 1 and text.startswith("Verdict: FAIL")


def test_no_verdict_or_a_fail_fails(tmp_path: Path) -> None:
    rc, text = demo_next.summary(ROOT / "inventory" / "local", tmp_path)
    assert rc == 1 and "No smoke verdict" in text and "smoke_train.yml" in text
