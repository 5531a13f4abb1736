"""The smoke job and the gate fitted to an uneven lab: one default partition mixing
GPU and CPU-only nodes, a second partition on one GPU node, GPU counts per node."""

from __future__ import annotations

import json
import time

from conftest import RESULTS, host

CTL = host("ctl")
SRUN_ONLY = '{"smoke_train_modes": ["srun"]}'


def newest_summary() -> dict:
    """The newest smoke_train.yml verdict (results/<cluster>/<run id>.json; not the doctor's)."""
    found = []
    for path in RESULTS.glob("*.json"):
        if path.name.startswith(("doctor-", "fault-suite")):
            continue
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "partitions" in data:
            found.append((path.stat().st_mtime, data))
    assert found, f"no smoke verdict in {RESULTS}"
    return max(found, key=lambda f: f[0])[1]


def states() -> dict[str, str]:
    out = CTL.check_output("sinfo --noheader --Node --format='%N|%t|%E'")
    return {line.split("|")[0]: "|".join(line.split("|")[1:]) for line in out.splitlines()}


def test_slurm_sees_the_mixed_layout() -> None:
    out = CTL.check_output("sinfo --noheader --Node --format='%P %N %G' | sort")
    assert out.splitlines() == [
        "debug node2 gpu:1",
        "main* ctl (null)",
        "main* node1 gpu:2",
        "main* node2 gpu:1",
    ]
    # The inventory name gpu-big is node1 to Slurm.
    assert host("gpu-big").check_output("hostname") == "node1"
    # A fully qualified inventory name: the node is its short name in Slurm.
    assert host("node2.lab.example").check_output("hostname") == "node2"


def test_the_first_site_yml_accepted_every_node() -> None:
    # The gate ran one job per kind in `main` (node2 once, though in `debug` too).
    assert states() == {"ctl": "idle|none", "node1": "idle|none", "node2": "idle|none"}


def test_the_default_partition_runs_one_job_per_kind(run_playbook) -> None:
    done = run_playbook("smoke_train.yml")
    out = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 0, out[-4000:]
    assert "partition main-gpu: 3 ranks on 2 nodes (node1, node2)" in out
    assert "partition main-cpu: 1 ranks on 1 nodes (ctl)" in out
    summary = newest_summary()
    assert summary["verdict"] == "PASS"
    layout = {p["label"]: p for p in summary["partitions"]}
    assert layout["main-gpu"]["gpus"] == {"node1": 2, "node2": 1}
    assert layout["main-gpu"]["world_size"] == 3 and layout["main-cpu"]["world_size"] == 1
    run = RESULTS / summary["run_id"]
    for mode in ("srun", "torchrun", "sbatch", "spawn"):
        report = json.loads((run / "main-gpu" / f"{mode}.json").read_text())
        assert report["verdict"] == "PASS", mode
        assert report["world_size"] == 3, mode
        assert sorted(report["nodes"]) == ["node1", "node2"], mode
        cpu = json.loads((run / "main-cpu" / f"{mode}.json").read_text())
        assert (cpu["verdict"], cpu["nodes"]) == ("PASS", ["ctl"]), mode


def test_every_partition_proves_each_node_once(run_playbook) -> None:
    done = run_playbook("smoke_train.yml", "-e", "smoke_train_partitions=all", "-e", SRUN_ONLY)
    assert done.returncode == 0, done.stdout[-3000:]
    labels = [p["label"] for p in newest_summary()["partitions"]]
    assert labels == ["main-gpu", "main-cpu"]  # debug's node2 is proven in main


def test_a_fault_on_one_node_of_the_mixed_partition_drains_it_alone(run_playbook) -> None:
    CTL.check_output("scontrol update nodename=node1 state=drain reason='acceptance: pending'")
    try:
        # Rank 1 is node1's second GPU (node1 holds ranks 0-1, node2 rank 2).
        done = run_playbook(
            "smoke_train.yml",
            "-e",
            '{"smoke_train_modes": ["srun"], "smoke_train_fault": "perturb_params:1"}',
        )
        out = " ".join((done.stdout + done.stderr).split())
        assert done.returncode != 0, out[-3000:]
        now = states()
        assert now["node1"].startswith("drain|acceptance: "), now
        assert "pending" not in now["node1"], now
        assert (now["node2"], now["ctl"]) == ("idle|none", "idle|none"), now
    finally:
        CTL.run("scontrol update nodename=node1 state=drain reason='acceptance: pending'")
        healed = run_playbook("smoke_train.yml", "-e", SRUN_ONLY)
    assert healed.returncode == 0, healed.stdout[-3000:]
    assert states()["node1"] == "idle|none"


def test_a_request_slurm_refuses_leaves_the_node_as_it_was(run_playbook) -> None:
    CTL.check_output("scontrol update nodename=ctl state=drain reason='acceptance: pending'")
    try:
        # Longer than the partition's MaxTime (1 day): Slurm refuses the request itself.
        done = run_playbook(
            "smoke_train.yml",
            "-e",
            '{"smoke_train_modes": ["srun"], "smoke_train_time_limit": 2000, '
            '"smoke_train_immediate": 5}',
        )
        out = " ".join((done.stdout + done.stderr).split())
        assert done.returncode != 0, out[-3000:]
        assert (
            "Slurm refused the request itself, no rank ran; the nodes are left as they were" in out
        )
        assert states()["ctl"] == "drain|acceptance: pending"
    finally:
        healed = run_playbook("smoke_train.yml", "-e", SRUN_ONLY)
    assert healed.returncode == 0, healed.stdout[-3000:]
    assert states()["ctl"] == "idle|none"


def test_a_request_slurm_cannot_satisfy_is_refused_in_seconds(run_playbook) -> None:
    for extra, words in (
        (
            "smoke_train_nodes=3",
            "partition main (gpu nodes) has 2 node(s) (node1, node2) but smoke_train_nodes=3",
        ),
        ("smoke_train_partition=big", "partition big does not exist or has no nodes"),
    ):
        start = time.monotonic()
        done = run_playbook("smoke_train.yml", "-e", extra)
        took = time.monotonic() - start
        out = " ".join(done.stdout.split())
        assert done.returncode != 0
        assert words in out, out[-3000:]
        assert "Launch mode" not in out  # nothing was submitted
        print(f"refused in {took:.1f} s: {extra}")
