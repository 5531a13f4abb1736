"""What playbooks/packages.yml's node_state probe found, asked by the roles.

Pure functions (tests/test_node_state.py). A role asks these to skip a task
whose outcome the probe already proves; without a probe (a role used on its
own) every answer is "not proven", so the task runs.
"""

from __future__ import annotations

from collections.abc import Mapping

# One definition, shared with the change plan's reading of the probe.
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.change_plan import unit_up


def probed_file(state: Mapping | None, path: str) -> dict:
    """The probe's {exists, sha1, sha256, owner, group, mode} of a path; {} when not asked."""
    return dict(((state or {}).get("files") or {}).get(path) or {})


def packages_missing(wanted: list | str, installed: list | None) -> list[str]:
    """The wanted packages the probe did not find installed, in the order asked.

    installed is cluster_packages_installed (playbooks/packages.yml), None where
    no probe ran: then every package is missing, so the install task runs.
    """
    wanted = [wanted] if isinstance(wanted, str) else list(wanted)
    if installed is None:
        return wanted
    have = set(installed)
    return [p for p in wanted if p not in have]


def probed_dirs_ok(state: Mapping | None, paths: list) -> bool:
    """Whether the probe found every one of these shared folders as wanted ("ok").

    state is cluster_node_state; its shared_dirs maps each folder asked
    (node_state's option shared_dirs) to "ok" or why not. A folder the probe
    was not asked about counts as not as wanted, so the task that makes it runs.
    """
    found = (state or {}).get("shared_dirs") or {}
    return all(found.get(path) == "ok" for path in set(paths))


class FilterModule:
    def filters(self) -> dict:
        return {
            "unit_up": unit_up,
            "probed_file": probed_file,
            "packages_missing": packages_missing,
            "probed_dirs_ok": probed_dirs_ok,
        }
