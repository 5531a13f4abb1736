"""What slurmctld and accounting held before the run (plugins/filter/slurm_before.py).

roles/cluster/vars asks them: cluster_accounting_registered, cluster_nodes_before.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins/filter"))
from slurm_before import FilterModule, slurm_accounting_registered, slurm_nodes_before

# `sacctmgr --noheader --parsable2 list cluster format=cluster,controlhost`
CLUSTERS = "other|10.0.0.9\ngpulab|10.0.0.1\n"


def test_both_filters_are_registered() -> None:
    assert set(FilterModule().filters()) == {"slurm_accounting_registered", "slurm_nodes_before"}


def test_registered_when_the_cluster_has_a_control_host() -> None:
    assert slurm_accounting_registered(CLUSTERS, "gpulab") is True


def test_the_name_is_compared_in_lower_case() -> None:
    assert slurm_accounting_registered(CLUSTERS, "GPULab") is True
    # Accounting keeps names in lower case: an upper-case line never matches.
    assert slurm_accounting_registered("GPULAB|10.0.0.1", "gpulab") is False


def test_a_cluster_without_control_host_is_not_registered() -> None:
    assert slurm_accounting_registered("gpulab|\ngpulab|   \ngpulab", "gpulab") is False


def test_another_cluster_or_a_prefix_is_not_ours() -> None:
    assert slurm_accounting_registered(CLUSTERS, "gpu") is False
    assert slurm_accounting_registered("gpulab2|10.0.0.1", "gpulab") is False


def test_no_output_is_not_registered() -> None:
    # The probe did not ask (no controller probe): `| default('')`.
    assert slurm_accounting_registered("", "gpulab") is False
    assert slurm_accounting_registered(None, "gpulab") is False


def test_an_undefined_cluster_name_matches_only_an_empty_name() -> None:
    # cluster_name | default(''): '' matches a line with an empty first field.
    assert slurm_accounting_registered(CLUSTERS, "") is False
    assert slurm_accounting_registered("|10.0.0.1", "") is True


def test_a_none_name_is_lowered_as_jinja_does() -> None:
    assert slurm_accounting_registered("none|10.0.0.1", None) is True


def test_nodes_from_the_roles_own_ask() -> None:
    asked = {"rc": 0, "stdout": "node1|idle|none\nnode2|drain|acceptance: pending"}
    probed = {"rc": 0, "stdout": "old|idle|none"}
    assert slurm_nodes_before(asked, probed) == {
        "rc": 0,
        "lines": ["node1|idle|none", "node2|drain|acceptance: pending"],
    }


def test_a_failed_ask_is_still_the_answer() -> None:
    assert slurm_nodes_before({"rc": 1, "stdout": ""}, {"rc": 0, "stdout": "x|idle|"}) == {
        "rc": 1,
        "lines": [],
    }


def test_a_skipped_or_missing_ask_falls_back_to_the_probe() -> None:
    probed = {"rc": 0, "stdout": "node1|idle|none\n"}
    want = {"rc": 0, "lines": ["node1|idle|none"]}
    assert slurm_nodes_before({"changed": False, "skipped": True}, probed) == want
    assert slurm_nodes_before({}, probed) == want
    assert slurm_nodes_before(None, probed) == want


def test_neither_ask_nor_probe_is_rc_1_without_lines() -> None:
    assert slurm_nodes_before({}, {}) == {"rc": 1, "lines": []}
    assert slurm_nodes_before({}, None) == {"rc": 1, "lines": []}


def test_a_probe_without_rc_or_stdout_takes_the_defaults() -> None:
    assert slurm_nodes_before({}, {"stdout": "a\nb"}) == {"rc": 1, "lines": ["a", "b"]}
    assert slurm_nodes_before({}, {"rc": 0}) == {"rc": 0, "lines": []}
