"""The TCP connects the doctor's probe makes from each node (tests/test_doctor_ports.py).

Called from roles/cluster_doctor/vars (__cluster_doctor_ports), once per
probed node: slurmctld from every node, and from the controller each probed
compute node's slurmd. Hosts are named as Slurm names them (hostname -s, the
fact ansible_facts.hostname), as slurm.conf's SlurmctldHost and NodeNames do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ansible_collections.gpulab.slurm_cluster.plugins.plugin_utils.filter_errors import (
    ansible_errors,
)


def _int(value: object) -> int:
    """As Jinja's `int` filter: '6817' and 6817.0 are 6817, what is no number is 0."""
    try:
        return int(value, 10) if isinstance(value, str) else int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        try:
            return int(float(value))  # type: ignore[arg-type]
        except (TypeError, ValueError, OverflowError):
            return 0


def _slurm_name(hostvars: Mapping, host: str) -> str:
    facts = hostvars[host].get("ansible_facts") or {}
    if "hostname" not in facts:
        raise ValueError(
            f"doctor_ports: no fact ansible_facts.hostname for {host}: "
            f"gather its facts first (ansible {host} -m ansible.builtin.setup)"
        )
    return facts["hostname"]


@ansible_errors
def doctor_ports(
    node: str,
    controller: str,
    hostvars: Mapping,
    computes: Iterable[str],
    slurmctld_port: object,
    slurmd_port: object,
) -> dict:
    """{check: [Slurm name, port]} that node connects to.

    Every node: {'slurmctld': [controller's name, slurmctld_port]}. The
    controller also {'slurmd@<host>': [host's name, slurmd_port]} for each
    host of computes (the compute nodes that this doctor run probes), in order.
    """
    out = {"slurmctld": [_slurm_name(hostvars, controller), _int(slurmctld_port)]}
    if node == controller:
        for host in computes:
            out[f"slurmd@{host}"] = [_slurm_name(hostvars, host), _int(slurmd_port)]
    return out


class FilterModule:
    def filters(self) -> dict:
        return {"doctor_ports": doctor_ports}
