"""The lab's users and root's trust on the shared filesystem, without a cluster.

module_utils/identities.py (the plan against a node's passwd and group),
module_utils/safe_fs.py (root's folders below a user-writable anchor), the
users filters, the doctor's `users` check and the inventory refusals.
"""

from __future__ import annotations

import binascii
import copy
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins/filter"))
import doctor as d  # noqa: E402
import inventory_check as ic  # noqa: E402
import users as u  # noqa: E402
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils import (  # noqa: E402
    identities,
    safe_fs,
)

ALICE = {"name": "alice", "uid": 2001, "group": "lab", "gid": 2000, "accounts": ["lab"]}
BOB = {"name": "bob", "uid": 2002, "group": "lab", "gid": 2000, "accounts": ["lab"]}


def found(**over) -> dict:
    base = {
        "users": {"alice": None, "bob": None},
        "uids": {},
        "groups": {"lab": None},
        "gids": {},
        "members": {},
    }
    base.update(over)
    return base


# --- the plan on one node -------------------------------------------------------


def test_a_fresh_node_gets_the_group_and_both_users() -> None:
    plan = identities.plan_identities([ALICE, BOB], found(), "node1")
    assert plan["conflicts"] == []
    assert plan["groups"] == [{"name": "lab", "gid": 2000}]
    assert [x["name"] for x in plan["users"]] == ["alice", "bob"]


def test_a_user_with_another_uid_is_a_conflict_naming_node_and_both_uids() -> None:
    have = found(
        users={"alice": [2102, 2000, "/shared/home/alice", "/bin/bash"], "bob": None},
        uids={"2102": "alice"},
        groups={"lab": 2000},
        gids={"2000": "lab"},
    )
    plan = identities.plan_identities([ALICE, BOB], have, "node2")
    assert plan["conflicts"] == [
        "node2: user alice has uid 2102 here, the inventory gives uid 2001 (cluster_users). "
        "Fix: make alice uid 2001 on node2 (usermod -u 2001 alice, then chown its files), or "
        "give the inventory the uid every node has"
    ]
    # bob is still planned; alice is not touched.
    assert [x["name"] for x in plan["users"]] == ["bob"]


def test_a_uid_taken_by_someone_else_is_a_conflict() -> None:
    plan = identities.plan_identities([ALICE], found(uids={"2001": "mallory"}), "node1")
    assert "uid 2001 of user alice (cluster_users) belongs to mallory here" in plan["conflicts"][0]
    assert plan["users"] == []


def test_a_group_with_another_gid_is_a_conflict() -> None:
    plan = identities.plan_identities([ALICE], found(groups={"lab": 3000}), "node1")
    assert (
        "group lab of user alice has gid 3000 here, the inventory gives gid 2000"
        in (plan["conflicts"][0])
    )


def test_missing_extra_group_is_a_conflict_and_present_one_is_added() -> None:
    carol = {**ALICE, "name": "carol", "uid": 2003, "groups": ["video", "nosuch"]}
    plan = identities.plan_identities([carol], found(groups={"lab": None, "video": 44}), "n")
    assert "groups nosuch of user carol" in plan["conflicts"][0]
    have = found(
        users={"carol": [2003, 2000, "/h", "/bin/bash"]},
        uids={"2003": "carol"},
        groups={"lab": 2000, "video": 44},
        gids={"2000": "lab"},
    )
    ok = {**carol, "groups": ["video"]}
    assert identities.plan_identities([ok], have, "n")["add_groups"] == {"carol": ["video"]}


def test_read_identities_reads_this_machine() -> None:
    me = pwd.getpwuid(os.getuid())
    got = identities.read_identities([{"name": me.pw_name, "uid": me.pw_uid}])
    assert got["users"][me.pw_name][:2] == [me.pw_uid, me.pw_gid]
    assert got["uids"][str(me.pw_uid)] == me.pw_name


# --- root's folders below a folder users can write ------------------------------

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="root's folders need root")


@pytest.fixture
def anchor(tmp_path: Path) -> Path:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    return shared


@needs_root
def test_root_makes_its_folder_and_refuses_a_planted_link(anchor: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "secret").write_text("secret")
    (anchor / ".cluster").symlink_to(victim)
    fd = safe_fs.open_anchor(str(anchor))
    with pytest.raises(safe_fs.UnsafePath, match=r"\.cluster is a symbolic link \(to .*victim\)"):
        safe_fs.ensure_dir(fd, ".cluster", str(anchor / ".cluster"), 0, 0, 0o755)
    os.close(fd)
    assert sorted(p.name for p in victim.iterdir()) == ["secret"]
    (anchor / ".cluster").unlink()
    fd = safe_fs.open_anchor(str(anchor))
    changed, child = safe_fs.ensure_dir(fd, ".cluster", str(anchor / ".cluster"), 0, 0, 0o755)
    assert changed and child is not None
    assert safe_fs.write_file(child, "token", "42") is True
    assert safe_fs.write_file(child, "token", "42") is False
    wheel = bytes(range(256)) * 400  # binary, larger than one pipe buffer
    assert safe_fs.write_file(child, "pkg.whl", wheel) is True
    assert safe_fs.write_file(child, "pkg.whl", wheel) is False
    assert (anchor / ".cluster" / "pkg.whl").read_bytes() == wheel
    (anchor / ".cluster" / "pkg.whl").unlink()
    os.close(child)
    os.close(fd)
    st = (anchor / ".cluster").stat()
    assert (st.st_uid, st.st_mode & 0o7777) == (0, 0o755)
    assert safe_fs.read_trusted_files(str(anchor), str(anchor / ".cluster")) == {
        "files": {"token": "42"}
    }


@needs_root
def test_a_folder_someone_else_made_first_is_refused(anchor: Path) -> None:
    (anchor / "home").mkdir()
    os.chown(anchor / "home", 2002, 2000)
    fd = safe_fs.open_anchor(str(anchor))
    with pytest.raises(safe_fs.UnsafePath, match=r"home is owned by uid 2002.*expected"):
        safe_fs.ensure_dir(fd, "home", str(anchor / "home"), 0, 0, 0o755)
    os.close(fd)
    # Nothing below such a folder is read either.
    assert "error" in safe_fs.read_trusted_files(str(anchor), str(anchor / "home"))


@needs_root
def test_a_link_planted_inside_roots_folder_is_not_read(anchor: Path) -> None:
    folder = anchor / "check"
    folder.mkdir(mode=0o755)
    (folder / "link").symlink_to("/etc/shadow")
    (folder / "mine").write_text("1")
    assert safe_fs.read_trusted_files(str(anchor), str(folder)) == {"files": {"mine": "1"}}
    fd = safe_fs.open_trusted(str(anchor), str(folder))
    assert safe_fs.clean_files(fd, {"mine"}) == ["link"]
    os.close(fd)
    assert Path("/etc/shadow").exists()


def test_paths_outside_the_anchor_are_refused() -> None:
    with pytest.raises(safe_fs.UnsafePath):
        safe_fs.parts_below("/shared", "/etc")
    assert safe_fs.parts_below("/shared", "/shared/.cluster/runs") == [".cluster", "runs"]


# --- the filters ----------------------------------------------------------------


def test_accounts_take_their_users_from_the_one_list() -> None:
    accounts = [{"name": "lab", "qos": ["normal"]}, {"name": "nlp"}]
    carol = {"name": "carol", "uid": 2003, "accounts": ["nlp", "lab"]}
    out = u.accounts_with_users(accounts, [ALICE, carol], "clusterproof", "proof")
    assert [(a["name"], a["users"]) for a in out] == [
        ("lab", ["alice", "carol"]),
        ("nlp", ["carol"]),
        ("proof", ["clusterproof"]),
    ]


def test_shared_dir_specs_list_roots_folders_first() -> None:
    specs = u.shared_dir_specs(
        [ALICE],
        "/shared/home",
        "0700",
        "/shared/.cluster",
        "/shared/.cluster/shared-fs-check",
        "/shared/.cluster/runs",
        59000,
    )
    assert [s["path"] for s in specs] == [
        "/shared/.cluster",
        "/shared/.cluster/shared-fs-check",
        "/shared/.cluster/runs",
        "/shared/home",
        "/shared/home/alice",
    ]
    assert specs[-1] == {"path": "/shared/home/alice", "uid": 2001, "gid": 2000, "mode": "0700"}


# --- the doctor's users check ----------------------------------------------------


def test_doctor_names_the_user_the_node_and_both_uids() -> None:
    base = {"local": {"users": {}}, "cross": {}}
    probes = {h: copy.deepcopy(base) for h in ("ctl", "node1", "node2")}
    for h in probes:
        probes[h]["local"]["users"]["alice"] = {"ids": [2001, 2000], "write": {"ok": True}}
    probes["node2"]["local"]["users"]["alice"] = {"ids": [2102, 2000], "write": {"ok": False}}
    d_ = d.Doctor(
        probes,
        {
            "controller": "ctl",
            "computes": ["node1", "node2"],
            "hosts": ["ctl", "node1", "node2"],
            "users": [ALICE],
        },
    )
    d_.lab_users()
    bad = [r for r in d_.results if r["status"] == "FAIL"]
    assert [(r["host"], r["check"]) for r in bad] == [("node2", "users")]
    assert bad[0]["evidence"] == (
        "alice is uid 2102 gid 2000 here, expected uid 2001 gid 2000 (as on ctl, node1)"
    )


# --- the inventory refusals (each a case, on the control machine) ---------------

GROUPS = {
    "all": ["ctl", "node1"],
    "slurm_cluster": ["ctl", "node1"],
    "slurm_controller": ["ctl"],
    "slurm_compute": ["node1"],
    "slurm_dbd": ["ctl"],
}
ACCOUNTS = [{"name": "lab", "qos": ["normal"]}]


def problems(**over) -> list[str]:
    hv = {
        h: {"slurm_controller_accounts": ACCOUNTS, "cluster_users": [ALICE, BOB]}
        for h in ("ctl", "node1")
    }
    for h in hv:
        hv[h].update(copy.deepcopy(over))
    return ic.inventory_problems(hv, GROUPS)


def test_the_demo_users_pass() -> None:
    assert problems() == []


@pytest.mark.parametrize(
    ("over", "expected"),
    [
        ({"cluster_users": [ALICE, {**BOB, "uid": 2001}]}, "of bob is also the uid of alice"),
        ({"cluster_users": [ALICE, {**BOB, "name": "alice"}]}, "'alice' is given twice"),
        ({"cluster_users": [{**ALICE, "name": "Alice Smith"}]}, "is not a POSIX user name"),
        ({"cluster_users": [{**ALICE, "name": "alice\n"}]}, "is not a POSIX user name"),
        ({"cluster_users": [{**ALICE, "uid": 999}]}, "uid=999 is not a whole number from 1000"),
        ({"cluster_users": [{**ALICE, "accounts": ["physics"]}]}, "names physics, not in"),
        ({"cluster_users": [{**ALICE, "uid": 59000}]}, "is also the uid of clusterproof"),
        ({"cluster_users": [ALICE, {**BOB, "gid": 2001}]}, "gives group lab gid 2001"),
        ({"cluster_users": [{**ALICE, "comment": "a:b"}]}, "holds ':' or a line break"),
        ({"cluster_users": [{**ALICE, "ssh_keys": ["ssh-ed25519 AAAA x\nmore"]}]}, "SSH public"),
        ({"cluster_users": [{**ALICE, "password": "x"}]}, "has unknown keys password"),
        (
            {"slurm_controller_accounts": [{"name": "lab", "users": ["alice"]}]},
            "names users here; a user is named once, in cluster_users",
        ),
        ({"cluster_name": "lab\n"}, "is not a name Slurm's accounting takes"),
        ({"slurm_common_partitions": [{"name": "gpu\n"}]}, "is not a partition name"),
        ({"shared_fs_path": "/shared;touch${IFS}/tmp/pwned"}, "has characters other than"),
        ({"slurm_common_extra_config": {"MaxJobCnt": 5}}, "is not a slurm.conf parameter"),
        (
            {"slurm_common_partitions": [{"name": "gpu", "nodes": ["node1", "node1"]}]},
            "names node1 twice",
        ),
    ],
)
def test_bad_users_and_values_are_refused(over: dict, expected: str) -> None:
    found_ = problems(**over)
    assert any(expected in p for p in found_), found_
    assert all("Fix:" in p for p in found_)


def test_a_host_name_with_an_underscore_and_a_stray_gpu_count_are_refused() -> None:
    groups = {
        **GROUPS,
        "all": ["ctl", "node_1", "nfs"],
        "slurm_cluster": ["ctl", "node_1"],
        "slurm_compute": ["node_1"],
    }
    hv = {"ctl": {}, "node_1": {}, "nfs": {"slurm_compute_gpus": 2}}
    found_ = ic.inventory_problems(hv, groups)
    assert any("node_1: inventory_hostname='node_1' is not a host name" in p for p in found_)
    assert any(
        "nfs: slurm_compute_gpus=2 is set on a host in no compute group" in p for p in found_
    )


# --- NFS exports: options and clients that would open the share -----------------


@pytest.mark.parametrize(
    ("export", "expected"),
    [
        (
            {"path": "/srv/nfs/shared", "options": ["rw\n/ *(rw,no_root_squash,insecure)"]},
            "is not one exports(5) option",
        ),
        ({"path": "/srv/nfs/shared", "options": ["rw,sync"]}, "is not one exports(5) option"),
        (
            {"path": "/srv/nfs/shared", "clients": ["0.0.0.0/1", "128.0.0.0/1"]},
            "would be open to every host (0.0.0.0/1, 128.0.0.0/1)",
        ),
        ({"path": "/srv/nfs/shared", "clients": ["10.0.0.0/8 *"]}, "is not a host, address"),
    ],
)
def test_nfs_exports_that_would_open_the_share_are_refused_up_front(export, expected) -> None:
    hv = {"ctl": {"nfs_server_exports": [export]}, "node1": {}}
    found_ = ic.inventory_problems(hv, {**GROUPS, "nfs_server": ["ctl"]})
    assert any(expected in p for p in found_), found_


# --- the probe's refusals and its listing of the users' folders -----------------


def test_the_probe_refuses_conflicts_and_in_directory_mode_missing_users() -> None:

    plan = {"conflicts": ["node2: user alice has uid 2102 here"], "users": [BOB, {"name": "p"}]}
    assert identities.refusals(plan, "node2", True, ["p"]) == [
        "node2: user alice has uid 2102 here"
    ]
    missing = identities.refusals({**plan, "conflicts": []}, "node2", False, ["p"])
    assert len(missing) == 1 and missing[0].startswith("node2: user bob (cluster_users) does not")


@needs_root
def test_the_users_folders_are_listed_without_following_a_link(anchor: Path) -> None:
    import node_state

    home = anchor / "home"
    home.mkdir(mode=0o755)
    (home / "alice").mkdir()
    (home / "dave").mkdir()
    assert node_state.list_trusted(str(anchor), str(home)) == ["alice", "dave"]
    home.rename(anchor / "home.real")
    (anchor / "home").symlink_to(anchor / "home.real")
    assert node_state.list_trusted(str(anchor), str(home)) == []


@needs_root
def test_shared_tree_writes_a_binary_file_from_base64(anchor: Path) -> None:
    """The smoke wheel's one task: folders, then the wheel from base64, once."""
    import base64

    from ansible_collections.gpulab.slurm_cluster.plugins.modules import shared_tree

    folder = anchor / ".cluster"
    shared_tree.make_dirs(str(anchor), [{"path": str(folder), "mode": "0755"}], False)
    wheel = bytes(range(256)) * 8
    spec = {
        "dir": str(folder),
        "name": "ddp_smoke.whl",
        "content": base64.b64encode(wheel).decode(),
        "encoding": "base64",
        "mode": "0644",
    }
    assert shared_tree.write(str(anchor), spec, False) is True
    assert shared_tree.write(str(anchor), spec, False) is False
    assert (folder / "ddp_smoke.whl").read_bytes() == wheel
    with pytest.raises(binascii.Error):
        shared_tree.write(str(anchor), {**spec, "content": "not base64!"}, False)


def test_the_keys_helper_runs_python_isolated_from_what_the_user_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A .pth file in the user's site folder does not run: the helper is python3 -I."""
    import lab_users

    assert lab_users.KEYS_ARGV[:2] == ["/usr/bin/python3", "-I"]
    home = tmp_path / "home"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "PYTHONUSERBASE": str(home / ".local")}
    site = Path(
        subprocess.run(
            ["/usr/bin/python3", "-c", "import site; print(site.getusersitepackages())"],
            env=env, capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    site.mkdir(parents=True)
    (site / "evil.pth").write_text(f"import os; open({str(tmp_path / 'ran')!r}, 'w')\n")
    done = subprocess.run(
        [*lab_users.KEYS_ARGV, '["ssh-ed25519 AAAA alice"]', str(home)],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (home / ".ssh" / "authorized_keys").read_text() == "ssh-ed25519 AAAA alice\n"
    assert not (tmp_path / "ran").exists()
    # The same helper without -I runs the user's file: the test can fail.
    plain = [a for a in lab_users.KEYS_ARGV if a != "-I"]
    subprocess.run([*plain, "[]", str(home)], env=env, capture_output=True, check=False)
    assert (tmp_path / "ran").exists()


@pytest.mark.parametrize("group", ["sudo", "root", "docker", "shadow", "munge", "clusterproof"])
def test_a_privileged_group_needs_the_users_own_opt_in(group: str) -> None:
    """sudo, root, docker, shadow, the daemons' groups or the proof account's: refused until
    the same user names it in privileged_groups."""
    alice = {**ALICE, "groups": ["video", group]}
    found = problems(cluster_users=[alice, BOB])
    assert found == [
        f"all hosts: cluster_users[0].groups=['video', '{group}'] gives alice the privileged "
        f"group {group} (root, the cluster's key or secrets, or the proof account's results). "
        f"Fix: remove it, or opt in for this user: privileged_groups: ['{group}']"
    ]
    # The opt-in is per user: alice's does not cover bob.
    alice["privileged_groups"] = [group]
    bob = {**BOB, "groups": [group]}
    found = problems(cluster_users=[alice, bob])
    assert len(found) == 1 and found[0].startswith("all hosts: cluster_users[1].groups="), found
    assert problems(cluster_users=[alice, BOB]) == []


def test_fully_qualified_host_names_are_taken_and_short_name_clashes_refused() -> None:
    fqdn = ["ctl.lab.example", "gpu01.lab.example", "gpu02.lab.example"]
    groups = {
        **GROUPS,
        "all": fqdn,
        "slurm_cluster": fqdn,
        "slurm_controller": fqdn[:1],
        "slurm_compute": fqdn[1:],
    }
    hv = {h: {} for h in fqdn}
    assert [p for p in ic.inventory_problems(hv, groups) if "inventory_hostname" in p] == []
    # Two labs' gpu01 in one inventory: one Slurm name for two nodes.
    clash = [*fqdn, "gpu01.other.example"]
    groups2 = {**groups, "all": clash, "slurm_cluster": clash, "slurm_compute": clash[1:]}
    found_ = ic.inventory_problems({h: {} for h in clash}, groups2)
    assert any(
        p.startswith(
            "gpu01.lab.example: inventory_hostname='gpu01.lab.example' has the short "
            "name gpu01, as gpu01.other.example"
        )
        and "Fix: give the hosts different short names" in p
        for p in found_
    ), found_
    # slurm_node_name settles it, and must itself be a short name.
    hv2 = {h: {} for h in clash}
    hv2["gpu01.other.example"] = {"slurm_node_name": "gpu01b"}
    assert [p for p in ic.inventory_problems(hv2, groups2) if "short name" in p] == []
    hv2["gpu01.other.example"] = {"slurm_node_name": "gpu01.b"}
    assert any(
        "slurm_node_name='gpu01.b' is not a short host name" in p
        for p in ic.inventory_problems(hv2, groups2)
    )
