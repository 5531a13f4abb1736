"""What the project's own GPU code makes of one machine: pure functions, no I/O.

tools/gpu_check.py gathers the raw outputs (nvidia-smi, lspci, sysfs, /proc)
and the torch results and hands them here; tests/test_gpu_check.py feeds
recorded ones. Every decision comes from the roles' own code, imported the
way tests/ imports it:

- plugins/modules/slurm_node_info.py: GPU list and ``Type=``;
- plugins/filter/slurm_conf.py: gres.conf lines, ``Gres=``;
- plugins/filter/cuda.py: the PCI detection's output
  (its script, roles/cuda/files/nvidia-pci-devices, is run by gpu_check.py);
- plugins/filter/torch_variant.py: the torch build, and its
  check of what torch reports.

This module only parses what those do not (nvidia-smi -q -x, lspci -nn,
/proc/driver/nvidia/version) and compares the answers.
"""

from __future__ import annotations

import re
import sys
import types
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ROLES = ROOT / "roles"
PCI_SCRIPT = ROLES / "cuda" / "files" / "nvidia-pci-devices"
VERIFY_TORCH = ROLES / "pytorch" / "files" / "verify_torch.py"
TRAINING = ROOT / "training"
# The query slurm_node_info.py's main() runs (a test checks the module still does).
SMI_QUERY = ("--query-gpu=index,name,uuid,memory.total", "--format=csv,noheader")
# The device nodes slurm_node_info counts when nvidia-smi is absent (its dev_glob).
DEV_GLOB = "/dev/nvidia[0-9]*"


class _NoAnsible:
    """Stands in for AnsibleModule, which only slurm_node_info's main() uses."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("Ansible is not installed: only the parsing functions are usable")


def _ansible_stub() -> None:
    """A GPU machine may lack Ansible; the module's parsing functions do not need it."""
    try:
        import ansible.module_utils.basic  # noqa: F401
    except ImportError:
        for name in ("ansible", "ansible.module_utils", "ansible.module_utils.basic"):
            sys.modules.setdefault(name, types.ModuleType(name))
        sys.modules["ansible.module_utils.basic"].AnsibleModule = _NoAnsible  # type: ignore[attr-defined]


_ansible_stub()
# The collection's modules and filters, and its root for their module_utils imports.
for _path in (ROOT / "plugins/modules", ROOT / "plugins/filter", ROOT / "collections"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import cuda  # noqa: E402
import slurm_conf  # noqa: E402
import torch_variant  # noqa: E402

# The parsers the slurm_node_info module calls (its module_utils).
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils import (  # noqa: E402
    slurm_node as slurm_node_info,
)

PASS, FAIL, SKIP = "pass", "fail", "skip"

# Published memory bandwidth (TB/s, 10^12 bytes/s) from NVIDIA's data sheets,
# matched against the lower-case nvidia-smi name; first match wins, so the
# more specific patterns come first.
PUBLISHED_TBPS: tuple[tuple[str, float, str], ...] = (
    (r"\bh200\b", 4.8, "H200 (141 GB HBM3e)"),
    (r"\bh100\b.*\bpcie\b", 2.0, "H100 PCIe"),
    (r"\bh100\b.*\bnvl\b", 3.9, "H100 NVL"),
    (r"\bh100\b.*(\bhbm3\b|\bsxm)", 3.35, "H100 SXM"),
    (r"\ba100\b.*\b80gb\b.*\bpcie\b|\ba100\b.*\bpcie\b.*\b80gb\b", 1.935, "A100 80GB PCIe"),
    (r"\ba100\b.*\b80gb\b", 2.039, "A100 80GB SXM"),
    (r"\ba100\b", 1.555, "A100 40GB"),
    (r"\bb200\b", 8.0, "B200"),
    (r"\bl40s\b", 0.864, "L40S"),
    (r"\bl4\b", 0.3, "L4"),
    (r"\ba10\b", 0.6, "A10"),
    (r"\bv100\b", 0.9, "V100"),
    (r"\brtx 4090\b", 1.008, "GeForce RTX 4090"),
    (r"\brtx 3090 ti\b", 1.008, "GeForce RTX 3090 Ti"),
    (r"\brtx 3090\b", 0.936, "GeForce RTX 3090"),
)

_BUS_ID = re.compile(r"(?:([0-9a-f]{4,8}):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])")
_LSPCI = re.compile(
    r"^(?P<addr>\S+) (?P<kind>.*?) \[(?P<cls>[0-9a-f]{4})\]: (?P<name>.*) "
    r"\[(?P<vendor>[0-9a-f]{4}):(?P<device>[0-9a-f]{4})\]"
)
_DRIVER_IN_PROC = re.compile(r"\s(\d{3}\.\d+(?:\.\d+)?)\s")
_SLURM_TYPE = re.compile(r"[a-z0-9][a-z0-9_]*")


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # pass, fail or skip
    detail: str


@dataclass(frozen=True)
class Observed:
    """Raw outputs from one machine; None where the source is absent."""

    smi_query: str | None = None  # nvidia-smi SMI_QUERY
    smi_xml: str | None = None  # nvidia-smi -q -x
    smi_error: str | None = None  # nvidia-smi exists but failed
    device_nodes: tuple[str, ...] = ()  # DEV_GLOB
    pci_sysfs: str = ""  # files/nvidia-pci-devices on /sys/bus/pci/devices
    lspci: str | None = None  # lspci -nn
    pci_lspci: str | None = None  # files/nvidia-pci-devices on a tree made from lspci
    proc_version: str | None = None  # /proc/driver/nvidia/version
    module_version: str | None = None  # /sys/module/nvidia/version (what the pytorch role reads)
    cuda_visible_devices: str | None = None
    slurmd_c: str | None = None  # slurmd -C, where slurmd is installed


# --- parsing ---------------------------------------------------------------


def bus_id(text: str) -> str:
    """A PCI address in sysfs form: '00000000:1B:00.0' or '1b:00.0' -> '0000:1b:00.0'."""
    match = _BUS_ID.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError(f"not a PCI address: {text!r}")
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):04x}:{bus}:{device}.{function}"


def _text(node: ET.Element, path: str) -> str:
    found = node.find(path)
    return (found.text or "").strip() if found is not None else ""


def _int_or_none(text: str) -> int | None:
    match = re.match(r"\d+", text)
    return int(match.group()) if match else None


def _pci_id(smi_device_id: str) -> str:
    """nvidia-smi's '233510DE' (device, vendor) -> '10de:2335'."""
    text = smi_device_id.lower().removeprefix("0x")
    return f"{text[4:8]}:{text[:4]}" if len(text) == 8 else text


def parse_smi_xml(text: str) -> dict[str, Any]:
    """Driver, CUDA version and per-GPU bus id, minor number and PCI id from nvidia-smi -q -x."""
    root = ET.fromstring(text)
    gpus = []
    for index, gpu in enumerate(root.findall("gpu")):
        gpus.append(
            {
                "index": index,
                "name": _text(gpu, "product_name"),
                "uuid": _text(gpu, "uuid"),
                "bus_id": bus_id(gpu.get("id") or _text(gpu, "pci/pci_bus_id")),
                "minor_number": _int_or_none(_text(gpu, "minor_number")),
                "pci_id": _pci_id(_text(gpu, "pci/pci_device_id")),
                "memory_mib": _int_or_none(_text(gpu, "fb_memory_usage/total")),
            }
        )
    return {
        "driver_version": _text(root, "driver_version"),
        "cuda_version": _text(root, "cuda_version"),
        "attached_gpus": _int_or_none(_text(root, "attached_gpus")),
        "gpus": gpus,
    }


def parse_lspci(text: str) -> list[dict[str, str]]:
    """Devices of `lspci -nn` (with or without -D): address, class, vendor, device, name."""
    devices = []
    for line in text.splitlines():
        match = _LSPCI.match(line.strip())
        if match is None:
            continue
        devices.append(
            {
                "bus_id": bus_id(match["addr"]),
                "class": match["cls"],
                "vendor": match["vendor"],
                "device": match["device"],
                "name": match["name"],
            }
        )
    return devices


def sysfs_tree(devices: Sequence[Mapping[str, str]]) -> dict[str, dict[str, str]]:
    """lspci devices as the sysfs files the cuda role's script reads (address -> file -> text).

    lspci -nn shows class and subclass; the programming interface is left 00.
    """
    return {
        d["bus_id"]: {
            "vendor": f"0x{d['vendor']}",
            "device": f"0x{d['device']}",
            "class": f"0x{d['class']}00",
        }
        for d in devices
    }


def driver_from_proc(text: str) -> str:
    """'550.54.15' from the NVRM line of /proc/driver/nvidia/version, '' when none."""
    for line in text.splitlines():
        if line.startswith("NVRM version:"):
            match = _DRIVER_IN_PROC.search(f" {line} ")
            if match:
                return match.group(1)
    return ""


def published_bandwidth(name: str) -> tuple[float | None, str]:
    """(TB/s, data-sheet model) for an nvidia-smi name, (None, note) for an unknown model."""
    lowered = name.lower()
    for pattern, tbps, model in PUBLISHED_TBPS:
        if re.search(pattern, lowered):
            return tbps, model
    return None, f"no published bandwidth for {name!r} in tools/gpu_facts.py PUBLISHED_TBPS"


def cuda_tuple(text: str | None) -> tuple[int, int] | None:
    match = re.fullmatch(r"(\d+)\.(\d+)", (text or "").strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def visible_count(cuda_visible_devices: str | None, gpus: int) -> int:
    """GPUs a CUDA program may see: CUDA_VISIBLE_DEVICES entries, else all."""
    if cuda_visible_devices is None:
        return gpus
    return len([part for part in cuda_visible_devices.split(",") if part.strip()])


# --- checks of the hardware code -------------------------------------------


def _ok(name: str, passed: bool, detail: str) -> Check:
    return Check(name, PASS if passed else FAIL, detail)


def module_gpus(obs: Observed) -> tuple[list[dict], str]:
    """slurm_node_info's GPU list and its source, as its main() would pick them."""
    if obs.smi_query is not None:
        return slurm_node_info.parse_nvidia_smi(obs.smi_query), "nvidia-smi"
    found = slurm_node_info.gpus_from_devices(list(obs.device_nodes))
    return found, "dev" if obs.device_nodes else "none"


def check_smi(gpus: list[dict], smi: dict[str, Any] | None) -> Check:
    """The module's query and nvidia-smi -q -x agree on count and names."""
    if smi is None:
        return Check("nvidia_smi", SKIP, "no nvidia-smi -q -x output to compare with")
    names = [g["name"] for g in gpus]
    xml_names = [g["name"] for g in smi["gpus"]]
    counts = {len(gpus), len(xml_names), smi["attached_gpus"]}
    return _ok(
        "nvidia_smi",
        len(counts) == 1 and names == xml_names,
        f"slurm_node_info parses {len(gpus)} GPU(s) {sorted(set(names))}; nvidia-smi -q -x has "
        f"{smi['attached_gpus']} attached, {len(xml_names)} listed {sorted(set(xml_names))}",
    )


def check_types(gpus: list[dict]) -> Check:
    """gpu_type maps every model name to a usable gres Type."""
    if not gpus:
        return Check("gpu_type", SKIP, "no GPU names to map")
    bad = [g["name"] for g in gpus if not _SLURM_TYPE.fullmatch(g.get("type") or "")]
    pairs = sorted({f"{g['name']!r} -> {g['type']!r}" for g in gpus})
    if bad:
        return Check(
            "gpu_type", FAIL, f"gpu_type cannot map {sorted(set(bad))}: {', '.join(pairs)}"
        )
    return Check("gpu_type", PASS, ", ".join(pairs))


def check_device_nodes(gpus: list[dict], nodes: Sequence[str], source: str) -> Check:
    """gres.conf File= paths (from slurm_conf.gres_lines) are exactly the /dev/nvidiaN nodes."""
    if not gpus and not nodes:
        return Check("device_nodes", SKIP, "no GPU and no /dev/nvidia[0-9]* node")
    files = sorted(
        line.split("File=", 1)[1] for line in slurm_conf.gres_lines(gpus, False) if "File=" in line
    )
    have = sorted(nodes)
    if files == have:
        return Check(
            "device_nodes",
            PASS,
            f"{len(gpus)} GPU(s) from {source}; gres.conf File= are the {len(have)} device "
            f"nodes {have[0]} ... {have[-1]}",
        )
    return Check(
        "device_nodes",
        FAIL,
        f"{len(gpus)} GPU(s) from {source}; gres.conf File= {files}; device nodes {have}",
    )


def check_minor_numbers(gpus: list[dict], smi: dict[str, Any] | None) -> Check:
    """The module's File=/dev/nvidia<index> is the device node of that GPU (its minor number)."""
    if smi is None or not gpus:
        return Check("minor_numbers", SKIP, "no nvidia-smi -q -x output")
    minors = {g["index"]: g["minor_number"] for g in smi["gpus"]}
    wrong = [
        f"GPU {g['index']}: File={g['file']} but its device is /dev/nvidia{minors.get(g['index'])}"
        for g in gpus
        if minors.get(g["index"]) is not None and g["file"] != f"/dev/nvidia{minors[g['index']]}"
    ]
    if wrong:
        return Check("minor_numbers", FAIL, "; ".join(wrong))
    return Check("minor_numbers", PASS, "every File=/dev/nvidia<index> is that GPU's minor number")


def check_pci(gpus: list[dict], smi: dict[str, Any] | None, pci: dict[str, Any]) -> Check:
    """The cuda role's PCI detection finds the GPUs nvidia-smi reports.

    Outside a container the counts must be equal. A container sees its host's
    whole PCI bus, so there the GPUs nvidia-smi reports must only be among them
    (and the role itself counts a container as no GPU: the host owns the driver).
    """
    found = sorted(pci["gpu"])
    where = (
        "a container: the cuda role counts 0 and skips" if pci["container"] else "not a container"
    )
    detail = f"PCI GPUs {len(found)} {found}, NVSwitches {len(pci['nvswitch'])}; {where}"
    if not gpus:
        what = "no driver loaded: the cuda role would install one" if found else "no NVIDIA GPU"
        return Check("pci", SKIP, f"{what}; {detail}")
    smi_ids = sorted(g["bus_id"] for g in smi["gpus"]) if smi else []
    missing = sorted(set(smi_ids) - set(found))
    if missing:
        return Check("pci", FAIL, f"nvidia-smi GPUs {missing} not found on PCI; {detail}")
    if pci["container"]:
        return _ok("pci", len(found) >= len(gpus), f"{len(gpus)} GPU(s) in use; {detail}")
    return _ok("pci", len(found) == len(gpus), f"{len(gpus)} GPU(s) reported; {detail}")


def check_lspci(pci: dict[str, Any], pci_lspci: dict[str, Any] | None) -> Check:
    """The role's detection gives the same GPUs and NVSwitches on sysfs and on lspci's view."""
    if pci_lspci is None:
        return Check("lspci", SKIP, "no lspci")
    same = sorted(pci["gpu"]) == sorted(pci_lspci["gpu"]) and sorted(pci["nvswitch"]) == sorted(
        pci_lspci["nvswitch"]
    )
    return _ok(
        "lspci",
        same,
        f"sysfs: {len(pci['gpu'])} GPU(s), {len(pci['nvswitch'])} NVSwitch(es); lspci -nn: "
        f"{len(pci_lspci['gpu'])} GPU(s), {len(pci_lspci['nvswitch'])} NVSwitch(es)",
    )


def driver_versions(obs: Observed, smi: dict[str, Any] | None) -> dict[str, str]:
    """The loaded driver's version as each source reports it ('' where absent)."""
    return {
        "nvidia_smi": smi["driver_version"] if smi else "",
        "proc": driver_from_proc(obs.proc_version or ""),
        "sys_module": (obs.module_version or "").strip(),
    }


def check_driver(versions: Mapping[str, str]) -> Check:
    present = {k: v for k, v in versions.items() if v}
    if not present:
        return Check("driver", SKIP, "no NVIDIA driver loaded")
    return _ok(
        "driver",
        len(set(present.values())) == 1,
        ", ".join(f"{k} {v}" for k, v in present.items()),
    )


def role_driver(versions: Mapping[str, str]) -> str:
    """The driver version the pytorch role reads: /sys/module/nvidia/version, else the others."""
    return versions["sys_module"] or versions["proc"] or versions["nvidia_smi"]


def variant_cuda(variant: str) -> tuple[int, int] | None:
    """The CUDA version a variant of the role's table is built for; None for cpu."""
    return next((cuda for v, cuda, _ in torch_variant.CUDA_VARIANTS if v == variant), None)


def check_variant(info: Mapping[str, str], driver_cuda: str | None, gpus: int) -> Check:
    """The torch build the role picks from the driver uses the GPUs and runs on this driver."""
    variant, reason = info["variant"], info["reason"]
    built = variant_cuda(variant)
    if built is None:
        return _ok("torch_variant", gpus == 0, f"{variant}: {reason}")
    runs = cuda_tuple(driver_cuda)
    if runs is None:
        return Check("torch_variant", PASS, f"{variant}: {reason}; driver CUDA version unknown")
    detail = (
        f"{variant} (CUDA {built[0]}.{built[1]}): {reason}; the driver runs CUDA up to "
        f"{runs[0]}.{runs[1]} (nvidia-smi)"
    )
    return _ok("torch_variant", built <= runs, detail)


def slurmd_layout(text: str | None) -> tuple[dict | None, Check]:
    """slurm_node_info.parse_slurmd_c on `slurmd -C`, where slurmd is installed."""
    if text is None:
        return None, Check("slurmd_c", SKIP, "no slurmd on this machine")
    try:
        layout = slurm_node_info.parse_slurmd_c(text)
    except ValueError as exc:
        return None, Check("slurmd_c", FAIL, str(exc))
    return layout, Check("slurmd_c", PASS, " ".join(f"{k}={v}" for k, v in layout.items()))


def hardware(obs: Observed) -> dict[str, Any]:
    """Facts and checks of the project's detection code on one machine's outputs."""
    gpus, source = module_gpus(obs)
    smi = parse_smi_xml(obs.smi_xml) if obs.smi_xml else None
    pci = cuda.parse_pci_devices(obs.pci_sysfs)
    pci_lspci = cuda.parse_pci_devices(obs.pci_lspci) if obs.pci_lspci is not None else None
    versions = driver_versions(obs, smi)
    driver = role_driver(versions)
    info = torch_variant.torch_variant_info(driver)
    driver_cuda = smi["cuda_version"] if smi else None
    layout, layout_check = slurmd_layout(obs.slurmd_c)
    checks = [
        layout_check,
        check_smi(gpus, smi),
        check_types(gpus),
        check_device_nodes(gpus, obs.device_nodes, source),
        check_minor_numbers(gpus, smi),
        check_pci(gpus, smi, pci),
        check_lspci(pci, pci_lspci),
        check_driver(versions),
        check_variant(info, driver_cuda, len(gpus)),
    ]
    if obs.smi_error:
        checks.insert(0, Check("nvidia_smi_runs", FAIL, obs.smi_error))
    return {
        "gpus": gpus,
        "gpu_source": source,
        "gpu_count": len(gpus),
        "slurmd_c": layout,
        "smi": smi,
        "gres_lines": slurm_conf.gres_lines(gpus, False),
        "gres_lines_nvml": slurm_conf.gres_lines(gpus, True),
        "gres_spec": slurm_conf.gres_spec(gpus),
        "pci": pci,
        "pci_lspci": pci_lspci,
        "driver_versions": versions,
        "driver_cuda": driver_cuda,
        "torch_variant": dict(info),
        "torch_variant_from_cuda": torch_variant.torch_variant(driver_cuda or ""),
        "checks": [asdict(c) for c in checks],
    }


# --- checks of torch on the GPUs -------------------------------------------


def check_torch(report: Mapping[str, Any], expected: int) -> Check:
    """verify_torch.py's report judged by the pytorch role's own torch_report_problems."""
    data = torch_variant.torch_report(dict(report))
    if data.get("error"):
        return Check("torch", SKIP, f"no usable torch: {data['error']}")
    if not data.get("cuda_build"):
        return Check("torch", SKIP, f"torch {data['torch']} is a CPU build: no CUDA torch here")
    # The pin is the installed version itself: what counts here is the GPUs, not the pin.
    problems = torch_variant.torch_report_problems(data, expected, data["torch"])
    detail = (
        f"torch {data['torch']} (CUDA {data['cuda_build']}, NCCL {data['nccl']}): "
        f"{data['device_count']} device(s) {sorted(set(data['devices']))}, expected {expected}"
    )
    return _ok("torch", not problems, "; ".join([detail, *problems]))


def cuda_torch(report: Mapping[str, Any] | None) -> bool:
    return bool(report and report.get("cuda_available") and report.get("device_count"))


def smoke_summary(verdict: Mapping[str, Any], rank0: Mapping[str, Any] | None) -> dict[str, Any]:
    """Rendezvous, all_reduce and loss from the smoke job's report and rank 0's checks."""
    checks = {c["name"]: bool(c.get("ok")) for c in (rank0 or {}).get("checks", [])}
    reduces = [ok for name, ok in checks.items() if name.startswith("all_reduce_")]
    return {
        "verdict": verdict.get("verdict"),
        "cause": verdict.get("cause"),
        "backend": verdict.get("backend"),
        "world_size": verdict.get("world_size"),
        "checks_passed": verdict.get("checks_passed"),
        "rendezvous": checks.get("world_size", False) and checks.get("unique_ranks", False),
        "all_reduce": bool(reduces) and all(reduces),
        "loss_decreased": checks.get("loss_decreased", False),
        "first_loss": verdict.get("first_loss"),
        "last_loss": verdict.get("last_loss"),
        "peak_busbw_GBps": verdict.get("peak_busbw_GBps"),
    }


def check_smoke(summary: Mapping[str, Any], world_size: int) -> Check:
    parts = ("rendezvous", "all_reduce", "loss_decreased")
    failed = [p for p in parts if not summary[p]]
    ok = (
        summary["verdict"] == "PASS"
        and summary["backend"] == "nccl"
        and summary["world_size"] == world_size
        and not failed
    )
    detail = (
        f"ddp_smoke {summary['verdict']} on {summary['world_size']} rank(s), backend "
        f"{summary['backend']}, {summary['checks_passed']} checks passed, loss "
        f"{summary['first_loss']} -> {summary['last_loss']}"
    )
    if summary.get("cause"):
        detail += f"; {summary['cause']}"
    if failed:
        detail += f"; not passed: {', '.join(failed)}"
    return _ok("ddp_smoke", ok, detail)


def copy_rows(probe: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The copy probe's rows with the published bandwidth and the fraction of it."""
    rows = []
    for row in probe.get("devices", []):
        published, model = published_bandwidth(str(row.get("name", "")))
        tbps = row.get("TBps")
        fraction = round(tbps / published, 3) if published and tbps else None
        rows.append(
            {**row, "published_TBps": published, "published_model": model, "fraction": fraction}
        )
    return rows


def check_copy(rows: list[dict[str, Any]], probe: Mapping[str, Any], expected: int) -> Check:
    if probe.get("error"):
        return Check("copy_bandwidth", FAIL, f"copy probe failed: {probe['error']}")
    parts = [
        f"cuda:{r['index']} {r['name']}: {r['TBps']:.3f} TB/s"
        + (
            f" = {r['fraction']:.2f} of {r['published_TBps']} TB/s"
            if r["fraction"] is not None
            else f" (fraction null: {r['published_model']})"
        )
        for r in rows
    ]
    return _ok(
        "copy_bandwidth",
        len(rows) == expected,
        "; ".join(parts) or "no device measured",
    )


# --- verdict ---------------------------------------------------------------


def verdict(checks: Sequence[Mapping[str, Any]], facts: Mapping[str, Any]) -> str:
    """FAIL when any check failed; else PASS, NO GPU or NO DRIVER."""
    if any(c["status"] == FAIL for c in checks):
        return "FAIL"
    if facts["gpu_count"]:
        return "PASS"
    return "NO DRIVER" if facts["pci"]["gpu"] else "NO GPU"


def headline(result: Mapping[str, Any]) -> str:
    facts = result["hardware"]
    word = result["verdict"]
    if word == "NO GPU":
        what = "no NVIDIA GPU on this machine (nvidia-smi, /dev/nvidia*, PCI): GPU parts skipped"
    elif word == "NO DRIVER":
        what = (
            f"{len(facts['pci']['gpu'])} NVIDIA GPU(s) on PCI but no driver loaded: "
            "the cuda role would install one; GPU parts skipped"
        )
    else:
        names = sorted({g["name"] or "?" for g in facts["gpus"]})
        what = f"{facts['gpu_count']} GPU(s) {', '.join(names)} ({facts['gpu_source']})"
    return f"gpu-check {word} on {result['host']} at {result['time']}: {what}"


def summary_text(result: Mapping[str, Any]) -> str:
    """The short text summary: headline, what the project's code found, one line per check."""
    facts = result["hardware"]
    variant = facts["torch_variant"]
    versions = [f"{k} {v}" for k, v in facts["driver_versions"].items() if v]
    gres = (
        [
            f"slurm.conf Gres={facts['gres_spec']}; gres.conf (with Slurm's NVML plugin: "
            f"{', '.join(facts['gres_lines_nvml'])}):",
            *(f"  {line}" for line in facts["gres_lines"]),
        ]
        if facts["gres_lines"]
        else ["gres.conf: no GPU lines, no Gres="]
    )
    lines = [
        headline(result),
        *gres,
        f"driver: {', '.join(versions) or 'none loaded'}; "
        f"driver CUDA version {facts['driver_cuda'] or '-'}",
        f"pytorch role would install: {variant['variant']} ({variant['reason']})",
    ]
    lines.append("checks:")
    lines += [f"  {c['status'].upper():4} {c['name']}: {c['detail']}" for c in result["checks"]]
    lines += [f"note: {note}" for note in result.get("notes", [])]
    return "\n".join(lines) + "\n"
