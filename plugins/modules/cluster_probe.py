#!/usr/bin/python
"""Ansible module: read what the doctor needs from one node, in one round trip."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cluster_probe
short_description: Read-only health probe of one Slurm node for the cluster doctor
description:
  - >-
    O(phase=local) reads the node's own state - services, the munge key (mode,
    owner and a fingerprint, never the key), a fresh munge credential, config
    file hashes, versions, C(slurmd -G) and the gres.conf devices, users, name
    resolution, TCP ports, the shared filesystem (writes one token file, as
    O(job_user), in O(token_dir)), the lab's users (uid and gid, and a file
    written in each one's folder as that user) and torch in the venv. On the
    controller it also asks C(scontrol ping) and C(scontrol show node), reading the
    nodes again for at most 3 s while one that is not DOWN is NOT_RESPONDING (a node
    just resumed, until slurmctld's next ping, about 0.5 s).
  - O(phase=cross) decodes credentials made on other nodes and reads their token files.
    O(phase=local) with O(decode) or O(read_tokens) does the same in its round trip
    (a node decoding the controller's credential while it probes itself).
  - O(phase=seed) makes a credential and writes the token file, as O(phase=local)
    does, and returns them with the time it read; O(phase=local) with an empty
    O(token) then writes none.
  - >-
    Changes nothing but the token file in O(token_dir), written by O(job_user),
    never by root; root reads no file there. Runs the same in check mode. The
    result holds a munge credential - register it with C(no_log).
options:
  phase:
    description: >-
      Which round trip: O(phase=seed) on the controller first (its credential
      and token, which the others' O(phase=local) decode and read), O(phase=local)
      on every node, O(phase=cross) on the controller last.
    type: str
    choices: [local, cross, seed]
    required: true
  controller:
    description: Whether this node runs slurmctld.
    type: bool
    default: false
  compute:
    description: Whether this node runs slurmd.
    type: bool
    default: false
  slurm_node:
    description:
      - With O(phase=local), also read slurmd -C, the GPUs and the NVML plugin as the
        module M(gpulab.slurm_cluster.slurm_node_info) does, and set its fact
        C(slurm_node) (the slurm_common role's rendering then needs no round trip of
        its own). A node where they cannot be read gets no fact and says why in
        C(slurm_node_error).
    type: bool
    default: false
  munge_key:
    description: Path of the munge key.
    type: path
    default: /etc/munge/munge.key
  conf_dir:
    description: Slurm config folder.
    type: path
    default: /etc/slurm
  shared_path:
    description: Shared mount point; empty for no check.
    type: str
    default: ""
  job_user:
    description: User that writes and reads the token files.
    type: str
    default: nobody
  token_dir:
    description: The job user's folder of the token files.
    type: str
    default: ""
  users:
    description: The lab's users, each C({name, dir}).
    type: list
    elements: dict
    default: []
  run_id:
    description: This doctor run (folder of the token files).
    type: str
    default: ""
  name:
    description: Name of this node's token file; default the host name.
    type: str
    default: ""
  token:
    description: Random value written to the token file (not a secret); empty, none is written.
    type: str
    default: ""
  venv_python:
    description: Python of the torch venv; empty for none.
    type: str
    default: ""
  decode:
    description: "C({name: credential}) to decode here (O(phase=cross), or O(phase=local) as well)."
    type: dict
    default: {}
  read_tokens:
    description: >-
      C({name: path}) of the token files to read (paths, not secrets), as
      O(decode).
    type: dict
    default: {}
  ports:
    description: "O(phase=local) - C({name: [host, port]}) to connect to."
    type: dict
    default: {}
  connect_timeout:
    description: Seconds for each TCP connect.
    type: float
    default: 2
  resolve:
    description: >-
      O(phase=local) - names to resolve here (the controller's: a wrong or
      loopback answer is a cause of its own).
    type: list
    elements: str
    default: []
  checks_config:
    description: >-
      O(phase=local) - the node's check settings (the slurm_common role writes
      them on every node); the registry's node checks with use doctor
      (module_utils/cluster_checks.py) run here by their readers, without
      draining. Empty for none.
    type: str
    default: ""
  torch_quick:
    description: >-
      With O(venv_python), find torch and its version without importing it (a
      smoke job's doctor: the job imports it).
    type: bool
    default: false
  torch_script:
    description: >-
      With O(venv_python) and not O(torch_quick), the pytorch role's files/verify_torch.py
      (as text), run read-only: the report it kept while nothing torch depends on changed,
      else torch imported. Empty, torch is imported here each time.
    type: str
    default: ""
  torch_fresh:
    description: With O(torch_script), import torch even where the kept report holds.
    type: bool
    default: false
  health_state_dir:
    description: Where the node health program keeps its last verdict (last.json).
    type: str
    default: /var/lib/slurm-cluster/health
  health_files:
    description: >-
      O(phase=local) - also return the node health program's last.json and the last 500 lines
      of its events.jsonl (C(health_files), as the monitoring role's cluster report reads them).
    type: bool
    default: false
author:
  - slurm-cluster-in-a-box contributors (@gpulab)
"""

EXAMPLES = r"""
- name: Read each node's own state (first round trip)
  gpulab.slurm_cluster.cluster_probe:
    phase: local
    controller: "{{ item == 'ctl' }}"
    compute: "{{ item != 'ctl' }}"
    shared_path: /shared
    job_user: clusterproof
    token_dir: /shared/.cluster/runs/doctor
    run_id: "20261202T1200"
    name: "{{ item }}"
    token: "20261202T1200-{{ item }}"
    ports:
      slurmctld: [ctl, 6817]
  delegate_to: "{{ item }}"
  loop: [ctl, node1, node2]
  register: local_probe
  no_log: true  # the result holds a munge credential

- name: Decode the controller's credential on node1 and read its token (second round trip)
  gpulab.slurm_cluster.cluster_probe:
    phase: cross
    job_user: alice
    decode:
      ctl: "{{ local_probe.results[0].probe.credential }}"
    read_tokens:
      ctl: /shared/.cluster-doctor/20261202T1200/ctl
  delegate_to: node1
  no_log: true
"""

RETURN = r"""
probe:
  description: >-
    O(phase=local) - host, time, services, key, files, conf_dir, versions,
    ports, torch, users, shared, ids, self_addrs, credential and
    credential_error; checks (the node checks' results) and kinds, or
    checks_error; hardware on compute nodes; ping and nodes on the
    controller; slurm_node_error with O(slurm_node); cross (as
    O(phase=cross) returns it) with O(decode) or O(read_tokens). O(phase=cross) -
    decoded (name to unmunge's status, code, encode_time, decode_time,
    encode_host) and tokens (name to ok, error).
    The judging is the doctor_report filter's.
  returned: always
  type: dict
  sample:
    decoded:
      ctl:
        status: Success
        code: 0
        encode_time: 1796212800
        decode_time: 1796212801
        encode_host: ctl
    tokens:
      ctl: {ok: true}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.doctor_local import (
    PHASES,
    SPEC,
    node_facts,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "phase": {"type": "str", "choices": ["local", "cross", "seed"], "required": True},
            **SPEC,
        },
        supports_check_mode=True,
    )
    p = module.params
    probe = PHASES[p["phase"]](p)
    # As slurm_node_info sets it (cached with the other facts).
    facts = node_facts(probe, p)
    module.exit_json(changed=False, probe=probe, ansible_facts=facts)


if __name__ == "__main__":
    main()
