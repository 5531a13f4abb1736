"""The cluster doctor's judgement: probe results of every node in, checks and causes out.

Pure functions (unit-tested in tests/test_doctor.py). ``doctor_report`` turns what
``cluster_probe`` read on each node into one result per node and check of the
registry (plugins/module_utils/cluster_checks.py, every check with use
``doctor``), each with a stable id, PASS/WARN/FAIL/SKIP, the evidence and the
fix. Node checks are the verdicts of their one reader, run on the node by the
probe (the node health program and the collector run the same readers);
cluster checks are judged here from several nodes' probes
(plugins/module_utils/doctor_steps.py, doctor_slurm.py). A FAIL that another FAIL
explains (the registry's ``explained_by``: on the same node, on any node, or on
the controller) carries ``caused_by`` and is not listed among the causes: the
report names the broken component, not its consequences.
"""

from __future__ import annotations

from collections import Counter

from ansible_collections.gpulab.slurm_cluster.plugins.module_utils import cluster_checks as registry
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.doctor_slurm import STEPS, Doctor
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.doctor_steps import (
    CONF_NAME,
    gres_gpu_count,
    parse_nodes,
)


def doctor_checks() -> tuple[str, ...]:
    """The registry's checks with use doctor, in its order (the report's columns)."""
    return tuple(c.id for c in registry.REGISTRY if "doctor" in c.uses)


CHECKS = doctor_checks()
__all__ = [
    "CHECKS",
    "Doctor",
    "doctor_causes",
    "doctor_checks",
    "doctor_report",
    "doctor_table",
    "gres_gpu_count",
    "parse_nodes",
]


def _explained_here(r: dict, dep: str, index: dict) -> bool:
    """A FAIL of `dep` on r's host explains r (services: only its own units down)."""
    other = index.get((r["host"], dep))
    if other is None or other["status"] != "FAIL" or dep == r["check"]:
        return False
    # services: the units down of the dependency, or of this result itself.
    whose = other if dep == "services" else r
    down = (whose.get("data") or {}).get("down", ())
    return registry.explains(registry.BY_ID[r["check"]], dep, down)


def attribute(d: Doctor) -> None:
    index = {(r["host"], r["check"]): r for r in d.results}
    failed = {key for key, r in index.items() if r["status"] == "FAIL"}
    for r in d.results:
        if r["status"] != "FAIL":
            continue
        check = registry.BY_ID[r["check"]]
        local = next((dep for dep in check.explained_by if _explained_here(r, dep, index)), None)
        if local is not None:
            r["caused_by"] = f"{r['host']} {local}"
            continue
        for dep in check.explained_by_any:
            culprit = next((h for h, c in failed if c == dep), None)
            if culprit is not None:
                r["caused_by"] = f"{culprit} {dep}"
                break
        if "caused_by" in r or r["host"] == d.ctl:
            continue
        for dep in check.explained_by_controller:
            if (d.ctl, dep) in failed and _ctl_explains(d, dep, r["check"], r):
                r["caused_by"] = f"{d.ctl} {dep}"
                break
    _break_cycles(d)


def _break_cycles(d: Doctor) -> None:
    """A chain of caused_by that comes back to itself has no cause: its first FAIL is one."""
    index = {f"{r['host']} {r['check']}": r for r in d.results}
    for r in d.results:
        seen = set()
        cur = r
        while "caused_by" in cur:
            key = f"{cur['host']} {cur['check']}"
            if key in seen:
                del cur["caused_by"]
                break
            seen.add(key)
            cur = index[cur["caused_by"]]


def _ctl_explains(d: Doctor, dep: str, check: str, result: dict | None = None) -> bool:
    """A controller failure of the same check explains a node's only when all nodes fail it."""
    if dep != check:
        return True
    if check == "config.files" and result is not None:
        # The controller's file explains a node's stale copy of the same file.
        mine = set(CONF_NAME.findall(result["evidence"]))
        ctl = next(r for r in d.results if r["host"] == d.ctl and r["check"] == "config.files")
        return bool(mine) and mine <= set(CONF_NAME.findall(ctl["evidence"]))
    return all(
        any(r["host"] == h and r["check"] == check and r["status"] == "FAIL" for r in d.results)
        for h in d.others()
    )


def doctor_report(probes: dict, ctx: dict) -> dict:
    """{hosts, checks, results, causes, counts, verdict} from {host: {local, cross}} probes."""
    d = Doctor(probes, ctx)
    d.node_checks()
    checks = doctor_checks()
    for check in checks:
        if check in STEPS:
            getattr(d, STEPS[check])()
    d.reachability()
    attribute(d)
    order = {c: i for i, c in enumerate(checks)}
    hosts = list(ctx["hosts"])
    d.results.sort(
        key=lambda r: (hosts.index(r["host"]) if r["host"] in hosts else 99, order[r["check"]])
    )
    causes = [r for r in d.results if r["status"] == "FAIL" and "caused_by" not in r]
    counts = Counter(r["status"] for r in d.results)
    return {
        "hosts": hosts,
        "checks": list(checks),
        "results": d.results,
        "causes": causes,
        "counts": dict(counts),
        "verdict": "FAIL" if causes else ("WARN" if counts.get("WARN") else "PASS"),
    }


def doctor_table(report: dict) -> list[str]:
    """Node x check table: PASS/WARN/FAIL, '(fail)' for a consequence, '-' for SKIP."""
    cell = {(r["host"], r["check"]): r for r in report["results"]}
    short = [c.split(".", 1)[-1] if c != "clock" else c for c in report["checks"]]
    # Where two checks share a last part (munge.key, auth.key), their ids are shown whole.
    short = [c if short.count(s) > 1 else s for c, s in zip(report["checks"], short, strict=True)]
    width = max(len(h) for h in report["hosts"] + ["node"])
    cols = [max(len(s), 6) for s in short]
    lines = [
        "node".ljust(width) + "  " + "  ".join(s.ljust(w) for s, w in zip(short, cols, strict=True))
    ]
    for h in report["hosts"]:
        row = []
        for check, w in zip(report["checks"], cols, strict=True):
            r = cell.get((h, check))
            text = "-" if r is None or r["status"] == "SKIP" else r["status"]
            if r is not None and r["status"] == "FAIL" and "caused_by" in r:
                text = "(fail)"
            row.append(text.ljust(w))
        lines.append(h.ljust(width) + "  " + "  ".join(row).rstrip())
    return lines


def doctor_causes(report: dict) -> list[str]:
    """One line per root cause: 'host check: evidence. Fix: …'."""
    return [f"{r['host']} {r['check']}: {r['evidence']}. Fix: {r['fix']}" for r in report["causes"]]


class FilterModule:
    def filters(self) -> dict:
        return {
            "doctor_report": doctor_report,
            "doctor_table": doctor_table,
            "doctor_causes": doctor_causes,
        }
