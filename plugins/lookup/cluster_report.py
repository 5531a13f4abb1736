"""Lookup gpulab.slurm_cluster.cluster_report: the HTML cluster report and the verdict metrics."""

from __future__ import annotations

DOCUMENTATION = r"""
name: cluster_report
author: slurm-cluster-in-a-box contributors (@gpulab)
version_added: 0.1.0
short_description: Write the HTML cluster report and return the verdict metrics
description:
  - Reads the control machine's results folder of one cluster (the doctor's
    reports, the smoke job's verdicts and history, the node health program's
    kept files) and writes one self-contained HTML page there,
    C(cluster-report.html) by default, which opens from a file with no server
    and no network.
  - First keeps the node health program's files given in O(health) under
    C(<results folder>/health/), each node's last verdict as C(<node>.json) and
    its drains, resumes and reason changes appended to C(<node>-events.jsonl)
    when not kept yet (so a truncated events.jsonl on the node loses nothing).
  - Returns the doctor's, the smoke job's and the acceptance gate's verdicts in
    Prometheus' text exposition format, for the node exporter's textfile
    collector on the controller (roles/monitoring).
  - Runs on the control machine, in Ansible's own process (no module, no host
    round trip), so a playbook pays for it only in one task.
options:
  _terms:
    description: The results folder (cluster_results_dir); one term.
    required: true
    type: list
    elements: str
  out:
    description: The HTML file to write; default C(<results folder>/cluster-report.html).
    type: str
    default: ""
  bench_dir:
    description:
      - A bench folder whose PNG charts and C(results/*.json) the page shows; empty for none.
    type: str
    default: ""
  verdicts_file:
    description:
      - Also keep the verdict metrics in this file on the control machine, rewritten only
        when they differ; the result's C(changed) says whether they did. Empty for none.
    type: str
    default: ""
  health:
    description:
      - The node health program's files per compute node, to keep before the page is
        written. Each value is the registered result (or the output) of the read command
        of roles/monitoring/tasks/report.yml (C(last.json), the line
        C(--- events.jsonl ---), then the tail of C(events.jsonl)), or a mapping with
        C(last) and C(events) texts, or a list of those, of which the first that holds the
        files counts (site.yml passes the report's own read, then the monitoring probe's
        output, whose part after the line C(--- health ---) is the same read). A skipped,
        unreachable or empty entry keeps the node's earlier files.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Write the report; note the verdict metrics and whether they changed
  ansible.builtin.set_fact:
    report: >-
      {{ query('gpulab.slurm_cluster.cluster_report', cluster_results_dir,
               verdicts_file=cluster_results_dir ~ '/cluster-verdicts.prom') | first }}

- name: Keep the verdict metrics on the controller when they changed
  ansible.builtin.copy:
    content: "{{ report.metrics }}"
    dest: /var/lib/prometheus/node-exporter/slurm_cluster_verdicts.prom
    mode: "0644"
  when: report.changed
"""

RETURN = r"""
_raw:
  description: One item.
  type: list
  elements: dict
  contains:
    metrics:
      description: The verdict metrics in Prometheus' text exposition format.
      type: str
    changed:
      description: Whether verdicts_file was rewritten (false when no verdicts_file).
      type: bool
    report:
      description: The HTML file written.
      type: str
"""

from ansible.errors import AnsibleLookupError  # noqa: E402
from ansible.plugins.lookup import LookupBase  # noqa: E402
from ansible_collections.gpulab.slurm_cluster.plugins.plugin_utils import (  # noqa: E402
    cluster_health_files,
    cluster_report,
)


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        if len(terms) != 1:
            raise AnsibleLookupError("cluster_report takes one term: the results folder")
        keep = self.get_option("verdicts_file")
        try:
            cluster_health_files.merge(terms[0], self.get_option("health"))
            path, metrics = cluster_report.write(
                terms[0], self.get_option("out") or None, self.get_option("bench_dir") or None
            )
            changed = cluster_report.keep_metrics(keep, metrics) if keep else False
        except (OSError, ValueError) as exc:
            raise AnsibleLookupError(f"cluster_report: {exc}") from exc
        return [{"metrics": metrics, "changed": changed, "report": str(path)}]
