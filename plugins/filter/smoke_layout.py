"""Fit the smoke job to the cluster as Slurm reports it (tests/test_smoke_layout.py).

Input: lines of `sinfo --noheader --Node --format=%P|%N|%G|%t|%E` (one line
per node and partition; the default partition has a trailing '*').
"""

from __future__ import annotations

import re

# Node states (sinfo %t, compact) in which a node can take the job.
USABLE = re.compile(r"^(idle|mix|alloc|comp)$")
# Drained (or draining) and answering: with the acceptance prefix in its
# reason, a node that waits for the job to prove it.
DRAINED = re.compile(r"^(drain|drng)$")
PREFIX = "acceptance:"


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
        reason = fields[4].strip() if len(fields) > 4 else ""
        if part.endswith("*"):
            part = part[:-1]
            default = part
        nodes = parts.setdefault(part, [])
        if all(n["name"] != name for n in nodes):
            nodes.append({"name": name, "gpus": _gpus(gres), "state": state, "reason": reason})
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
    pending = sum(_pending(n, prefix) for n in members)
    return (-pending, -len(members) if pending else 0, name)


def smoke_layout(
    lines: list, request: str = "", nodes: int = 0, prefix: str = PREFIX, only_pending: bool = False
) -> dict:
    """The runs the smoke job makes, or why it cannot start.

    request: '' (the default partition), a partition name, or 'all' (each in turn).
    nodes: how many nodes per partition (0: all of them).
    prefix: the drain reason's prefix of nodes awaiting acceptance. A partition
    with such nodes runs them with one known-good (idle) node, if it has one,
    and nothing else: `nodes` is not read, and drains by an admin are not
    needed, so they do not stop it. only_pending: only such partitions run
    (site.yml's acceptance play); the others are not looked at.
    Returns {'runs': [{partition, nodes, gpus: {node: n}, world_size, gpu_job,
             total_gpus, pending, good}], 'problems': [text, ...]}: one rank per
    GPU on GPU nodes, one per CPU-only node; the world size is the sum.
    """
    parts, default = _parse(lines)
    problems: list = []
    if request == "all":
        # Partitions with the most nodes awaiting acceptance first, then the
        # larger ones: a node in two partitions is accepted once, in the job
        # most likely to have a known-good node beside it (see claimed).
        wanted = sorted(parts, key=lambda p: _claim_order(parts[p], p, prefix))
    elif request:
        wanted = [request]
    else:
        wanted = [default] if default else []
        if not default:
            problems.append("Slurm reports no default partition; set smoke_train_partition")
    runs = []
    # Pending nodes an earlier run of this layout tests: later partitions
    # leave them out (the earlier run resumes them, or leaves them drained).
    claimed: set = set()
    for name in wanted:
        members = sorted(
            (n for n in parts.get(name, []) if n["name"] not in claimed), key=lambda n: n["name"]
        )
        if name not in parts:
            known = ", ".join(sorted(parts)) or "none"
            problems.append(
                f"partition {name} does not exist or has no nodes (Slurm has: {known}); "
                "set smoke_train_partition to one of them"
            )
            continue
        accept = _acceptance(members, prefix)
        if only_pending and not accept:
            continue
        usable = [n for n in members if USABLE.match(n["state"])]
        bad = [n for n in members if not USABLE.match(n["state"])]
        count = len(accept) or int(nodes) or len(members)
        if count > len(members):
            problems.append(
                f"partition {name} has {len(members)} node(s) "
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
                f"partition {name}: {listed}. The job would wait for them: mend them "
                "(doctor.yml names the cause), or `scontrol update nodename=NODE state=resume`"
            )
            continue
        chosen = sorted(accept, key=lambda n: n["name"]) or usable[:count]
        with_gpus = [n for n in chosen if n["gpus"] > 0]
        if with_gpus and len(with_gpus) != len(chosen):
            problems.append(
                f"partition {name} mixes GPU nodes ({', '.join(n['name'] for n in with_gpus)}) "
                f"and CPU-only nodes ({', '.join(n['name'] for n in chosen if not n['gpus'])}); "
                "one job cannot give one rank per GPU and one per CPU node. Put the CPU-only "
                "nodes in a partition of their own"
            )
            continue
        claimed.update(n["name"] for n in chosen if _pending(n, prefix))
        gpus = {n["name"]: n["gpus"] for n in chosen}
        runs.append(
            {
                "partition": name,
                "nodes": [n["name"] for n in chosen],
                "gpus": gpus,
                "gpu_job": bool(with_gpus),
                "total_gpus": sum(gpus.values()),
                "world_size": sum(max(g, 1) for g in gpus.values()),
                "pending": [n["name"] for n in chosen if _pending(n, prefix)],
                "good": [n["name"] for n in chosen if not _pending(n, prefix)],
            }
        )
    return {"runs": runs, "problems": problems}


class FilterModule:
    def filters(self) -> dict:
        return {"smoke_layout": smoke_layout}
