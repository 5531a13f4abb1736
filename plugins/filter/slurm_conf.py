"""Filters that turn node facts into slurm.conf/gres.conf content and judge changes.

Pure functions, unit-tested in tests/test_slurm_conf_filters.py.
"""

from __future__ import annotations

import base64
from collections import Counter

from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.slurm_fields import (
    SLURMD_FIELDS,
)

# slurm.conf field -> key in the slurm_node fact (from slurmd -C), as the
# slurm_node_info module names them.
LAYOUT = dict(SLURMD_FIELDS)

# Keys whose change slurmctld/slurmd only pick up on restart (Slurm docs:
# scontrol reconfigure does not apply them); anything else is reconfigured.
RESTART_KEYS = {
    "AccountingStorageHost",
    "AccountingStoragePort",
    "AccountingStorageTRES",
    "AccountingStorageType",
    "AuthType",
    "ClusterName",
    "CryptoType",
    "GresTypes",
    "JobAcctGatherType",
    "LaunchType",
    "MpiDefault",
    "PluginDir",
    "PrologFlags",
    "ProctrackType",
    "SelectType",
    "SelectTypeParameters",
    "SlurmctldHost",
    "SlurmctldParameters",
    "SlurmctldPort",
    "SlurmdPort",
    "SlurmdSpoolDir",
    "SlurmUser",
    "StateSaveLocation",
    "SwitchType",
    "TaskPlugin",
}


def node_definition(info: dict, margin_percent: int, overrides: dict | None = None) -> dict:
    """slurm.conf node fields: reported layout, RealMemory margin_percent below, overrides."""
    fields = {key: info[fact] for key, fact in LAYOUT.items() if fact in info}
    if "RealMemory" in fields:
        fields["RealMemory"] = int(fields["RealMemory"] * (100 - int(margin_percent)) / 100)
    for key, value in (overrides or {}).items():
        fields[key] = int(value)
    return fields


def node_problems(
    info: dict, host: str, overrides: dict | None, gpus_configured: int, node_name: str = ""
) -> list:
    """Inventory values the node cannot honour, each naming host, field and both values."""
    problems = []
    # slurmd names its node by hostname -s (slurmd -C's NodeName): a name the
    # inventory sets must be that one.
    reported_name = info.get("node_name")
    if node_name and reported_name and str(node_name) != str(reported_name):
        problems.append(
            f"{host}: slurm_node_name={node_name} but the node's short host name (hostname -s, "
            f"slurmd's NodeName) is {reported_name}; set slurm_node_name: {reported_name}, "
            f"or rename the host (hostnamectl set-hostname {node_name})"
        )
    for key, value in (overrides or {}).items():
        if key not in LAYOUT:
            problems.append(
                f"{host}: slurm_compute_node_overrides has unknown field {key} "
                f"(allowed: {', '.join(LAYOUT)})"
            )
            continue
        reported = info.get(LAYOUT[key])
        if reported is not None and int(value) > int(reported):
            problems.append(
                f"{host}: slurm_compute_node_overrides.{key}={value} is above what slurmd "
                f"reports ({reported}); slurmd would drain the node. "
                "Lower it or remove the override"
            )
    found = len(info.get("gpus", []))
    if int(gpus_configured) != found:
        problems.append(
            f"{host}: slurm_compute_gpus={gpus_configured} but the node has {found} GPU(s) "
            f"({info.get('gpu_source', 'none')}); set slurm_compute_gpus: {found} or fix the node"
        )
    return problems


def node_name_clashes(names: dict) -> list:
    """Hosts whose nodes report the same NodeName ({host: node name}), one message each."""
    by_name: dict = {}
    for host, name in sorted(names.items()):
        if name:
            by_name.setdefault(str(name), []).append(host)
    return [
        f"{', '.join(hosts)}: all report the node name {name} (hostname -s); Slurm needs one "
        "name per node. Fix: give each host its own short host name (hostnamectl set-hostname)"
        for name, hosts in sorted(by_name.items())
        if len(hosts) > 1
    ]


def gres_spec(gpus: list) -> str:
    """Gres= value for slurm.conf: 'gpu:h100:8', 'gpu:2', '' for none."""
    counts = Counter(g.get("type") or "" for g in gpus)
    parts = [f"gpu:{t}:{n}" if t else f"gpu:{n}" for t, n in sorted(counts.items())]
    return ",".join(parts)


def gres_lines(gpus: list, nvml: bool) -> list:
    """gres.conf lines for a node: AutoDetect=nvml when the plugin is there, else File= lines."""
    if not gpus:
        return []
    if nvml:
        return ["AutoDetect=nvml"]
    lines = []
    for gpu in sorted(gpus, key=lambda g: g["index"]):
        typ = f" Type={gpu['type']}" if gpu.get("type") else ""
        lines.append(f"Name=gpu{typ} File={gpu['file']}")
    return lines


def _parse(text: str) -> tuple[dict, dict, dict]:
    """(global keys, nodes by name, partitions by name) of a slurm.conf text."""
    keys: dict = {}
    nodes: dict = {}
    parts: dict = {}
    for raw in (text or "").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or "=" not in line:
            continue
        first, _sep, rest = line.partition(" ")
        key, _sep, value = first.partition("=")
        if key == "NodeName":
            nodes[value] = rest.strip()
        elif key == "PartitionName":
            parts[value] = rest.strip()
        else:
            keys[key] = line.partition("=")[2]
    return keys, nodes, parts


def slurm_conf_change(old: str | None, new: str) -> str:
    """How a slurm.conf going from old to new is applied.

    'none'; 'reconfigure' (scontrol reconfigure takes it); 'nodes' (nodes
    added, removed or redefined: slurmctld restarts, then a reconfigure hands
    the new file to every slurmd); 'restart' (keys only a restart of every
    daemon applies, or a first install).
    """
    if not old:
        return "restart"
    old_keys, old_nodes, old_parts = _parse(old)
    new_keys, new_nodes, new_parts = _parse(new)
    changed = {k for k in old_keys.keys() | new_keys.keys() if old_keys.get(k) != new_keys.get(k)}
    if changed & RESTART_KEYS:
        return "restart"
    if old_nodes != new_nodes:
        return "nodes"
    if changed or old_parts != new_parts:
        return "reconfigure"
    return "none"


def changed_node_lines(old: str | None, new: str) -> list:
    """NodeNames whose NodeName line is new or differs (CPUs, memory, Gres...).

    Such nodes' hardware (or what Slurm is told of it) changed: they wait for
    the acceptance job before they take work again.
    """
    before, after = _parse(old or "")[1], _parse(new)[1]
    return sorted(n for n, line in after.items() if before.get(n) != line)


def slurm_conf_diff(old: str | None, new: str) -> dict:
    """{'change': slurm_conf_change, 'nodes': changed_node_lines}: the new file parsed once."""
    return {"change": slurm_conf_change(old, new), "nodes": changed_node_lines(old, new)}


def gres_nodes(text: str | None) -> dict:
    """{NodeName: [its gres.conf lines]} of a cluster-wide gres.conf (NodeName= lines)."""
    out: dict = {}
    for raw in (text or "").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("NodeName="):
            name, _sep, rest = line[len("NodeName=") :].partition(" ")
            out.setdefault(name, []).append(rest.strip())
    return out


def gres_changed_nodes(old: str | None, new: str) -> list:
    """NodeNames whose gres.conf lines differ between two cluster-wide gres.conf texts.

    slurmd reads its GPUs only when it starts: these nodes' slurmd restart.
    """
    before, after = gres_nodes(old), gres_nodes(new)
    return sorted(n for n in before.keys() | after.keys() if before.get(n) != after.get(n))


def stale_copies(lines: list) -> dict:
    """{file name: content} from `stale NAME BASE64` lines (the first node's copy of each)."""
    out: dict = {}
    for line in lines:
        parts = str(line).split(" ")
        if len(parts) == 3 and parts[0] == "stale" and parts[1] not in out:
            out[parts[1]] = base64.b64decode(parts[2]).decode()
    return out


class FilterModule:
    def filters(self) -> dict:
        return {
            "slurm_node_definition": node_definition,
            "slurm_node_name_clashes": node_name_clashes,
            "slurm_node_problems": node_problems,
            "slurm_gres_spec": gres_spec,
            "slurm_gres_lines": gres_lines,
            "slurm_conf_change": slurm_conf_change,
            "slurm_gres_changed_nodes": gres_changed_nodes,
            "slurm_conf_diff": slurm_conf_diff,
            "slurm_stale_copies": stale_copies,
        }
