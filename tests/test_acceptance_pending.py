"""Which nodes site.yml drains with "acceptance: pending" (slurm_daemons filter)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins/filter"))
from acceptance import acceptance_candidates, acceptance_pending

PREFIX = "acceptance:"
BEFORE = [
    "node1|idle|none",
    "node1|idle|none",  # a node in two partitions
    "node2|drain|admin: disk swap",
    "node4|drain|acceptance: gloo all_reduce failed",
]


def nodes(*names: str, changed: tuple[str, ...] = ()) -> list:
    return [{"name": n, "changed": n in changed} for n in names]


def test_a_node_slurmctld_did_not_know_is_new() -> None:
    assert acceptance_pending(BEFORE, nodes("node1", "node3"), [], PREFIX) == ["node3"]


def test_a_no_change_run_drains_nothing() -> None:
    assert acceptance_pending(BEFORE, nodes("node1", "node4"), [], PREFIX) == []


def test_changed_hardware_release_or_torch_makes_a_node_pending() -> None:
    got = acceptance_pending(BEFORE, nodes("node1", "node4", changed=("node4",)), [], PREFIX)
    assert got == ["node4"]
    assert acceptance_pending(BEFORE, nodes("node1"), ["node1"], PREFIX) == ["node1"]


def test_an_admin_drain_is_never_touched() -> None:
    assert acceptance_pending(BEFORE, nodes("node2", changed=("node2",)), ["node2"], PREFIX) == []


def test_every_node_is_new_when_slurmctld_did_not_answer() -> None:
    got = acceptance_pending([], nodes("node2", "node1"), [], PREFIX, answered=False)
    assert got == ["node1", "node2"]


def test_candidates_from_hostvars() -> None:
    hosts = [
        {"ansible_facts": {"hostname": "a"}, "slurm_common_upgrade": {"slurmd": {"from": "22.05"}}},
        {"ansible_facts": {"hostname": "b"}, "pytorch_install": {"changed": True}},
        {"ansible_facts": {"hostname": "c"}, "pytorch_install": {"changed": False}},
    ]
    assert acceptance_candidates(hosts) == [
        {"name": "a", "changed": True},
        {"name": "b", "changed": True},
        {"name": "c", "changed": False},
    ]
