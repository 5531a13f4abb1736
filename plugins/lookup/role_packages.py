"""Lookup gpulab.slurm_cluster.role_packages: the apt packages the roles install on a host."""

from __future__ import annotations

DOCUMENTATION = r"""
name: role_packages
author: slurm-cluster-in-a-box contributors (@gpulab)
version_added: 0.1.0
short_description: Gather the apt packages each role installs on a host
description:
  - A role that installs packages with apt declares which in
    C(roles/<role>/meta/packages.yml), a mapping with C(packages) (a list of
    package names, or null where the role installs nothing on this host) and,
    optionally, C(vars_files) (names of files in the role's C(vars/) folder; the
    first that exists is loaded over C(vars/main.yml), as the role's own
    C(include_vars) picks its distribution's file). A name with a slash is never
    looked up, since the names come from the node's facts.
  - This lookup renders each declaration for the current host, with the role's
    C(defaults/main.yml) under the play's variables and the role's C(vars/main.yml)
    over them (as the lookup P(gpulab.slurm_cluster.role_probes#lookup) does), and returns
    the union, in order and without repeats.
  - site.yml installs the ones its probe found missing in one apt transaction per
    host (C(playbooks/packages.yml)). Each role's own apt task stays and installs
    whatever a declaration left out.
  - A role whose C(vars_files) names no file that exists adds nothing (its own
    tasks then say which distribution they lack). A declaration that is not a
    mapping, an unknown key, or C(packages) that is not a list of names fails,
    naming the file.
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
- name: Install what every role wants here, in one transaction
  ansible.builtin.apt:
    name: "{{ lookup('gpulab.slurm_cluster.role_packages') }}"
    state: present
"""

RETURN = r"""
_raw:
  description: One item, the list of package names.
  type: list
  elements: list
"""

from ansible.errors import AnsibleLookupError  # noqa: E402
from ansible_collections.gpulab.slurm_cluster.plugins.lookup.role_probes import (  # noqa: E402
    ROLES,
    declared_roles,
)
from ansible_collections.gpulab.slurm_cluster.plugins.lookup.role_probes import (  # noqa: E402
    LookupModule as _Declarations,
)

DECLARATION = "meta/packages.yml"
KEYS = ("packages", "vars_files")


class LookupModule(_Declarations):
    NAME = "role_packages"

    def _packages(self, name: str, variables: dict | None) -> list[str]:
        """The packages one role declares for this host."""
        role = ROLES / name
        where = f"roles/{name}/{DECLARATION}"
        if not (role / DECLARATION).is_file():
            raise AnsibleLookupError(
                f"role_packages: {where} does not exist; name a role that declares its packages "
                f"({', '.join(declared_roles(declaration=DECLARATION))})"
            )
        declared = self._load(role / DECLARATION)
        if not isinstance(declared, dict) or set(declared) - set(KEYS):
            raise AnsibleLookupError(
                f"role_packages: {where} must be a mapping of {' and '.join(KEYS)}, "
                f"got {declared!r}"
            )
        over: list[dict] = []
        if declared.get("vars_files"):
            names = self._render(where, self._scope(role, variables), declared["vars_files"])
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise AnsibleLookupError(
                    f"role_packages: {where}: vars_files must be a list of file names, "
                    f"got {names!r}"
                )
            # A plain name in the role's vars/ only: the names come from the
            # node's facts, and the file is loaded as trusted templates.
            found = [
                role / "vars" / n
                for n in names
                if n and "/" not in n and n not in (".", "..") and (role / "vars" / n).is_file()
            ]
            if not found:
                return []
            over.append(self._load(found[0]))
        scope = self._scope(role, variables, *over)
        packages = self._render(where, scope, declared.get("packages"))
        if packages is None:
            return []
        if not isinstance(packages, list) or not all(isinstance(p, str) and p for p in packages):
            raise AnsibleLookupError(
                f"role_packages: {where}: packages must be a list of package names or null, "
                f"got {packages!r}"
            )
        return packages

    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        out: list[str] = []
        for name in list(terms) or declared_roles(declaration=DECLARATION):
            out.extend(p for p in self._packages(name, variables) if p not in out)
        return [out]
