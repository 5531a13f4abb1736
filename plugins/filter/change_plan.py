"""The daemons' change plan of a run (module_utils/change_plan.py, tests/test_change_plan.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.change_plan import (
    daemon_up,
    key_installs,
    node_of,
    noted_of,
    plan,
)


def daemon_plan(
    hosts: Iterable[Mapping],
    here: Mapping,
    ctl: Mapping,
    dbd: Mapping | None = None,
    sinfo_lines: Iterable[str] = (),
    outside: Iterable[str] = (),
    registered: bool = False,
    ctl_upgraded: bool = False,
    answered: bool = True,
    acceptance: str | None = None,
    batch: object = "25%",
) -> dict:
    """What slurmdbd, slurmctld and each slurmd do in this run, and why; the nodes
    the acceptance gate drains (``acceptance``: its prefix, None when off); the
    slurmd upgrade's batches (``batch``: slurm_upgrade_batch, N or N%).

    here: the variables of the host that asks (slurm_common's notes of the run).
    """
    noted = noted_of(here, ctl, dbd, registered=registered, ctl_upgraded=ctl_upgraded)
    return plan(
        noted,
        [node_of(host) for host in hosts],
        dbd=bool(dbd),
        dbd_up=daemon_up(dbd, "slurmdbd"),
        ctl_up=daemon_up(ctl, "slurmctld"),
        sinfo_lines=sinfo_lines,
        outside=outside,
        answered=answered,
        nodes_changed=here.get("slurm_common_nodes_changed") or (),
        acceptance=acceptance,
        batch=batch,
    ).to_dict()


class FilterModule:
    def filters(self) -> dict:
        # munge_key_plan: module_utils/change_plan.py key_installs, as it is.
        return {"daemon_plan": daemon_plan, "munge_key_plan": key_installs}
