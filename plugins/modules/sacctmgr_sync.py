#!/usr/bin/python
"""Ansible module: make Slurm's accounting QoS, accounts and users match a description."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: sacctmgr_sync
short_description: Idempotent QoS, accounts and user associations through sacctmgr
description:
  - Reads QoS, accounts and associations of the cluster with C(sacctmgr show),
    adds what is missing and modifies what differs. Nothing listed is removed.
  - Supports check mode (reports the sacctmgr commands it would run).
options:
  cluster:
    description: Cluster name as in slurm.conf.
    type: str
    required: true
  qos:
    description: List of {name, grp_tres_mins (e.g. gres/gpu=60000), max_wall (e.g. 1-00:00:00)}.
    type: list
    elements: dict
    default: []
  accounts:
    description: List of {name, description, organization, qos (list), users (list)}.
    type: list
    elements: dict
    default: []
"""

RETURN = r"""
commands:
  description: The sacctmgr commands run (or, in check mode, that would run).
  returned: always
  type: list
"""


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
        for user in acc.get("users", []):
            if (name, user) not in assoc:
                cmds.append(
                    [
                        "sacctmgr", "--immediate", "add", "user", user,
                        f"Account={name}", f"Cluster={cluster}",
                    ]
                )  # fmt: skip
    return cmds


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "cluster": {"type": "str", "required": True},
            "qos": {"type": "list", "elements": "dict", "default": []},
            "accounts": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params

    def show(what: str, fields: list[str], extra: list[str] | None = None) -> list[dict]:
        cmd = ["sacctmgr", "--noheader", "--parsable2", "show", what, *(extra or [])]
        cmd.append("format=" + ",".join(fields))
        rc, out, err = module.run_command(cmd)
        if rc != 0:
            module.fail_json(msg=f"{' '.join(cmd)} failed: {err.strip() or out.strip()}")
        return parse_rows(out, [f.lower() for f in fields])

    # The three reads side by side (each sacctmgr is one slurmdbd round trip).
    with ThreadPoolExecutor(max_workers=3) as pool:
        qos_job = pool.submit(show, "qos", ["Name", "GrpTRESMins", "MaxWall"])
        accounts_job = pool.submit(show, "account", ["Account", "Descr", "Org"])
        assocs_job = pool.submit(
            show, "association", ["Account", "User", "QOS"], ["where", f"cluster={p['cluster']}"]
        )
        have_qos, have_accounts, have_assocs = (
            qos_job.result(),
            accounts_job.result(),
            assocs_job.result(),
        )
    cmds = plan(p["cluster"], p["qos"], p["accounts"], have_qos, have_accounts, have_assocs)
    if not module.check_mode:
        for cmd in cmds:
            rc, out, err = module.run_command(cmd)
            if rc != 0:
                module.fail_json(
                    msg=f"{' '.join(cmd)} failed: {err.strip() or out.strip()}", commands=cmds
                )
    module.exit_json(changed=bool(cmds), commands=[" ".join(c) for c in cmds])


if __name__ == "__main__":
    main()
