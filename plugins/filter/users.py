"""The lab's users as the roles use them: folders on the shared filesystem, Slurm accounts.

Pure functions (tests/test_users.py). The inventory's cluster_users list is
the one definition of a user; these derive what the lab_users module, the
probe and the accounting role need from it.
"""

from __future__ import annotations

from collections.abc import Mapping


def _entry(user: Mapping) -> dict:
    """A user with its defaults filled in: group = name, gid = uid."""
    out = dict(user)
    out["group"] = str(user.get("group") or user["name"])
    out["gid"] = int(user.get("gid", user["uid"]))
    out["uid"] = int(user["uid"])
    return out


def lab_user_entries(users: list) -> list[dict]:
    """cluster_users with group and gid filled in, for the lab_users module."""
    return [_entry(u) for u in users or []]


def with_dir(user: Mapping, users_dir: str) -> dict:
    """A user with its folder on the shared filesystem (users_dir/name)."""
    return {**user, "dir": f"{users_dir.rstrip('/')}/{user['name']}"}


def shared_dir_specs(
    users: list,
    users_dir: str,
    dir_mode: str,
    tools_dir: str,
    check_dir: str,
    proof_dir: str,
    proof_uid: int,
    manage: bool = True,
) -> list[dict]:
    """Every folder site.yml keeps on the shared filesystem, parents first."""
    root = [
        {"path": tools_dir, "uid": 0, "gid": 0, "mode": "0755"},
        {"path": check_dir, "uid": 0, "gid": 0, "mode": "0755"},
        {"path": proof_dir, "uid": int(proof_uid), "gid": int(proof_uid), "mode": "0755"},
    ]
    if not manage:
        return root
    root.append({"path": users_dir, "uid": 0, "gid": 0, "mode": "0755"})
    for user in lab_user_entries(users):
        root.append(
            {
                "path": f"{users_dir.rstrip('/')}/{user['name']}",
                "uid": user["uid"],
                "gid": user["gid"],
                "mode": str(dir_mode),
            }
        )
    return root


def accounts_with_users(
    accounts: list, users: list, proof_user: str = "", proof_account: str = ""
) -> list[dict]:
    """slurm_controller_accounts with each account's users from cluster_users[].accounts.

    The first account of a user is its default account (sacctmgr adds the
    association in that order). The proof account holds the proof user.
    """
    out = [dict(a, users=[]) for a in accounts or []]
    by_name = {a["name"]: a for a in out}
    if proof_account and proof_account not in by_name:
        proof = {
            "name": proof_account,
            "description": "Cluster proof jobs",
            "organization": "cluster",
            "users": [],
        }
        out.append(proof)
        by_name[proof_account] = proof
    if proof_user and proof_account:
        by_name[proof_account]["users"].append(proof_user)
    for user in users or []:
        for account in user.get("accounts", []) or []:
            if account in by_name and user["name"] not in by_name[account]["users"]:
                by_name[account]["users"].append(user["name"])
    return out


class FilterModule:
    def filters(self) -> dict:
        return {
            "lab_user_entries": lab_user_entries,
            "with_dir": with_dir,
            "shared_dir_specs": shared_dir_specs,
            "accounts_with_users": accounts_with_users,
        }
