#!/usr/bin/python
"""Ansible module: several files (and their folders) of one role in one round trip."""

from __future__ import annotations

DOCUMENTATION = r"""
module: write_files
short_description: Write several files with their owner, group and mode in one round trip
description:
  - Makes the folders of O(dirs), then writes each file of O(files) whose
    content, owner, group or mode differ from what is wanted, and reports
    which paths changed (RV(changed_paths)). Ansible's C(copy) and C(template)
    pay several round trips per file (a stat, the transfer, the copy module);
    this pays one for all of them, which is most of a cold run's cost of
    writing a role's configuration.
  - A new content is written to a temporary file in the same folder, given its
    owner, group and mode, checked by the file's C(validate) command, and then
    renamed over the path, so a reader sees the old file or the new one,
    never half of one, and a file that fails its check is never put in place.
  - A path that is a symbolic link (or anything but a regular file) is
    replaced by the file, never followed. A folder of O(dirs) must be a real
    folder; anything else there fails the task, naming the path.
  - Render templates on the control machine and pass their text as C(content)
    (C(lookup('ansible.builtin.template', ...))).
  - Supports check mode (nothing written, RV(changed_paths) says what would
    change) and diff mode (one diff per changed file, none for a C(secret) one).
options:
  dirs:
    description: >-
      Folders made first, parents first, each {path, owner, group, mode}; owner
      and group are names or numbers (default root). An existing folder gets
      its owner, group and mode set.
    type: list
    elements: dict
    default: []
  files:
    description: >-
      The files, each {path, content, owner, group, mode, validate, secret}
      (C(dest) is taken for C(path), as in C(copy)).
      C(mode) is an octal string such as C("0644") and required; owner and
      group default to root. C(validate) is a command run on the new content
      before it is put in place, C(%s) standing for the temporary file's path
      (as in Ansible's C(copy)). C(secret=true) keeps the content out of the
      diff.
    type: list
    elements: dict
    default: []
author:
  - slurm-cluster-in-a-box contributors (@gpulab)
"""

EXAMPLES = r"""
- name: The collector, its unit and the exporter's arguments
  gpulab.slurm_cluster.write_files:
    dirs:
      - {path: /etc/prometheus, mode: "0755"}
    files:
      - path: /etc/default/prometheus-node-exporter
        content: "{{ lookup('ansible.builtin.template', 'prometheus-node-exporter.j2') }}"
        mode: "0644"
      - path: /etc/prometheus/web-auth.yml
        content: "{{ lookup('ansible.builtin.template', 'web-auth.yml.j2') }}"
        group: prometheus
        mode: "0640"
        secret: true
      - path: /etc/prometheus/prometheus.yml
        content: "{{ lookup('ansible.builtin.template', 'prometheus.yml.j2') }}"
        mode: "0644"
        validate: promtool check config --syntax-only %s
  register: written

- name: Restart the exporter only when its arguments changed
  ansible.builtin.systemd_service:
    name: prometheus-node-exporter
    state: restarted
  when: "'/etc/default/prometheus-node-exporter' in written.changed_paths"
"""

RETURN = r"""
changed_paths:
  description: The folders and files that changed (or would, in check mode), in order.
  returned: always
  type: list
  elements: str
"""

import grp
import os
import pwd
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule

_FILE_KEYS = {"path", "dest", "content", "owner", "group", "mode", "validate", "secret"}
_DIR_KEYS = {"path", "owner", "group", "mode"}


class Refused(Exception):
    """A spec or a path this module will not write; its text names the path and the fix."""


def ident(value, kind: str, path: str) -> int:
    """A uid or gid from a name or a number (default root)."""
    if value is None or value == "":
        return 0
    text = str(value)
    if text.isdigit():
        return int(text)
    try:
        return pwd.getpwnam(text).pw_uid if kind == "owner" else grp.getgrnam(text).gr_gid
    except KeyError:
        raise Refused(f"{path}: {kind} {text} does not exist on this node") from None


def mode_of(value, path: str) -> int:
    text = str(value or "")
    try:
        mode = int(text, 8)
    except ValueError:
        raise Refused(f'{path}: mode {text!r} is not an octal string such as "0644"') from None
    if mode > 0o7777:
        raise Refused(f"{path}: mode {text} is out of range")
    return mode


def check_spec(spec: dict, keys: set[str], what: str) -> str:
    """The spec's path; refuses unknown keys and a relative or missing path."""
    if not isinstance(spec, dict):
        raise Refused(f"each of {what} must be a dict, got {spec!r}")
    unknown = sorted(set(spec) - keys)
    path = str(spec.get("path") or spec.get("dest") or "")
    if unknown:
        raise Refused(f"{path or what}: unknown keys {', '.join(unknown)}; allowed: {sorted(keys)}")
    if not os.path.isabs(path):
        raise Refused(f"{what}: path {path!r} must be absolute")
    return os.path.normpath(path)


def dir_change(spec: dict) -> tuple[str, int, int, int, bool]:
    """(path, uid, gid, mode, changes) of one folder of O(dirs)."""
    path = check_spec(spec, _DIR_KEYS, "dirs")
    uid, gid = ident(spec.get("owner"), "owner", path), ident(spec.get("group"), "group", path)
    mode = mode_of(spec.get("mode") or "0755", path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path, uid, gid, mode, True
    if not stat.S_ISDIR(st.st_mode):
        raise Refused(f"{path} is not a folder; remove it or choose another path")
    have = (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))
    return path, uid, gid, mode, have != (uid, gid, mode)


def set_meta(path: str, uid: int, gid: int, mode: int, flags: int = 0) -> None:
    """Owner, group and mode of what `path` names, through a descriptor: never via a link."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | flags)
    try:
        os.fchown(fd, uid, gid)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def make_dir(path: str, uid: int, gid: int, mode: int) -> None:
    os.makedirs(path, mode=0o700, exist_ok=True)
    set_meta(path, uid, gid, mode, os.O_DIRECTORY)


def current(path: str) -> tuple[bytes | None, tuple[int, int, int] | None]:
    """(content, (uid, gid, mode)) of a regular file; (None, None) for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None, None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, None
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks), (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))
    finally:
        os.close(fd)


def file_change(spec: dict) -> dict:
    """What one file of O(files) needs: {path, data, uid, gid, mode, write, fix, before}."""
    path = check_spec(spec, _FILE_KEYS, "files")
    if "content" not in spec or spec["content"] is None:
        raise Refused(f"{path}: content is required")
    if "mode" not in spec:
        raise Refused(f'{path}: mode is required (an octal string such as "0644")')
    data = str(spec["content"]).encode()
    uid, gid = ident(spec.get("owner"), "owner", path), ident(spec.get("group"), "group", path)
    mode = mode_of(spec["mode"], path)
    before, meta = current(path)
    return {
        "path": path,
        "data": data,
        "uid": uid,
        "gid": gid,
        "mode": mode,
        "validate": spec.get("validate") or "",
        "secret": bool(spec.get("secret")),
        "before": before,
        "write": before != data,
        "fix": before == data and meta != (uid, gid, mode),
    }


def put(module: AnsibleModule, change: dict) -> None:
    """Write the new content beside the path, check it, rename it over the path."""
    folder = os.path.dirname(change["path"])
    if not os.path.isdir(folder):
        raise Refused(f"{change['path']}: folder {folder} does not exist; add it to dirs")
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".write_files.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(change["data"])
            handle.flush()
            os.fchown(handle.fileno(), change["uid"], change["gid"])
            os.fchmod(handle.fileno(), change["mode"])
            os.fsync(handle.fileno())
        if change["validate"]:
            if "%s" not in change["validate"]:
                raise Refused(f"{change['path']}: validate must contain %s (the file to check)")
            rc, out, err = module.run_command(change["validate"] % tmp)
            if rc != 0:
                raise Refused(
                    f"{change['path']}: the new content failed {change['validate']!r} "
                    f"(rc {rc}): {(err or out).strip()[-600:]}"
                )
        os.replace(tmp, change["path"])
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def diff_of(change: dict) -> dict:
    hidden = "(secret: not shown)\n"
    if change["secret"]:
        return {"before": hidden, "after": hidden, "after_header": change["path"]}
    before = change["before"].decode(errors="replace") if change["before"] is not None else ""
    meta = f"(owner {change['uid']}, group {change['gid']}, mode {change['mode']:04o})\n"
    return {
        "before_header": change["path"],
        "after_header": change["path"],
        "before": before if change["write"] else "",
        "after": change["data"].decode(errors="replace") if change["write"] else meta,
    }


def run(module: AnsibleModule) -> dict:
    dirs = [dir_change(spec) for spec in module.params["dirs"]]
    for path, uid, gid, mode, changes in dirs:
        if changes and not module.check_mode:
            make_dir(path, uid, gid, mode)
    files = [file_change(spec) for spec in module.params["files"]]
    seen: set[str] = set()
    for change in files:
        if change["path"] in seen:
            raise Refused(f"{change['path']} is given twice")
        seen.add(change["path"])
        if module.check_mode:
            continue
        if change["write"]:
            put(module, change)
        elif change["fix"]:
            set_meta(change["path"], change["uid"], change["gid"], change["mode"], os.O_NONBLOCK)
    changed = [d[0] for d in dirs if d[4]] + [c["path"] for c in files if c["write"] or c["fix"]]
    result = {"changed": bool(changed), "changed_paths": changed}
    if module._diff:
        result["diff"] = [diff_of(c) for c in files if c["write"] or c["fix"]]
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dirs": {"type": "list", "elements": "dict", "default": []},
            "files": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    try:
        module.exit_json(**run(module))
    except Refused as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"{exc.filename or ''}: {exc.strerror}")


if __name__ == "__main__":
    main()
