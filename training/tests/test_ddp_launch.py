"""Launch-mode environments, the CLI's run options and interface selection (no ranks started)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ddp_smoke import launch
from ddp_smoke.cli import build_parser, run_options
from ddp_smoke.launch import CHECK_GROUPS, MEASURE_GROUPS, RunOptions, SlurmContext, parse_groups

TORCHRUN_ENV = {
    "RANK": "5",
    "WORLD_SIZE": "8",
    "LOCAL_RANK": "1",
    "GROUP_RANK": "1",
    "MASTER_ADDR": "gpu01",
    "MASTER_PORT": "24242",
    "TORCHELASTIC_RUN_ID": "4242",
    "SLURMD_NODENAME": "gpu02",
}
NODE_ENV = {
    "SLURM_JOB_ID": "4242",
    "SLURM_STEP_ID": "3",
    "SLURM_NTASKS": "2",
    "SLURM_PROCID": "1",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NODELIST": "gpu[01-02]",
    "SLURMD_NODENAME": "gpu02",
    "SLURM_GPUS_ON_NODE": "4",
}


def no_scontrol(_name: str) -> None:
    return None


def options(tmp_path: Path, mode: str, **changes: object) -> RunOptions:
    base = RunOptions(tmp_path, None, 3, 120.0, None, 1234, mode=mode)
    return RunOptions(**{**base.__dict__, **changes})


def test_torchrun_context() -> None:
    assert launch.torchrun_context(TORCHRUN_ENV) == SlurmContext(
        rank=5,
        world_size=8,
        local_rank=1,
        job_id="4242",
        host="gpu02",
        master_addr="gpu01",
        master_port=24242,
        mode="torchrun",
        init_method="env://",
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"RANK": None}, "RANK is not set: launch the workers with torchrun"),
        ({"RANK": "8"}, "RANK=8 is not below WORLD_SIZE=8"),
        ({"MASTER_PORT": None}, "MASTER_PORT is not set"),
    ],
)
def test_torchrun_context_rejects(change: dict[str, str | None], message: str) -> None:
    merged = {**TORCHRUN_ENV, **change}
    env = {key: value for key, value in merged.items() if value is not None}
    with pytest.raises(ValueError, match=message):
        launch.torchrun_context(env)


def test_spawn_plan_ranks(tmp_path: Path) -> None:
    plan = launch.spawn_plan(NODE_ENV, None, tmp_path)
    assert (plan.node_rank, plan.nodes, plan.nproc_per_node, plan.world_size) == (1, 2, 4, 8)
    assert plan.init_method == (tmp_path / "rdzv-4242.3").as_uri()
    worker = plan.context(2)
    assert (worker.rank, worker.local_rank, worker.world_size) == (6, 2, 8)
    assert (worker.host, worker.mode, worker.master) == ("gpu02", "spawn", None)
    assert worker.rendezvous == plan.init_method
    assert launch.spawn_plan(NODE_ENV, 2, tmp_path).context(1).rank == 3


def test_spawn_plan_placed_on_uneven_nodes(tmp_path: Path) -> None:
    """Node 1 of nodes with 2 and 1 workers: its worker 0 is rank 2 of 3."""
    plan = launch.spawn_plan({**NODE_ENV, "SLURM_GPUS_ON_NODE": "1"}, None, tmp_path)
    assert (plan.nproc_per_node, plan.workers, plan.world_size) == (1, (1, 1), 2)
    placed = plan.placed((2, 1))
    assert (placed.first_rank, placed.world_size) == (2, 3)
    worker = placed.context(0)
    assert (worker.rank, worker.local_rank, worker.world_size) == (2, 0, 3)
    assert placed.counts_file == tmp_path / "rdzv-4242.3.workers"
    first = launch.spawn_plan({**NODE_ENV, "SLURM_PROCID": "0"}, 2, tmp_path).placed((2, 1))
    assert [first.context(local).rank for local in (0, 1)] == [0, 1]
    with pytest.raises(ValueError, match="node 1 starts 1 workers, but 2 were reported for it"):
        plan.placed((1, 2))
    with pytest.raises(ValueError, match=r"worker counts \[1\] do not fit 2 nodes"):
        plan.placed((1,))


@pytest.mark.parametrize(
    ("env", "count"),
    [
        ({"SLURM_GPUS_ON_NODE": "4", "CUDA_VISIBLE_DEVICES": "0,1"}, 4),
        ({"CUDA_VISIBLE_DEVICES": "0,1,2"}, 3),
        ({"CUDA_VISIBLE_DEVICES": "GPU-1a2b,,GPU-3c4d,"}, 2),
        ({"CUDA_VISIBLE_DEVICES": ""}, 1),
        ({"SLURM_GPUS_ON_NODE": "", "CUDA_VISIBLE_DEVICES": " , "}, 1),
        ({}, 1),
    ],
)
def test_gpus_on_node(env: dict[str, str], count: int) -> None:
    assert launch.gpus_on_node(env) == count


def test_gpus_on_node_rejects_a_bad_slurm_count() -> None:
    with pytest.raises(ValueError, match="SLURM_GPUS_ON_NODE=0 is below 1"):
        launch.gpus_on_node({"SLURM_GPUS_ON_NODE": "0", "CUDA_VISIBLE_DEVICES": "0"})


def test_auto_workers_follow_cuda_visible_devices(tmp_path: Path) -> None:
    env = {k: v for k, v in NODE_ENV.items() if k != "SLURM_GPUS_ON_NODE"}
    env["CUDA_VISIBLE_DEVICES"] = "0,1,2"
    assert launch.spawn_plan(env, None, tmp_path).nproc_per_node == 3
    options = launch.torchrun_options(env, None, None, 60.0, which=no_scontrol)
    assert options[1] == "--nproc-per-node=3"
    assert launch.torchrun_options(env, 2, None, 60.0, which=no_scontrol)[1] == "--nproc-per-node=2"


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--mode", "spawn", "--result-dir", "r", "--nproc-per-node"],
        ["torchrun", "--nproc-per-node"],
        ["torchrun-args", "--nproc-per-node"],
    ],
)
def test_nproc_per_node_is_auto_or_a_positive_integer(command: list[str]) -> None:
    parser = build_parser()
    assert parser.parse_args([*command, "auto"]).nproc_per_node is None
    assert parser.parse_args([*command, "AUTO"]).nproc_per_node is None
    assert parser.parse_args([*command, "3"]).nproc_per_node == 3
    assert parser.parse_args(command[:-1]).nproc_per_node is None  # the default is auto
    for bad in ("0", "two", "-1"):
        with pytest.raises(SystemExit) as caught:
            parser.parse_args([*command, bad])
        assert caught.value.code == 2


def test_spawn_plan_needs_one_task_per_node(tmp_path: Path) -> None:
    env = {**NODE_ENV, "SLURM_NTASKS": "8", "SLURM_PROCID": "5"}
    with pytest.raises(ValueError, match=r"needs one task per node .* SLURM_NTASKS=8 on 2 nodes"):
        launch.spawn_plan(env, None, tmp_path)


def test_torchrun_options() -> None:
    assert launch.torchrun_options(NODE_ENV, None, None, 60.0, which=no_scontrol) == [
        "--nnodes=2",
        "--nproc-per-node=4",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=gpu01:24242",
        "--rdzv-id=4242",
        "--rdzv-conf=join_timeout=60",
        "--max-restarts=0",
    ]
    ipv6 = {**NODE_ENV, "MASTER_ADDR": "fd00::1"}
    given = launch.torchrun_options(ipv6, 8, 29500, 0.2, which=no_scontrol)
    assert given[1] == "--nproc-per-node=8"
    assert given[3] == "--rdzv-endpoint=[fd00::1]:29500"
    assert given[5] == "--rdzv-conf=join_timeout=1"


def test_resolve_picks_the_mode(tmp_path: Path) -> None:
    srun_env = {**NODE_ENV, "SLURM_LOCALID": "0"}
    srun = launch.resolve(options(tmp_path, "srun"), srun_env)
    assert isinstance(srun, SlurmContext)
    assert (srun.mode, srun.rank, srun.rendezvous) == ("srun", 1, "tcp://gpu01:24242")
    assert launch.resolve(options(tmp_path, "torchrun"), TORCHRUN_ENV).mode == "torchrun"
    plan = launch.resolve(options(tmp_path, "spawn", rdzv_dir=tmp_path / "r"), NODE_ENV)
    assert isinstance(plan, launch.SpawnPlan)
    assert plan.init_method == (tmp_path / "r" / "rdzv-4242.3").as_uri()


def test_select_interface_sets_gloo_and_nccl(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in launch.IFACE_VARIABLES:
        monkeypatch.setenv(name, "placeholder")  # restored after the test
    env = launch.select_interface("lo", {"PATH": "/bin"})
    assert env == {"PATH": "/bin", "GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}
    assert (os.environ["GLOO_SOCKET_IFNAME"], os.environ["NCCL_SOCKET_IFNAME"]) == ("lo", "lo")
    assert launch.iface_report("lo", env) == {
        "requested": "lo",
        "GLOO_SOCKET_IFNAME": "lo",
        "NCCL_SOCKET_IFNAME": "lo",
    }
    assert launch.select_interface(None, {"A": "1"}) == {"A": "1"}


def test_select_interface_rejects_a_missing_interface() -> None:
    with pytest.raises(ValueError, match="network interface 'nosuch0' does not exist here"):
        launch.select_interface("nosuch0", {})


@pytest.mark.parametrize(
    ("text", "groups"),
    [("all", set(CHECK_GROUPS)), ("none", set()), ("data, train", {"data", "train"})],
)
def test_parse_groups(text: str, groups: set[str]) -> None:
    assert parse_groups(text, CHECK_GROUPS, "check group") == groups


def test_parse_groups_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="unknown measurement bogus: choose from sweep"):
        parse_groups("sweep,bogus", MEASURE_GROUPS, "measurement")


def test_run_options_defaults_per_mode(tmp_path: Path) -> None:
    parser = build_parser()
    srun = run_options(parser.parse_args(["run", "--result-dir", str(tmp_path)]))
    assert (srun.mode, srun.run_label, srun.checks) == ("srun", "srun", set(CHECK_GROUPS))
    assert srun.measure.groups == set(MEASURE_GROUPS)
    assert srun.measure.sweep_sizes == tuple(4096 * 4**power for power in range(8))
    assert (srun.measure.tcp_bytes, srun.measure.straggler_ratio) == (64 << 20, 1.5)
    assert (srun.measure.min_busbw_gbps, srun.measure.max_straggler_ratio) == (None, None)
    args = ["run", "--result-dir", str(tmp_path), "--mode", "spawn", "--label", "x"]
    spawn = run_options(parser.parse_args(args))
    assert (spawn.run_label, spawn.measure.groups) == ("x", set())


def test_run_options_floors_and_sweep(tmp_path: Path) -> None:
    args = ["run", "--result-dir", str(tmp_path), "--measure", "sweep", "--sweep-sizes", "1M:8M"]
    args += ["--sweep-factor", "2", "--min-busbw-gbps", "25", "--max-straggler-ratio", "1.2"]
    chosen = run_options(build_parser().parse_args(args)).measure
    assert chosen.groups == {"sweep"}
    assert chosen.sweep_sizes == (1 << 20, 2 << 20, 4 << 20, 8 << 20)
    assert (chosen.min_busbw_gbps, chosen.max_straggler_ratio) == (25.0, 1.2)


@pytest.mark.parametrize(
    "bad",
    [
        ["--checks", "nope"],
        ["--measure", "sweep,x"],
        ["--sweep-sizes", "64M"],
        ["--sweep-factor", "1"],
        ["--max-straggler-ratio", "0.5"],
        ["--mode", "mpirun"],
    ],
)
def test_run_rejects_bad_options(tmp_path: Path, bad: list[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(["run", "--result-dir", str(tmp_path), *bad])
    assert caught.value.code == 2


RUN_ARGS = ["--result-dir=/shared/runs/1/srun", "--expected-world-size=3", "--epochs=3"]
RUN_ARGS += ["--timeout=120", "--iface=ib0", "--min-busbw-gbps=25", "--max-straggler-ratio=1.5"]
GPU_CHECK = ["--expected-world-size", "8", "--timeout", "120", "--measure", "sweep"]


@pytest.mark.parametrize(
    "argv",
    [
        # The command lines of roles/smoke_train (vars/main.yml, tasks/, templates/).
        ["run", "--mode=srun", *RUN_ARGS],
        ["torchrun", "--nproc-per-node", "auto", "--", "--measure=sweep", *RUN_ARGS],
        ["torchrun", "--nproc-per-node", "4", "--", "--measure=sweep", *RUN_ARGS],
        ["sbatch", "--poll=1", "--start-timeout=30", "/shared/runs/1/sbatch/smoke.sbatch"],
        ["run", "--mode=spawn", "--measure=sweep", "--nproc-per-node=auto", *RUN_ARGS],
        ["run", "--mode=spawn", "--measure=sweep", "--nproc-per-node=2", *RUN_ARGS],
        ["run", "--mode=srun", "--label=sbatch", "--measure=none", *RUN_ARGS],
        ["report", "/shared/r", "--expected-world-size=3", "--format=text", "--out=/r/x.json"],
        ["plot", "/r/srun.json", "/r/spawn.json", "--out", "/r/smoke.png"],
        # tools/gpu_check.py, under torchrun --standalone.
        ["run", "--mode", "torchrun", "--label", "gpu-check", "--result-dir", "/r", *GPU_CHECK],
    ],
)
def test_the_callers_command_lines_parse(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    if args.command == "torchrun":
        assert args.nproc_per_node in (None, 4)
        run = build_parser().parse_args(["run", *args.run_args])
        assert (run.measure, run.expected_world_size, run.iface) == ({"sweep"}, 3, "ib0")
    elif args.command == "sbatch":
        assert (args.poll, args.start_timeout, args.script) == (1.0, 30.0, argv[-1])
    elif args.command == "run":
        assert run_options(args).mode in ("srun", "spawn", "torchrun")
