"""The Python distribution: the wheel pip builds offline, installed into a fresh venv.

The wheel and sdist are built by training/build_wheel.py, as ``make collection``
and the roles build them (setuptools' hooks, no build isolation, no network, this
interpreter's setuptools), checked with ``twine check --strict``, and the wheel
installed with ``pip install --no-index --no-deps`` into a plain venv that has no
torch: the ``ddp-smoke`` script's controller commands must run there. The
integration tests lend that venv this interpreter's torch and run real ranks
through the installed script and ``torchrun --standalone``.
"""

from __future__ import annotations

import email.parser
import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path

import pytest
from ddp_launch import free_port, interpreters

from ddp_smoke import __version__

TRAINING = Path(__file__).resolve().parents[1]
WHEEL_NAME = "ddp_smoke-0.1.0-py3-none-any.whl"
SDIST_NAME = "ddp_smoke-0.1.0.tar.gz"
REPOSITORY = "https://github.com/gpulab/slurm_cluster"
MODULES = (
    "__init__",
    "__main__",
    "accept",
    "batch",
    "benchmarks",
    "checks",
    "cli",
    "crashes",
    "faults",
    "judge",
    "launch",
    "modes",
    "network",
    "rank",
    "report",
)
TIMEOUT_S = 120


def clean_env(venv: Path | None = None, **extra: str) -> dict[str, str]:
    """This environment without pip's settings, Slurm's or a PYTHONPATH to the source."""
    drop = ("PIP_", "SLURM", "MASTER_", "DDP_SMOKE_", "TORCHELASTIC_")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(drop)
        and key not in ("PYTHONPATH", "VIRTUAL_ENV", "LOCAL_RANK", "RANK", "WORLD_SIZE")
    }
    # No pip.conf either: no find-links, no extra index, no constraints.
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.update(PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
    if venv is not None:
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    env.update(extra)
    return env


def run(
    argv: list[str | Path], env: Mapping[str, str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(arg) for arg in argv],
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def build_wheel(out: Path) -> Path:
    """The wheel (and sdist) from training/build_wheel.py, the one build the roles use too."""
    setuptools = pytest.importorskip("setuptools", minversion="77", reason="needs setuptools 77+")
    assert setuptools
    dist = out / "dist"
    done = run([sys.executable, TRAINING / "build_wheel.py", "--out", dist, "--sdist"], clean_env())
    assert done.returncode == 0, done.stdout + done.stderr
    built = sorted(path.name for path in dist.iterdir())
    assert built == [WHEEL_NAME, SDIST_NAME], done.stdout
    return dist / WHEEL_NAME


def make_venv(python: str, where: Path, wheel: Path) -> Path:
    """A plain venv (no system site-packages) with only the wheel installed."""
    made = run([python, "-m", "venv", where], clean_env())
    if made.returncode != 0 or not (where / "bin" / "pip").exists():
        pytest.skip(f"cannot create a venv with pip here: {made.stderr.strip()[-300:]}")
    done = run([where / "bin" / "pip", "install", "--no-index", "--no-deps", wheel], clean_env())
    assert done.returncode == 0, done.stdout + done.stderr
    return where


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module", params=interpreters())
def venv(
    request: pytest.FixtureRequest, wheel: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    return make_venv(str(request.param), tmp_path_factory.mktemp("venv") / "v", wheel)


def test_the_wheel_holds_the_package_and_no_tests(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    code = sorted(name for name in names if not name.startswith("ddp_smoke-0.1.0.dist-info/"))
    assert code == sorted(f"ddp_smoke/{module}.py" for module in MODULES)
    assert sorted(path.stem for path in (TRAINING / "ddp_smoke").glob("*.py")) == sorted(MODULES)
    assert not [name for name in names if "test" in name.lower() or name.endswith(".pyc")]


def test_the_metadata(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read("ddp_smoke-0.1.0.dist-info/METADATA").decode()
        entry_points = archive.read("ddp_smoke-0.1.0.dist-info/entry_points.txt").decode()
        license_text = archive.read("ddp_smoke-0.1.0.dist-info/licenses/LICENSE").decode()
    fields = email.parser.Parser().parsestr(metadata)
    assert (fields["Name"], fields["Version"]) == ("ddp-smoke", __version__)
    assert fields["Requires-Python"] == ">=3.10"
    assert sorted(fields.get_all("Provides-Extra")) == ["plot", "torch"]
    # Nothing unconditional: the controller side is standard library only.
    assert sorted(fields.get_all("Requires-Dist")) == [
        'matplotlib; extra == "plot"',
        'torch<3,>=2.1; extra == "torch"',
    ]
    assert "[console_scripts]\nddp-smoke = ddp_smoke.cli:main" in entry_points
    # The licence as an SPDX expression (PEP 639) and its text inside the wheel.
    assert fields["Metadata-Version"] == "2.4"
    assert fields["License-Expression"] == "Apache-2.0"
    assert fields.get_all("License-File") == ["LICENSE"]
    assert license_text == (TRAINING.parent / "LICENSE").read_text()
    urls = dict(url.split(", ", 1) for url in fields.get_all("Project-URL"))
    assert urls["Repository"] == REPOSITORY
    assert set(urls) == {"Homepage", "Documentation", "Repository", "Issues", "Changelog"}
    classifiers = fields.get_all("Classifier")
    assert "Operating System :: POSIX :: Linux" in classifiers
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")]  # the expression says it


def test_twine_check_strict(wheel: Path) -> None:
    """What an index would check on upload: metadata and the README's rendering."""
    pytest.importorskip("twine", reason="twine (requirements.txt) checks the distributions")
    dists = sorted(wheel.parent.iterdir())
    done = run([sys.executable, "-m", "twine", "check", "--strict", *dists], clean_env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2, done.stdout


def test_one_version() -> None:
    """``ddp_smoke.__version__`` is the only version: pyproject reads it from there."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((TRAINING / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    dynamic = project["tool"]["setuptools"]["dynamic"]
    assert dynamic["version"] == {"attr": "ddp_smoke.__version__"}
    assert __version__ == "0.1.0"


def test_the_venv_has_no_torch_and_the_installed_package(venv: Path) -> None:
    code = "import importlib.util as u, ddp_smoke; print(u.find_spec('torch'), ddp_smoke.__file__)"
    done = run([venv / "bin" / "python", "-c", code], clean_env(venv), cwd=venv)
    assert done.returncode == 0, done.stderr
    spec, where = done.stdout.split()
    assert spec == "None"
    assert Path(where).is_relative_to(venv)


@pytest.mark.parametrize("entry", [["ddp-smoke"], ["python", "-m", "ddp_smoke"]])
def test_version(venv: Path, entry: list[str]) -> None:
    done = run([venv / "bin" / entry[0], *entry[1:], "--version"], clean_env(venv), cwd=venv)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"ddp_smoke {__version__}\n", "")


def test_controller_commands_run_without_torch(venv: Path, tmp_path: Path) -> None:
    """``report --help``, ``report``, ``accept`` from the script; ``run`` fails before torch."""
    script = venv / "bin" / "ddp-smoke"
    env = clean_env(venv)
    helped = run([script, "report", "--help"], env, cwd=tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert "--expected-world-size" in helped.stdout

    results = tmp_path / "srun"
    results.mkdir()
    for rank, host in enumerate(("gpu01", "gpu02")):
        body = {"schema": 2, "rank": rank, "world_size": 2, "job_id": "7", "host": host}
        body.update(mode="srun", status="pass", checks=[{"name": "world_size", "ok": True}])
        body.update(nodes=["gpu01", "gpu02"])
        (results / f"rank-{rank}.json").write_text(json.dumps(body))
    out = results / "report.json"
    reported = run([script, "report", results, "--expected-world-size=2", "--out", out], env)
    assert reported.returncode == 0, reported.stderr
    assert json.loads(reported.stdout)["verdict"] == "PASS"

    history = tmp_path / "history" / "smoke.jsonl"
    accepted = run(
        [script, "accept", out, "--nodes=gpu01,gpu02", "--pending=gpu02", "--history", history],
        env,
    )
    assert accepted.returncode == 0, accepted.stderr
    verdict = json.loads(accepted.stdout)
    assert (verdict["passed"], verdict["modes"]) == (True, {"srun": "PASS"})
    assert len(history.read_text().splitlines()) == 1

    # Outside Slurm, `run` stops before it imports torch, with its own message.
    started = run([script, "run", "--result-dir", tmp_path / "run"], env)
    assert started.returncode == 1
    assert "ddp_smoke: cannot start:" in started.stderr
    assert "torch" not in started.stderr


# --- Real ranks from the installed wheel (torch lent by this interpreter) --------------


@pytest.fixture(scope="module")
def venv_with_torch(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel, and this interpreter's site-packages for torch.

    Installing torch offline would need its wheel and its dependencies' wheels; a
    ``.pth`` line makes the venv see the ones already here (after its own
    site-packages, which hold ddp_smoke: the source tree is not on the path).
    """
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        pytest.skip("no torch in this interpreter to lend")
    where = make_venv(sys.executable, tmp_path_factory.mktemp("venv-torch") / "v", wheel)
    site = next((where / "lib").glob("python3*/site-packages"))
    (site / "lent_torch.pth").write_text(f"{Path(spec.origin).parents[1]}\n")
    return where


@pytest.mark.integration
def test_srun_mode_through_the_script(venv_with_torch: Path, tmp_path: Path) -> None:
    """``srun -N2 --ntasks-per-node=1 ddp-smoke run``: two simulated srun tasks."""
    script = venv_with_torch / "bin" / "ddp-smoke"
    port = free_port()
    argv = [script, "run", "--result-dir", tmp_path, "--expected-world-size=2", "--measure=none"]
    envs = [
        clean_env(
            venv_with_torch,
            SLURM_PROCID=str(rank),
            SLURM_NTASKS="2",
            SLURM_LOCALID="0",
            SLURM_JOB_ID="4242",
            SLURM_STEP_NODELIST="localhost",
            SLURMD_NODENAME=host,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        for rank, host in enumerate(("nodeA", "nodeB"))
    ]
    procs = [
        subprocess.Popen(
            [str(arg) for arg in argv],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for env in envs
    ]
    outputs = [proc.communicate(timeout=TIMEOUT_S) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    reported = run([script, "report", tmp_path, "--expected-world-size=2"], clean_env())
    assert reported.returncode == 0, reported.stderr
    body = json.loads(reported.stdout)
    assert (body["verdict"], body["mode"], body["nodes"]) == ("PASS", "srun", ["nodeA", "nodeB"])


@pytest.mark.integration
def test_torchrun_standalone_from_the_wheel(venv_with_torch: Path, tmp_path: Path) -> None:
    """The README's one-machine line: ``torchrun --standalone ... -m ddp_smoke run``."""
    argv = [venv_with_torch / "bin" / "python", "-m", "torch.distributed.run", "--standalone"]
    argv += ["--nproc-per-node=2", "--max-restarts=0", "-m", "ddp_smoke", "run"]
    argv += ["--mode=torchrun", "--result-dir", tmp_path, "--expected-world-size=2"]
    argv += ["--checks=collectives", "--timeout=60"]
    started = run(argv, clean_env(venv_with_torch), cwd=tmp_path)
    assert started.returncode == 0, started.stdout + started.stderr
    script = venv_with_torch / "bin" / "ddp-smoke"
    reported = run([script, "report", tmp_path, "--format=text"], clean_env(), cwd=tmp_path)
    assert reported.returncode == 0, reported.stderr
    assert reported.stdout.startswith("ddp_smoke PASS torchrun")


def test_the_wheel_imports_in_place_as_the_roles_use_it(wheel: Path, tmp_path: Path) -> None:
    """The smoke_train role puts the wheel on the shared filesystem and runs
    ``python3 -m ddp_smoke`` with it as PYTHONPATH (a pure-Python wheel is a zip)."""
    results = tmp_path / "srun"
    results.mkdir()
    body = {"schema": 2, "rank": 0, "world_size": 1, "job_id": "7", "host": "gpu01"}
    body.update(mode="srun", status="pass", checks=[{"name": "world_size", "ok": True}])
    (results / "rank-0.json").write_text(json.dumps(body))
    env = clean_env(PYTHONPATH=str(wheel))
    argv = [sys.executable, "-m", "ddp_smoke", "report", results, "--expected-world-size=1"]
    done = run(argv, env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["verdict"] == "PASS"
    where = run([sys.executable, "-c", "import ddp_smoke; print(ddp_smoke.__file__)"], env)
    assert where.stdout.strip() == f"{wheel}/ddp_smoke/__init__.py", where.stdout
