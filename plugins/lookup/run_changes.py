"""Lookup gpulab.slurm_cluster.run_changes: how many results this run reported changed."""

from __future__ import annotations

DOCUMENTATION = r"""
name: run_changes
author: slurm-cluster-in-a-box contributors (@gpulab)
version_added: 0.1.0
short_description: The number of task results this run has reported changed so far
description:
  - As the callback P(gpulab.slurm_cluster.run_changes#callback) counts them, in
    Ansible's own process. Null where that callback is not enabled (nobody counts);
    a reader must then assume something changed.
  - Takes no terms.
"""

EXAMPLES = r"""
- name: Note how many changes the run has made so far
  ansible.builtin.set_fact:
    changes_at_probe: "{{ lookup('gpulab.slurm_cluster.run_changes') }}"
"""

RETURN = r"""
_raw:
  description: One element, the count, or null where the callback is not enabled.
  type: list
  elements: int
"""

from ansible.plugins.lookup import LookupBase  # noqa: E402
from ansible_collections.gpulab.slurm_cluster.plugins.plugin_utils import (  # noqa: E402
    run_changes,
)


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        return [run_changes.changed()]
