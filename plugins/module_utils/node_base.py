"""What the node-local checks share: running commands, reading files and units, results.

Standard library only (the nodes import it from /usr/local/lib/slurm-cluster,
the doctor's probe from the collection).
"""

from __future__ import annotations

import errno
import grp
import hashlib
import os
import pwd
import shutil
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

CONFIGLESS_DIR = "/run/slurm/conf"

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


@dataclass
class Result:
    id: str
    status: str  # PASS, WARN, FAIL, SKIP
    message: str
    fix: str = ""
    caused_by: str = ""
    # What a reader found beyond its message (services: the units down).
    data: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        out = {"id": self.id, "status": self.status, "message": self.message, "fix": self.fix}
        if self.caused_by:
            out["caused_by"] = self.caused_by
        if self.data:
            out["data"] = self.data
        return out


@dataclass
class Context:
    cfg: dict
    cache: dict = field(default_factory=dict)
    state: dict = field(default_factory=dict)

    def once(self, key: str, make: Callable[[], object]) -> object:
        if key not in self.cache:
            self.cache[key] = make()
        return self.cache[key]


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


def open_root_dir(path: str, trusted: str = "") -> int:
    """A descriptor of root's folder `path`, each component opened without following a link.

    Every component below `trusted` (the shared filesystem's mount point,
    which may be the lab's 1777 folder, however deep it is mounted) must be
    root's own and writable by no one else; with no `trusted` (or one that
    `path` is not under) every component must be. Raises OSError naming the
    component that is a link, missing, or someone else's.
    """
    parts = [p for p in path.split("/") if p]
    base = [p for p in trusted.split("/") if p]
    start = len(base) if base and parts[: len(base)] == base else 0
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
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
            if depth >= start and (st.st_uid != 0 or st.st_mode & 0o022):
                where = "/" + "/".join(parts[: depth + 1])
                owner = owner_names(st.st_uid, st.st_gid)[0]
                raise OSError(
                    errno.EPERM,
                    f"{where} is not root's own folder (owner {owner}, mode "
                    f"{st.st_mode & 0o7777:04o})",
                )
        return fd
    except BaseException:
        os.close(fd)
        raise


def root_owned_problem(path: str, trusted: str = "") -> str:
    """'' when root may run what `path` names, else why not (naming the path and its owner).

    Every component must be root's and writable by no one else (a link root's
    own, and what it points to must pass too), except those down to and
    including `trusted` (the shared mount point, which may be the lab's 1777
    folder) when `path` is under it. A component that does not exist yet ends
    the walk: root makes it in a folder checked so far.
    """
    parts = [p for p in path.split("/") if p]
    base = [p for p in trusted.split("/") if p]
    start = len(base) if base and parts[: len(base)] == base else 0
    for depth in range(len(parts)):
        where = "/" + "/".join(parts[: depth + 1])
        try:
            st = os.lstat(where)
        except FileNotFoundError:
            return ""
        except OSError as exc:
            return f"{where}: {exc.strerror}"
        if depth < start:
            continue
        if st.st_uid != 0:
            owner = owner_names(st.st_uid, st.st_gid)[0]
            return f"{where} belongs to {owner} (uid {st.st_uid}), not root"
        if stat.S_ISLNK(st.st_mode):
            target = os.path.realpath(where)
            why = root_owned_problem(target, trusted) if target != where else ""
            if why:
                return f"{where} points to {target}: {why}"
            continue
        if st.st_mode & 0o022:
            return f"{where} is writable by others than root (mode {st.st_mode & 0o7777:04o})"
    return ""


def read_token(check_dir: str, trusted: str = "") -> str:
    """'' when the check folder holds root's token file (its name is its content), else why not.

    Root follows no link on the way, trusts no folder below `trusted` (the
    shared mount point) that is not its own, and reads only its own files there.
    """
    try:
        fd = open_root_dir(check_dir, trusted)
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
