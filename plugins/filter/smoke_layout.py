"""Fit the smoke job to the cluster as Slurm reports it (tests/test_smoke_layout.py).

Input: lines of `sinfo --noheader --Node --format=%P|%N|%G|%t|%c|%m|%E` (one
line per node and partition; the default partition has a trailing '*'). The
older form without CPUs and memory (`%P|%N|%G|%t|%E`) is read too; then the
request is not checked against them.

Within a partition the nodes are grouped by kind, GPU nodes and CPU-only
nodes, and each group runs its own job on its own nodes: one rank per GPU on
GPU nodes, one rank per CPU-only node. A node is proven once, in the first
run that holds it.
"""

from __future__ import annotations

import json
import re

# Node states (sinfo %t, compact) in which a node can take the job.
USABLE = re.compile(r"^(idle|mix|alloc|comp)$")
# Drained (or draining) and answering: with the acceptance prefix in its
# reason, a node that waits for the job to prove it.
DRAINED = re.compile(r"^(drain|drng)$")
PREFIX = "acceptance:"
# Lines of a launch's output kept with its outcome (ddp_smoke.modes.TAIL_LINES).
TAIL_LINES = 6
# Memory one rank needs at least (MiB): python, torch and the test model.
MIN_RANK_MEM_MB = 512


def _gpus(gres: str) -> int:
    """GPUs in a Gres string: 'gpu:2', 'gpu:h100:8(S:0-1)', 'gpu:a:1,gpu:b:1' → 2, 8, 2."""
    total = 0
    for part in (gres or "").split(","):
        m = re.match(r"^gpu(?::[^:(]+)?:(\d+)", part.strip())
        if m:
            total += int(m.group(1))
    return total


def _parse(lines: list) -> tuple[dict, str]:
    """({partition: [{name, gpus, state, reason}, ...]}, default partition)."""
    parts: dict = {}
    default = ""
    for line in lines:
        fields = str(line).split("|")
        if len(fields) < 4:
            continue
        part, name, gres, state = (f.strip() for f in fields[:4])
        cpus = mem = None
        rest = fields[4:]
        if len(rest) >= 3 and rest[0].strip().isdigit() and rest[1].strip().rstrip("+").isdigit():
            cpus, mem = int(rest[0]), int(rest[1].strip().rstrip("+"))
            rest = rest[2:]
        reason = "|".join(rest).strip()
        if part.endswith("*"):
            part = part[:-1]
            default = part
        nodes = parts.setdefault(part, [])
        if all(n["name"] != name for n in nodes):
            nodes.append(
                {
                    "name": name,
                    "gpus": _gpus(gres),
                    "state": state,
                    "reason": reason,
                    "cpus": cpus,
                    "mem": mem,
                }
            )
    return parts, default


def _pending(node: dict, prefix: str) -> bool:
    return bool(DRAINED.match(node["state"])) and node["reason"].startswith(prefix)


def _acceptance(members: list, prefix: str) -> list:
    """Nodes awaiting acceptance, with the first idle node that is in service
    (the known-good one) in front, when the partition has one."""
    pending = [n for n in members if _pending(n, prefix)]
    if not pending:
        return []
    good = [n for n in members if n["state"] == "idle"][:1]
    return good + pending


def _claim_order(members: list, name: str, prefix: str) -> tuple:
    """Partitions with the most pending nodes first, then the larger ones: a node in
    several partitions is proven once, in the largest job that holds it."""
    pending = sum(_pending(n, prefix) for n in members)
    return (-pending, -len(members), name)


def _request_problems(label: str, chosen: list, gpu_job: bool) -> list:
    """Why Slurm could never place this job's ranks on a node (its CPUs and memory)."""
    out = []
    for n in chosen:
        ranks = max(n["gpus"], 1) if gpu_job else 1
        if n.get("cpus") is not None and ranks > n["cpus"]:
            out.append(
                f"{label}: node {n['name']} would run {ranks} ranks (one per GPU, one task "
                f"each) but Slurm gives it {n['cpus']} CPUs, so srun would refuse the request. "
                f"Fix: give {n['name']} at least {ranks} CPUs (its NodeName line: slurmd -C), "
                f"or set slurm_compute_gpus of {n['name']} to at most {n['cpus']}"
            )
        need = ranks * MIN_RANK_MEM_MB
        if n.get("mem") is not None and n["mem"] < need:
            out.append(
                f"{label}: node {n['name']} would run {ranks} ranks, {need} MiB at least, "
                f"but Slurm gives it RealMemory={n['mem']} MiB. Fix: raise its RealMemory "
                "(slurm_compute_node_overrides) to what the node has"
            )
    return out


def _kinds(members: list) -> list:
    """The partition's nodes by kind: [(kind, nodes)], GPU nodes first; kind '' when one."""
    gpu = [n for n in members if n["gpus"] > 0]
    cpu = [n for n in members if n["gpus"] == 0]
    if gpu and cpu:
        return [("gpu", gpu), ("cpu", cpu)]
    return [("", members)] if members else []


def smoke_layout(
    lines: list, request: str = "", nodes: int = 0, prefix: str = PREFIX, only_pending: bool = False
) -> dict:
    """The runs the smoke job makes, or why it cannot start.

    request: '' (the default partition), a partition name, or 'all' (each in turn).
    nodes: how many nodes per group (0: all of them).
    prefix: the drain reason's prefix of nodes awaiting acceptance. A group
    with such nodes runs them with one known-good (idle) node of the same
    kind, if it has one, and nothing else: `nodes` is not read, and drains by
    an admin are not needed, so they do not stop it. only_pending: only such
    groups run (site.yml's acceptance play); the others are not looked at.
    Returns {'runs': [{partition, kind, label, nodes, gpus: {node: n},
             world_size, gpu_job, total_gpus, pending, good}], 'problems': [...]}:
    label names the run's files and reservation (the partition, with -gpu or
    -cpu where the partition mixes both kinds).
    """
    parts, default = _parse(lines)
    problems: list = []
    if request == "all":
        # Partitions with the most nodes awaiting acceptance first, then the
        # larger ones: a node in two partitions is proven once, in the job
        # most likely to have a known-good node beside it (see claimed), and
        # in the larger job otherwise.
        wanted = sorted(parts, key=lambda p: _claim_order(parts[p], p, prefix))
    elif request:
        wanted = [request]
    else:
        wanted = [default] if default else []
        if not default:
            problems.append("Slurm reports no default partition; set smoke_train_partition")
    runs = []
    # Nodes an earlier run of this layout proves: later runs leave them out.
    claimed: set = set()
    for name in wanted:
        if name not in parts:
            known = ", ".join(sorted(parts)) or "none"
            problems.append(
                f"partition {name} does not exist or has no nodes (Slurm has: {known}); "
                "set smoke_train_partition to one of them"
            )
            continue
        left = sorted((n for n in parts[name] if n["name"] not in claimed), key=lambda n: n["name"])
        for kind, members in _kinds(left):
            label = f"{name}-{kind}" if kind else name
            what = f"partition {name}" + (f" ({kind} nodes)" if kind else "")
            accept = _acceptance(members, prefix)
            if only_pending and not accept:
                continue
            usable = [n for n in members if USABLE.match(n["state"])]
            bad = [n for n in members if not USABLE.match(n["state"])]
            count = len(accept) or int(nodes) or len(members)
            if count > len(members):
                problems.append(
                    f"{what} has {len(members)} node(s) "
                    f"({', '.join(n['name'] for n in members)}) but smoke_train_nodes={nodes}; "
                    "lower smoke_train_nodes, or set it to 0 (all)"
                )
                continue
            if not accept and count > len(usable):
                listed = "; ".join(
                    f"{n['name']} is {n['state']}" + (f" ({n['reason']})" if n["reason"] else "")
                    for n in bad
                )
                problems.append(
                    f"{what}: {listed}. The job would wait for them: mend them "
                    "(doctor.yml names the cause), or `scontrol update nodename=NODE state=resume`"
                )
                continue
            chosen = sorted(accept, key=lambda n: n["name"]) or usable[:count]
            gpu_job = any(n["gpus"] > 0 for n in chosen)
            refused = _request_problems(what, chosen, gpu_job)
            if refused:
                problems.extend(refused)
                continue
            claimed.update(n["name"] for n in chosen)
            gpus = {n["name"]: n["gpus"] for n in chosen}
            runs.append(
                {
                    "partition": name,
                    "kind": kind or ("gpu" if gpu_job else "cpu"),
                    "label": label,
                    "nodes": [n["name"] for n in chosen],
                    "gpus": gpus,
                    "gpu_job": gpu_job,
                    "total_gpus": sum(gpus.values()),
                    "world_size": sum(max(g, 1) for g in gpus.values()),
                    "pending": [n["name"] for n in chosen if _pending(n, prefix)],
                    "good": [n["name"] for n in chosen if not _pending(n, prefix)],
                }
            )
    return {"runs": runs, "problems": problems}


# What srun and sbatch print when Slurm refuses the request itself: no rank
# ran, and the cause is the launch, not a node.
REFUSED = re.compile(
    r"Unable to allocate resources|Requested node configuration is not available"
    r"|Requested partition configuration not available|Invalid generic resource"
    r"|Batch job submission failed|More processors requested than permitted"
    r"|Reason=PartitionConfig|Requested time limit is invalid|cannot be satisfied"
    r"|Invalid (account|partition|qos)"
    # The launcher's own step failed before Slurm saw anything.
    r"|^runuser: |ddp_smoke launcher: "
)


def launch_refusal(lines: list | str) -> str:
    """The line in which Slurm refused a launch's request, or '' (a node's failure, or none).

    A job whose request Slurm refused never reached a node: the acceptance gate
    leaves its pending nodes as they were instead of draining them for it.
    """
    text = [lines] if isinstance(lines, str) else [str(line) for line in lines or []]
    return next((line.strip() for line in text if REFUSED.search(line)), "")


def smoke_outcomes(launched: dict, modes: list, partition: str) -> list:
    """One outcome per mode asked for, from `ddp_smoke modes`' JSON lines (registered result).

    A mode with no line (the runner stopped before it, or could not start) fails
    with what the runner said last; every outcome is tagged with its partition.
    """
    found: dict = {}
    for line in (launched or {}).get("stdout_lines") or []:
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("mode") in modes:
            found.setdefault(value["mode"], value)
    said = [str(line) for line in (launched or {}).get("stderr_lines") or []][-TAIL_LINES:]
    rc = (launched or {}).get("rc")
    out = []
    for mode in modes:
        outcome = found.get(mode) or {
            "mode": mode,
            "passed": False,
            "launch_rc": 99,
            "launch_s": 0.0,
            "phases_s": {},
            "startup_s": 0.0,
            "table": "",
            "report": None,
            "cause": f"no outcome: the mode runner stopped before it (exit {rc})"
            + (f": {said[-1]}" if said else ""),
            "tail": said,
        }
        out.append({"partition": partition, **outcome})
    return out


def smoke_refused(outcomes: list, partition: str | None = None) -> list:
    """The failed launches Slurm refused as a request, as "mode: line" (of one partition)."""
    return [
        f"{o['mode']}: {line}"
        for o in outcomes or []
        if (partition is None or o.get("partition") == partition) and not o.get("passed")
        for line in [launch_refusal(o.get("tail") or [])]
        if line
    ]


def smoke_refused_nodes(outcomes: list, runs: list) -> list:
    """The nodes of the jobs whose launch Slurm refused: no verdict is theirs."""
    refused = {o.get("partition") for o in outcomes or [] if smoke_refused([o])}
    nodes: list = []
    for job in runs or []:
        if job.get("label") in refused:
            nodes += [n for n in job.get("nodes", []) if n not in nodes]
    return nodes


class FilterModule:
    def filters(self) -> dict:
        return {
            "smoke_layout": smoke_layout,
            "launch_refusal": launch_refusal,
            "smoke_outcomes": smoke_outcomes,
            "smoke_refused": smoke_refused,
            "smoke_refused_nodes": smoke_refused_nodes,
        }
