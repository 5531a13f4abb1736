"""The acceptance gate: a node added with `site.yml --limit` waits drained
("acceptance: pending"); a fault keeps it drained with its cause; a clean
smoke job resumes it; an admin's drain is never lifted; a full run removes it."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from conftest import NEW_NODE as NEW
from conftest import RESULTS, ROOT, add_new_node, host, node_state, remove_new_node

SRUN_ONLY = '{"smoke_train_modes": ["srun"]}'


def state_and_reason(name: str) -> tuple[str, str]:
    out = host("ctl").check_output(f"sinfo --noheader --Node --nodes={name} --format='%t|%E'")
    state, _, reason = out.splitlines()[0].partition("|")
    return state, reason


def run_id(out: str) -> str:
    found = re.findall(r"(?:results/[\w-]+|runs|smoke)/(\d{8}T\d{6}Z-\d+)", out)
    assert found, out[-3000:]
    return found[-1]


def history(run: str) -> list[dict]:
    lines = (RESULTS / "history.jsonl").read_text().splitlines()
    return [entry for entry in map(json.loads, lines) if entry.get("run_id") == run]


def no_reservation() -> bool:
    return "No reservations" in host("ctl").check_output("scontrol show reservation")


@pytest.fixture
def node3(tmp_path: Path, run_playbook):
    extra = add_new_node(tmp_path)
    try:
        yield extra
    finally:
        host("ctl").run("scontrol update nodename=node2 state=resume")
        remove_new_node()
        removed = run_playbook("site.yml")
        assert removed.returncode == 0, removed.stdout[-3000:] + removed.stderr
        assert node_state(NEW) == ""


def idle_within(name: str, seconds: float) -> bool:
    """True once Slurm shows the node idle, within the given seconds."""
    end = time.monotonic() + seconds
    while node_state(name) != "idle":
        if time.monotonic() > end:
            return False
        time.sleep(1)
    return True


def test_a_new_node_waits_for_the_acceptance_job(run_playbook, node3: Path) -> None:
    prepare = run_playbook(
        str(ROOT / "molecule/shared/prepare.yml"), "--limit", NEW, inventories=(node3,)
    )
    assert prepare.returncode == 0, prepare.stdout + prepare.stderr

    # [] modes: site.yml drains the new node and leaves the job to smoke_train.yml.
    added = run_playbook(
        "site.yml", "--limit", NEW, "-e", '{"cluster_acceptance_modes": []}', inventories=(node3,)
    )
    out = added.stdout + added.stderr
    assert added.returncode == 0, out[-3000:]
    assert "Drain new and changed nodes until the acceptance job passes them" in out
    assert state_and_reason(NEW) == ("drain", "acceptance: pending")
    assert idle_within("node1", 30) and idle_within("node2", 30)  # in service

    host("ctl").check_output("scontrol update nodename=node2 state=drain reason='admin: disk swap'")
    # The job runs on node3 and one known-good idle node, node1 (node2 is the
    # admin's); node1 sorts first, so rank 1 is node3's and the fault hits it.
    failed = run_playbook(
        "smoke_train.yml",
        "-e",
        SRUN_ONLY,
        "-e",
        "smoke_train_fault=perturb_params:1",
        inventories=(node3,),
    )
    out = failed.stdout + failed.stderr
    assert failed.returncode != 0, out[-3000:]
    assert "(left drained: acceptance: ...)" in out, out[-3000:]
    state, reason = state_and_reason(NEW)
    assert state == "drain" and reason.startswith("acceptance: [srun] "), reason
    assert "parameters of rank 1 on node3 differ" in reason, reason
    assert state_and_reason("node2") == ("drain", "admin: disk swap")
    # The failed job's teardown ends a few seconds after the playbook (mix, then idle).
    assert idle_within("node1", 30) and no_reservation()
    entries = history(run_id(out))
    assert len(entries) == 1, (run_id(out), out[-3000:])
    (entry,) = entries
    assert (entry["nodes"], entry["pending"]) == (["node1", NEW], [NEW]), entry
    assert entry["node_passed"] == {"node1": True, NEW: False}, entry

    passed = run_playbook("smoke_train.yml", "-e", SRUN_ONLY, inventories=(node3,))
    out = passed.stdout + passed.stderr
    assert passed.returncode == 0, out[-3000:]
    assert f"(accepted: {NEW}, back in service)" in out, out[-3000:]
    assert idle_within(NEW, 30) and no_reservation()
    assert state_and_reason("node2") == ("drain", "admin: disk swap")  # never the gate's to lift
    (entry,) = history(run_id(out))
    assert entry["passed"] and entry["node_passed"] == {"node1": True, NEW: True}, entry
    assert set(entry["figures"]["step_ms"]) == {"node1", NEW}, entry
    # In service: an ordinary job may now land on it.
    ran = host("ctl").check_output(f"timeout 60 srun --immediate=30 -w {NEW} hostname")
    assert ran.strip() == NEW
