"""Planning in the sacctmgr_sync module: what to add, what to modify, nothing twice."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "collections"))
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils import sacctmgr as m

WANT_QOS = [{"name": "gpu-hours", "grp_tres_mins": "gres/gpu=6000", "max_wall": "1-00:00:00"}]
WANT_ACCOUNTS = [
    {
        "name": "vision",
        "description": "Vision group",
        "organization": "lab",
        "qos": ["normal", "gpu-hours"],
        "users": ["alice", "bob"],
    }
]


def test_parse_rows() -> None:
    rows = m.parse_rows("normal||\ngpu-hours|gres/gpu=6000|1-00:00:00\n", ["name", "a", "b"])
    assert rows == [
        {"name": "normal", "a": "", "b": ""},
        {"name": "gpu-hours", "a": "gres/gpu=6000", "b": "1-00:00:00"},
    ]


def test_empty_database_gets_everything() -> None:
    cmds = m.plan("local", WANT_QOS, WANT_ACCOUNTS, [{"name": "normal"}], [], [])
    assert cmds == [
        ["sacctmgr", "--immediate", "add", "qos", "gpu-hours",
         "GrpTRESMins=gres/gpu=6000", "MaxWall=1-00:00:00"],
        ["sacctmgr", "--immediate", "add", "account", "vision", "Cluster=local",
         "Description=Vision group", "Organization=lab", "QOS=gpu-hours,normal"],
        ["sacctmgr", "--immediate", "add", "user", "alice,bob", "Account=vision", "Cluster=local"],
    ]  # fmt: skip


HAVE_QOS = [
    {"name": "normal", "grptresmins": "", "maxwall": ""},
    {"name": "gpu-hours", "grptresmins": "gres/gpu=6000", "maxwall": "1-00:00:00"},
]
HAVE_ACCOUNTS = [{"account": "vision", "descr": "vision group", "org": "lab"}]
HAVE_ASSOCS = [
    {"account": "vision", "user": "", "qos": "gpu-hours,normal"},
    {"account": "vision", "user": "alice", "qos": "gpu-hours,normal"},
    {"account": "vision", "user": "bob", "qos": "gpu-hours,normal"},
]


def test_matching_database_needs_nothing() -> None:
    assert m.plan("local", WANT_QOS, WANT_ACCOUNTS, HAVE_QOS, HAVE_ACCOUNTS, HAVE_ASSOCS) == []


def test_changed_limit_and_new_user_are_modified_and_added() -> None:
    want_qos = [dict(WANT_QOS[0], grp_tres_mins="gres/gpu=12000")]
    want_acc = [dict(WANT_ACCOUNTS[0], users=["alice", "bob", "carol"])]
    cmds = m.plan("local", want_qos, want_acc, HAVE_QOS, HAVE_ACCOUNTS, HAVE_ASSOCS)
    assert cmds == [
        ["sacctmgr", "--immediate", "modify", "qos", "where", "Name=gpu-hours", "set",
         "GrpTRESMins=gres/gpu=12000"],
        ["sacctmgr", "--immediate", "add", "user", "carol", "Account=vision", "Cluster=local"],
    ]  # fmt: skip


def test_account_qos_change_is_modified() -> None:
    want_acc = [dict(WANT_ACCOUNTS[0], qos=["normal"])]
    cmds = m.plan("local", WANT_QOS, want_acc, HAVE_QOS, HAVE_ACCOUNTS, HAVE_ASSOCS)
    assert cmds == [
        ["sacctmgr", "--immediate", "modify", "account", "where", "Name=vision", "Cluster=local",
         "set", "QOS=normal"],
    ]  # fmt: skip


# --- the same plan from the probe's reads (filter sacctmgr_plan) ----------

from accounting import PROBE_NAMES, sacctmgr_plan  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROBED = {
    "acct_qos": {"rc": 0, "stdout": "normal||\ngpu-hours|gres/gpu=6000|1-00:00:00\n"},
    "acct_accounts": {"rc": 0, "stdout": "vision|vision group|lab\n"},
    "acct_assocs": {
        "rc": 0,
        "stdout": "vision||gpu-hours,normal\nvision|alice|gpu-hours,normal\n"
        "vision|bob|gpu-hours,normal\n",
    },
}


def test_probed_tables_that_match_need_no_module_call() -> None:
    assert sacctmgr_plan(PROBED, "local", WANT_QOS, WANT_ACCOUNTS) == []


def test_probed_tables_that_differ_give_the_modules_commands() -> None:
    want_acc = [dict(WANT_ACCOUNTS[0], users=["alice", "bob", "carol"])]
    assert sacctmgr_plan(PROBED, "local", WANT_QOS, want_acc) == [
        "sacctmgr --immediate add user carol Account=vision Cluster=local"
    ]


def test_a_read_the_probe_missed_or_failed_says_nothing() -> None:
    for name in PROBE_NAMES.values():
        partial = {k: v for k, v in PROBED.items() if k != name}
        assert sacctmgr_plan(partial, "local", WANT_QOS, WANT_ACCOUNTS) is None
        failed = dict(PROBED, **{name: {"rc": 3, "stdout": ""}})  # slurmctld not active
        assert sacctmgr_plan(failed, "local", WANT_QOS, WANT_ACCOUNTS) is None
    assert sacctmgr_plan(None, "local", WANT_QOS, WANT_ACCOUNTS) is None
