"""The controller's Slurm files against what playbooks/packages.yml's probe found.

A pure function (tests/test_slurm_files.py), called from roles/slurm_common/vars:
whether a node other than the controller has nothing for the compare task to
do (which files a run writes is the change plan's file_writes). Without a
probe (cluster_node_state undefined: {}) nothing is proven and the task runs.
"""

from __future__ import annotations

from collections.abc import Mapping

try:
    from ansible_collections.gpulab.slurm_cluster.plugins.filter.probed import probed_file
except ImportError:  # pragma: no cover - loaded by path beside probed.py
    from probed import probed_file  # type: ignore[no-redef]

# Where slurmd keeps the files it fetched from slurmctld (configless).
FETCHED_DIR = "/run/slurm/conf"
_MISSING = object()


def slurm_node_clean(
    state: Mapping | None,
    sha1s: Mapping,
    conf_dir: str,
    dropin: str,
    fetched_dir: str = FETCHED_DIR,
) -> bool:
    """True when the probe proves the node needs neither removals, a drop-in nor a new copy.

    For each {name: SHA-1} of the controller's files: no local conf_dir/name,
    and slurmd's fetched copy in fetched_dir probed, absent or with that
    SHA-1. dropin: the systemd drop-in file a configless node must have
    ('' on a node that is not configless). False without a probe.
    """
    if not isinstance(state, Mapping) or "files" not in state:
        return False
    for name, sha1 in sha1s.items():
        local = probed_file(state, f"{conf_dir}/{name}")
        copy = probed_file(state, f"{fetched_dir}/{name}")
        if local.get("exists", True) or "exists" not in copy:
            return False
        if copy["exists"] and copy.get("sha1", _MISSING) != sha1:
            return False
    return not (dropin and not probed_file(state, dropin).get("exists", False))


class FilterModule:
    def filters(self) -> dict:
        return {
            "slurm_node_clean": slurm_node_clean,
        }
