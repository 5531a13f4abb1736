"""The change plan: what slurmdbd, slurmctld and each slurmd do in a run, case by case.

plugins/module_utils/change_plan.py decides; the slurm_daemons role carries it
out (filter daemon_plan, plugins/filter/change_plan.py).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.change_plan import (
    FIRST_OR_RESTART,
    Node,
    Noted,
    acceptance_drains,
    file_writes,
    key_installs,
    plan,
    unreachable,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins/filter"))
from change_plan import daemon_plan

NODES = [Node("node1", "node1"), Node("node2", "node2")]
KNOWN = ["node1|idle|none", "node2|idle|none"]


def actions(result: object) -> dict:
    d = result.to_dict() if hasattr(result, "to_dict") else result
    return {
        "slurmdbd": d["slurmdbd"]["action"],
        "slurmctld": d["slurmctld"]["action"],
        "reconfigure": d["reconfigure"]["action"],
        "slurmd": {host: a["action"] for host, a in d["slurmd"].items()},
        "outside": d["outside"]["hosts"],
    }


def test_a_rerun_that_changed_nothing_does_nothing() -> None:
    assert actions(plan(Noted(), NODES, sinfo_lines=KNOWN)) == {
        "slurmdbd": "none",
        "slurmctld": "none",
        "reconfigure": "none",
        "slurmd": {"node1": "none", "node2": "none"},
        "outside": [],
    }


def test_a_first_install_starts_everything_and_restarts_nothing_twice() -> None:
    # slurm_common notes "restart" when it wrote slurm.conf for the first time;
    # nothing runs yet and slurmctld did not answer sinfo.
    nodes = [Node("node1", "node1", unit=True, up=False), Node("node2", "node2", up=False)]
    out = plan(Noted(conf="restart"), nodes, dbd_up=False, ctl_up=False)
    assert actions(out) == {
        "slurmdbd": "start",
        "slurmctld": "restart",
        "reconfigure": "none",  # the restart hands out the files
        "slurmd": {"node1": "restart", "node2": "restart"},
        "outside": [],
    }
    assert out.slurmctld["why"] == FIRST_OR_RESTART
    assert out.slurmdbd["why"] == "not running"


def test_a_slurm_conf_key_only_a_restart_applies_restarts_every_slurmd_also_outside_limit() -> None:
    out = plan(Noted(conf="restart"), NODES[:1], outside=["node3", "node2"])
    assert actions(out)["slurmctld"] == "restart"
    assert out.slurmd["node1"] == {"action": "restart", "why": FIRST_OR_RESTART}
    assert out.outside == {
        "hosts": ["node2", "node3"],
        "why": "a slurm.conf change only a restart applies",
    }


def test_a_change_a_reconfigure_applies_reconfigures_once_and_restarts_nothing() -> None:
    out = plan(Noted(conf="reconfigure"), NODES, outside=["node3"])
    assert actions(out) == {
        "slurmdbd": "none",
        "slurmctld": "none",
        "reconfigure": "reconfigure",
        "slurmd": {"node1": "none", "node2": "none"},
        "outside": [],  # the reconfigure reaches them
    }
    assert out.reconfigure["why"] == "slurm.conf changed"


def test_a_new_node_under_limit() -> None:
    # `--limit node3`: its NodeName line is new (nodes), slurmd not running yet;
    # the others outside the play get the new slurm.conf through the reconfigure.
    out = plan(
        Noted(conf="nodes"),
        [Node("node3", "node3", unit=True, up=False)],
        sinfo_lines=KNOWN,
        outside=["node1", "node2"],
    )
    assert actions(out) == {
        "slurmdbd": "none",
        "slurmctld": "restart",
        "reconfigure": "reconfigure",
        "slurmd": {"node3": "restart"},
        "outside": [],
    }
    assert out.slurmctld["why"] == "nodes were added, removed or redefined"
    assert out.slurmd["node3"]["why"] == "slurmd now runs configless"


def test_a_gpu_change_restarts_that_slurmd_alone_and_reconfigures() -> None:
    out = plan(Noted(gres_changed=("node2",)), NODES)
    assert actions(out)["slurmd"] == {"node1": "none", "node2": "restart"}
    assert out.slurmd["node2"]["why"] == "its GPUs changed (gres.conf)"
    assert out.reconfigure == {"action": "reconfigure", "why": "gres.conf changed"}
    assert out.slurmctld["action"] == "none"


def test_a_new_munge_key_restarts_each_daemon_that_holds_it() -> None:
    nodes = [Node("node1", "node1", key=True), Node("node2", "node2", key=True)]
    out = plan(Noted(ctl_key=True, dbd_key=True), nodes)
    assert actions(out) == {
        "slurmdbd": "restart",
        "slurmctld": "restart",
        "reconfigure": "none",
        "slurmd": {"node1": "restart", "node2": "restart"},
        "outside": [],
    }
    assert {out.slurmdbd["why"], out.slurmctld["why"], out.slurmd["node1"]["why"]} == {
        "a new munge key"
    }


def test_a_slurm_release_change() -> None:
    # Before slurmctld's package moves (ctl_upgrade) it is (re)started; once the
    # package moved in this run (ctl_upgraded), it restarts.
    before = plan(Noted(ctl_upgrade=True), NODES)
    assert before.slurmctld == {"action": "start", "why": "its release changes"}
    after = plan(Noted(ctl_upgrade=True, ctl_upgraded=True), NODES)
    assert after.slurmctld == {"action": "restart", "why": "its release changed"}
    # slurmdbd was stopped for the database dump: started again, not restarted.
    assert plan(Noted(dbd_dumped=True), NODES).slurmdbd["action"] == "start"
    assert plan(Noted(dbd_packages=True, dbd_dumped=True), NODES).slurmdbd == {
        "action": "restart",
        "why": "its package changed",
    }


def test_a_failed_earlier_run_whose_fetched_copies_are_stale() -> None:
    # The earlier run wrote slurm.conf and failed before its reconfigure: the
    # controller's file is unchanged now, but slurm_common compares slurmd's
    # fetched copies with it and notes the change again ("reconfigure").
    out = plan(Noted(conf="reconfigure"), NODES, sinfo_lines=KNOWN)
    assert out.reconfigure["action"] == "reconfigure"
    # A node slurmctld cannot reach (Not responding) gets its slurmd restarted.
    down = ["node1|idle|none", "node2|down*|Not responding"]
    out = plan(Noted(), NODES, sinfo_lines=down)
    assert out.revive == ["node2"]
    assert out.slurmd["node2"] == {
        "action": "restart",
        "why": "slurmctld cannot reach it (Not responding)",
    }
    assert out.slurmd["node1"]["action"] == "none"


def test_a_cluster_new_to_accounting_restarts_slurmctld_to_register() -> None:
    out = plan(Noted(registered=True), NODES)
    assert out.slurmctld["action"] == "restart"
    assert "accounting" in out.slurmctld["why"]


def test_cgroup_conf_restarts_every_slurmd_also_outside_limit() -> None:
    out = plan(Noted(cgroup_changed=True), NODES, outside=["node3"])
    assert actions(out)["slurmd"] == {"node1": "restart", "node2": "restart"}
    assert out.reconfigure["action"] == "reconfigure"
    assert out.outside["hosts"] == ["node3"]


def test_no_slurmdbd_host_no_slurmdbd_action() -> None:
    assert plan(Noted(dbd_conf=True), NODES, dbd=False).slurmdbd["action"] == "none"


def test_an_unknown_conf_change_is_refused() -> None:
    with pytest.raises(ValueError, match="conf change 'sometimes'"):
        Noted(conf="sometimes")


def test_unreachable_nodes_are_read_once_each() -> None:
    lines = [
        "node1|idle*|none",
        "node1|idle*|none",
        "node2|down|Not responding",
        "node3|down|admin",
    ]
    assert unreachable(lines) == ["node1", "node2"]


def test_the_filter_reads_what_the_roles_noted_on_each_host() -> None:
    up = {
        "units": {
            u: {"active": "active", "enabled": "enabled"}
            for u in ("slurmctld", "slurmdbd", "slurmd")
        }
    }
    ctl = {
        "inventory_hostname": "ctl",
        "slurm_common_conf_change": "reconfigure",
        "slurm_common_gres_changed": ["node2"],
        "munge_key_install": {"changed": False},
        "slurm_dbd_conf": {"changed": True},
        "cluster_node_state": up,
    }
    node1 = {
        "inventory_hostname": "node1",
        "ansible_facts": {"hostname": "node1"},
        "munge_key_install": {"changed": True},
        "cluster_node_state": up,
    }
    node2 = {
        "inventory_hostname": "node2",
        "ansible_facts": {"hostname": "node2"},
        "slurm_common_unit": {"changed": False},
        "cluster_node_state": {},  # slurmd not found running
    }
    out = daemon_plan([node1, node2], ctl, ctl, ctl, sinfo_lines=KNOWN, registered=False)
    assert actions(out) == {
        "slurmdbd": "restart",
        "slurmctld": "none",
        "reconfigure": "reconfigure",
        "slurmd": {"node1": "restart", "node2": "restart"},
        "outside": [],
    }
    assert out["slurmd"]["node1"]["why"] == "a new munge key"
    assert out["slurmd"]["node2"]["why"] == "its GPUs changed (gres.conf)"
    # No slurmdbd host; the controller found down.
    out = daemon_plan([], {}, {"inventory_hostname": "ctl"}, {})
    assert (out["slurmdbd"]["action"], out["slurmctld"]) == (
        "none",
        {"action": "start", "why": "not running"},
    )


def test_the_notes_of_the_run_come_from_the_asking_host() -> None:
    """`--limit node3`: the controller is not in the play; slurm_common's run-once
    notes are on node3, not on the controller."""
    node3 = {
        "inventory_hostname": "node3",
        "ansible_facts": {"hostname": "node3"},
        "slurm_common_conf_change": "nodes",
        "slurm_common_unit": {"changed": True},
    }
    ctl = {"inventory_hostname": "ctl", "cluster_node_state": {}}
    out = daemon_plan([node3], node3, ctl, ctl, outside=["node1", "node2"])
    assert out["slurmctld"]["action"] == "restart"
    assert out["reconfigure"]["action"] == "reconfigure"
    assert out["outside"]["hosts"] == []


# --- The acceptance gate's drains -------------------------------------------------------

PREFIX = "acceptance:"
BEFORE = [
    "node1|idle|none",
    "node1|idle|none",  # a node in two partitions
    "node2|drain|admin: disk swap",
    "node4|drain|acceptance: gloo all_reduce failed",
]


def drains(nodes: list, changed: tuple = (), answered: bool = True) -> dict:
    return acceptance_drains(nodes, BEFORE if answered else [], changed, PREFIX, answered)


def test_a_node_slurmctld_did_not_know_is_drained_as_new() -> None:
    assert drains([Node("node1", "node1"), Node("node3", "node3")]) == {"node3": "new to slurmctld"}


def test_a_no_change_run_drains_nothing() -> None:
    assert drains([Node("node1", "node1"), Node("node4", "node4")]) == {}


def test_changed_hardware_release_or_torch_drains_a_node_with_why() -> None:
    assert drains([Node("node1", "node1")], changed=("node1",)) == {
        "node1": "its NodeName line or GPUs changed"
    }
    assert drains([Node("node4", "node4", release=True)]) == {"node4": "its slurmd changes release"}
    assert drains([Node("node1", "node1", torch=True)]) == {"node1": "its PyTorch was reinstalled"}


def test_an_admin_drain_is_never_touched() -> None:
    assert drains([Node("node2", "node2", torch=True)], changed=("node2",)) == {}


def test_every_node_waits_when_slurmctld_did_not_answer() -> None:
    got = drains([Node("node2", "node2"), Node("node1", "node1")], answered=False)
    assert list(got) == ["node1", "node2"]
    assert set(got.values()) == {"a first install (slurmctld did not answer)"}


def test_the_plan_drains_only_with_the_gate_on_and_counts_gpu_changes() -> None:
    nodes = [Node("node1", "node1"), Node("node2", "node2")]
    gpus = Noted(gres_changed=("node2",))
    assert plan(gpus, nodes, sinfo_lines=KNOWN).drain == {}  # gate off
    on = plan(gpus, nodes, sinfo_lines=KNOWN, acceptance=PREFIX)
    assert on.drain == {"node2": "its NodeName line or GPUs changed"}
    line = plan(
        Noted(conf="nodes"), nodes, sinfo_lines=KNOWN, nodes_changed=["node1"], acceptance=PREFIX
    )
    assert line.drain == {"node1": "its NodeName line or GPUs changed"}


def test_the_filter_reads_release_and_torch_from_the_hosts() -> None:
    node = {
        "inventory_hostname": "gpu7",
        "ansible_facts": {"hostname": "node7"},
        "slurm_common_upgrade": {"slurmd": {"from": "22.05"}},
        "pytorch_install": {"changed": True},
    }
    ctl = {"inventory_hostname": "ctl"}
    out = daemon_plan([node], {}, ctl, {}, sinfo_lines=["node7|idle|none"], acceptance=PREFIX)
    assert out["drain"] == {"node7": "its slurmd changes release"}


# --- the slurmd upgrade's batches -------------------------------------------


def test_the_nodes_whose_slurmd_changes_release_upgrade_in_batches() -> None:
    nodes = [Node(f"node{i}", f"node{i}", release=i != 3) for i in range(1, 7)]
    out = plan(Noted(), nodes, batch="40%")
    # 40% of the five moving nodes is 2 (rounded down, as serial does); node3 stays.
    assert out.upgrade == {
        "hosts": ["node1", "node2", "node4", "node5", "node6"],
        "batches": [["node1", "node2"], ["node4", "node5"], ["node6"]],
        "sizes": [2, 2, 1],
        "why": "its slurmd moves to another Slurm release",
    }


@pytest.mark.parametrize(
    ("batch", "sizes"),
    [("25%", [1, 1]), ("100%", [2]), (1, [1, 1]), ("5", [2]), ("1%", [1, 1])],
)
def test_a_batch_is_a_count_or_a_share_of_at_least_one_node(batch, sizes) -> None:
    nodes = [Node("node1", "node1", release=True), Node("node2", "node2", release=True)]
    assert plan(Noted(), nodes, batch=batch).upgrade["sizes"] == sizes


def test_a_run_that_moves_no_release_upgrades_nothing() -> None:
    assert plan(Noted(), NODES).upgrade == {"hosts": [], "batches": [], "sizes": [], "why": ""}


@pytest.mark.parametrize("batch", ["0", "-1", "half", "0%", ""])
def test_a_bad_batch_size_is_refused_naming_the_variable(batch) -> None:
    nodes = [Node("node1", "node1", release=True)]
    with pytest.raises(ValueError, match=r"slurm_upgrade_batch .*: give a number of nodes"):
        plan(Noted(), nodes, batch=batch)


# --- the munge key installs (role munge) ------------------------------------


def test_a_node_without_a_key_or_with_another_gets_the_key_hosts() -> None:
    checksums = {"ctl": "aaa", "node1": "aaa", "node2": "", "node3": "bbb"}
    assert key_installs(checksums, "aaa", "ctl") == {
        "node2": "no munge key",
        "node3": "another munge key than ctl's",
    }


def test_a_rerun_with_one_key_everywhere_installs_nothing() -> None:
    assert key_installs({"ctl": "aaa", "node1": "aaa"}, "aaa", "ctl") == {}


def test_under_limit_the_key_host_outside_the_play_is_still_the_source() -> None:
    assert key_installs({"node3": ""}, "aaa", "ctl") == {"node3": "no munge key"}


def test_no_plan_without_the_key_hosts_key() -> None:
    with pytest.raises(ValueError, match="the key host ctl has no munge key"):
        key_installs({"ctl": "", "node1": "aaa"}, "", "ctl")


# The files to write per node (file_writes, filter file_plan; the roles write
# only what it returns, slurm_daemons_plan.files gathers it).

CONF = "/etc/slurm/cgroup.conf"
DROPIN = "/etc/systemd/system/slurmd.service.d/configless.conf"


def found(content: str, owner: str = "root", group: str = "root", mode: str = "0644") -> dict:
    sha1 = hashlib.sha1(content.encode()).hexdigest()
    return {"exists": True, "sha1": sha1, "owner": owner, "group": group, "mode": mode}


def test_a_first_install_writes_every_file_the_probe_found_absent() -> None:
    state = {"files": {CONF: {"exists": False}, DROPIN: {"exists": False}}}
    wanted = [{"path": CONF, "content": "a"}, {"dest": DROPIN, "content": "b"}]
    assert file_writes(state, wanted) == {CONF: "absent", DROPIN: "absent"}


def test_a_rerun_that_changed_nothing_writes_nothing() -> None:
    state = {"files": {CONF: found("a"), DROPIN: found("b", mode="0600")}}
    wanted = [{"path": CONF, "content": "a"}, {"dest": DROPIN, "content": "b", "mode": "0600"}]
    assert file_writes(state, wanted) == {}


def test_other_content_owner_or_mode_is_written_again_and_says_what_differs() -> None:
    state = {"files": {CONF: found("old"), DROPIN: found("b", "slurm", "slurm", "0600")}}
    wanted = [{"path": CONF, "content": "new"}, {"dest": DROPIN, "content": "b"}]
    assert file_writes(state, wanted) == {
        CONF: "its content differs",
        DROPIN: "slurm:slurm 0600, not root:root 0644",
    }


def test_the_hash_is_the_one_ansible_takes_and_sha1_may_be_given() -> None:
    from ansible.plugins.filter.core import get_hash

    text = "NodeName=node1 Name=gpu File=/dev/nvidia0 — ü\n"
    state = {"files": {CONF: {**found(text), "sha1": get_hash(text, "sha1")}}}
    assert file_writes(state, [{"path": CONF, "content": text}]) == {}
    assert file_writes(state, [{"path": CONF, "sha1": get_hash(text, "sha1")}]) == {}


def test_a_file_made_once_is_written_only_where_absent() -> None:
    secret = "/var/lib/slurm/dbd.password"
    present = {"files": {secret: found("whatever", "slurm", "slurm", "0600")}}
    assert file_writes(present, [{"path": secret}]) == {}
    assert file_writes({"files": {secret: {"exists": False}}}, [{"path": secret}]) == {
        secret: "absent"
    }


def test_without_a_probe_or_an_unasked_path_every_file_is_planned() -> None:
    wanted = [{"path": CONF, "content": "a"}]
    assert file_writes(None, wanted) == {CONF: "no probe of this host"}
    assert file_writes({}, wanted) == {CONF: "no probe of this host"}
    assert file_writes({"files": {}}, wanted) == {CONF: "the probe did not read it"}
    # An entry the probe left without its mapping proves nothing either.
    assert file_writes({"files": {CONF: "?"}}, wanted) == {CONF: "the probe did not read it"}


def test_relative_paths_are_taken_in_the_folder_in_the_wanted_order() -> None:
    state = {"files": {"/etc/slurm/gres.conf": found("g")}}
    sha1s = [{"path": n, "sha1": "x"} for n in ("slurm.conf", "gres.conf", "cgroup.conf")]
    assert list(file_writes(state, sha1s, "/etc/slurm/")) == [
        "/etc/slurm/slurm.conf",
        "/etc/slurm/gres.conf",
        "/etc/slurm/cgroup.conf",
    ]


def test_the_plan_shows_the_files_each_role_wrote_per_host() -> None:
    ctl = {
        "inventory_hostname": "ctl",
        "slurm_common_writes": {},
        "slurm_common_ctl_writes": {"host": "ctl", "files": {CONF: "its content differs"}},
        "slurm_dbd_conf": {"changed": True, "dest": "/etc/slurm/slurmdbd.conf"},
    }
    node1 = {
        "inventory_hostname": "node1",
        "ansible_facts": {"hostname": "node1"},
        "slurm_common_writes": {DROPIN: "absent"},
        "munge_key_install": {"changed": True},
    }
    node2 = {
        "inventory_hostname": "node2",
        "ansible_facts": {"hostname": "node2"},
        "slurm_common_writes": {},
        "munge_key_install": {"changed": False},
    }
    out = daemon_plan([node1, node2], ctl, ctl, ctl, writers=[ctl, node1, node2])
    assert out["files"] == {
        "ctl": {
            CONF: "its content differs",
            "/etc/slurm/slurmdbd.conf": "not as this run renders it",
        },
        "node1": {
            DROPIN: "absent",
            "/etc/munge/munge.key": "the key host's munge key (it had none, or another)",
        },
    }
    # Under --limit node2 the controller is not in the play; its files are still shown.
    node2["slurm_common_ctl_writes"] = ctl["slurm_common_ctl_writes"]
    assert daemon_plan([node2], node2, {}, {}, writers=[node2])["files"] == {
        "ctl": {CONF: "its content differs"}
    }
    # A no-change rerun writes nothing anywhere.
    quiet = {**node2, "slurm_common_ctl_writes": {"host": "ctl", "files": {}}}
    assert daemon_plan([quiet], quiet, {}, {}, writers=[quiet])["files"] == {}


def test_a_new_slurm_jwks_restarts_each_daemon_that_holds_it_and_shows_the_file() -> None:
    """auth/slurm: a daemon loads slurm.jwks at start; a host whose key changed
    (role slurm_auth's slurm_auth_key_install) restarts its daemons, as for munge."""
    up = {
        u: {"active": "active", "enabled": "enabled"} for u in ("slurmctld", "slurmdbd", "slurmd")
    }
    ctl = {
        "inventory_hostname": "ctl",
        "slurm_auth_key_install": {"changed": True},
        "cluster_node_state": {"units": up},
    }
    node1 = {
        "inventory_hostname": "node1",
        "ansible_facts": {"hostname": "node1"},
        "slurm_auth_key_install": {"changed": True},
        "cluster_node_state": {"units": up},
    }
    node2 = {
        "inventory_hostname": "node2",
        "ansible_facts": {"hostname": "node2"},
        "slurm_auth_key_install": {"changed": False},
        "cluster_node_state": {"units": up},
    }
    out = daemon_plan([node1, node2], ctl, ctl, ctl, writers=[ctl, node1, node2])
    why = "a new slurm.jwks key (auth/slurm)"
    assert out["slurmdbd"] == {"action": "restart", "why": why}
    assert out["slurmctld"] == {"action": "restart", "why": why}
    assert out["slurmd"] == {
        "node1": {"action": "restart", "why": why},
        "node2": {"action": "none", "why": ""},
    }
    shown = "the controller's slurm.jwks (it had none, or another)"
    assert out["files"] == {
        "ctl": {"/etc/slurm/slurm.jwks": shown},
        "node1": {"/etc/slurm/slurm.jwks": shown},
    }
    moved = daemon_plan([node1], node1, ctl, {}, writers=[node1], auth_key="/etc/s/k.jwks")
    assert moved["files"] == {"node1": {"/etc/s/k.jwks": shown}}
    # Without auth/slurm nobody registers it: nothing restarts for it.
    for host in (ctl, node1, node2):
        del host["slurm_auth_key_install"]
    assert actions(daemon_plan([node1, node2], ctl, ctl, ctl)) == {
        "slurmdbd": "none",
        "slurmctld": "none",
        "reconfigure": "none",
        "slurmd": {"node1": "none", "node2": "none"},
        "outside": [],
    }
