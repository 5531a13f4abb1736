"""Which nodes wait for the acceptance job (tests/test_acceptance_pending.py)."""

from __future__ import annotations

import re

# sinfo %t of a drained or draining node (with or without flags such as '*').
DRAINED = re.compile(r"^(drain|drng|drained|draining)")


def _lines(sinfo_lines: list) -> dict:
    """{NodeName: (state, reason)} from `sinfo --Node --format=%N|%t|%E` lines."""
    out: dict = {}
    for line in sinfo_lines or []:
        name, _sep, rest = str(line).partition("|")
        state, _sep, reason = rest.partition("|")
        if name and name not in out:
            out[name] = (state.strip(), reason.strip())
    return out


def acceptance_pending(
    sinfo_lines: list, nodes: list, changed: list, prefix: str, answered: bool = True
) -> list:
    """NodeNames to drain with `<prefix> pending` before their slurmd (re)starts.

    sinfo_lines: what slurmctld reported before this run changed anything
    (answered=False when it did not answer: a first install, every node is new).
    nodes: this play's compute nodes, each {'name': NodeName, 'changed': bool}
    (its slurmd changes release or its PyTorch was reinstalled).
    changed: NodeNames whose NodeName line or GPUs changed.
    A node an admin drained (a reason without the prefix) is never listed.
    """
    known = _lines(sinfo_lines) if answered else {}
    pending = []
    for node in nodes:
        name = str(node["name"])
        state, reason = known.get(name, ("", ""))
        if DRAINED.match(state) and not reason.startswith(prefix):
            continue
        if name not in known or name in changed or node.get("changed"):
            pending.append(name)
    return sorted(set(pending))


def acceptance_candidates(hosts: list) -> list:
    """[{'name', 'changed'}] of hostvars entries: the node's NodeName (hostname -s)
    and whether its slurmd changes release or its PyTorch was (re)installed."""
    out = []
    for host in hosts:
        upgrade = host.get("slurm_common_upgrade") or {}
        torch = host.get("pytorch_install") or {}
        out.append(
            {
                "name": host["ansible_facts"]["hostname"],
                "changed": "slurmd" in upgrade or bool(torch.get("changed")),
            }
        )
    return out


class FilterModule:
    def filters(self) -> dict:
        return {
            "slurm_acceptance_pending": acceptance_pending,
            "slurm_acceptance_candidates": acceptance_candidates,
        }
