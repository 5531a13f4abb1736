"""What slurmctld and accounting held before this run changed anything.

Pure functions (tests/test_slurm_before.py), called from roles/cluster/vars:
they read what playbooks/packages.yml's probe asked on the controller (its
commands `accounting` and `sinfo`), or what slurm_daemons asked itself.
"""

from __future__ import annotations

from collections.abc import Mapping


def slurm_accounting_registered(stdout: str | None, cluster: object) -> bool:
    """True when a `cluster|controlhost` line names the cluster with a host.

    stdout: `sacctmgr --noheader --parsable2 list cluster format=cluster,controlhost`
    ('' when not asked). The name is compared in lower case, as accounting
    keeps it; a cluster without a control host has not registered yet.
    """
    name = str(cluster).lower()
    for line in (stdout or "").splitlines():
        fields = line.split("|")
        if len(fields) > 1 and fields[0] == name and fields[1].strip():
            return True
    return False


def slurm_nodes_before(asked: Mapping | None, probed: Mapping | None) -> dict:
    """{rc, lines} of `sinfo --Node '%N|%t|%E'`: slurm_daemons' own ask, else the probe's.

    asked: a registered command result; used when it has an rc (not skipped).
    probed: the probe's command result on the controller ({} when not asked).
    rc is 1 when neither has one (slurmctld's nodes are unknown).
    """
    result = asked if isinstance(asked, Mapping) and "rc" in asked else probed
    if not isinstance(result, Mapping):
        result = {}
    return {"rc": result.get("rc", 1), "lines": (result.get("stdout") or "").splitlines()}


class FilterModule:
    def filters(self) -> dict:
        return {
            "slurm_accounting_registered": slurm_accounting_registered,
            "slurm_nodes_before": slurm_nodes_before,
        }
