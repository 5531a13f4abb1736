#!/usr/bin/python
"""Ansible module: whether this Python's environment already holds every requirement.

The pytorch role runs it with the venv's Python (``ansible_python_interpreter``)
before pip, so that a rerun with nothing to install does not pay pip's
start-up (about 2 s per node).
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: venv_packages
short_description: Say whether a Python environment already holds some requirements
description:
  - Judged here, in the Python that runs the module (set C(ansible_python_interpreter)
    to the venv's python), C(name) (installed at all) and C(name==version) with
    PEP 440's rule that a pin without C(+local) accepts any local build.
  - With I(variant) (cu128, cpu, ...) an installed torch must carry C(+variant).
  - Anything else (other operators, extras, markers, URLs) is left to pip and
    counts as missing ("pip decides").
  - Read-only; supports check mode.
options:
  requirements:
    description: pip requirement strings.
    type: list
    elements: str
    required: true
  variant:
    description: The local version label torch must carry; empty for any.
    type: str
    default: ""
  verify:
    description: >-
      A Python script and its arguments ({script, args}) run with this Python
      after the check, so that a second look at the venv (the pytorch role's
      files/verify_torch.py) costs no second round trip. Its rc, stdout and
      stderr come back as C(verify).
    type: dict
author:
  - slurm-cluster-in-a-box contributors (@gpulab)
"""

EXAMPLES = r"""
- name: Is pinned torch of the cpu variant already in the venv?
  gpulab.slurm_cluster.venv_packages:
    requirements: [torch==2.13.0, numpy]
    variant: cpu
  vars:
    ansible_python_interpreter: /opt/pytorch/venv/bin/python
  register: venv_check

- name: Install only when something is missing
  ansible.builtin.pip:
    name: [torch==2.13.0, numpy]
    virtualenv: /opt/pytorch/venv
  when: not venv_check.satisfied
"""

RETURN = r"""
satisfied:
  description: Whether every requirement is met.
  returned: always
  type: bool
missing:
  description: Why each requirement that is not surely met is not.
  returned: always
  type: list
  elements: str
verify:
  description: rc, stdout and stderr of the O(verify) script.
  returned: when O(verify) is given
  type: dict
"""

import re
import subprocess
import sys
from importlib import metadata

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.pep440 import version_matches

_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:==\s*([A-Za-z0-9.+!_-]+))?\s*$")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def missing(requirements: list[str], variant: str = "") -> list[str]:
    """Why each requirement is not (surely) met; [] when all are."""
    why = []
    for requirement in requirements:
        match = _REQ.match(requirement)
        if not match:
            why.append(f"{requirement}: pip decides")
            continue
        name, pinned = match.groups()
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            why.append(f"{name} is not installed")
            continue
        if pinned and not version_matches(installed, pinned):
            why.append(f"{name} {installed} installed, {requirement} wanted")
            continue
        if variant and _norm(name) == "torch" and installed.partition("+")[2] != variant:
            why.append(f"torch {installed} installed, variant {variant} wanted")
    return why


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "requirements": {"type": "list", "elements": "str", "required": True},
            "variant": {"type": "str", "default": ""},
            "verify": {"type": "dict"},
        },
        supports_check_mode=True,
    )
    why = missing(module.params["requirements"], module.params["variant"])
    extra = {}
    if module.params["verify"]:
        spec = module.params["verify"]
        args = [str(arg) for arg in spec.get("args") or []]
        proc = subprocess.run(
            [sys.executable, "-c", str(spec["script"]), *args],
            capture_output=True,
            text=True,
            check=False,
        )
        extra["verify"] = {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
    module.exit_json(
        changed=False,
        satisfied=not why,
        missing=why,
        msg="; ".join(why) if why else "all installed: " + " ".join(module.params["requirements"]),
        **extra,
    )


if __name__ == "__main__":
    main()
