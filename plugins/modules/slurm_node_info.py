#!/usr/bin/python
"""Ansible module: what Slurm and the NVIDIA driver see on this node."""

from __future__ import annotations

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
author:
  - slurm-cluster-in-a-box contributors (@gpulab)
"""

EXAMPLES = r"""
- name: Read the node's hardware as slurmd and nvidia-smi see it
  gpulab.slurm_cluster.slurm_node_info:

- name: Name the GPUs Slurm will be told about
  ansible.builtin.debug:
    msg: "{{ ansible_facts['slurm_node']['gpus'] | map(attribute='name') | list }}"

- name: Look for the NVML plugin in a site-specific place too
  gpulab.slurm_cluster.slurm_node_info:
    plugin_globs:
      - /opt/slurm/lib/slurm/gpu_nvml.so
"""

RETURN = r"""
ansible_facts:
  description: The node's hardware as fact C(slurm_node).
  returned: always
  type: dict
  contains:
    slurm_node:
      description: >-
        cpus, boards, sockets_per_board, cores_per_socket, threads_per_core,
        real_memory (MiB), gpus (index, name, uuid, memory_mib, file, type),
        gpu_source (nvidia-smi, dev or none) and nvml_plugin.
      returned: always
      type: dict
      sample:
        cpus: 2
        boards: 1
        sockets_per_board: 1
        cores_per_socket: 2
        threads_per_core: 1
        real_memory: 24105
        gpus: []
        gpu_source: none
        nvml_plugin: false
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.slurm_node import (
    PLUGIN_GLOBS,
    read_node,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "slurmd": {"type": "str", "default": "slurmd"},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "dev_glob": {"type": "str", "default": "/dev/nvidia[0-9]*"},
            "plugin_globs": {"type": "list", "elements": "str", "default": PLUGIN_GLOBS},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        facts = read_node(
            module.run_command,
            module.get_bin_path(p["slurmd"], required=True),
            module.get_bin_path(p["nvidia_smi"]),
            p["dev_glob"],
            p["plugin_globs"],
        )
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, ansible_facts={"slurm_node": facts})


if __name__ == "__main__":
    main()
