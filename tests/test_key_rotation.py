"""rotate_key.yml's decisions before it changes anything (plugins/filter/key_rotation.py)."""

from __future__ import annotations

import pytest
from key_rotation import (
    jwks_rotation_plan,
    munge_rotation_plan,
    rotation_refusals,
    rotation_report,
)

FIX = "fix: run site.yml first"


def test_a_converged_cluster_is_not_refused() -> None:
    seen = [
        {
            "host": "ctl",
            "reachable": True,
            "wanted": ["slurmctld"],
            "units": {"slurmctld": "active"},
        },
        {
            "host": "login",
            "reachable": True,
            "wanted": ["sackd|slurmd"],
            "units": {"sackd": "active"},
        },
    ]
    assert rotation_refusals(seen, ["node1|idle|none", "node2|alloc|none"]) == []


def test_each_cause_is_named_with_its_host_and_fix() -> None:
    seen = [
        {"host": "ctl", "reachable": True, "wanted": ["slurmctld", "munge"],
         "units": {"slurmctld": "active", "munge": "failed"}},
        {"host": "node1", "reachable": False},
        {"host": "login", "reachable": True, "wanted": ["sackd|slurmd"],
         "units": {"sackd": "inactive", "slurmd": "inactive"}},
    ]  # fmt: skip
    lines = ["node1|idle*|none", "node2|down|Not responding", "node3|down|admin"]
    assert rotation_refusals(seen, lines) == [
        f"ctl: munge not active (munge failed); {FIX}",
        "node1: unreachable; fix: bring it back (or take it out of the inventory)",
        f"login: sackd or slurmd not active (sackd inactive, slurmd inactive); {FIX}",
        f"node1: not responding to slurmctld (state idle*); {FIX}",
        f"node2: not responding to slurmctld (state down); {FIX}",
    ]


def test_the_jwks_plan_reads_the_controllers_file() -> None:
    same = {"kids": ["k1"], "default_kid": "k1", "sha256": "a"}
    plan = jwks_rotation_plan({"ctl": same, "node1": same}, "ctl")
    assert plan["steps"] == ["add", "default", "retire"] and plan["problems"] == []


def keys(key: str, new: str = "") -> dict:
    return {"key": key, "new": new}


def test_munge_fresh_rotation_stages_on_the_others_and_swaps_everywhere() -> None:
    plan = munge_rotation_plan({"ctl": keys("O"), "node1": keys("O"), "node2": keys("O")}, "ctl")
    assert plan == {
        "problems": [],
        "create": True,
        "stage": ["node1", "node2"],
        "swap": ["ctl", "node1", "node2"],
        "resume": False,
    }


@pytest.mark.parametrize(
    ("hosts", "create", "stage", "swap"),
    [
        # Stopped while staging: node2 has the new key staged already.
        ({"ctl": keys("O", "N"), "node1": keys("O"), "node2": keys("O", "N")}, False, ["node1"],
         ["ctl", "node1", "node2"]),
        # Stopped during the swap, the controller not swapped yet.
        ({"ctl": keys("O", "N"), "node1": keys("N"), "node2": keys("O", "N")}, False, [],
         ["ctl", "node2"]),
        # Stopped during the swap, the controller swapped: node2 finishes.
        ({"ctl": keys("N"), "node1": keys("N"), "node2": keys("O", "N")}, False, [], ["node2"]),
    ],
)  # fmt: skip
def test_munge_an_interrupted_rotation_continues(hosts, create, stage, swap) -> None:
    plan = munge_rotation_plan(hosts, "ctl")
    assert (plan["problems"], plan["create"], plan["stage"], plan["swap"]) == (
        [],
        create,
        stage,
        swap,
    )
    assert plan["resume"] is True


def test_munge_keys_that_differ_otherwise_are_refused() -> None:
    plan = munge_rotation_plan({"ctl": keys("O"), "node1": keys("X"), "node2": keys("")}, "ctl")
    assert plan["problems"] == [
        f"node1: its munge key is neither the controller's nor the new one; {FIX}",
        f"node2: no munge key; {FIX}",
    ]
    assert munge_rotation_plan({"ctl": keys("")}, "ctl")["problems"] == [
        f"ctl: no munge key; {FIX}"
    ]


def test_the_report_gives_the_munge_window_first_to_last_restart() -> None:
    noted = {
        "__slurm_auth_rotate_started": 1796327881.0,
        "__slurm_auth_rotate_swaps": {
            "ctl": {"stdout": "100.00 100.30"},
            "node1": {"stdout": "100.05 100.45"},
            "node2": {"skipped": True},
        },
    }
    out = rotation_report(noted, "munge", {"resume": False}, 1796327891.5)
    assert (out["stamp"], out["duration_s"], out["window_s"]) == ("20261203T195801Z", 10.5, 0.45)
    assert out["restarts"] == {
        "ctl": {"start": 100.0, "restart_s": 0.3},
        "node1": {"start": 100.05, "restart_s": 0.4},
    }


def test_the_report_sums_the_slurm_steps() -> None:
    steps = [
        {"step": "add", "reconfigure_s": 0.04, "ready_s": 1.2},
        {"step": "default", "reconfigure_s": 0.05, "ready_s": 1.3},
    ]
    noted = {"__slurm_auth_rotate_started": 0.0, "__slurm_auth_rotate_timeline": steps}
    out = rotation_report(noted, "slurm", {"resume": True}, 9.0)
    assert (out["window_s"], out["resumed"], out["steps"]) == (2.5, True, steps)
    assert out["window"].endswith("over 2 steps: add 0.04 s, default 0.05 s")
