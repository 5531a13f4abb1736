"""The packages each role installs on a host (lookup role_packages, roles/*/meta/packages.yml).

site.yml installs the missing ones in two transactions per host
(playbooks/packages.yml); each role's own apt task then finds nothing to do.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from adhoc import run_playbook
from ansible.errors import AnsibleLookupError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from ansible_collections.gpulab.slurm_cluster.plugins.lookup import role_packages

ROOT = Path(__file__).resolve().parents[1]

PLAY = """
- hosts: slurm_cluster
  gather_facts: "{{ facts | bool }}"
  roles:
    - role: gpulab.slurm_cluster.cluster
  tasks:
    - name: Keep what the roles install here
      ansible.builtin.copy:
        content: "{{ lookup('gpulab.slurm_cluster.role_packages') | to_json }}"
        dest: "{{ out }}/{{ inventory_hostname }}.json"
        mode: "0644"
      delegate_to: localhost
"""

HOSTS = ("ctl", "node1", "login")


def render(tmp: Path, *extra: str, facts: bool = True) -> dict:
    """{host: the packages the roles install there}: a controller with slurmdbd, a node, a login."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {
        "all": {
            "children": {
                "slurm_cluster": {
                    "vars": {**local, "cluster_name": "lab"},
                    "children": {
                        "slurm_controller": {"hosts": {"ctl": None}},
                        "slurm_dbd": {"hosts": {"ctl": None}},
                        "slurm_compute": {"hosts": {"node1": None}},
                        "slurm_login": {"hosts": {"login": None}},
                    },
                }
            }
        }
    }
    (tmp / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp / "play.yml").write_text(PLAY)
    result = run_playbook(
        tmp / "hosts.yml",
        tmp / "play.yml",
        "-e",
        f"out={tmp}",
        "-e",
        f"facts={facts}",
        *extra,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return {h: json.loads((tmp / f"{h}.json").read_text()) for h in HOSTS}


def os_vars() -> dict:
    """This machine's slurm_common distribution file (the tests run on a supported one)."""
    lines = Path("/etc/os-release").read_text().splitlines()
    release = dict(line.split("=", 1) for line in lines if "=" in line)
    name = release["ID"].strip('"').capitalize()
    major = release["VERSION_ID"].strip('"').split(".")[0]
    return yaml.safe_load((ROOT / f"roles/slurm_common/vars/{name}-{major}.yml").read_text())


def test_each_host_gets_what_its_roles_install(tmp_path) -> None:
    got = render(tmp_path)
    slurm = os_vars()
    client = slurm["__slurm_common_client_packages"]
    login_daemon = slurm["__slurm_common_login_daemon"]
    assert got["ctl"] == [
        "munge",
        *client,
        *slurm["__slurm_common_controller_packages"],
        "mariadb-server",
        "slurmdbd",
        "python3-pymysql",
    ]
    assert got["node1"] == [
        "munge",
        "python3-venv",
        "python3-packaging",
        *client,
        *slurm["__slurm_common_compute_packages"],
        "openssh-server",
        "libpam-slurm-adopt",
    ]
    assert got["login"] == [
        "munge",
        *client,
        *(slurm["__slurm_common_compute_packages"] if login_daemon == "slurmd" else ["sackd"]),
        "openssh-server",
    ]
    # Never the monitoring role's: site.yml's doctor runs before it (playbooks/packages.yml).
    assert not any(p.startswith("prometheus") for host in got.values() for p in host)


def test_the_inventorys_switches_leave_packages_out(tmp_path) -> None:
    got = render(tmp_path, "-e", "cluster_ssh_adopt=false", "-e", "pytorch_enabled=false")
    for package in ("openssh-server", "libpam-slurm-adopt", "python3-venv", "python3-packaging"):
        assert package not in got["node1"]
    assert "openssh-server" in got["login"]  # the login host's sshd is not the adopt switch's


def test_without_facts_slurms_packages_are_left_to_its_role(tmp_path) -> None:
    got = render(tmp_path, facts=False)
    assert got["ctl"] == ["munge", "mariadb-server", "slurmdbd", "python3-pymysql"]
    assert not any(p.startswith("slurm-") for p in got["node1"])


# --- a bad declaration is named -------------------------------------------------


@pytest.fixture
def lookup(tmp_path, monkeypatch):
    """The lookup over a roles folder of the test's own: run(declaration, role=...) -> its list.

    The lookup reads each file once per process: each call names its own role.
    """
    loader = DataLoader()
    plugin = role_packages.LookupModule(loader=loader, templar=Templar(loader=loader))
    monkeypatch.setattr(role_packages, "ROLES", tmp_path)

    def run(declaration: str | None, role: str = "r", vars_files: dict | None = None, **variables):
        folder = tmp_path / role
        (folder / "meta").mkdir(parents=True)
        (folder / "vars").mkdir()
        if declaration is not None:
            (folder / "meta/packages.yml").write_text(declaration)
        (folder / "vars/main.yml").write_text("__r_pkgs: [from-main]\n")
        for name, text in (vars_files or {}).items():
            (folder / "vars" / name).write_text(text)
        return plugin.run([role], variables=variables)[0]

    return run


def test_vars_files_load_the_first_that_exists(lookup) -> None:
    declaration = "vars_files: [Nope-1.yml, '{{ family }}.yml']\npackages: '{{ __r_pkgs }}'\n"
    found = {"Debian.yml": "__r_pkgs: [a, b]\n"}
    assert lookup(declaration, "r1", found, family="Debian") == ["a", "b"]
    # None exists: the role adds nothing, its own tasks say which distribution they lack.
    assert lookup(declaration, "r2", found, family="Plan9") == []
    assert lookup("packages: '{{ __r_pkgs }}'\n", "r3") == ["from-main"]
    assert lookup("packages: null\n", "r4") == []
    # A name from the node's facts never leaves the role's vars/ folder.
    outside = "vars_files: ['{{ name }}']\npackages: '{{ __r_pkgs }}'\n"
    assert lookup(outside, "r5", name="../../r1/vars/Debian.yml") == []  # r1's [a, b]


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        ("package: [a]\n", r"roles/r/meta/packages.yml must be a mapping of packages and vars_"),
        ("- a\n", r"must be a mapping of packages and vars_files, got \['a'\]"),
        ("packages: a\n", r"packages.yml: packages must be a list of package names or null, got"),
        ("packages: [a, '']\n", r"packages must be a list of package names or null"),
        ("packages: '{{ nowhere }}'\n", r"role_packages: roles/r/meta/packages.yml: .*nowhere"),
        (None, r"role_packages: roles/r/meta/packages.yml does not exist; name a role that"),
        ("vars_files: Debian.yml\n", r"vars_files must be a list of file names, got 'Debian.yml'"),
    ],
)
def test_a_bad_declaration_is_named(lookup, declaration, message) -> None:
    with pytest.raises(AnsibleLookupError, match=message):
        lookup(declaration)
