"""Lookup gpulab.slurm_cluster.results_file: keep one report file on the control machine."""

from __future__ import annotations

DOCUMENTATION = r"""
name: results_file
author: slurm-cluster-in-a-box contributors (@gpulab)
version_added: 0.1.0
short_description: Write a report file in the control machine's results folder
description:
  - Writes O(content) to the file named by the term, on the control machine, in
    Ansible's own process (no module, no round trip; a module on C(localhost) costs
    about 0.3 s). The file is replaced whole (written beside it, then renamed), so a
    reader never sees half of it, and its folder is made when missing.
  - A newline ends the file (added when O(content) has none).
  - With O(latest), a symbolic link of that name in the same folder then points at it.
  - Returns the file's path. Used by the doctor and the smoke job for their JSON reports.
options:
  _terms:
    description: The file to write; one term.
    required: true
    type: list
    elements: str
  content:
    description: What the file holds.
    type: str
    required: true
  latest:
    description: A link of this name beside the file, made to point at it; empty for none.
    type: str
    default: ""
  mode:
    description: The file's mode.
    type: str
    default: "0644"
"""

EXAMPLES = r"""
- name: Keep the report on the control machine
  ansible.builtin.set_fact:
    report_file: >-
      {{ lookup('gpulab.slurm_cluster.results_file', 'results/doctor-' ~ run_id ~ '.json',
                content=report | to_nice_json, latest='doctor-latest.json') }}
  run_once: true
"""

RETURN = r"""
_raw:
  description: The path written.
  type: list
  elements: str
"""

import os  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

from ansible.errors import AnsibleLookupError  # noqa: E402
from ansible.plugins.lookup import LookupBase  # noqa: E402


def keep(path: str | os.PathLike, content: str, latest: str = "", mode: int = 0o644) -> str:
    """Write content to path whole (a temporary file renamed over it); point latest at it."""
    if "/" in latest:
        raise ValueError(f"latest {latest!r}: a name in the file's folder, not a path")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(content if content.endswith("\n") else content + "\n")
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if latest:
        link = path.parent / latest
        tmp_link = path.parent / f".{latest}.{os.getpid()}"
        tmp_link.unlink(missing_ok=True)
        tmp_link.symlink_to(path.name)
        os.replace(tmp_link, link)
    return str(path)


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        if len(terms) != 1:
            raise AnsibleLookupError("results_file takes one term: the file to write")
        try:
            mode = int(str(self.get_option("mode")), 8)
            return [keep(terms[0], self.get_option("content"), self.get_option("latest"), mode)]
        except (OSError, ValueError) as exc:
            raise AnsibleLookupError(f"results_file: {terms[0]}: {exc}") from exc
