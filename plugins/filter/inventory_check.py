"""Inventory values checked against what Slurm, munge, NFS and MariaDB accept.

Runs on the control machine in the cluster_preflight role, before any node is
contacted. Pure functions (tests/test_inventory_check.py); each problem names
the hosts, the variable, the value and a fix.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.change_plan import (
    upgrade_batches,
)
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.cluster_checks import ids
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.inventory_values import (
    CLUSTER_NAME,
    CONF_KEY,
    HEALTH_KEYS,
    HOST_NAME,
    MANAGED_KEYS,
    MIN_USER_ID,
    NODE_FIELDS,
    PARTITION_KEYS,
    PARTITION_NAME,
    PORTS,
    SAFE_PATH,
    SLURM_CONF_KEYS,
    SLURM_NAME,
    TIME_FIX,
    TRES_FIX,
    _Check,
    _float,
    _int,
    _int_range,
    _path,
    _pattern,
    _proof_user,
    _users,
    path_problem,
    slurm_time_ok,
    tres_ok,
)
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.monitoring_values import (
    MONITORING_CHECKS,
)

# What cluster_health_skip may name: the node checks (cluster-health --list).
CHECK_IDS = ids(scope="node")

try:
    from ansible_collections.gpulab.slurm_cluster.plugins.filter.nfs_exports import (
        nfs_export_problems,
    )
except ImportError:  # pragma: no cover - loaded by path beside nfs_exports.py
    from nfs_exports import nfs_export_problems  # type: ignore[no-redef]


def _suggest_name(value: object) -> str:
    return re.sub(r"[^a-z0-9_]", "_", str(value).lower())[:40] or "lab"


def _cluster_name(c: _Check, host: str, value: Any) -> None:
    if not CLUSTER_NAME.fullmatch(str(value)):
        c.bad(
            host,
            "cluster_name",
            value,
            "is not a name Slurm's accounting takes (lower-case letters, digits and _, "
            "a letter first, at most 40)",
            f"e.g. cluster_name: {_suggest_name(value)}",
        )


def _partitions(c: _Check, host: str, value: Any) -> None:
    var = "slurm_common_partitions"
    computes = set(c.groups.get("slurm_compute", []))
    if not isinstance(value, list) or not value:
        c.bad(
            host,
            var,
            value,
            "must be a non-empty list of partitions",
            "e.g. [{name: gpu, default: true, max_time: 1-00:00:00}]",
        )
        return
    names = []
    defaults = 0
    for i, part in enumerate(value):
        where = f"{var}[{i}]"
        if not isinstance(part, Mapping) or "name" not in part:
            c.bad(host, where, part, "is not a mapping with a name", "give each partition name:")
            continue
        names.append(part["name"])
        unknown = sorted(set(part) - PARTITION_KEYS)
        if unknown:
            c.bad(
                host,
                f"{where}",
                dict(part),
                f"has unknown keys {', '.join(unknown)}",
                f"use only {', '.join(sorted(PARTITION_KEYS))}",
            )
        if not PARTITION_NAME.fullmatch(str(part["name"])):
            c.bad(
                host,
                f"{where}.name",
                part["name"],
                "is not a partition name (no spaces, = or ,)",
                "use letters, digits, _ . -",
            )
        elif str(part["name"]).lower() == "default":
            c.bad(
                host,
                f"{where}.name",
                part["name"],
                "is Slurm's reserved name: PartitionName=DEFAULT, in any case, is the line "
                "of every partition's defaults, so this partition would not exist",
                "choose another name (e.g. main)",
            )
        if "max_time" in part and not slurm_time_ok(part["max_time"]):
            c.bad(host, f"{where}.max_time", part["max_time"], "is not a Slurm time", TIME_FIX)
        if part.get("default") not in (None, True, False):
            c.bad(
                host, f"{where}.default", part["default"], "is not true or false", "default: true"
            )
        defaults += part.get("default") is True
        nodes = part.get("nodes")
        if nodes is not None:
            if not isinstance(nodes, list) or not nodes:
                c.bad(
                    host,
                    f"{where}.nodes",
                    nodes,
                    "must be a non-empty list of compute nodes",
                    "list inventory names of slurm_compute hosts, or leave nodes out (all)",
                )
            else:
                twice = sorted({str(n) for n in nodes if nodes.count(n) > 1})
                if twice:
                    c.bad(
                        host,
                        f"{where}.nodes",
                        nodes,
                        f"names {', '.join(twice)} twice",
                        "list each node once",
                    )
                missing = [n for n in nodes if n not in computes]
                if missing:
                    c.bad(
                        host,
                        f"{where}.nodes",
                        nodes,
                        f"names {', '.join(map(str, missing))}, not in group slurm_compute",
                        "add the host to slurm_compute in hosts.yml or drop it from the partition",
                    )
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        twice = ", ".join(map(str, dupes))
        c.bad(host, var, names, f"has the partition name {twice} twice", "name each one")
    if defaults > 1:
        c.bad(
            host, var, names, f"has {defaults} default partitions", "set default: true on one only"
        )


def _extra_config(c: _Check, host: str, value: Any) -> None:
    var = "slurm_common_extra_config"
    if not isinstance(value, Mapping):
        c.bad(host, var, value, "is not a mapping", "e.g. {MaxJobCount: 50000}")
        return
    for key, val in value.items():
        if not CONF_KEY.fullmatch(str(key)):
            c.bad(
                host,
                f"{var}.{key}",
                val,
                "is not a slurm.conf parameter name",
                "use the parameter's CamelCase name from man slurm.conf",
            )
        elif key not in MANAGED_KEYS and key not in SLURM_CONF_KEYS:
            c.bad(
                host,
                f"{var}.{key}",
                val,
                "is not a slurm.conf parameter (Slurm's parser would refuse it on the node)",
                "check the spelling against man slurm.conf (e.g. MaxJobCount, SchedulerParameters)",
            )
        elif key in HEALTH_KEYS and c.host(host).get("cluster_health", True) not in (
            False,
            "false",
        ):
            c.bad(
                host,
                f"{var}.{key}",
                val,
                "is written by the role itself while cluster_health is on",
                f"set cluster_health_{HEALTH_KEYS[key]}, or cluster_health: false to run your own",
            )
        elif key in MANAGED_KEYS:
            c.bad(
                host,
                f"{var}.{key}",
                val,
                "is written by the role itself",
                f"set it through the role's variable for {key} (see roles/slurm_common/README.md)",
            )
        if key == "SchedulerParameters" and "batch_sched_delay" in str(val):
            c.bad(
                host,
                f"{var}.{key}",
                val,
                "sets batch_sched_delay, which the role writes",
                "set slurm_common_batch_sched_delay instead",
            )
        if isinstance(val, (Mapping, list)) or "\n" in str(val) or str(val).strip() == "":
            c.bad(
                host,
                f"{var}.{key}",
                val,
                "is not a single slurm.conf value",
                "give one value on one line",
            )


def _qos(c: _Check, host: str, value: Any) -> None:
    var = "slurm_controller_qos"
    for i, qos in enumerate(value if isinstance(value, list) else [value]):
        if not isinstance(qos, Mapping) or not SLURM_NAME.fullmatch(str(qos.get("name", ""))):
            c.bad(host, f"{var}[{i}]", qos, "needs a lower-case name", "e.g. {name: gpu-hours}")
            continue
        for key in ("grp_tres_mins", "grp_tres", "max_tres_per_user"):
            if key in qos and not tres_ok(qos[key]):
                c.bad(host, f"{var}[{i}].{key}", qos[key], "is not a TRES string", TRES_FIX)
        if "max_wall" in qos and not slurm_time_ok(qos["max_wall"]):
            c.bad(host, f"{var}[{i}].max_wall", qos["max_wall"], "is not a Slurm time", TIME_FIX)


def _accounts(c: _Check, host: str, value: Any) -> None:
    var = "slurm_controller_accounts"
    qos_names = {"normal"} | {
        q.get("name")
        for q in c.host(host).get("slurm_controller_qos", []) or []
        if isinstance(q, Mapping)
    }
    for i, acct in enumerate(value if isinstance(value, list) else [value]):
        if not isinstance(acct, Mapping) or not SLURM_NAME.fullmatch(str(acct.get("name", ""))):
            c.bad(host, f"{var}[{i}]", acct, "needs a lower-case name", "e.g. {name: lab}")
            continue
        unknown = [q for q in acct.get("qos", []) if q not in qos_names]
        if unknown:
            c.bad(
                host,
                f"{var}[{i}].qos",
                acct.get("qos"),
                f"names QoS {', '.join(map(str, unknown))}, not in slurm_controller_qos",
                "define it in slurm_controller_qos or use normal",
            )
        if "users" in acct:
            c.bad(
                host,
                f"{var}[{i}].users",
                acct["users"],
                "names users here; a user is named once, in cluster_users",
                f"list {acct.get('name')} in the accounts of each of those users in "
                "cluster_users (group_vars/slurm_cluster/users.yml) and drop users: here",
            )


def _is_host_name(name: str) -> bool:
    """A host name, short (gpu01) or fully qualified (gpu01.lab.example)."""
    return len(name) <= 253 and all(HOST_NAME.fullmatch(label) for label in name.split("."))


def _hosts(c: _Check) -> None:
    """Host names and host-level values no single variable check sees."""
    computes = set(c.groups.get("slurm_compute", []))
    # Slurm names a node by its short host name (slurmd -C, hostname -s): by
    # default the first label of the inventory's name, or slurm_node_name.
    short: dict[str, list[str]] = {}
    for host in c.groups.get("slurm_cluster", []):
        if not _is_host_name(str(host)):
            c.bad(
                host,
                "inventory_hostname",
                host,
                "is not a host name (labels of letters, digits and '-', joined by '.'; no '_')",
                f"name the host {re.sub(r'[^A-Za-z0-9.-]', '-', str(host))} in hosts.yml "
                "(ansible_host keeps the address)",
            )
            continue
        name = c.host(host).get("slurm_node_name")
        if name is not None and not HOST_NAME.fullmatch(str(name)):
            c.bad(
                host,
                "slurm_node_name",
                name,
                "is not a short host name (letters, digits and '-': Slurm's NodeName)",
                "set it to the node's `hostname -s`, or drop it (the default is the first "
                "label of the inventory name)",
            )
            continue
        first_label = str(host).split(".", maxsplit=1)[0]
        short.setdefault(str(name or first_label).lower(), []).append(str(host))
    for name, hosts in sorted(short.items()):
        if len(hosts) > 1:
            for host in hosts:
                c.bad(
                    host,
                    "inventory_hostname",
                    host,
                    f"has the short name {name}, as {', '.join(h for h in hosts if h != host)}: "
                    "Slurm names nodes by their short names, and two nodes cannot share one",
                    "give the hosts different short names (hostname -s), and set slurm_node_name "
                    "to each host's short name where it is not the inventory name's first label",
                )
    _login_hosts(c)
    for host in c.hosts:
        if "slurm_compute_gpus" in c.host(host) and host not in computes:
            c.bad(
                host,
                "slurm_compute_gpus",
                c.host(host)["slurm_compute_gpus"],
                "is set on a host in no compute group: it would be ignored",
                "put the host in slurm_compute, or drop slurm_compute_gpus from it",
            )


# Why a login host may not also be one of these: what its users could reach.
LOGIN_UNSAFE = {
    "slurm_controller": "slurmctld's state and the key every daemon trusts",
    "slurm_dbd": "the accounting database and its password",
    "slurm_compute": "a compute node, where the lab's processes would run beside jobs, "
    "outside Slurm's limits",
}


def _login_hosts(c: _Check) -> None:
    """A login host is a host of the cluster group and of no other Slurm role."""
    cluster = set(c.groups.get("slurm_cluster", []))
    for host in c.groups.get("slurm_login", []):
        if host not in cluster:
            c.bad(host, "slurm_login", host, "is a login host outside the slurm_cluster group",
                  "make slurm_login a child of slurm_cluster in hosts.yml")  # fmt: skip
        for group, what in LOGIN_UNSAFE.items():
            if host in c.groups.get(group, []):
                c.bad(
                    host,
                    "slurm_login",
                    host,
                    f"is a login host and in {group}: the lab's users would log in next to {what}",
                    f"give the login host a machine of its own (or a VM), or drop {host} from "
                    "slurm_login and let users submit from a node you trust them on",
                )


def _exports(c: _Check, host: str, value: Any) -> None:
    if isinstance(value, list) and all(isinstance(e, Mapping) for e in value):
        # The NFS server role's own refusals (world, no_root_squash, options,
        # clients), here on the control machine before any node is touched.
        hv = c.host(host)
        clients = hv.get("nfs_server_networks") or list(c.groups.get("slurm_cluster", [host]))
        for problem in nfs_export_problems(
            [dict(e) for e in value],
            list(clients),
            bool(hv.get("nfs_server_allow_world", False)),
            bool(hv.get("nfs_server_allow_no_root_squash", False)),
            list(hv.get("nfs_server_options", []) or []),
            _int(hv.get("nfs_server_min_prefix", 16)) or 16,  # its own check: 8-32
            list(hv.get("nfs_server_netgroups", []) or []),
        ):
            c.bad(
                host,
                "nfs_server_exports",
                [e.get("path") for e in value],
                problem,
                "see roles/nfs_server/README.md",
            )
    for i, export in enumerate(value if isinstance(value, list) else [value]):
        path = export.get("path") if isinstance(export, Mapping) else export
        problem = path_problem(path)
        if problem:
            c.bad(
                host,
                f"nfs_server_exports[{i}].path",
                path,
                problem,
                "export a folder of its own, e.g. /srv/nfs/shared",
            )


def _port(var: str) -> Callable[[_Check, str, Any], None]:
    def check(c: _Check, host: str, value: Any) -> None:
        fix = f"e.g. {var}: {c.defaults[var]}" if var in c.defaults else f"set {var} to a free port"
        port = _int(value)
        if port is None or not 1 <= port <= 65535:
            c.bad(host, var, value, "is not a TCP port (1-65535)", fix)
            return
        for other in PORTS:
            if other != var and _int(c.host(host).get(other, c.defaults.get(other))) == port:
                problem = f"is also {other} (each Slurm daemon needs its own port)"
                c.bad(host, var, value, problem, fix)

    return check


def _overrides(c: _Check, host: str, value: Any) -> None:
    var = "slurm_compute_node_overrides"
    if not isinstance(value, Mapping):
        c.bad(host, var, value, "is not a mapping", "e.g. {RealMemory: 500000}")
        return
    for key, val in value.items():
        if key not in NODE_FIELDS:
            c.bad(
                host,
                f"{var}.{key}",
                val,
                "is not a NodeName field the role sets",
                f"use one of {', '.join(sorted(NODE_FIELDS))}",
            )
        elif _int(val) is None or _int(val) < 1:
            c.bad(host, f"{var}.{key}", val, "is not a whole number >= 1", f"e.g. {key}: 64")


SMOKE_MODES = ("srun", "torchrun", "sbatch", "spawn")


def _acceptance(c: _Check, host: str, value: Any) -> None:
    if not isinstance(value, bool) and str(value).lower() not in ("true", "false", "yes", "no"):
        c.bad(
            host,
            "cluster_acceptance",
            value,
            "is not true or false",
            "e.g. cluster_acceptance: true",
        )


def _acceptance_modes(c: _Check, host: str, value: Any) -> None:
    var = "cluster_acceptance_modes"
    fix = (
        f"a list of {', '.join(SMOKE_MODES)}, e.g. {var}: [srun] ([] leaves it to smoke_train.yml)"
    )
    if not isinstance(value, list):
        c.bad(host, var, value, "is not a list", fix)
        return
    unknown = [m for m in value if m not in SMOKE_MODES]
    if unknown:
        c.bad(host, var, value, f"names {', '.join(map(str, unknown))}, not a launch mode", fix)


def _upgrade_batch(c: _Check, host: str, value: Any) -> None:
    try:
        upgrade_batches(["node"], value)
    except ValueError:
        var = "slurm_upgrade_batch"
        c.bad(
            host, var, value, "is no batch size", f"a number of nodes or a share, e.g. {var}: 25%"
        )


HEALTH_STATES = ("ANY", "IDLE", "MIXED", "ALLOC", "NONDRAINED_IDLE")


def _health_node_state(c: _Check, host: str, value: Any) -> None:
    words = str(value).upper().split(",")
    states = [w for w in words if w != "CYCLE"]
    if not states or any(w not in HEALTH_STATES for w in states) or len(set(words)) != len(words):
        c.bad(
            host,
            "cluster_health_node_state",
            value,
            f"is not a HealthCheckNodeState ({', '.join(HEALTH_STATES)}, comma-joined, and CYCLE)",
            "e.g. cluster_health_node_state: ANY (or IDLE,CYCLE)",
        )


def _health_disk(c: _Check, host: str, value: Any) -> None:
    var = "cluster_health_disk_free_mib"
    fix = f'a mapping of absolute path (or "spool") to MiB, e.g. {var}: {{"/": 1024, spool: 256}}'
    if not isinstance(value, Mapping):
        c.bad(host, var, value, "is not a mapping", fix)
        return
    for path, mib in value.items():
        # The whole key: a newline or a space in it would reach the settings file.
        if path != "spool" and (
            not SAFE_PATH.fullmatch(str(path)) or "/../" in f"{path}/" or "/./" in f"{path}/"
        ):
            c.bad(host, f"{var}[{path}]", mib, "names no absolute path of safe characters", fix)
        elif _int(mib) is None or _int(mib) < 0:
            c.bad(host, f"{var}[{path}]", mib, "is not a whole number of MiB >= 0", fix)


def _number(
    var: str, low: float, high: float, example: float
) -> Callable[[_Check, str, Any], None]:
    def check(c: _Check, host: str, value: Any) -> None:
        try:
            ok = low <= float(value) <= high
        except (TypeError, ValueError):
            ok = False
        if not ok:
            c.bad(
                host, var, value, f"is not a number in {low:g}-{high:g}", f"e.g. {var}: {example}"
            )

    return check


def _health_skip(c: _Check, host: str, value: Any) -> None:
    var = "cluster_health_skip"
    unknown = [v for v in value if v not in CHECK_IDS] if isinstance(value, list) else [value]
    if unknown:
        c.bad(
            host,
            var,
            value,
            f"names {', '.join(map(str, unknown))}, not a health check",
            f"a list of {', '.join(CHECK_IDS)}",
        )


CHECKS: dict[str, Callable[[_Check, str, Any], None]] = {
    # The monitoring role's values (module_utils/monitoring_values.py).
    **MONITORING_CHECKS,
    # HealthCheckInterval: at least 5 s (a run costs up to a second), at most an hour.
    "cluster_health_interval": _int_range("cluster_health_interval", 5, 3600, 60),
    "cluster_health_node_state": _health_node_state,
    "cluster_health_disk_free_mib": _health_disk,
    "cluster_health_clock_max_offset_s": _number(
        "cluster_health_clock_max_offset_s", 0.001, 240, 1.0
    ),
    "cluster_health_flap_drains": _int_range("cluster_health_flap_drains", 0, None, 3),
    "cluster_health_flap_window_s": _int_range("cluster_health_flap_window_s", 60, None, 3600),
    # Slurm kills the program at 60 s; a run must stay well inside its 5 s budget.
    "cluster_health_timeout_s": _number("cluster_health_timeout_s", 0.5, 15, 4),
    "cluster_health_skip": _health_skip,
    "cluster_acceptance": _acceptance,
    "cluster_acceptance_modes": _acceptance_modes,
    "cluster_name": _cluster_name,
    "cluster_auth_type": _pattern(
        "cluster_auth_type", r"munge|slurm", "munge or slurm (Slurm's own auth/slurm)", "munge"
    ),
    "slurm_common_partitions": _partitions,
    "slurm_common_extra_config": _extra_config,
    "slurm_common_realmemory_margin_percent": _int_range(
        "slurm_common_realmemory_margin_percent", 0, 50, 5
    ),
    "slurm_common_return_to_service": _int_range("slurm_common_return_to_service", 0, 2, 2),
    "slurm_common_batch_sched_delay": _int_range("slurm_common_batch_sched_delay", 0, 3600, 0),
    "slurm_compute_node_overrides": _overrides,
    "slurm_compute_ready_timeout": _int_range("slurm_compute_ready_timeout", 1, None, 90),
    "slurm_controller_qos": _qos,
    "slurm_controller_accounts": _accounts,
    "cluster_users": _users,
    "cluster_proof_user": _proof_user,
    "cluster_proof_uid": _int_range("cluster_proof_uid", MIN_USER_ID, 4294967294, 59000),
    "cluster_users_dir": _path("cluster_users_dir"),
    "cluster_tools_dir": _path("cluster_tools_dir"),
    "smoke_train_dir": _path("smoke_train_dir"),
    "cluster_slurmctld_port": _port("cluster_slurmctld_port"),
    "cluster_slurmd_port": _port("cluster_slurmd_port"),
    "cluster_slurmdbd_port": _port("cluster_slurmdbd_port"),
    "slurm_dbd_db_name": _pattern(
        "slurm_dbd_db_name", r"[A-Za-z0-9_]{1,64}", "a MariaDB database name", "slurm_acct_db"
    ),
    "slurm_dbd_db_user": _pattern(
        "slurm_dbd_db_user", r"[A-Za-z0-9_]{1,32}", "a MariaDB user name", "slurm"
    ),
    "munge_key_path": _path("munge_key_path"),
    "slurm_dbd_backup_dir": _path("slurm_dbd_backup_dir"),
    "shared_fs_path": _path("shared_fs_path"),
    "shared_fs_nfs_export": _path("shared_fs_nfs_export"),
    "nfs_server_exports": _exports,
    "nfs_server_min_prefix": _int_range("nfs_server_min_prefix", 8, 32, 16),
    "cluster_venv": _path("cluster_venv"),
    "smoke_train_time_limit": _int_range("smoke_train_time_limit", 1, None, 10),
    "smoke_train_nodes": _int_range("smoke_train_nodes", 0, None, 0),
    "smoke_train_immediate": _int_range("smoke_train_immediate", 1, None, 60),
    "slurm_upgrade_batch": _upgrade_batch,
}


@functools.lru_cache(maxsize=1)
def role_variables() -> dict[str, dict]:
    """Every role's public variables and their argument spec (roles/*/meta/argument_specs.yml)."""
    roles = Path(__file__).resolve().parents[2] / "roles"
    out: dict[str, dict] = {}
    for path in sorted(roles.glob("*/meta/argument_specs.yml")):
        doc = yaml.safe_load(path.read_text()) or {}
        for entry in (doc.get("argument_specs") or {}).values():
            for name, option in (entry.get("options") or {}).items():
                out.setdefault(str(name), dict(option or {}, role=path.parts[-3]))
    return out


CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _typed(var: str, spec: Mapping) -> Callable[[_Check, str, Any], None]:
    """The rule every role variable meets by its type: the whole value, no line break."""
    kind = spec.get("type", "str")
    example = spec.get("default")

    def check(c: _Check, host: str, value: Any) -> None:
        texts = (
            [value]
            if not isinstance(value, (list, Mapping))
            else (list(value) + (list(value.values()) if isinstance(value, Mapping) else []))
        )
        if any(isinstance(t, str) and CONTROL.search(t) for t in texts):
            c.bad(host, var, value, "holds a line break or a control character",
                  f"one line, e.g. {var}: {example!r}")  # fmt: skip
        elif kind == "int" and _int(value) is None:
            c.bad(host, var, value, "is not a whole number", f"e.g. {var}: {example}")
        elif kind == "float" and _float(value) is None:
            c.bad(host, var, value, "is not a number", f"e.g. {var}: {example}")

    return check


def all_checks() -> dict[str, Callable[[_Check, str, Any], None]]:
    """The rule of every role variable: its own (CHECKS), else the one of its type.

    A new role's variables are checked here by their argument spec as soon
    as it has one: no role brings its own looser asserts.
    """
    rules = {var: _typed(var, spec) for var, spec in role_variables().items()}
    return {**rules, **CHECKS}


def inventory_problems(
    hostvars: Mapping, groups: Mapping, defaults: Mapping | None = None
) -> list[str]:
    """Every inventory value that a config file would carry and its daemon would refuse.

    defaults: values the roles use where the inventory sets none (the ports).
    """
    c = _Check(hostvars, groups, defaults or {})
    for var, check in all_checks().items():
        c.each(var, lambda host, value, check=check: check(c, host, value))
    _hosts(c)
    return c.messages()


class FilterModule:
    def filters(self) -> dict:
        return {"inventory_problems": inventory_problems}
