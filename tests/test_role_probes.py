"""What the roles want probed (module_utils/probe_wants.py, lookup role_probes).

Each role declares its probe in roles/<role>/meta/probe.yml; the lookup
renders them per host and node_state takes the union as ``wants``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from adhoc import run_playbook
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.probe_wants import (
    SPEC,
    WantsError,
    check,
    combine,
    union,
)

ROOT = Path(__file__).resolve().parents[1]


# --- the union, case by case ------------------------------------------------


def test_lists_join_in_order_without_repeats() -> None:
    got = union(
        [
            ("roles/a", {"units": ["munge", "slurmd"], "files": ["/etc/a"]}),
            ("roles/b", {"units": ["slurmd", "slurmctld"], "files": ["/etc/b"]}),
        ]
    )
    assert got == {"units": ["munge", "slurmd", "slurmctld"], "files": ["/etc/a", "/etc/b"]}


def test_commands_merge_by_name_and_the_same_command_twice_is_one() -> None:
    got = union(
        [
            ("roles/a", {"commands": {"sinfo": "sinfo -N", "pci": "lspci"}}),
            ("roles/b", {"commands": {"sinfo": "sinfo -N", "nvidia": "cat v"}}),
        ]
    )
    assert got == {"commands": {"sinfo": "sinfo -N", "pci": "lspci", "nvidia": "cat v"}}


def test_one_command_name_with_two_scripts_names_both_roles() -> None:
    with pytest.raises(WantsError, match=r"roles/b: commands 'sinfo' differs from the one roles/a"):
        union(
            [
                ("roles/a", {"commands": {"sinfo": "sinfo -N"}}),
                ("roles/b", {"commands": {"sinfo": "sinfo"}}),
            ]
        )


def test_a_single_value_must_agree_wherever_declared() -> None:
    same = union([("roles/a", {"shared_root": "/shared"}), ("roles/b", {"shared_root": "/shared"})])
    assert same == {"shared_root": "/shared"}
    with pytest.raises(
        WantsError, match=r"roles/b: shared_root is '/srv' here and '/shared' in roles/a"
    ):
        union([("roles/a", {"shared_root": "/shared"}), ("roles/b", {"shared_root": "/srv"})])


def test_null_asks_nothing_on_that_host() -> None:
    got = union([("roles/a", {"commands": None, "shared_list": None}), ("roles/b", None)])
    assert got == {}


@pytest.mark.parametrize(
    ("wants", "message"),
    [
        ({"unit": ["munge"]}, r"'unit' is no option of node_state \(it takes: packages, package_"),
        ({"units": "munge"}, r"'units' must be a list, got str"),
        ({"slurm_node": "yes"}, r"'slurm_node' must be a bool"),
        ({"commands": ["sinfo"]}, r"'commands' must be a dict"),
        ({"files": ["/etc/a", ""]}, r"'files' must list non-empty strings"),
        ({"masked": ["/etc/a"]}, r"'masked' must list mappings"),
        (["units"], r"a mapping of node_state's options, not list"),
    ],
)
def test_a_bad_declaration_is_named(wants, message) -> None:
    with pytest.raises(WantsError, match=message):
        check("roles/x/meta/probe.yml", wants)


def test_the_tasks_own_options_win_and_lists_are_joined() -> None:
    params = {key: spec.get("default") for key, spec in SPEC.items()}
    params.update(units=["munge"], packages=False)
    got = combine(params, {"units": ["munge", "slurmd"], "packages": True, "shared_root": "/srv"})
    assert got["units"] == ["munge", "slurmd"]
    assert got["packages"] is False  # set away from its default by the task
    assert got["shared_root"] == "/srv"  # the task left the default


# --- every role's declaration, rendered by the lookup in a real play ---------

# What playbooks/packages.yml named by hand before the roles declared it
# (default paths), per host: nothing may be lost.
BEFORE_FILES = {
    "/etc/munge/munge.key",
    "/etc/slurm/slurm.conf",
    "/etc/slurm/gres.conf",
    "/etc/slurm/cgroup.conf",
    "/etc/slurm/slurmdbd.conf",
    "/etc/slurm/slurmdbd.dbpass",
    "/run/slurm/conf/slurm.conf",
    "/run/slurm/conf/gres.conf",
    "/run/slurm/conf/cgroup.conf",
    "/etc/systemd/system/slurmd.service.d/configless.conf",
    "/usr/local/sbin/cluster-health",
    "/etc/slurm-cluster/health.json",
    "/etc/systemd/system/cluster-health.service",
    "/etc/systemd/system/cluster-health.timer",
}
BEFORE_UNITS = {"munge", "slurmd", "slurmctld", "slurmdbd", "mariadb", "cluster-health.timer"}
NODE_COMMANDS = {"hostname", "resolve", "firewall", "nvidia", "pci", "monitoring"}
CONTROLLER_COMMANDS = NODE_COMMANDS | {
    "sinfo",
    "accounting",
    "acct_qos",
    "acct_accounts",
    "acct_assocs",
}

PLAY = """
- hosts: slurm_cluster
  gather_facts: false
  roles:
    - role: gpulab.slurm_cluster.cluster
  tasks:
    - name: Keep what the roles want probed here
      ansible.builtin.copy:
        content: "{{ lookup('gpulab.slurm_cluster.role_probes') | to_json }}"
        dest: "{{ out }}/{{ inventory_hostname }}.json"
        mode: "0644"
      delegate_to: localhost
"""


def keep_play(kept: str) -> str:
    """The pytorch role's task that keeps the shared venv's path in the fact
    cache (tasks/validate.yml), as a play that keeps `kept`."""
    tasks = yaml.safe_load((ROOT / "roles/pytorch/tasks/validate.yml").read_text())
    action, name = "ansible.builtin.set_fact", "__pytorch_shared_venv_kept"
    (task,) = [t for t in tasks if name in t.get(action, {})]
    task = {**task, action: {**task[action], name: kept}}
    task.pop("when", None)
    return yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [task]}])


def render(tmp: Path, *extra: str, before: str = "") -> dict:
    """{host: what the roles want probed there}, for ctl and node1 of a small
    inventory; `before`, a play run first with the same fact cache."""
    hosts = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {
        "all": {
            "children": {
                "slurm_cluster": {
                    "vars": {
                        **hosts,
                        "cluster_name": "Lab One",
                        "cluster_users": [{"name": "ada", "uid": 2001}],
                    },
                    "children": {
                        "slurm_controller": {"hosts": {"ctl": None}},
                        "slurm_compute": {"hosts": {"node1": {"slurm_compute_gpus": 1}}},
                    },
                }
            }
        }
    }
    (tmp / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp / "play.yml").write_text(PLAY)

    def play(name: str, *args: str) -> None:
        result = run_playbook(tmp / "hosts.yml", tmp / name, *args)
        assert result.returncode == 0, result.stdout + result.stderr

    if before:
        (tmp / "before.yml").write_text(before)
        play("before.yml")
    play("play.yml", "-e", f"out={tmp}", *extra)
    return {h: json.loads((tmp / f"{h}.json").read_text()) for h in ("ctl", "node1")}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict:
    return render(tmp_path_factory.mktemp("probes"))


def test_slurms_own_key_and_its_folder_are_asked_only_with_auth_slurm(rendered, tmp_path) -> None:
    for wants in rendered.values():  # munge, the default
        assert "/etc/slurm/slurm.jwks" not in wants["files"]
        assert "/etc/slurm" not in wants.get("trusted", [])
    for host, wants in render(tmp_path, "-e", "cluster_auth_type=slurm").items():
        assert "/etc/slurm/slurm.jwks" in wants["files"], host
        assert "/etc/slurm" in wants["trusted"], host


def test_the_union_asks_all_that_packages_yml_named_by_hand(rendered) -> None:
    computes = NODE_COMMANDS | {"pytorch_versions", "pytorch_verify"}
    for host, commands in (("ctl", CONTROLLER_COMMANDS), ("node1", computes)):
        wants = rendered[host]
        assert set(wants["files"]) >= BEFORE_FILES, (host, BEFORE_FILES - set(wants["files"]))
        assert set(wants["units"]) >= BEFORE_UNITS
        assert set(wants["commands"]) == commands, host
        assert [m["path"] for m in wants["masked"]] == ["/etc/slurm/slurmdbd.conf"]
        # slurm_compute reads its sshd files on a compute node only.
        ssh = ["/etc/security/access-slurm-adopt.conf", "/etc/pam.d/sshd"]
        ssh = ssh if host == "node1" else []
        assert wants["read"] == ["/etc/hosts", *ssh, "/var/lib/slurm-cluster/acceptance-pending"]
        assert wants["shared_root"] == "/shared"
        assert wants["shared_reads"] == ["/shared/.cluster/shared-fs-check"]
        assert wants["shared_hashes"] == ["/shared/.cluster/examples"]
        assert wants["users_refuse"] is True
        assert [u["name"] for u in wants["users"]] == ["ada", "clusterproof"]
        assert set(wants) <= set(SPEC)


def test_a_shared_venv_is_probed_where_the_last_run_kept_its_path(rendered, tmp_path) -> None:
    """A shared venv's path follows every node's variant, known only after the
    probe: the probe reads the one the last run kept in the fact cache, and
    nothing (no command, nothing trusted) without it."""
    # A node's own venv (the default): probed, and its python checked.
    assert rendered["node1"]["trusted"] == ["/opt/pytorch/venv/bin/python"]
    shared = ("-e", "pytorch_venv_shared=true")
    (tmp_path / "none").mkdir()
    for host, wants in render(tmp_path / "none", *shared).items():
        assert "pytorch_versions" not in wants["commands"], host
        assert wants.get("trusted", []) == [], host
    kept = "/shared/.cluster/venvs/torch-2.13.0-cu118"
    # The last run kept it, as tasks/validate.yml does (a cacheable fact).
    (tmp_path / "kept").mkdir()
    wants = render(tmp_path / "kept", *shared, before=keep_play(kept))
    assert wants["node1"]["trusted"] == [f"{kept}/bin/python"]
    assert wants["node1"]["commands"]["pytorch_versions"][0] == f"{kept}/bin/python"
    assert wants["node1"]["commands"]["pytorch_verify"][0] == f"{kept}/bin/python"
    # Only a compute node runs torch.
    assert "pytorch_versions" not in wants["ctl"]["commands"]
    # Its folders as tasks/install.yml's shared_tree makes them: root's own, 0755.
    tree = ["/shared/.cluster", "/shared/.cluster/venvs", kept]
    for path in tree:
        assert {"path": path, "uid": 0, "gid": 0, "mode": "0755"} in wants["node1"]["shared_dirs"]
    assert kept not in [d["path"] for d in wants["ctl"]["shared_dirs"]]
    # A node's own venv asks no shared folder of the pytorch role's.
    assert "/shared/.cluster/venvs" not in [d["path"] for d in rendered["node1"]["shared_dirs"]]


def test_host_conditions_render_per_host(rendered) -> None:
    assert rendered["ctl"]["slurm_node"] is False
    assert rendered["node1"]["slurm_node"] is True
    # The users' folders are listed on the one node that makes them.
    assert ("shared_list" in rendered["ctl"]) != ("shared_list" in rendered["node1"])
    # The role's own files reach the commands (probe_role_path).
    assert rendered["node1"]["commands"]["pci"].strip()
    firewall = rendered["node1"]["commands"]["firewall"]
    assert firewall[:2] == ["sh", "-c"] and firewall[-1] == "6817,6818"
    # pytorch's read of the venv, on a compute node only, with the module's script.
    from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.venv_reqs import (
        VERSIONS_SCRIPT,
        requirement_names,
    )

    versions = rendered["node1"]["commands"]["pytorch_versions"]
    assert versions[0] == rendered["node1"]["trusted"][0] == "/opt/pytorch/venv/bin/python"
    assert versions[1:3] == ["-c", VERSIONS_SCRIPT]
    defaults = yaml.safe_load((ROOT / "roles/pytorch/defaults/main.yml").read_text())
    assert versions[3:] == requirement_names(defaults["pytorch_packages"]) == ["torch", "numpy"]
    verify = rendered["node1"]["commands"]["pytorch_verify"]
    assert verify[1:3] == ["-B", "-c"] and verify[-1] == "--no-write"
    assert "def fingerprint" in verify[3]
    assert "pytorch_versions" not in rendered["ctl"]["commands"]
    # monitoring's read: the controller's address and password stamp there,
    # the node health program's files on a compute node.
    ctl, node = (rendered[h]["commands"]["monitoring"] for h in ("ctl", "node1"))
    assert ctl[:2] == node[:2] == ["bash", "-c"]
    assert "getent ahostsv4" in ctl[2] and "--- health ---" not in ctl[2]
    assert "--- health ---" in node[2] and "getent ahostsv4" not in node[2]


def test_every_role_that_reads_the_probe_declares_what_it_reads() -> None:
    readers = {
        p.relative_to(ROOT / "roles").parts[0]
        for p in (ROOT / "roles").rglob("*.yml")
        if "cluster_node_state" in p.read_text() or "__slurm_common_probe" in p.read_text()
    }
    declared = {p.parent.parent.name for p in (ROOT / "roles").glob("*/meta/probe.yml")}
    assert readers <= declared, readers - declared
    tasks = yaml.safe_load((ROOT / "playbooks/packages.yml").read_text())[0]["tasks"]
    probe = next(
        t["gpulab.slurm_cluster.node_state"]
        for t in tasks
        if "gpulab.slurm_cluster.node_state" in t
    )
    assert set(probe) == {"wants", "package_names", "doctor"}, (
        "packages.yml names reads of its own again"
    )
    # doctor: the cluster doctor's reading, asked as that role asks it.
    assert "cluster_doctor_early_args" in probe["doctor"]
    # wants is what the lookup gathers, rendered in a set_fact before the probe;
    # package_names the roles' packages (lookup role_packages) and the daemons.
    fact = probe["wants"].strip("{} ")
    gathered = next(
        t["ansible.builtin.set_fact"]
        for t in tasks
        if fact in t.get("ansible.builtin.set_fact", {})
    )
    assert gathered[fact] == "{{ lookup('gpulab.slurm_cluster.role_probes') }}"
    declared_fact, daemons = probe["package_names"].strip("{} ").split(" + ")
    assert gathered[declared_fact] == "{{ lookup('gpulab.slurm_cluster.role_packages') }}"
    play_vars = yaml.safe_load((ROOT / "playbooks/packages.yml").read_text())[0]["vars"]
    assert play_vars[daemons] == ["slurmdbd", "slurmctld", "slurmd"]


# A role's apt gate: the packages it checks, piped into the filter.
APT_GATE = re.compile(
    r"(__\w+|\[[^\]]*\])\s*\|\s*gpulab\.slurm_cluster\.packages_missing\(cluster_packages_installed"
)


def test_the_probe_is_asked_about_every_package_a_role_checks() -> None:
    """The probe reports only the packages asked (package_names): a role's apt
    gate on one it was not asked about would install it on every rerun."""
    gates = {}
    for path in sorted((ROOT / "roles").rglob("*.yml")):
        role = path.relative_to(ROOT / "roles").parts[0]
        for subject in APT_GATE.findall(path.read_text()):
            gates.setdefault(role, set()).add(subject)
    assert {"munge", "slurm_common", "monitoring", "nfs_client", "nfs_server"} <= set(gates)
    for role, subjects in gates.items():
        asked = ""
        for name, key in (("probe.yml", "package_names"), ("packages.yml", "packages")):
            meta = ROOT / "roles" / role / "meta" / name
            if meta.is_file():
                asked += str((yaml.safe_load(meta.read_text()) or {}).get(key, ""))
        for subject in subjects:
            names = [subject] if subject.startswith("__") else yaml.safe_load(subject)
            missing = [n for n in names if n not in asked]
            assert not missing, (
                f"roles/{role} checks {subject} against the probe's packages, and neither its "
                "meta/probe.yml (package_names) nor its meta/packages.yml (packages) asks for them"
            )


def test_the_probe_runs_sacctmgr_syncs_own_reads(rendered) -> None:
    """The controller's three accounting reads are the module's own (module_utils/sacctmgr.py)."""
    from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.sacctmgr import show_argv

    sys.path.insert(0, str(ROOT / "plugins/filter"))
    from accounting import PROBE_NAMES

    for what, name in PROBE_NAMES.items():
        command = rendered["ctl"]["commands"][name]
        expected = " ".join(show_argv(what, "'lab one'"))
        assert command == f"systemctl is-active --quiet slurmctld && timeout 10 {expected}", name


def node_state(args: dict) -> dict:
    """The module node_state run here as Ansible runs it (arguments on stdin)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "collections"))
    out = subprocess.run(
        [sys.executable, str(ROOT / "plugins/modules/node_state.py")],
        input=json.dumps({"ANSIBLE_MODULE_ARGS": args}),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return json.loads(out.stdout)


def test_node_state_reads_what_the_wants_add_to_its_own(tmp_path) -> None:
    (tmp_path / "a").write_text("A")
    (tmp_path / "b").write_text("B")
    result = node_state(
        {"packages": False, "read": [str(tmp_path / "a")], "wants": {"read": [str(tmp_path / "b")]}}
    )
    assert result["state"]["read"] == {str(tmp_path / "a"): "A", str(tmp_path / "b"): "B"}


def test_node_state_names_a_wrong_want_and_reads_nothing() -> None:
    result = node_state({"packages": False, "wants": {"reads": ["/etc/hosts"]}})
    assert result["failed"] is True
    assert "wants: 'reads' is no option of node_state" in result["msg"]
    assert "state" not in result
