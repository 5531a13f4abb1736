#!/usr/bin/python
"""Ansible module: whether a Python environment already holds every requirement.

The pytorch role runs it before pip with O(python) set to the venv's Python,
so that a rerun with nothing to install does not pay pip's start-up (about
2 s per node), and a cold run, where the venv is not there yet, gets a plain
"not installed" instead of a node that cannot run its module (Mitogen's
strategy counts a missing interpreter as an unreachable host).
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: venv_packages
short_description: Say whether a Python environment already holds some requirements
description:
  - Judged in the Python O(python) names (by default the one that runs the
    module), C(name) (installed at all) and C(name==version) with
    PEP 440's rule that a pin without C(+local) accepts any local build.
  - When O(python) does not exist, nothing is installed and O(verify) is not run.
  - With I(variant) (cu128, cpu, ...) an installed torch must carry C(+variant).
  - Anything else (other operators, extras, markers, URLs) is left to pip and
    counts as missing ("pip decides").
  - Read-only; supports check mode.
options:
  python:
    description: >-
      The Python whose environment is judged (a venv's C(bin/python)); its
      installed versions are read by one run of it. Empty for the Python
      that runs the module.
    type: str
    default: ""
  requirements:
    description: pip requirement strings.
    type: list
    elements: str
    required: true
  variant:
    description: The local version label torch must carry; empty for any.
    type: str
    default: ""
  wait_pip:
    description: >-
      Seconds to wait, before judging, for a pip that is installing into
      this environment (its C(bin/pip*), or its Python's C(-m pip)): one
      that an earlier run left running in the background (the pytorch
      role's C(pytorch_install_background)) and whose run then failed.
      Judged while that pip writes, the environment would look incomplete
      and a second pip would write into it beside the first. The module
      fails, naming the process, when it is still there after that long;
      0 does not look.
    type: int
    default: 0
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
    python: /opt/pytorch/venv/bin/python
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
waited_for:
  description: The pids of the pips of O(wait_pip) that the module waited for.
  returned: always
  type: list
  elements: int
verify:
  description: rc, stdout and stderr of the O(verify) script.
  returned: when O(verify) is given
  type: dict
"""

import json
import os
import subprocess
import sys
import time
from importlib import metadata

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.venv_reqs import (
    VERSIONS_SCRIPT,
    requirement_names,
)
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.venv_reqs import (
    missing as _missing,
)


def local_version(name: str) -> str | None:
    """The installed version of `name` in this Python, None when absent."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def missing(
    requirements: list[str], variant: str = "", versions: dict[str, str | None] | None = None
) -> list[str]:
    """Why each requirement is not (surely) met; [] when all are (this Python's, by default)."""
    return _missing(requirements, variant, local_version if versions is None else versions)


def pips_into(venv: str, proc: str = "/proc") -> list[int]:
    """The pids of pip processes installing into venv: its bin/pip* run by a Python
    (the script is argv[0] or, through its #! line, argv[1]), or its Python's -m pip."""
    bindir = os.path.join(os.path.normpath(venv), "bin") + os.sep
    found = []
    for name in os.listdir(proc):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(os.path.join(proc, name, "cmdline"), "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:  # ended while read, or not ours to read
            continue
        ours = [a for a in argv[:2] if a.startswith(bindir)]
        script = any(os.path.basename(a).startswith("pip") for a in ours)
        module = argv[:1] == ours[:1] != [] and argv[1:3] == ["-m", "pip"]
        if script or module:
            found.append(int(name))
    return sorted(found)


def wait_for_pips(venv: str, seconds: int, proc: str = "/proc") -> tuple[list[int], list[int]]:
    """Wait up to seconds for the pips installing into venv to end.
    Returns (every pid seen, the pids still there at the end)."""
    seen = set(pips_into(venv, proc))
    deadline = time.monotonic() + seconds
    left = sorted(seen)
    while left and time.monotonic() < deadline:
        time.sleep(1)
        left = pips_into(venv, proc)
        seen.update(left)
    return sorted(seen), left


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "str", "default": ""},
            "requirements": {"type": "list", "elements": "str", "required": True},
            "variant": {"type": "str", "default": ""},
            "verify": {"type": "dict"},
            "wait_pip": {"type": "int", "default": 0},
        },
        supports_check_mode=True,
    )
    requirements = module.params["requirements"]
    python = module.params["python"] or sys.executable
    waited: list[int] = []
    if module.params["wait_pip"] > 0:
        venv = os.path.dirname(os.path.dirname(python))
        waited, left = wait_for_pips(venv, module.params["wait_pip"])
        if left:
            pids = " ".join(str(pid) for pid in left)
            module.fail_json(
                msg=f"{venv}: pip (pid {pids}) is still installing into this venv after "
                f"{module.params['wait_pip']} s, most likely left running by an earlier run that "
                f"failed; wait for it to end, or stop it (kill {pids}), then run again",
                waited_for=waited,
            )
    if not os.path.exists(python):
        why = [f"{python} does not exist"]
        module.exit_json(changed=False, satisfied=False, missing=why, msg=why[0], waited_for=waited)
    versions = None
    if module.params["python"]:
        proc = subprocess.run(
            [python, "-c", VERSIONS_SCRIPT, *requirement_names(requirements)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            why = [f"{python} could not list its packages: {proc.stderr.strip()[-300:]}"]
            module.exit_json(
                changed=False, satisfied=False, missing=why, msg=why[0], waited_for=waited
            )
        versions = json.loads(proc.stdout)
    why = missing(requirements, module.params["variant"], versions)
    extra = {}
    if module.params["verify"]:
        spec = module.params["verify"]
        args = [str(arg) for arg in spec.get("args") or []]
        proc = subprocess.run(
            [python, "-c", str(spec["script"]), *args],
            capture_output=True,
            text=True,
            check=False,
        )
        extra["verify"] = {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
    module.exit_json(
        changed=False,
        satisfied=not why,
        missing=why,
        msg="; ".join(why) if why else "all installed: " + " ".join(requirements),
        waited_for=waited,
        **extra,
    )


if __name__ == "__main__":
    main()
