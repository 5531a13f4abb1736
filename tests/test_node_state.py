"""The node_state probe (plugins/modules/node_state.py), its filters and the firewall script."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import node_state as m
import pytest
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.change_plan import file_writes
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.node_base import parse_units
from probed import FilterModule

ROOT = Path(__file__).resolve().parents[1]
FILTERS = FilterModule().filters()
FIREWALL = ROOT / "roles/slurm_common/files/slurm-firewall"

SYSTEMCTL_SHOW = """Id=munge.service
LoadState=loaded
ActiveState=active
UnitFileState=enabled

Id=slurmd.service
LoadState=loaded
ActiveState=failed
UnitFileState=enabled

Id=mariadb.service
LoadState=not-found
ActiveState=inactive
UnitFileState=
"""


def test_units_parse_active_failed_and_absent() -> None:
    assert parse_units(SYSTEMCTL_SHOW) == {
        "munge": {"active": "active", "sub": "", "enabled": "enabled"},
        "slurmd": {"active": "failed", "sub": "", "enabled": "enabled"},
        "mariadb": {"active": "absent", "sub": "absent", "enabled": "absent"},
    }


def test_unit_up_needs_active_and_enabled_and_a_probe() -> None:
    state = {"units": parse_units(SYSTEMCTL_SHOW)}
    up = FILTERS["unit_up"]
    assert up(state, "munge") is True
    assert up(state, "slurmd") is False
    assert up(state, "mariadb") is False
    assert up(state, "slurmctld") is False  # not asked
    assert up({}, "munge") is False  # no probe: the task runs
    assert up(None, "munge") is False
    disabled = {"units": {"munge": {"active": "active", "enabled": "disabled"}}}
    assert up(disabled, "munge") is False


def test_packages_missing_in_order_and_all_without_a_probe() -> None:
    missing = FILTERS["packages_missing"]
    assert missing(["munge", "slurmd", "curl"], ["curl", "munge"]) == ["slurmd"]
    assert missing(["munge"], ["munge", "slurmd"]) == []
    assert missing("munge", []) == ["munge"]
    assert missing(["b", "a"], None) == ["b", "a"]  # no probe: install
    assert missing([], None) == []


def test_the_probe_reports_only_the_packages_asked_about() -> None:
    every = m.packages()
    assert "dpkg" in every and len(every) > 20  # this machine's packages
    asked = m.packages(["dpkg", "no-such-package-here"])
    assert asked == {"dpkg": every["dpkg"]}  # not installed: absent, as before
    assert m.packages([]) == every


def test_file_info_as_the_change_plan_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "slurm.conf"
    path.write_text("ClusterName=lab\n")
    os.chmod(path, 0o640)
    info = m.file_info(str(path))
    sha1 = hashlib.sha1(b"ClusterName=lab\n").hexdigest()
    assert info["exists"] is True
    assert (info["sha1"], info["mode"]) == (sha1, "0640")
    assert info["sha256"] == hashlib.sha256(b"ClusterName=lab\n").hexdigest()
    assert m.file_info(str(tmp_path / "missing")) == {
        "exists": False,
        "error": "No such file or directory",
    }

    # What the probe reads is what the change plan's file_writes compares.
    state = {"files": {str(path): info, "/absent": {"exists": False}}}
    owner, group = info["owner"], info["group"]
    want = {"path": str(path), "content": "ClusterName=lab\n", "owner": owner, "group": group}
    assert file_writes(state, [{**want, "mode": "0640"}]) == {}
    assert file_writes(state, [{**want, "mode": "0644"}]) == {
        str(path): f"{owner}:{group} 0640, not {owner}:{group} 0644"
    }
    assert file_writes(state, [{**want, "mode": "0640", "content": "x"}]) == {
        str(path): "its content differs"
    }
    assert FILTERS["probed_file"](state, str(path))["sha1"] == sha1
    assert FILTERS["probed_file"](state, "/absent") == {"exists": False}
    assert FILTERS["probed_file"](state, "/not/asked") == {}


def test_commands_run_as_argv_or_shell() -> None:
    assert m.command(["echo", "a b"])["stdout"] == "a b\n"
    assert m.command("echo $((1 + 2)); exit 3") == {"rc": 3, "stdout": "3\n", "stderr": ""}
    assert m.command(["/no/such/tool"])["rc"] == 127


def test_a_command_of_a_program_root_must_not_run_does_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    script = f"open({str(marker)!r}, 'w').write('x')"
    python = "/usr/bin/python3"
    refused = m.command([python, "-c", script], {python: "/x belongs to 4242, not root"})
    assert refused == {
        "rc": None,
        "stdout": "",
        "stderr": f"not run: {python}: /x belongs to 4242, not root",
    }
    assert not marker.exists()
    # Trusted (no problem named), or not among the trusted paths: it runs.
    assert m.command([python, "-c", script], {python: ""})["rc"] == 0
    assert marker.exists()
    assert m.command(["echo", "a"], {python: "no"})["stdout"] == "a\n"


def test_read_text_of_a_missing_file_is_none(tmp_path: Path) -> None:
    (tmp_path / "hosts").write_text("127.0.0.1 localhost\n")
    assert m.read_text(str(tmp_path / "hosts")) == "127.0.0.1 localhost\n"
    assert m.read_text(str(tmp_path / "nope")) is None


def fake_iptables(tmp_path: Path, rules: str) -> dict[str, str]:
    """An iptables on PATH that prints RULES for -S and logs every other call."""
    tool = tmp_path / "iptables"
    log = tmp_path / "calls"
    tool.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = -S ]; then printf "%s" "$(cat {tmp_path}/rules)"; exit 0; fi\n'
        f'echo "$@" >> {log}\n'
        '[ "$1" = -D ] && exit 1\n'
        "exit 0\n"
    )
    tool.chmod(0o755)
    (tmp_path / "rules").write_text(rules)
    return {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}


RULE = (
    "-A INPUT -p tcp -m multiport --dports 6817,6818 -m comment --comment slurm-cluster -j ACCEPT"
)


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        ("-P INPUT ACCEPT", "none"),
        (f"-P INPUT DROP\n{RULE}", "ok"),
        ("-P INPUT ACCEPT\n-A INPUT -p tcp --dport 6818 -j DROP", "changed"),
        ("-P INPUT DROP", "changed"),
    ],
)
def test_firewall_script_reads_without_apply(tmp_path: Path, rules: str, expected: str) -> None:
    env = fake_iptables(tmp_path, rules)
    out = subprocess.run(
        ["sh", str(FIREWALL), "6817,6818"], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == expected
    assert not (tmp_path / "calls").exists()  # the probe changed nothing


def test_firewall_script_applies_the_rule_first(tmp_path: Path) -> None:
    env = fake_iptables(tmp_path, "-P INPUT ACCEPT\n-A INPUT -p tcp --dport 6818 -j DROP")
    out = subprocess.run(
        ["sh", str(FIREWALL), "6817,6818", "apply"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "changed"
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[-1] == "-I INPUT 1 " + RULE.removeprefix("-A INPUT ")


def test_masked_hash_hides_the_secret_and_checks_it(tmp_path: Path) -> None:
    conf = tmp_path / "slurmdbd.conf"
    secret = tmp_path / "dbpass"
    secret.write_text("s3cret")  # written without a newline, as the role does
    conf.write_text("DbdHost=ctl\nStoragePass=s3cret\nStorageUser=slurm\n")
    info = m.masked_info(str(conf), "StoragePass", str(secret))
    masked = "DbdHost=ctl\nStoragePass=@SECRET@\nStorageUser=slurm\n"
    assert info == {
        "exists": True,
        "sha1": hashlib.sha1(masked.encode()).hexdigest(),
        "secret_matches": True,
    }
    assert "s3cret" not in str(info)
    # Another password in the file: the same masked hash, but no match.
    conf.write_text("DbdHost=ctl\nStoragePass=old\nStorageUser=slurm\n")
    assert m.masked_info(str(conf), "StoragePass", str(secret))["secret_matches"] is False
    # No such line, or no secret file.
    conf.write_text("DbdHost=ctl\n")
    assert m.masked_info(str(conf), "StoragePass", str(secret))["secret_matches"] is False
    assert m.masked_info(str(conf), "StoragePass", str(tmp_path / "none")) == {"exists": False}


# --- programs root runs: root's own all the way up (issue 38) ---------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_root_runs_no_program_from_a_folder_root_does_not_own(tmp_path: Path) -> None:
    from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.node_base import (
        root_owned_problem,
    )

    top = tmp_path / "shared"  # the shared mount point: trusted as it is (1777 here)
    top.mkdir()
    top.chmod(0o1777)
    venv = top / "venv" / "bin"
    venv.mkdir(parents=True)
    python = venv / "python"
    python.symlink_to("/usr/bin/python3")
    assert root_owned_problem(str(python), str(top)) == ""
    # Not yet made: fine while the folders on the way are root's.
    assert root_owned_problem(str(top / "venv" / "new" / "bin" / "python"), str(top)) == ""
    # Under the 1777 mount point with no mount point given: /tmp and the share count.
    assert root_owned_problem(str(python)).startswith("/tmp is writable by others than root")
    # A folder a user owns, or others may write, on the way.
    os.chown(top / "venv", 4242, 4242)
    assert root_owned_problem(str(python), str(top)) == (
        f"{top}/venv belongs to 4242 (uid 4242), not root"
    )
    os.chown(top / "venv", 0, 0)
    venv.chmod(0o777)
    assert root_owned_problem(str(python), str(top)) == (
        f"{venv} is writable by others than root (mode 0777)"
    )
    venv.chmod(0o755)
    # Root's own link to a user's tree: what it points to counts.
    bob = top / "bob"
    bob.mkdir()
    os.chown(bob, 4242, 4242)
    (top / "linked").symlink_to(bob)
    assert root_owned_problem(str(top / "linked" / "bin" / "python"), str(top)) == (
        f"{top}/linked points to {bob}: {bob} belongs to 4242 (uid 4242), not root"
    )


def test_the_probe_reports_programs_root_must_not_run(tmp_path: Path) -> None:
    from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.probe_wants import SPEC

    assert SPEC["trusted"] == {"type": "list", "elements": "path", "default": []}
