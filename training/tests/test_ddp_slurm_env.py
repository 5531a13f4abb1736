from __future__ import annotations

import stat
from pathlib import Path

import pytest

from ddp_smoke.launch import (
    SlurmContext,
    derive_port,
    expand_hostlist,
    resolve_hostlist,
    srun_context,
)


def no_scontrol(_name: str) -> None:
    return None


BASE_ENV = {
    "SLURM_PROCID": "3",
    "SLURM_NTASKS": "8",
    "SLURM_LOCALID": "1",
    "SLURM_JOB_ID": "4242",
    "SLURM_STEP_NODELIST": "gpu[07-10]",
    "SLURM_JOB_NODELIST": "gpu[01-10]",
    "SLURMD_NODENAME": "gpu08",
}


@pytest.mark.parametrize(
    ("expr", "hosts"),
    [
        ("localhost", ["localhost"]),
        ("a,b", ["a", "b"]),
        (
            "node[01-03,07],gpu-a1",
            ["node01", "node02", "node03", "node07", "gpu-a1"],
        ),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("n[098-101]", ["n098", "n099", "n100", "n101"]),
        ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
        ("gpu[1,3]-ib", ["gpu1-ib", "gpu3-ib"]),
        (" x1 , y[2-3] ", ["x1", "y2", "y3"]),
    ],
)
def test_expand_hostlist(expr: str, hosts: list[str]) -> None:
    assert expand_hostlist(expr) == hosts


@pytest.mark.parametrize(
    "expr", ["", ",", "node[1-", "node]1[", "node[3-1]", "node[a-b]", "node[]", "n[[1]]"]
)
def test_expand_hostlist_rejects_malformed(expr: str) -> None:
    with pytest.raises(ValueError, match="host"):
        expand_hostlist(expr)


def test_expand_hostlist_rejects_huge_ranges() -> None:
    with pytest.raises(ValueError, match="too large"):
        expand_hostlist("n[0-99999999]")


def fake_scontrol(tmp_path: Path, body: str) -> str:
    script = tmp_path / "scontrol"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_resolve_hostlist_without_scontrol_uses_python() -> None:
    assert resolve_hostlist("node[1-2]", scontrol=None) == ["node1", "node2"]


def test_resolve_hostlist_prefers_scontrol(tmp_path: Path) -> None:
    scontrol = fake_scontrol(tmp_path, 'echo "$1 $2 $3" >&2; printf "alpha\\nbeta\\n"')
    assert resolve_hostlist("node[1-2]", scontrol=scontrol) == ["alpha", "beta"]


def test_resolve_hostlist_falls_back_when_scontrol_fails(tmp_path: Path) -> None:
    scontrol = fake_scontrol(tmp_path, "echo 'no slurm.conf' >&2; exit 1")
    assert resolve_hostlist("node[1-2]", scontrol=scontrol) == ["node1", "node2"]


@pytest.mark.parametrize(
    ("job_id", "port"), [("0", 20000), ("4242", 24242), ("123456", 23456), ("9999", 29999)]
)
def test_derive_port(job_id: str, port: int) -> None:
    assert derive_port(job_id) == port


@pytest.mark.parametrize("job_id", ["abc", "-5", ""])
def test_derive_port_rejects_bad_job_ids(job_id: str) -> None:
    with pytest.raises(ValueError, match="SLURM_JOB_ID"):
        derive_port(job_id)


def test_from_env_reads_slurm_variables() -> None:
    assert srun_context(BASE_ENV, which=no_scontrol) == SlurmContext(
        rank=3,
        world_size=8,
        local_rank=1,
        job_id="4242",
        host="gpu08",
        master_addr="gpu07",
        master_port=24242,
    )


def test_from_env_falls_back_to_job_nodelist() -> None:
    env = {k: v for k, v in BASE_ENV.items() if k != "SLURM_STEP_NODELIST"}
    assert srun_context(env, which=no_scontrol).master_addr == "gpu01"


def test_from_env_overrides() -> None:
    env = {**BASE_ENV, "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500", "LOCAL_RANK": "0"}
    ctx = srun_context(env, which=no_scontrol)
    assert (ctx.master_addr, ctx.master_port, ctx.local_rank) == ("10.0.0.5", 29500, 0)
    assert srun_context(env, master_port=31000, which=no_scontrol).master_port == 31000


def test_from_env_without_slurmd_nodename_uses_hostname() -> None:
    env = {k: v for k, v in BASE_ENV.items() if k != "SLURMD_NODENAME"}
    assert srun_context(env, which=no_scontrol).host != ""


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"SLURM_PROCID": None}, "SLURM_PROCID is not set"),
        ({"SLURM_NTASKS": None}, "SLURM_NTASKS is not set"),
        ({"SLURM_LOCALID": None}, "SLURM_LOCALID is not set"),
        ({"SLURM_PROCID": "8"}, "SLURM_PROCID=8 is not below SLURM_NTASKS=8"),
        ({"SLURM_NTASKS": "two"}, "SLURM_NTASKS='two' is not an integer"),
        ({"SLURM_NTASKS": "0"}, "SLURM_NTASKS=0 is below 1"),
        ({"SLURM_STEP_NODELIST": None, "SLURM_JOB_NODELIST": None}, "neither MASTER_ADDR"),
        ({"SLURM_JOB_ID": None}, "SLURM_JOB_ID is not set"),
        ({"MASTER_PORT": "70000"}, "master port 70000 is outside"),
    ],
)
def test_from_env_rejects(change: dict[str, str | None], message: str) -> None:
    merged = {**BASE_ENV, **change}
    env = {key: value for key, value in merged.items() if value is not None}
    with pytest.raises(ValueError, match=message):
        srun_context(env, which=no_scontrol)


# srun --ntasks=3 over two nodes of 2 and 1 tasks: Slurm numbers the tasks itself.
UNEVEN_ENV = {
    "SLURM_NTASKS": "3",
    "SLURM_NNODES": "2",
    "SLURM_TASKS_PER_NODE": "2(x1),1",
    "SLURM_JOB_ID": "4242",
    "SLURM_STEP_NODELIST": "gpu[01-02]",
}


@pytest.mark.parametrize(
    ("procid", "nodeid", "localid", "host"),
    [("0", "0", "0", "gpu01"), ("1", "0", "1", "gpu01"), ("2", "1", "0", "gpu02")],
)
def test_srun_context_on_uneven_nodes(procid: str, nodeid: str, localid: str, host: str) -> None:
    """World size, rank and local rank are Slurm's, never world / nodes."""
    env = {
        **UNEVEN_ENV,
        "SLURM_PROCID": procid,
        "SLURM_NODEID": nodeid,
        "SLURM_LOCALID": localid,
        "SLURMD_NODENAME": host,
    }
    assert srun_context(env, which=no_scontrol) == SlurmContext(
        rank=int(procid),
        world_size=3,
        local_rank=int(localid),
        job_id="4242",
        host=host,
        master_addr="gpu01",
        master_port=24242,
    )
