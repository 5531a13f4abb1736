"""The smoke job fitted to what Slurm reports: partitions, uneven GPUs, refusals."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "roles/smoke_train/filter_plugins"))
from smoke_layout import smoke_layout

# The lab of issue 14: the controller computes, CPU-only, in `cpu`; two GPU
# nodes with 2 and 1 GPUs in the default `gpu`.
LAB = [
    "cpu|ctl|(null)|idle|none",
    "gpu*|node1|gpu:2|idle|none",
    "gpu*|node2|gpu:1(S:0)|mix|none",
]


def test_default_partition_one_rank_per_gpu_on_uneven_nodes() -> None:
    out = smoke_layout(LAB)
    assert out["problems"] == []
    (run,) = out["runs"]
    assert run == {
        "partition": "gpu",
        "nodes": ["node1", "node2"],
        "gpus": {"node1": 2, "node2": 1},
        "gpu_job": True,
        "total_gpus": 3,
        "world_size": 3,
    }


def test_a_cpu_partition_gets_one_rank_per_node() -> None:
    (run,) = smoke_layout(LAB, "cpu")["runs"]
    assert (run["nodes"], run["gpu_job"], run["world_size"]) == (["ctl"], False, 1)


def test_all_partitions_in_turn() -> None:
    out = smoke_layout(LAB, "all")
    assert [r["partition"] for r in out["runs"]] == ["cpu", "gpu"]


def test_a_node_in_two_partitions_counts_once_in_each() -> None:
    lines = [*LAB, "debug|node1|gpu:2|idle|none"]
    out = smoke_layout(lines, "debug")
    assert out["runs"][0]["gpus"] == {"node1": 2}


def test_node_count_picks_the_first_usable_nodes() -> None:
    (run,) = smoke_layout(LAB, "", 1)["runs"]
    assert run["nodes"] == ["node1"] and run["world_size"] == 2


@pytest.mark.parametrize(
    ("lines", "asked", "nodes", "words"),
    [
        (LAB, "", 3, ["partition gpu has 2 node(s) (node1, node2)", "smoke_train_nodes=3"]),
        (LAB, "big", 0, ["partition big does not exist", "Slurm has: cpu, gpu"]),
        (
            [*LAB[:2], "gpu*|node2|gpu:1|drain|Kill task failed"],
            "",
            0,
            ["partition gpu: node2 is drain (Kill task failed)", "state=resume"],
        ),
        ([*LAB[:2], "gpu*|node2|gpu:1|down*|Not responding"], "", 2, ["node2 is down*"]),
        (["cpu|ctl|(null)|idle|none", "gpu|node1|gpu:2|idle|none"], "", 0, ["no default"]),
        (
            ["mixed*|ctl|(null)|idle|none", "mixed*|node1|gpu:2|idle|none"],
            "",
            0,
            ["mixes GPU nodes (node1) and CPU-only nodes (ctl)"],
        ),
    ],
    ids=["too-many-nodes", "no-such-partition", "drained", "down", "no-default", "mixed"],
)
def test_requests_slurm_cannot_satisfy_are_refused(lines, asked, nodes, words) -> None:
    out = smoke_layout(lines, asked, nodes)
    assert out["runs"] == []
    text = " ".join(out["problems"])
    for w in words:
        assert w in text, text


def test_a_drained_node_is_skipped_when_fewer_nodes_are_asked() -> None:
    lines = [*LAB[:2], "gpu*|node2|gpu:1|drain|admin"]
    (run,) = smoke_layout(lines, "", 1)["runs"]
    assert run["nodes"] == ["node1"]
