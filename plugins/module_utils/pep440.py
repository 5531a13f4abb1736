"""The one version rule of the pytorch role, on the nodes and on the control machine.

Imported by the venv_packages module (on the node, in the venv's Python) and
by the torch_variant filters (torch_version_ok).
"""

from __future__ import annotations


def version_matches(installed: str, pinned: str) -> bool:
    """PEP 440 ``==``: a pin without '+local' accepts any local build of that version."""
    installed, pinned = str(installed).strip(), str(pinned).strip()
    if "+" in pinned:
        return installed == pinned
    return installed.partition("+")[0] == pinned
