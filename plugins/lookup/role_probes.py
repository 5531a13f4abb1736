"""Lookup gpulab.slurm_cluster.role_probes: what the roles want the probe to read on a host."""

from __future__ import annotations

DOCUMENTATION = r"""
name: role_probes
author: slurm-cluster-in-a-box contributors (@gpulab)
version_added: 0.1.0
short_description: Gather the reads each role declares for the node probe
description:
  - A role whose tasks skip work on the probe's word declares what it wants read
    in C(roles/<role>/meta/probe.yml), a mapping of the options of the module
    M(gpulab.slurm_cluster.node_state) (units, files, commands, ...).
  - This lookup renders each declaration for the current host, with the role's
    C(defaults/main.yml) under the play's variables and the role's C(vars/main.yml)
    over them (as the role itself would see them), and returns their union for
    node_state's C(wants) option. One probe per node reads what every role wants,
    and the playbook that runs it names no role's paths.
  - The variable C(probe_role_path) is the declaring role's folder, for its own files.
  - Lists are joined without repeats and commands merged by name. An unknown option,
    a wrong type, or one command or single value declared differently by two roles
    fails, naming the declaration and the fix.
  - Runs on the control machine, in Ansible's own process; the files are read once
    per process.
options:
  _terms:
    description: The roles whose declarations to gather; none for every role that has one.
    required: false
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Probe the node for what every role wants (one round trip)
  gpulab.slurm_cluster.node_state:
    wants: "{{ lookup('gpulab.slurm_cluster.role_probes') }}"
  register: probe

- name: Only what munge and slurm_dbd want
  ansible.builtin.debug:
    msg: "{{ lookup('gpulab.slurm_cluster.role_probes', 'munge', 'slurm_dbd') }}"
"""

RETURN = r"""
_raw:
  description: One item, a mapping of node_state's options (the union of the declarations).
  type: list
  elements: dict
"""

from pathlib import Path  # noqa: E402

from ansible.errors import AnsibleLookupError  # noqa: E402
from ansible.plugins.lookup import LookupBase  # noqa: E402
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.probe_wants import (  # noqa: E402
    WantsError,
    union,
)

ROLES = Path(__file__).resolve().parents[2] / "roles"
DECLARATION = "meta/probe.yml"
_FILES: dict[Path, object] = {}


def declared_roles(roles: Path = ROLES, declaration: str = DECLARATION) -> list[str]:
    """The collection's roles that have the declaration (by default their probe's), by name."""
    return sorted(p.parent.parent.name for p in roles.glob(f"*/{declaration}"))


class LookupModule(LookupBase):
    NAME = "role_probes"  # in its error messages

    def _load(self, path: Path) -> object:
        """A YAML file of the collection as trusted templates (read once), or {} when absent."""
        if path not in _FILES:
            _FILES[path] = (
                self._loader.load_from_file(str(path), trusted_as_template=True)
                if path.is_file()
                else {}
            ) or {}
        return _FILES[path]

    def _scope(self, role: Path, variables: dict | None, *over: dict) -> dict:
        """What a role's declaration sees: its defaults, the play's vars, then its own vars."""
        scope = {**self._load(role / "defaults/main.yml"), **(variables or {})}
        for layer in (self._load(role / "vars/main.yml"), *over):
            scope.update(layer)
        scope["probe_role_path"] = str(role)
        return scope

    def _render(self, where: str, scope: dict, template: object) -> object:
        """A declaration rendered with scope; its error names the file."""
        templar = self._templar.copy_with_new_env(available_variables=scope)
        try:
            return templar.template(template)
        except Exception as exc:  # the template's own error names the variable
            raise AnsibleLookupError(f"{self.NAME}: {where}: {exc}") from exc

    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        names = list(terms) or declared_roles()
        declarations = []
        for name in names:
            role = ROLES / name
            where = f"roles/{name}/{DECLARATION}"
            if not (role / DECLARATION).is_file():
                raise AnsibleLookupError(
                    f"role_probes: {where} does not exist; name a role that declares a probe "
                    f"({', '.join(declared_roles())})"
                )
            scope = self._scope(role, variables)
            declarations.append((where, self._render(where, scope, self._load(role / DECLARATION))))
        try:
            return [union(declarations)]
        except WantsError as exc:
            raise AnsibleLookupError(f"role_probes: {exc}") from exc
