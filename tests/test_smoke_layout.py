"""The smoke job fitted to what Slurm reports: partitions, uneven GPUs, refusals."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins/filter"))
from smoke_layout import (
    launch_refusal,
    smoke_layout,
    smoke_outcomes,
    smoke_refused,
    smoke_refused_nodes,
)

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
        "kind": "gpu",
        "label": "gpu",
        "nodes": ["node1", "node2"],
        "gpus": {"node1": 2, "node2": 1},
        "gpu_job": True,
        "total_gpus": 3,
        "world_size": 3,
        "pending": [],
        "good": ["node1", "node2"],
    }


def test_a_cpu_partition_gets_one_rank_per_node() -> None:
    (run,) = smoke_layout(LAB, "cpu")["runs"]
    assert (run["nodes"], run["gpu_job"], run["world_size"]) == (["ctl"], False, 1)


def test_all_partitions_in_turn() -> None:
    out = smoke_layout(LAB, "all")
    # The larger partition first (a node in both is proven in the larger job).
    assert [r["partition"] for r in out["runs"]] == ["gpu", "cpu"]


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
            ["gpu*|big|gpu:4|idle|2|64000|none"],
            "",
            0,
            [
                "partition gpu: node big would run 4 ranks (one per GPU, one task each) but "
                "Slurm gives it 2 CPUs",
                "Fix: give big at least 4 CPUs",
                "set slurm_compute_gpus of big to at most 2",
            ],
        ),
        (
            ["gpu*|small|gpu:2|idle|8|600|none"],
            "",
            0,
            [
                "node small would run 2 ranks, 1024 MiB at least, but Slurm gives it "
                "RealMemory=600 MiB"
            ],
        ),
    ],
    ids=[
        "too-many-nodes",
        "no-such-partition",
        "drained",
        "down",
        "no-default",
        "more-gpus-than-cpus",
        "too-little-memory",
    ],
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


def test_no_node_awaits_acceptance_on_a_normal_run() -> None:
    (run,) = smoke_layout([*LAB[:2], "gpu*|node2|gpu:1|mix|acceptance: pending"])["runs"]
    # Only a drained node awaits acceptance: the reason alone does not make it so.
    assert (run["nodes"], run["pending"]) == (["node1", "node2"], [])


def test_nodes_awaiting_acceptance_run_with_one_known_good_node() -> None:
    lines = [
        "gpu*|node1|gpu:1|mix|none",
        "gpu*|node2|gpu:1|idle|none",
        "gpu*|node3|gpu:1|drain|acceptance: pending",
        "gpu*|node4|gpu:1|drng|acceptance: gloo all_reduce failed",
        "gpu*|node5|gpu:1|drain|admin: disk swap",
        "gpu*|node6|gpu:1|idle|none",
    ]
    out = smoke_layout(lines, "", 2)  # the node count is not read for acceptance
    assert out["problems"] == []
    (run,) = out["runs"]
    assert run["nodes"] == ["node2", "node3", "node4"]
    assert (run["pending"], run["good"], run["world_size"]) == (["node3", "node4"], ["node2"], 3)


def test_acceptance_without_an_idle_node_runs_the_pending_nodes_alone() -> None:
    lines = ["cpu*|a|(null)|alloc|none", "cpu*|b|(null)|drain|acceptance: pending"]
    (run,) = smoke_layout(lines)["runs"]
    assert (run["nodes"], run["good"], run["world_size"]) == (["b"], [], 1)


def test_an_admin_drain_is_not_taken_for_a_pending_node() -> None:
    lines = [*LAB[:2], "gpu*|node2|gpu:1|drain|acceptance pending by hand"]
    out = smoke_layout(lines)
    assert out["runs"] == [] and "node2 is drain" in out["problems"][0]


def test_a_pending_node_that_does_not_answer_is_refused() -> None:
    lines = [*LAB[:2], "gpu*|node2|gpu:1|drain*|acceptance: pending"]
    out = smoke_layout(lines)
    assert out["runs"] == [] and "node2 is drain* (acceptance: pending)" in out["problems"][0]


def test_only_pending_runs_just_the_partitions_with_nodes_to_accept() -> None:
    lines = [
        "cpu|ctl|(null)|down*|Not responding",
        "gpu*|node1|gpu:2|idle|none",
        "gpu*|node2|gpu:1|drain|acceptance: pending",
    ]
    out = smoke_layout(lines, "all", only_pending=True)
    assert out["problems"] == []  # the cpu partition's down node is not this run's business
    assert [(r["partition"], r["nodes"], r["pending"]) for r in out["runs"]] == [
        ("gpu", ["node1", "node2"], ["node2"])
    ]
    assert smoke_layout(lines[1:2], "all", only_pending=True) == {"runs": [], "problems": []}


def test_a_pending_node_in_two_partitions_is_accepted_once_in_the_larger_job() -> None:
    # A first install: every node waits; node1 is also in `debug`.
    lines = [
        "gpu*|node1|gpu:1|drain|acceptance: pending",
        "gpu*|node2|gpu:1|drain|acceptance: pending",
        "debug|node1|gpu:1|drain|acceptance: pending",
    ]
    out = smoke_layout(lines, "all", only_pending=True)
    assert out["problems"] == []
    assert [(r["partition"], r["nodes"], r["pending"]) for r in out["runs"]] == [
        ("gpu", ["node1", "node2"], ["node1", "node2"])
    ]
    # Without only_pending the other partition runs on what is left of it.
    lines.append("debug|node5|gpu:1|idle|none")
    runs = smoke_layout(lines, "all")["runs"]
    assert [(r["partition"], r["nodes"], r["pending"]) for r in runs] == [
        ("gpu", ["node1", "node2"], ["node1", "node2"]),
        ("debug", ["node5"], []),
    ]


def test_a_pending_node_is_accepted_beside_a_known_good_node_where_it_can() -> None:
    lines = [
        "debug|node1|gpu:1|drain|acceptance: pending",
        "gpu*|node1|gpu:1|drain|acceptance: pending",
        "gpu*|node2|gpu:1|idle|none",
    ]
    (run,) = smoke_layout(lines, "all", only_pending=True)["runs"]
    assert (run["partition"], run["nodes"], run["good"]) == ("gpu", ["node1", "node2"], ["node2"])


# The lab of issue 24: one default partition with every node, GPU and CPU-only
# alike, and a second partition on one GPU node; with CPUs and memory.
MIXED = [
    "main*|ctl|(null)|idle|2|7000|none",
    "main*|node1|gpu:2|idle|2|7000|none",
    "main*|node2|gpu:1|idle|2|7000|none",
    "debug|node2|gpu:1|idle|2|7000|none",
]


def test_a_mixed_partition_runs_one_job_per_kind_of_node() -> None:
    out = smoke_layout(MIXED)
    assert out["problems"] == []
    assert [(r["label"], r["nodes"], r["gpu_job"], r["world_size"]) for r in out["runs"]] == [
        ("main-gpu", ["node1", "node2"], True, 3),
        ("main-cpu", ["ctl"], False, 1),
    ]
    assert {r["partition"] for r in out["runs"]} == {"main"}


def test_a_first_install_accepts_every_node_once_by_kind() -> None:
    lines = [
        line.replace("|idle|", "|drain|").replace("|none", "|acceptance: pending") for line in MIXED
    ]
    out = smoke_layout(lines, "all", only_pending=True)
    assert out["problems"] == []
    # No group has a node in service: each runs its pending nodes alone; node2,
    # also in debug, is proven once.
    assert [(r["label"], r["nodes"], r["pending"], r["good"]) for r in out["runs"]] == [
        ("main-gpu", ["node1", "node2"], ["node1", "node2"], []),
        ("main-cpu", ["ctl"], ["ctl"], []),
    ]


def test_a_pending_node_runs_beside_a_known_good_node_of_its_kind() -> None:
    lines = [*MIXED[:2], "main*|node2|gpu:1|drain|2|7000|acceptance: pending"]
    (gpu, cpu) = smoke_layout(lines)["runs"][:2]
    assert (gpu["nodes"], gpu["good"], gpu["pending"]) == (["node1", "node2"], ["node1"], ["node2"])
    assert cpu["label"] == "main-cpu" and cpu["pending"] == []


def test_every_partition_proves_a_node_once() -> None:
    runs = smoke_layout(MIXED, "all")["runs"]
    proven = [n for r in runs for n in r["nodes"]]
    assert sorted(proven) == ["ctl", "node1", "node2"]


def test_a_reason_with_a_bar_is_kept_whole() -> None:
    (run,) = smoke_layout(["p*|n|(null)|drain|2|4000|acceptance: a|b"], only_pending=True)["runs"]
    assert run["pending"] == ["n"]


@pytest.mark.parametrize(
    ("tail", "refused"),
    [
        (
            [
                "srun: error: Unable to allocate resources: Requested partition configuration "
                "not available now"
            ],
            True,
        ),
        (
            [
                "sbatch: error: Batch job submission failed: Requested node configuration is not "
                "available"
            ],
            True,
        ),
        (
            [
                "srun: error: Unable to allocate resources: Requested time limit is invalid "
                "(missing or exceeds some limit)"
            ],
            True,
        ),
        (["JobState=PENDING Reason=PartitionConfig"], True),
        (
            [
                "srun: error: node2: task 1: Exited with exit code 1",
                "ddp_smoke: rank 1 on node2 failed: parameters differ",
            ],
            False,
        ),
        (["srun: Job 12 step creation temporarily disabled, retrying"], False),
        ([], False),
    ],
)
def test_a_launch_slurm_refused_is_told_from_a_node_failure(tail, refused) -> None:
    assert bool(launch_refusal(tail)) is refused


def test_outcomes_one_per_mode_asked_for_a_missing_one_fails_named() -> None:
    srun = {"mode": "srun", "passed": True, "launch_rc": 0, "tail": []}
    launched = {
        "rc": 1,
        "stdout_lines": ["not json", json.dumps(srun), json.dumps({"mode": "other"})],
        "stderr_lines": ["srun: error: node2: task 1: Exited with exit code 1", "Killed"],
    }
    out = smoke_outcomes(launched, ["srun", "torchrun"], "gpu")
    assert out[0] == {"partition": "gpu", **srun}
    assert out[1]["partition"] == "gpu"
    assert out[1]["mode"] == "torchrun"
    assert out[1]["passed"] is False
    assert out[1]["cause"] == "no outcome: the mode runner stopped before it (exit 1): Killed"
    assert smoke_outcomes({}, ["srun"], "cpu")[0]["cause"].startswith("no outcome")


def test_refused_launches_leave_their_nodes_without_a_verdict() -> None:
    refused_tail = ["srun: error: Unable to allocate resources: Requested node configuration"]
    outcomes = [
        {"partition": "gpu", "mode": "srun", "passed": False, "tail": refused_tail},
        {"partition": "gpu", "mode": "spawn", "passed": False, "tail": ["rank 1 failed"]},
        {"partition": "cpu", "mode": "srun", "passed": True, "tail": refused_tail},
    ]
    assert smoke_refused(outcomes, "gpu") == [f"srun: {refused_tail[0]}"]
    assert smoke_refused(outcomes, "cpu") == []  # a passed launch is no refusal
    runs = [{"label": "gpu", "nodes": ["node1", "node2"]}, {"label": "cpu", "nodes": ["node3"]}]
    assert smoke_refused_nodes(outcomes, runs) == ["node1", "node2"]
