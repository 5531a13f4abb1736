"""`make gpu-check` (tools/gpu_check.py, tools/gpu_facts.py) on recorded GPU machines.

The fixtures under tests/fixtures/gpu/<machine>/ are outputs of nvidia-smi
(the query slurm_node_info runs, and -q -x), lspci -nn and
/proc/driver/nvidia/version, written from the documented formats for an
8 x H200, an 8 x H100 SXM, an 8 x A100 SXM4 80GB and one RTX 4090. The
cuda role's real PCI script runs on sysfs trees made from the lspci files.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import gpu_check  # noqa: E402
import gpu_copy_bandwidth  # noqa: E402
import gpu_facts  # noqa: E402
from gpu_facts import Observed  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "gpu"

# machine: (GPUs, name, Type, Gres=, PCI id, driver, driver CUDA, variant, NVSwitches)
MACHINES = {
    "h200": (8, "NVIDIA H200", "h200", "gpu:h200:8", "10de:2335", "570.133.20", "12.8", "cu128", 4),
    "h100": (
        8,
        "NVIDIA H100 80GB HBM3",
        "h100",
        "gpu:h100:8",
        "10de:2330",
        "580.95.05",
        "13.0",
        "cu130",
        4,
    ),
    "a100": (
        8,
        "NVIDIA A100-SXM4-80GB",
        "a100",
        "gpu:a100:8",
        "10de:20b2",
        "560.35.03",
        "12.6",
        "cu126",
        6,
    ),
    "rtx4090": (
        1,
        "NVIDIA GeForce RTX 4090",
        "rtx_4090",
        "gpu:rtx_4090:1",
        "10de:2684",
        "575.64.03",
        "12.9",
        "cu128",
        0,
    ),
}


def fixture(machine: str, name: str) -> str:
    return (FIXTURES / machine / name).read_text()


def observed(machine: str, **changes: object) -> Observed:
    """What gpu_check.observe() would gather on the recorded machine."""
    count = MACHINES[machine][0]
    lspci = fixture(machine, "lspci-nn.txt")
    pci = gpu_check.pci_from_lspci(lspci)
    obs = Observed(
        smi_query=fixture(machine, "nvidia-smi-query-gpu.csv"),
        smi_xml=fixture(machine, "nvidia-smi-q-x.xml"),
        device_nodes=tuple(f"/dev/nvidia{i}" for i in range(count)),
        pci_sysfs=pci,
        lspci=lspci,
        pci_lspci=pci,
        proc_version=fixture(machine, "proc-driver-nvidia-version.txt"),
        module_version=MACHINES[machine][5] + "\n",
    )
    return dataclasses.replace(obs, **changes)


def statuses(hw: dict) -> dict[str, str]:
    return {c["name"]: c["status"] for c in hw["checks"]}


def hw_verdict(hw: dict) -> str:
    return gpu_facts.verdict(hw["checks"], hw)


# --- each machine maps to the right gres lines, Type and torch variant ----


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_machine_maps_to_gres_type_and_variant(machine: str) -> None:
    count, name, typ, spec, _, driver, cuda, variant, _ = MACHINES[machine]
    hw = gpu_facts.hardware(observed(machine))
    assert hw["gpu_count"] == count
    assert hw["gpu_source"] == "nvidia-smi"
    assert {g["name"] for g in hw["gpus"]} == {name}
    assert {g["type"] for g in hw["gpus"]} == {typ}
    assert hw["gres_spec"] == spec
    assert hw["gres_lines"] == [f"Name=gpu Type={typ} File=/dev/nvidia{i}" for i in range(count)]
    assert hw["gres_lines_nvml"] == ["AutoDetect=nvml"]
    assert hw["driver_versions"] == {"nvidia_smi": driver, "proc": driver, "sys_module": driver}
    assert hw["driver_cuda"] == cuda
    assert hw["torch_variant"]["variant"] == variant
    # Every check passes but slurmd_c: no `slurmd -C` output is recorded.
    assert [name for name, status in statuses(hw).items() if status != "pass"] == ["slurmd_c"]
    assert hw_verdict(hw) == "PASS"


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_pci_detection_of_the_cuda_role(machine: str) -> None:
    count, *_, nvswitches = MACHINES[machine]
    hw = gpu_facts.hardware(observed(machine))
    smi_ids = [g["bus_id"] for g in hw["smi"]["gpus"]]
    assert hw["pci"] == {"gpu": smi_ids, "nvswitch": hw["pci"]["nvswitch"], "container": False}
    assert len(hw["pci"]["gpu"]) == count
    assert len(hw["pci"]["nvswitch"]) == nvswitches


def test_rtx_audio_function_and_other_vga_are_not_gpus() -> None:
    devices = gpu_facts.parse_lspci(fixture("rtx4090", "lspci-nn.txt"))
    assert [d["bus_id"] for d in devices if d["vendor"] == "10de"] == [
        "0000:01:00.0",
        "0000:01:00.1",
    ]
    assert gpu_facts.hardware(observed("rtx4090"))["pci"]["gpu"] == ["0000:01:00.0"]


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_parse_smi_xml(machine: str) -> None:
    count, name, _, _, pci_id, driver, cuda, _, _ = MACHINES[machine]
    smi = gpu_facts.parse_smi_xml(fixture(machine, "nvidia-smi-q-x.xml"))
    assert (smi["driver_version"], smi["cuda_version"], smi["attached_gpus"]) == (
        driver,
        cuda,
        count,
    )
    assert [g["minor_number"] for g in smi["gpus"]] == list(range(count))
    assert {(g["name"], g["pci_id"]) for g in smi["gpus"]} == {(name, pci_id)}


def test_parse_smi_xml_h200_first_gpu() -> None:
    gpu = gpu_facts.parse_smi_xml(fixture("h200", "nvidia-smi-q-x.xml"))["gpus"][0]
    assert gpu == {
        "index": 0,
        "name": "NVIDIA H200",
        "uuid": "GPU-a1000000-5e2f-4c1d-8b7a-009f3e2d1ca1",
        "bus_id": "0000:18:00.0",
        "minor_number": 0,
        "pci_id": "10de:2335",
        "memory_mib": 143771,
    }


def test_lspci_h200_line() -> None:
    gpus = [
        d for d in gpu_facts.parse_lspci(fixture("h200", "lspci-nn.txt")) if d["class"] == "0302"
    ]
    assert len(gpus) == 8
    assert gpus[0] == {
        "bus_id": "0000:18:00.0",
        "class": "0302",
        "vendor": "10de",
        "device": "2335",
        "name": "NVIDIA Corporation GH100 [H200 SXM 141GB]",
    }
    assert gpu_facts.sysfs_tree(gpus[:1]) == {
        "0000:18:00.0": {"vendor": "0x10de", "device": "0x2335", "class": "0x030200"}
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("00000000:1B:00.0", "0000:1b:00.0"),
        ("1b:00.0", "0000:1b:00.0"),
        ("0001:c4:00.1", "0001:c4:00.1"),
    ],
)
def test_bus_id(text: str, expected: str) -> None:
    assert gpu_facts.bus_id(text) == expected


def test_bus_id_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a PCI address"):
        gpu_facts.bus_id("GPU-0")


@pytest.mark.parametrize("machine", ["a100", "h200"])  # proprietary and open kernel module
def test_driver_from_proc(machine: str) -> None:
    text = fixture(machine, "proc-driver-nvidia-version.txt")
    assert gpu_facts.driver_from_proc(text) == MACHINES[machine][5]
    assert gpu_facts.driver_from_proc("GCC version: 12.2.0\n") == ""


def test_the_query_is_the_one_slurm_node_info_runs() -> None:
    # The query lives in module_utils (slurm_node_info and node_state run it).
    source = (ROOT / "plugins/module_utils/slurm_node.py").read_text()
    args = ", ".join(f'"{arg}"' for arg in gpu_facts.SMI_QUERY)
    assert f"[nvidia_smi, {args}]" in source
    assert f'dev_glob: str = "{gpu_facts.DEV_GLOB}"' in source


def test_slurmd_c_where_slurmd_is_installed() -> None:
    text = (
        "NodeName=gpu01 CPUs=224 Boards=1 SocketsPerBoard=2 CoresPerSocket=56 "
        "ThreadsPerCore=2 RealMemory=2063937\nUpTime=12-03:11:45\n"
    )
    hw = gpu_facts.hardware(observed("h200", slurmd_c=text))
    assert hw["slurmd_c"]["cpus"] == 224
    assert hw["slurmd_c"]["real_memory"] == 2063937
    assert statuses(hw)["slurmd_c"] == "pass"
    bad = gpu_facts.hardware(observed("h200", slurmd_c="slurmd: fatal: Unable to determine\n"))
    assert statuses(bad)["slurmd_c"] == "fail"
    assert statuses(gpu_facts.hardware(observed("h200")))["slurmd_c"] == "skip"


# --- disagreements make the verdict fail ----------------------------------


def test_seven_device_nodes_for_eight_gpus_fail() -> None:
    hw = gpu_facts.hardware(
        observed("h200", device_nodes=tuple(f"/dev/nvidia{i}" for i in range(7)))
    )
    assert statuses(hw)["device_nodes"] == "fail"
    assert hw_verdict(hw) == "FAIL"


def test_gpu_missing_from_pci_fails() -> None:
    obs = observed("h100")
    lines = [line for line in obs.pci_sysfs.splitlines() if line != "gpu 0000:1b:00.0"]
    assert len(lines) == 11
    hw = gpu_facts.hardware(dataclasses.replace(obs, pci_sysfs="\n".join(lines)))
    check = next(c for c in hw["checks"] if c["name"] == "pci")
    assert check["status"] == "fail"
    assert "0000:1b:00.0" in check["detail"] and "not found on PCI" in check["detail"]
    assert statuses(hw)["lspci"] == "fail"
    assert hw_verdict(hw) == "FAIL"


def test_driver_whose_cuda_cannot_run_the_variant_fails() -> None:
    # A 580.95.05 driver picks cu130, but one that runs only CUDA 12.4 cannot run it.
    xml = fixture("h100", "nvidia-smi-q-x.xml").replace(
        "<cuda_version>13.0</cuda_version>", "<cuda_version>12.4</cuda_version>"
    )
    hw = gpu_facts.hardware(observed("h100", smi_xml=xml))
    check = next(c for c in hw["checks"] if c["name"] == "torch_variant")
    assert check["status"] == "fail"
    assert check["detail"].startswith("cu130 (CUDA 13.0)")
    assert "up to 12.4" in check["detail"]
    assert hw_verdict(hw) == "FAIL"


def test_driver_too_old_for_any_variant_fails() -> None:
    old = "550.54.15"
    xml = fixture("a100", "nvidia-smi-q-x.xml").replace("560.35.03", old)
    proc = fixture("a100", "proc-driver-nvidia-version.txt").replace("560.35.03", old)
    hw = gpu_facts.hardware(observed("a100", smi_xml=xml, proc_version=proc, module_version=old))
    assert hw["torch_variant"]["variant"] == "cpu"
    assert statuses(hw)["torch_variant"] == "fail"
    assert statuses(hw)["driver"] == "pass"
    assert hw_verdict(hw) == "FAIL"


def test_driver_sources_that_disagree_fail() -> None:
    hw = gpu_facts.hardware(observed("h200", module_version="580.95.05\n"))
    assert statuses(hw)["driver"] == "fail"
    # The role reads /sys/module/nvidia/version: that is the driver it picks for.
    assert hw["torch_variant"]["variant"] == "cu130"
    assert statuses(hw)["torch_variant"] == "fail"  # CUDA 12.8 from nvidia-smi cannot run cu130


def test_model_name_gpu_type_cannot_map_fails() -> None:
    query = fixture("rtx4090", "nvidia-smi-query-gpu.csv").replace(
        "NVIDIA GeForce RTX 4090", "NVIDIA"
    )
    hw = gpu_facts.hardware(observed("rtx4090", smi_query=query))
    assert hw["gpus"][0]["type"] == ""
    assert statuses(hw)["gpu_type"] == "fail"
    assert statuses(hw)["nvidia_smi"] == "fail"  # the name differs from -q -x too
    assert hw_verdict(hw) == "FAIL"


def test_query_and_xml_counts_that_differ_fail() -> None:
    query = "".join(fixture("h200", "nvidia-smi-query-gpu.csv").splitlines(keepends=True)[:7])
    hw = gpu_facts.hardware(observed("h200", smi_query=query))
    assert statuses(hw)["nvidia_smi"] == "fail"
    assert statuses(hw)["device_nodes"] == "fail"
    assert hw_verdict(hw) == "FAIL"


def test_container_with_one_of_eight_gpus() -> None:
    """A container sees the host's 8 PCI GPUs; its one GPU is /dev/nvidia3 (minor 3)."""
    xml = fixture("h200", "nvidia-smi-q-x.xml")
    head, _, rest = xml.partition("\t<gpu ")
    gpus = ["\t<gpu " + part for part in rest.split("\t<gpu ")]
    one_xml = head.replace("<attached_gpus>8", "<attached_gpus>1") + gpus[3] + "</nvidia_smi_log>\n"
    query = fixture("h200", "nvidia-smi-query-gpu.csv").splitlines()[3].replace("3, ", "0, ", 1)
    obs = observed(
        "h200",
        smi_query=query + "\n",
        smi_xml=one_xml,
        device_nodes=("/dev/nvidia3",),
        pci_sysfs=observed("h200").pci_sysfs + "container yes\n",
    )
    hw = gpu_facts.hardware(obs)
    checks = statuses(hw)
    assert checks["pci"] == "pass"  # 8 on the host's bus, 1 in use, container
    assert hw["pci"]["container"] is True
    # slurm_node_info writes File=/dev/nvidia0 (the index), the device is /dev/nvidia3.
    assert hw["gres_lines"] == ["Name=gpu Type=h200 File=/dev/nvidia0"]
    assert checks["device_nodes"] == "fail"
    assert checks["minor_numbers"] == "fail"
    assert hw_verdict(hw) == "FAIL"


def test_no_gpu_at_all() -> None:
    hw = gpu_facts.hardware(Observed())
    assert hw["gpu_count"] == 0
    assert set(statuses(hw).values()) == {"skip", "pass"}
    assert statuses(hw)["torch_variant"] == "pass"
    assert hw["torch_variant"]["variant"] == "cpu"
    assert hw_verdict(hw) == "NO GPU"


def test_gpu_on_pci_without_driver() -> None:
    obs = Observed(pci_sysfs=observed("rtx4090").pci_sysfs)
    hw = gpu_facts.hardware(obs)
    assert statuses(hw)["pci"] == "skip"
    assert hw_verdict(hw) == "NO DRIVER"
    result = {"hardware": hw, "verdict": "NO DRIVER", "host": "h", "time": "t", "checks": []}
    assert "1 NVIDIA GPU(s) on PCI but no driver loaded" in gpu_facts.headline(result)


def test_fake_device_node_without_pci_gpu_fails() -> None:
    """The molecule containers' fake /dev/nvidia0: no nvidia-smi, no GPU on PCI."""
    hw = gpu_facts.hardware(Observed(device_nodes=("/dev/nvidia0",)))
    assert hw["gpu_source"] == "dev"
    assert hw["gres_lines"] == ["Name=gpu File=/dev/nvidia0"]
    assert statuses(hw)["pci"] == "fail"


def test_nvidia_smi_that_fails_fails() -> None:
    hw = gpu_facts.hardware(Observed(smi_error="nvidia-smi failed (rc 9): NVIDIA-SMI has failed"))
    assert statuses(hw)["nvidia_smi_runs"] == "fail"
    assert hw_verdict(hw) == "FAIL"


# --- torch, the smoke job and the copy bandwidth ---------------------------

TORCH_H200 = {
    "torch": "2.9.1+cu128",
    "cuda_build": "12.8",
    "cuda_available": True,
    "device_count": 8,
    "devices": ["NVIDIA H200"] * 8,
    "nccl": "2.27.5",
}


def test_torch_sees_the_gpus() -> None:
    check = gpu_facts.check_torch(TORCH_H200, 8)
    assert check.status == "pass"
    assert "torch 2.9.1+cu128 (CUDA 12.8, NCCL 2.27.5): 8 device(s)" in check.detail


def test_torch_device_count_differing_fails() -> None:
    check = gpu_facts.check_torch({**TORCH_H200, "device_count": 7}, 8)
    assert check.status == "fail"
    assert "torch.cuda.device_count() is 7, expected 8" in check.detail


def test_cuda_torch_that_cannot_use_the_gpus_fails() -> None:
    check = gpu_facts.check_torch({**TORCH_H200, "cuda_available": False, "device_count": 0}, 8)
    assert check.status == "fail"
    assert "torch.cuda.is_available() is False, expected True" in check.detail


@pytest.mark.parametrize(
    "report",
    [
        {"torch": "2.13.0+cpu", "cuda_build": None, "cuda_available": False, "device_count": 0},
        {"error": "import torch failed: ModuleNotFoundError: No module named 'torch'"},
    ],
)
def test_no_cuda_torch_is_skipped(report: dict) -> None:
    assert gpu_facts.check_torch(report, 0).status == "skip"
    assert not gpu_facts.cuda_torch(report)


@pytest.mark.parametrize(("visible", "expected"), [(None, 8), ("0,1", 2), ("", 0)])
def test_visible_count(visible: str | None, expected: int) -> None:
    assert gpu_facts.visible_count(visible, 8) == expected


def smoke_files(ok: bool = True, losses_fall: bool = True) -> tuple[dict, dict]:
    verdict = {
        "verdict": "PASS" if ok else "FAIL",
        "backend": "nccl",
        "world_size": 8,
        "checks_passed": 24,
        "first_loss": 0.59,
        "last_loss": 0.19 if losses_fall else 0.6,
    }
    checks = ["world_size", "unique_ranks", "all_reduce_int64_size_1024", "loss_decreased"]
    rank0 = {"checks": [{"name": n, "ok": n != "loss_decreased" or losses_fall} for n in checks]}
    return verdict, rank0


def test_smoke_pass() -> None:
    summary = gpu_facts.smoke_summary(*smoke_files())
    assert summary["rendezvous"] and summary["all_reduce"] and summary["loss_decreased"]
    check = gpu_facts.check_smoke(summary, 8)
    assert check.status == "pass"
    assert check.detail.startswith("ddp_smoke PASS on 8 rank(s), backend nccl, 24 checks passed")


def test_smoke_loss_not_falling_fails() -> None:
    summary = gpu_facts.smoke_summary(*smoke_files(ok=False, losses_fall=False))
    check = gpu_facts.check_smoke(summary, 8)
    assert check.status == "fail"
    assert check.detail.endswith("not passed: loss_decreased")


def test_smoke_on_gloo_fails() -> None:
    verdict, rank0 = smoke_files()
    summary = gpu_facts.smoke_summary({**verdict, "backend": "gloo"}, rank0)
    assert gpu_facts.check_smoke(summary, 8).status == "fail"


def test_smoke_summary_reads_the_packages_own_report(tmp_path: Path) -> None:
    """The verdict is ddp_smoke's own `report` on the rank files; a missing rank fails it."""
    sys.path.insert(0, str(ROOT / "training"))
    from ddp_smoke.report import report

    rank = {
        "schema": 2,
        "rank": 0,
        "world_size": 2,
        "job_id": "x",
        "host": "h",
        "mode": "torchrun",
        "status": "pass",
    }
    (tmp_path / "rank-0.json").write_text(json.dumps(rank))
    summary = gpu_facts.smoke_summary(report(tmp_path, 2).to_dict(), rank)
    assert summary["verdict"] == "FAIL"
    assert "rank 1 wrote no result" in summary["cause"]
    assert gpu_facts.check_smoke(summary, 2).status == "fail"


def test_smoke_job_under_torchrun_standalone(tmp_path: Path) -> None:
    """The real torchrun --standalone line on this venv's CPU torch (gloo, 2 ranks, about 8 s).

    On CPU the package picks gloo, so only the NCCL part of the check fails.
    """
    pytest.importorskip("torch")
    summary, _ = gpu_check.run_smoke(sys.executable, 2, tmp_path / "ddp_smoke")
    assert summary["torchrun_rc"] == 0
    assert summary["verdict"] == "PASS"
    assert (summary["rendezvous"], summary["all_reduce"], summary["loss_decreased"]) == (
        True,
        True,
        True,
    )
    assert summary["last_loss"] < summary["first_loss"]
    assert summary["world_size"] == 2
    if summary["backend"] == "gloo":
        check = gpu_facts.check_smoke(summary, 2)
        assert check.status == "fail"
        assert "backend gloo" in check.detail
    assert sorted(p.name for p in (tmp_path / "ddp_smoke").glob("rank-*.json")) == [
        "rank-0.json",
        "rank-1.json",
    ]


@pytest.mark.parametrize(
    ("name", "tbps"),
    [
        ("NVIDIA H200", 4.8),
        ("NVIDIA H100 80GB HBM3", 3.35),
        ("NVIDIA H100 PCIe", 2.0),
        ("NVIDIA H100 NVL", 3.9),
        ("NVIDIA A100-SXM4-80GB", 2.039),
        ("NVIDIA A100-SXM4-40GB", 1.555),
        ("NVIDIA A100-PCIE-40GB", 1.555),
        ("NVIDIA A100 80GB PCIe", 1.935),
        ("NVIDIA GeForce RTX 4090", 1.008),
        ("NVIDIA GeForce RTX 3090", 0.936),
        ("NVIDIA A10", 0.6),
        ("NVIDIA L4", 0.3),
        ("NVIDIA H100", None),  # which H100 is unknown
        ("NVIDIA RTX A6000", None),
    ],
)
def test_published_bandwidth(name: str, tbps: float | None) -> None:
    assert gpu_facts.published_bandwidth(name)[0] == tbps


def test_copy_fraction_and_unknown_model() -> None:
    probe = {
        "devices": [
            {"index": 0, "name": "NVIDIA H200", "TBps": 4.0},
            {"index": 1, "name": "NVIDIA RTX A6000", "TBps": 0.65},
        ],
        "error": None,
    }
    rows = gpu_facts.copy_rows(probe)
    assert [r["fraction"] for r in rows] == [0.833, None]
    assert rows[1]["published_TBps"] is None
    assert "no published bandwidth" in rows[1]["published_model"]
    check = gpu_facts.check_copy(rows, probe, 2)
    assert check.status == "pass"
    assert "cuda:0 NVIDIA H200: 4.000 TB/s = 0.83 of 4.8 TB/s" in check.detail
    assert "(fraction null: no published bandwidth" in check.detail


def test_copy_probe_error_fails() -> None:
    probe = {"devices": [], "error": "RuntimeError: CUDA error: out of memory"}
    assert gpu_facts.check_copy(gpu_facts.copy_rows(probe), probe, 1).status == "fail"


def test_copy_rate_arithmetic() -> None:
    # 20 copies of 1 GiB in 10 ms: 2 x 2^30 x 20 / 0.01 s = 4.295 TB/s.
    assert gpu_copy_bandwidth.copy_tbps(1 << 30, 20, 10.0) == pytest.approx(4.294967296)
    assert gpu_copy_bandwidth.buffer_bytes(140 << 30) == 1 << 30
    assert gpu_copy_bandwidth.buffer_bytes(800 << 20) == 100 << 20


def test_copy_probe_without_cuda_reports_it() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools/gpu_copy_bandwidth.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    out = json.loads(done.stdout)
    if out["devices"]:
        pytest.skip("this machine has a CUDA GPU")
    assert out == {"devices": [], "error": "torch.cuda.is_available() is False"}


def test_run_kills_the_whole_group_on_timeout(tmp_path: Path) -> None:
    marker = tmp_path / "late"
    rc, out = gpu_check.run(["sh", "-c", f"(sleep 2; touch {marker}) & sleep 30"], timeout=1)
    assert rc == 124
    assert out.startswith("sh did not finish within 1 s")
    time.sleep(2)
    assert not marker.exists()  # the background child was killed with its parent


def test_run_reports_a_missing_command() -> None:
    assert gpu_check.run(["/nonexistent/nvidia-smi"])[0] == 127


# --- the tool end to end ---------------------------------------------------


def test_main_without_gpu_exits_0_and_says_so(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(gpu_check, "observe", lambda: Observed())
    monkeypatch.setattr(
        gpu_check,
        "find_torch",
        lambda pythons: {"torch": "2.13.0+cpu", "cuda_build": None, "python": "py"},
    )
    assert gpu_check.main(["--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "gpu-check NO GPU" in out
    assert "no NVIDIA GPU on this machine" in out
    assert "no CUDA-enabled torch" in out
    (report,) = tmp_path.glob("gpu-check-*.json")
    (text,) = tmp_path.glob("gpu-check-*.txt")
    body = json.loads(report.read_text())
    assert body["verdict"] == "NO GPU"
    assert body["ddp_smoke"] is None
    assert text.read_text().splitlines()[0] == out.splitlines()[0]


def test_main_with_a_disagreement_exits_1(tmp_path: Path, monkeypatch) -> None:
    obs = observed("h200", device_nodes=tuple(f"/dev/nvidia{i}" for i in range(7)))
    monkeypatch.setattr(gpu_check, "observe", lambda: obs)
    assert gpu_check.main(["--results", str(tmp_path), "--no-torch"]) == 1
    (report,) = tmp_path.glob("gpu-check-*.json")
    body = json.loads(report.read_text())
    assert body["verdict"] == "FAIL"
    assert body["hardware"]["gres_spec"] == "gpu:h200:8"
    assert {c["name"]: c["status"] for c in body["checks"]}["device_nodes"] == "fail"


def test_runs_without_ansible() -> None:
    """The GPU machine may have no Ansible: the module's parsing still runs."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'ansible':\n"
        "            raise ImportError('no ansible here')\n"
        "sys.meta_path.insert(0, Block())\n"
        f"sys.path.insert(0, {str(ROOT / 'tools')!r})\n"
        "import gpu_facts\n"
        "gpus = gpu_facts.slurm_node_info.parse_nvidia_smi('0, NVIDIA H200, GPU-1, 143771 MiB')\n"
        "print(gpu_facts.slurm_conf.gres_spec(gpus))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "gpu:h200:1"
