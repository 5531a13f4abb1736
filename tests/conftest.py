"""The collection's Python (plugins/) importable as Ansible imports it.

collections/ansible_collections/gpulab/slurm_cluster links to the repository
root, so ``ansible_collections.gpulab.slurm_cluster.plugins.module_utils``
resolves here as it does under ansible-playbook.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT / "collections", ROOT / "plugins" / "filter", ROOT / "plugins" / "modules"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
