"""Version skew and upgrade jumps refused before any package changes (slurm_common filter)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins/filter"))
import slurm_versions as v

CTL = ["slurmctld", "slurmdbd"]


def node(installed: dict, target: str, daemons: list[str]) -> dict:
    return {"installed": installed, "target": target, "daemons": daemons}


@pytest.mark.parametrize(
    ("text", "rel"),
    [
        ("22.05.8-4+deb12u1", "22.05"),
        ("24.11.5", "24.11"),
        ("23.11", "23.11"),
        ("1:21.08.5-2", "21.08"),
    ],
)
def test_release_of_a_package_version(text: str, rel: str) -> None:
    assert v.release(text) == rel


def test_unknown_release_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"not a Slurm release: '9\.9'"):
        v.release("9.9")


def test_same_release_everywhere_passes() -> None:
    nodes = {
        "ctl": node({"slurmctld": "22.05.8-4", "slurmdbd": "22.05.8-4"}, "22.05", CTL),
        "node1": node({"slurmd": "22.05.8-4"}, "22.05", ["slurmd"]),
    }
    assert v.slurm_upgrade_problems(nodes) == []


def test_debian_12_to_13_in_one_step_is_refused_naming_the_versions() -> None:
    nodes = {
        "ctl": node({"slurmctld": "22.05.8-4", "slurmdbd": "22.05.8-4"}, "24.11", CTL),
        "node1": node({"slurmd": "22.05.8-4"}, "24.11", ["slurmd"]),
    }
    problems = v.slurm_upgrade_problems(nodes)
    assert problems[0] == (
        "ctl: slurmctld 22.05.8-4 to 24.11 skips 23.02, 23.11, 24.05; SchedMD supports an upgrade "
        "from at most 3 earlier releases. Fix: upgrade in steps (to 24.05 first), or drain the "
        "cluster and start it afresh (slurmctld state and the database are not carried)"
    )
    assert len(problems) == 3  # slurmctld, slurmdbd, slurmd


def test_two_releases_up_is_allowed() -> None:
    nodes = {"ctl": node({"slurmctld": "22.05.8"}, "23.11", ["slurmctld"])}
    assert v.slurm_upgrade_problems(nodes) == []


def test_a_node_newer_than_the_controller_is_refused() -> None:
    nodes = {
        "ctl": node({"slurmctld": "22.05.8"}, "22.05", ["slurmctld"]),
        "node9": node({}, "24.11", ["slurmd"]),
    }
    assert v.slurm_upgrade_problems(nodes) == [
        "node9: slurmd would run 24.11, newer than slurmctld 22.05 on ctl; Slurm needs "
        "slurmdbd >= slurmctld >= slurmd. Fix: upgrade ctl first (its distribution release), "
        "then node9"
    ]


def test_a_node_too_far_behind_the_controller_is_refused() -> None:
    nodes = {
        "ctl": node({"slurmctld": "24.11.5"}, "24.11", ["slurmctld"]),
        "node1": node({"slurmd": "22.05.8"}, "22.05", ["slurmd"]),
    }
    assert v.slurm_upgrade_problems(nodes) == [
        "node1: slurmd 22.05 is more than 3 releases behind slurmctld 24.11 on ctl. "
        "Fix: upgrade node1"
    ]


def test_a_downgrade_is_refused() -> None:
    nodes = {"ctl": node({"slurmctld": "24.11.5"}, "22.05", ["slurmctld"])}
    assert "Slurm cannot be downgraded" in v.slurm_upgrade_problems(nodes)[0]


def test_controller_older_than_slurmdbd_is_fine_the_reverse_is_not() -> None:
    ok = {
        "db": node({"slurmdbd": "23.11.1"}, "23.11", ["slurmdbd"]),
        "ctl": node({"slurmctld": "22.05.8"}, "22.05", ["slurmctld"]),
    }
    assert v.slurm_upgrade_problems(ok) == []
    bad = {
        "db": node({"slurmdbd": "22.05.8"}, "22.05", ["slurmdbd"]),
        "ctl": node({"slurmctld": "22.05.8"}, "23.11", ["slurmctld"]),
    }
    assert v.slurm_upgrade_problems(bad)[0].startswith(
        "ctl: slurmctld would run 23.11, newer than slurmdbd 22.05 on db"
    )


def test_upgrades_name_each_daemon_that_changes_release() -> None:
    installed = {"slurmdbd": "22.05.8-4+deb12u3", "slurmd": "23.02.1", "slurm-client": "22.05.8"}
    assert v.slurm_upgrades(installed, "23.02") == {
        "slurmdbd": {"from": "22.05.8-4+deb12u3", "to": "23.02"}
    }
    assert v.slurm_upgrades(installed, "22.05") == {"slurmd": {"from": "23.02.1", "to": "22.05"}}
    assert v.slurm_upgrades({}, "24.11") == {}
    assert v.slurm_upgrades(None, "24.11") == {}
