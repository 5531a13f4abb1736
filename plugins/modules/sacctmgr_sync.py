#!/usr/bin/python
"""Ansible module: make Slurm's accounting QoS, accounts and users match a description."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sacctmgr_sync
short_description: Idempotent QoS, accounts and user associations through sacctmgr
description:
  - Reads QoS, accounts and associations of the cluster with C(sacctmgr show),
    adds what is missing and modifies what differs. Nothing listed is removed.
  - Supports check mode (reports the sacctmgr commands it would run).
options:
  cluster:
    description: Cluster name as in slurm.conf.
    type: str
    required: true
  qos:
    description: List of {name, grp_tres_mins (e.g. gres/gpu=60000), max_wall (e.g. 1-00:00:00)}.
    type: list
    elements: dict
    default: []
  accounts:
    description: List of {name, description, organization, qos (list), users (list)}.
    type: list
    elements: dict
    default: []
author:
  - slurm-cluster-in-a-box contributors (@gpulab)
"""

EXAMPLES = r"""
- name: QoS, accounts and their users in Slurm's accounting
  gpulab.slurm_cluster.sacctmgr_sync:
    cluster: lab
    qos:
      - name: gpu-hours
        grp_tres_mins: gres/gpu=60000
        max_wall: 1-00:00:00
    accounts:
      - name: vision
        description: Vision group
        organization: lab
        qos: [normal, gpu-hours]
        users: [alice, bob]
  register: accounting

- name: Show what it would run, without running it
  gpulab.slurm_cluster.sacctmgr_sync:
    cluster: lab
    accounts: [{name: vision, users: [carol]}]
  check_mode: true
"""

RETURN = r"""
commands:
  description: The sacctmgr commands run (or, in check mode, that would run), in order.
  returned: always
  type: list
  elements: str
  sample:
    - sacctmgr --immediate add qos gpu-hours GrpTRESMins=gres/gpu=60000 MaxWall=1-00:00:00
    - >-
      sacctmgr --immediate add account vision Cluster=lab Description=Vision group
      Organization=lab QOS=gpu-hours,normal
    - sacctmgr --immediate add user alice Account=vision Cluster=lab
"""

from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.sacctmgr import (
    plan,
    rows_of,
    show_argv,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "cluster": {"type": "str", "required": True},
            "qos": {"type": "list", "elements": "dict", "default": []},
            "accounts": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params

    def show(what: str) -> tuple:
        """(rows, error): run in a thread, so it reports and never exits."""
        cmd = show_argv(what, p["cluster"])
        rc, out, err = module.run_command(cmd)
        if rc != 0:
            return [], f"{' '.join(cmd)} failed: {err.strip() or out.strip()}"
        return rows_of(what, out), ""

    # The three reads side by side (each sacctmgr is one slurmdbd round trip).
    with ThreadPoolExecutor(max_workers=3) as pool:
        reads = list(pool.map(show, ["qos", "accounts", "assocs"]))
    errors = [error for _rows, error in reads if error]
    if errors:
        module.fail_json(msg="; ".join(errors))
    have_qos, have_accounts, have_assocs = (rows for rows, _error in reads)
    cmds = plan(p["cluster"], p["qos"], p["accounts"], have_qos, have_accounts, have_assocs)
    if not module.check_mode:
        for cmd in cmds:
            rc, out, err = module.run_command(cmd)
            if rc != 0:
                module.fail_json(
                    msg=f"{' '.join(cmd)} failed: {err.strip() or out.strip()}", commands=cmds
                )
    module.exit_json(changed=bool(cmds), commands=[" ".join(c) for c in cmds])


if __name__ == "__main__":
    main()
