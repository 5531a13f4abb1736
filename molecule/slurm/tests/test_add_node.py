"""A fourth node joins with `site.yml --limit node3` and leaves with a full run."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import testinfra
import yaml
from conftest import ROOT, host, platforms

NEW = "node3"


def invocation(name: str, unit: str) -> str:
    return host(name).check_output(f"systemctl show --property=InvocationID --value {unit}")


def node_state(name: str) -> str:
    out = host("ctl").run(f"sinfo --noheader --Node --nodes={name} --format=%t")
    return out.stdout.strip() if out.rc == 0 else ""


def state_and_reason(name: str) -> tuple[str, str]:
    out = host("ctl").check_output(f"sinfo --noheader --Node --nodes={name} --format='%t|%E'")
    state, _, reason = out.splitlines()[0].partition("|")
    return state, reason


def history(run_id: str) -> list[dict]:
    lines = (ROOT / "results/history.jsonl").read_text().splitlines()
    return [entry for entry in map(json.loads, lines) if entry.get("run_id") == run_id]


def run_id(out: str) -> str:
    found = re.findall(r"(?:results|runs)/(\d{8}T\d{6}Z-\d+)", out)
    assert found, out[-3000:]
    return found[-1]


@pytest.fixture
def node3(tmp_path: Path, run_playbook):
    subprocess.run(["docker", "rm", "-f", NEW], capture_output=True, check=False)
    # The same container as the scenario's compute nodes, made by its create play.
    compute = next(p for p in platforms() if "slurm_compute" in p.get("groups", []))
    made = run_playbook(
        str(ROOT / "molecule/shared/create.yml"),
        "-e",
        json.dumps(
            {
                "molecule_yml": {"platforms": [{**compute, "name": NEW, "hostname": NEW}]},
                "create_keep_facts": True,
            }
        ),
    )
    assert made.returncode == 0, made.stdout + made.stderr
    extra = tmp_path / "node3.yml"
    extra.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "slurm_compute": {
                            "hosts": {
                                NEW: {
                                    "slurm_compute_gpus": 1,
                                    "ansible_connection": "docker",
                                }
                            }
                        }
                    }
                }
            }
        )
    )
    try:
        yield extra
    finally:
        subprocess.run(["docker", "rm", "-f", NEW], capture_output=True, check=False)


def test_limit_adds_a_node_and_a_full_run_removes_it(run_playbook, node3: Path) -> None:
    prepare = run_playbook(
        str(ROOT / "molecule/shared/prepare.yml"), "--limit", NEW, inventories=(node3,)
    )
    assert prepare.returncode == 0, prepare.stdout + prepare.stderr

    old = ("node1", "node2")
    slurmd_runs = {n: invocation(n, "slurmd") for n in old}
    ctld_run = invocation("ctl", "slurmctld")
    # [] modes: site.yml drains the new node and leaves the job to smoke_train.yml.
    added = run_playbook(
        "site.yml", "--limit", NEW, "-e", '{"cluster_acceptance_modes": []}', inventories=(node3,)
    )
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
    # The gate: the new node waits drained, an admin's drain elsewhere stays.
    assert state_and_reason(NEW) == ("drain", "acceptance: pending")
    host("ctl").check_output("scontrol update nodename=node2 state=drain reason='admin: disk swap'")
    try:
        gate_a_new_node(run_playbook)
    finally:
        host("ctl").run("scontrol update nodename=node2 state=resume")
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


def gate_a_new_node(run_playbook) -> None:
    """A fault on the new node keeps it drained with its cause; a clean job resumes it."""
    # The job runs on node3 and one known-good idle node (node1: node2 is
    # drained by the admin); node1 sorts first, so rank 1 is node3's.
    failed = run_playbook(
        "smoke_train.yml",
        "-e",
        '{"smoke_train_modes": ["srun"]}',
        "-e",
        "smoke_train_fault=perturb_params:1",
    )
    out = failed.stdout + failed.stderr
    assert failed.returncode != 0, out[-3000:]
    assert "node3: " in out and "left drained" in out, out[-3000:]
    state, reason = state_and_reason(NEW)
    assert state == "drain" and reason.startswith("acceptance: "), reason
    assert "rank 1 on node3" in reason and "parameters" in reason, reason
    assert state_and_reason("node2") == ("drain", "admin: disk swap")
    assert node_state("node1") == "idle"
    (entry,) = history(run_id(out))
    assert entry["node_passed"] == {"node1": True, NEW: False}, entry
    assert "No reservations" in host("ctl").check_output("scontrol show reservation")

    passed = run_playbook("smoke_train.yml", "-e", '{"smoke_train_modes": ["srun"]}')
    out = passed.stdout + passed.stderr
    assert passed.returncode == 0, out[-3000:]
    assert f"accepted: {NEW}, back in service" in out, out[-3000:]
    assert node_state(NEW) == "idle"
    assert state_and_reason("node2") == ("drain", "admin: disk swap")  # never the gate's to lift
    (entry,) = history(run_id(out))
    assert entry["node_passed"] == {"node1": True, NEW: True} and entry["passed"], entry
    assert set(entry["figures"]["step_ms"]) == {"node1", NEW}, entry
    assert "No reservations" in host("ctl").check_output("scontrol show reservation")
