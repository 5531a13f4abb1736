"""cluster-health: a node's own health checks, one registry, run by Slurm and by the doctor.

Standard library only: the roles install this file as the node's
HealthCheckProgram (/usr/local/sbin/cluster-health) and slurmd runs it with
the system python3 every HealthCheckInterval; the doctor's probe
(cluster_probe) imports the same registry. Adding a check touches this file
(one ``Check`` in ``REGISTRY``) and one fixture (tests/fixtures/health).

A run reads its settings from /etc/slurm-cluster/health.json (written by the
node_health role from the inventory), runs every check that applies to the
node, and then acts on the node's Slurm state (``decide``):

- a FAIL drains the node with a reason under its own prefix
  (``health: <check>: <cause>``), unless the node is already drained by
  someone else (the admin, the acceptance gate): that drain is left as it is;
- a PASS lifts only a drain that carries the prefix. One passing run clears
  it; a node that the program drained ``flap_drains`` times within
  ``flap_window_s`` stays drained as ``health: flapping: …`` until the admin
  resumes it by hand.

The verdict is kept in /var/lib/slurm-cluster/health/last.json and each
drain, resume and reason change is appended to events.jsonl there.
Exit status: 0 when every check passed, 1 on a FAIL, 2 on a bad config.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import grp
import hashlib
import json
import os
import pwd
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

CONFIG = "/etc/slurm-cluster/health.json"
STATE_DIR = "/var/lib/slurm-cluster/health"
PREFIX = "health:"
CONFIGLESS_DIR = "/run/slurm/conf"

# Settings and their defaults (the node_health role writes every key).
DEFAULTS: dict = {
    "node": "",
    "prefix": PREFIX,
    "drain": True,
    "conf_dir": "/etc/slurm",
    "munge_key": "/etc/munge/munge.key",
    "slurm_conf_sha1": "",
    # A fetched copy that differs is a FAIL only when health.json is older
    # than this (site.yml writes it before the daemons take the new file).
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

# Xid classes (NVIDIA, "Xid Errors", docs.nvidia.com/deploy/xid-errors, and
# the GPU debug guidelines' triage table): which new Xid drains the node.
# Application faults (13, 31, 43, 45, 68 …) are the job's, not the node's.
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
XID_RE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)")


# ---------------------------------------------------------------- helpers


def run(argv: list[str], timeout: float = 10, stdin: str | None = None, **kw) -> dict:
    """rc, stdout, stderr of a command; rc 127 when missing, 124 on timeout."""
    if shutil.which(argv[0]) is None and not os.path.exists(argv[0]):
        return {"rc": 127, "out": "", "err": f"{argv[0]}: not found"}
    try:
        proc = subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False, **kw
        )
    except subprocess.TimeoutExpired:
        return {"rc": 124, "out": "", "err": f"{argv[0]}: no answer in {timeout:g} s"}
    except OSError as exc:
        return {"rc": 126, "out": "", "err": f"{argv[0]}: {exc.strerror or exc}"}
    return {"rc": proc.returncode, "out": proc.stdout, "err": proc.stderr}


def owner_names(uid: int, gid: int) -> tuple[str, str]:
    """User and group names of a file (the numbers where a name is missing)."""
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = str(gid)
    return user, group


def file_info(path: str) -> dict:
    """{exists, sha1 (Ansible's own checksum), sha256, owner, group, mode} of a file."""
    try:
        st = os.stat(path)
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        return {"exists": False, "error": exc.strerror}
    owner, group = owner_names(st.st_uid, st.st_gid)
    return {
        "exists": True,
        "sha1": hashlib.sha1(data).hexdigest(),
        "sha256": hashlib.sha256(data).hexdigest(),
        "owner": owner,
        "group": group,
        "mode": f"{st.st_mode & 0o7777:04o}",
    }


def parse_units(text: str) -> dict[str, dict[str, str]]:
    """``systemctl show -p Id,LoadState,ActiveState,SubState,UnitFileState A B`` → {A: {…}}."""
    out: dict[str, dict[str, str]] = {}
    for block in text.strip().split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        name = props.get("Id", "")
        name = name[: -len(".service")] if name.endswith(".service") else name
        if not name:
            continue
        if props.get("LoadState") == "not-found":
            out[name] = {"active": "absent", "sub": "absent", "enabled": "absent"}
        else:
            out[name] = {
                "active": props.get("ActiveState", ""),
                "sub": props.get("SubState", ""),
                "enabled": props.get("UnitFileState", ""),
            }
    return out


def units(names: list[str]) -> dict[str, dict[str, str]]:
    """parse_units of one systemctl call; a unit systemd does not know is "absent"."""
    if not names:
        return {}
    full = [n if "." in n else f"{n}.service" for n in names]
    res = run(
        ["systemctl", "show", "--property=Id,LoadState,ActiveState,SubState,UnitFileState", *full],
        timeout=10,
    )
    found = parse_units(res["out"]) if res["rc"] == 0 else {}
    absent = {"active": "absent", "sub": "absent", "enabled": "absent"}
    short = [n[: -len(".service")] if n.endswith(".service") else n for n in names]
    return {n: found.get(n, absent) for n in short}


def last_line(res: dict) -> str:
    lines = (res["err"] or res["out"]).strip().splitlines()
    return lines[-1].strip() if lines else f"exit {res['rc']}"


def sha1_file(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.sha1(handle.read()).hexdigest()
    except OSError:
        return None


def mount_of(path: str) -> dict:
    """The mount that `path` shows (the last of stacked mounts): target, fstype, source."""
    best: dict = {}
    try:
        with open("/proc/self/mountinfo") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return best
    real = os.path.realpath(path)
    for line in lines:
        left, _sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 2:
            continue
        target = fields[4].replace("\\040", " ")
        inside = real == target or real.startswith(target.rstrip("/") + "/")
        if inside and len(target) >= len(best.get("target", "")):
            best = {"target": target, "fstype": tail[0], "source": tail[1]}
    return best


def in_container() -> bool:
    res = run(["systemd-detect-virt", "--container", "--quiet"], timeout=3)
    return res["rc"] == 0


def human_mib(value: float) -> str:
    return f"{value / 1024:.1f} GiB" if value >= 1024 else f"{value:.0f} MiB"


# ---------------------------------------------------------------- registry


@dataclass
class Result:
    id: str
    status: str  # PASS, WARN, FAIL, SKIP
    message: str
    fix: str = ""
    caused_by: str = ""

    def as_dict(self) -> dict:
        out = {"id": self.id, "status": self.status, "message": self.message, "fix": self.fix}
        if self.caused_by:
            out["caused_by"] = self.caused_by
        return out


@dataclass
class Check:
    """One check: its id, what it reads, the fix for its FAIL, what explains it."""

    id: str
    reads: str
    fix: str
    run: Callable[[Context], tuple[str, str]]
    applies: Callable[[dict], bool] = lambda cfg: True
    # Checks whose FAIL on this node explains this one's (it is then SKIP,
    # caused_by the first of them): the report names the cause, once.
    explained_by: tuple[str, ...] = ()


@dataclass
class Context:
    cfg: dict
    cache: dict = field(default_factory=dict)
    state: dict = field(default_factory=dict)

    def once(self, key: str, make: Callable[[], object]) -> object:
        if key not in self.cache:
            self.cache[key] = make()
        return self.cache[key]


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
        return "FAIL", f"{path} is missing: slurmd holds no copy of the controller's slurm.conf"
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


def as_user(user: str | int, argv: list[str], timeout: float = 10) -> dict:
    """rc, out, err of argv run as `user` (name or uid) with its own gid, no extra groups."""
    try:
        entry = pwd.getpwuid(user) if isinstance(user, int) else pwd.getpwnam(user)
    except KeyError:
        return {"rc": 1, "out": "", "err": f"user {user} does not exist here"}
    try:
        proc = subprocess.run(
            argv,
            user=entry.pw_uid,
            group=entry.pw_gid,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd="/",
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": entry.pw_dir},
        )
    except subprocess.TimeoutExpired:
        return {"rc": 124, "out": "", "err": f"timed out after {timeout} s"}
    except OSError as exc:
        return {"rc": 1, "out": "", "err": str(exc)}
    return {"rc": proc.returncode, "out": proc.stdout, "err": proc.stderr}


def shared_write(cfg: dict) -> dict:
    """A file made and removed in the job user's folder, as that user, within the timeout."""
    script = 'f="$1/.health-$(uname -n)-$$"; : > "$f" && rm -f -- "$f"'
    return as_user(cfg["job_user"], ["sh", "-c", script, "sh", cfg["job_dir"]], cfg["timeout_s"])


def open_root_dir(path: str) -> int:
    """A descriptor of root's folder `path`, each component opened without following a link.

    Raises OSError naming the component that is a link, missing, or (below
    the first two levels: the mount point may be the lab's 1777 folder) a
    folder someone other than root owns or may write.
    """
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    parts = [p for p in path.split("/") if p]
    try:
        for depth, part in enumerate(parts):
            try:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                where = "/" + "/".join(parts[: depth + 1])
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise OSError(exc.errno, f"{where} is a link or not a folder") from exc
                raise OSError(exc.errno, f"{where}: {exc.strerror}") from exc
            os.close(fd)
            fd = nxt
            st = os.fstat(fd)
            if depth >= 2 and (st.st_uid != 0 or st.st_mode & 0o022):
                where = "/" + "/".join(parts[: depth + 1])
                raise OSError(errno.EPERM, f"{where} is not root's own folder")
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_token(check_dir: str) -> str:
    """'' when the check folder holds root's token file (its name is its content), else why not.

    Root follows no link on the way and reads only its own files there.
    """
    try:
        fd = open_root_dir(check_dir)
    except OSError as exc:
        return exc.strerror or str(exc)
    try:
        for name in os.listdir(fd):
            try:
                ffd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError:
                continue
            try:
                fst = os.fstat(ffd)
                ours = stat.S_ISREG(fst.st_mode) and fst.st_uid == 0
                if ours and os.read(ffd, 256).decode(errors="replace").strip() == name:
                    return ""
            finally:
                os.close(ffd)
        return f"no token file in {check_dir}"
    finally:
        os.close(fd)


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
    missing = read_token(cfg["shared_check_dir"]) if cfg["shared_check_dir"] else ""
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


def gpu_devices() -> list[str]:
    try:
        names = os.listdir("/dev")
    except OSError:
        return []
    return sorted(n for n in names if re.fullmatch(r"nvidia\d+", n))


SMI_FIELDS = (
    "index,pci.bus_id,persistence_mode,ecc.errors.uncorrected.volatile.total,retired_pages.pending,"
    "clocks_throttle_reasons.hw_slowdown,clocks_throttle_reasons.hw_thermal_slowdown,"
    "clocks_throttle_reasons.sw_thermal_slowdown,clocks_throttle_reasons.hw_power_brake_slowdown"
)
SMI_KEYS = ("index", "bus", "persistence", "ecc_dbe", "retired_pending", "hw_slowdown",
            "hw_thermal", "sw_thermal", "power_brake")  # fmt: skip
THROTTLES = (
    ("hw_slowdown", "HW slowdown"),
    ("hw_thermal", "HW thermal slowdown"),
    ("sw_thermal", "SW thermal slowdown"),
    ("power_brake", "power brake"),
)
REMAP_FIELDS = "gpu_bus_id,remapped_rows.pending,remapped_rows.failure"


def parse_csv(text: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.split(",")] for line in text.strip().splitlines() if line.strip()
    ]


def smi(ctx: Context) -> dict:
    """One nvidia-smi query of every GPU and one of the row remapper, parsed."""

    def query() -> dict:
        exe, timeout = ctx.cfg["nvidia_smi"], ctx.cfg["timeout_s"]
        res = run(
            [exe, f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits"], timeout=timeout
        )
        if res["rc"] != 0:
            return {"error": last_line(res), "rc": res["rc"]}
        gpus = []
        for row in parse_csv(res["out"]):
            if len(row) < 9:
                continue
            gpus.append(dict(zip(SMI_KEYS, row, strict=False)))
        remap = run(
            [exe, f"--query-remapped-rows={REMAP_FIELDS}", "--format=csv,noheader"], timeout=timeout
        )
        remaps = {}
        if remap["rc"] == 0:
            for row in parse_csv(remap["out"]):
                if len(row) >= 3:
                    remaps[row[0].lower()] = {"pending": row[1], "failure": row[2]}
        for gpu in gpus:
            gpu["remap"] = remaps.get(gpu["bus"].lower(), {})
        return {"gpus": gpus}

    return ctx.once("smi", query)  # type: ignore[return-value]


def is_gpu_node(cfg: dict) -> bool:
    return int(cfg["gpus"]) > 0


def check_gpu_count(ctx: Context) -> tuple[str, str]:
    want = int(ctx.cfg["gpus"])
    devs = gpu_devices()
    missing = [f"/dev/nvidia{i}" for i in range(want) if f"nvidia{i}" not in devs]
    if len(devs) < want or missing:
        return (
            "FAIL",
            f"{len(devs)} GPU devices, gres says {want}: {', '.join(missing) or 'fewer'} missing",
        )
    seen = smi(ctx)
    if "gpus" in seen and len(seen["gpus"]) != want:
        return "FAIL", f"nvidia-smi lists {len(seen['gpus'])} GPUs, gres says {want}"
    return "PASS", f"{want} GPUs, as gres says"


def check_gpu_smi(ctx: Context) -> tuple[str, str]:
    seen = smi(ctx)
    if "error" in seen:
        return "FAIL", f"nvidia-smi failed: {seen['error']}"
    return "PASS", f"nvidia-smi answers for {len(seen['gpus'])} GPUs"


def _count(value: str) -> int:
    return int(value) if value.strip().isdigit() else 0


def _active(value: str) -> bool:
    return value.strip().lower() == "active"


def check_gpu_ecc(ctx: Context) -> tuple[str, str]:
    seen = smi(ctx)
    if "error" in seen:
        return "SKIP", "nvidia-smi gave no answer"
    bad = []
    for g in seen["gpus"]:
        name = f"GPU {g['index']} ({g['bus']})"
        if _count(g["ecc_dbe"]):
            bad.append(f"{name} has {g['ecc_dbe']} uncorrectable ECC errors")
        if g["retired_pending"].strip().lower() == "yes":
            bad.append(f"{name} has a page retirement pending (reset the GPU)")
        remap = g["remap"]
        if remap.get("failure", "").strip().lower() == "yes":
            bad.append(f"{name} row remapping failed (replace the GPU)")
        elif remap.get("pending", "").strip().lower() == "yes":
            bad.append(f"{name} has a row remap pending (reset the GPU)")
    if bad:
        return "FAIL", "; ".join(bad)
    return "PASS", "no uncorrectable ECC error, no pending or failed row remap"


def check_gpu_persistence(ctx: Context) -> tuple[str, str]:
    seen = smi(ctx)
    if "error" in seen:
        return "SKIP", "nvidia-smi gave no answer"
    off = [g["index"] for g in seen["gpus"] if g["persistence"].strip().lower() != "enabled"]
    if off:
        return "FAIL", f"persistence mode is off on GPU {', '.join(off)}"
    return "PASS", "persistence mode on"


def check_gpu_throttle(ctx: Context) -> tuple[str, str]:
    seen = smi(ctx)
    if "error" in seen:
        return "SKIP", "nvidia-smi gave no answer"
    bad = []
    for g in seen["gpus"]:
        why = [
            label
            for key, label in THROTTLES
            if _active(g[key])
        ]  # fmt: skip
        if why:
            bad.append(f"GPU {g['index']}: {', '.join(why)}")
    if bad:
        return "FAIL", "throttled: " + "; ".join(bad)
    return "PASS", "no HW slowdown or thermal throttling"


def read_kernel_log(source: str) -> tuple[list[tuple[int, str]], str]:
    """(sequence, message) records of the kernel log and its boot id, or a file's lines.

    /dev/kmsg is read without blocking from its first record; a plain file
    (a test's fake) is read whole, its lines numbered.
    """
    records: list[tuple[int, str]] = []
    if source == "/dev/kmsg":
        try:
            fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise RuntimeError(f"{source}: {exc.strerror}") from exc
        try:
            while True:
                try:
                    chunk = os.read(fd, 8192)
                except OSError as exc:
                    if exc.errno == errno.EPIPE:  # overwritten while reading: go on
                        continue
                    if exc.errno == errno.EAGAIN:
                        break
                    raise
                if not chunk:
                    break
                head, _sep, msg = chunk.decode(errors="replace").partition(";")
                parts = head.split(",")
                if len(parts) > 1 and parts[1].isdigit():
                    records.append((int(parts[1]), msg.splitlines()[0] if msg else ""))
        finally:
            os.close(fd)
        try:
            with open("/proc/sys/kernel/random/boot_id") as handle:
                boot = handle.read().strip()
        except OSError:
            boot = ""
        return records, boot
    try:
        with open(source, errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError as exc:
        raise RuntimeError(f"{source}: {exc.strerror}") from exc
    try:
        boot = f"file:{os.stat(source).st_ino}"
    except OSError:
        boot = "file"
    return list(enumerate(lines, 1)), boot


def check_gpu_xid(ctx: Context) -> tuple[str, str]:
    """Fail-class Xids in this boot's kernel log, not acknowledged (cluster-health --ack-xid)."""
    try:
        records, boot = read_kernel_log(ctx.cfg["kernel_log"])
    except (RuntimeError, OSError) as exc:
        return "WARN", f"kernel log not readable: {exc}"
    prior = ctx.state.get("xid") or {}
    ack = int(prior.get("ack", 0)) if prior.get("boot") == boot else 0
    fails, warns = [], []
    for seq, msg in records:
        m = XID_RE.search(msg)
        if not m or seq <= ack:
            continue
        code = int(m.group(2))
        text = f"Xid {code} on {m.group(1)}"
        if code in XID_FAIL:
            fails.append(f"{text} ({XID_FAIL[code]})")
        elif seq > int(prior.get("seen", 0)) or prior.get("boot") != boot:
            warns.append(text)
    ctx.state["xid"] = {"boot": boot, "ack": ack, "seen": records[-1][0] if records else 0}
    if ctx.cfg.get("_ack_xid"):
        ctx.state["xid"]["ack"] = ctx.state["xid"]["seen"]
        return "PASS", f"Xids up to record {ctx.state['xid']['seen']} acknowledged"
    if fails:
        return "FAIL", "; ".join(dict.fromkeys(fails))
    if warns:
        return "WARN", "new application Xids: " + "; ".join(dict.fromkeys(warns))
    return "PASS", "no Xid since boot" if not ack else "no Xid since the acknowledgement"


REGISTRY: tuple[Check, ...] = (
    Check(
        "munge.local",
        "munge -n | unmunge; systemctl is-active munge",
        "systemctl restart munge; journalctl -u munge (the key: /etc/munge/munge.key, 0400 munge)",
        check_munge,
    ),
    Check(
        "config.fetched",
        "sha1 of slurmd's fetched slurm.conf (/run/slurm/conf) against the controller's",
        "scontrol reconfigure on the controller, or systemctl restart slurmd here",
        check_config,
        applies=lambda cfg: bool(cfg["slurm_conf_sha1"]),
        explained_by=("munge.local",),
    ),
    Check(
        "shared.fs",
        "mountinfo of the shared path, root's token in the check folder, a file written as the "
        "job user",
        "mount the shared filesystem again (mount -a, or systemctl restart its mount unit), "
        "then read dmesg",
        check_shared,
        applies=lambda cfg: bool(cfg["shared_path"]),
    ),
    Check(
        "disk.free",
        "statvfs of /, /tmp and the Slurm spool",
        "free space there (old job files in /tmp, the spool's job folders); thresholds: "
        "cluster_health_disk_free_mib",
        check_disk,
    ),
    Check(
        "clock.sync",
        "systemctl is-active chrony/systemd-timesyncd; chronyc tracking or timedatectl",
        "apt install chrony && systemctl enable --now chrony (munge rejects credentials 300 s off)",
        check_clock,
    ),
    Check(
        "gpu.smi",
        "nvidia-smi --query-gpu (within the timeout)",
        "nvidia-smi by hand; a hung one needs the driver reloaded or a reboot",
        check_gpu_smi,
        applies=is_gpu_node,
    ),
    Check(
        "gpu.count",
        "/dev/nvidia<N> and nvidia-smi's GPUs against the node's gres count",
        "find the missing GPU (nvidia-smi, dmesg | grep -i nvrm), reseat or reboot; "
        "or change the inventory",
        check_gpu_count,
        applies=is_gpu_node,
    ),
    Check(
        "gpu.xid",
        "NVRM Xid lines in the kernel log since boot",
        "reset the GPU (nvidia-smi -r) or reboot, then cluster-health --ack-xid",
        check_gpu_xid,
        applies=is_gpu_node,
    ),
    Check(
        "gpu.ecc",
        "uncorrectable volatile ECC, retired pages pending, remapped rows pending/failed",
        "reset the GPU (pending remap/retirement) or have it replaced (failure, repeated errors)",
        check_gpu_ecc,
        applies=is_gpu_node,
        explained_by=("gpu.smi",),
    ),
    Check(
        "gpu.persistence",
        "nvidia-smi persistence_mode",
        "systemctl enable --now nvidia-persistenced",
        check_gpu_persistence,
        applies=is_gpu_node,
        explained_by=("gpu.smi",),
    ),
    Check(
        "gpu.throttle",
        "nvidia-smi clocks_throttle_reasons (HW slowdown, thermal, power brake)",
        "check cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE)",
        check_gpu_throttle,
        applies=is_gpu_node,
        explained_by=("gpu.smi",),
    ),
)
CHECK_IDS = tuple(c.id for c in REGISTRY)


def run_checks(cfg: dict, state: dict | None = None, only: list[str] | None = None) -> list[Result]:
    """Every check that applies to this node, in registry order, explained FAILs folded."""
    ctx = Context(cfg=cfg, state=state if state is not None else {})
    results: dict[str, Result] = {}
    for check in REGISTRY:
        if (only and check.id not in only) or check.id in cfg["skip"]:
            continue
        if not check.applies(cfg):
            continue
        cause = next(
            (c for c in check.explained_by if results.get(c) and results[c].status == "FAIL"), ""
        )
        if cause:
            results[check.id] = Result(
                check.id, "SKIP", f"not judged: {cause} failed", caused_by=cause
            )
            continue
        try:
            status, message = check.run(ctx)
        except Exception as exc:
            status, message = "FAIL", f"the check itself failed: {type(exc).__name__}: {exc}"
        results[check.id] = Result(check.id, status, message, check.fix if status == "FAIL" else "")
    return list(results.values())


# ---------------------------------------------------------------- the Slurm side


def parse_node(text: str) -> dict:
    """``scontrol --oneliner show node X`` → {state, flags, reason} (without [user@time])."""
    state = re.search(r"(?:^|\s)State=(\S+)", text)
    reason = re.search(r"(?:^|\s)Reason=(.*?)(?=\s+\w+=|$)", text)
    text_reason = reason.group(1).strip() if reason else ""
    text_reason = re.sub(r"\s*\[[^\]]*@[^\]]*\]$", "", text_reason)
    value = state.group(1) if state else ""
    return {
        "state": value,
        "flags": set(value.split("+")),
        "reason": "" if text_reason == "none" else text_reason,
    }


def drain_reason(results: list[Result], prefix: str) -> str:
    fails = [r for r in results if r.status == "FAIL"]
    first = fails[0]
    more = (
        f" (+{len(fails) - 1} more: {', '.join(r.id for r in fails[1:])})" if len(fails) > 1 else ""
    )
    reason = f"{prefix} {first.id}: {first.message}{more}"
    # scontrol takes the reason as one argument; keep it short enough to read in sinfo -R.
    return reason if len(reason) <= 240 else reason[:237] + "..."


def decide(node: dict, results: list[Result], prefix: str, drains: list[float], now: float,
           flap_drains: int, flap_window_s: float) -> tuple[str, str]:  # fmt: skip
    """What to do with the node: ("drain"|"update"|"resume"|"flapping"|"none"|"kept", reason).

    - FAIL, node not drained: drain it under the prefix.
    - FAIL, drained under the prefix for another cause: update the reason.
    - FAIL or PASS, drained by anyone else (admin, acceptance gate, Slurm): kept.
    - PASS, drained under the prefix: resume, unless the program drained it
      ``flap_drains`` times within ``flap_window_s`` (then "flapping": it stays
      drained, the reason says so, the admin resumes it).
    """
    drained = bool(node["flags"] & {"DRAIN", "DRAINED", "DRAINING"}) or node["state"].startswith(
        "DRAIN"
    )
    ours = node["reason"].startswith(prefix)
    failed = any(r.status == "FAIL" for r in results)
    if drained and not ours:
        return "kept", node["reason"]
    if failed:
        reason = drain_reason(results, prefix)
        if not drained:
            return "drain", reason
        if node["reason"].startswith(f"{prefix} flapping:"):
            return "none", node["reason"]
        return ("update", reason) if node["reason"] != reason else ("none", reason)
    if not drained:
        return "none", ""
    if node["reason"].startswith(f"{prefix} flapping:"):
        return "none", node["reason"]
    recent = [t for t in drains if now - t <= flap_window_s]
    if flap_drains and len(recent) >= flap_drains:
        was = node["reason"][len(prefix) :].strip()
        return "flapping", (
            f"{prefix} flapping: drained {len(recent)} times in {flap_window_s / 60:.0f} min, "
            f"last for {was}; resume by hand: scontrol update nodename=NODE state=resume"
        )[:240]
    return "resume", ""


def slurm_node(name: str, timeout: float, env: dict | None = None) -> tuple[dict | None, str]:
    res = run(["scontrol", "--oneliner", "show", "node", name], timeout=timeout, env=env)
    if res["rc"] != 0 or "NodeName=" not in res["out"]:
        return None, last_line(res)
    return parse_node(res["out"]), ""


def apply(name: str, action: str, reason: str, timeout: float, env: dict | None = None) -> str:
    """The scontrol update for an action; '' on success, else why not."""
    if action in ("drain", "update", "flapping"):
        argv = [
            "scontrol",
            "update",
            f"nodename={name}",
            "state=drain",
            f"reason={reason.replace('NODE', name)}",
        ]
    elif action == "resume":
        argv = ["scontrol", "update", f"nodename={name}", "state=resume"]
    else:
        return ""
    res = run(argv, timeout=timeout, env=env)
    return "" if res["rc"] == 0 else last_line(res)


class PrivateMunge:
    """A munged of this run only, on its own socket, with the node's key.

    With the node's munged down, slurmd cannot take slurmctld's health-check
    RPC and scontrol cannot talk to slurmctld: the program (then started by
    cluster-health.timer) drains its node through a munged of its own, run as
    the munge user with the same key, and leaves munge.service as it found it.
    ``env`` is None when it could not start (``error`` says why).
    """

    def __init__(self, cfg: dict) -> None:
        self.env: dict | None = None
        self.error = ""
        self.dir = ""
        try:
            user = pwd.getpwnam("munge")
        except KeyError:
            self.error = "no munge user"
            return
        self.dir = tempfile.mkdtemp(prefix="cluster-health-munge-", dir="/run")
        os.chown(self.dir, user.pw_uid, user.pw_gid)
        os.chmod(self.dir, 0o755)  # munged wants its socket folder searchable by all
        sock = os.path.join(self.dir, "munge.socket")
        started = run(
            ["munged", f"--socket={sock}", f"--key-file={cfg['munge_key']}",
             f"--pid-file={self.dir}/munged.pid", f"--seed-file={self.dir}/munged.seed",
             f"--log-file={self.dir}/munged.log", "--num-threads=1"],
            timeout=cfg["timeout_s"], user=user.pw_uid, group=user.pw_gid, extra_groups=[],
        )  # fmt: skip
        if started["rc"] != 0:
            self.error = f"a munged of its own did not start: {last_line(started)}"
            return
        try:
            with open(fetched_conf(cfg)) as handle:
                text = handle.read()
        except OSError as exc:
            self.error = f"no slurm.conf to reach slurmctld with: {exc.strerror}"
            return
        text = re.sub(r"(?im)^\s*AuthInfo\s*=.*$", "", text) + f"\nAuthInfo=socket={sock}\n"
        conf = os.path.join(self.dir, "slurm.conf")
        with open(conf, "w") as handle:
            handle.write(text)
        self.env = {**os.environ, "SLURM_CONF": conf}

    def close(self) -> None:
        if not self.dir:
            return
        try:
            with open(os.path.join(self.dir, "munged.pid")) as handle:
                os.kill(int(handle.read().strip()), 15)
        except (OSError, ValueError):
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------- main


def say(text: str, err: bool = False) -> None:
    """One line of the command's output (stdout, or stderr for errors)."""
    (sys.stderr if err else sys.stdout).write(f"{text}\n")


def load_config(path: str) -> dict:
    with open(path) as handle:
        given = json.load(handle)
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"{path}: unknown settings {', '.join(unknown)}")
    cfg = {**DEFAULTS, **given}
    bad = sorted(set(cfg["skip"]) - set(CHECK_IDS))
    if bad:
        raise ValueError(
            f"{path}: skip names no check {', '.join(bad)} (checks: {', '.join(CHECK_IDS)})"
        )
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


def write_json(path: str, data: object) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
        handle.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="cluster-health", description=__doc__.split("\n\n", maxsplit=1)[0]
    )
    parser.add_argument("--config", default=CONFIG)
    parser.add_argument("--state-dir", default=STATE_DIR)
    parser.add_argument(
        "--no-drain", action="store_true", help="judge and report only; change no node state"
    )
    parser.add_argument(
        "--ack-xid", action="store_true", help="accept the Xids logged so far (after a GPU reset)"
    )
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")
    parser.add_argument("--list", action="store_true", help="list the checks and exit")
    parser.add_argument(
        "--if-munge-down",
        action="store_true",
        help="cluster-health.timer's run: nothing unless munged fails (then slurmd cannot run it)",
    )
    args = parser.parse_args(argv)
    if args.list:
        for check in REGISTRY:
            say(f"{check.id:16} {check.reads}")
        return 0
    start = time.monotonic()
    try:
        cfg = load_config(args.config)
        if args.if_munge_down and not cfg["drain"]:
            return 0
        # The timer's run: nothing while munged answers, unless this program
        # drained the node for munge (then it resumes it without waiting for slurmd).
        drained_for_munge = load_json(os.path.join(args.state_dir, "state.json"), {})
        drained_for_munge = isinstance(drained_for_munge, dict) and drained_for_munge.get(
            "munge_drain"
        )
        if args.if_munge_down and not drained_for_munge and check_munge(Context(cfg))[0] == "PASS":
            return 0
    except (OSError, ValueError) as exc:
        say(f"cluster-health: {exc}", err=True)
        return 2
    os.makedirs(args.state_dir, mode=0o755, exist_ok=True)
    # One run at a time (slurmd's and one by hand): the second waits up to 10 s.
    lock = open(os.path.join(args.state_dir, "lock"), "w")  # noqa: SIM115 - held until exit
    deadline = time.monotonic() + 10
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                say("cluster-health: another run holds the lock", err=True)
                return 2
            time.sleep(0.2)
    state_path = os.path.join(args.state_dir, "state.json")
    state = load_json(state_path, {})
    if not isinstance(state, dict):
        state = {}
    cfg["_ack_xid"] = args.ack_xid
    results = run_checks(cfg, state)
    now = time.time()
    verdict = "FAIL" if any(r.status == "FAIL" for r in results) else "PASS"
    # With munged failing here, scontrol reaches slurmctld through a munged of its own.
    munge_down = any(r.id == "munge.local" and r.status == "FAIL" for r in results)
    private = PrivateMunge(cfg) if munge_down and not args.no_drain and cfg["drain"] else None
    env = private.env if private else None
    node, why = slurm_node(cfg["node"], cfg["timeout_s"], env)
    if private and private.error:
        why = f"{why} ({private.error})"
    action, reason, error = "none", "", ""
    drains = [float(t) for t in state.get("drains", [])]
    if node is None:
        error = f"scontrol show node {cfg['node']}: {why}"
    else:
        action, reason = decide(
            node,
            results,
            cfg["prefix"],
            drains,
            now,
            int(cfg["flap_drains"]),
            float(cfg["flap_window_s"]),
        )
        if args.no_drain or not cfg["drain"]:
            action = f"would {action}" if action not in ("none", "kept") else action
        else:
            error = apply(cfg["node"], action, reason, cfg["timeout_s"], env)
            if not error and action in ("drain", "update", "resume", "flapping"):
                if action == "drain":
                    drains.append(now)
                event = {"time": now, "node": cfg["node"], "event": action, "reason": reason}
                with open(os.path.join(args.state_dir, "events.jsonl"), "a") as handle:
                    handle.write(json.dumps(event, sort_keys=True) + "\n")
    if private:
        private.close()
    state["munge_drain"] = munge_down and action in ("drain", "update", "none") and bool(node)
    state["drains"] = [t for t in drains if now - t <= float(cfg["flap_window_s"])]
    # Counts since install and the last 50 run times, for the figures.
    run_s = round(time.monotonic() - start, 3)
    state["runs"] = int(state.get("runs", 0)) + 1
    state["fails"] = int(state.get("fails", 0)) + (verdict == "FAIL")
    state["run_s"] = [*list(state.get("run_s", []))[-49:], run_s]
    write_json(state_path, state)
    report = {
        "node": cfg["node"],
        "time": now,
        "verdict": verdict,
        "run_s": run_s,
        "checks": [r.as_dict() for r in results],
        "action": action,
        "reason": reason,
        "slurm_state": node["state"] if node else "",
        "error": error,
    }
    write_json(os.path.join(args.state_dir, "last.json"), report)
    if args.json:
        say(json.dumps(report, indent=1))
    else:
        for r in results:
            say(f"{r.status:4} {r.id:16} {r.message}")
        say(f"{verdict} in {report['run_s']:.2f} s; node {cfg['node']}: {action} {reason}".rstrip())
        if error:
            say(f"cluster-health: {error}", err=True)
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    raise SystemExit(main())
