"""tools/demo_prep.py: make demo's and make test's host preparation, its steps side by side."""

from __future__ import annotations

import importlib.util
import re
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("demo_prep", ROOT / "tools" / "demo_prep.py")
demo_prep = importlib.util.module_from_spec(spec)
sys.modules["demo_prep"] = demo_prep  # dataclasses look their module up
spec.loader.exec_module(demo_prep)
Step = demo_prep.Step


def sh(name: str, script: str, needs: tuple[str, ...] = (), limit_s: float = 60.0) -> Step:
    return Step(name, ("sh", "-c", script), needs, limit_s)


def run(steps: list[Step], tmp_path: Path) -> list:
    return demo_prep.run_steps(steps, tmp_path / "logs", echo=lambda _: None, poll_s=0.02)


def test_a_step_waits_for_what_it_needs_and_the_others_run_side_by_side(tmp_path: Path) -> None:
    flag = tmp_path / "docker-up"
    steps = [
        sh("docker", f"sleep 1; touch {flag}"),
        # Fails unless docker has ended before it starts.
        sh("image", f"test -e {flag}", needs=("docker",)),
        sh("venv", "sleep 1"),
    ]
    t0 = time.monotonic()
    done = {d.name: d for d in run(steps, tmp_path)}
    wall = time.monotonic() - t0
    assert set(done) == {"docker", "image", "venv"}
    assert done["image"].start >= done["docker"].end
    assert done["image"].needs == ("docker",)
    # docker and venv started together: the whole run is not their sum.
    assert done["venv"].start < 0.5 and done["docker"].start < 0.5
    assert wall < 1.8
    assert 1.0 <= done["venv"].seconds < 1.8


def test_a_failing_step_stops_the_run_with_its_name_and_its_log_tail(tmp_path: Path) -> None:
    seen = tmp_path / "after-failure"
    steps = [
        sh("packages", "sleep 0.3; for i in $(seq 1 30); do echo line $i; done; exit 3"),
        sh("image", f"touch {seen}", needs=("packages",)),
        sh("venv", "sleep 30"),
        sh("quick", "true"),
    ]
    t0 = time.monotonic()
    with pytest.raises(demo_prep.StepFailed) as failed:
        run(steps, tmp_path)
    assert time.monotonic() - t0 < 5  # venv's 30 s sleep was interrupted
    exc = failed.value
    assert exc.name == "packages"
    assert exc.why == "failed (exit status 3)"
    assert exc.log == tmp_path / "logs" / "packages.log"
    assert exc.tail.splitlines() == [f"line {i}" for i in range(11, 31)]
    assert [d.name for d in exc.done] == ["quick"]
    assert not seen.exists()  # what needed the failed step never started
    assert not (tmp_path / "logs" / "image.log").exists()
    message = exc.message()
    assert message.startswith(
        f"make demo: preparation step packages failed (exit status 3); the end of {exc.log}:\n"
    )
    assert message.endswith("line 29\nline 30")


def test_a_step_past_its_limit_is_stopped_and_named(tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(demo_prep.StepFailed) as failed:
        run([sh("image", "echo mmdebstrap; sleep 30", limit_s=0.3)], tmp_path)
    assert time.monotonic() - t0 < 5
    assert failed.value.name == "image"
    assert failed.value.why == "ran past its limit of 0.3 s"
    assert failed.value.tail == "mmdebstrap"


def test_an_interrupted_step_that_ignores_sigint_is_killed(tmp_path: Path) -> None:
    steps = [sh("stubborn", "trap '' INT; sleep 30"), sh("fails", "sleep 0.2; exit 1")]
    t0 = time.monotonic()
    with pytest.raises(demo_prep.StepFailed):
        demo_prep.run_steps(steps, tmp_path / "logs", echo=lambda _: None, poll_s=0.02, grace_s=0.3)
    assert time.monotonic() - t0 < 5


def test_a_step_that_cannot_start_is_named(tmp_path: Path) -> None:
    steps = [sh("venv", "sleep 30"), Step("wheelhouse", (str(tmp_path / "no-python"),))]
    with pytest.raises(demo_prep.StepFailed) as failed:
        run(steps, tmp_path)
    assert failed.value.name == "wheelhouse"
    assert failed.value.why.startswith("could not start ([Errno 2] No such file or directory")


@pytest.mark.parametrize(
    ("steps", "error"),
    [
        ([sh("a", "true"), sh("a", "true")], "step names repeat: ['a', 'a']"),
        ([sh("a", "true", needs=("b",))], "step a needs unknown steps ['b']"),
        (
            [sh("a", "true", needs=("b",)), sh("b", "true", needs=("a",)), sh("c", "true")],
            "steps wait for each other: ['a', 'b']",
        ),
    ],
)
def test_a_bad_order_is_refused_before_anything_runs(steps, error, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        run(steps, tmp_path)
    assert not (tmp_path / "logs").exists()


def test_the_demo_steps_and_what_each_waits_for() -> None:
    steps = demo_prep.demo_steps("/usr/bin/python3")
    demo_prep.check_order(steps)
    assert {s.name: s.needs for s in steps} == {
        "packages": (),
        "docker": ("packages",),
        "image": ("docker",),
        "venv": (),
        "wheelhouse": ("venv",),
    }
    argv = {s.name: s.argv for s in steps}
    hostprep = str(ROOT / "molecule" / "shared" / "hostprep.py")
    # The host's steps need only the standard library: the python given, not the venv's.
    for name in ("packages", "docker", "image"):
        assert argv[name] == ("/usr/bin/python3", hostprep, name)
    assert argv["venv"][-1] == "venv-demo"
    assert argv["wheelhouse"] == (str(ROOT / ".venv/bin/python"), hostprep, "wheelhouse")


def test_the_test_steps_add_to_the_demos_with_the_whole_venv() -> None:
    steps = demo_prep.make_test_steps("/usr/bin/python3")
    demo_prep.check_order(steps)
    assert {s.name: s.needs for s in steps} == {
        "packages": (),
        "docker": ("packages",),
        "image": ("docker",),
        "venv": (),
        "wheelhouse": ("venv",),
        # apt holds one dpkg lock: the second transaction after the first.
        "test-packages": ("packages",),
        "tools": ("venv", "test-packages"),
        "collection": ("venv",),
    }
    argv = {s.name: s.argv for s in steps}
    make = ("make", "--no-print-directory", "-C", str(ROOT))
    hostprep = str(ROOT / "molecule" / "shared" / "hostprep.py")
    assert argv["venv"] == (*make, "venv")  # linters, tests, torch: not venv-demo
    assert argv["test-packages"] == ("/usr/bin/python3", hostprep, "test-packages")
    assert argv["tools"] == (*make, "test-tools")
    assert argv["collection"] == (*make, "collection")
    demo = {s.name: s.argv for s in demo_prep.demo_steps("/usr/bin/python3")}
    assert all(argv[name] == demo[name] for name in ("packages", "docker", "image", "wheelhouse"))


def test_make_test_runs_its_preparation_and_names_its_times(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    times = tmp_path / "make-test-times.txt"
    monkeypatch.setattr(demo_prep, "LOG_DIR", tmp_path / "demo-prep")
    monkeypatch.setattr(
        demo_prep, "make_test_steps", lambda: [sh("venv", "true"), sh("tools", "exit 3")]
    )
    assert demo_prep.main(["--for", "test", "--times", str(times)]) == 1
    lines = times.read_text().splitlines()
    assert re.fullmatch(r"make test: preparation stopped after \d+ s: tools failed", lines[0])
    assert re.fullmatch(r"make test: prep venv 0 s \(0-0 s\)", lines[1])
    assert (tmp_path / "test-prep" / "tools.log").is_file()
    assert not (tmp_path / "demo-prep").exists()
    err = capsys.readouterr().err
    assert err.startswith("make test: preparation step tools failed (exit status 3)"), err
    text = (ROOT / "Makefile").read_text()
    assert "python3 tools/demo_prep.py --for test --times results/make-test-times.txt" in text


def test_the_time_lines() -> None:
    steps = [sh("packages", ""), sh("docker", "", needs=("packages",)), sh("venv", "")]
    done = [
        demo_prep.Done("venv", (), 0.1, 27.4),
        demo_prep.Done("packages", (), 0.1, 24.2),
        demo_prep.Done("docker", ("packages",), 24.3, 27.0),
    ]
    assert demo_prep.time_lines(steps, done, 27.6) == [
        "make demo: preparation 28 s (packages, docker, venv, side by side where they can)",
        "make demo: prep packages 24 s (0-24 s)",
        "make demo: prep docker 3 s (after packages; 24-27 s)",
        "make demo: prep venv 27 s (0-27 s)",
    ]
    assert demo_prep.time_lines(steps, done[:2], 30.2, failed="docker") == [
        "make demo: preparation stopped after 30 s: docker failed",
        "make demo: prep packages 24 s (0-24 s)",
        "make demo: prep venv 27 s (0-27 s)",
    ]


def test_main_appends_the_times_and_fails_with_the_step(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    times = tmp_path / "demo-times.txt"
    times.write_text("kept\n")
    monkeypatch.setattr(demo_prep, "LOG_DIR", tmp_path / "logs")
    monkeypatch.setattr(
        demo_prep, "demo_steps", lambda: [sh("venv", "true"), sh("image", "echo no; exit 2")]
    )
    assert demo_prep.main(["--times", str(times)]) == 1
    lines = times.read_text().splitlines()
    assert lines[0] == "kept"
    assert re.fullmatch(r"make demo: preparation stopped after \d+ s: image failed", lines[1])
    assert re.fullmatch(r"make demo: prep venv 0 s \(0-0 s\)", lines[2])
    assert len(lines) == 3
    err = capsys.readouterr().err
    assert "preparation step image failed (exit status 2)" in err and err.endswith("no\n")


def test_every_demo_requirement_is_pinned_as_in_requirements_txt() -> None:
    def pins(name: str) -> list[str]:
        lines = (ROOT / name).read_text().splitlines()
        return [line for line in lines if line and not line.startswith("#")]

    demo, full = pins("requirements-demo.txt"), pins("requirements.txt")
    assert demo and all(re.fullmatch(r"[\w.\[\]-]+==[\w.+]+", pin) for pin in demo), demo
    assert [pin for pin in demo if pin not in full] == []
    names = {pin.split("==")[0] for pin in demo}
    assert {"ansible", "ansible-core", "molecule", "molecule-plugins[docker]"} <= names


def load_hostprep():
    sys.path.insert(0, str(ROOT / "molecule" / "shared"))  # hostprep imports rootfs, vm
    try:
        path = ROOT / "molecule" / "shared" / "hostprep.py"
        spec = importlib.util.spec_from_file_location("hostprep", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "molecule" / "shared"))


TEST_TOOLS = {"qemu-system-x86_64", "qemu-img", "mkfs.ext4", "ssh", "promtool", "chromium"}
TEST_PACKAGES = "chromium e2fsprogs openssh-client prometheus qemu-system-x86 qemu-utils"


@pytest.mark.parametrize(
    ("step", "absent", "installed"),
    [
        # make demo's (and make test's first): with recommends, as docker.io always was.
        ("packages", {"dockerd", "mmdebstrap"}, ["docker.io", "mmdebstrap"]),
        ("packages", {"mmdebstrap"}, ["mmdebstrap"]),
        ("packages", set(), None),
        # make test's second: without recommends.
        ("test-packages", TEST_TOOLS, ["--no-install-recommends", *TEST_PACKAGES.split()]),
        ("test-packages", {"promtool"}, ["--no-install-recommends", "prometheus"]),
        ("test-packages", set(), None),
    ],
)
def test_hostprep_packages_are_one_apt_transaction(step, absent, installed, monkeypatch) -> None:
    hostprep = load_hostprep()
    ran: list[list[str]] = []
    monkeypatch.setattr(hostprep.shutil, "which", lambda c: None if c in absent else f"/x/{c}")
    monkeypatch.setattr(hostprep.os, "geteuid", lambda: 0)
    monkeypatch.setattr(hostprep, "run", lambda cmd, **_: ran.append(cmd))
    {"packages": hostprep.ensure_packages, "test-packages": hostprep.ensure_test_packages}[step]()
    if installed is None:
        assert ran == []
    else:
        assert ran == [
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", *installed],
        ]


def test_hostprep_test_packages_as_an_ordinary_user_names_what_is_missing(monkeypatch) -> None:
    hostprep = load_hostprep()
    monkeypatch.setattr(hostprep.shutil, "which", lambda c: None if c == "chromium" else "/x")
    monkeypatch.setattr(hostprep.os, "geteuid", lambda: 1000)
    with pytest.raises(SystemExit, match="chromium missing; run as root"):
        hostprep.ensure_test_packages()


def test_the_image_tree_is_one_mmdebstrap_call_removed_afterwards(tmp_path, monkeypatch) -> None:
    """The Docker and VM images start from the same call: minbase, usr-is-merged
    through mmdebstrap's merged-usr hook (not usrmerge and perl), the package
    lists kept for the roles' first apt task, no mirror named (the tool's defaults)."""
    rootfs = load_hostprep().rootfs
    ran: list[list[str]] = []
    monkeypatch.setattr(rootfs.shutil, "which", lambda c: f"/usr/bin/{c}")
    monkeypatch.setattr(rootfs, "_run", lambda cmd, **_: ran.append(cmd))
    with rootfs.bootstrap("trixie", ["python3", "systemd"], tmp_path) as tree:
        assert tree.parent.parent == tmp_path
        seen = tree.parent
    assert ran == [
        [
            "mmdebstrap",
            "--variant=minbase",
            "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
            "--skip=cleanup/apt/lists",
            "--include=python3,systemd",
            "trixie",
            str(tree),
        ]
    ]
    assert not any("://" in arg for arg in ran[0])
    assert not seen.exists()


def test_mmdebstrap_is_installed_when_missing_and_refused_without_root(monkeypatch) -> None:
    rootfs = load_hostprep().rootfs
    ran: list[list[str]] = []
    monkeypatch.setattr(rootfs.shutil, "which", lambda c: None)
    monkeypatch.setattr(rootfs, "_run", lambda cmd, **_: ran.append(cmd))
    monkeypatch.setattr(rootfs.os, "geteuid", lambda: 1000)
    with pytest.raises(SystemExit, match="mmdebstrap is missing; run as root or install it"):
        rootfs.ensure_mmdebstrap()
    assert ran == []
    monkeypatch.setattr(rootfs.os, "geteuid", lambda: 0)
    rootfs.ensure_mmdebstrap()
    assert ran[-1] == ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "mmdebstrap"]
