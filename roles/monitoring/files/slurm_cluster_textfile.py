#!/usr/bin/python3
"""Metrics of one Slurm cluster node for the node exporter's textfile collector.

Installed by the gpulab.slurm_cluster monitoring role as
/usr/local/sbin/slurm-cluster-textfile and run as root by a systemd timer.
Standard library only: Debian packages no Slurm exporter, and this node
already has python3. Each part writes one ``<part>.prom`` file atomically
(a temporary file in the same folder, then rename), so the node exporter
never reads half a file; a part that cannot read its source writes what it
has plus ``cluster_textfile_part_ok{part=...} 0`` and the others go on.

The node checks are the cluster's check registry (cluster_checks.py), run by
their one reader from the library the slurm_common role installs in root's
own folder /usr/local/lib/slurm-cluster: the same verdicts the doctor and the
node health program reach, exported as ``cluster_check_status{check,status}``
(the alert rules are generated from the same registry).

Parts:
  node     every node check of the registry with use "collector", judged now
           by its reader with the node health program's kept state (what
           drains the node is what alerts); and the program's last run
  gpu      nvidia-smi -q -x and the NVIDIA driver's Xid messages in the kernel
           log, read and classed as the gpu.xid check does (only where nvidia-smi is)
  slurm    the controller's view: nodes, drains, jobs, CPUs/GPUs, daemons
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import SimpleNamespace

TIMEOUT_S = 10
HEALTH_DIR = "/var/lib/slurm-cluster/health"
SETTINGS = "/etc/slurm-cluster/health.json"
LIB_DIR = "/usr/local/lib/slurm-cluster"
STATUSES = ("PASS", "WARN", "FAIL", "SKIP")


def checks_lib() -> SimpleNamespace:
    """The node checks' library: the registry (``registry``), its readers (``node``,
    ``gpu``); from root's own folder on the nodes, from the collection in tests."""
    if LIB_DIR not in sys.path:
        sys.path.insert(0, LIB_DIR)
    from ansible_collections.gpulab.slurm_cluster.plugins.module_utils import (
        cluster_checks,
        gpu_checks,
        node_checks,
    )

    return SimpleNamespace(registry=cluster_checks, node=node_checks, gpu=gpu_checks)


# --------------------------------------------------------------------------- exposition


def escape(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


@dataclass
class Family:
    name: str
    kind: str
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)

    def add(self, value: float, **labels: object) -> None:
        self.samples.append(({k: str(v) for k, v in labels.items()}, float(value)))


class Metrics:
    """Families in the order first declared; rendered in the text exposition format."""

    def __init__(self) -> None:
        self.families: dict[str, Family] = {}

    def family(self, name: str, kind: str, help_text: str) -> Family:
        if name not in self.families:
            self.families[name] = Family(name, kind, help_text)
        return self.families[name]

    def set(self, name: str, kind: str, help_text: str, value: float, **labels: object) -> None:
        self.family(name, kind, help_text).add(value, **labels)

    def render(self) -> str:
        out = []
        for fam in self.families.values():
            out.append(f"# HELP {fam.name} {fam.help}")
            out.append(f"# TYPE {fam.name} {fam.kind}")
            for labels, value in fam.samples:
                text = ",".join(f'{k}="{escape(v)}"' for k, v in sorted(labels.items()))
                number = repr(value) if value != int(value) else str(int(value))
                out.append(f"{fam.name}{{{text}}} {number}" if text else f"{fam.name} {number}")
        return "\n".join(out) + "\n"


def write_atomic(folder: str, name: str, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=folder)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, os.path.join(folder, name))
    except BaseException:
        os.unlink(tmp)
        raise


def run(cmd: list[str], stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, input=stdin, capture_output=True, timeout=TIMEOUT_S, check=False)


# --------------------------------------------------------------------------- node part


def health_metrics(m: Metrics, doc: dict) -> None:
    """The node health program's last run (its last.json)."""
    m.set(
        "cluster_health_verdict_ok",
        "gauge",
        "1 when the node health program's last verdict was PASS.",
        1 if doc.get("verdict") == "PASS" else 0,
    )
    if isinstance(doc.get("time"), (int, float)):
        m.set(
            "cluster_health_last_run_timestamp_seconds",
            "gauge",
            "When the node health program last ran (Unix time).",
            doc["time"],
        )
    if isinstance(doc.get("run_s"), (int, float)):
        m.set(
            "cluster_health_run_seconds",
            "gauge",
            "How long the node health program's last run took.",
            doc["run_s"],
        )


def check_verdicts(cfg: dict, state: dict) -> dict:
    """{check id: status} of every node check with use collector that applies here.

    Judged now by each check's one reader, the reader the node health program
    and the doctor's probe call, with the program's kept state (a fatal Xid
    not yet acknowledged) read from a copy: nothing is written. The alert
    then fires on the verdict that drains the node, one collector interval
    after the fault rather than one health interval.
    """
    lib = checks_lib().node
    return {r.id: r.status for r in lib.run_checks(cfg, state, use="collector")}


def node_part(m: Metrics, args: argparse.Namespace) -> None:
    lib = checks_lib().node
    cfg = lib.load_config(args.settings)
    last = lib.load_json(os.path.join(args.health_dir, "last.json"), None)
    state = lib.load_json(os.path.join(args.health_dir, "state.json"), {})
    state = json.loads(json.dumps(state)) if isinstance(state, dict) else {}
    fam = m.family(
        "cluster_check_status",
        "gauge",
        "1 for the status of each node check of the registry (cluster_checks.py) on this node, "
        "as its reader judges it now.",
    )
    for check, status in check_verdicts(cfg, state).items():
        for each in STATUSES:
            fam.add(int(each == status), check=check, status=each)
    if isinstance(last, dict):
        health_metrics(m, last)


# --------------------------------------------------------------------------- gpu part

NUMBER_RE = re.compile(r"^\s*([-+]?[0-9.]+)")
UNIT_BYTES = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}


def number(text: str | None) -> float | None:
    match = NUMBER_RE.match(text or "")
    return float(match.group(1)) if match else None


def pci_key(domain: str, bus: str, device: str) -> tuple[int, int, int]:
    return (int(domain, 16), int(bus, 16), int(device, 16))


def xid_counts(records: list[tuple[int, int, str]]) -> Counter:
    """(pci key, xid) -> how often the NVIDIA driver logged it, read as gpu.xid reads it.

    `records` are the kernel log's (sequence, facility, message) as
    gpu_checks.read_kernel_log returns them; only the driver's own message
    counts (cluster_checks.parse_xid), never text a program placed in a line.
    """
    parse_xid = checks_lib().registry.parse_xid
    counts: Counter = Counter()
    for _seq, facility, message in records:
        hit = parse_xid(message, facility)
        if hit is None:
            continue
        parts = re.match(r"([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)", hit[0])
        if parts:
            counts[(pci_key(*parts.groups()), str(hit[1]))] += 1
    return counts


def ecc_counts(gpu: ET.Element) -> dict[str, float]:
    """Volatile ECC errors: {corrected, uncorrected}, in either of nvidia-smi's layouts.

    Older drivers give single_bit/double_bit totals; newer ones (Hopper) give
    sram_*/dram_* counters, of which the *uncorrectable* ones are summed.
    """
    volatile = gpu.find("ecc_errors/volatile")
    if volatile is None:
        return {}
    out: dict[str, float] = {}
    for kind, tag in (("corrected", "single_bit"), ("uncorrected", "double_bit")):
        value = number(volatile.findtext(f"{tag}/total"))
        if value is not None:
            out[kind] = value
    for child in volatile:
        value = number(child.text)
        if value is None or not child.tag.startswith(("sram_", "dram_")):
            continue
        kind = "uncorrected" if "uncorrectable" in child.tag else "corrected"
        out[kind] = out.get(kind, 0.0) + value
    return out


def gpu_metrics(m: Metrics, xml_text: str, records: list | None = None) -> int:
    """GPU metrics from `nvidia-smi -q -x` and the kernel log's records; the number of GPUs."""
    root = ET.fromstring(xml_text)
    xids = xid_counts(records or []) if records else Counter()
    gpus = root.findall("gpu")
    for pos, gpu in enumerate(gpus):
        index = gpu.findtext("minor_number") or str(pos)
        labels = {"gpu": index, "uuid": gpu.findtext("uuid") or ""}
        fam = "Reported by nvidia-smi."

        def put(name: str, value: float | None, help_text: str, **extra: str) -> None:
            if value is not None:
                m.set(name, "gauge", help_text, value, **labels, **extra)  # noqa: B023

        util = number(gpu.findtext("utilization/gpu_util"))
        put(
            "cluster_gpu_utilization_ratio",
            None if util is None else util / 100,
            f"GPU busy. {fam}",
        )
        for what in ("used", "total"):
            text = gpu.findtext(f"fb_memory_usage/{what}") or ""
            value = number(text)
            unit = text.split()[-1] if text.split() else "MiB"
            put(
                f"cluster_gpu_memory_{what}_bytes",
                None if value is None else value * UNIT_BYTES.get(unit, 1024**2),
                f"Framebuffer memory {what}. {fam}",
            )
        put(
            "cluster_gpu_temperature_celsius",
            number(gpu.findtext("temperature/gpu_temp")),
            f"GPU core temperature. {fam}",
        )
        power = gpu.findtext("gpu_power_readings/power_draw") or gpu.findtext(
            "power_readings/power_draw"
        )
        put("cluster_gpu_power_watts", number(power), f"Board power draw. {fam}")
        for kind, value in ecc_counts(gpu).items():
            m.set(
                "cluster_gpu_ecc_errors_total",
                "counter",
                "ECC errors since the driver loaded (volatile). " + fam,
                value,
                type=kind,
                **labels,
            )
        bus_id = gpu.findtext("pci/pci_bus_id") or gpu.get("id") or ""
        parts = re.match(r"([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)", bus_id)
        key = pci_key(*parts.groups()) if parts else None
        found = {xid: n for (k, xid), n in xids.items() if k == key}
        fam_xid = m.family(
            "cluster_gpu_xid_errors_total",
            "counter",
            "NVIDIA Xid events in the kernel log since boot, by Xid code.",
        )
        for xid, n in sorted(found.items()):
            kind = checks_lib().registry.xid_class(int(xid))
            fam_xid.add(n, xid=xid, **{"class": kind}, **labels)
        m.set(
            "cluster_gpu_xid_events_total",
            "counter",
            "NVIDIA Xid events of any code in the kernel log since boot.",
            sum(found.values()),
            **labels,
        )
    m.set("cluster_gpus", "gauge", "GPUs nvidia-smi lists on this node.", len(gpus))
    return len(gpus)


def gpu_part(m: Metrics, args: argparse.Namespace) -> None:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return
    out = run([smi, "-q", "-x"])
    if out.returncode != 0:
        raise RuntimeError(f"nvidia-smi -q -x exit {out.returncode}")
    lib = checks_lib()
    cfg = lib.node.load_config(args.settings)
    records, _boot = lib.gpu.read_kernel_log(cfg["kernel_log"])
    gpu_metrics(m, out.stdout.decode(), records)


# --------------------------------------------------------------------------- slurm part


def parse_oneliner(line: str) -> dict[str, str]:
    """`scontrol show ... --oneliner` line -> {Key: value}; values may hold spaces (Reason)."""
    fields: dict[str, str] = {}
    key = None
    for token in line.split(" "):
        name, sep, value = token.partition("=")
        if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9_/:.]*", name):
            key = name
            fields[key] = value
        elif key is not None and token:
            fields[key] += " " + token
    return fields


def tres(text: str) -> dict[str, float]:
    out = {}
    for item in (text or "").split(","):
        name, _sep, value = item.partition("=")
        if value:
            out[name] = number(value) or 0.0
    return out


def reason_kind(reason: str, acceptance_prefix: str, health_prefix: str) -> str:
    if reason.startswith(health_prefix):
        return "health"
    if acceptance_prefix and reason.startswith(acceptance_prefix):
        return "acceptance"
    return "admin"


def base_state(state: str) -> tuple[str, set[str]]:
    words = state.lower().replace("*", "+notresponding").split("+")
    return words[0], set(words[1:])


def node_metrics(m: Metrics, nodes_text: str, acceptance_prefix: str, health_prefix: str) -> None:
    by_state: Counter = Counter()
    by_reason: Counter = Counter()
    for line in nodes_text.splitlines():
        if not line.startswith("NodeName="):
            continue
        f = parse_oneliner(line)
        node = f["NodeName"]
        base, flags = base_state(f.get("State", "unknown"))
        drained = "drain" in flags or base == "drain"
        down = base == "down" or "notresponding" in flags
        if down:
            state = "down"
        elif drained:
            state = "drained" if base in ("idle", "drain") else "draining"
        else:
            state = base
        by_state[state] += 1
        m.set("slurm_node_state", "gauge", "1 for each node's state.", 1, node=node, state=state)
        reason = f.get("Reason", "").strip()
        kind = reason_kind(reason, acceptance_prefix, health_prefix) if drained or down else "none"
        if drained or down:
            by_reason[kind] += 1
        m.set(
            "slurm_node_drained",
            "gauge",
            "1 when a node is drained or draining; reason_kind from its reason's prefix "
            "(health, acceptance, admin).",
            int(drained),
            node=node,
            reason_kind=kind,
        )
        m.set("slurm_node_down", "gauge", "1 when Slurm marks the node down.", int(down), node=node)
        cfg, alloc = tres(f.get("CfgTRES", "")), tres(f.get("AllocTRES", ""))
        cpus = number(f.get("CPUTot")) or cfg.get("cpu", 0.0)
        cpus_alloc = number(f.get("CPUAlloc"))
        m.set("slurm_node_cpus", "gauge", "CPUs Slurm configures on the node.", cpus, node=node)
        m.set(
            "slurm_node_cpus_allocated",
            "gauge",
            "CPUs allocated to jobs on the node.",
            cpus_alloc if cpus_alloc is not None else alloc.get("cpu", 0.0),
            node=node,
        )
        m.set(
            "slurm_node_gpus",
            "gauge",
            "GPUs (gres/gpu) Slurm configures on the node.",
            cfg.get("gres/gpu", 0.0),
            node=node,
        )
        m.set(
            "slurm_node_gpus_allocated",
            "gauge",
            "GPUs allocated to jobs on the node.",
            alloc.get("gres/gpu", 0.0),
            node=node,
        )
    for state, n in sorted(by_state.items()):
        m.set("slurm_nodes", "gauge", "Nodes by state.", n, state=state)
    for kind in ("health", "acceptance", "admin"):
        m.set(
            "slurm_nodes_unavailable",
            "gauge",
            "Drained, draining or down nodes by their reason's prefix.",
            by_reason[kind],
            reason_kind=kind,
        )


def job_metrics(m: Metrics, jobs_text: str, now: float) -> None:
    counts: Counter = Counter()
    oldest: dict[str, float] = {}
    for line in jobs_text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 3:
            continue
        state, partition, submit = parts[0].lower(), parts[1], parts[2]
        counts[(state, partition)] += 1
        if state == "pending":
            try:
                t = time.mktime(time.strptime(submit, "%Y-%m-%dT%H:%M:%S"))
            except ValueError:
                continue
            oldest[partition] = max(oldest.get(partition, 0.0), 0.0, now - t)
    fam = m.family("slurm_jobs", "gauge", "Jobs by state and partition.")
    for (state, partition), n in sorted(counts.items()):
        fam.add(n, state=state, partition=partition)
    fam = m.family(
        "slurm_job_pending_oldest_seconds",
        "gauge",
        "How long the oldest pending job of each partition has waited.",
    )
    for partition, seconds in sorted(oldest.items()):
        fam.add(round(seconds, 1), partition=partition)


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def slurm_part(m: Metrics, args: argparse.Namespace) -> None:
    ping = run(["scontrol", "ping"])
    up = int(ping.returncode == 0 and b"is UP" in ping.stdout)
    m.set("slurm_daemon_up", "gauge", "1 when the Slurm daemon answers.", up, daemon="slurmctld")
    if args.dbd_host:
        m.set(
            "slurm_daemon_up",
            "gauge",
            "1 when the Slurm daemon answers.",
            int(port_open(args.dbd_host, args.dbd_port)),
            daemon="slurmdbd",
        )
    if not up:
        raise RuntimeError("slurmctld does not answer: no node or job figures")
    nodes = run(["scontrol", "show", "node", "--oneliner"])
    node_metrics(m, nodes.stdout.decode(), args.acceptance_prefix, args.health_prefix)
    jobs = run(["squeue", "--noheader", "--all", "--array", "--format=%T|%P|%V"])
    job_metrics(m, jobs.stdout.decode(), time.time())


# --------------------------------------------------------------------------- main

PARTS = {"node": node_part, "gpu": gpu_part, "slurm": slurm_part}


def collect(part: str, args: argparse.Namespace) -> str:
    m = Metrics()
    start = time.monotonic()
    ok = 1
    try:
        PARTS[part](m, args)
    except Exception as exc:  # one broken source must not silence the others
        print(f"slurm-cluster-textfile: {part}: {exc}", file=sys.stderr)
        ok = 0
    m.set(
        "cluster_textfile_part_ok",
        "gauge",
        "1 when the part read all its sources.",
        ok,
        part=part,
    )
    m.set(
        "cluster_textfile_part_duration_seconds",
        "gauge",
        "How long the part took to collect.",
        round(time.monotonic() - start, 4),
        part=part,
    )
    return m.render()


def parse_args(argv: Iterable[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="the node exporter's textfile folder")
    p.add_argument("--parts", default="node,gpu", help="comma list of node, gpu, slurm")
    p.add_argument("--settings", default=SETTINGS, help="the node's check settings")
    p.add_argument("--health-dir", default=HEALTH_DIR, help="the node health program's state")
    p.add_argument("--dbd-host", default="")
    p.add_argument("--dbd-port", type=int, default=6819)
    p.add_argument("--acceptance-prefix", default="acceptance:")
    p.add_argument("--health-prefix", default="health: ")
    return p.parse_args(list(argv) if argv is not None else None)


def main(argv: Iterable[str] | None = None) -> int:
    args = parse_args(argv)
    for part in [p for p in args.parts.split(",") if p]:
        if part not in PARTS:
            print(f"slurm-cluster-textfile: unknown part {part}", file=sys.stderr)
            return 2
        write_atomic(args.out, f"slurm_cluster_{part}.prom", collect(part, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
