"""The lab's users: one identity on every node, their folders, the proof account,
and a user made by hand with another uid named by the doctor and refused by site.yml."""

from __future__ import annotations

import re
import time

import pytest
from conftest import host

NODES = ("ctl", "node1", "node2")
# inventory/local/group_vars/slurm_cluster/users.yml and the role cluster's defaults.
USERS = {
    "alice": "alice:x:2001:2000::/shared/home/alice:/bin/bash",
    "bob": "bob:x:2002:2000::/shared/home/bob:/bin/bash",
    "carol": "carol:x:2003:2000::/shared/home/carol:/bin/bash",
    "clusterproof": (
        "clusterproof:x:59000:59000:Cluster proof jobs (gpulab.slurm_cluster):"
        "/shared/.cluster/runs:/bin/bash"
    ),
}


@pytest.mark.parametrize("node", NODES)
def test_each_user_has_one_identity_on_every_node(node: str) -> None:
    h = host(node)
    for name, line in USERS.items():
        assert h.check_output(f"getent passwd {name}") == line
    assert h.check_output("getent group lab") == "lab:x:2000:"
    assert "video" in h.check_output("id -nG carol").split()


def test_each_user_has_its_own_folder_and_root_keeps_its_own() -> None:
    ctl = host("ctl")
    for name in ("alice", "bob", "carol"):
        folder = ctl.file(f"/shared/home/{name}")
        assert (folder.is_directory, folder.user, folder.group, folder.mode) == (
            True,
            name,
            "lab",
            0o700,
        )
    for path in ("/shared/.cluster", "/shared/.cluster/smoke", "/shared/home"):
        folder = ctl.file(path)
        assert (folder.is_directory, folder.is_symlink, folder.user, folder.mode) == (
            True,
            False,
            "root",
            0o755,
        ), path
    runs = ctl.file("/shared/.cluster/runs")
    assert (runs.user, runs.group, runs.mode) == ("clusterproof", "clusterproof", 0o755)


def test_accounting_has_the_users_from_the_one_list() -> None:
    out = host("ctl").check_output(
        "sacctmgr --noheader --parsable2 show association where cluster=local format=Account,User"
    )
    pairs = set(out.splitlines())
    assert {"lab|alice", "lab|bob", "lab|carol", "proof|clusterproof"} <= pairs


def test_a_user_made_by_hand_with_another_uid_is_named_then_refused(run_playbook) -> None:
    node2 = host("node2")
    # What a machine set up by hand looks like: alice exists with another uid.
    node2.check_output("userdel alice && useradd -u 2102 -g lab -M -d /shared/home/alice alice")
    try:
        start = time.monotonic()
        doctor = run_playbook("doctor.yml")
        named_after = time.monotonic() - start
        out = " ".join((doctor.stdout + doctor.stderr).split())
        assert doctor.returncode != 0, out[-3000:]
        named = re.search(
            r"node2 users: alice is uid 2102 gid 2000 here, expected uid 2001 gid 2000 "
            r"\(as on ([a-z0-9, ]+)\)",
            out,
        )
        assert named, out[-3000:]
        # The other hosts, in the play's host order (which the inventory's files decide).
        assert sorted(named[1].split(", ")) == ["ctl", "login", "node1"], named[0]
        print(f"doctor named node2 users (alice 2102 vs 2001) {named_after:.1f} s after its start")

        site = run_playbook("site.yml")
        out = " ".join((site.stdout + site.stderr).split())
        assert site.returncode != 0, out[-3000:]
        assert "node2: user alice has uid 2102 here, the inventory gives uid 2001" in out
        # Refused by the probe, before any role ran: nothing changed anywhere.
        assert "Probe the node (packages, units, files, hardware)" in out
        assert "Users and groups, one identity on every node" not in out
    finally:
        node2.run("userdel alice")
    healed = run_playbook("site.yml")
    assert healed.returncode == 0, healed.stdout[-3000:] + healed.stderr
    assert node2.check_output("getent passwd alice") == USERS["alice"]
