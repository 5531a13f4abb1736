#!/usr/bin/python
"""Ansible module: what Slurm and the NVIDIA driver see on this node."""

from __future__ import annotations

import glob
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.slurm_fields import SLURMD_FIELDS

DOCUMENTATION = r"""
module: slurm_node_info
short_description: Report the node's hardware as slurmd and nvidia-smi see it
description:
  - Runs C(slurmd -C) and parses CPUs, Boards, SocketsPerBoard, CoresPerSocket,
    ThreadsPerCore and RealMemory.
  - Lists NVIDIA GPUs with C(nvidia-smi --query-gpu=index,name,uuid,memory.total
    --format=csv,noheader) when the tool exists, else from /dev/nvidia[0-9]*.
  - Reports whether Slurm's NVML GPU plugin is installed (AutoDetect=nvml).
  - Read-only; supports check mode. Returns the result as fact C(slurm_node).
options:
  slurmd:
    description: Path or name of the slurmd binary.
    type: str
    default: slurmd
  nvidia_smi:
    description: Path or name of nvidia-smi.
    type: str
    default: nvidia-smi
  dev_glob:
    description: Device nodes counted as GPUs when nvidia-smi is absent.
    type: str
    default: /dev/nvidia[0-9]*
  plugin_globs:
    description: Where Slurm's gpu_nvml plugin may live.
    type: list
    elements: str
    default:
      - /usr/lib/*/slurm-wlm/gpu_nvml.so
      - /usr/lib/slurm/gpu_nvml.so
      - /usr/lib64/slurm/gpu_nvml.so
"""

RETURN = r"""
ansible_facts:
  description: C(slurm_node) with cpus, boards, sockets_per_board, cores_per_socket,
    threads_per_core, real_memory, gpus (index, name, uuid, memory_mib, file, type),
    gpu_source (nvidia-smi, dev or none) and nvml_plugin.
  returned: always
  type: dict
"""

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


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "slurmd": {"type": "str", "default": "slurmd"},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "dev_glob": {"type": "str", "default": "/dev/nvidia[0-9]*"},
            "plugin_globs": {
                "type": "list",
                "elements": "str",
                "default": [
                    "/usr/lib/*/slurm-wlm/gpu_nvml.so",
                    "/usr/lib/slurm/gpu_nvml.so",
                    "/usr/lib64/slurm/gpu_nvml.so",
                ],
            },
        },
        supports_check_mode=True,
    )
    p = module.params
    slurmd = module.get_bin_path(p["slurmd"], required=True)
    rc, out, err = module.run_command([slurmd, "-C"])
    if rc != 0:
        module.fail_json(msg=f"slurmd -C failed (rc {rc}): {err.strip() or out.strip()}")
    try:
        facts = parse_slurmd_c(out)
    except ValueError as exc:
        module.fail_json(msg=str(exc))

    smi = module.get_bin_path(p["nvidia_smi"])
    if smi:
        rc, out, err = module.run_command(
            [smi, "--query-gpu=index,name,uuid,memory.total", "--format=csv,noheader"]
        )
        if rc != 0:
            module.fail_json(msg=f"nvidia-smi failed (rc {rc}): {err.strip() or out.strip()}")
        facts["gpus"] = parse_nvidia_smi(out)
        facts["gpu_source"] = "nvidia-smi"
    else:
        devices = sorted(glob.glob(p["dev_glob"]))
        facts["gpus"] = gpus_from_devices(devices)
        facts["gpu_source"] = "dev" if devices else "none"
    facts["nvml_plugin"] = any(
        os.path.exists(path) for pattern in p["plugin_globs"] for path in glob.glob(pattern)
    )
    module.exit_json(changed=False, ansible_facts={"slurm_node": facts})


if __name__ == "__main__":
    main()
