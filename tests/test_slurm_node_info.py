"""Parsing in the slurm_node_info module, on real outputs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "collections"))
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils import slurm_node as m

SLURMD_C_CONTAINER = """\
NodeName=probe CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105
UpTime=0-00:08:06
"""
# A DGX H100 (2 sockets x 56 cores x 2 threads, 2 TiB).
SLURMD_C_DGX = (
    "NodeName=dgx01 CPUs=224 Boards=1 SocketsPerBoard=2 CoresPerSocket=56 ThreadsPerCore=2 "
    "RealMemory=2063937\nUpTime=12-03:11:45\n"
)
NVIDIA_SMI_H100x8 = "\n".join(
    f"{i}, NVIDIA H100 80GB HBM3, GPU-{i:08x}-1d2c-4b6e-9f3a-000000000000, 81559 MiB"
    for i in range(8)
)


def test_parse_slurmd_c_container() -> None:
    assert m.parse_slurmd_c(SLURMD_C_CONTAINER) == {
        "node_name": "probe",
        "cpus": 2,
        "boards": 1,
        "sockets_per_board": 1,
        "cores_per_socket": 2,
        "threads_per_core": 1,
        "real_memory": 24105,
    }


def test_parse_slurmd_c_dgx() -> None:
    info = m.parse_slurmd_c(SLURMD_C_DGX)
    assert info["cpus"] == 224
    assert info["sockets_per_board"] * info["cores_per_socket"] * info["threads_per_core"] == 224
    assert info["real_memory"] == 2063937


@pytest.mark.parametrize(
    "text",
    ["", "UpTime=0-00:00:01\n", "NodeName=x Boards=1\n"],
    ids=["empty", "no-line", "no-cpus"],
)
def test_parse_slurmd_c_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError, match="slurmd -C"):
        m.parse_slurmd_c(text)


def test_parse_nvidia_smi_eight_h100() -> None:
    gpus = m.parse_nvidia_smi(NVIDIA_SMI_H100x8)
    assert len(gpus) == 8
    assert [g["file"] for g in gpus] == [f"/dev/nvidia{i}" for i in range(8)]
    assert {g["type"] for g in gpus} == {"h100"}
    assert gpus[3]["memory_mib"] == 81559
    assert gpus[0]["uuid"] == "GPU-00000000-1d2c-4b6e-9f3a-000000000000"


def test_parse_nvidia_smi_rejects_bad_line() -> None:
    with pytest.raises(ValueError, match="unexpected nvidia-smi line"):
        m.parse_nvidia_smi("0, NVIDIA A100\n")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("NVIDIA A100-PCIE-40GB", "a100"),
        ("Tesla V100-SXM2-32GB", "v100"),
        ("NVIDIA GeForce RTX 4090", "rtx_4090"),
        ("NVIDIA RTX A6000", "rtx_a6000"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA H100 NVL", "h100"),
    ],
)
def test_gpu_type_normalised(name: str, expected: str) -> None:
    assert m.gpu_type(name) == expected


def test_gpus_from_devices_ignores_control_nodes() -> None:
    gpus = m.gpus_from_devices(["/dev/nvidia1", "/dev/nvidia0", "/dev/nvidiactl"])
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[0]["type"] == ""
