"""The package's shape: the controller side imports without torch, also from the role's zip."""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest
from ddp_launch import interpreters

TRAINING = Path(__file__).resolve().parents[1]
CONTROLLER_MODULES = (
    "cli",
    "launch",
    "judge",
    "crashes",
    "report",
    "batch",
    "modes",
    "accept",
    "__main__",
)
# Run inside a rank but need only the standard library: cheap to import, tested anywhere.
RANK_STDLIB_MODULES = ("network", "faults")
# Run inside a rank and import torch at import time; only ``run`` imports them.
TORCH_MODULES = ("rank", "checks", "benchmarks")
# One file, one concern: past this, split the module (issue 26).
MAX_MODULE_LINES = 700

# A meta-path finder that refuses torch, as on a controller without it.
BLOCK_TORCH = """
import importlib.abc, sys

class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)")
        return None

sys.meta_path.insert(0, NoTorch())
"""


def run_python(
    python: str, code: str, pythonpath: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-c", code, *args],
        env={
            "PYTHONPATH": str(pythonpath),
            "PATH": "/usr/bin:/bin",
            "PYTHONDONTWRITEBYTECODE": "1",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("python", interpreters())
def test_controller_modules_import_without_torch(python: str) -> None:
    imports = "\n".join(f"import ddp_smoke.{name}" for name in CONTROLLER_MODULES)
    code = f"""{BLOCK_TORCH}
{imports}
assert not [name for name in sys.modules if name.split(".")[0] == "torch"]
try:
    import ddp_smoke.rank
except ModuleNotFoundError as exc:
    print("rank:", exc)
else:
    raise SystemExit("ddp_smoke.rank imported although torch is hidden")
"""
    done = run_python(python, code, TRAINING)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "rank: No module named 'torch' (hidden by the test)\n"


@pytest.mark.parametrize("python", interpreters())
def test_report_from_the_zip_without_torch(python: str, tmp_path: Path) -> None:
    """The role zips ``training/ddp_smoke`` and runs ``python3 -m ddp_smoke`` from the zip."""
    package = tmp_path / "ddp_smoke.zip"
    with zipfile.ZipFile(package, "w") as archive:
        for path in sorted((TRAINING / "ddp_smoke").glob("*.py")):
            archive.write(path, f"ddp_smoke/{path.name}")
    rank = {"schema": 2, "rank": 0, "world_size": 1, "job_id": "7", "host": "gpu01"}
    rank.update(mode="srun", status="pass", checks=[{"name": "world_size", "ok": True}])
    results = tmp_path / "results"
    results.mkdir()
    (results / "rank-0.json").write_text(json.dumps(rank))
    code = f"""{BLOCK_TORCH}
import runpy
sys.argv = ["ddp_smoke", "report", sys.argv[1], "--expected-world-size", "1"]
runpy.run_module("ddp_smoke", run_name="__main__")
"""
    done = run_python(python, code, package, str(results))
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert (body["verdict"], body["nodes"], body["checks_passed"]) == ("PASS", ["gpu01"], 1)


def package_modules() -> dict[str, int]:
    """Every module of the package and its line count."""
    return {
        path.stem: len(path.read_text().splitlines())
        for path in sorted((TRAINING / "ddp_smoke").glob("*.py"))
    }


def test_no_module_is_over_the_line_limit() -> None:
    modules = package_modules()
    too_long = {name: lines for name, lines in modules.items() if lines > MAX_MODULE_LINES}
    assert too_long == {}, f"split these modules of ddp_smoke by concern: {too_long}"
    assert len(modules) >= 13  # the glob found the package


def test_every_module_says_where_it_runs() -> None:
    """A new module joins one list above, so the torch-free tests cover it."""
    declared = {"__init__", *CONTROLLER_MODULES, *RANK_STDLIB_MODULES, *TORCH_MODULES}
    assert set(package_modules()) == declared


@pytest.mark.parametrize("python", interpreters())
def test_rank_modules_import_torch_only_where_they_use_it(python: str) -> None:
    code = f"""{BLOCK_TORCH}
import importlib
for name in {RANK_STDLIB_MODULES!r}:
    importlib.import_module("ddp_smoke." + name)
assert not [name for name in sys.modules if name.split(".")[0] == "torch"]
for name in {TORCH_MODULES!r}:
    try:
        importlib.import_module("ddp_smoke." + name)
    except ModuleNotFoundError as exc:
        print(name + ":", exc)
"""
    done = run_python(python, code, TRAINING)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"{name}: No module named 'torch' (hidden by the test)" for name in TORCH_MODULES
    ]
