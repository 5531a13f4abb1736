"""The doctor's TCP connects per node (plugins/filter/doctor_ports.py).

roles/cluster_doctor/vars asks it: __cluster_doctor_ports.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins/filter"))
from doctor_ports import FilterModule, doctor_ports

# Inventory names differ from the Slurm names (hostname -s) on purpose.
HOSTVARS = {
    "ctl": {"ansible_facts": {"hostname": "head"}},
    "n1": {"ansible_facts": {"hostname": "gpu01"}},
    "n2": {"ansible_facts": {"hostname": "gpu02"}},
    "n3": {},
}


def test_registered() -> None:
    assert FilterModule().filters() == {"doctor_ports": doctor_ports}


def test_a_compute_node_connects_to_slurmctld_only() -> None:
    assert doctor_ports("n1", "ctl", HOSTVARS, ["n1", "n2"], 6817, 6818) == {
        "slurmctld": ["head", 6817]
    }


def test_the_controller_also_connects_to_each_probed_slurmd_in_order() -> None:
    out = doctor_ports("ctl", "ctl", HOSTVARS, ["n2", "n1"], 6817, 6818)
    assert out == {
        "slurmctld": ["head", 6817],
        "slurmd@n2": ["gpu02", 6818],
        "slurmd@n1": ["gpu01", 6818],
    }
    assert list(out) == ["slurmctld", "slurmd@n2", "slurmd@n1"]


def test_a_controller_that_computes_checks_its_own_slurmd() -> None:
    assert doctor_ports("ctl", "ctl", HOSTVARS, ["ctl"], 6817, 6818) == {
        "slurmctld": ["head", 6817],
        "slurmd@ctl": ["head", 6818],
    }


def test_no_probed_compute_node() -> None:
    assert doctor_ports("ctl", "ctl", HOSTVARS, [], 6817, 6818) == {"slurmctld": ["head", 6817]}


@pytest.mark.parametrize(
    ("port", "want"), [("6817", 6817), (6817.0, 6817), ("6817.0", 6817), ("x", 0), (None, 0)]
)
def test_ports_are_ints_as_jinjas_int_filter_makes_them(port: object, want: int) -> None:
    assert doctor_ports("n1", "ctl", HOSTVARS, [], port, port) == {"slurmctld": ["head", want]}


def test_a_probed_compute_node_without_facts_is_named() -> None:
    with pytest.raises(AnsibleFilterError, match="n3"):
        doctor_ports("ctl", "ctl", HOSTVARS, ["n1", "n3"], 6817, 6818)


def test_other_nodes_do_not_need_the_compute_nodes_facts() -> None:
    # Only the controller's loop item reads them (as the Jinja's `if` did).
    assert doctor_ports("n1", "ctl", HOSTVARS, ["n3"], 6817, 6818) == {"slurmctld": ["head", 6817]}
