"""The accounting plan from what playbooks/packages.yml's probe read on the controller.

Pure function (tests/test_sacctmgr_sync.py). The probe ran the three
`sacctmgr show` reads of the sacctmgr_sync module (module_utils/sacctmgr.py)
before the run; the same plan from them says whether the module has anything
to do, so a rerun with nothing to change costs no round trip for it.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.sacctmgr import plan, rows_of

# The probe's command names for the three reads.
PROBE_NAMES = {"qos": "acct_qos", "accounts": "acct_accounts", "assocs": "acct_assocs"}


def sacctmgr_plan(
    commands: Mapping | None, cluster: str, qos: list, accounts: list
) -> list[str] | None:
    """The sacctmgr commands still to run; None when the probe did not read all three."""
    reads = {}
    for what, name in PROBE_NAMES.items():
        result = (commands or {}).get(name) or {}
        if result.get("rc") != 0:
            return None
        reads[what] = rows_of(what, result.get("stdout", ""))
    cmds = plan(
        cluster, list(qos), list(accounts), reads["qos"], reads["accounts"], reads["assocs"]
    )
    return [" ".join(cmd) for cmd in cmds]


class FilterModule:
    def filters(self) -> dict:
        return {"sacctmgr_plan": sacctmgr_plan}
