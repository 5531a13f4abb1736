"""bench/interleave.py without a cluster: the order of the rounds, the figures, the problems."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import interleave  # noqa: E402

import bench  # noqa: E402

# Wall times per side, round by round (round 0 is the warm-up).
TIMES = {
    "this": [20.0, 12.0, 13.0, 12.5, 14.0],
    "other": [25.0, 13.0, 12.8, 13.5, 15.0],
    "peer": [9.0, 8.0, 9.0, 8.5, 10.0],
}


class Fake:
    def __init__(self, changed: str = "", fail: str = "") -> None:
        self.calls: list[tuple[str, str, Path, list[str]]] = []
        self.changed, self.fail = changed, fail

    def __call__(
        self, name: str, playbook: str, root: Path, args: Sequence[str] = ()
    ) -> bench.RunResult:
        self.calls.append((name, playbook, root, list(args)))
        side, r = name.rsplit("-", 1)
        hosts = {"ctl": bench.HostStats(ok=5, changed=int(name == self.changed))}
        status = "failed" if name == self.fail else "successful"
        rc = 2 if name == self.fail else 0
        return bench.RunResult(
            name, "rerun_plain", playbook, status, rc, TIMES[side][int(r)], hosts
        )


def test_rounds_run_this_the_other_the_peer_then_the_reverse(tmp_path: Path) -> None:
    order = interleave.sides(tmp_path / "old", tmp_path / "peer")
    fake = Fake()
    done = interleave.rounds(order, 4, 1, fake)
    assert [c[0] for c in fake.calls[:9]] == [
        "this-0",
        "other-0",
        "peer-0",
        "peer-1",
        "other-1",
        "this-1",
        "this-2",
        "other-2",
        "peer-2",
    ]
    assert fake.calls[0][1:] == ("site.yml", bench.ROOT, [])
    assert fake.calls[1][1:] == ("site.yml", tmp_path / "old", [])
    assert fake.calls[2][1:] == ("galaxy-slurm.yml", tmp_path / "peer", ["-i", "inventory.ini"])
    assert len(done) == 5


def test_figures_leave_the_warmup_out_and_pair_the_rounds(tmp_path: Path) -> None:
    order = interleave.sides(tmp_path / "old", tmp_path / "peer")
    done = interleave.rounds(order, 4, 1, Fake())
    summary = interleave.summarise(done, 1)
    assert summary["rounds"] == 4
    assert summary["median_s"] == {"this": 12.75, "other": 13.25, "peer": 8.75}
    # other - this per round: 1.0, -0.2, 1.0, 1.0 -> median 1.0; this faster in 3.
    assert summary["other_minus_this_s"] == 1.0
    assert summary["this_faster_rounds"] == 3
    assert summary["this_x_peer"] == round(12.75 / 8.75, 2)
    assert summary["problems"] == []
    text = interleave.table(done, summary, 1)
    assert "other - this, median of the paired rounds: +1.00 s (this faster in 3 of 4)" in text
    assert "this / peer: 1.46x" in text


def test_a_rerun_that_changes_something_is_a_problem(tmp_path: Path) -> None:
    done = interleave.rounds(interleave.sides(None, tmp_path), 2, 0, Fake(changed="peer-1"))
    summary = interleave.summarise(done, 0)
    assert summary["problems"] == ["peer-1: changed=1"]
    assert "other_minus_this_s" not in summary


def test_a_failed_run_stops_the_rounds(tmp_path: Path) -> None:
    fake = Fake(fail="other-2")
    done = interleave.rounds(interleave.sides(tmp_path, None), 4, 1, fake)
    assert fake.calls[-1][0] == "other-2"
    assert len(done) == 3
    summary = interleave.summarise(done, 1)
    assert summary["rounds"] == 1  # round 2 is incomplete
    assert summary["problems"] == ["other-2: failed, rc 2"]


def test_plain_runs_another_checkout_with_its_own_config(tmp_path: Path) -> None:
    """The peer's folder or an old worktree: its ansible.cfg, its arguments, its recap."""
    (tmp_path / "ansible.cfg").write_text("[defaults]\ninventory = hosts.ini\n")
    (tmp_path / "hosts.ini").write_text("h1 ansible_connection=local\n")
    (tmp_path / "other.ini").write_text(
        f"h2 ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    (tmp_path / "play.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.ping:\n"
    )
    run = interleave.plain("peer-0", "play.yml", tmp_path, ["-i", "other.ini"])
    assert (run.status, run.rc) == ("successful", 0), run.errors
    assert run.hosts == {"h2": bench.HostStats(ok=1)}


@pytest.mark.parametrize("flag", ["--help"])
def test_the_script_documents_itself(flag: str) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench/interleave.py"), flag],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--other" in out and "--peer" in out and "--rounds" in out
