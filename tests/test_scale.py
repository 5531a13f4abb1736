"""The scale bench's pure parts (bench/scale.py): inventory, summary, table, process tree."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import scale  # noqa: E402

import bench  # noqa: E402


def test_inventory_has_the_counted_nodes_and_one_shared_venv(tmp_path: Path) -> None:
    inv = scale.write_inventory(tmp_path / "inv", scale.node_names(3), tmp_path / "results")
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())["all"]["children"]["slurm_cluster"]
    computes = hosts["children"]["slurm_compute"]["hosts"]
    assert list(computes) == ["node1", "node2", "node3"]
    assert all(v == {"slurm_compute_gpus": 1} for v in computes.values())
    assert list(hosts["children"]["slurm_controller"]["hosts"]) == ["ctl"]
    extra = yaml.safe_load((inv / "group_vars/slurm_cluster/bench.yml").read_text())
    assert extra["pytorch_venv_shared"] is True
    # The demo's pin, 2.13.0+cpu, in root's folder on the shared filesystem.
    assert extra["cluster_venv"] == "/shared/.cluster/venvs/torch-2.13.0-cpu"
    assert extra["cluster_results_dir"] == str(tmp_path / "results")
    assert sorted(p.stem for p in (inv / "host_vars").iterdir()) == [
        "ctl",
        "node1",
        "node2",
        "node3",
    ]
    # The demo's group_vars come along.
    assert (inv / "group_vars/slurm_cluster/slurm.yml").is_file()


def test_platforms_put_ctl_in_the_controller_group() -> None:
    got = scale.platforms(["ctl", "node1"])
    assert [p["groups"] for p in got] == [["slurm_controller"], ["slurm_compute"]]
    assert all(p["image"] == "cluster-base:bookworm" for p in got)


def run(name: str, wall: float, ok: bool = True) -> dict:
    return {
        "name": name,
        "status": "successful" if ok else "failed",
        "wall_s": wall,
        "changed": 0,
        "hosts": 4,
        "tasks_per_host": {"max": 60, "mean": 40.0},
        "peak_rss_mib": 300.0,
        "min_available_mib": 9000,
        "max_swap_used_mib": 0,
        "errors": [],
    }


def count(n: int, rerun: list[float], add: float, smoke: float, floor: float) -> dict:
    return {
        "nodes": n,
        "runs": {
            "cold": [run("cold", 60.0 + n)],
            "rerun": [run(f"rerun-{i}", v) for i, v in enumerate(rerun, 1)],
            "doctor": [run("doctor", 5.0)],
            "smoke": [run("smoke", smoke)],
            "add": [run("add", add)],
            "floor": [run("floor", floor)],
        },
    }


def test_summary_takes_medians_and_judges_growth() -> None:
    summary = scale.summarise(
        [count(3, [20, 22, 21], 30, 10, 1.0), count(16, [40, 29, 31], 28, 25, 2.0)]
    )
    assert summary["by_nodes"]["3"]["rerun"] == 21
    assert summary["by_nodes"]["16"]["rerun"] == 31
    assert summary["by_nodes"]["16"]["rerun_x_floor"] == 15.5
    growth = summary["growth"]
    assert growth["rerun"]["ratio"] == round(31 / 21, 2) and growth["rerun"]["met"] is True
    assert growth["add"]["met"] is True  # 28 s at 16 nodes, 30 s at 3
    assert growth["smoke"]["ratio"] == 2.5 and growth["smoke"]["met"] is False
    table = scale.render_table(summary)
    assert "| no-change rerun (median of 3) | 21.0 s | 31.0 s |" in table
    assert "NOT met" in table
    # The label counts the reruns taken (--reruns 1 took one, not three).
    one = scale.summarise([count(16, [40], 28, 25, 2.0)])
    assert one["by_nodes"]["16"]["reruns"] == 1
    assert "| no-change rerun (median of 1) | 40.0 s |" in scale.render_table(one)


def test_failed_runs_do_not_count() -> None:
    entry = count(3, [20, 22, 21], 30, 10, 1.0)
    entry["runs"]["smoke"] = [run("smoke", 99.0, ok=False)]
    assert scale.phase_s(entry, "smoke") is None
    assert scale.summarise([entry])["growth"] == {}


def test_tree_rss_sees_a_child_process() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "x = bytearray(64 * 1024 * 1024); import time; time.sleep(5)"]
    )
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and scale.tree_rss_kib(os.getpid()) < 64 * 1024:
            time.sleep(0.1)
        assert scale.tree_rss_kib(os.getpid()) >= 64 * 1024
    finally:
        child.kill()
        child.wait()


def test_tasks_per_host_counts_every_result() -> None:
    result = bench.RunResult(
        name="rerun-1",
        kind="rerun",
        playbook="site.yml",
        status="successful",
        rc=0,
        wall_s=1.0,
        hosts={
            "ctl": bench.HostStats(ok=50, skipped=10),
            "node1": bench.HostStats(ok=30, skipped=5),
        },
    )
    assert scale.tasks_per_host(result) == {"max": 60, "mean": 47.5}


def test_slowest_tasks_name_the_largest_counts_tasks() -> None:
    small, large = count(3, [20, 21, 22], 30, 10, 1.0), count(16, [40, 41, 42], 30, 20, 4.0)
    large["runs"]["rerun"][0]["slowest"] = [
        {"role": "gpulab.slurm_cluster.munge", "task": "Checksum the key", "duration_s": 3.5}
    ]
    text = scale.slowest_tasks([small, large])
    assert "16 nodes" in text and "3.5 s  gpulab.slurm_cluster.munge : Checksum the key" in text
    assert scale.slowest_tasks([]) == ""


def test_children_skips_processes_that_end_mid_scan(tmp_path: Path) -> None:
    """A /proc where one process is gone (no stat), one stat is empty and one cut
    short: the scan keeps the readable ones and raises nothing."""
    for pid, text in {"10": "10 (bash) S 1 10 10", "11": "11 (a) b) R 10 11", "12": "",
                      "13": "13 (x"}.items():  # fmt: skip
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "stat").write_text(text)
    (tmp_path / "14").mkdir()  # ended: its folder left, its stat gone
    (tmp_path / "self").mkdir()
    assert scale._children(tmp_path) == {1: [10], 10: [11]}
    assert scale.tree_rss_kib(1, tmp_path) == 0  # no status files: 0, no error


def test_sampler_survives_a_failed_sample(monkeypatch) -> None:
    calls = {"n": 0}

    def flaky(root: int) -> int:
        calls["n"] += 1
        if calls["n"] == 2:
            raise ProcessLookupError(3, "No such process")
        return 1024

    monkeypatch.setattr(scale, "tree_rss_kib", flaky)
    monkeypatch.setattr(scale, "SAMPLE_S", 0.01)
    with scale.Sampler() as sampler:
        deadline = time.monotonic() + 5
        while sampler.samples < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert sampler.samples >= 5
    assert sampler.errors == ["ProcessLookupError: [Errno 3] No such process"]
    assert sampler.peak_rss_kib == 1024


def test_ab_summary_pairs_the_rounds_and_the_table_shows_it() -> None:
    ab = {"other": "/work/old", "this": [10.0, 12.0, 11.0], "other_s": [11.0, 11.5, 13.0]}
    got = scale.ab_summary(ab)
    assert got == {
        "other": "/work/old",
        "rounds": 3,
        "this_s": 11.0,
        "other_s": 11.5,
        "other_minus_this_s": 1.0,  # pairs +1.0, -0.5, +2.0
        "this_faster_in": 2,
        "tasks": [],
    }
    entry = count(3, [20, 22, 21], 30, 10, 1.0)
    entry["ab"] = ab
    summary = scale.summarise([entry])
    assert summary["by_nodes"]["3"]["ab"] == got
    table = scale.render_table(summary)
    assert "A/B at 3 nodes, plain reruns in turn (3 rounds): this 11.00 s" in table
    assert "other - this, median of the pairs +1.00 s (this faster in 2 of 3)" in table


def test_no_ab_without_both_sides() -> None:
    assert scale.ab_summary(None) is None
    assert scale.ab_summary({"other": "x", "this": [1.0], "other_s": []}) is None
    assert scale.summarise([count(3, [20], 30, 10, 1.0)])["by_nodes"]["3"]["ab"] is None


def test_other_must_be_a_checkout(tmp_path) -> None:
    with pytest.raises(SystemExit, match=r"has no site\.yml"):
        scale.main(["--nodes", "3", "--other", str(tmp_path)])


def fake_cluster(tmp_path: Path) -> scale.Cluster:
    cluster = scale.Cluster.__new__(scale.Cluster)
    cluster.count, cluster.inventory, cluster.env = 3, tmp_path / "inv", {"X": "1"}
    return cluster


def fake_run_plain(calls: list, walls: dict, changed: str = ""):
    def run_plain(name, kind, playbook, env=None, root=None, args=(), tasks=False):
        assert tasks, "the A/B asks for every task's time"
        calls.append((name, root, env))
        hosts = {"ctl": bench.HostStats(ok=5, changed=int(name == changed))}
        return bench.RunResult(name, kind, playbook, "successful", 0, walls[name], hosts)

    return run_plain


def test_ab_reruns_alternate_the_order_and_leave_the_warmup_out(tmp_path, monkeypatch) -> None:
    walls = {"ab-this-0": 9.0, "ab-other-0": 9.9, "ab-other-1": 11.0, "ab-this-1": 10.0}
    walls |= {"ab-this-2": 12.0, "ab-other-2": 12.5}
    calls: list = []
    monkeypatch.setattr(bench, "run_plain", fake_run_plain(calls, walls))
    out: dict = {}
    other = tmp_path / "old"
    assert scale.ab_reruns(fake_cluster(tmp_path), other, 2, out) is True
    assert [c[0] for c in calls] == [
        "ab-this-0",
        "ab-other-0",
        "ab-other-1",
        "ab-this-1",
        "ab-this-2",
        "ab-other-2",
    ]
    assert {c[1] for c in calls} == {bench.ROOT, other} and all(c[2] == {"X": "1"} for c in calls)
    assert out == {
        "ab": {"other": str(other), "this": [10.0, 12.0], "other_s": [11.0, 12.5], "tasks": []}
    }


def timed(name: str, wall: float, tasks: dict) -> bench.RunResult:
    run = bench.RunResult(name, "ab", "site.yml", "successful", 0, wall)
    # One entry per task name, as bench.run_plain gives them.
    run.tasks = bench.merge_tasks(
        bench.TaskTiming(role, task, seconds)
        for (role, task), seconds in tasks.items()
        for seconds in ([seconds] if not isinstance(seconds, list) else seconds)
    )
    return run


def test_ab_tasks_name_where_the_sides_differ_most() -> None:
    rounds = [
        {
            "this": timed("t1", 10, {("probe", "Probe"): 3.0, ("x", "Same"): 1.0}),
            "other": timed(
                "o1", 8, {("probe", "Probe"): 1.0, ("x", "Same"): 1.1, ("mon", "Read"): 0.5}
            ),
        },
        {
            "this": timed(
                "t2", 11, {("probe", "Probe"): 4.0, ("x", "Same"): 1.0, ("", "Twice"): [0.2, 0.3]}
            ),
            "other": timed(
                "o2", 9, {("probe", "Probe"): 1.0, ("x", "Same"): 1.0, ("mon", "Read"): 0.7}
            ),
        },
    ]
    got = scale.ab_tasks(rounds)
    # medians over the rounds; a task one side lacks counts 0 there; a name run twice is summed
    assert got[0] == {"task": "probe : Probe", "this_s": 3.5, "other_s": 1.0}
    assert got[1] == {"task": "mon : Read", "this_s": 0.0, "other_s": 0.6}
    assert {"task": "Twice", "this_s": 0.25, "other_s": 0.0} in got
    assert got[-1]["task"] == "x : Same"
    assert scale.ab_tasks(rounds, most=1) == got[:1]
    summary = scale.summarise(
        [
            {
                **count(3, [20], 30, 10, 1.0),
                "ab": {"other": "o", "this": [10, 11], "other_s": [8, 9], "tasks": got},
            }
        ]
    )
    table = scale.render_table(summary)
    assert "where they differ most" in table
    assert "  3.50 /   1.00 s  -2.50  probe : Probe" in table


def test_ab_reruns_stop_at_a_run_that_changes_something(tmp_path, monkeypatch) -> None:
    walls = {"ab-this-0": 9.0, "ab-other-0": 9.9, "ab-other-1": 11.0, "ab-this-1": 10.0}
    calls: list = []
    monkeypatch.setattr(bench, "run_plain", fake_run_plain(calls, walls, changed="ab-other-1"))
    out: dict = {}
    assert scale.ab_reruns(fake_cluster(tmp_path), tmp_path / "old", 2, out) is False
    assert [c[0] for c in calls] == ["ab-this-0", "ab-other-0", "ab-other-1"]
    assert out["stopped"].startswith("ab-other-1: successful, changed=1")
    assert out["ab"]["this"] == [] and out["ab"]["other_s"] == []
