"""The lab's users on one node: what is there, what conflicts, what is missing.

Shared by the lab_users module (acts), node_state (reads, before site.yml
changes anything) and cluster_probe (the doctor's `users` check). Pure
functions over the node's passwd and group databases.
"""

from __future__ import annotations

import contextlib
import grp
import pwd


def read_identities(users: list[dict]) -> dict:
    """The node's entries for the names and ids that `users` want.

    {"users": {name: [uid, gid, home, shell] or None}, "uids": {uid: name},
     "groups": {name: gid or None}, "gids": {gid: name},
     "members": {name: [supplementary group names]}}
    """
    out: dict = {"users": {}, "uids": {}, "groups": {}, "gids": {}, "members": {}}
    group_names: set[str] = set()
    gids: set[int] = set()
    for user in users:
        name = str(user["name"])
        try:
            entry = pwd.getpwnam(name)
            out["users"][name] = [entry.pw_uid, entry.pw_gid, entry.pw_dir, entry.pw_shell]
        except KeyError:
            out["users"][name] = None
        with contextlib.suppress(KeyError):
            out["uids"][str(int(user["uid"]))] = pwd.getpwuid(int(user["uid"])).pw_name
        group_names.add(str(user.get("group") or name))
        group_names.update(str(g) for g in user.get("groups", []) or [])
        gids.add(int(user.get("gid", user["uid"])))
    for name in sorted(group_names):
        try:
            out["groups"][name] = grp.getgrnam(name).gr_gid
        except KeyError:
            out["groups"][name] = None
    for gid in sorted(gids):
        with contextlib.suppress(KeyError):
            out["gids"][str(gid)] = grp.getgrgid(gid).gr_name
    wanted = {str(u["name"]) for u in users}
    for entry in grp.getgrall():
        for member in entry.gr_mem:
            if member in wanted:
                out["members"].setdefault(member, []).append(entry.gr_name)
    return out


def plan_identities(users: list[dict], found: dict, host: str) -> dict:
    """{conflicts: [...], groups: [{name, gid}], users: [...], add_groups: {name: [...]}}.

    Conflicts name the node and both identities; nothing is planned for a user
    whose name, uid or groups conflict.
    """
    conflicts: list[str] = []
    new_groups: dict[str, int] = {}
    new_users: list[dict] = []
    add_groups: dict[str, list[str]] = {}
    for user in users:
        name = str(user["name"])
        uid = int(user["uid"])
        group = str(user.get("group") or name)
        gid = int(user.get("gid", uid))
        have = found["users"].get(name)
        owner = found["uids"].get(str(uid))
        bad = False
        if have is not None and have[0] != uid:
            conflicts.append(
                f"{host}: user {name} has uid {have[0]} here, the inventory gives uid {uid} "
                f"(cluster_users). Fix: make {name} uid {uid} on {host} (usermod -u {uid} {name}, "
                f"then chown its files), or give the inventory the uid every node has"
            )
            bad = True
        if owner is not None and owner != name:
            conflicts.append(
                f"{host}: uid {uid} of user {name} (cluster_users) belongs to {owner} here. "
                f"Fix: choose a free uid for {name}, or move {owner} to another uid on {host}"
            )
            bad = True
        have_gid = found["groups"].get(group)
        gid_owner = found["gids"].get(str(gid))
        if have_gid is not None and have_gid != gid:
            conflicts.append(
                f"{host}: group {group} of user {name} has gid {have_gid} here, the inventory "
                f"gives gid {gid} (cluster_users). Fix: groupmod -g {gid} {group} on {host}, "
                "or give the inventory the gid every node has"
            )
            bad = True
        if gid_owner is not None and gid_owner != group:
            conflicts.append(
                f"{host}: gid {gid} of group {group} (user {name}, cluster_users) belongs to "
                f"group {gid_owner} here. Fix: choose a free gid, or move {gid_owner} on {host}"
            )
            bad = True
        if have is not None and not bad and have[1] != gid:
            conflicts.append(
                f"{host}: user {name} has primary gid {have[1]} here, the inventory gives "
                f"{gid} ({group}). Fix: usermod -g {gid} {name} on {host}"
            )
            bad = True
        missing_extra = [
            g for g in user.get("groups", []) or [] if found["groups"].get(str(g)) is None
        ]
        primaries = {str(u.get("group") or u["name"]) for u in users}
        missing_extra = [g for g in missing_extra if str(g) not in primaries]
        if missing_extra:
            conflicts.append(
                f"{host}: groups {', '.join(map(str, missing_extra))} of user {name} "
                "(cluster_users[].groups) do not exist here. Fix: use groups that every node "
                "has (e.g. video), or a lab user's primary group"
            )
            bad = True
        if bad:
            continue
        if have_gid is None:
            new_groups[group] = gid
        if have is None:
            new_users.append(user)
        else:
            extra = sorted(
                {str(g) for g in user.get("groups", []) or []}
                - set(found["members"].get(name, []))
                - {group}
            )
            if extra:
                add_groups[name] = extra
    return {
        "conflicts": conflicts,
        "groups": [{"name": n, "gid": g} for n, g in sorted(new_groups.items())],
        "users": new_users,
        "add_groups": add_groups,
    }


def refusals(plan: dict, host: str, manage: bool, extra: list[str] | set[str]) -> list[str]:
    """Why this node cannot take the lab's users: a name or id someone else holds, or
    (users from a directory service, manage false) a user the directory does not give.

    extra: names created even with manage false (the proof account).
    """
    out = list(plan["conflicts"])
    if not manage:
        out += [
            f"{host}: user {u['name']} (cluster_users) does not exist here and "
            "cluster_users_manage is false. Fix: add it to the directory service (LDAP/SSSD) "
            "with that uid, or set cluster_users_manage: true"
            for u in plan["users"]
            if str(u["name"]) not in extra
        ]
    return out
