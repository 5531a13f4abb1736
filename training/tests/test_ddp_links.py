"""The hardware's expectations: link speeds from a fake sysfs, and ``nvidia-smi topo -m``."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
import torch

from ddp_smoke import judge, launch
from ddp_smoke.benchmarks import Bench, _tcp_result
from ddp_smoke.faults import Faults
from ddp_smoke.judge import Peers
from ddp_smoke.launch import MeasureOptions
from ddp_smoke.report import render

# A DGX-like node as nvidia-smi 535 prints it (tabs, the header underlined with ANSI codes).
TOPOLOGY = (
    "\t\x1b[4mGPU0\tGPU1\tGPU2\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV12\tSYS\tPIX\tSYS\t0-31,64-95\t0\t\tN/A\n"
    "GPU1\tNV12\t X \tSYS\tPIX\tSYS\t0-31,64-95\t0\t\tN/A\n"
    "GPU2\tSYS\tSYS\t X \tSYS\tPXB\t32-63,96-127\t1\t\tN/A\n"
    "NIC0\tPIX\tPIX\tSYS\t X \tSYS\t\t\t\t\n"
    "NIC1\tSYS\tSYS\tPXB\tSYS\t X \t\t\t\t\n"
    "\n"
    "Legend:\n"
    "\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes\n"
    "  PIX  = Connection traversing at most a single PCIe bridge\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n"
    "\n"
    "NIC Legend:\n"
    "\n"
    "  NIC0: mlx5_0\n"
    "  NIC1: mlx5_1\n"
)


def fake_sysfs(root: Path, speeds: dict[str, str]) -> Path:
    for iface, speed in speeds.items():
        (root / iface).mkdir(parents=True)
        (root / iface / "speed").write_text(speed)
    return root


@pytest.mark.parametrize(
    ("iface", "speed"),
    [("eth0", 25000), ("down0", None), ("veth1", 10000), ("lo", None), ("bad0", None)],
)
def test_link_speed_from_sysfs(tmp_path: Path, iface: str, speed: int | None) -> None:
    sysfs = fake_sysfs(tmp_path, {"eth0": "25000\n", "down0": "-1\n", "veth1": "10000\n"})
    (sysfs / "bad0").mkdir()
    (sysfs / "bad0" / "speed").write_text("fast\n")
    # lo has no speed file here; reading the real one fails with EINVAL.
    assert launch.link_speed_mbps(iface, sysfs) == speed


def test_link_speed_of_an_unreadable_file(tmp_path: Path) -> None:
    (tmp_path / "eth0" / "speed").mkdir(parents=True)  # a directory: reading raises OSError
    assert launch.link_speed_mbps("eth0", tmp_path) is None
    assert launch.link_speed_mbps("nosuch0", tmp_path) is None


def test_link_of_the_iface_or_of_the_local_address(tmp_path: Path) -> None:
    sysfs = fake_sysfs(tmp_path, {"ib0": "100000\n", "lo": "40000\n"})
    assert launch.link_of("ib0", "10.0.0.1", sysfs) == {"iface": "ib0", "link_Mbps": 100000}
    # No --iface: the interface that holds the connection's address (loopback here).
    assert launch.link_of(None, "127.0.0.1", sysfs) == {"iface": "lo", "link_Mbps": 40000}
    assert launch.link_of(None, "192.0.2.77", sysfs) == {"iface": None, "link_Mbps": None}
    assert launch.link_of(None, None, sysfs) == {"iface": None, "link_Mbps": None}


def test_interface_with_address() -> None:
    assert launch.interface_with_address("127.0.0.1") == "lo"
    assert launch.interface_with_address("192.0.2.77") is None  # TEST-NET-1: nobody has it


def test_lower_link_and_link_fraction() -> None:
    assert judge.lower_link([25000, 10000]) == 10000
    assert judge.lower_link([None, 10000]) == 10000
    assert judge.lower_link([None, -1]) is None
    assert judge.link_fraction(16.4, 10000) == 1.64  # a veth moves more than it reports
    assert judge.link_fraction(9.1234567, 25000) == 0.3649
    assert judge.link_fraction(None, 10000) is None
    assert judge.link_fraction(16.4, None) is None


def bench(rank: int = 0) -> Bench:
    return Bench(
        rank=rank,
        peers=Peers(hosts=("gpu01", "gpu02")),
        device=torch.device("cpu"),
        backend="gloo",
        timeout=timedelta(seconds=10),
        options=MeasureOptions(tcp_bytes=1 << 30),
        faults=Faults(),
        seed=1,
    )


def test_tcp_result_takes_the_lower_link_of_the_two_ends() -> None:
    gathered: list[object] = [
        {"seconds": 0.5, "error": None, "address": None, "iface": "eth0", "link_Mbps": 25000},
        {"seconds": 0.4, "error": None, "address": "10.0.0.1", "iface": "ib0", "link_Mbps": 10000},
    ]
    result = _tcp_result(bench(), 1, (["10.0.0.1"], 40000), gathered)
    assert result["Gbps"] == 17.1799  # 1 GiB in 0.5 s, the slower direction
    assert (result["ifaces"], result["link_Mbps"]) == (["eth0", "ib0"], 10000)
    assert result["link_fraction"] == 1.718


def test_tcp_result_without_link_speeds_or_with_an_error() -> None:
    unknown = {"seconds": 0.5, "error": None, "address": "10.0.0.1", "iface": "lo"}
    result = _tcp_result(bench(), 1, (["10.0.0.1"], 40000), [unknown, unknown])
    assert (result["link_Mbps"], result["link_fraction"]) == (None, None)
    failed = {"seconds": None, "error": "TimeoutError: x", "iface": "eth0", "link_Mbps": 25000}
    result = _tcp_result(bench(), 1, None, [failed, failed])
    assert (result["link_Mbps"], result["link_fraction"]) == (25000, None)
    assert "Gbps" not in result


def test_parse_gpu_topology() -> None:
    assert launch.parse_gpu_topology(TOPOLOGY) == {
        "GPU0|GPU1": "NV12",
        "GPU0|GPU2": "SYS",
        "GPU0|NIC0": "PIX",
        "GPU0|NIC1": "SYS",
        "GPU1|GPU2": "SYS",
        "GPU1|NIC0": "PIX",
        "GPU1|NIC1": "SYS",
        "GPU2|NIC0": "SYS",
        "GPU2|NIC1": "PXB",
        "NIC0|NIC1": "SYS",
    }


def test_parse_gpu_topology_of_one_gpu_and_of_noise() -> None:
    one = "\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-7\t0\n"
    assert launch.parse_gpu_topology(one) == {}
    assert launch.parse_gpu_topology("NVIDIA-SMI has failed\n") == {}


def fake_tool(tmp_path: Path, script: str) -> str:
    tool = tmp_path / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\n{script}\n")
    os.chmod(tool, 0o755)
    return str(tool)


def test_gpu_topology_runs_nvidia_smi(tmp_path: Path) -> None:
    sample = tmp_path / "topo.txt"
    sample.write_text(TOPOLOGY)
    tool = fake_tool(tmp_path, f'[ "$1 $2" = "topo -m" ] && cat {sample}')
    topology = launch.gpu_topology(tool)
    assert topology is not None
    assert (len(topology), topology["GPU0|GPU1"]) == (10, "NV12")


def test_gpu_topology_without_the_tool_or_when_it_fails(tmp_path: Path) -> None:
    assert launch.gpu_topology(str(tmp_path / "absent")) is None
    assert launch.gpu_topology(fake_tool(tmp_path, "echo 'No devices were found'; exit 6")) is None


def test_report_text_shows_the_topology() -> None:
    body: dict[str, object] = {
        "verdict": "PASS",
        "mode": "srun",
        "nodes": ["gpu01"],
        "gpu_topology": {"gpu01": launch.parse_gpu_topology(TOPOLOGY)},
        "measurements": {},
    }
    assert render(body).splitlines()[-1] == (
        "gpu topology gpu01: SYS x6, PIX x2, NV12 x1, PXB x1 (pairs of GPUs and NICs)"
    )
