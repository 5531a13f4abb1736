"""Callback gpulab.slurm_cluster.run_changes: count the results reported changed."""

from __future__ import annotations

DOCUMENTATION = r"""
name: run_changes
author: slurm-cluster-in-a-box contributors (@gpulab)
version_added: 0.1.0
type: aggregate
short_description: Count the task results of this run that reported a change
description:
  - Counts, in Ansible's own process, every task result (handlers included,
    failed ones too) that reported C(changed) since the playbook started. The
    lookup P(gpulab.slurm_cluster.run_changes#lookup) reads the count.
  - C(site.yml) reads it twice, after its first probe and before its doctor. Where
    nothing changed in between, the doctor judges the probe's own reading of
    each node and sends no probe of its own (role cluster_doctor,
    C(cluster_doctor_reuse_s)).
  - It prints nothing and changes no result. Enable it with
    C(callbacks_enabled = gpulab.slurm_cluster.run_changes) in ansible.cfg (the
    project's ansible.cfg does); without it the lookup returns null and the doctor
    probes every node.
requirements:
  - enable in configuration
"""

from ansible.plugins.callback import CallbackBase  # noqa: E402
from ansible_collections.gpulab.slurm_cluster.plugins.plugin_utils import (  # noqa: E402
    run_changes,
)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpulab.slurm_cluster.run_changes"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook):
        run_changes.start()

    def _count(self, result):
        run_changes.add(bool(result._result.get("changed", False)))

    def v2_runner_on_ok(self, result):
        self._count(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._count(result)
