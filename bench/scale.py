#!/usr/bin/env python3
"""How provisioning and proving the cluster grow with the node count.

`make bench BENCH_NODES=3,8,16` runs, for each count N, on a fresh cluster of
one controller and N compute containers (the demo's base image, the demo's
inventory values, molecule/shared/create.yml and prepare.yml):

  cold      site.yml with no cached facts
  rerun     site.yml again, 3 times (median; each must report changed=0)
  doctor    doctor.yml
  smoke     smoke_train.yml, srun only: one rank per node (one fake GPU each,
            CPU torch from one venv on the shared filesystem)
  add       one more container, then site.yml --limit node<N+1> (its
            acceptance job included)
  floor     Ansible's own floor on the same hosts: one ping, no facts
  ab        with --other DIR (another checkout of the project, e.g. a worktree
            of an older commit): after the reruns, plain no-change reruns of
            this checkout and of DIR in turn on the same cluster, inventory
            and fact cache, --ab-rounds rounds after one warm-up round; each
            must report changed=0. Settles whether a change or the machine
            made a count slower.

and records each run's wall time, the peak RSS of the ansible-playbook
process tree, the tasks per host, and the machine's lowest available memory
and swap used while it ran. Results: bench/results/scale-<UTC>.json and a
PNG of time against node count per phase, the floor drawn for the same counts.

PyTorch: one venv on the shared filesystem (pytorch_venv_shared), installed
once, used by every node: the disk holds one copy whatever N is.

The demo cluster's containers (ctl, node1, ...) are removed first: one
cluster at a time on this machine. `make demo` brings the demo back.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import interleave

import bench

ROOT = bench.ROOT
CREATE = ROOT / "molecule/shared/create.yml"
DESTROY = ROOT / "molecule/shared/destroy.yml"
PREPARE = ROOT / "molecule/shared/prepare.yml"
PHASES = ("cold", "rerun", "doctor", "smoke", "add", "floor")
PHASE_LABELS = {
    "cold": "cold site.yml",
    "rerun": "no-change rerun (median)",
    "doctor": "doctor.yml",
    "smoke": "smoke job, one rank per node",
    "add": "site.yml --limit one new node",
    "floor": "floor: one ping",
}
# Targets of issue 16, reported, never enforced: (phase, ratio of the largest
# count's figure to the smallest count's).
GROWTH_TARGETS = {"rerun": 1.5, "add": 1.0, "smoke": 2.0}
# The A/B names this many tasks where the two sides differ most.
AB_TASKS = 12
SAMPLE_S = 0.25


# --------------------------------------------------------------------------
# What the machine and the process tree use while a run goes


def _children(proc: Path = Path("/proc")) -> dict[int, list[int]]:
    """{parent pid: child pids} from every /proc/PID/stat readable now.

    Processes end while the scan reads: a stat file gone (ProcessLookupError,
    FileNotFoundError), empty or cut short is skipped, never raised.
    """
    tree: dict[int, list[int]] = {}
    try:
        names = os.listdir(proc)
    except OSError:
        return tree
    for name in names:
        if not name.isdigit():
            continue
        try:
            fields = (proc / name / "stat").read_text().rsplit(")", 1)[1].split()
            parent = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
        tree.setdefault(parent, []).append(int(name))
    return tree


def _rss_kib(pid: int, proc: Path = Path("/proc")) -> int:
    try:
        for line in (proc / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, IndexError, ValueError):
        pass
    return 0


def tree_rss_kib(root: int, proc: Path = Path("/proc")) -> int:
    """RSS of every process below root (root excluded: the bench itself)."""
    tree, total = _children(proc), 0
    todo = list(tree.get(root, []))
    while todo:
        pid = todo.pop()
        total += _rss_kib(pid, proc)
        todo += tree.get(pid, [])
    return total


def meminfo_kib() -> dict[str, int]:
    out = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = int(value.split()[0])
    return out


class Sampler:
    """Peak process-tree RSS, lowest MemAvailable and highest swap use, sampled."""

    def __init__(self) -> None:
        self.samples = 0
        self.errors: list[str] = []
        self.peak_rss_kib = 0
        self.min_available_kib: int | None = None
        self.max_swap_used_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        self.peak_rss_kib = max(self.peak_rss_kib, tree_rss_kib(os.getpid()))
        mem = meminfo_kib()
        available = mem.get("MemAvailable", 0)
        if self.min_available_kib is None or available < self.min_available_kib:
            self.min_available_kib = available
        swap = mem.get("SwapTotal", 0) - mem.get("SwapFree", 0)
        self.max_swap_used_kib = max(self.max_swap_used_kib, swap)

    def _loop(self) -> None:
        # One failed sample (a process gone mid-read) is noted, not the end of
        # the sampling: the thread goes on until the run ends.
        while not self._stop.wait(SAMPLE_S):
            try:
                self._sample()
                self.samples += 1
            except Exception as err:  # kept and reported with the figures
                self.errors.append(f"{type(err).__name__}: {err}")

    def __enter__(self) -> Sampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


# --------------------------------------------------------------------------
# The cluster of N compute nodes


def node_names(count: int) -> list[str]:
    return [f"node{i}" for i in range(1, count + 1)]


def platforms(names: Sequence[str]) -> list[dict[str, Any]]:
    groups = {"ctl": ["slurm_controller"]}
    return [
        {
            "name": name,
            "hostname": name,
            "image": "cluster-base:bookworm",
            "groups": groups.get(name, ["slurm_compute"]),
        }
        for name in names
    ]


def shared_venv() -> str:
    """The pytorch role's shared venv for the demo's torch pin (CPU variant: no driver here).

    Its rule: <pytorch_venv_shared_dir>/torch-<version without +local>-<variant>.
    """
    pins = yaml.safe_load(
        (ROOT / "inventory/local/group_vars/slurm_compute/pytorch.yml").read_text()
    )["pytorch_packages"]
    torch = next(p for p in pins if str(p).startswith("torch=="))
    version = torch.split("==", 1)[1].split("+", 1)[0]
    return f"/shared/.cluster/venvs/torch-{version}-cpu"


def write_inventory(directory: Path, computes: Sequence[str], results: Path) -> Path:
    """The demo's inventory (inventory/local) with `computes` as its compute nodes."""
    if directory.exists():
        shutil.rmtree(directory)
    shutil.copytree(ROOT / "inventory/local/group_vars", directory / "group_vars")
    hosts = {
        "all": {
            "children": {
                "slurm_cluster": {
                    "children": {
                        "slurm_controller": {"hosts": {"ctl": None}},
                        "slurm_dbd": {"hosts": {"ctl": None}},
                        "slurm_compute": {
                            "hosts": {name: {"slurm_compute_gpus": 1} for name in computes}
                        },
                    }
                }
            }
        }
    }
    (directory / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    (directory / "host_vars").mkdir()
    for name in ["ctl", *computes]:
        (directory / "host_vars" / f"{name}.yml").write_text("ansible_connection: docker\n")
    bench_vars = {
        # One venv on the shared filesystem for every node, the one the smoke
        # job and the doctor run (the pytorch role's shared venv path).
        "pytorch_venv_shared": True,
        "cluster_venv": shared_venv(),
        # The bench's own reports and history, not the repository's.
        "cluster_results_dir": str(results),
        # 16 ranks on 2 cores: step times say nothing about a node here.
        "smoke_train_max_slowdown": 0,
    }
    (directory / "group_vars/slurm_cluster/bench.yml").write_text(yaml.safe_dump(bench_vars))
    return directory


def tasks_per_host(run: bench.RunResult) -> dict[str, float]:
    counts = [h.ok + h.skipped + h.failures + h.unreachable for h in run.hosts.values()]
    if not counts:
        return {}
    return {"max": max(counts), "mean": round(statistics.mean(counts), 1)}


def measured(run: bench.RunResult, sampler: Sampler) -> dict[str, Any]:
    return {
        "name": run.name,
        "status": run.status,
        "wall_s": round(run.wall_s, 2),
        "changed": run.changed,
        "hosts": len(run.hosts),
        "tasks_per_host": tasks_per_host(run),
        "peak_rss_mib": round(sampler.peak_rss_kib / 1024, 1),
        "min_available_mib": round((sampler.min_available_kib or 0) / 1024),
        "max_swap_used_mib": round(sampler.max_swap_used_kib / 1024),
        # The memory samples taken, and any that failed (the sampling went on).
        "memory_samples": sampler.samples,
        "sampler_errors": sampler.errors[:5],
        # Where a phase grows faster than the floor, these name the task.
        "slowest": bench.slowest(run, 5),
        "errors": run.errors[:5],
    }


class Cluster:
    """One count's cluster: its containers, inventories and fact cache in scratch."""

    def __init__(self, count: int, scratch: Path, most: int, reports: Path) -> None:
        self.count = count
        self.scratch = scratch / f"n{count}"
        self.scratch.mkdir(parents=True)
        # The doctor's and the smoke job's reports, kept next to the results.
        self.results = reports / f"n{count}"
        self.env = {"ANSIBLE_CACHE_PLUGIN_CONNECTION": str(self.scratch / "facts")}
        self.inventory = write_inventory(
            self.scratch / "inventory", node_names(count), self.results
        )
        self.new = f"node{count + 1}"
        self.grown = write_inventory(
            self.scratch / "inventory-grown", node_names(count + 1), self.results
        )
        self.every_name = ["ctl", *node_names(most + 1)]

    def play(
        self, name: str, kind: str, playbook: Path | str, *, grown: bool = False, **kw: Any
    ) -> tuple[bench.RunResult, Sampler]:
        with Sampler() as sampler:
            run = bench.run_playbook(
                name,
                kind,
                str(playbook),
                inventory=self.grown if grown else self.inventory,
                env={**self.env, **kw.pop("env", {})},
                **kw,
            )
        return run, sampler

    def containers(self, names: Sequence[str], state: str) -> bench.RunResult:
        return containers(names, state, self.inventory)


def containers(names: Sequence[str], state: str, inventory: Path) -> bench.RunResult:
    """Start (present) or remove (absent) these containers with the scenarios' own plays."""
    return bench.run_playbook(
        f"{state}-{len(names)}",
        state,
        str(CREATE if state == "present" else DESTROY),
        inventory=inventory,
        extravars={"molecule_yml": {"platforms": platforms(names)}, "create_keep_facts": True},
    )


def ab_reruns(cluster: Cluster, other: Path, rounds: int, out: dict[str, Any]) -> bool:
    """Plain reruns of this checkout and of other in turn (interleave.rounds: one warm-up
    round, the order reversed every other round); out['ab'] {this, other_s: [s]}. A run
    that fails or changes something stops the A/B."""
    args = ["-i", str(cluster.inventory)]

    def run(name: str, playbook: str, root: Path, run_args: Sequence[str]) -> bench.RunResult:
        return bench.run_plain(
            f"ab-{name}", "ab", playbook, env=cluster.env, root=root, args=run_args, tasks=True
        )

    def stop(result: bench.RunResult) -> bool:
        return not result.ok or bool(result.changed)

    order = [("this", "site.yml", bench.ROOT, args), ("other", "site.yml", other, args)]
    done = interleave.rounds(
        order, rounds, 1, run, stop=stop, label=f"scale: n={cluster.count} A/B"
    )
    complete = [r for r in done[1:] if len(r) == 2 and not any(map(stop, r.values()))]
    out["ab"] = {
        "other": str(other),
        "this": [round(r["this"].wall_s, 2) for r in complete],
        "other_s": [round(r["other"].wall_s, 2) for r in complete],
        "tasks": ab_tasks(complete),
    }
    stopped = [res for r in done for res in r.values() if stop(res)]
    if stopped:
        res = stopped[0]
        out["stopped"] = f"{res.name}: {res.status}, changed={res.changed}; {res.errors[:3]}"
        return False
    return True


def task_seconds(run: bench.RunResult) -> dict[str, float]:
    """Each task's time in one run, by "role : task" (run.tasks holds one entry per
    name, its instances summed: bench.merge_tasks)."""
    return {t.label: t.duration_s for t in run.tasks}


def ab_tasks(complete: Sequence[Mapping[str, bench.RunResult]], most: int = AB_TASKS) -> list:
    """Where the two sides differ, task by task: the median over the rounds of each
    side's time (0 where a side has no such task), the tasks with the largest
    difference first (other - this)."""
    if not complete:
        return []
    this = [task_seconds(r["this"]) for r in complete]
    other = [task_seconds(r["other"]) for r in complete]
    names = set().union(*this, *other)
    rows = []
    for name in names:
        a = statistics.median(t.get(name, 0.0) for t in this)
        b = statistics.median(t.get(name, 0.0) for t in other)
        rows.append({"task": name, "this_s": round(a, 2), "other_s": round(b, 2)})
    rows.sort(key=lambda r: (-abs(r["other_s"] - r["this_s"]), r["task"]))
    return rows[:most]


def ab_summary(ab: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Medians of both sides and the median of the paired differences (other - this)."""
    if not ab or not ab.get("this") or not ab.get("other_s"):
        return None
    pairs = [o - t for t, o in zip(ab["this"], ab["other_s"], strict=False)]
    return {
        "other": ab["other"],
        "rounds": len(pairs),
        "this_s": round(statistics.median(ab["this"]), 2),
        "other_s": round(statistics.median(ab["other_s"]), 2),
        "other_minus_this_s": round(statistics.median(pairs), 2),
        "this_faster_in": sum(d > 0 for d in pairs),
        "tasks": list(ab.get("tasks") or []),
    }


def run_count(
    count: int,
    scratch: Path,
    most: int,
    reruns: int,
    reports: Path,
    other: Path | None = None,
    ab_rounds: int = 2,
) -> dict[str, Any]:
    cluster = Cluster(count, scratch, most, reports)
    out: dict[str, Any] = {"nodes": count, "runs": {}}

    def keep(phase: str, run: bench.RunResult, sampler: Sampler) -> bool:
        out["runs"].setdefault(phase, []).append(measured(run, sampler))
        note = f", changed={run.changed}" if run.hosts else ""
        print(f"scale: n={count} {run.name} {run.status} in {run.wall_s:.1f} s{note}", flush=True)
        if not run.ok or (phase == "rerun" and run.changed):
            out["stopped"] = f"{run.name}: {run.status}, changed={run.changed}; {run.errors[:3]}"
            return False
        return True

    bench.empty_dir(bench.SHARED_DIR)
    for step in (
        lambda: cluster.containers(cluster.every_name, "absent"),
        lambda: cluster.containers(["ctl", *node_names(count)], "present"),
    ):
        run = step()
        if not run.ok:
            out["stopped"] = f"{run.name}: {run.errors[:3]}"
            return out
    prepared, sampler = cluster.play("prepare", "prepare", PREPARE)
    if not keep("prepare", prepared, sampler):
        return out
    steps: list[tuple[str, str, Path | str, dict[str, Any]]] = [("cold", "cold", "site.yml", {})]
    steps += [("rerun", f"rerun-{i}", "site.yml", {}) for i in range(1, reruns + 1)]
    steps += [
        ("doctor", "doctor", "doctor.yml", {}),
        ("smoke", "smoke", "smoke_train.yml", {"extravars": {"smoke_train_modes": ["srun"]}}),
    ]
    for phase, name, playbook, kw in steps:
        run, sampler = cluster.play(name, phase, playbook, **kw)
        if not keep(phase, run, sampler):
            return out
        last_rerun = name == f"rerun-{reruns}"
        if last_rerun and other is not None and not ab_reruns(cluster, other, ab_rounds, out):
            return out
    # One more node, added the way a lab adds one: --limit, configless.
    made = cluster.containers(["ctl", *node_names(count + 1)], "present")
    if not made.ok:
        out["stopped"] = f"create {cluster.new}: {made.errors[:3]}"
        return out
    for name, phase, playbook in (
        ("prepare-new", "prepare", PREPARE),
        ("add", "add", "site.yml"),
    ):
        run, sampler = cluster.play(name, phase, playbook, grown=True, limit=cluster.new)
        if not keep(phase, run, sampler):
            return out
    floor = bench.floor_playbook(cluster.scratch, False)
    run, sampler = cluster.play("floor", "floor", floor)
    keep("floor", run, sampler)
    return out


# --------------------------------------------------------------------------
# Summary, chart, table


def phase_s(entry: Mapping[str, Any], phase: str) -> float | None:
    runs = [r["wall_s"] for r in entry["runs"].get(phase, []) if r["status"] == "successful"]
    return round(statistics.median(runs), 2) if runs else None


def summarise(counts: list[dict[str, Any]]) -> dict[str, Any]:
    table = {
        str(c["nodes"]): {
            **{phase: phase_s(c, phase) for phase in PHASES},
            "peak_rss_mib": max(
                (r["peak_rss_mib"] for runs in c["runs"].values() for r in runs), default=None
            ),
            "min_available_mib": min(
                (r["min_available_mib"] for runs in c["runs"].values() for r in runs),
                default=None,
            ),
            "max_swap_used_mib": max(
                (r["max_swap_used_mib"] for runs in c["runs"].values() for r in runs),
                default=None,
            ),
            "rerun_tasks_per_host": (c["runs"].get("rerun") or [{}])[0].get("tasks_per_host"),
            # How many successful reruns the median is of (--reruns).
            "reruns": sum(r["status"] == "successful" for r in c["runs"].get("rerun", [])),
            "ab": ab_summary(c.get("ab")),
            "rerun_x_floor": (
                round(phase_s(c, "rerun") / phase_s(c, "floor"), 1)
                if phase_s(c, "rerun") and phase_s(c, "floor")
                else None
            ),
        }
        for c in counts
    }
    growth = {}
    if len(counts) >= 2:
        low, high = str(counts[0]["nodes"]), str(counts[-1]["nodes"])
        for phase, limit in GROWTH_TARGETS.items():
            a, b = table[low][phase], table[high][phase]
            ratio = round(b / a, 2) if a and b else None
            growth[phase] = {
                "from": int(low),
                "to": int(high),
                "ratio": ratio,
                "target": limit,
                "met": None if ratio is None else ratio <= limit,
            }
    return {"by_nodes": table, "growth": growth}


def render_table(summary: Mapping[str, Any]) -> str:
    counts = list(summary["by_nodes"])
    lines = ["| phase | " + " | ".join(f"{n} nodes" for n in counts) + " |"]
    lines.append("|---" * (len(counts) + 1) + "|")
    for phase in PHASES:
        row = [summary["by_nodes"][n][phase] for n in counts]
        cells = [f"{v:.1f} s" if v is not None else "-" for v in row]
        label = PHASE_LABELS[phase]
        if phase == "rerun":
            reruns = {summary["by_nodes"][n].get("reruns") for n in counts}
            if len(reruns) == 1 and None not in reruns:
                label = f"no-change rerun (median of {reruns.pop()})"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for key, label, unit in (
        ("rerun_x_floor", "rerun / floor", "x"),
        ("peak_rss_mib", "peak RSS of ansible-playbook's tree", " MiB"),
        ("min_available_mib", "lowest MemAvailable", " MiB"),
        ("max_swap_used_mib", "swap used", " MiB"),
    ):
        cells = [
            f"{summary['by_nodes'][n][key]}{unit}"
            if summary["by_nodes"][n][key] is not None
            else "-"
            for n in counts
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    cells = [
        str((summary["by_nodes"][n]["rerun_tasks_per_host"] or {}).get("max", "-")) for n in counts
    ]
    lines.append("| rerun tasks per host (max) | " + " | ".join(cells) + " |")
    for n in counts:
        ab = summary["by_nodes"][n].get("ab")
        if ab:
            lines.append(
                f"\nA/B at {n} nodes, plain reruns in turn ({ab['rounds']} rounds): this "
                f"{ab['this_s']:.2f} s, {ab['other']} {ab['other_s']:.2f} s; other - this, "
                f"median of the pairs {ab['other_minus_this_s']:+.2f} s "
                f"(this faster in {ab['this_faster_in']} of {ab['rounds']})"
            )
            if ab.get("tasks"):
                lines.append("where they differ most (median seconds per task; this / other):")
                lines += [
                    f"  {t['this_s']:6.2f} / {t['other_s']:6.2f} s  "
                    f"{t['other_s'] - t['this_s']:+.2f}  {t['task']}"
                    for t in ab["tasks"]
                ]
    for phase, g in summary["growth"].items():
        met = {True: "met", False: "NOT met", None: "not measured"}[g["met"]]
        lines.append(
            f"\n{PHASE_LABELS[phase]}: {g['to']} vs {g['from']} nodes = {g['ratio']}x "
            f"(target <= {g['target']}x, {met})"
        )
    return "\n".join(lines)


def slowest_tasks(counts: list[dict[str, Any]], phases: Sequence[str] = ("rerun", "add")) -> str:
    """The slowest tasks of the largest count's first run of each phase."""
    if not counts:
        return ""
    last = counts[-1]
    lines = []
    for phase in phases:
        runs = last["runs"].get(phase) or [{}]
        tasks = runs[0].get("slowest") or []
        if tasks:
            lines.append(f"slowest tasks, {PHASE_LABELS[phase]}, {last['nodes']} nodes:")
            lines += [
                f"  {t['duration_s']:6.1f} s  {t['role'] + ' : ' if t['role'] else ''}{t['task']}"
                for t in tasks
            ]
    return "\n".join(lines)


def render_png(summary: Mapping[str, Any], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    counts = [int(n) for n in summary["by_nodes"]]
    fig, ax = plt.subplots(figsize=(8, 5))
    for phase in PHASES:
        values = [summary["by_nodes"][str(n)][phase] for n in counts]
        points = [(n, v) for n, v in zip(counts, values, strict=True) if v is not None]
        if points:
            style = "k--" if phase == "floor" else "o-"
            ax.plot(*zip(*points, strict=True), style, label=PHASE_LABELS[phase])
    ax.set_xlabel("compute nodes")
    ax.set_ylabel("wall time (s)")
    ax.set_xticks(counts)
    ax.set_title("Cost against node count (one controller + N compute containers)")
    ax.grid(True, alpha=0.3)
    if ax.get_lines():
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--nodes", default="3,8,16", help="compute node counts, comma-separated")
    p.add_argument("--reruns", type=int, default=3)
    p.add_argument("--out", type=Path, default=bench.DEFAULT_OUT)
    p.add_argument("--report", type=Path, help="print and redraw a results file; run nothing")
    p.add_argument(
        "--other",
        type=Path,
        help="another checkout of the project: A/B plain reruns of both on each count's cluster",
    )
    p.add_argument("--ab-rounds", type=int, default=2, help="A/B rounds after the warm-up")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report:
        doc = json.loads(args.report.read_text())
        print(render_table(doc["summary"]))
        print(slowest_tasks(doc["counts"]))
        render_png(doc["summary"], args.report.with_suffix(".png"))
        return 0
    counts = sorted({int(n) for n in args.nodes.split(",") if n.strip()})
    if not counts or counts[0] < 1:
        sys.exit("scale: --nodes wants positive counts, e.g. 3,8,16")
    if args.other is not None and not (args.other / "site.yml").is_file():
        sys.exit(
            f"scale: --other {args.other} has no site.yml; fix: name another checkout of the"
            " project (git worktree add ../old COMMIT)"
        )
    if args.ab_rounds < 1:
        sys.exit("scale: --ab-rounds wants 1 or more")
    started = datetime.now(UTC)
    subprocess.run(
        ["molecule", "destroy"],
        cwd=ROOT,
        env=dict(os.environ, **bench.tool_env()),
        capture_output=True,
        check=False,
    )
    results = []
    reports = args.out / f"scale-{started.strftime('%Y%m%dT%H%M%SZ')}-reports"
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as scratch:
        for count in counts:
            entry = run_count(
                count,
                Path(scratch),
                counts[-1],
                args.reruns,
                reports,
                other=args.other.resolve() if args.other else None,
                ab_rounds=args.ab_rounds,
            )
            results.append(entry)
            if "stopped" in entry:
                print(f"scale: n={count} stopped: {entry['stopped']}", flush=True)
                break
        containers(["ctl", *node_names(counts[-1] + 1)], "absent", bench.INVENTORY)
    summary = summarise(results)
    doc = {
        "schema": 1,
        "kind": "scale",
        "started": started.isoformat(timespec="seconds"),
        "machine": bench.machine_info(),
        "counts": results,
        "summary": summary,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"scale-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"results: {path}")
    print(render_table(summary))
    print(slowest_tasks(results))
    png = render_png(summary, path.with_suffix(".png"))
    if png:
        print(f"chart: {png}")
    return 0 if all("stopped" not in c for c in results) else 1


if __name__ == "__main__":
    sys.exit(main())
