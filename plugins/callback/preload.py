"""Callback gpulab.slurm_cluster.preload: import the plugins once, before the workers fork."""

from __future__ import annotations

DOCUMENTATION = r"""
name: preload
author: slurm-cluster-in-a-box contributors (@gpulab)
version_added: 0.1.0
type: aggregate
short_description: Import the collection's filter and lookup plugins once, in Ansible's own process
description:
  - Ansible runs every task on every host in a worker process forked from its own
    process, and a worker ends with its task. A filter or lookup plugin of a collection
    is imported in the worker that first uses it, and its Python source is compiled
    there, so a run imported the collection's plugins anew for each task and host
    (about a quarter of a no-change C(site.yml) rerun's CPU time).
  - This callback imports them, and the module_utils they use, when Ansible loads its
    callbacks, before any worker is forked. Every worker then inherits them already
    imported.
  - It prints nothing and changes no result. A plugin that fails to import is named in
    a warning; the task that uses it fails as it would without this callback.
  - Enable it with C(callbacks_enabled = gpulab.slurm_cluster.preload) in ansible.cfg
    (the project's ansible.cfg does).
requirements:
  - enable in configuration
"""

import importlib  # noqa: E402
from pathlib import Path  # noqa: E402

from ansible.plugins.callback import CallbackBase  # noqa: E402
from ansible.utils.display import Display  # noqa: E402

# The plugin types imported in Ansible's own process: filters and lookups run in
# the workers (conditionals, arguments, variables). Modules run on the nodes.
KINDS = ("filter", "lookup")


def collection_plugins(plugins: Path, kinds: tuple[str, ...] = KINDS) -> list[tuple[str, str]]:
    """(kind, module name) of each Python plugin of the given kinds under plugins/."""
    return [
        (kind, path.stem)
        for kind in kinds
        for path in sorted((plugins / kind).glob("*.py"))
        if path.stem != "__init__"
    ]


def preload(package: str, plugins: Path, kinds: tuple[str, ...] = KINDS) -> list[str]:
    """Import each plugin as Ansible's plugin loader names it; the failures, as messages."""
    failures = []
    for kind, name in collection_plugins(plugins, kinds):
        module = f"{package}.{kind}.{name}"
        try:
            importlib.import_module(module)
        except Exception as exc:  # any import error is reported; none stops the run
            failures.append(f"{module}: {type(exc).__name__}: {exc}")
    return failures


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpulab.slurm_cluster.preload"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, display: Display | None = None) -> None:
        super().__init__(display=display)
        # ansible_collections.gpulab.slurm_cluster.plugins, and its folder.
        package = __name__.rsplit(".", 2)[0]
        for failure in preload(package, Path(__file__).resolve().parents[1]):
            self._display.warning(
                f"gpulab.slurm_cluster.preload could not import {failure}; "
                "a task that uses that plugin will fail with the same error"
            )
