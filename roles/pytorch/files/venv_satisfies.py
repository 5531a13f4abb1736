"""Exit 0 when this python's environment already holds every requirement given.

Run by the pytorch role with the venv's python before pip, so that a rerun
with nothing to install does not pay pip's start-up (about 2 s per node).
Judged here: ``name`` (installed at all) and ``name==version`` with PEP 440's
rule that a pin without ``+local`` accepts any local build; with
``--variant V`` (cu128, cpu, ...) an installed torch must carry ``+V``.
Anything else (other operators, extras, markers, URLs) is left to pip: the
script says "pip decides" and exits 1. Prints one line saying why.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata

_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:==\s*([A-Za-z0-9.+!_-]+))?\s*$")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def version_matches(installed: str, pinned: str) -> bool:
    """PEP 440 ``==``: a pin without '+local' accepts any local build of that version.

    The pytorch role's filter (torch_version_ok) imports this function too.
    """
    installed, pinned = str(installed).strip(), str(pinned).strip()
    if "+" in pinned:
        return installed == pinned
    return installed.partition("+")[0] == pinned


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


def main(argv: list[str]) -> int:
    variant = ""
    if len(argv) >= 2 and argv[0] == "--variant":
        variant, argv = argv[1], argv[2:]
    why = missing(argv, variant)
    print("; ".join(why) if why else "all installed: " + " ".join(argv))
    return 1 if why else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
