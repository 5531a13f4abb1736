"""The cluster's checks, each defined once: the one registry of what "healthy" means.

Every check has one entry here: its id, what it reads, the fix for its FAIL,
the node kinds it applies to, what explains it, and where it is used:

- ``doctor``: doctor.yml's report (plugins/filter/doctor.py) judges it on
  demand, on every node it applies to;
- ``health``: the node health program (node_health.py, run by slurmd) drains
  the node on its FAIL and resumes it on its PASS;
- ``collector``: the metrics collector (roles/monitoring) exports its verdict
  as ``cluster_check_status{check="<id>",status="<STATUS>"} 1``;
- ``alert``: Prometheus' rules (``alert_rules`` below) fire on that metric,
  or on the expression of the check's own ``Alert`` where the verdict is the
  controller's (Slurm's own view) or comes from Prometheus itself.

A check of scope ``node`` is judged on the node by one reader
(node_checks.RUNNERS[id]); the doctor's probe, the health program and the
collector all call that reader, so they cannot disagree. A check of scope
``cluster`` compares several nodes and is judged by the doctor alone
(plugins/module_utils/doctor_steps.py).

Standard library only: the nodes import this file too
(/usr/local/lib/slurm-cluster, installed by the slurm_common role).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

USES = ("doctor", "health", "collector", "alert")
# Kinds of node (the inventory's groups, as the settings file names them).
KINDS = ("controller", "compute", "dbd", "nfs_server", "login")
ALL = ("doctor", "health", "collector", "alert")
WATCHED = ("doctor", "collector", "alert")


@dataclass(frozen=True)
class Alert:
    """A Prometheus rule of a check: its name, severity and what it says.

    ``expr`` is empty for a node-scope check: the rule then fires on the
    check's FAIL as the collector exports it. ``minutes`` names the
    monitoring role's setting that holds the rule's ``for:`` (node or daemon),
    or "" to fire at once.
    """

    name: str
    severity: str
    summary: str
    expr: str = ""
    minutes: str = "daemon"
    # What the rule says beyond the check's own reads and fix (its own expr's meaning).
    description: str = ""


@dataclass(frozen=True)
class Check:
    id: str
    scope: str  # node: judged on the node by its reader; cluster: by the doctor
    reads: str
    fix: str
    uses: tuple[str, ...]
    # Node kinds it applies to (empty: every node of the cluster).
    kinds: tuple[str, ...] = ()
    # Settings that must be set on the node for it to apply (e.g. gpus).
    needs: tuple[str, ...] = ()
    # Checks whose FAIL explains this one's: on the same node, on any node,
    # on the controller.
    explained_by: tuple[str, ...] = ()
    explained_by_any: tuple[str, ...] = ()
    explained_by_controller: tuple[str, ...] = ()
    # With "services" in explained_by: only these units stopped explain it.
    units: tuple[str, ...] = ()
    alerts: tuple[Alert, ...] = ()


def _xid_alert() -> Alert:
    return Alert(
        "GpuXid",
        "critical",
        "A fatal GPU Xid on {{ $labels.instance }}, not yet acknowledged (the node stays drained)",
        minutes="",
    )


REGISTRY: tuple[Check, ...] = (
    Check(
        "net.hostname",
        "cluster",
        "the node's own name and the controller's name as the node resolves them",
        "map the names to the cluster addresses in /etc/hosts or DNS, not 127.0.1.1 "
        "(site.yml removes a loopback line)",
        ("doctor",),
    ),
    Check(
        "services",
        "node",
        "systemctl show of every unit the cluster runs on this node (the settings' units)",
        "systemctl start the unit on the node (journalctl -u UNIT); site.yml starts it",
        WATCHED,
        needs=("units",),
        # A Slurm daemon that cannot start for want of munge (stopped, a clock
        # munge rejects) or of the controller's auth/slurm key is that cause's
        # consequence; any other unit down is not.
        explained_by=("munge.local", "clock", "munge.cross", "auth.key"),
        units=("slurmd", "slurmctld", "slurmdbd"),
        alerts=(
            Alert(
                "ServiceDown",
                "critical",
                "A service the cluster runs is not active on {{ $labels.instance }}",
            ),
            Alert(
                "NodeExporterDown",
                "warning",
                "Prometheus cannot scrape {{ $labels.instance }}: no metrics from that node",
                expr='up{job="node"} == 0',
                description="The node exporter (prometheus-node-exporter, one of the units "
                "the services check wants active) does not answer.",
            ),
        ),
    ),
    Check(
        "munge.local",
        "node",
        "munge -n | unmunge; systemctl is-active munge",
        "systemctl restart munge; journalctl -u munge (the key: /etc/munge/munge.key, 0400 munge)",
        ALL,
        alerts=(
            Alert(
                "MungeFailing",
                "critical",
                "munge fails on {{ $labels.instance }}: a credential made there does not decode",
            ),
        ),
    ),
    Check(
        "munge.key",
        "cluster",
        "mode, owner and fingerprint of the munge key",
        "run site.yml (it installs the controller's key, 0400 munge:munge)",
        ("doctor",),
    ),
    Check(
        "auth.key",
        "cluster",
        "mode, owner and fingerprint of Slurm's own key (/etc/slurm/slurm.jwks, auth/slurm)",
        "run site.yml (it installs the controller's slurm.jwks, 0600 slurm:slurm, and "
        "restarts the daemons there)",
        ("doctor",),
    ),
    Check(
        "clock",
        "cluster",
        "each node's clock and its munged's against the controller's",
        "synchronise the node's clock (chrony, systemd-timesyncd), restart munge",
        ("doctor",),
        explained_by=("munge.local",),
        explained_by_controller=("munge.local",),
    ),
    Check(
        "clock.sync",
        "node",
        "systemctl is-active chrony/systemd-timesyncd; chronyc tracking or timedatectl",
        "apt install chrony && systemctl enable --now chrony (munge rejects credentials 300 s off)",
        ALL,
        alerts=(
            Alert(
                "ClockNotSynchronised",
                "warning",
                "The clock of {{ $labels.instance }} is not synchronised",
            ),
        ),
    ),
    Check(
        "munge.cross",
        "cluster",
        "a credential of each node decoded on the controller and the other way round",
        "run site.yml: it installs the controller's key and restarts munge and slurmd",
        ("doctor",),
        explained_by=("munge.local", "clock", "net.hostname"),
        explained_by_controller=("munge.local", "clock", "munge.cross"),
    ),
    Check(
        "users.ids",
        "cluster",
        "uid and gid of the slurm and munge accounts",
        "give slurm and munge the same UID and GID on every node",
        ("doctor",),
    ),
    Check(
        "users",
        "cluster",
        "each lab user's uid and gid, and a file written in its folder as itself",
        "run site.yml, or fix the user in the directory service",
        ("doctor",),
        explained_by=("shared.fs",),
    ),
    Check(
        "config.versions",
        "cluster",
        "the Slurm and munge versions of each node's daemons",
        "install the same Slurm and munge packages on every node",
        ("doctor",),
    ),
    Check(
        "config.files",
        "cluster",
        "sha256 of slurm.conf, gres.conf, cgroup.conf against what site.yml writes",
        "run site.yml: it writes the files back and reconfigures or restarts Slurm",
        ("doctor",),
        explained_by_any=("hw.match",),
        explained_by_controller=("config.files",),
    ),
    Check(
        "config.fetched",
        "node",
        "sha1 of the fetched slurm.conf (/run/slurm/conf: slurmd's, a login host's sackd's) "
        "against the controller's",
        "scontrol reconfigure on the controller, or systemctl restart slurmd (sackd) here",
        ALL,
        kinds=("compute", "login"),
        needs=("slurm_conf_sha1",),
        explained_by=("munge.local", "services"),
        units=("slurmd", "sackd"),
        alerts=(
            Alert(
                "SlurmConfigStale",
                "warning",
                "slurmd on {{ $labels.instance }} holds a stale slurm.conf",
            ),
        ),
    ),
    Check(
        "slurm.daemon",
        "cluster",
        "scontrol ping on the controller; slurmd's unit on compute nodes, the login daemon's "
        "(sackd or slurmd) on login hosts",
        "systemctl start slurmctld or slurmd (journalctl -u it, /var/log/slurm); "
        "site.yml starts it",
        ("doctor", "alert"),
        explained_by=("munge.local", "services"),
        units=("slurmd", "slurmctld"),
        alerts=(
            Alert(
                "SlurmctldDown",
                "critical",
                "slurmctld does not answer on {{ $labels.instance }}: no job starts",
                expr='slurm_daemon_up{daemon="slurmctld"} == 0',
            ),
            Alert(
                "SlurmMetricsMissing",
                "warning",
                "No Slurm metrics from the controller (its collector does not run or is not "
                "scraped)",
                expr='absent(slurm_daemon_up{daemon="slurmctld"})',
            ),
        ),
    ),
    Check(
        "net.ports",
        "cluster",
        "TCP connects to slurmctld (6817) and each slurmd (6818)",
        "open TCP 6817 and 6818 between the nodes and the controller (firewall)",
        ("doctor",),
        explained_by=("slurm.daemon", "net.hostname"),
        explained_by_controller=("slurm.daemon", "net.ports"),
    ),
    Check(
        "hw.match",
        "cluster",
        "slurmd -C, the GPUs and gres.conf's devices against slurm.conf's node line",
        "make the hardware match, or set slurm_compute_gpus and run site.yml",
        ("doctor",),
        # slurmd -G reads Slurm's key (auth/slurm) and refuses an insecure one.
        explained_by=("auth.key",),
    ),
    Check(
        "slurm.node",
        "cluster",
        "the node's State and Reason in slurmctld (scontrol show node)",
        "fix the cause on the node; scontrol update nodename=NODE state=resume",
        ("doctor", "alert"),
        explained_by=(
            "net.hostname",
            "services",
            "munge.local",
            "munge.cross",
            "auth.key",
            "clock",
            "users.ids",
            "config.files",
            "config.versions",
            "slurm.daemon",
            "net.ports",
            "hw.match",
            # The node health program's drain: its failing check is the cause.
            "config.fetched",
            "shared.fs",
            "disk.free",
            "clock.sync",
            "gpu.smi",
            "gpu.count",
            "gpu.xid",
            "gpu.ecc",
            "gpu.persistence",
            "gpu.throttle",
        ),
        units=("slurmd",),
        explained_by_controller=(
            "munge.local",
            "munge.cross",
            "auth.key",
            "slurm.daemon",
            "config.files",
            "net.ports",
        ),
        alerts=(
            Alert(
                "NodeDown",
                "critical",
                "{{ $labels.node }} is down or not responding in Slurm",
                expr="slurm_node_down == 1",
                minutes="node",
            ),
            Alert(
                "NodeDrainedByHealth",
                "warning",
                "{{ $labels.node }} drained by the node health program "
                "(scontrol show node names the check)",
                expr='slurm_node_drained{reason_kind="health"} == 1',
                minutes="node",
            ),
        ),
    ),
    Check(
        "shared.fs",
        "node",
        "mountinfo of the shared path, root's token in the check folder, a file written as the "
        "job user",
        "mount the shared filesystem again (mount -a, or systemctl restart its mount unit), "
        "then read dmesg",
        ALL,
        needs=("shared_path",),
        alerts=(
            Alert(
                "SharedFilesystemMissing",
                "critical",
                "The shared filesystem is missing on {{ $labels.instance }}: jobs there read and "
                "write the wrong disk",
            ),
        ),
    ),
    Check(
        "shared.cross",
        "cluster",
        "a token file written on each node as the job user, read back on the controller",
        "mount the same shared filesystem on every node (shared_fs_type=nfs: site.yml mounts it)",
        ("doctor",),
        explained_by=("shared.fs",),
        explained_by_controller=("shared.fs", "shared.cross"),
    ),
    Check(
        "disk.free",
        "node",
        "statvfs of /, /tmp and the Slurm spool",
        "free space there (old job files in /tmp, the spool's job folders); thresholds: "
        "cluster_health_disk_free_mib",
        ALL,
        alerts=(
            Alert("DiskLow", "warning", "Free space below its threshold on {{ $labels.instance }}"),
        ),
    ),
    Check(
        "gpu.smi",
        "node",
        "nvidia-smi --query-gpu (within the timeout)",
        "nvidia-smi by hand; a hung one needs the driver reloaded or a reboot",
        ALL,
        kinds=("compute",),
        needs=("gpus",),
        alerts=(Alert("GpuSmiFailing", "critical", "nvidia-smi fails on {{ $labels.instance }}"),),
    ),
    Check(
        "gpu.count",
        "node",
        "/dev/nvidia<N> and nvidia-smi's GPUs against the node's gres count",
        "find the missing GPU (nvidia-smi, dmesg | grep -i nvrm), reseat or reboot; "
        "or change the inventory",
        ALL,
        kinds=("compute",),
        needs=("gpus",),
        alerts=(Alert("GpuMissing", "critical", "A GPU is missing on {{ $labels.instance }}"),),
    ),
    Check(
        "gpu.xid",
        "node",
        "the NVIDIA driver's own Xid messages in the kernel log (kernel facility, at the start "
        "of the message), and the fatal ones kept until acknowledged",
        "reset the GPU (nvidia-smi -r) or reboot, then cluster-health --ack-xid on the node",
        ALL,
        kinds=("compute",),
        needs=("gpus",),
        explained_by=(),
        alerts=(_xid_alert(),),
    ),
    Check(
        "gpu.ecc",
        "node",
        "uncorrectable volatile ECC, retired pages pending, remapped rows pending/failed",
        "reset the GPU (pending remap/retirement) or have it replaced (failure, repeated errors)",
        ALL,
        kinds=("compute",),
        needs=("gpus",),
        explained_by=("gpu.smi",),
        alerts=(
            Alert(
                "GpuUncorrectableEcc",
                "critical",
                "Uncorrectable ECC errors or a pending or failed row remap on "
                "{{ $labels.instance }}",
                minutes="",
            ),
        ),
    ),
    Check(
        "gpu.persistence",
        "node",
        "nvidia-smi persistence_mode",
        "systemctl enable --now nvidia-persistenced",
        ALL,
        kinds=("compute",),
        needs=("gpus",),
        explained_by=("gpu.smi",),
        alerts=(
            Alert(
                "GpuPersistenceOff",
                "warning",
                "GPU persistence mode is off on {{ $labels.instance }}",
            ),
        ),
    ),
    Check(
        "gpu.throttle",
        "node",
        "nvidia-smi clocks_throttle_reasons (HW slowdown, thermal, power brake)",
        "check cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE)",
        ALL,
        kinds=("compute",),
        needs=("gpus",),
        explained_by=("gpu.smi",),
        alerts=(
            Alert(
                "GpuThrottled",
                "warning",
                "A GPU of {{ $labels.instance }} is slowed down (hardware, thermal or power)",
            ),
        ),
    ),
    Check(
        "torch.venv",
        "cluster",
        "torch in the cluster's venv and the CUDA devices it sees (doctor.yml: the pytorch "
        "role's check, imported again once anything it depends on changed; found without "
        "importing it before a smoke job)",
        "run site.yml (role pytorch reinstalls the venv)",
        ("doctor",),
        kinds=("compute",),
    ),
)

BY_ID = {c.id: c for c in REGISTRY}


def ids(use: str = "", scope: str = "") -> tuple[str, ...]:
    """Check ids in registry order, of one use and one scope where given."""
    return tuple(
        c.id for c in REGISTRY if (not use or use in c.uses) and (not scope or c.scope == scope)
    )


def explains(check: Check, dep: str, down: list[str] | tuple[str, ...] = ()) -> bool:
    """Whether a FAIL of `dep` on the same node explains `check`'s.

    A FAIL of ``services`` explains it only when one of the check's own
    units is among the ones down (a stopped node exporter explains no
    Slurm fault); ``services`` itself is explained only when every unit
    down is one of its ``units`` (a Slurm daemon munge stopped), given as
    `down`.
    """
    if dep not in check.explained_by:
        return False
    if dep == "services":
        return bool(set(check.units) & set(down))
    if check.id == "services":
        # `down` is then the check's own units down: all of them must be ones the cause stops.
        return bool(down) and set(down) <= set(check.units)
    return True


def applies(check: Check, kinds: list[str] | tuple[str, ...], cfg: dict) -> bool:
    """Whether `check` runs on a node of these kinds with these settings."""
    if check.kinds and not set(check.kinds) & set(kinds):
        return False
    return all(cfg.get(key) for key in check.needs)


# ---------------------------------------------------------------- kernel log: Xid

# Xid classes (NVIDIA, "Xid Errors", docs.nvidia.com/deploy/xid-errors, and
# the GPU debug guidelines' triage table): which Xid drains the node until
# acknowledged. Application faults (13, 31, 43, 45, 68 ...) are the job's.
XID_FAIL = {
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapper failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}
# The driver's own message, from the start of the kernel's message text: a
# program's name or file name that the kernel prints later in a line (a
# segfault report) cannot match, and a task name (at most 15 characters)
# is too short to hold the whole prefix.
XID_RE = re.compile(
    r"NVRM: Xid \(PCI:([0-9a-fA-F]+(?::[0-9a-fA-F]+)+(?:\.[0-9a-fA-F]+)?)\): (\d+)\b"
)
# A line of a kernel log file: /dev/kmsg's "prio,seq,usec,flags;message" or
# dmesg's "[seconds] message" (a test's stand-in); the message follows.
KMSG_LINE = re.compile(r"^(\d+),(\d+),\d+,[^;]*;(.*)$")
DMESG_LINE = re.compile(r"^\[\s*[\d.]+\]\s(.*)$")


def parse_xid(message: str, facility: int = 0) -> tuple[str, int] | None:
    """(PCI bus, Xid code) of the NVIDIA driver's Xid message, else None.

    Only a kernel message (facility 0) whose text starts with the driver's
    prefix counts; the match is anchored there.
    """
    if facility != 0:
        return None
    m = XID_RE.match(message)
    return (m.group(1), int(m.group(2))) if m else None


def kernel_record(line: str) -> tuple[int, str] | None:
    """(facility, message) of one line of a kernel log file, else None."""
    m = KMSG_LINE.match(line)
    if m:
        return int(m.group(1)) >> 3, m.group(3)
    m = DMESG_LINE.match(line)
    if m:
        return 0, m.group(1)
    return None


def xid_class(code: int) -> str:
    return "fatal" if code in XID_FAIL else "application"


# ---------------------------------------------------------------- alert rules


def _rule(check: Check, alert: Alert, minutes: dict) -> dict:
    expr = alert.expr or f'cluster_check_status{{check="{check.id}",status="FAIL"}} == 1'
    rule: dict = {"alert": alert.name, "expr": expr}
    if alert.minutes:
        rule["for"] = for_duration(minutes[alert.minutes])
    rule["labels"] = {"severity": alert.severity, "check": check.id}
    said = f"{alert.description} " if alert.description else ""
    rule["annotations"] = {
        "summary": alert.summary,
        "description": f"{said}Check {check.id} reads: {check.reads}. Fix: {check.fix}. "
        "doctor.yml names the node and the cause.",
    }
    return rule


def for_duration(minutes: float) -> str:
    """A rule's ``for:`` from minutes: ``10m``, or whole seconds (``0.25`` -> ``15s``)."""
    seconds = round(float(minutes) * 60)
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


def alert_rules(minutes: dict) -> dict:
    """Prometheus' rules file, every rule from a check of the registry.

    ``minutes``: {"node": N, "daemon": M}, the ``for:`` of the rules of
    those two kinds in minutes, fractions in whole seconds allowed (the
    monitoring role's settings).
    """
    rules = [
        _rule(check, alert, minutes)
        for check in REGISTRY
        if "alert" in check.uses
        for alert in check.alerts
    ]
    return {"groups": [{"name": "slurm_cluster", "rules": rules}]}
