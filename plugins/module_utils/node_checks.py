"""The node-local checks of the registry (cluster_checks.py), each with its one reader.

``run_checks`` runs every check of scope ``node`` that applies to this node
(its kinds and settings) for one use: the node health program (``health``),
the doctor's probe (``doctor``) or the metrics collector (``collector``).
The three call the same readers, so their verdicts agree.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Callable

from ansible_collections.gpulab.slurm_cluster.plugins.module_utils import cluster_checks as registry
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils import gpu_checks
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.node_base import (
    CONFIGLESS_DIR,
    Context,
    Result,
    as_user,
    human_mib,
    in_container,
    last_line,
    mount_of,
    read_token,
    run,
    sha1_file,
    units,
)

CONFIG = "/etc/slurm-cluster/health.json"
PREFIX = "health:"

# Settings and their defaults (the slurm_common role writes every key into
# CONFIG on every node of the cluster).
DEFAULTS: dict = {
    "node": "",
    # The node's kinds (cluster_checks.KINDS) and the units the cluster runs here.
    "kinds": ["compute"],
    "units": [],
    "prefix": PREFIX,
    "drain": True,
    "conf_dir": "/etc/slurm",
    "munge_key": "/etc/munge/munge.key",
    "slurm_conf_sha1": "",
    # A fetched copy that differs is a FAIL only when the settings are older
    # than this (site.yml writes them before the daemons take the new file).
    "config_grace_s": 300,
    "shared_path": "",
    "shared_check_dir": "",
    "shared_fstypes": [],
    "job_user": "",
    "job_dir": "",
    "disk_free_mib": {"/": 1024, "/tmp": 512, "/var/spool/slurmd": 256},
    "clock_max_offset_s": 1.0,
    "gpus": 0,
    "nvidia_smi": "nvidia-smi",
    "kernel_log": "/dev/kmsg",
    "timeout_s": 4.0,
    "flap_drains": 3,
    "flap_window_s": 3600,
    # Check ids not to run on this node (cluster_health_skip).
    "skip": [],
}


def check_munge(ctx: Context) -> tuple[str, str]:
    cred = run(["munge", "--no-input"], timeout=ctx.cfg["timeout_s"])
    if cred["rc"] != 0:
        active = run(["systemctl", "is-active", "munge"], timeout=3)["out"].strip() or "unknown"
        why = re.sub(r"^munge: Error: ", "", last_line(cred))
        return "FAIL", f"munged is {active}: munge -n: {why}"
    back = run(["unmunge"], stdin=cred["out"], timeout=ctx.cfg["timeout_s"])
    status = re.search(r"^STATUS:\s*(.*)$", back["out"], re.M)
    if back["rc"] != 0:
        return (
            "FAIL",
            f"local credential round trip failed: {status.group(1) if status else last_line(back)}",
        )
    return "PASS", "munged answers; a local credential decodes"


def fetched_conf(cfg: dict) -> str:
    """Where this node's slurmd reads slurm.conf: its fetched copy, else conf_dir."""
    fetched = os.path.join(CONFIGLESS_DIR, "slurm.conf")
    if os.path.exists(fetched):
        return fetched
    return os.path.join(cfg["conf_dir"], "slurm.conf")


def check_config(ctx: Context) -> tuple[str, str]:
    cfg = ctx.cfg
    path = fetched_conf(cfg)
    have = sha1_file(path)
    want = cfg["slurm_conf_sha1"]
    if have is None:
        return "FAIL", f"{path} is missing: no copy of the controller's slurm.conf was fetched here"
    if have == want:
        return "PASS", f"{path} matches the controller's slurm.conf ({want[:12]})"
    msg = f"{path} is {have[:12]}, the controller's slurm.conf is {want[:12]}"
    try:
        written = os.stat(ctx.cfg.get("_config_path", CONFIG)).st_mtime
        fetched = os.stat(path).st_mtime
    except OSError:
        written, fetched = 0.0, 0.0
    # slurmd's copy is newer than these settings: the controller's file moved
    # on after site.yml wrote them here (a run with --limit), not slurmd.
    if fetched > written:
        return "WARN", msg + " (this node's health settings are older than slurmd's copy)"
    age = time.time() - written
    if age < cfg["config_grace_s"]:
        return "WARN", msg + f" (settings changed {age:.0f} s ago: a reconfigure is due)"
    return "FAIL", msg + ": slurmd did not take the controller's new file"


def shared_write(cfg: dict) -> dict:
    """A file made and removed in the job user's folder, as that user, within the timeout."""
    script = 'f="$1/.health-$(uname -n)-$$"; : > "$f" && rm -f -- "$f"'
    return as_user(cfg["job_user"], ["sh", "-c", script, "sh", cfg["job_dir"]], cfg["timeout_s"])


def check_shared(ctx: Context) -> tuple[str, str]:
    cfg = ctx.cfg
    path = cfg["shared_path"]
    # First the write (as the job user, with a timeout): a hung mount stops here.
    wrote = shared_write(cfg) if cfg["job_user"] else {"rc": 0}
    if wrote["rc"] == 124:
        return "FAIL", f"{path} did not answer within {cfg['timeout_s']:g} s (hung mount?)"
    mount = mount_of(path)
    if not os.path.ismount(path):
        # Nothing mounted there, or a folder of a local filesystem bound onto it.
        return "FAIL", (
            f"{path} is a local folder ({mount.get('fstype', '?')} of {mount.get('source', '?')}), "
            "not the cluster's shared filesystem"
        )
    fstype = mount.get("fstype", "?")
    # Trust counts from the mount point: it may be a 1777 folder, at any depth.
    missing = read_token(cfg["shared_check_dir"], path) if cfg["shared_check_dir"] else ""
    if missing:
        return "FAIL", (
            f"{path} is {fstype} ({mount.get('source', '?')}), "
            f"not the cluster's shared filesystem: {missing}"
        )
    wanted = cfg["shared_fstypes"]
    if wanted and fstype not in wanted:
        return "FAIL", f"{path} is {fstype}, the cluster's is {'/'.join(wanted)}"
    if wrote["rc"] != 0:
        return "FAIL", f"{cfg['job_user']} cannot write in {cfg['job_dir']}: {last_line(wrote)}"
    return (
        "PASS",
        f"{path} is {fstype} from {mount.get('source', '?')}, "
        f"writable by {cfg['job_user'] or 'root'}",
    )


def check_disk(ctx: Context) -> tuple[str, str]:
    low, seen = [], []
    for path, mib in sorted(ctx.cfg["disk_free_mib"].items()):
        try:
            st = os.statvfs(path)
        except OSError as exc:
            low.append(f"{path}: {exc.strerror}")
            continue
        free = st.f_bavail * st.f_frsize / 2**20
        seen.append(f"{path} {human_mib(free)}")
        if free < float(mib):
            low.append(f"{path} has {human_mib(free)} free (threshold {human_mib(float(mib))})")
        elif st.f_files and st.f_favail < max(64, st.f_files // 200):
            low.append(f"{path} has {st.f_favail} inodes free of {st.f_files}")
    if low:
        return "FAIL", "; ".join(low)
    return "PASS", "free: " + ", ".join(seen)


def check_clock(ctx: Context) -> tuple[str, str]:
    limit = float(ctx.cfg["clock_max_offset_s"])
    active = run(["systemctl", "is-active", "chrony", "systemd-timesyncd"], timeout=3)[
        "out"
    ].split()
    if active[:1] == ["active"]:
        res = run(["chronyc", "-c", "tracking"], timeout=3)
        fields = res["out"].strip().split(",")
        if res["rc"] != 0 or len(fields) < 14:
            return "FAIL", f"chronyd runs but chronyc tracking failed: {last_line(res)}"
        offset, leap = abs(float(fields[4])), fields[-1]
        if leap.lower().startswith("not synchronised"):
            return "FAIL", "chronyd is not synchronised to any source"
        if offset > limit:
            return "FAIL", f"clock is {offset:.3f} s off (chrony; limit {limit:g} s)"
        return "PASS", f"chrony synchronised, offset {offset * 1000:.1f} ms"
    if active[1:2] == ["active"]:
        res = run(["timedatectl", "show", "--property=NTPSynchronized", "--value"], timeout=3)
        if res["out"].strip() != "yes":
            return "FAIL", "systemd-timesyncd runs but the clock is not synchronised"
        return "PASS", "systemd-timesyncd synchronised"
    if ctx.once("container", in_container):
        return "PASS", "in a container: the host keeps the clock"
    return "FAIL", "no time service is active (chrony or systemd-timesyncd)"


def check_services(ctx: Context) -> tuple[str, str, str]:
    """Every unit the cluster runs on this node active (a timer waiting, a service running).

    A unit with no unit file yet is a WARN: site.yml installs the roles in
    turn (the exporter after the doctor of a first run); one installed and
    not active is a FAIL.
    """
    wanted = [str(u) for u in ctx.cfg["units"]]
    seen = units(wanted)
    down, missing = [], []
    for name in wanted:
        unit = seen.get(name, {})
        full = name if "." in name else f"{name}.service"
        if unit.get("active") == "absent":
            missing.append(f"{full} is not installed")
        elif unit.get("active") != "active":
            state = f"{unit.get('active', '?')}/{unit.get('sub', '?')}"
            down.append((name, f"{full} is {state} ({unit.get('enabled') or '?'})"))
    ctx.cache["units_down"] = [n for n, _text in down]
    if down:
        node = ctx.cfg["node"] or socket.gethostname().split(".")[0]
        names = " ".join(n for n, _text in down)
        fix = (
            f"systemctl start {names} on {node} (journalctl -u {down[0][0]}); "
            "site.yml starts every unit the cluster runs"
        )
        return "FAIL", "; ".join([text for _n, text in down] + missing), fix
    if missing:
        return "WARN", "; ".join(missing) + " (site.yml installs it)", ""
    return "PASS", f"{len(wanted)} units active: {', '.join(wanted)}", ""


# The reader of each node-scope check of the registry (a test holds them one to one).
RUNNERS: dict[str, Callable[[Context], tuple]] = {
    "services": check_services,
    "munge.local": check_munge,
    "clock.sync": check_clock,
    "config.fetched": check_config,
    "shared.fs": check_shared,
    "disk.free": check_disk,
    "gpu.smi": gpu_checks.check_gpu_smi,
    "gpu.count": gpu_checks.check_gpu_count,
    "gpu.xid": gpu_checks.check_gpu_xid,
    "gpu.ecc": gpu_checks.check_gpu_ecc,
    "gpu.persistence": gpu_checks.check_gpu_persistence,
    "gpu.throttle": gpu_checks.check_gpu_throttle,
}


def node_check_ids(use: str = "health") -> tuple[str, ...]:
    return tuple(c.id for c in registry.REGISTRY if c.scope == "node" and use in c.uses)


def run_checks(
    cfg: dict, state: dict | None = None, only: list[str] | None = None, use: str = "health"
) -> list[Result]:
    """Every node check of `use` that applies here, in registry order, explained FAILs folded.

    A check whose FAIL another FAIL on this node explains (its registry
    ``explained_by``) is SKIP, caused_by that one: the report names the cause once.
    """
    ctx = Context(cfg=cfg, state=state if state is not None else {})
    results: dict[str, Result] = {}
    for check in registry.REGISTRY:
        if check.scope != "node" or use not in check.uses:
            continue
        if (only and check.id not in only) or check.id in cfg["skip"]:
            continue
        if not registry.applies(check, cfg["kinds"], cfg):
            continue
        cause = next(
            (
                c
                for c in check.explained_by
                if results.get(c)
                and results[c].status == "FAIL"
                and registry.explains(check, c, ctx.cache.get("units_down", ()))
            ),
            "",
        )
        if cause:
            results[check.id] = Result(
                check.id, "SKIP", f"not judged: {cause} failed", caused_by=cause
            )
            continue
        try:
            status, message, *fix = RUNNERS[check.id](ctx)
        except Exception as exc:
            status, message, fix = (
                "FAIL",
                f"the check itself failed: {type(exc).__name__}: {exc}",
                [],
            )
        text = (fix[0] if fix and fix[0] else check.fix) if status == "FAIL" else ""
        results[check.id] = Result(check.id, status, message, text)
        if check.id == "services" and status == "FAIL":
            results[check.id].data = {"down": list(ctx.cache.get("units_down", ()))}
    return list(results.values())


def load_config(path: str) -> dict:
    """The node's check settings: every key known, every skipped check a real one."""
    with open(path) as handle:
        given = json.load(handle)
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"{path}: unknown settings {', '.join(unknown)}")
    cfg = {**DEFAULTS, **given}
    known = ", ".join(c.id for c in registry.REGISTRY if c.scope == "node")
    bad = sorted(set(cfg["skip"]) - set(known.split(", ")))
    if bad:
        raise ValueError(f"{path}: skip names no check {', '.join(bad)} (checks: {known})")
    cfg["_config_path"] = path
    if not cfg["node"]:
        cfg["node"] = socket.gethostname().split(".")[0]
    return cfg


def load_json(path: str, default: object) -> object:
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return default


# How many of events.jsonl's last lines the monitoring role's report reads
# (roles/monitoring/vars/main.yml __monitoring_health_read_cmd: tail -n 500).
EVENTS_TAIL = 500


def health_files(state_dir: str, lines: int = EVENTS_TAIL) -> dict:
    """The node health program's files as the cluster report keeps them: last.json's
    text and the last `lines` lines of events.jsonl ("" where a file is not there)."""
    try:
        with open(os.path.join(state_dir, "last.json"), encoding="utf-8", errors="replace") as f:
            last = f.read().strip()
    except OSError:
        last = ""
    data = b""
    try:
        with open(os.path.join(state_dir, "events.jsonl"), "rb") as handle:
            pos = handle.seek(0, os.SEEK_END)
            while pos > 0 and data.count(b"\n") <= lines:
                step = min(65536, pos)
                pos -= step
                handle.seek(pos)
                data = handle.read(step) + data
    except OSError:
        data = b""
    events = b"\n".join(data.splitlines()[-lines:]).decode("utf-8", "replace")
    return {"last": last, "events": events}
