"""Whether a Python environment holds some pinned requirements (standard library only).

The module venv_packages judges on the node; the filter venv_missing judges
on the control machine what site.yml's probe read on the node (the pytorch
role's declaration in meta/probe.yml runs VERSIONS_SCRIPT with the venv's
python). One rule for both: PEP 440's, where a pin without C(+local)
accepts any local build, and torch must carry the wanted variant.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.pep440 import version_matches

_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:==\s*([A-Za-z0-9.+!_-]+))?\s*$")

# Run by the environment's python: the installed version of each name in
# argv, null when absent, as one JSON line.
VERSIONS_SCRIPT = (
    "import json, sys\n"
    "from importlib import metadata\n"
    "def version(name):\n"
    "    try:\n"
    "        return metadata.version(name)\n"
    "    except metadata.PackageNotFoundError:\n"
    "        return None\n"
    "print(json.dumps({name: version(name) for name in sys.argv[1:]}))\n"
)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(requirements: list[str]) -> list[str]:
    """The distribution names of the requirements judged here (the rest: pip decides)."""
    return [m.group(1) for m in map(_REQ.match, requirements) if m]


def missing(
    requirements: list[str],
    variant: str,
    versions: Mapping[str, str | None] | Callable[[str], str | None],
) -> list[str]:
    """Why each requirement is not (surely) met; [] when all are.

    ``versions`` maps a name to its installed version (None: absent), or is a
    function of the name that returns it.
    """
    version_of = versions if callable(versions) else versions.get
    why = []
    for requirement in requirements:
        match = _REQ.match(requirement)
        if not match:
            why.append(f"{requirement}: pip decides")
            continue
        name, pinned = match.groups()
        installed = version_of(name)
        if installed is None:
            why.append(f"{name} is not installed")
            continue
        if pinned and not version_matches(installed, pinned):
            why.append(f"{name} {installed} installed, {requirement} wanted")
            continue
        if variant and _norm(name) == "torch" and installed.partition("+")[2] != variant:
            why.append(f"torch {installed} installed, variant {variant} wanted")
    return why
