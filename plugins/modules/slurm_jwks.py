#!/usr/bin/python
"""Ansible module: Slurm's own authentication keys (auth/slurm), the slurm.jwks file."""

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_jwks
short_description: Slurm's authentication keys (slurm.jwks), made and rotated, never shown
description:
  - Manages the JSON Web Key Set that auth/slurm and cred/slurm read (slurm.jwks, in the folder
    of slurm.conf), HS256 keys of 32 random bytes from the kernel's random source.
  - Never returns or logs a key; what it returns are the kids, the default kid (the key that
    signs) and the file's SHA-256.
  - Writes atomically (a temporary file in the same folder, fsync, rename) with the owner, group
    and mode given. Refuses a path that is a symbolic link, or whose folder is a link or writable
    by anyone but root, naming the path and the fix.
  - A rotation is C(add) (a new key that verifies but does not sign yet), C(default) (it signs),
    C(retire) (the old key goes), each written on every host and applied by scontrol reconfigure.
options:
  path:
    description: The JWKS file.
    type: path
    default: /etc/slurm/slurm.jwks
  state:
    description:
      - C(present) creates the file with one new default key when it is missing (with O(content),
        makes the file exactly that JWKS, as the controller's copy is installed on the other hosts).
      - C(add) appends a new key that is not the default; its kid is from the UTC time
        (k20261203T195801Z), unique in the file, unless O(kid) names it.
      - C(default) makes O(kid) the only default key.
      - C(retire) drops O(kid); refuses the default key and the last key.
      - C(read) changes nothing.
    type: str
    choices: [present, add, default, retire, read]
    default: present
  kid:
    description: The key of C(default) and C(retire); optional for C(add).
    type: str
  content:
    description: A whole JWKS document for C(present) (checked as Slurm reads it). Never logged.
    type: str
  owner:
    description: Owner of the file (the daemons' user).
    type: str
    default: slurm
  group:
    description: Group of the file.
    type: str
    default: slurm
  mode:
    description: Mode of the file.
    type: str
    default: "0600"
attributes:
  check_mode:
    description: Can run in check mode and report what would change without changing it.
    support: full
  diff_mode:
    description: Would return the change as a diff; never, since the change is a key.
    support: none
author:
  - slurm-cluster-in-a-box contributors (@gpulab)
"""

EXAMPLES = r"""
- name: Make the key once on the controller
  gpulab.slurm_cluster.slurm_jwks:
    path: /etc/slurm/slurm.jwks
    state: present

- name: First step of a rotation - a new key that does not sign yet
  gpulab.slurm_cluster.slurm_jwks:
    state: add
  register: added

- name: Second step - the new key signs
  gpulab.slurm_cluster.slurm_jwks:
    state: default
    kid: "{{ added.added_kid }}"

- name: Install the controller's copy on a node
  gpulab.slurm_cluster.slurm_jwks:
    state: present
    content: "{{ ctl_jwks.content | b64decode }}"
  no_log: true
"""

RETURN = r"""
exists:
  description: Whether the file exists after the task (in check mode, would exist).
  type: bool
  returned: always
kids:
  description: The kids of the file's keys, oldest first.
  type: list
  elements: str
  returned: always
  sample: [k20261201T080000Z, k20261203T195801Z]
default_kid:
  description: The kid of the key that signs; empty without a file.
  type: str
  returned: always
added_kid:
  description: The kid that C(add) or C(present) made; empty otherwise.
  type: str
  returned: always
sha256:
  description: SHA-256 of the file's bytes after the task; empty without a file.
  type: str
  returned: always
owner_ok:
  description: >-
    Whether the file has the O(owner), O(group) and O(mode) given after the task (in check mode,
    would have); with C(read), as found (false without a file). site.yml installs the controller's
    copy where a host's differs in content or in this.
  type: bool
  returned: always
reached:
  description: >-
    The step of a rotation the file shows - empty (one key), C(add) (the newest key does not
    sign yet) or C(default) (the newest signs, an older key remains).
  type: str
  returned: always
"""

import grp
import os
import pwd
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils import jwks

MAX_SIZE = 1 << 20
# The only user who may own the key's folder (the tests run as another).
TRUSTED_UID = 0


class UnsafeJwks(Exception):
    """A path this module will not write or read, with the fix."""


def check_place(path: str) -> None:
    """Refuse a link at path, or a folder that is a link or writable by anyone but root."""
    folder = os.path.dirname(path) or "."
    try:
        st = os.lstat(folder)
    except FileNotFoundError as exc:
        raise UnsafeJwks(f"{folder} does not exist; fix: install Slurm first") from exc
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafeJwks(
            f"{folder} (the folder of {path}) is not a real directory; fix: make it one (root's)"
        )
    if st.st_mode & 0o002 or (st.st_mode & 0o020 and st.st_gid != 0) or st.st_uid != TRUSTED_UID:
        raise UnsafeJwks(
            f"{folder} (the folder of {path}) is owned by uid {st.st_uid}, gid {st.st_gid}, mode "
            f"{st.st_mode & 0o7777:04o}: someone but root could replace the key; fix: "
            f"chown root:root {folder}; chmod 0755 {folder}"
        )
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        raise UnsafeJwks(
            f"{path} is not a regular file (a symbolic link?); fix: look at it (ls -la {path}), "
            f"move it aside (mv {path} {path}.untrusted) and run again"
        )


def read_text(path: str) -> str | None:
    """The file's text, opened without following a link; None when it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_SIZE + 1)
    if len(data) > MAX_SIZE:
        raise UnsafeJwks(f"{path} is larger than {MAX_SIZE} bytes; it is not a JWKS file")
    return data.decode("utf-8", errors="replace")


def ids(owner: str, group: str) -> tuple[int, int]:
    try:
        return pwd.getpwnam(owner).pw_uid, grp.getgrnam(group).gr_gid
    except KeyError as exc:
        raise UnsafeJwks(
            f"user {owner} or group {group} does not exist here; fix: install Slurm first"
        ) from exc


def write_atomic(path: str, text: str, uid: int, gid: int, mode: int) -> None:
    """Write text to path through a temporary file in its folder: fsync, chown, rename."""
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".slurm.jwks.", dir=folder)
    try:
        os.fchmod(fd, mode)
        os.fchown(fd, uid, gid)
        os.write(fd, text.encode())
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.rename(tmp, path)
        tmp = ""
        dirfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dirfd)
        finally:
            os.close(dirfd)
    finally:
        if fd >= 0:
            os.close(fd)
        if tmp:
            os.unlink(tmp)


def owner_differs(path: str, uid: int, gid: int, mode: int) -> bool:
    st = os.lstat(path)
    return (st.st_uid, st.st_gid, st.st_mode & 0o7777) != (uid, gid, mode)


def wanted(state: str, keys: list[dict] | None, params: dict) -> tuple[list[dict] | None, str]:
    """The keys the file should hold after the task, and the kid made (if any)."""
    kid = params.get("kid") or ""
    if state == "read":
        return keys, ""
    if state == "present":
        if params.get("content") is not None:
            return jwks.parse(params["content"], "content"), ""
        if keys is not None:
            return keys, ""
        made = kid or jwks.new_kid([])
        return [jwks.make_key(made, jwks.new_secret(os.urandom(jwks.KEY_BYTES)), True)], made
    if keys is None:
        raise jwks.JwksError(f"{params['path']} does not exist; fix: run site.yml first")
    if state == "add":
        made = kid or jwks.new_kid(keys)
        return jwks.add(keys, jwks.new_secret(os.urandom(jwks.KEY_BYTES)), made), made
    if not kid:
        raise jwks.JwksError(f"state {state} needs kid")
    if state == "default":
        return jwks.make_default(keys, kid), ""
    return jwks.retire(keys, kid), ""


def run(params: dict, check_mode: bool) -> dict:
    path = params["path"]
    if params["state"] == "present" and params.get("content") is not None:
        jwks.parse(params["content"], "content")  # a bad document is refused first
    check_place(path)
    before = read_text(path)
    keys = jwks.parse(before, path) if before is not None else None
    after, made = wanted(params["state"], keys, params)
    result = {"changed": False, "exists": after is not None, "added_kid": made}
    if after is None:
        return {
            **result,
            "kids": [],
            "default_kid": "",
            "sha256": "",
            "reached": "",
            "owner_ok": False,
        }
    # With content, the file is that text byte for byte (the controller's checksum
    # everywhere); else it stays as it is when its keys do not change.
    if params["state"] == "present" and params.get("content") is not None:
        text = params["content"]
    else:
        text = before if before is not None and after == keys else jwks.dump(after)
    shown = jwks.summary(after, text)
    result.update(shown, reached=jwks.reached(shown["kids"], shown["default_kid"]))
    mode = int(params["mode"], 8)
    if params["state"] == "read":
        try:
            uid, gid = ids(params["owner"], params["group"])
        except UnsafeJwks:  # no such user here: not as it should be
            return {**result, "owner_ok": False}
        return {
            **result,
            "owner_ok": before is not None and not owner_differs(path, uid, gid, mode),
        }
    uid, gid = ids(params["owner"], params["group"])
    result["owner_ok"] = True
    if text != before:
        result["changed"] = True
        if not check_mode:
            write_atomic(path, text, uid, gid, mode)
    elif owner_differs(path, uid, gid, mode):
        result["changed"] = True
        if not check_mode:
            os.chown(path, uid, gid, follow_symlinks=False)
            os.chmod(path, mode)
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "default": "/etc/slurm/slurm.jwks"},
            "state": {
                "type": "str",
                "default": "present",
                "choices": ["present", "add", "default", "retire", "read"],
            },
            "kid": {"type": "str"},
            "content": {"type": "str", "no_log": True},
            "owner": {"type": "str", "default": "slurm"},
            "group": {"type": "str", "default": "slurm"},
            "mode": {"type": "str", "default": "0600"},
        },
        supports_check_mode=True,
    )
    try:
        result = run(dict(module.params), module.check_mode)
    except (jwks.JwksError, UnsafeJwks, ValueError) as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"{module.params['path']}: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
