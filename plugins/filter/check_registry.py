"""Filters over the check registry (plugins/module_utils/cluster_checks.py)."""

from __future__ import annotations

from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.cluster_checks import (
    alert_rules,
)


def check_alert_rules(minutes: dict) -> dict:
    """Prometheus' rules file: one rule per alert of each check with use alert."""
    return alert_rules({k: float(v) for k, v in minutes.items()})


class FilterModule:
    def filters(self) -> dict:
        return {"check_alert_rules": check_alert_rules}
