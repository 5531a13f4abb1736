"""Margin, overrides, GPU counts, gres and change classification (slurm_common filters)."""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins/filter"))
import slurm_conf as f

DGX = {
    "cpus": 224,
    "boards": 1,
    "sockets_per_board": 2,
    "cores_per_socket": 56,
    "threads_per_core": 2,
    "real_memory": 2063937,
    "gpus": [{"index": i, "file": f"/dev/nvidia{i}", "type": "h100"} for i in range(8)],
    "gpu_source": "nvidia-smi",
}
CONTAINER = {
    "cpus": 2,
    "boards": 1,
    "sockets_per_board": 1,
    "cores_per_socket": 2,
    "threads_per_core": 1,
    "real_memory": 24105,
    "gpus": [{"index": 0, "file": "/dev/nvidia0", "type": ""}],
    "gpu_source": "dev",
}


def test_realmemory_margin() -> None:
    assert f.node_definition(CONTAINER, 5)["RealMemory"] == 22899
    assert f.node_definition(DGX, 3)["RealMemory"] == 2002018
    assert f.node_definition(DGX, 0)["RealMemory"] == 2063937


def test_layout_copied_from_slurmd() -> None:
    assert f.node_definition(DGX, 5) == {
        "CPUs": 224,
        "Boards": 1,
        "SocketsPerBoard": 2,
        "CoresPerSocket": 56,
        "ThreadsPerCore": 2,
        "RealMemory": 1960740,
    }


def test_override_below_reported_is_used() -> None:
    assert f.node_definition(DGX, 5, {"RealMemory": 1900000})["RealMemory"] == 1900000
    assert f.node_problems(DGX, "gpu01", {"RealMemory": 1900000}, 8) == []


def test_override_above_reported_names_host_field_and_values() -> None:
    problems = f.node_problems(DGX, "gpu01", {"RealMemory": 2100000}, 8)
    assert problems == [
        "gpu01: slurm_compute_node_overrides.RealMemory=2100000 is above what slurmd reports "
        "(2063937); slurmd would drain the node. Lower it or remove the override"
    ]


def test_unknown_override_field() -> None:
    assert "unknown field Gpus" in f.node_problems(DGX, "gpu01", {"Gpus": 1}, 8)[0]


@pytest.mark.parametrize(("configured", "ok"), [(8, True), (4, False), (0, False)])
def test_gpu_count_must_match(configured: int, ok: bool) -> None:
    problems = f.node_problems(DGX, "gpu01", {}, configured)
    assert (problems == []) is ok
    if not ok:
        assert problems[0] == (
            f"gpu01: slurm_compute_gpus={configured} but the node has 8 GPU(s) (nvidia-smi); "
            "set slurm_compute_gpus: 8 or fix the node"
        )


def test_gres_spec_and_lines() -> None:
    assert f.gres_spec(DGX["gpus"]) == "gpu:h100:8"
    assert f.gres_spec(CONTAINER["gpus"]) == "gpu:1"
    assert f.gres_spec([]) == ""
    assert f.gres_lines(CONTAINER["gpus"], False) == ["Name=gpu File=/dev/nvidia0"]
    assert f.gres_lines(DGX["gpus"], True) == ["AutoDetect=nvml"]
    assert f.gres_lines(DGX["gpus"], False)[7] == "Name=gpu Type=h100 File=/dev/nvidia7"
    assert f.gres_lines([], True) == []


BASE = """\
# managed
ClusterName=lab
SlurmctldHost=ctl
ProctrackType=proctrack/cgroup
ReturnToService=2
NodeName=node1 CPUs=2 RealMemory=22899 Gres=gpu:1 State=UNKNOWN
NodeName=node2 CPUs=2 RealMemory=22899 Gres=gpu:1 State=UNKNOWN
PartitionName=main Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP
"""


@pytest.mark.parametrize(
    ("new", "expected"),
    [
        (BASE, "none"),
        (BASE.replace("# managed", "# managed by ansible"), "none"),
        (BASE.replace("MaxTime=INFINITE", "MaxTime=2-00:00:00"), "reconfigure"),
        (BASE.replace("ReturnToService=2", "ReturnToService=1"), "reconfigure"),
        (BASE + "PartitionName=cpu Nodes=node2 MaxTime=1:00:00 State=UP\n", "reconfigure"),
        (BASE.replace("proctrack/cgroup", "proctrack/linuxproc"), "restart"),
        (BASE + "NodeName=node3 CPUs=2 RealMemory=22899 State=UNKNOWN\n", "nodes"),
        (BASE + "AccountingStorageTRES=gres/gpu\n", "restart"),
        (
            BASE.replace("NodeName=node2 CPUs=2 RealMemory=22899 Gres=gpu:1 State=UNKNOWN\n", ""),
            "nodes",
        ),
        (
            BASE.replace(
                "RealMemory=22899 Gres=gpu:1 State=UNKNOWN\nNodeName=node2",
                "RealMemory=20000 Gres=gpu:1 State=UNKNOWN\nNodeName=node2",
            ),
            "nodes",
        ),
    ],
    ids=[
        "same",
        "comment",
        "maxtime",
        "rts",
        "new-partition",
        "plugin",
        "add-node",
        "tres",
        "remove-node",
        "node-memory",
    ],
)
def test_change_classification(new: str, expected: str) -> None:
    assert f.slurm_conf_change(BASE, new) == expected


def test_a_node_change_with_a_restart_key_is_a_restart() -> None:
    new = BASE.replace("proctrack/cgroup", "proctrack/linuxproc") + "NodeName=node3 CPUs=2\n"
    assert f.slurm_conf_change(BASE, new) == "restart"


def test_configless_is_switched_on_by_a_restart() -> None:
    assert f.slurm_conf_change(BASE, BASE + "SlurmctldParameters=enable_configless\n") == "restart"


GRES = """# managed
NodeName=node1 Name=gpu File=/dev/nvidia0
NodeName=node2 Name=gpu File=/dev/nvidia0
# node3: no GPUs.
"""


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (GRES, GRES, []),
        (GRES, GRES.replace("# managed", "# managed by ansible"), []),
        (GRES, GRES + "NodeName=node2 Name=gpu File=/dev/nvidia1\n", ["node2"]),
        (GRES, GRES.replace("NodeName=node1 Name=gpu File=/dev/nvidia0\n", ""), ["node1"]),
        (GRES, GRES.replace("# node3: no GPUs.", "NodeName=node3 AutoDetect=nvml"), ["node3"]),
        (None, GRES, ["node1", "node2"]),
    ],
    ids=["same", "comment", "gpu-added", "gpu-gone", "new-gpu-node", "first-install"],
)
def test_gres_changed_nodes(old: str | None, new: str, expected: list) -> None:
    assert f.gres_changed_nodes(old, new) == expected


def test_stale_copies_first_node_wins() -> None:
    lines = [
        "removed '/etc/slurm/slurm.conf'",
        "stale slurm.conf " + base64.b64encode(b"ClusterName=a\n").decode(),
        "stale slurm.conf " + base64.b64encode(b"ClusterName=b\n").decode(),
        "stale gres.conf " + base64.b64encode(b"").decode(),
    ]
    assert f.stale_copies(lines) == {"slurm.conf": "ClusterName=a\n", "gres.conf": ""}
    assert f.stale_copies([]) == {}


def test_first_install_is_a_restart() -> None:
    assert f.slurm_conf_change("", BASE) == "restart"
    assert f.slurm_conf_change(None, BASE) == "restart"


def test_conf_diff_names_new_and_redefined_nodes() -> None:
    old = "ClusterName=c\nNodeName=node1 CPUs=2\nNodeName=node2 CPUs=2\nNodeName=gone CPUs=1\n"
    new = "ClusterName=c\nNodeName=node1 CPUs=2\nNodeName=node2 CPUs=4\nNodeName=node3 CPUs=2\n"
    assert f.slurm_conf_diff(old, new) == {"change": "nodes", "nodes": ["node2", "node3"]}
    assert f.slurm_conf_diff(new, new) == {"change": "none", "nodes": []}


def test_a_node_name_the_inventory_sets_must_be_the_nodes_short_name() -> None:
    info = dict(DGX, node_name="gpu01")
    assert f.node_problems(info, "gpu01.lab.example", {}, 8, "gpu01") == []
    assert f.node_problems(info, "gpu01.lab.example", {}, 8) == []
    (problem,) = f.node_problems(info, "gpu01.lab.example", {}, 8, "gpu-one")
    assert problem.startswith("gpu01.lab.example: slurm_node_name=gpu-one but the node's short")
    assert "is gpu01; set slurm_node_name: gpu01, or rename the host" in problem


def test_two_hosts_with_one_node_name_are_refused() -> None:
    names = {"gpu01.a.example": "gpu01", "gpu01.b.example": "gpu01", "gpu02.a.example": "gpu02"}
    (problem,) = f.node_name_clashes(names)
    assert problem.startswith("gpu01.a.example, gpu01.b.example: all report the node name gpu01")
    assert f.node_name_clashes({"a": "a", "b": "b", "c": ""}) == []
