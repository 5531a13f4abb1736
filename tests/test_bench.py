"""bench/bench.py without a cluster: parsing, summary, verdicts, comparison, rendering.

The fixtures in tests/fixtures/bench/ are real ansible-runner events of small
playbooks on localhost (see record.py there); the values asserted below are
the ones those recordings hold. One test runs ansible-runner on localhost to
prove how the bench calls it.
"""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "bench"
sys.path.insert(0, str(ROOT / "bench"))

import bench  # noqa: E402

SLEEP = "demo : Sleep a host-dependent time"


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def recorded(name: str, kind: str = "", run_name: str = "", **override: Any) -> bench.RunResult:
    """A fixture parsed as the bench parses a run: status, rc and wall time from the runner."""
    fx = fixture(name)
    run = bench.parse_events(
        fx["events"],
        name=run_name or name,
        kind=kind or name,
        playbook=fx["playbook"],
        status=fx["status"],
        rc=fx["rc"],
        wall_s=fx["wall_s"],
    )
    return replace(run, **override)


def has_row(text: str, row: str) -> bool:
    """row is a line of text, whatever the column padding."""
    return row.split() in [line.split() for line in text.splitlines()]


def task(run: bench.RunResult, label: str) -> bench.TaskTiming:
    return next(t for t in run.tasks if t.label == label)


def full_set() -> list[bench.RunResult]:
    """A complete bench: create, cold, three reruns, two smokes, both floors."""
    rerun_walls = (15.0, 12.0, 30.0)
    return [
        bench.RunResult("create", "create", "molecule create", "successful", 0, 40.0),
        recorded("cold", "cold", wall_s=100.0),
        *(recorded("rerun", "rerun", f"rerun-{i}", wall_s=w) for i, w in enumerate(rerun_walls, 1)),
        recorded("rerun", "smoke", "smoke-1", playbook="smoke_train.yml", wall_s=31.0),
        recorded("rerun", "smoke", "smoke-2", playbook="smoke_train.yml", wall_s=40.0),
        recorded("floor_ping", "floor", "floor-ping", wall_s=5.0),
        recorded("floor_facts", "floor_facts", "floor-facts", wall_s=8.0),
    ]


def doc_of(runs: list[bench.RunResult], started: str = "2026-11-30T17:00:00Z") -> dict[str, Any]:
    machine = {"nproc": 2, "memory_gib": 23.4, "ansible_core": "2.19.14", "commit": "a" * 40}
    return {
        "schema_version": bench.SCHEMA_VERSION,
        "started": started,
        "machine": machine,
        "runs": [r.to_dict() for r in runs],
        "summary": bench.summarise(runs),
        "problems": bench.problems(runs),
    }


# --- parsing -------------------------------------------------------------


def test_cold_run_counts_per_host() -> None:
    run = recorded("cold")
    assert run.status == "successful"
    assert run.rc == 0
    assert run.wall_s == 16.307
    assert run.playbook == "play.yml"
    assert run.hosts == {
        "h1": bench.HostStats(ok=5, changed=1, skipped=2),
        "h2": bench.HostStats(ok=5, changed=1, skipped=2),
        "localhost": bench.HostStats(ok=1),
    }
    assert run.changed == 2
    assert run.errors == []


def test_tasks_in_run_order_with_changed_hosts() -> None:
    run = recorded("cold")
    assert [t.label for t in run.tasks] == [
        "Gathering Facts",
        SLEEP,
        "Probe that never changes",
        "Skipped everywhere",
        "Loop over two items",
        "Fail on h2 when asked",
        "demo : Note the change",
        "Say done",
    ]
    assert sorted(task(run, SLEEP).changed) == ["h1", "h2"]
    assert [t.label for t in run.tasks if t.changed] == [SLEEP]
    assert task(run, "Say done").hosts == ["localhost"]


def test_task_duration_is_the_longest_host() -> None:
    run = recorded("cold")
    # h1 2.81608 s, h2 2.600054 s in the recording.
    assert task(run, SLEEP).duration_s == 2.81608
    assert task(run, "Gathering Facts").duration_s == 3.534848
    # Skipped tasks are timed too (the skip decision costs a round of the strategy).
    assert task(run, "Skipped everywhere").duration_s == 0.118341


def test_duration_from_start_and_end_when_missing() -> None:
    data = {"start": "2026-11-30T16:52:45.500000+00:00", "end": "2026-11-30T16:52:47+00:00"}
    assert bench.event_duration(data) == 1.5
    assert bench.event_duration({**data, "duration": 0.25}) == 0.25
    assert bench.event_duration({"duration": None}) == 0.0


def test_same_task_name_twice_is_summed() -> None:
    first = bench.TaskTiming("r", "T", 1.5, hosts=["a"], changed=["a"])
    second = bench.TaskTiming("r", "T", 2.0, hosts=["a", "b"])
    other = bench.TaskTiming("", "U", 0.5, hosts=["b"])
    merged = bench.merge_tasks([first, other, second])
    assert merged == [
        bench.TaskTiming("r", "T", 3.5, instances=2, hosts=["a", "b"], changed=["a"]),
        bench.TaskTiming("", "U", 0.5, instances=1, hosts=["b"]),
    ]


def test_rerun_uses_cached_facts_and_changes_nothing() -> None:
    run = recorded("rerun", "rerun", "rerun-1")
    assert run.changed == 0
    assert "Gathering Facts" not in [t.label for t in run.tasks]
    assert run.hosts["h1"] == bench.HostStats(ok=3, skipped=2)
    assert bench.problems([run]) == []
    assert bench.exit_code([run]) == 0


def test_failed_run_counts_failures_and_unreachable() -> None:
    run = recorded("failed")
    assert (run.status, run.rc) == ("failed", 4)
    assert run.hosts["h2"].failures == 1
    assert run.hosts["h3"] == bench.HostStats(unreachable=1)
    assert task(run, "Fail on h2 when asked").failed == ["h2"]
    assert task(run, "Gathering Facts").failed == ["h3"]
    assert run.errors == [
        "h3: Gathering Facts: unreachable: Task failed: Failed to connect to the host via ssh: "
        "ssh: connect to host 127.0.0.1 port 9: Connection refused",
        "h2: Fail on h2 when asked: failed: asked to fail",
    ]


def test_status_from_events_alone() -> None:
    cold, failed = fixture("cold"), fixture("failed")
    assert bench.parse_events(cold["events"]).status == "successful"
    assert bench.parse_events(failed["events"]).status == "failed"
    # Cut before playbook_on_stats: the playbook never finished.
    cut = [e for e in cold["events"] if e["event"] != "playbook_on_stats"]
    assert (bench.parse_events(cut).status, bench.parse_events(cut).rc) == ("failed", 2)
    # Without a runner wall time, the span of the event timestamps.
    assert bench.parse_events(cold["events"]).wall_s == 14.016


# --- exit decision -------------------------------------------------------


def test_failed_run_fails_the_bench() -> None:
    runs = [recorded("cold", "cold"), recorded("failed", "smoke", "smoke-1")]
    assert bench.problems(runs) == [
        "smoke-1 (play.yml) failed, rc 4",
        "  h3: Gathering Facts: unreachable: Task failed: Failed to connect to the host via "
        "ssh: ssh: connect to host 127.0.0.1 port 9: Connection refused",
        "  h2: Fail on h2 when asked: failed: asked to fail",
    ]
    assert bench.exit_code(runs) == 1


def test_rerun_with_changes_fails_the_bench() -> None:
    changed = recorded("cold", "rerun", "rerun-2")
    assert bench.problems([changed]) == [
        "rerun-2 (play.yml) reported changes: h1 changed=1, h2 changed=1",
        f"  changed: {SLEEP} on h2, h1",
    ]
    assert bench.exit_code([recorded("rerun", "rerun"), changed]) == 1


def test_changes_in_cold_or_smoke_are_fine() -> None:
    runs = [recorded("cold", "cold"), recorded("cold", "smoke", "smoke-1")]
    assert bench.exit_code(runs) == 0


# --- summary and targets -------------------------------------------------


def test_summary_min_median_max() -> None:
    summary = bench.summarise(full_set())
    figures = summary["figures"]
    assert figures["rerun"] == {"n": 3, "min_s": 12.0, "median_s": 15.0, "max_s": 30.0}
    assert figures["smoke"] == {"n": 2, "min_s": 31.0, "median_s": 35.5, "max_s": 40.0}
    assert figures["cold"] == {"n": 1, "min_s": 100.0, "median_s": 100.0, "max_s": 100.0}
    assert figures["create"]["median_s"] == 40.0
    assert figures["destroy"] is None
    assert summary["rerun_changed"] == {"rerun-1": 0, "rerun-2": 0, "rerun-3": 0}
    assert summary["x_floor"] == {"cold": 20.0, "rerun": 3.0, "smoke": 7.1, "floor_facts": 1.6}
    assert summary["floor_task_s"] == {"ping": 1.597126, "facts": 4.352928}
    # The median rerun (15 s) over the floor with facts (8 s).
    assert summary["rerun_x_floor_facts"] == 1.9


def test_targets_met_and_not_met() -> None:
    verdicts = {t["name"]: t for t in bench.summarise(full_set())["targets"]}
    assert verdicts["cold"] == {
        "name": "cold",
        "label": "cold site.yml",
        "value_s": 100.0,
        "limit_s": 120.0,
        "met": True,
    }
    assert (verdicts["rerun"]["value_s"], verdicts["rerun"]["met"]) == (15.0, True)
    assert (verdicts["smoke"]["value_s"], verdicts["smoke"]["met"]) == (35.5, False)


def test_targets_not_measured_without_cold_run() -> None:
    verdicts = {t["name"]: t["met"] for t in bench.summarise(full_set()[2:])["targets"]}
    assert verdicts == {"cold": None, "rerun": True, "smoke": False}


def test_failed_runs_are_left_out_of_the_figures() -> None:
    runs = [recorded("failed", "cold", "cold", wall_s=50.0), recorded("rerun", "rerun")]
    summary = bench.summarise(runs)
    assert summary["figures"]["cold"] is None
    assert summary["targets"][0]["met"] is None
    assert summary["figures"]["rerun"]["n"] == 1


def test_slowest_tasks_of_cold_and_median_rerun() -> None:
    slowest = bench.summarise(full_set())["slowest"]
    assert slowest["rerun_run"] == "rerun-1"  # 15 s: the median of 12, 15, 30
    assert [(t["task"], t["duration_s"]) for t in slowest["cold"][:3]] == [
        ("Loop over two items", 4.812471),
        ("Gathering Facts", 3.534848),
        ("Sleep a host-dependent time", 2.81608),
    ]
    assert slowest["cold"][2] == {
        "role": "demo",
        "task": "Sleep a host-dependent time",
        "duration_s": 2.81608,
        "hosts": 2,
    }
    assert len(slowest["cold"]) == 8  # all the recording has; 10 at most
    assert len(bench.slowest(recorded("cold"), n=3)) == 3


def test_median_run_of_an_even_count_is_the_lower_middle() -> None:
    runs = [recorded("rerun", "rerun", f"r{w}", wall_s=w) for w in (4.0, 1.0, 3.0, 2.0)]
    assert bench.median_run(runs).name == "r2.0"
    assert bench.median_run([]) is None


# --- comparison ----------------------------------------------------------


def test_format_change() -> None:
    assert bench.format_change(30.8, 18.5) == "-12.3 s (-40%)"
    assert bench.format_change(10.0, 12.5) == "+2.5 s (+25%)"
    assert bench.format_change(None, 12.5) == "n/a"
    assert bench.format_change(0.0, 1.0) == "+1.0 s"


def test_compare_prints_each_change() -> None:
    old = doc_of(full_set(), "2026-11-29T10:00:00Z")
    new = copy.deepcopy(old)
    new["started"] = "2026-11-30T17:00:00Z"
    new["summary"]["figures"]["cold"]["median_s"] = 69.2
    new["summary"]["figures"]["rerun"]["median_s"] = 20.0
    new["summary"]["slowest"]["cold"][0]["duration_s"] = 2.4
    new["summary"]["slowest"]["cold"][1]["task"] = "Something new"
    new["machine"]["nproc"] = 4
    text = bench.compare(old, new)
    lines = text.splitlines()
    assert lines[0] == (
        "Change from 2026-11-29T10:00:00Z (commit aaaaaaaaaaaa) "
        "to 2026-11-30T17:00:00Z (commit aaaaaaaaaaaa), medians:"
    )
    assert has_row(lines[1], "create (molecule)   40.0 s -> 40.0 s   +0.0 s (+0%)")
    assert has_row(lines[2], "cold site.yml   100.0 s -> 69.2 s   -30.8 s (-31%)")
    assert has_row(lines[3], "rerun site.yml   15.0 s -> 20.0 s   +5.0 s (+33%)")
    assert "Slowest tasks of the cold run:" in lines
    assert has_row(text, "Loop over two items   2.4 s   -2.4 s (-50%)")
    assert has_row(text, "Something new   3.5 s   new in top 10")
    assert lines[-2:] == ["Not the same machine or tools, read with care:", "  nproc: 2 -> 4"]


def test_compare_skips_figures_missing_on_both_sides() -> None:
    text = bench.compare(doc_of(full_set()[2:]), doc_of(full_set()))
    assert "destroy" not in text
    assert "cold site.yml" in text
    assert has_row(text, "cold site.yml   n/a -> 100.0 s   n/a")


# --- rendering, results file, CLI ----------------------------------------


def test_table() -> None:
    table = bench.render_table(doc_of(full_set()))
    lines = table.splitlines()
    assert lines[0] == (
        "Benchmark 2026-11-30T17:00:00Z  commit aaaaaaaaaaaa  2 CPUs, 23.4 GiB, "
        "ansible-core 2.19.14"
    )
    assert has_row(table, "step runs min median max x floor target")
    assert has_row(table, "create (molecule) 1 40.0 s 40.0 s 40.0 s")
    assert has_row(table, "cold site.yml 1 100.0 s 100.0 s 100.0 s 20.0x <= 120 s met")
    assert has_row(table, "rerun site.yml 3 12.0 s 15.0 s 30.0 s 3.0x <= 20 s met")
    assert has_row(table, "smoke_train.yml 2 31.0 s 35.5 s 40.0 s 7.1x <= 20 s NOT MET")
    assert has_row(table, "floor: ping 1 5.0 s 5.0 s 5.0 s")
    assert has_row(table, "floor: ping + facts 1 8.0 s 8.0 s 8.0 s 1.6x")
    assert "  rerun / floor with facts: 1.9x (target <= 3.5x met)" in lines
    assert "  cold / floor: 20.0x (target <= 50x met)" in lines
    assert "8 slowest tasks, cold site.yml (longest host):" in lines
    assert "6 slowest tasks, median rerun (rerun-1) (longest host):" in lines
    assert "  one task on every node costs 1.6 s, fact gathering 4.4 s" in lines
    first_task = lines.index("8 slowest tasks, cold site.yml (longest host):") + 1
    assert lines[first_task].split() == ["4.8", "s", "Loop", "over", "two", "items"]


def test_busy_seconds_from_proc_stat() -> None:
    """user nice system irq softirq steal count; idle and iowait do not; per-CPU lines ignored."""
    stat = (
        "cpu  1000 50 300 9000 200 10 20 5 40 0\ncpu0 500 25 150 4500 100 5 10 2 20 0\nintr 12345\n"
    )
    assert bench.busy_s(stat, 100) == pytest.approx((1000 + 50 + 300 + 10 + 20 + 5) / 100)
    assert bench.busy_s("cpu  100 0 100 5000\n", 100) == 2.0  # an old kernel: four fields
    with pytest.raises(ValueError, match="no 'cpu' line"):
        bench.busy_s("intr 1\n", 100)
    assert bench.read_busy_s(Path("/nonexistent/stat")) is None
    assert bench.cpu_between(10.0, 45.257) == 35.26
    assert bench.cpu_between(None, 45.0) is None


def test_cpu_of_the_median_run_and_the_shortest_wall_it_allows() -> None:
    runs = full_set()
    cpu = {"smoke-1": 40.0, "smoke-2": 50.0, "rerun-1": 12.0, "rerun-2": 11.0}
    runs = [replace(r, cpu_s=cpu.get(r.name)) for r in runs]
    summary = bench.summarise(runs)
    # the median run of an even count is the lower middle: smoke-1 (31 s)
    assert summary["cpu"]["smoke"] == {"cpu_s": 40.0, "wall_s": 31.0, "run": "smoke-1"}
    # only the reruns that measured CPU: rerun-2 (12 s) and rerun-1 (15 s)
    assert summary["cpu"]["rerun"] == {"cpu_s": 11.0, "wall_s": 12.0, "run": "rerun-2"}
    assert "cold" not in summary["cpu"]
    table = bench.render_table(doc_of(runs))
    assert "CPU used by every process on this machine (median run; 2 CPUs):" in table.splitlines()
    assert has_row(
        table,
        "smoke_train.yml 40.0 CPU-s in 31.0 s: 1.29 CPUs busy on average; 20.0 s with all busy",
    )
    assert "CPU used" not in bench.render_table(doc_of(full_set()))


def test_rerun_with_changes_is_named_and_left_out_of_the_figures() -> None:
    runs = [*full_set(), recorded("cold", "rerun", "rerun-4", wall_s=1.0)]
    doc = doc_of(runs)
    assert doc["summary"]["figures"]["rerun"] == {
        "n": 3,
        "min_s": 12.0,
        "median_s": 15.0,
        "max_s": 30.0,
    }
    assert doc["summary"]["rerun_changed"]["rerun-4"] == 2
    table = bench.render_table(doc)
    assert "  reruns with changes, left out of the figures: rerun-4 (2 changed)" in table


def test_png_is_written(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = bench.render_png(doc_of(full_set()), tmp_path / "chart.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 10_000


def test_results_file_round_trip(tmp_path: Path) -> None:
    runs = full_set()
    started = bench.datetime(2026, 11, 30, 17, 0, 0, tzinfo=bench.UTC)
    doc = bench.results_doc(runs, {"nproc": 2}, started, ["--reruns", "3"])
    path = bench.write_results(doc, tmp_path, started)
    assert path.name == "20261130T170000Z.json"
    loaded = bench.load_results(path)
    assert loaded["schema_version"] == 1
    assert loaded["started"] == "2026-11-30T17:00:00Z"
    assert loaded["targets_s"] == {"cold": 120.0, "rerun": 20.0, "smoke": 20.0}
    assert [bench.RunResult.from_dict(r) for r in loaded["runs"]] == runs
    assert loaded["problems"] == []


def test_other_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"schema_version": 0}))
    with pytest.raises(SystemExit, match="schema_version 0"):
        bench.load_results(path)


def test_report_mode_runs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    started = bench.datetime(2026, 11, 30, 17, 0, 0, tzinfo=bench.UTC)
    runs = [*full_set(), recorded("cold", "rerun", "rerun-4")]
    path = bench.write_results(
        bench.results_doc(runs, {"nproc": 2}, started, []), tmp_path, started
    )
    code = bench.main(["--report", str(path), "--compare", str(path), "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert "bench: FAIL rerun-4 (play.yml) reported changes: h1 changed=1, h2 changed=1" in out
    assert has_row(out, "cold site.yml 100.0 s -> 100.0 s +0.0 s (+0%)")
    assert (tmp_path / "20261130T170000Z.png").is_file()


def test_floor_playbook(tmp_path: Path) -> None:
    plays = yaml.safe_load(bench.floor_playbook(tmp_path, True).read_text())
    assert plays == [
        {
            "name": "Floor",
            "hosts": "slurm_cluster",
            "gather_facts": True,
            "tasks": [{"name": "Ping", "ansible.builtin.ping": None}],
        }
    ]
    assert (
        yaml.safe_load(bench.floor_playbook(tmp_path, False).read_text())[0]["gather_facts"]
        is False
    )


def test_runner_keeps_the_configured_fact_cache(tmp_path: Path) -> None:
    """ansible-runner would move the fact cache into its artifacts; the bench stops it."""
    inventory = tmp_path / "hosts.json"
    inventory.write_text(
        json.dumps(
            {
                "all": {
                    "children": {
                        "slurm_cluster": {
                            "hosts": {
                                "h1": {
                                    "ansible_connection": "local",
                                    "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                                }
                            }
                        }
                    }
                }
            }
        )
    )
    playbook = bench.floor_playbook(tmp_path, True)
    facts = tmp_path / "facts"
    run = bench.run_playbook(
        "floor-facts",
        "floor_facts",
        str(playbook),
        project_dir=tmp_path,
        inventory=inventory,
        env={"ANSIBLE_CACHE_PLUGIN_CONNECTION": str(facts)},
    )
    assert (run.status, run.rc, run.playbook) == ("successful", 0, "floor_facts.yml")
    assert run.hosts == {"h1": bench.HostStats(ok=2)}
    assert [t.label for t in run.tasks] == ["Gathering Facts", "Ping"]
    # The cache file name carries the plugin's prefix; the host is its end.
    assert [p.name[-2:] for p in facts.iterdir()] == ["h1"]


# --- the whole sequence, with fake runs ----------------------------------


class FakeCluster:
    """Stands in for molecule and ansible-runner: records each call, replays fixtures."""

    def __init__(self, fail: str = "") -> None:
        self.calls: list[tuple[str, str, dict[str, str]]] = []
        self.fail = fail

    def playbook(self, name: str, kind: str, playbook: str, **kwargs: Any) -> bench.RunResult:
        self.calls.append((name, Path(playbook).name, kwargs.get("env") or {}))
        source = "failed" if name == self.fail else "rerun"
        return recorded(source, kind, name, playbook=Path(playbook).name)

    def command(self, name: str, kind: str, argv: list[str]) -> bench.RunResult:
        self.calls.append((name, " ".join(argv), {}))
        return bench.RunResult(name, kind, " ".join(argv), "successful", 0, 1.0)

    def plain(
        self, name: str, kind: str, playbook: str, env: dict[str, str] | None = None
    ) -> bench.RunResult:
        self.calls.append((name, f"plain {Path(playbook).name}", env or {}))
        hosts = {"ctl": bench.HostStats(ok=3)}
        return bench.RunResult(name, kind, Path(playbook).name, "successful", 0, 2.0, hosts)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeCluster:
    cluster = FakeCluster()
    monkeypatch.setattr(bench, "run_playbook", cluster.playbook)
    monkeypatch.setattr(bench, "run_command", cluster.command)
    monkeypatch.setattr(bench, "run_plain", cluster.plain)
    monkeypatch.setattr(bench, "machine_info", lambda: {"nproc": 2, "commit": "b" * 40})
    monkeypatch.setattr(bench, "FACT_CACHE", tmp_path / "facts")
    monkeypatch.setattr(bench, "SHARED_DIR", tmp_path / "shared")
    return cluster


def test_full_sequence(fake: FakeCluster, tmp_path: Path) -> None:
    (tmp_path / "facts").mkdir()
    (tmp_path / "shared" / "smoke").mkdir(parents=True)
    code = bench.main(["--reruns", "2", "--smokes", "1", "--out", str(tmp_path / "out")])
    assert code == 0
    assert [(name, what) for name, what, _ in fake.calls] == [
        ("destroy", "molecule destroy"),
        ("create", "molecule create"),
        ("cold", "site.yml"),
        ("rerun-1", "site.yml"),
        ("rerun-2", "site.yml"),
        ("smoke-1", "smoke_train.yml"),
        ("floor-ping", "floor.yml"),
        ("floor-facts", "floor_facts.yml"),
        # Again as the peer's bench runs them: ansible-playbook, no ansible-runner.
        ("rerun-plain-1", "plain site.yml"),
        ("rerun-plain-2", "plain site.yml"),
        ("floor-facts-plain", "plain floor_facts.yml"),
    ]
    no_cache = {"ANSIBLE_CACHE_PLUGIN": "ansible.builtin.memory", "ANSIBLE_GATHERING": "implicit"}
    assert fake.calls[-4][2] == fake.calls[-1][2] == no_cache
    assert not (tmp_path / "facts").exists()  # the cold run starts without cached facts
    assert list((tmp_path / "shared").iterdir()) == []  # and an empty shared filesystem
    [results] = (tmp_path / "out").glob("*.json")
    doc = bench.load_results(results)
    assert [r["name"] for r in doc["runs"]][:3] == ["destroy", "create", "cold"]
    assert doc["summary"]["figures"]["rerun"]["n"] == 2
    assert doc["summary"]["figures"]["rerun_plain"]["n"] == 2
    assert doc["summary"]["rerun_plain_x_floor_facts_plain"] == 1.0
    assert results.with_suffix(".png").is_file() or not has_matplotlib()


def test_no_fresh_keeps_the_containers(fake: FakeCluster, tmp_path: Path) -> None:
    (tmp_path / "facts").mkdir()
    code = bench.main(["--no-fresh", "--reruns", "1", "--smokes", "0", "--out", str(tmp_path)])
    assert code == 0
    assert [name for name, _, _ in fake.calls] == [
        "rerun-1",
        "floor-ping",
        "floor-facts",
        "rerun-plain-1",
        "floor-facts-plain",
    ]
    assert (tmp_path / "facts").is_dir()


def test_a_failed_run_stops_the_sequence(fake: FakeCluster, tmp_path: Path) -> None:
    fake.fail = "rerun-1"
    code = bench.main(["--no-fresh", "--out", str(tmp_path)])
    assert code == 1
    assert [name for name, _, _ in fake.calls] == ["rerun-1"]
    [results] = tmp_path.glob("*.json")
    assert bench.load_results(results)["problems"][0] == "rerun-1 (site.yml) failed, rc 4"


def has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def test_a_failed_command_keeps_the_end_of_its_output() -> None:
    script = "for i in $(seq 1 12); do echo line $i; done; exit 3"
    run = bench.run_command("create", "create", ["sh", "-c", script])
    assert (run.status, run.rc, run.kind) == ("failed", 3, "create")
    assert run.errors == [f"line {i}" for i in range(3, 13)]
    ok = bench.run_command("destroy", "destroy", ["true"])
    assert (ok.status, ok.rc, ok.errors) == ("successful", 0, [])


def test_smoke_breakdown_mode_by_mode(tmp_path: Path) -> None:
    """launch = startup + the ranks' phases; the launch task = the launches + the runner."""
    tasks = [
        bench.TaskTiming("smoke_train", "Launch and judge each mode in gpu", 9.1),
        bench.TaskTiming("cluster_doctor", "Probe each node", 2.1),
    ]
    summary = {
        "modes": [
            {
                "mode": "srun",
                "launch_s": 3.72,
                "startup_s": 0.57,
                "phases_s": {"import": 1.01, "measure": 0.98, "train": 0.06},
            },
            {"mode": "torchrun", "launch_s": 4.97, "startup_s": 2.94, "phases_s": {"import": 0.93}},
        ]
    }
    out = bench.smoke_breakdown(tasks, summary, wall_s=26.0)
    assert out["modes"]["srun"] == {
        "launch_s": 3.72,
        "startup_s": 0.57,
        "phases_s": {"import": 1.01, "measure": 0.98, "train": 0.06},
    }
    assert out["launches_s"] == 8.69
    assert out["launch_task_s"] == 9.1
    assert out["runner_s"] == 0.41
    assert out["outside_s"] == 16.9
    rows = bench.breakdown_rows(out, "smoke-1")
    assert rows[0].startswith("smoke job by mode (smoke-1)")
    assert any(row.split()[:5] == ["srun", "3.7", "s", "0.6", "s"] for row in rows)
    # The results file a smoke run wrote after it started, not an older one.
    (tmp_path / "20261202T091749Z-769.json").write_text(json.dumps(summary))
    (tmp_path / "doctor-latest.json").write_text("{}")
    assert bench.newest_smoke_results(0, tmp_path) == summary
    assert bench.newest_smoke_results(4102444800, tmp_path) is None  # 2100: none that new
    # In its cluster's folder (cluster_results_dir: results/<cluster_name>).
    (tmp_path / "20261202T091749Z-769.json").unlink()
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "20261202T091749Z-769.json").write_text(json.dumps(summary))
    assert bench.newest_smoke_results(0, tmp_path) == summary


RECAP = """
PLAY RECAP *********************************************************************
ctl   : ok=43   changed=0  unreachable=0  failed=0  skipped=51  rescued=0  ignored=0
node1 : ok=35   changed=2  unreachable=0  failed=1  skipped=43  rescued=0  ignored=0

TASKS RECAP ********************************************************************
"""


def test_recap_of_a_plain_run_counts_changes() -> None:
    hosts = bench.recap_stats(RECAP)
    assert hosts == {
        "ctl": bench.HostStats(ok=43, skipped=51),
        "node1": bench.HostStats(ok=35, changed=2, failures=1, skipped=43),
    }
    assert bench.recap_stats("no recap here") == {}


def test_a_plain_rerun_that_changed_something_is_a_problem() -> None:
    run = bench.RunResult(
        "rerun-plain-1", "rerun_plain", "site.yml", "successful", 0, 9.0, bench.recap_stats(RECAP)
    )
    assert not bench.counts(run)
    assert bench.problems([run]) == ["rerun-plain-1 (site.yml) reported changes: node1 changed=2"]


def test_plain_run_of_the_floor(tmp_path: Path) -> None:
    """ansible-playbook itself on a local host: wall time, status and the recap."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "slurm_cluster:\n  hosts:\n    h1:\n      ansible_connection: local\n"
        "      ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
    )
    playbook = bench.floor_playbook(tmp_path, True)
    run = bench.run_plain(
        "floor-facts-plain",
        "floor_facts_plain",
        str(playbook),
        env={**bench.FLOOR_FACTS_ENV, "ANSIBLE_INVENTORY": str(inventory)},
    )
    assert (run.status, run.rc, run.playbook) == (
        "successful",
        0,
        "ansible-playbook floor_facts.yml",
    )
    assert run.hosts == {"h1": bench.HostStats(ok=2)}
    assert run.wall_s > 0


# The end of a real plain run (ansible-core, profile_tasks and timer, every
# task listed), 2026-12-05: a role's task whose name fills the line, one name twice.
PLAIN_TAIL = """\
PLAY RECAP *********************************************************************
localhost                  : ok=3    changed=0    unreachable=0    failed=0    skipped=0

TASKS RECAP ********************************************************************
Saturday 05 December 2026  15:17:13 +0000 (0:00:00.275)       0:00:01.149 *****
===============================================================================
gpulab.slurm_cluster.demo : A role's task whose name is long enough to fill most \
of the line of the summary at the end of the run, and then some more words --- 0.58s
Plain task -------------------------------------------------------------- 0.28s
Plain task -------------------------------------------------------------- 0.27s

PLAYBOOK RECAP *****************************************************************
Playbook run took 0 days, 0 hours, 0 minutes, 1 seconds
"""


def test_profile_tasks_reads_every_task_of_a_plain_run() -> None:
    got = bench.profile_tasks(PLAIN_TAIL)
    assert [(t.role, t.task, t.duration_s) for t in got] == [
        (
            "demo",
            "A role's task whose name is long enough to fill most of the line of the "
            "summary at the end of the run, and then some more words",
            0.58,
        ),
        ("", "Plain task", 0.28),
        ("", "Plain task", 0.27),
    ]
    assert bench.profile_tasks("PLAY RECAP ****\nhost : ok=1\n") == []


def test_run_plain_asks_profile_tasks_for_every_task_only_when_told(monkeypatch) -> None:
    seen = []

    def fake_timed(argv, cwd, env, timeout):
        seen.append(env.get("PROFILE_TASKS_TASK_OUTPUT_LIMIT"))
        return bench.Timed(0, PLAIN_TAIL, 1.0, None, False)

    monkeypatch.setattr(bench, "timed", fake_timed)
    assert bench.run_plain("a", "k", "site.yml").tasks == []
    run = bench.run_plain("b", "k", "site.yml", tasks=True)
    assert seen == [None, "all"] and run.hosts["localhost"].ok == 3
    # Merged per task name as the runner's are: the name run twice is one entry.
    assert [(t.label, t.duration_s, t.instances) for t in run.tasks][1:] == [
        ("Plain task", 0.55, 2)
    ]
    assert len(run.tasks) == 2 and run.tasks[0].role == "demo"
