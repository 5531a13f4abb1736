#!/usr/bin/python
"""Ansible module: the lab's users and groups on one node, with one identity everywhere."""

from __future__ import annotations

DOCUMENTATION = r"""
module: lab_users
short_description: Create the lab's users and groups with fixed uids and gids, or only check them
description:
  - Reads the node's passwd and group databases first and refuses, before it
    changes anything, a name or id that is already taken by someone else
    (naming the node and both identities).
  - Then creates the missing groups and users (useradd -M, the home on the
    shared filesystem) and adds missing supplementary groups. Never deletes or
    renames a user or a group, never changes a uid.
  - >-
    With O(manage=false) (users come from LDAP/SSSD) nothing is created - a
    missing user is an error, as is a conflict.
  - With O(make_dirs=true) (one node of the cluster) it also makes each user's
    folder on the shared filesystem below O(home_root) (owner, group and
    O(dir_mode)), refusing links and folders someone else made first, and adds
    the user's SSH public keys to its authorized_keys, as the user itself.
options:
  users:
    description: "[{name, uid, group, gid, groups, comment, shell, ssh_keys}]"
    type: list
    elements: dict
    required: true
  manage: {description: Create what is missing (false - only check)., type: bool, default: true}
  shared_root: {description: The shared mount point., type: path, required: true}
  home_root:
    description: Folder of the users' folders, below shared_root.
    type: path
    required: true
  dir_mode: {description: Mode of each user's folder., type: str, default: "0700"}
  make_dirs:
    description: Make the folders and write the keys on this node.
    type: bool
    default: false
  extra_users:
    description: >-
      Accounts created even with O(manage=false) (the proof account), each
      with a C(home) below a folder of root's and an optional C(dir_mode).
    type: list
    elements: dict
    default: []
author:
  - slurm-cluster-in-a-box contributors (@gpulab)
"""

EXAMPLES = r"""
- name: The lab's users on every node, with one uid and gid everywhere
  gpulab.slurm_cluster.lab_users:
    users:
      - name: alice
        uid: 2001
        group: vision
        gid: 3001
        groups: [gpu]
        ssh_keys: ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI... alice@laptop"]
    shared_root: /shared
    home_root: /shared/home
    make_dirs: "{{ inventory_hostname == groups['slurm_controller'] | first }}"

- name: Users come from LDAP/SSSD - only check that they resolve to those ids
  gpulab.slurm_cluster.lab_users:
    users: [{name: alice, uid: 2001, group: vision, gid: 3001}]
    manage: false
    shared_root: /shared
    home_root: /shared/home
"""

RETURN = r"""
created:
  description: Users created on this node.
  returned: always
  type: list
  elements: str
  sample: [alice]
groups_created:
  description: Groups created on this node.
  returned: always
  type: list
  elements: str
  sample: [vision]
dirs:
  description: The users' folders on the shared filesystem, each with whether it changed.
  returned: always
  type: dict
  sample: {/shared/home/alice: true}
keys_added:
  description: Users whose authorized_keys gained a key.
  returned: always
  type: list
  elements: str
  sample: [alice]
"""

import json
import os
import socket
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.identities import (
    plan_identities,
    read_identities,
    refusals,
)
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.safe_fs import (
    UnsafePath,
    ensure_dir,
    open_trusted,
    parts_below,
)

KEYS_SNIPPET = r"""
import json, os, sys
keys = json.loads(sys.argv[1])
home = sys.argv[2]
os.chdir(home)
os.makedirs(".ssh", mode=0o700, exist_ok=True)
path = os.path.join(".ssh", "authorized_keys")
try:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd) as f:
        have = f.read()
except FileNotFoundError:
    have = ""
lines = set(have.splitlines())
missing = [k for k in keys if k not in lines]
if missing:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "a") as f:
        if have and not have.endswith("\n"):
            f.write("\n")
        f.write("".join(k + "\n" for k in missing))
print(len(missing))
"""


KEYS_ARGV = ["/usr/bin/python3", "-I", "-c", KEYS_SNIPPET]


def run(module: AnsibleModule, argv: list[str]) -> None:
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(msg=f"{' '.join(argv)} failed: {(err or out).strip()}", rc=rc)


def user_dirs(p: dict, check_mode: bool) -> dict[str, bool]:
    root, home_root = p["shared_root"], p["home_root"]
    mode = int(p["dir_mode"], 8)
    parts = parts_below(root, home_root)
    out: dict[str, bool] = {}
    # The folder of the users' folders: root's own, made level by level.
    for i in range(len(parts)):
        parent = os.path.join(root, *parts[:i])
        fd = open_trusted(root, parent)
        try:
            changed, child = ensure_dir(
                fd, parts[i], os.path.join(parent, parts[i]), 0, 0, 0o755, check_mode
            )
        finally:
            os.close(fd)
        if child is not None:
            os.close(child)
        if changed:
            out[os.path.join(parent, parts[i])] = True
    if check_mode and out:
        return out
    for user in p["users"] + p["extra_users"]:
        uid, gid = int(user["uid"]), int(user.get("gid", user["uid"]))
        path = home_of(p, user)
        fd = open_trusted(root, os.path.dirname(path))
        try:
            dir_mode = int(str(user.get("dir_mode") or "0"), 8) or mode
            changed, child = ensure_dir(
                fd, os.path.basename(path), path, uid, gid, dir_mode, check_mode
            )
        finally:
            os.close(fd)
        if child is not None:
            os.close(child)
        out[path] = changed
    return out


def home_of(p: dict, user: dict) -> str:
    """A user's folder on the shared filesystem: its `home`, else home_root/name."""
    return os.path.normpath(user.get("home") or os.path.join(p["home_root"], str(user["name"])))


def add_keys(module: AnsibleModule, user: dict, home: str) -> bool:
    """Append missing keys to ~/.ssh/authorized_keys, as the user (root never enters the folder)."""
    keys = [str(k).strip() for k in user.get("ssh_keys", []) or [] if str(k).strip()]
    if not keys:
        return False
    uid, gid = int(user["uid"]), int(user.get("gid", user["uid"]))
    # Isolated (-I): no user site, no PYTHON* variables, not even a .pth file
    # the user left in ~/.local runs on every site.yml.
    proc = subprocess.run(
        [*KEYS_ARGV, json.dumps(keys), home],
        user=uid,
        group=gid,
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        cwd="/",
    )
    if proc.returncode != 0:
        module.fail_json(msg=f"SSH keys of {user['name']} in {home}: {proc.stderr.strip()}")
    return proc.stdout.strip() not in ("", "0")


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "users": {"type": "list", "elements": "dict", "required": True},
            "manage": {"type": "bool", "default": True},
            "shared_root": {"type": "path", "required": True},
            "home_root": {"type": "path", "required": True},
            "dir_mode": {"type": "str", "default": "0700"},
            "make_dirs": {"type": "bool", "default": False},
            "extra_users": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    host = socket.gethostname().split(".")[0]
    users = p["users"] + p["extra_users"]
    found = read_identities(users)
    plan = plan_identities(users, found, host)
    extra = {str(u["name"]) for u in p["extra_users"]}
    problems = refusals(plan, host, p["manage"], extra)
    if not p["manage"]:
        plan["users"] = [u for u in plan["users"] if str(u["name"]) in extra]
        wanted = {str(u.get("group") or u["name"]) for u in plan["users"]}
        plan["groups"] = [g for g in plan["groups"] if g["name"] in wanted]
        plan["add_groups"] = {n: g for n, g in plan["add_groups"].items() if n in extra}
    if problems:
        module.fail_json(msg=" | ".join(problems), problems=problems)
    created, groups_created = [], []
    changed = False
    if plan["groups"] or plan["users"] or plan["add_groups"]:
        for group in plan["groups"]:
            if not module.check_mode:
                run(module, ["groupadd", "-g", str(group["gid"]), str(group["name"])])
            groups_created.append(group["name"])
        for user in plan["users"]:
            name = str(user["name"])
            argv = [
                "useradd",
                "--uid",
                str(int(user["uid"])),
                "--gid",
                str(int(user.get("gid", user["uid"]))),
                "--no-create-home",
                "--home-dir",
                home_of(p, user),
                "--shell",
                str(user.get("shell") or "/bin/bash"),
            ]
            if user.get("groups"):
                argv += ["--groups", ",".join(map(str, user["groups"]))]
            if user.get("comment"):
                argv += ["--comment", str(user["comment"])]
            if not module.check_mode:
                run(module, [*argv, name])
            created.append(name)
        for name, extra in plan["add_groups"].items():
            if not module.check_mode:
                run(module, ["usermod", "--append", "--groups", ",".join(extra), name])
            changed = True
    dirs: dict[str, bool] = {}
    keys_added: list[str] = []
    if p["make_dirs"]:
        try:
            dirs = user_dirs(p, module.check_mode)
        except (UnsafePath, OSError) as exc:
            module.fail_json(msg=f"{host}: the users' folders on the shared filesystem: {exc}")
        if not module.check_mode:
            for user in users:
                if add_keys(module, user, home_of(p, user)):
                    keys_added.append(str(user["name"]))
    changed = changed or bool(created or groups_created or keys_added or any(dirs.values()))
    module.exit_json(
        changed=changed,
        created=created,
        groups_created=groups_created,
        dirs=dirs,
        keys_added=keys_added,
    )


if __name__ == "__main__":
    main()
