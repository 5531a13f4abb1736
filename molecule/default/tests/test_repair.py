"""A rerun of site.yml mends what it finds undone, role by role.

A no-change rerun skips the munge, slurm_dbd, pytorch and slurm_login roles'
tasks as one include each, on the word of the run's probe (the roles'
``__<role>_settled``). Each fault here makes one of those words false on one
host: the rerun must go into that role there, mend it, and prove the
cluster; the run after it must change nothing again.

The doctor at the end of site.yml reads every node again after a run that
changed something; after one that changed nothing it judges the readings
the run's first probe took (callback run_changes), with no probe of its own.
"""

from __future__ import annotations

import re

from conftest import host, recap

VENV_PYTHON = "/opt/pytorch/venv/bin/python"


def changed_by_host(out: str) -> dict[str, int]:
    """Each host's changed count; every host reached and nothing failed."""
    counts = recap(out)
    clean = all(c["failed"] == 0 and c["unreachable"] == 0 for c in counts.values())
    assert counts and clean, out[-3000:]
    return {name: c["changed"] for name, c in counts.items()}


def changed_in(out: str, task: str, name: str) -> bool:
    """Whether the run's output shows the task (role : name) changed on the host."""
    blocks = out.split("\nTASK [")
    return any(
        b.startswith(f"gpulab.slurm_cluster.{task}]") and f"changed: [{name}]" in b for b in blocks
    )


def doctor_read_again(out: str) -> bool:
    """Whether site.yml's doctor sent its own probe to the nodes (not the first readings)."""
    return "TASK [gpulab.slurm_cluster.cluster_doctor : Probe each node]" in out


def key_sha(name: str) -> str:
    return host(name).check_output("sha256sum /etc/munge/munge.key").split()[0]


def test_a_rerun_mends_each_roles_fault_and_then_changes_nothing(run_playbook) -> None:
    ctl, login, node2 = host("ctl"), host("login"), host("node2")
    # slurm_dbd: MariaDB down. slurm_login: sshd down. pytorch: a pinned
    # package gone from the venv. munge: another key, owner and mode kept.
    ctl.check_output("systemctl stop mariadb")
    login.check_output("systemctl stop ssh")
    node2.check_output(f"{VENV_PYTHON} -m pip uninstall --yes --quiet numpy")
    node2.check_output(
        "head -c 1024 /dev/urandom > /etc/munge/munge.key.new && chown munge:munge "
        "/etc/munge/munge.key.new && chmod 0400 /etc/munge/munge.key.new && "
        "mv /etc/munge/munge.key.new /etc/munge/munge.key"
    )
    assert key_sha("node2") != key_sha("ctl")

    mended = run_playbook("site.yml")
    assert mended.returncode == 0, mended.stdout[-4000:] + mended.stderr[-2000:]
    changed = changed_by_host(mended.stdout)
    assert changed["ctl"] > 0 and changed["login"] > 0 and changed["node2"] > 0, changed
    for task, name in [
        ("slurm_dbd : Enable and start MariaDB", "ctl"),
        ("slurm_login : Start sshd", "login"),
        ("pytorch : Install torch into the venv", "node2"),
        ("munge : Install the cluster key where it differs", "node2"),
    ]:
        assert changed_in(mended.stdout, task, name), (task, name, mended.stdout[-4000:])

    # Something changed: the doctor read every node after the repairs.
    assert doctor_read_again(mended.stdout), mended.stdout[-4000:]
    assert re.search(r"Doctor (PASS|WARN): report", mended.stdout), mended.stdout[-4000:]
    assert ctl.service("mariadb").is_running
    assert login.service("ssh").is_running
    node2.check_output(f"{VENV_PYTHON} -c 'import numpy'")
    assert key_sha("node2") == key_sha("ctl")

    again = run_playbook("site.yml")
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-2000:]
    assert set(changed_by_host(again.stdout).values()) == {0}, again.stdout[-3000:]
    # Nothing changed: the doctor judged the first probe's readings.
    assert not doctor_read_again(again.stdout), again.stdout[-4000:]
    assert re.search(r"Doctor (PASS|WARN): report", again.stdout), again.stdout[-4000:]
