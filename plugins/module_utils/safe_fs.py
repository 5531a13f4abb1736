"""Root's file operations below a folder that ordinary users can write into.

The shared filesystem is writable by the lab's users; anything they can
create there is hostile to root (STYLE.md, rule 16). Everything here works
below an anchor (the shared mount, trusted as the admin's own setting) through
file descriptors: each path component is opened with O_NOFOLLOW relative to
its parent, so a symbolic link planted anywhere below the anchor is refused
instead of followed, and nothing is looked up twice by name.

A folder root keeps its own things in is *trusted*: a real directory, owned
by root, writable by no one else. Root writes and reads files only in trusted
folders, and reads only files that root owns. A user's folder (a lab user's
directory, the proof account's results) is created by root with that owner
and never entered by root afterwards.
"""

from __future__ import annotations

import errno
import hashlib
import os
import pwd
import stat

NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# At most this much is read of a token or state file.
MAX_READ = 65536


class UnsafePath(Exception):
    """A path root refuses to use, with the reason and the fix in the message."""


def _who(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def parts_below(anchor: str, path: str) -> list[str]:
    """The components of `path` below `anchor`; refuses a path outside it or with '..'."""
    anchor = os.path.normpath(anchor)
    full = os.path.normpath(path if os.path.isabs(path) else os.path.join(anchor, path))
    rel = os.path.relpath(full, anchor)
    if rel == ".":
        return []
    parts = rel.split(os.sep)
    if parts[0] == ".." or any(p in ("", ".", "..") for p in parts):
        raise UnsafePath(f"{path} is not below {anchor}")
    return parts


def describe(parent_fd: int, name: str, shown: str) -> str:
    """What a refused entry is, for the message: a link and its target, or its owner."""
    try:
        st = os.lstat(name, dir_fd=parent_fd)
    except OSError as exc:
        return f"{shown}: {exc.strerror}"
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(name, dir_fd=parent_fd)
        except OSError:
            target = "?"
        return f"{shown} is a symbolic link (to {target}) owned by {_who(st.st_uid)}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{shown} is not a directory (owned by {_who(st.st_uid)})"
    return f"{shown} is owned by {_who(st.st_uid)}, mode {st.st_mode & 0o7777:04o}"


def _fix(shown: str) -> str:
    return (
        f"Fix: look at what is there (ls -la {shown}), move it aside as root "
        f"(mv {shown} {shown}.untrusted) and run again; root creates it itself."
    )


def trusted(st: os.stat_result) -> bool:
    """A directory owned by root that no one else can write into."""
    return stat.S_ISDIR(st.st_mode) and st.st_uid == 0 and not st.st_mode & 0o022


def open_anchor(anchor: str) -> int:
    """The anchor (the shared mount point: the admin's setting) as a directory fd."""
    return os.open(anchor, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def open_trusted(anchor: str, path: str) -> int:
    """A directory fd of `path` where every component below `anchor` is trusted.

    Raises UnsafePath (a link, another owner, writable by others) or
    FileNotFoundError (a component is missing).
    """
    fd = open_anchor(anchor)
    shown = os.path.normpath(anchor)
    try:
        for part in parts_below(anchor, path):
            shown = os.path.join(shown, part)
            try:
                child = os.open(part, NOFOLLOW_DIR, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafePath(f"{describe(fd, part, shown)}. {_fix(shown)}") from None
                raise
            os.close(fd)
            fd = child
            if not trusted(os.fstat(fd)):
                raise UnsafePath(f"{describe_fd(fd, shown)}. {_fix(shown)}")
        return fd
    except BaseException:
        os.close(fd)
        raise


def describe_fd(fd: int, shown: str) -> str:
    st = os.fstat(fd)
    return f"{shown} is owned by {_who(st.st_uid)}, mode {st.st_mode & 0o7777:04o}"


def ensure_dir(
    parent_fd: int,
    name: str,
    shown: str,
    uid: int,
    gid: int,
    mode: int,
    check_mode: bool = False,
) -> tuple[bool, int | None]:
    """Make `name` in the trusted `parent_fd` a directory of uid:gid and `mode`.

    A folder that is there already must be a real directory of the same owner
    (root's: trusted; a user's: that user's); its group and mode are set.
    Returns (changed, fd or None in check mode when it is missing).
    """
    changed = False
    try:
        fd = os.open(name, NOFOLLOW_DIR, dir_fd=parent_fd)
    except FileNotFoundError:
        if check_mode:
            return True, None
        os.mkdir(name, 0o700, dir_fd=parent_fd)
        fd = os.open(name, NOFOLLOW_DIR, dir_fd=parent_fd)
        os.fchown(fd, uid, gid)
        changed = True
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePath(f"{describe(parent_fd, name, shown)}. {_fix(shown)}") from None
        raise
    st = os.fstat(fd)
    if st.st_uid != uid:
        os.close(fd)
        raise UnsafePath(
            f"{describe(parent_fd, name, shown)}, expected {_who(uid)}: someone else made it "
            f"before site.yml did. {_fix(shown)}"
        )
    if st.st_gid != gid:
        if not check_mode:
            os.fchown(fd, uid, gid)
        changed = True
    if st.st_mode & 0o7777 != mode:
        if not check_mode:
            os.fchmod(fd, mode)
        changed = True
    return changed, fd


def write_file(dir_fd: int, name: str, content: str | bytes, mode: int = 0o644) -> bool:
    """Write `content` to `name` in a trusted folder (atomic, never through a link)."""
    data = content.encode() if isinstance(content, str) else content
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(handle.fileno())
            same = stat.S_ISREG(st.st_mode) and st.st_uid == 0 and st.st_mode & 0o7777 == mode
            if same and handle.read() == data:
                return False
    except OSError:
        pass
    tmp = f".{name}.tmp{os.getpid()}"
    fd = os.open(
        tmp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        mode,
        dir_fd=dir_fd,
    )
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    return True


def read_file(dir_fd: int, name: str, owner: int = 0) -> str:
    """Content of a regular file `name` owned by `owner` (never through a link)."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(f"{name} is not a regular file")
        if st.st_uid != owner:
            raise UnsafePath(f"{name} is owned by {_who(st.st_uid)}, not {_who(owner)}")
        return handle.read(MAX_READ).decode(errors="replace")


def clean_files(dir_fd: int, keep: set[str]) -> list[str]:
    """Remove the regular files and links of a trusted folder except `keep`."""
    removed = []
    for entry in os.scandir(dir_fd):
        if entry.name in keep or entry.is_dir(follow_symlinks=False):
            continue
        os.unlink(entry.name, dir_fd=dir_fd)
        removed.append(entry.name)
    return sorted(removed)


def read_trusted_files(anchor: str, path: str, digest: bool = False) -> dict:
    """{name: content} of root's regular files in the trusted folder `path`
    ({name: SHA-1 of the content} with digest).

    {"error": why} when the folder is not trusted (nothing is read then),
    {} when it is missing. A file that is not root's own is skipped.
    """
    try:
        fd = open_trusted(anchor, path)
    except FileNotFoundError:
        return {}
    except (UnsafePath, OSError) as exc:
        return {"error": str(exc)}
    out: dict = {"files": {}}
    try:
        for entry in os.scandir(fd):
            if entry.name.startswith("."):
                continue
            try:
                text = read_file(fd, entry.name)
            except (UnsafePath, OSError):
                continue
            out["files"][entry.name] = (
                hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest() if digest else text
            )
    finally:
        os.close(fd)
    return out
