#!/usr/bin/python
"""Ansible module: root's folders and files on the shared filesystem, never through a link."""

from __future__ import annotations

DOCUMENTATION = r"""
module: shared_tree
short_description: Folders and files of root's tools on a filesystem that users can write
description:
  - Creates folders below O(root) (the shared mount) with their owner, group and
    mode, writes small files into root's own folders and reads them back, opening
    every path component with O_NOFOLLOW relative to its parent.
  - A folder owned by root must be a real directory, owned by root, writable by
    no one else; a user's folder must belong to that user. Anything else (a
    symbolic link, a folder someone else made first) fails the task with the
    path, what is there and the fix, before root writes into it.
  - Files are written and read only in root's own folders, and only files that
    root owns are read.
options:
  root: {description: The anchor (the shared mount point)., type: path, required: true}
  dirs:
    description: >-
      Folders in order, parents first, each {path, owner, group, mode}; owner and
      group as names or numbers. The parent of each must be root's own folder.
    type: list
    elements: dict
    default: []
  write:
    description: >-
      {dir, name, content, encoding, mode, clean} - write one file into root's
      folder dir (only when it differs); encoding=base64 for a binary file
      (content is then its base64); clean=true removes the other files there.
    type: dict
  read:
    description: Root's folders whose root-owned files to return.
    type: list
    elements: path
    default: []
author:
  - slurm-cluster-in-a-box contributors (@gpulab)
"""

EXAMPLES = r"""
- name: Root's folders on the shared filesystem, and a token file in the last one
  gpulab.slurm_cluster.shared_tree:
    root: /shared
    dirs:
      - {path: /shared/.cluster, owner: 0, group: 0, mode: "0755"}
      - {path: /shared/.cluster/check, owner: 0, group: 0, mode: "0755"}
    write:
      dir: /shared/.cluster/check
      name: node1
      content: "20261202T1200"
      mode: "0644"
      clean: true

- name: Read root's files there back, on another node
  gpulab.slurm_cluster.shared_tree:
    root: /shared
    read: [/shared/.cluster/check]
  register: shared_read
"""

RETURN = r"""
dirs:
  description: Each folder of O(dirs), with whether it was made or changed.
  returned: always
  type: dict
  sample: {/shared/.cluster: false, /shared/.cluster/check: true}
read:
  description: >-
    Each folder of O(read) - C({files: {name: content}}) of the root-owned
    files there, C({error}) when the folder is not root's own, C({}) when it
    is missing.
  returned: always
  type: dict
  sample: {/shared/.cluster/check: {files: {node1: "20261202T1200"}}}
"""

import base64
import binascii
import grp
import os
import pwd
import socket

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.safe_fs import (
    UnsafePath,
    clean_files,
    ensure_dir,
    open_trusted,
    parts_below,
    read_trusted_files,
    trusted,
    write_file,
)


def _uid(value: object) -> int:
    text = str(value)
    return int(text) if text.isdigit() else pwd.getpwnam(text).pw_uid


def _gid(value: object) -> int:
    text = str(value)
    return int(text) if text.isdigit() else grp.getgrnam(text).gr_gid


def make_dirs(root: str, dirs: list[dict], check_mode: bool) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for spec in dirs:
        path = os.path.normpath(os.path.join(root, spec["path"]))
        parts = parts_below(root, path)
        if not parts:
            raise UnsafePath(f"{path} is the shared mount itself")
        parent = os.path.join(root, *parts[:-1])
        uid, gid = _uid(spec.get("owner", 0)), _gid(spec.get("group", 0))
        mode = int(str(spec.get("mode", "0755")), 8)
        if uid == 0 and mode & 0o022:
            raise UnsafePath(f"{path}: a folder of root's must not be writable by others")
        try:
            parent_fd = open_trusted(root, parent)
        except FileNotFoundError:
            if check_mode:
                out[path] = True
                continue
            raise
        try:
            changed, fd = ensure_dir(parent_fd, parts[-1], path, uid, gid, mode, check_mode)
        finally:
            os.close(parent_fd)
        if fd is not None:
            if uid == 0 and not check_mode and not trusted(os.fstat(fd)):
                os.close(fd)
                raise UnsafePath(f"{path} is not root's own folder")
            os.close(fd)
        out[path] = changed
    return out


def write(root: str, spec: dict, check_mode: bool) -> bool:
    if check_mode:
        return False
    fd = open_trusted(root, spec["dir"])
    try:
        mode = int(str(spec.get("mode", "0644")), 8)
        content = spec["content"]
        if spec.get("encoding", "text") == "base64":
            content = base64.b64decode(content, validate=True)
        changed = write_file(fd, spec["name"], content, mode)
        if spec.get("clean"):
            changed = bool(clean_files(fd, {spec["name"]})) or changed
        return changed
    finally:
        os.close(fd)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "dirs": {"type": "list", "elements": "dict", "default": []},
            "write": {"type": "dict"},
            "read": {"type": "list", "elements": "path", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    host = socket.gethostname().split(".")[0]
    try:
        dirs = make_dirs(p["root"], p["dirs"], module.check_mode)
        wrote = write(p["root"], p["write"], module.check_mode) if p["write"] else False
    except (UnsafePath, KeyError, OSError, binascii.Error) as exc:
        module.fail_json(msg=f"{host}: root will not use this path on the shared filesystem: {exc}")
    read = {path: read_trusted_files(p["root"], path) for path in p["read"]}
    module.exit_json(changed=any(dirs.values()) or wrote, dirs=dirs, read=read)


if __name__ == "__main__":
    main()
