"""The torchrun and spawn launch modes, run for real on one simulated node."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from ddp_launch import child_env, free_port, run_cli, run_parallel, slurm_node_env

COLLECTIVES_ONLY = ("--checks", "collectives", "--expected-world-size", "2")


def read(path: Path) -> Any:  # noqa: ANN401 - parsed JSON
    return json.loads(path.read_text())


def test_torchrun_args_from_slurm_env() -> None:
    env = {**slurm_node_env("4242"), "SLURM_GPUS_ON_NODE": "4"}
    done = run_cli(["torchrun-args", "--timeout", "30"], env)
    assert done.returncode == 0, done.stderr
    assert shlex.split(done.stdout) == [
        "--nnodes=1",
        "--nproc-per-node=4",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=localhost:24242",
        "--rdzv-id=4242",
        "--rdzv-conf=join_timeout=30",
        "--max-restarts=0",
    ]


def test_torchrun_dry_run_prints_the_agent_command(tmp_path: Path) -> None:
    env = slurm_node_env("4242")
    args = ["torchrun", "--nproc-per-node", "2", "--rdzv-port", "29999", "--dry-run", "--"]
    done = run_cli([*args, "--result-dir", str(tmp_path), "--timeout", "9"], env)
    assert done.returncode == 0, done.stderr
    assert shlex.split(done.stdout) == [
        sys.executable,
        *("-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2"),
        *("--rdzv-backend=c10d", "--rdzv-endpoint=localhost:29999", "--rdzv-id=4242"),
        *("--rdzv-conf=join_timeout=9", "--max-restarts=0"),
        *("-m", "ddp_smoke", "run", "--mode", "torchrun"),
        *("--result-dir", str(tmp_path), "--timeout", "9"),
    ]


def test_torchrun_auto_counts_cuda_visible_devices(tmp_path: Path) -> None:
    env = {**slurm_node_env("4242"), "CUDA_VISIBLE_DEVICES": "0,1,2"}
    args = ["torchrun", "--nproc-per-node", "auto", "--rdzv-port", "29999", "--dry-run", "--"]
    done = run_cli([*args, "--result-dir", str(tmp_path)], env)
    assert done.returncode == 0, done.stderr
    assert "--nproc-per-node=3" in shlex.split(done.stdout)


def test_torchrun_rejects_bad_run_options(tmp_path: Path) -> None:
    done = run_cli(["torchrun", "--dry-run", "--", "--checks", "bogus"], slurm_node_env("1"))
    assert done.returncode == 2
    assert "unknown check group bogus" in done.stderr


def test_torchrun_needs_one_task_per_node() -> None:
    env = {**slurm_node_env("4242"), "SLURM_NTASKS": "8"}
    done = run_cli(["torchrun-args"], env)
    assert done.returncode == 1
    assert "one task per node (srun --ntasks-per-node=1): SLURM_NTASKS=8 on 1 nodes" in (
        done.stderr
    )


@pytest.mark.integration
def test_torchrun_mode(tmp_path: Path) -> None:
    """One node's torchrun agent, c10d rendezvous on localhost, two workers."""
    args = ["torchrun", "--nproc-per-node", "2", "--rdzv-port", str(free_port()), "--"]
    run_args = ["--result-dir", str(tmp_path), *COLLECTIVES_ONLY, "--label", "torchrun-c10d"]
    run_args += ["--measure", "sweep", "--sweep-sizes", "4K:64K"]
    done = run_cli([*args, *run_args], slurm_node_env("4242"))
    assert done.returncode == 0, done.stderr
    for rank in (0, 1):
        record = read(tmp_path / f"rank-{rank}.json")
        assert (record["mode"], record["label"], record["rendezvous"]) == (
            "torchrun",
            "torchrun-c10d",
            "env://",
        )
        assert (record["rank"], record["local_rank"], record["world_size"]) == (rank, rank, 2)
        assert (record["host"], record["job_id"], record["status"]) == ("nodeA", "4242", "pass")
    verdict = run_cli(["report", str(tmp_path), "--expected-world-size", "2"])
    assert verdict.returncode == 0, verdict.stderr
    body = json.loads(verdict.stdout)
    assert (body["mode"], body["label"], body["nodes"]) == ("torchrun", "torchrun-c10d", ["nodeA"])
    sweep = body["measurements"]["sweep"]
    assert [row["bytes"] for row in sweep["rows"]] == [4096, 16384, 65536]
    assert body["measurements"]["tcp"] is None
    assert body["tcp_Gbps"] is None


@pytest.mark.integration
def test_spawn_mode(tmp_path: Path) -> None:
    """One node process spawns two workers that meet at a file:// rendezvous."""
    args = ["run", "--mode", "spawn", "--nproc-per-node", "2", "--result-dir", str(tmp_path)]
    done = run_cli([*args, *COLLECTIVES_ONLY], slurm_node_env("4243"))
    assert done.returncode == 0, done.stderr
    for rank in (0, 1):
        record = read(tmp_path / f"rank-{rank}.json")
        assert (record["mode"], record["master"]) == ("spawn", None)
        assert record["rendezvous"] == (tmp_path / "rdzv-4243").as_uri()
        assert (record["rank"], record["local_rank"], record["world_size"]) == (rank, rank, 2)
        assert record["status"] == "pass"
    verdict = run_cli(["report", str(tmp_path), "--expected-world-size", "2"])
    assert verdict.returncode == 0, verdict.stderr
    assert json.loads(verdict.stdout)["mode"] == "spawn"
    # torch removes the rendezvous file once every rank has left.
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "rank-0.json",
        "rank-1.json",
        "result.json",
    ]


@pytest.mark.integration
def test_spawn_mode_on_uneven_nodes(tmp_path: Path) -> None:
    """Two node processes with --nproc-per-node auto: 2 GPUs on nodeA, 1 on nodeB."""
    nodes = [("nodeA", {"SLURM_GPUS_ON_NODE": "2"}), ("nodeB", {"CUDA_VISIBLE_DEVICES": "0"})]
    args = ["run", "--mode", "spawn", "--nproc-per-node", "auto", "--result-dir", str(tmp_path)]
    args += ["--checks", "collectives", "--expected-world-size", "3", "--timeout", "30"]
    envs = []
    for node, (host, gpus) in enumerate(nodes):
        env = {**slurm_node_env("4244", host), "SLURM_NTASKS": "2", "SLURM_NNODES": "2"}
        env.update(SLURM_STEP_NUM_NODES="2", SLURM_PROCID=str(node), SLURM_NODEID=str(node))
        envs.append(child_env({**env, **gpus}))
    done = run_parallel([(args, env) for env in envs])
    assert [node.returncode for node in done] == [0, 0], [node.stderr for node in done]
    records = [read(tmp_path / f"rank-{rank}.json") for rank in (0, 1, 2)]
    layout = [(r["rank"], r["local_rank"], r["world_size"], r["host"]) for r in records]
    assert layout == [(0, 0, 3, "nodeA"), (1, 1, 3, "nodeA"), (2, 0, 3, "nodeB")]
    assert all(record["status"] == "pass" for record in records)
    verdict = run_cli(["report", str(tmp_path), "--expected-world-size", "3"])
    assert verdict.returncode == 0, verdict.stderr
    # The worker counts' file and the rendezvous file are gone once every node left.
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "rank-0.json",
        "rank-1.json",
        "rank-2.json",
        "result.json",
    ]


@pytest.mark.integration
def test_spawn_mode_fails_when_a_node_never_reports(tmp_path: Path) -> None:
    env = {**slurm_node_env("4245"), "SLURM_NTASKS": "2", "SLURM_NNODES": "2"}
    env["SLURM_STEP_NUM_NODES"] = "2"
    args = ["run", "--mode", "spawn", "--result-dir", str(tmp_path), "--timeout", "1"]
    done = run_cli(args, env)
    assert done.returncode == 1
    assert "ddp_smoke: FAIL node 0 on nodeA: node(s) 1 did not report their worker count" in (
        done.stderr
    )
    assert list(tmp_path.glob("rank-*.json")) == []


def test_spawn_mode_needs_one_task_per_node(tmp_path: Path) -> None:
    env = {**slurm_node_env("4243"), "SLURM_NTASKS": "2", "SLURM_PROCID": "1"}
    done = run_cli(["run", "--mode", "spawn", "--result-dir", str(tmp_path)], env)
    assert done.returncode == 1
    assert "this mode needs one task per node" in done.stderr
