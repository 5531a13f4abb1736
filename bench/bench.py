#!/usr/bin/env python3
"""Benchmark provisioning and the smoke job on the local Docker cluster.

Steps, each timed; playbooks go through ansible-runner, never a shell loop:

  destroy, create   fresh containers (`molecule destroy`, `molecule create`,
                    which also runs the prepare playbook with the fake GPUs)
  cold              site.yml with no cached facts
  rerun-1..N        site.yml again; each must report changed=0 on every host
  smoke-1..N        smoke_train.yml
  floor-ping        one ping task on every node, no fact gathering
  floor-facts       the same with fact gathering and no fact cache

Results: bench/results/<timestamp>.json (schema in bench/README.md), a table
on stdout with the 10 slowest tasks, and a PNG chart next to the JSON;
--compare FILE adds the change against an earlier results file, --report FILE
prints a results file again without running anything.
The exit status is non-zero only when a run fails or a rerun reports changes;
the time targets are reported as met / not met, never enforced.

What parses, summarises, compares or renders (parse_events, summarise,
problems, compare, render_table, render_png) takes plain data, so tests run it
on recorded events without a cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
INVENTORY = ROOT / "inventory" / "local"
ANSIBLE_CFG = ROOT / "ansible.cfg"
# ansible.cfg's fact_caching_connection (.cache/facts); Ansible resolves it
# relative to the directory of ansible.cfg, not the working directory.
FACT_CACHE = ROOT / ".cache" / "facts"
# Host folder bind-mounted at /shared in every container (molecule.yml).
SHARED_DIR = ROOT / ".cache" / "shared"
DEFAULT_OUT = ROOT / "bench" / "results"

SCHEMA_VERSION = 1
TARGETS_S = {"cold": 120.0, "rerun": 20.0, "smoke": 20.0}
TARGET_LABELS = {
    "cold": "cold site.yml",
    "rerun": "no-change rerun (median)",
    "smoke": "smoke_train.yml (median)",
}
# The no-change rerun as a multiple of the floor with facts measured in the
# same bench (one ping with fact gathering on every node): issue 16's target,
# which holds as the machine's speed drifts.
RERUN_X_FLOOR_FACTS_TARGET = 3.5
# The cold run as a multiple of the ping floor of the same bench (issue 40).
COLD_X_FLOOR_TARGET = 50.0
PLAYBOOK_TIMEOUT_S = 1800
MOLECULE_TIMEOUT_S = 900
TOP_TASKS = 10

TASK_EVENTS = ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable")
# playbook_on_stats keys → the names used in the results file.
STAT_KEYS = {
    "ok": "ok",
    "changed": "changed",
    "skipped": "skipped",
    "failures": "failures",
    "dark": "unreachable",
    "rescued": "rescued",
    "ignored": "ignored",
}
# Rows of the table, the chart and the comparison: (label, kind).
FIGURES = (
    ("destroy (molecule)", "destroy"),
    ("create (molecule)", "create"),
    ("cold site.yml", "cold"),
    ("rerun site.yml", "rerun"),
    ("smoke_train.yml", "smoke"),
    ("floor: ping", "floor"),
    ("floor: ping + facts", "floor_facts"),
    # The same, run as `ansible-playbook` is run by hand and by the peer's bench
    # (no ansible-runner, whose events cost every task more than a plain run).
    ("rerun, plain", "rerun_plain"),
    ("floor + facts, plain", "floor_facts_plain"),
)
# Kinds that must change nothing.
RERUN_KINDS = ("rerun", "rerun_plain")
# A host's line of the PLAY RECAP of a plain run.
RECAP_LINE = re.compile(r"^(?P<host>\S+)\s+:\s+(?P<stats>(?:\w+=\d+\s*)+)$")


# --------------------------------------------------------------------------
# Parsed runs


@dataclass
class HostStats:
    ok: int = 0
    changed: int = 0
    skipped: int = 0
    failures: int = 0
    unreachable: int = 0
    rescued: int = 0
    ignored: int = 0


@dataclass
class TaskTiming:
    """One task name of one role in one run.

    duration_s is the longest host's duration of each instance of the task
    (hosts run a task in parallel), summed over instances (a task name can run
    more than once: loops over include_tasks, handlers notified twice).
    """

    role: str
    task: str
    duration_s: float
    instances: int = 1
    hosts: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.role} : {self.task}" if self.role else self.task


@dataclass
class RunResult:
    name: str
    kind: str
    playbook: str
    status: str
    rc: int
    wall_s: float
    hosts: dict[str, HostStats] = field(default_factory=dict)
    tasks: list[TaskTiming] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # smoke runs: where the time went (smoke_breakdown), from the run's results file.
    detail: dict[str, Any] = field(default_factory=dict)
    # CPU seconds this machine spent while the run lasted, every process
    # (containers, Slurm jobs, Ansible); None where /proc/stat was unreadable.
    cpu_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "successful"

    @property
    def changed(self) -> int:
        return sum(h.changed for h in self.hosts.values())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunResult:
        return cls(
            name=data["name"],
            kind=data["kind"],
            playbook=data["playbook"],
            status=data["status"],
            rc=data["rc"],
            wall_s=data["wall_s"],
            hosts={h: HostStats(**s) for h, s in data["hosts"].items()},
            tasks=[TaskTiming(**t) for t in data["tasks"]],
            errors=list(data["errors"]),
            detail=dict(data.get("detail") or {}),
            cpu_s=data.get("cpu_s"),
        )


def parse_time(stamp: str | None) -> datetime | None:
    return datetime.fromisoformat(stamp) if stamp else None


def event_duration(data: Mapping[str, Any]) -> float:
    """Seconds one host spent on one task: the event's duration, else end - start."""
    duration = data.get("duration")
    if isinstance(duration, int | float):
        return float(duration)
    start, end = parse_time(data.get("start")), parse_time(data.get("end"))
    return (end - start).total_seconds() if start and end else 0.0


def events_span_s(events: list[Mapping[str, Any]]) -> float:
    stamps = [t for t in (parse_time(e.get("created")) for e in events) if t]
    return (max(stamps) - min(stamps)).total_seconds() if stamps else 0.0


def host_stats(stats_data: Mapping[str, Any]) -> dict[str, HostStats]:
    hosts: dict[str, HostStats] = {}
    for key, name in STAT_KEYS.items():
        for host, count in (stats_data.get(key) or {}).items():
            setattr(hosts.setdefault(host, HostStats()), name, int(count))
    return dict(sorted(hosts.items()))


def error_line(event: str, data: Mapping[str, Any]) -> str:
    res = data.get("res") or {}
    msg = str(res.get("msg") or res.get("stderr") or "").strip().splitlines()
    what = "unreachable" if event == "runner_on_unreachable" else "failed"
    return f"{data.get('host')}: {data.get('task')}: {what}: {msg[0] if msg else '(no message)'}"


def task_instances(events: Iterable[Mapping[str, Any]]) -> list[TaskTiming]:
    """One TaskTiming per task instance (task_uuid), in the order they ran."""
    instances: dict[str, TaskTiming] = {}
    for event in events:
        if event.get("event") not in TASK_EVENTS:
            continue
        data = event.get("event_data") or {}
        key = str(data.get("task_uuid") or (data.get("role"), data.get("task")))
        timing = instances.setdefault(
            key, TaskTiming(role=data.get("role") or "", task=data.get("task") or "", duration_s=0)
        )
        host = str(data.get("host"))
        timing.duration_s = max(timing.duration_s, event_duration(data))
        timing.hosts.append(host)
        if event["event"] == "runner_on_ok" and (data.get("res") or {}).get("changed"):
            timing.changed.append(host)
        failed = event["event"] == "runner_on_failed" and not data.get("ignore_errors")
        if failed or event["event"] == "runner_on_unreachable":
            timing.failed.append(host)
    return list(instances.values())


def merge_tasks(instances: Iterable[TaskTiming]) -> list[TaskTiming]:
    """Aggregate instances per (role, task name): durations summed, hosts joined."""
    merged: dict[tuple[str, str], TaskTiming] = {}
    for inst in instances:
        key = (inst.role, inst.task)
        if key not in merged:
            merged[key] = TaskTiming(role=inst.role, task=inst.task, duration_s=0, instances=0)
        total = merged[key]
        total.duration_s = round(total.duration_s + inst.duration_s, 6)
        total.instances += 1
        for mine, theirs in (
            (total.hosts, inst.hosts),
            (total.changed, inst.changed),
            (total.failed, inst.failed),
        ):
            mine.extend(h for h in theirs if h not in mine)
    return list(merged.values())


def parse_events(
    events: Iterable[Mapping[str, Any]],
    *,
    name: str = "",
    kind: str = "",
    playbook: str = "",
    status: str | None = None,
    rc: int | None = None,
    wall_s: float | None = None,
) -> RunResult:
    """A RunResult from ansible-runner events.

    status/rc/wall_s come from the runner when it ran here; without them (a
    fixture) status follows the stats (no stats: the playbook did not finish)
    and wall_s is the span of the event timestamps.
    """
    events = list(events)
    stats = next((e for e in reversed(events) if e.get("event") == "playbook_on_stats"), None)
    hosts = host_stats(stats["event_data"]) if stats else {}
    if status is None:
        broken = any(h.failures or h.unreachable for h in hosts.values())
        status = "successful" if stats and not broken else "failed"
    errors = [
        error_line(e["event"], e.get("event_data") or {})
        for e in events
        if e.get("event") == "runner_on_unreachable"
        or (
            e.get("event") == "runner_on_failed"
            and not e.get("event_data", {}).get("ignore_errors")
        )
    ]
    return RunResult(
        name=name,
        kind=kind,
        playbook=playbook
        or next((e.get("event_data", {}).get("playbook", "") for e in events), ""),
        status=status,
        rc=(0 if status == "successful" else 2) if rc is None else rc,
        wall_s=round(events_span_s(events) if wall_s is None else wall_s, 3),
        hosts=hosts,
        tasks=merge_tasks(task_instances(events)),
        errors=errors,
    )


# --------------------------------------------------------------------------
# Summary, verdicts, comparison


def stats_s(values: list[float]) -> dict[str, float | int] | None:
    if not values:
        return None
    return {
        "n": len(values),
        "min_s": round(min(values), 3),
        "median_s": round(statistics.median(values), 3),
        "max_s": round(max(values), 3),
    }


def runs_of(runs: Iterable[RunResult], kind: str) -> list[RunResult]:
    return [r for r in runs if r.kind == kind]


def median_run(runs: list[RunResult]) -> RunResult | None:
    """The run at the median wall time (the lower middle one for an even count)."""
    ordered = sorted(runs, key=lambda r: r.wall_s)
    return ordered[(len(ordered) - 1) // 2] if ordered else None


def slowest(run: RunResult | None, n: int = TOP_TASKS) -> list[dict[str, Any]]:
    if run is None:
        return []
    top = sorted(run.tasks, key=lambda t: t.duration_s, reverse=True)[:n]
    return [
        {"role": t.role, "task": t.task, "duration_s": t.duration_s, "hosts": len(t.hosts)}
        for t in top
    ]


def floor_task_s(run: RunResult | None) -> float | None:
    """The longest task of a floor run: one module round trip (or fact gathering)."""
    return max((t.duration_s for t in run.tasks), default=None) if run else None


def target_verdicts(figures: Mapping[str, Any]) -> list[dict[str, Any]]:
    """met is None when the figure was not measured (or none of its runs succeeded)."""
    verdicts = []
    for kind, limit in TARGETS_S.items():
        stats = figures.get(kind)
        value = stats["median_s"] if stats else None
        verdicts.append(
            {
                "name": kind,
                "label": TARGET_LABELS[kind],
                "value_s": value,
                "limit_s": limit,
                "met": None if value is None else value <= limit,
            }
        )
    return verdicts


# The smoke job's launch task (roles/smoke_train/tasks/partition.yml: one per
# partition, every mode inside) and its results file, results/<cluster_name>/<run id>.json
# (cluster_results_dir; the bench runs one cluster, so any cluster's newest).
SMOKE_LAUNCH_TASK = "Launch and judge each mode in "
SMOKE_RESULTS = ROOT / "results"
SMOKE_RUN_FILE = re.compile(r"^\d{8}T\d{6}Z-\d+\.json$")


def smoke_breakdown(
    tasks: Iterable[TaskTiming], summary: Mapping[str, Any] | None, wall_s: float
) -> dict[str, Any]:
    """Where a smoke_train.yml run's time went, mode by mode (summed over partitions).

    Per mode: the launch's wall time, what no rank holds (srun or sbatch, a
    torchrun agent, spawn's node process, the wait for the nodes) and the ranks'
    phases (import, rendezvous, checks, train, measure, teardown: the slowest
    rank's). ``launch_task_s`` is the launch task (longest host, every
    partition), ``runner_s`` its part outside the launches (the mode runner's
    start, each mode's folder and report, Ansible's round trip), ``outside_s``
    the run less the launch task: the doctor, the deploy, the verdict,
    ansible-playbook's start.
    """
    modes: dict[str, dict[str, Any]] = {}
    for outcome in (summary or {}).get("modes") or []:
        mine = modes.setdefault(str(outcome.get("mode")), {"launch_s": 0.0, "startup_s": 0.0})
        mine["launch_s"] = round(mine["launch_s"] + float(outcome.get("launch_s") or 0), 2)
        mine["startup_s"] = round(mine["startup_s"] + float(outcome.get("startup_s") or 0), 2)
        phases = mine.setdefault("phases_s", {})
        for phase, seconds in (outcome.get("phases_s") or {}).items():
            phases[phase] = round(phases.get(phase, 0.0) + float(seconds), 3)
    task = round(sum(t.duration_s for t in tasks if t.task.startswith(SMOKE_LAUNCH_TASK)), 2)
    launches = round(sum(m["launch_s"] for m in modes.values()), 2)
    return {
        "modes": modes,
        "launches_s": launches,
        "launch_task_s": task,
        "runner_s": round(task - launches, 2),
        "outside_s": round(wall_s - task, 2),
    }


def newest_smoke_results(since: float, folder: Path = SMOKE_RESULTS) -> dict[str, Any] | None:
    """The results file (``[<cluster>/]<run id>.json``) a smoke run wrote after ``since``."""
    found = [
        path
        for path in ([*folder.glob("*.json"), *folder.glob("*/*.json")] if folder.is_dir() else [])
        if SMOKE_RUN_FILE.match(path.name) and path.stat().st_mtime >= since
    ]
    if not found:
        return None
    try:
        return json.loads(max(found, key=lambda path: path.stat().st_mtime).read_text())
    except (OSError, ValueError):
        return None


def counts(run: RunResult) -> bool:
    """Whether a run's time is a figure: it succeeded and, for a rerun, changed nothing."""
    return run.ok and not (run.kind in RERUN_KINDS and run.changed)


def ratio_of(figures: Mapping[str, Any], kind: str, floor_kind: str) -> float | None:
    """The median of kind over the median of floor_kind, where both were measured."""
    run, floor = figures.get(kind), figures.get(floor_kind)
    return (
        round(run["median_s"] / floor["median_s"], 1)
        if run and floor and floor["median_s"]
        else None
    )


def summarise(runs: list[RunResult]) -> dict[str, Any]:
    """Figures per kind (runs that count), multiples of the floor, targets, slowest tasks."""
    good = [r for r in runs if counts(r)]
    figures = {kind: stats_s([r.wall_s for r in runs_of(good, kind)]) for _, kind in FIGURES}
    floor = figures.get("floor")
    rerun_median = median_run(runs_of(good, "rerun"))
    median_smoke = median_run(runs_of(good, "smoke"))
    x_floor = {
        kind: round(figures[kind]["median_s"] / floor["median_s"], 1)
        for kind in ("cold", "rerun", "smoke", "floor_facts")
        if figures.get(kind) and floor and floor["median_s"] > 0
    }
    return {
        "figures": figures,
        "rerun_x_floor_facts": ratio_of(figures, "rerun", "floor_facts"),
        "rerun_plain_x_floor_facts_plain": ratio_of(figures, "rerun_plain", "floor_facts_plain"),
        "rerun_changed": {r.name: r.changed for r in runs if r.kind in RERUN_KINDS},
        "floor_task_s": {
            "ping": floor_task_s(median_run(runs_of(good, "floor"))),
            "facts": floor_task_s(median_run(runs_of(good, "floor_facts"))),
        },
        "x_floor": x_floor,
        "cpu": cpu_figures(good),
        "targets": target_verdicts(figures),
        "smoke_breakdown": (median_smoke.detail if median_smoke else {}),
        "smoke_run": median_smoke.name if median_smoke else None,
        "slowest": {
            "cold": slowest(median_run(runs_of(good, "cold"))),
            "rerun": slowest(rerun_median),
            "rerun_run": rerun_median.name if rerun_median else None,
        },
    }


def cpu_figures(good: list[RunResult]) -> dict[str, dict[str, float]]:
    """Per kind, the median run's CPU seconds and its wall time (runs that measured CPU).

    CPU seconds over the CPU count is the shortest the run could take on this
    machine if every CPU were busy all along; over the wall time, how many CPUs
    it kept busy on average.
    """
    found = {}
    for _, kind in FIGURES:
        run = median_run([r for r in runs_of(good, kind) if r.cpu_s is not None])
        if run is not None and run.cpu_s is not None:
            found[kind] = {"cpu_s": run.cpu_s, "wall_s": run.wall_s, "run": run.name}
    return found


def cpu_rows(cpu: Mapping[str, Mapping[str, Any]], nproc: int | None) -> list[str]:
    """One line per kind: CPU seconds, CPUs kept busy, the wall time with all of them busy."""
    if not cpu or not nproc:
        return []
    rows = [f"CPU used by every process on this machine (median run; {nproc} CPUs):"]
    labels = dict((kind, label) for label, kind in FIGURES)
    for kind, row in cpu.items():
        cpu_s, wall_s = row["cpu_s"], row["wall_s"]
        busy = cpu_s / wall_s if wall_s else 0.0
        rows.append(
            f"  {labels.get(kind, kind):<22} {cpu_s:>7.1f} CPU-s in {format_s(wall_s)}: "
            f"{busy:.2f} CPUs busy on average; {format_s(cpu_s / nproc)} with all busy"
        )
    return rows


def problems(runs: Iterable[RunResult]) -> list[str]:
    """Why `make bench` fails: a run that did not succeed, a rerun that changed something."""
    found = []
    for run in runs:
        if not run.ok:
            found.append(f"{run.name} ({run.playbook}) {run.status}, rc {run.rc}")
            found.extend(f"  {line}" for line in run.errors[:10])
        elif run.kind in RERUN_KINDS and run.changed:
            hosts = ", ".join(f"{h} changed={s.changed}" for h, s in run.hosts.items() if s.changed)
            found.append(f"{run.name} ({run.playbook}) reported changes: {hosts}")
            found.extend(
                f"  changed: {t.label} on {', '.join(t.changed)}" for t in run.tasks if t.changed
            )
    return found


def exit_code(runs: Iterable[RunResult]) -> int:
    return 1 if problems(runs) else 0


def format_s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} s"


def format_change(old: float | None, new: float | None) -> str:
    """'-12.3 s (-40%)'; 'n/a' when either side is missing."""
    if old is None or new is None:
        return "n/a"
    delta = new - old
    text = f"{delta:+.1f} s"
    return f"{text} ({delta / old * 100:+.0f}%)" if old else text


def figure_value(doc: Mapping[str, Any], kind: str) -> float | None:
    stats = doc["summary"]["figures"].get(kind)
    return stats["median_s"] if stats else None


def task_durations(doc: Mapping[str, Any], which: str) -> dict[str, float]:
    return {
        (f"{t['role']} : {t['task']}" if t["role"] else t["task"]): t["duration_s"]
        for t in doc["summary"]["slowest"][which]
    }


def machine_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    keys = ("nproc", "memory_gib", "ansible_core", "ansible_runner", "docker")
    return [f"  {k}: {old.get(k)} -> {new.get(k)}" for k in keys if old.get(k) != new.get(k)]


def compare(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """Text: each figure (median) old -> new with its change, then the slowest cold tasks."""
    lines = [
        f"Change from {old['started']} (commit {old['machine'].get('commit', '?')[:12]}) "
        f"to {new['started']} (commit {new['machine'].get('commit', '?')[:12]}), medians:"
    ]
    for label, kind in FIGURES:
        before, after = figure_value(old, kind), figure_value(new, kind)
        if before is None and after is None:
            continue
        lines.append(
            f"  {label:<22} {format_s(before):>9} -> {format_s(after):>9}   "
            f"{format_change(before, after)}"
        )
    before_tasks, after_tasks = task_durations(old, "cold"), task_durations(new, "cold")
    if after_tasks:
        lines.append("Slowest tasks of the cold run:")
        for label, after in after_tasks.items():
            before = before_tasks.get(label)
            change = format_change(before, after) if before is not None else "new in top 10"
            lines.append(f"  {label[:60]:<60} {format_s(after):>9}   {change}")
    differs = machine_changes(old["machine"], new["machine"])
    if differs:
        lines.append("Not the same machine or tools, read with care:")
        lines.extend(differs)
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Rendering


def verdict_word(met: bool | None) -> str:
    return {True: "met", False: "NOT MET", None: "not measured"}[met]


def figure_rows(summary: Mapping[str, Any]) -> list[str]:
    targets = {t["name"]: t for t in summary["targets"]}
    rows = [
        f"  {'step':<22} {'runs':>4} {'min':>9} {'median':>9} {'max':>9} {'x floor':>8}  target"
    ]
    for label, kind in FIGURES:
        stats = summary["figures"].get(kind)
        if not stats:
            continue
        x_floor = summary["x_floor"].get(kind)
        target = targets.get(kind)
        verdict = f"<= {target['limit_s']:.0f} s {verdict_word(target['met'])}" if target else ""
        rows.append(
            f"  {label:<22} {stats['n']:>4} {format_s(stats['min_s']):>9} "
            f"{format_s(stats['median_s']):>9} {format_s(stats['max_s']):>9} "
            f"{'' if x_floor is None else f'{x_floor:.1f}x':>8}  {verdict}".rstrip()
        )
    return rows


def breakdown_rows(breakdown: Mapping[str, Any], run: str | None) -> list[str]:
    """The median smoke run's time, mode by mode (smoke_breakdown)."""
    modes = breakdown.get("modes") or {}
    if not modes:
        return []
    phases = ("import", "rendezvous", "checks", "train", "measure", "teardown")
    rows = [
        f"smoke job by mode ({run}): launch = startup + the slowest rank's phases",
        f"  {'mode':<9} {'launch':>7} {'startup':>8} " + " ".join(f"{p[:8]:>8}" for p in phases),
    ]
    for mode, m in modes.items():
        ph = m.get("phases_s") or {}
        rows.append(
            f"  {mode:<9} {format_s(m.get('launch_s')):>7} {format_s(m.get('startup_s')):>8} "
            + " ".join(f"{format_s(ph.get(p)):>8}" for p in phases)
        )
    rows.append(
        f"  launches {format_s(breakdown.get('launches_s'))} in a launch task of "
        f"{format_s(breakdown.get('launch_task_s'))} (the mode runner and Ansible "
        f"{format_s(breakdown.get('runner_s'))}); the rest of the run (doctor, deploy, "
        f"verdict, Ansible's start) {format_s(breakdown.get('outside_s'))}"
    )
    return rows


def task_rows(title: str, tasks: list[Mapping[str, Any]]) -> list[str]:
    if not tasks:
        return []
    rows = [f"{len(tasks)} slowest tasks, {title} (longest host):"]
    for t in tasks:
        label = f"{t['role']} : {t['task']}" if t["role"] else t["task"]
        rows.append(f"  {t['duration_s']:>7.1f} s  {label}")
    return rows


def render_table(doc: Mapping[str, Any]) -> str:
    machine, summary = doc["machine"], doc["summary"]
    lines = [
        f"Benchmark {doc['started']}  commit {machine.get('commit', '?')[:12]}"
        f"{' (dirty)' if machine.get('dirty') else ''}  {machine.get('nproc')} CPUs, "
        f"{machine.get('memory_gib')} GiB, ansible-core {machine.get('ansible_core')}",
        *figure_rows(summary),
    ]
    changed = [f"{n} ({c} changed)" for n, c in summary["rerun_changed"].items() if c]
    if changed:
        lines.append(f"  reruns with changes, left out of the figures: {', '.join(changed)}")
    floor_task = summary["floor_task_s"]
    if floor_task.get("ping") is not None:
        lines.append(
            f"  one task on every node costs {format_s(floor_task['ping'])}, "
            f"fact gathering {format_s(floor_task.get('facts'))}"
        )
    ratios = (
        ("cold / floor", (summary.get("x_floor") or {}).get("cold"), COLD_X_FLOOR_TARGET),
        (
            "rerun / floor with facts",
            summary.get("rerun_x_floor_facts"),
            RERUN_X_FLOOR_FACTS_TARGET,
        ),
        (
            "plain ansible-playbook (as the peer's bench runs it): rerun / floor with facts",
            summary.get("rerun_plain_x_floor_facts_plain"),
            RERUN_X_FLOOR_FACTS_TARGET,
        ),
    )
    for label, ratio, target in ratios:
        if ratio is not None:
            lines.append(
                f"  {label}: {ratio:.1f}x (target <= {target:g}x {verdict_word(ratio <= target)})"
            )
    lines += cpu_rows(summary.get("cpu") or {}, machine.get("nproc"))
    lines += breakdown_rows(summary.get("smoke_breakdown") or {}, summary.get("smoke_run"))
    lines += task_rows("cold site.yml", summary["slowest"]["cold"])
    rerun = summary["slowest"]["rerun_run"]
    lines += task_rows(f"median rerun ({rerun})", summary["slowest"]["rerun"])
    return "\n".join(lines)


def short(label: str, width: int = 48) -> str:
    return label if len(label) <= width else label[: width - 1] + "…"


def plot_figures(ax: Any, summary: Mapping[str, Any]) -> None:
    shown = [(label, summary["figures"][kind], kind) for label, kind in FIGURES[1:]]
    shown = [s for s in shown if s[1]]
    y = list(range(len(shown)))
    medians = [s["median_s"] for _, s, _ in shown]
    spread = [
        [s["median_s"] - s["min_s"] for _, s, _ in shown],
        [s["max_s"] - s["median_s"] for _, s, _ in shown],
    ]
    colors = [
        "#c44e52" if s["median_s"] > TARGETS_S.get(kind, float("inf")) else "#4c72b0"
        for _, s, kind in shown
    ]
    ax.barh(y, medians, xerr=spread, color=colors, capsize=3)
    for i, (_, stats, kind) in enumerate(shown):
        ax.annotate(f" {stats['median_s']:.1f} s", (stats["max_s"], i), va="center", fontsize=8)
        if kind in TARGETS_S:
            ax.vlines(TARGETS_S[kind], i - 0.4, i + 0.4, colors="#c44e52", linestyles="--")
    ax.set_yticks(y, [label for label, _, _ in shown])
    ax.invert_yaxis()
    ax.set_xlabel("seconds (median, min-max; dashed: target, red: target not met)")
    ax.set_title("Steps")


def plot_tasks(ax: Any, title: str, tasks: list[Mapping[str, Any]]) -> None:
    labels = [short(f"{t['role']} : {t['task']}" if t["role"] else t["task"]) for t in tasks]
    ax.barh(range(len(tasks)), [t["duration_s"] for t in tasks], color="#55a868")
    ax.set_yticks(range(len(tasks)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("seconds (longest host)")
    ax.set_title(title)


def render_png(doc: Mapping[str, Any], path: Path) -> Path:
    """Bar chart of the steps and of the slowest tasks; matplotlib is imported here only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = doc["summary"]
    fig, axes = plt.subplots(3, 1, figsize=(10, 12), height_ratios=[2, 3, 3])
    plot_figures(axes[0], summary)
    plot_tasks(axes[1], "Slowest tasks, cold site.yml", summary["slowest"]["cold"])
    rerun = summary["slowest"]["rerun_run"]
    plot_tasks(axes[2], f"Slowest tasks, median rerun ({rerun})", summary["slowest"]["rerun"])
    fig.suptitle(f"make bench {doc['started']} ({doc['machine'].get('commit', '?')[:12]})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------
# Running things


@dataclass
class RunnerOutput:
    status: str
    rc: int
    wall_s: float
    events: list[dict[str, Any]]
    cpu_s: float | None = None


# /proc/stat's "cpu" line: user nice system idle iowait irq softirq steal
# guest guest_nice; guest time is already in user, idle and iowait are not busy.
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


def busy_s(stat_text: str, ticks_per_s: int) -> float:
    """Seconds of CPU every CPU together spent busy since boot, from /proc/stat."""
    for line in stat_text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(v) for v in fields[1:]]
            return sum(values[i] for i in BUSY_FIELDS if i < len(values)) / ticks_per_s
    raise ValueError("no 'cpu' line in /proc/stat")


def read_busy_s(path: Path = Path("/proc/stat")) -> float | None:
    try:
        return busy_s(path.read_text(), os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError):
        return None


def cpu_between(before: float | None, after: float | None) -> float | None:
    return round(after - before, 2) if before is not None and after is not None else None


def tool_env() -> dict[str, str]:
    """Additions to the environment of molecule and ansible-playbook: the venv's tools first."""
    return {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
    }


def ansible_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The repository's ansible.cfg wherever the bench is started from, plus extra."""
    return {**tool_env(), "ANSIBLE_CONFIG": str(ANSIBLE_CFG), **(extra or {})}


def invoke_runner(
    playbook: str,
    *,
    project_dir: Path = ROOT,
    inventory: Path = INVENTORY,
    env: Mapping[str, str] | None = None,
    extravars: Mapping[str, Any] | None = None,
    limit: str | None = None,
    timeout: int = PLAYBOOK_TIMEOUT_S,
) -> RunnerOutput:
    """One ansible-playbook run through ansible-runner, in project_dir (its cwd)."""
    import ansible_runner

    with tempfile.TemporaryDirectory(prefix="bench-runner-") as private:
        busy = read_busy_s()
        start = time.perf_counter()
        runner = ansible_runner.run(
            private_data_dir=private,
            project_dir=str(project_dir),
            playbook=playbook,
            inventory=str(inventory),
            envvars=ansible_env(env),
            extravars=dict(extravars or {}),
            limit=limit,
            # Anything but "jsonfile" stops ansible-runner from pointing the fact
            # cache at its artifacts folder: ansible.cfg's .cache/facts is used.
            fact_cache_type="ansible.cfg",
            timeout=timeout,
            quiet=True,
        )
        wall = time.perf_counter() - start
        cpu = cpu_between(busy, read_busy_s())
        events = list(runner.events)
    rc = runner.rc if runner.rc is not None else -1
    return RunnerOutput(status=runner.status, rc=rc, wall_s=wall, events=events, cpu_s=cpu)


def run_playbook(name: str, kind: str, playbook: str, **kwargs: Any) -> RunResult:
    started = time.time()
    out = invoke_runner(playbook, **kwargs)
    result = parse_events(
        out.events,
        name=name,
        kind=kind,
        playbook=Path(playbook).name,
        status=out.status,
        rc=out.rc,
        wall_s=out.wall_s,
    )
    result.cpu_s = out.cpu_s
    if kind == "smoke":
        found = newest_smoke_results(started)
        result.detail = smoke_breakdown(result.tasks, found, result.wall_s) if found else {}
    return result


@dataclass
class Timed:
    """A subprocess's exit, output, wall time and the machine's CPU seconds meanwhile."""

    rc: int
    output: str
    wall_s: float
    cpu_s: float | None
    timed_out: bool


def timed(argv: list[str], cwd: Path, env: Mapping[str, str], timeout: int) -> Timed:
    """Run argv in cwd with env added to this environment; rc 124 when it ran past timeout."""
    busy = read_busy_s()
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            argv,
            cwd=cwd,
            env=dict(os.environ, **env),
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
        rc, output, timed_out = proc.returncode, proc.stdout + proc.stderr, False
    except subprocess.TimeoutExpired:
        rc, output, timed_out = 124, f"no answer in {timeout} s", True
    wall = round(time.perf_counter() - start, 3)
    return Timed(rc, output, wall, cpu_between(busy, read_busy_s()), timed_out)


def run_command(name: str, kind: str, argv: list[str]) -> RunResult:
    """A timed subprocess in the repository root (molecule); its output is shown on failure."""
    run = timed(argv, ROOT, tool_env(), MOLECULE_TIMEOUT_S)
    status = "timeout" if run.timed_out else "successful" if run.rc == 0 else "failed"
    return RunResult(
        name=name,
        kind=kind,
        playbook=" ".join(argv),
        status=status,
        rc=run.rc,
        wall_s=run.wall_s,
        errors=[] if run.rc == 0 else run.output.splitlines()[-10:],
        cpu_s=run.cpu_s,
    )


def recap_stats(output: str) -> dict[str, HostStats]:
    """The PLAY RECAP of a plain ansible-playbook run, per host."""
    hosts: dict[str, HostStats] = {}
    names = {"failed": "failures", **{k: k for k in asdict(HostStats())}}
    for line in output.split("PLAY RECAP")[-1].splitlines() if "PLAY RECAP" in output else []:
        match = RECAP_LINE.match(line.strip())
        if match:
            pairs = (kv.split("=") for kv in match["stats"].split())
            stats = {names[k]: int(v) for k, v in pairs if k in names}
            hosts[match["host"]] = HostStats(**stats)
    return hosts


# A line of profile_tasks' summary: "role : task ------ 1.23s" (the dashes
# vanish where the name fills the line).
PROFILE_LINE = re.compile(r"^(?P<name>\S.*?)\s*-*\s+(?P<s>\d+\.\d+)s$")


def profile_tasks(output: str) -> list[TaskTiming]:
    """Each task's time from profile_tasks' summary at the end of a plain run
    (every task where PROFILE_TASKS_TASK_OUTPUT_LIMIT=all): the lines after the
    summary's rule of "=", a role's tasks as "role : task" (the collection's
    prefix dropped, as the runner's events name roles)."""
    lines = output.splitlines()
    rules = [i for i, line in enumerate(lines) if line.startswith("=" * 20)]
    if not rules:
        return []
    out = []
    for line in lines[rules[-1] + 1 :]:
        m = PROFILE_LINE.match(line.rstrip())
        if not m:
            continue
        role, sep, task = m["name"].partition(" : ")
        if not sep:
            role, task = "", m["name"]
        out.append(TaskTiming(role.rsplit(".", 1)[-1], task, float(m["s"])))
    return out


def run_plain(
    name: str,
    kind: str,
    playbook: str,
    env: Mapping[str, str] | None = None,
    root: Path = ROOT,
    args: Sequence[str] = (),
    tasks: bool = False,
) -> RunResult:
    """ansible-playbook itself, as a person or the peer's bench runs it: wall time and recap.

    In root (another checkout of the project, or the peer's folder), with its
    ansible.cfg; args go before the playbook (the peer's ``-i inventory.ini``).
    tasks: every task's time, from profile_tasks' summary (a checkout of this
    project: its ansible.cfg enables profile_tasks), merged per task name as
    the runner's are.
    """
    config = {"ANSIBLE_CONFIG": str(root / "ansible.cfg")}
    if tasks:
        config["PROFILE_TASKS_TASK_OUTPUT_LIMIT"] = "all"
    run = timed(
        ["ansible-playbook", *args, playbook],
        root,
        {**tool_env(), **config, **(env or {})},
        PLAYBOOK_TIMEOUT_S,
    )
    return RunResult(
        name=name,
        kind=kind,
        playbook=f"ansible-playbook {Path(playbook).name}",
        status="successful" if run.rc == 0 else "failed",
        rc=run.rc,
        wall_s=run.wall_s,
        hosts=recap_stats(run.output),
        tasks=merge_tasks(profile_tasks(run.output)) if tasks else [],
        errors=[] if run.rc == 0 else run.output.splitlines()[-10:],
        cpu_s=run.cpu_s,
    )


def floor_playbook(directory: Path, gather_facts: bool) -> Path:
    """The cheapest playbook that touches every node: one ping."""
    path = directory / ("floor_facts.yml" if gather_facts else "floor.yml")
    path.write_text(
        "---\n"
        "- name: Floor\n"
        "  hosts: slurm_cluster\n"
        f"  gather_facts: {str(gather_facts).lower()}\n"
        "  tasks:\n"
        "    - name: Ping\n"
        "      ansible.builtin.ping:\n"
    )
    return path


# No fact cache for the floor with facts: every run gathers, as a cold one does.
FLOOR_FACTS_ENV = {
    "ANSIBLE_CACHE_PLUGIN": "ansible.builtin.memory",
    "ANSIBLE_GATHERING": "implicit",
}


def empty_dir(path: Path) -> None:
    """Remove what is inside path, keep path itself (a bind-mount source)."""
    path.mkdir(parents=True, exist_ok=True)
    for child in path.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


Step = tuple[str, Callable[[], RunResult]]


def fresh_steps() -> list[Step]:
    def cold() -> RunResult:
        shutil.rmtree(FACT_CACHE, ignore_errors=True)
        return run_playbook("cold", "cold", "site.yml")

    def create() -> RunResult:
        # Same as `make clean`: the shared filesystem starts empty too.
        empty_dir(SHARED_DIR)
        return run_command("create", "create", ["molecule", "create"])

    return [
        ("destroy", lambda: run_command("destroy", "destroy", ["molecule", "destroy"])),
        ("create", create),
        ("cold", cold),
    ]


def playbook_steps(reruns: int, smokes: int, scratch: Path) -> list[Step]:
    steps: list[Step] = []
    for i in range(1, reruns + 1):
        steps.append((f"rerun-{i}", lambda i=i: run_playbook(f"rerun-{i}", "rerun", "site.yml")))
    for i in range(1, smokes + 1):
        steps.append(
            (f"smoke-{i}", lambda i=i: run_playbook(f"smoke-{i}", "smoke", "smoke_train.yml"))
        )
    floor, facts = floor_playbook(scratch, False), floor_playbook(scratch, True)
    steps.append(("floor-ping", lambda: run_playbook("floor-ping", "floor", str(floor))))
    steps.append(
        (
            "floor-facts",
            lambda: run_playbook("floor-facts", "floor_facts", str(facts), env=FLOOR_FACTS_ENV),
        )
    )
    # The rerun and its floor once more without ansible-runner (the peer's way).
    for i in range(1, reruns + 1):
        steps.append(
            (
                f"rerun-plain-{i}",
                lambda i=i: run_plain(f"rerun-plain-{i}", "rerun_plain", "site.yml"),
            )
        )
    steps.append(
        (
            "floor-facts-plain",
            lambda: run_plain(
                "floor-facts-plain", "floor_facts_plain", str(facts), env=FLOOR_FACTS_ENV
            ),
        )
    )
    return steps


def run_steps(steps: list[Step]) -> list[RunResult]:
    """Run in order; the first failed run stops the rest (they would measure a broken cluster)."""
    runs: list[RunResult] = []
    for name, step in steps:
        print(f"bench: {name} ...", flush=True)
        run = step()
        note = f", changed={run.changed}" if run.hosts else ""
        print(f"bench: {name} {run.status} in {run.wall_s:.1f} s{note}", flush=True)
        runs.append(run)
        if not run.ok:
            print(f"bench: stopping, {name} did not succeed", flush=True)
            break
    return runs


def output_of(argv: list[str]) -> str | None:
    try:
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return None


def version_of(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "nproc": len(os.sched_getaffinity(0)),
        "memory_gib": memory_gib(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "ansible_core": version_of("ansible-core"),
        "ansible_runner": version_of("ansible-runner"),
        "molecule": version_of("molecule"),
        "docker": output_of(["docker", "version", "--format", "{{.Server.Version}}"]),
        "commit": output_of(["git", "rev-parse", "HEAD"]),
        "dirty": bool(output_of(["git", "status", "--porcelain"])),
    }


def now_utc() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def results_doc(
    runs: list[RunResult], machine: Mapping[str, Any], started: datetime, argv: list[str]
) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "started": started.isoformat().replace("+00:00", "Z"),
        "finished": now_utc().isoformat().replace("+00:00", "Z"),
        "argv": argv,
        "machine": dict(machine),
        "targets_s": TARGETS_S,
        "runs": [r.to_dict() for r in runs],
        "summary": summarise(runs),
        "problems": problems(runs),
    }


def load_results(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text())
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise SystemExit(
            f"bench: {path}: schema_version {doc.get('schema_version')!r}, "
            f"this tool reads {SCHEMA_VERSION}"
        )
    return doc


def write_results(doc: Mapping[str, Any], out: Path, started: datetime) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path


def report(doc: Mapping[str, Any], png: Path, compare_to: Path | None) -> None:
    """Table, chart, comparison and problems of one results document."""
    print(render_table(doc))
    try:
        print(f"chart: {render_png(doc, png)}")
    except ImportError:
        print("chart: skipped, matplotlib is not installed")
    if compare_to:
        print(compare(load_results(compare_to), doc))
    for line in doc["problems"]:
        print(f"bench: FAIL {line}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reruns", type=int, default=3, help="no-change site.yml runs (3)")
    parser.add_argument("--smokes", type=int, default=3, help="smoke_train.yml runs (3)")
    parser.add_argument(
        "--no-fresh", action="store_true", help="keep the containers: no destroy/create, no cold"
    )
    parser.add_argument("--compare", type=Path, metavar="FILE", help="earlier results file")
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        metavar="DIR",
        help=f"results folder ({DEFAULT_OUT.relative_to(ROOT)})",
    )
    parser.add_argument(
        "--report",
        type=Path,
        metavar="FILE",
        help="run nothing: print the table (and --compare) of a results file",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report:
        doc = load_results(args.report)
        report(doc, args.out / f"{args.report.stem}.png", args.compare)
        return 1 if doc["problems"] else 0
    if args.compare:
        load_results(args.compare)  # a bad file fails now, not after the runs
    started = now_utc()
    with tempfile.TemporaryDirectory(prefix="bench-") as scratch:
        steps = [] if args.no_fresh else fresh_steps()
        runs = run_steps(steps + playbook_steps(args.reruns, args.smokes, Path(scratch)))
    doc = results_doc(runs, machine_info(), started, sys.argv[1:] if argv is None else argv)
    path = write_results(doc, args.out, started)
    print(f"results: {path}")
    report(doc, path.with_suffix(".png"), args.compare)
    return exit_code(runs)


if __name__ == "__main__":
    sys.exit(main())
