"""A fourth node joins with `site.yml --limit node3` and leaves with a full run."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import testinfra
from conftest import NEW_NODE as NEW
from conftest import ROOT, add_new_node, host, node_state, remove_new_node


def invocation(name: str, unit: str) -> str:
    return host(name).check_output(f"systemctl show --property=InvocationID --value {unit}")


@pytest.fixture
def node3(tmp_path: Path):
    extra = add_new_node(tmp_path)
    try:
        yield extra
    finally:
        remove_new_node()


def test_limit_adds_a_node_and_a_full_run_removes_it(run_playbook, node3: Path) -> None:
    prepare = run_playbook(
        str(ROOT / "molecule/shared/prepare.yml"), "--limit", NEW, inventories=(node3,)
    )
    assert prepare.returncode == 0, prepare.stdout + prepare.stderr

    old = ("node1", "node2")
    slurmd_runs = {n: invocation(n, "slurmd") for n in old}
    ctld_run = invocation("ctl", "slurmctld")
    added = run_playbook("site.yml", "--limit", NEW, inventories=(node3,))
    out = added.stdout + added.stderr
    assert added.returncode == 0, out
    # Configless: the run touched the new node and the controller only.
    # (Ansible names every host a task ran on, or was delegated to, as [host] or [x -> host].)
    touched = set(re.findall(r"\[(?:[\w.-]+ -> )?([\w.-]+)\]", out)) & {"ctl", *old, NEW}
    assert touched == {"ctl", NEW}, touched
    assert invocation("ctl", "slurmctld") != ctld_run  # a node added: slurmctld restarted
    assert {n: invocation(n, "slurmd") for n in old} == slurmd_runs

    # The running slurmds took the new slurm.conf from the reconfigure.
    want = host("ctl").check_output("sha256sum < /etc/slurm/slurm.conf")
    for n in (*old, NEW):
        h = testinfra.get_host(f"docker://{n}")
        assert h.check_output("sha256sum < /run/slurm/conf/slurm.conf") == want, n
        assert not h.file("/etc/slurm/slurm.conf").exists, n
    deadline = time.monotonic() + 60
    while node_state(NEW) != "idle" and time.monotonic() < deadline:
        time.sleep(2)
    assert node_state(NEW) == "idle"
    ran = host("ctl").check_output(f"timeout 60 srun --immediate=30 -w {NEW} hostname")
    assert ran.strip() == NEW
    # One job over the old nodes and the new one (slurmd forwards to nodes it now knows).
    ran = host("ctl").check_output(
        f"timeout 60 srun --immediate=30 -p gpu -w node1,node2,{NEW} -N3 hostname"
    )
    assert sorted(ran.split()) == ["node1", "node2", NEW]

    removed = run_playbook("site.yml")
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert NEW not in host("ctl").check_output("grep ^NodeName /etc/slurm/slurm.conf")
    assert node_state(NEW) == ""
    assert sorted(host("ctl").check_output("sinfo --noheader --Node --format=%N").split()) == [
        "node1",
        "node1",
        "node2",
    ]
