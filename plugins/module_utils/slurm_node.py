"""What slurmd -C and the NVIDIA driver report on a node (modules slurm_node_info, node_state)."""

from __future__ import annotations

import glob
import os
import re
import shutil

from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.slurm_fields import SLURMD_FIELDS

PLUGIN_GLOBS = [
    "/usr/lib/*/slurm-wlm/gpu_nvml.so",
    "/usr/lib/slurm/gpu_nvml.so",
    "/usr/lib64/slurm/gpu_nvml.so",
]

VENDOR_WORDS = {"nvidia", "tesla", "geforce", "quadro"}
# Tokens that describe memory, packaging or interconnect, not the model.
SUFFIX_RE = re.compile(r"^(\d+gb|sxm\d*|pcie|hbm\d*e?|nvl|mig|pg\d+|\d+g)$")


def parse_slurmd_c(text: str) -> dict[str, int]:
    """Parse the NodeName line of `slurmd -C` into snake_case integer fields."""
    line = next((ln for ln in text.splitlines() if ln.startswith("NodeName=")), None)
    if line is None:
        raise ValueError(f"no NodeName= line in slurmd -C output: {text.strip()[:200]!r}")
    pairs = dict(item.split("=", 1) for item in line.split() if "=" in item)
    missing = [k for k in ("CPUs", "RealMemory") if k not in pairs]
    if missing:
        raise ValueError(f"slurmd -C output lacks {', '.join(missing)}: {line!r}")
    out = {"node_name": pairs["NodeName"]}
    for key, name in SLURMD_FIELDS.items():
        if key in pairs:
            out[name] = int(pairs[key])
    return out


def gpu_type(name: str) -> str:
    """Slurm GRES type from a marketing name: 'NVIDIA H100 80GB HBM3' -> 'h100'."""
    tokens = [t for t in re.split(r"[\s\-_]+", name.strip().lower()) if t]
    kept: list[str] = []
    for token in tokens:
        if token in VENDOR_WORDS:
            continue
        if SUFFIX_RE.match(token) and kept:
            break
        kept.append(re.sub(r"[^a-z0-9]", "", token))
    return "_".join(t for t in kept if t)


def parse_nvidia_smi(text: str) -> list[dict]:
    """Parse `nvidia-smi --query-gpu=index,name,uuid,memory.total --format=csv,noheader`."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4:
            raise ValueError(f"unexpected nvidia-smi line: {line!r}")
        index, name, uuid, memory = fields
        mem = re.match(r"(\d+)\s*MiB", memory)
        gpus.append(
            {
                "index": int(index),
                "name": name,
                "uuid": uuid,
                "memory_mib": int(mem.group(1)) if mem else None,
                "file": f"/dev/nvidia{int(index)}",
                "type": gpu_type(name),
            }
        )
    return sorted(gpus, key=lambda g: g["index"])


def gpus_from_devices(paths: list[str]) -> list[dict]:
    """GPUs from device nodes /dev/nvidiaN (no model known)."""
    found = []
    for path in paths:
        m = re.fullmatch(r".*/nvidia(\d+)", path)
        if m:
            idx = int(m.group(1))
            found.append(
                {"index": idx, "name": "", "uuid": "", "memory_mib": None, "file": path, "type": ""}
            )
    return sorted(found, key=lambda g: g["index"])


def read_node(
    run_command,
    slurmd: str,
    nvidia_smi: str | None,
    dev_glob: str = "/dev/nvidia[0-9]*",
    plugin_globs: list[str] | None = None,
) -> dict:
    """The slurm_node facts; run_command(argv) -> (rc, out, err). Raises ValueError."""
    rc, out, err = run_command([slurmd, "-C"])
    if rc != 0:
        raise ValueError(f"slurmd -C failed (rc {rc}): {err.strip() or out.strip()}")
    facts = parse_slurmd_c(out)
    if nvidia_smi:
        rc, out, err = run_command(
            [nvidia_smi, "--query-gpu=index,name,uuid,memory.total", "--format=csv,noheader"]
        )
        if rc != 0:
            raise ValueError(f"nvidia-smi failed (rc {rc}): {err.strip() or out.strip()}")
        facts["gpus"] = parse_nvidia_smi(out)
        facts["gpu_source"] = "nvidia-smi"
    else:
        devices = sorted(glob.glob(dev_glob))
        facts["gpus"] = gpus_from_devices(devices)
        facts["gpu_source"] = "dev" if devices else "none"
    facts["nvml_plugin"] = any(
        os.path.exists(path)
        for pattern in (PLUGIN_GLOBS if plugin_globs is None else plugin_globs)
        for path in glob.glob(pattern)
    )
    return facts


def read_installed(run_command) -> tuple[dict | None, str]:
    """``(facts, "")`` as read_node gives them where slurmd is installed, else
    ``(None, why)``: the probes' form (modules node_state and cluster_probe), which
    report a node they cannot read instead of failing."""
    slurmd = shutil.which("slurmd") or (
        "/usr/sbin/slurmd" if os.path.exists("/usr/sbin/slurmd") else None
    )
    if slurmd is None:
        return None, "slurmd is not installed"
    try:
        return read_node(run_command, slurmd, shutil.which("nvidia-smi")), ""
    except ValueError as exc:
        return None, str(exc)
