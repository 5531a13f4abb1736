"""The two gates that let a no-change rerun skip pip and the torch import.

plugins/modules/venv_packages.py decides whether pip must run;
roles/pytorch/files/verify_torch.py keeps its last passing report under a
fingerprint. Both are judged against this venv (CPU torch from /opt/wheels).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = ROOT / "roles" / "pytorch" / "files"
sys.path.insert(0, str(FILES))

import venv_packages as vs  # noqa: E402
import verify_torch as vt  # noqa: E402
from adhoc import run_module  # noqa: E402

torch_version = pytest.importorskip("torch").__version__  # e.g. 2.13.0+cpu
public, _, local = torch_version.partition("+")


@pytest.mark.parametrize(
    ("requirements", "variant", "why"),
    [
        ([f"torch=={public}"], "", []),  # a pin without +local takes any build
        ([f"torch=={torch_version}"], "", []),
        (["torch", "PyYAML"], "", []),
        (["pyyaml"], "", []),  # names compare normalised
        ([f"torch=={public}"], local, []),
        ([f"torch=={public}+cu999"], "", ["wanted"]),
        (["torch==1.0.0"], "", ["wanted"]),
        (["torch"], "cu999", ["variant cu999 wanted"]),
        (["no-such-package-here"], "", ["is not installed"]),
        (["torch>=2"], "", ["pip decides"]),
        (["torch[opt]==1"], "", ["pip decides"]),
        (["torch", "no-such-package-here"], "", ["is not installed"]),
    ],
)
def test_missing(requirements, variant, why) -> None:
    found = vs.missing(requirements, variant)
    assert len(found) == len(why), found
    for text, wanted in zip(found, why, strict=True):
        assert wanted in text


def test_module_gates_pip_under_ansible(tmp_path) -> None:
    """The module as the role runs it: by its FQCN, in this Python, found in the collection."""

    def run(*args: str) -> dict:
        return run_module("venv_packages", " ".join(args), tmp_path)

    ok = run(f"requirements=torch=={public}", f"variant={local}")
    assert ok["satisfied"] is True and ok["missing"] == [], ok
    assert ok["msg"].startswith("all installed"), ok
    need = run("requirements=torch", "variant=cu999")
    assert need["satisfied"] is False and "variant cu999 wanted" in need["missing"][0], need
    # O(python): another Python's environment, read by one run of it.
    other = run(f"python={sys.executable}", f"requirements=torch=={public}", f"variant={local}")
    assert other["satisfied"] is True, other
    absent = run(f"python={sys.executable}", "requirements=no-such-dist-xyz")
    assert absent["missing"] == ["no-such-dist-xyz is not installed"], absent
    # A venv not made yet (a cold run): not installed, and the module still runs.
    cold = run(f"python={tmp_path}/venv/bin/python", "requirements=torch")
    assert cold["satisfied"] is False, cold
    assert cold["missing"] == [f"{tmp_path}/venv/bin/python does not exist"], cold


def test_missing_reads_given_versions() -> None:
    """missing() judges the versions read from another Python when given."""
    versions = {"torch": "2.13.0+cu128", "numpy": None}
    why = vs.missing(["torch==2.13.0", "numpy", "x>=1"], "cu128", versions)
    assert why == ["numpy is not installed", "x>=1: pip decides"]
    assert vs.requirement_names(["torch==2.13.0", "numpy", "x>=1"]) == ["torch", "numpy"]


@pytest.fixture
def kept(tmp_path, monkeypatch):
    """verify_torch with its kept file in tmp_path and a counting fake import."""
    calls = []
    outcome = {"torch": torch_version, "cuda_available": False, "device_count": 0}

    def fake_report():
        calls.append(1)
        return dict(outcome)

    path = tmp_path / "kept.json"
    monkeypatch.setattr(vt, "kept_path", lambda: path)
    monkeypatch.setattr(vt, "report", fake_report)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return path, calls, outcome


def test_pass_is_kept_and_reused(kept) -> None:
    path, calls, _ = kept
    first = vt.main([])
    assert first["cached"] is False and len(calls) == 1
    assert json.loads(path.read_text())["fingerprint"] == vt.fingerprint()
    second = vt.main([])
    assert second["cached"] is True and len(calls) == 1
    assert second["verified_at"] == first["verified_at"]
    assert {k: second[k] for k in ("torch", "device_count")} == {
        "torch": torch_version,
        "device_count": 0,
    }


def test_fresh_verifies_again(kept) -> None:
    _, calls, _ = kept
    vt.main([])
    assert vt.main(["--fresh"])["cached"] is False
    assert len(calls) == 2


def test_changed_fingerprint_verifies_again(kept, monkeypatch) -> None:
    _, calls, _ = kept
    vt.main([])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # a different GPU view
    assert vt.main([])["cached"] is False
    assert len(calls) == 2


def test_failure_is_never_kept_and_drops_the_old_pass(kept) -> None:
    path, calls, outcome = kept
    vt.main([])
    assert path.exists()
    outcome.clear()
    outcome["error"] = "import torch failed: ImportError: libcudart.so.12"
    failed = vt.main(["--fresh"])
    assert failed["error"].startswith("import torch failed") and failed["cached"] is False
    assert not path.exists()
    vt.main([])  # nothing kept: the failure is looked at again
    assert len(calls) == 3


def test_no_write_keeps_nothing(kept) -> None:
    path, calls, _ = kept
    vt.main(["--no-write"])
    assert not path.exists()
    vt.main(["--no-write"])
    assert len(calls) == 2


@pytest.mark.parametrize("content", ["not json", '{"fingerprint": 1}', '{"report": []}'])
def test_unreadable_kept_file_verifies_again(kept, content) -> None:
    path, calls, _ = kept
    path.write_text(content)
    assert vt.main([])["cached"] is False and len(calls) == 1


def test_the_report_imports_what_a_ddp_job_imports(monkeypatch) -> None:
    """A job module that fails to import is the finding, named; the list is fingerprinted.

    In a process of its own, as the role runs it (Ansible's module_utils,
    imported by other tests here, patch sys.intern in a way torch._dynamo refuses).
    """
    script = (
        "import sys, json; sys.path.insert(0, sys.argv[1]); import verify_torch as vt; "
        "vt.JOB_MODULES += tuple(sys.argv[2:]); r = vt.report(); "
        "print(json.dumps([r.get('error'), 'torch._dynamo' in sys.modules]))"
    )

    def report(*extra: str) -> list:
        out = subprocess.run(
            [sys.executable, "-c", script, str(FILES), *extra],
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(out.stdout)

    assert report() == [None, True]  # DDP's constructor imports torch._dynamo
    error, _ = report("torch.no_such_module")
    assert error.startswith("import torch.no_such_module failed: ModuleNotFoundError")
    before = vt.fingerprint()
    monkeypatch.setattr(vt, "JOB_MODULES", (*vt.JOB_MODULES, "torch.no_such_module"))
    assert vt.fingerprint() != before  # a changed list verifies (and compiles) again


def test_a_moved_or_added_entry_beside_torch_verifies_again(tmp_path, monkeypatch) -> None:
    """The fingerprint reads torch's folders and every package's record, not only torch's.

    A fake site-packages (torch's metadata and folders, one other package): a
    renamed torch folder (it still has its RECORD), a file gone from torch/lib,
    another package installed or rewritten: each changes the fingerprint.
    """
    site = tmp_path / "site-packages"
    (site / "torch" / "lib").mkdir(parents=True)
    (site / "torch" / "lib" / "libtorch_cpu.so").write_text("x")
    info = site / "torch-9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 9.9\n")
    (info / "RECORD").write_text("torch/__init__.py,,\n")
    other = site / "numpy-1.0.dist-info"
    other.mkdir()
    (other / "RECORD").write_text("numpy/__init__.py,,\n")
    dist = next(iter(vt.metadata.distributions(path=[str(site)], name="torch")))
    monkeypatch.setattr(vt.metadata, "distribution", lambda name: dist)
    seen = {vt.fingerprint()}

    def changed(step) -> None:
        step()
        now = vt.fingerprint()
        assert now not in seen, step.__doc__
        seen.add(now)

    def hide() -> None:
        """torch's folder renamed, its metadata left"""
        (site / "torch").rename(site / "torch.hidden")

    def restore() -> None:
        """torch's folder back, one library gone"""
        (site / "torch.hidden").rename(site / "torch")
        (site / "torch" / "lib" / "libtorch_cpu.so").unlink()

    def rewrite() -> None:
        """another package reinstalled (its RECORD rewritten)"""
        (other / "RECORD").write_text("numpy/__init__.py,,\nnumpy/core.py,,\n")

    def add() -> None:
        """a package added beside torch"""
        (site / "nvidia_nccl-1.dist-info").mkdir()

    for step in (hide, restore, rewrite, add):
        changed(step)
    assert vt.fingerprint() in seen  # nothing changed: the same


def _proc(root: Path, procs: dict[int, list[str]]) -> str:
    for pid, argv in procs.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (root / "self").mkdir()  # not a pid
    return str(root)


def test_pips_into_finds_the_pips_of_this_venv_only(tmp_path) -> None:
    v = "/opt/pytorch/venv"
    proc = _proc(
        tmp_path,
        {
            11: [f"{v}/bin/python3.11", f"{v}/bin/pip3", "install", "torch"],  # through #!
            12: [f"{v}/bin/pip", "install", "numpy"],
            13: [f"{v}/bin/python", "-m", "pip", "install", "x"],
            21: [f"{v}/bin/python", "train.py"],  # the venv's python, not pip
            22: ["/usr/bin/python3", "/other/venv/bin/pip3", "install", "torch"],
            23: ["/usr/bin/python3", "-m", "pip", "install", "torch"],
            24: ["/usr/bin/python3", f"{v}2/bin/pip3"],  # a venv beside it
        },
    )
    assert vs.pips_into(v, proc) == [11, 12, 13]
    assert vs.pips_into(v + "/", proc) == [11, 12, 13]
    assert vs.pips_into("/nowhere", proc) == []


def test_the_check_waits_for_a_pip_left_running_in_the_venv(tmp_path) -> None:
    """A real process running the venv's bin/pip3: the module judges only once it
    ended, and names it; one that outlives wait_pip fails the check, named."""
    bindir = tmp_path / "venv" / "bin"
    bindir.mkdir(parents=True)
    pip = bindir / "pip3"
    pip.write_text("import sys, time\ntime.sleep(float(sys.argv[1]))\n")
    python = f"python={tmp_path}/venv/bin/python"

    slow = subprocess.Popen([sys.executable, str(pip), "3"])
    try:
        started = time.monotonic()
        out = run_module("venv_packages", f"{python} requirements=torch wait_pip=30", tmp_path)
        assert time.monotonic() - started >= 2, out
        assert out["waited_for"] == [slow.pid], out
        assert out["satisfied"] is False and "does not exist" in out["msg"], out
    finally:
        slow.kill()
        slow.wait()

    stuck = subprocess.Popen([sys.executable, str(pip), "60"])
    try:
        out = run_module("venv_packages", f"{python} requirements=torch wait_pip=1", tmp_path)
        assert "satisfied" not in out, out  # failed: no judgement of a venv pip writes to
        assert f"pip (pid {stuck.pid}) is still installing" in out["msg"], out
        assert f"kill {stuck.pid}" in out["msg"], out
    finally:
        stuck.kill()
        stuck.wait()

    idle = run_module("venv_packages", f"{python} requirements=torch wait_pip=30", tmp_path)
    assert idle["waited_for"] == [], idle
