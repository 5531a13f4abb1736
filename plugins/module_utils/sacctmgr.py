"""What sacctmgr must add or modify in Slurm's accounting (sacctmgr_sync, sacctmgr_plan)."""

from __future__ import annotations

# The three reads a plan needs: {what: (sacctmgr show argument, fields)}.
SHOWS = {
    "qos": ("qos", ["Name", "GrpTRESMins", "MaxWall"]),
    "accounts": ("account", ["Account", "Descr", "Org"]),
    "assocs": ("association", ["Account", "User", "QOS"]),
}


def show_argv(what: str, cluster: str) -> list[str]:
    """The sacctmgr command line of one of SHOWS."""
    name, fields = SHOWS[what]
    extra = ["where", f"cluster={cluster}"] if what == "assocs" else []
    return [
        "sacctmgr", "--noheader", "--parsable2", "show", name, *extra, "format=" + ",".join(fields)
    ]  # fmt: skip


def rows_of(what: str, text: str) -> list[dict]:
    """Parsed output of show_argv(what)."""
    return parse_rows(text, [f.lower() for f in SHOWS[what][1]])


def parse_rows(text: str, fields: list[str]) -> list[dict]:
    """Rows of `sacctmgr --noheader --parsable2 show ... format=<fields>`."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = line.split("|")
        rows.append(dict(zip(fields, values + [""] * (len(fields) - len(values)), strict=True)))
    return rows


def _qos_set(q: dict) -> list[str]:
    out = []
    if q.get("grp_tres_mins"):
        out.append(f"GrpTRESMins={q['grp_tres_mins']}")
    if q.get("max_wall"):
        out.append(f"MaxWall={q['max_wall']}")
    return out


def plan(
    cluster: str,
    want_qos: list[dict],
    want_accounts: list[dict],
    have_qos: list[dict],
    have_accounts: list[dict],
    have_assocs: list[dict],
) -> list[list[str]]:
    """sacctmgr argv lists that bring the database to the wanted state."""
    cmds: list[list[str]] = []
    qos_by_name = {q["name"]: q for q in have_qos}
    for q in want_qos:
        name = q["name"]
        if name not in qos_by_name:
            cmds.append(["sacctmgr", "--immediate", "add", "qos", name, *_qos_set(q)])
            continue
        cur = qos_by_name[name]
        diff = []
        if q.get("grp_tres_mins") and cur.get("grptresmins") != q["grp_tres_mins"]:
            diff.append(f"GrpTRESMins={q['grp_tres_mins']}")
        if q.get("max_wall") and cur.get("maxwall", "").strip() != q["max_wall"].strip():
            diff.append(f"MaxWall={q['max_wall']}")
        if diff:
            cmds.append(
                ["sacctmgr", "--immediate", "modify", "qos", "where", f"Name={name}", "set", *diff]
            )

    acc_by_name = {a["account"]: a for a in have_accounts}
    assoc = {(a["account"], a["user"]): a for a in have_assocs}
    for acc in want_accounts:
        name = acc["name"]
        descr = acc.get("description", name)
        org = acc.get("organization", name)
        qos = ",".join(sorted(acc.get("qos", [])))
        if name not in acc_by_name:
            add = ["sacctmgr", "--immediate", "add", "account", name, f"Cluster={cluster}"]
            add += [f"Description={descr}", f"Organization={org}"]
            if qos:
                add.append(f"QOS={qos}")
            cmds.append(add)
        else:
            cur = acc_by_name[name]
            diff = []
            if cur.get("descr") != descr.lower() and cur.get("descr") != descr:
                diff.append(f"Description={descr}")
            if cur.get("org") != org.lower() and cur.get("org") != org:
                diff.append(f"Organization={org}")
            if diff:
                cmds.append(
                    ["sacctmgr", "--immediate", "modify", "account", "where", f"Name={name}",
                     "set", *diff]
                )  # fmt: skip
            have_qos_acc = assoc.get((name, ""), {}).get("qos", "")
            if qos and ",".join(sorted(filter(None, have_qos_acc.split(",")))) != qos:
                cmds.append(
                    [
                        "sacctmgr", "--immediate", "modify", "account", "where",
                        f"Name={name}", f"Cluster={cluster}", "set", f"QOS={qos}",
                    ]
                )  # fmt: skip
        # The account's new users in one command (sacctmgr takes a list of
        # names; each command is a slurmdbd round trip of its own).
        new_users = [user for user in acc.get("users", []) if (name, user) not in assoc]
        if new_users:
            cmds.append(
                [
                    "sacctmgr", "--immediate", "add", "user", ",".join(new_users),
                    f"Account={name}", f"Cluster={cluster}",
                ]
            )  # fmt: skip
    return cmds
