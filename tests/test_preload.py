"""The callback gpulab.slurm_cluster.preload: plugins imported once, before the workers fork.

The real check runs ansible-playbook on a throwaway collection whose filter
records the process that imported it: with the callback, every task on every
host sees the one import made in Ansible's own process; without it, each
worker imports the filter itself.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import throwaway
from ansible_collections.gpulab.slurm_cluster.plugins.callback import preload

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ROOT / "plugins"

FILTER = """\
import os

IMPORTED_BY = os.getpid()


class FilterModule:
    def filters(self):
        return {"imported_by": lambda _value: IMPORTED_BY}
"""

PLAYBOOK = """\
- name: Which process imported the filter
  hosts: all
  gather_facts: false
  tasks:
    - name: First task
      ansible.builtin.debug:
        msg: "imported by {{ 0 | t.c.imported_by }}"
    - name: Second task
      ansible.builtin.debug:
        msg: "imported by {{ 0 | t.c.imported_by }}"
"""


def test_lists_every_filter_and_lookup_file() -> None:
    got = preload.collection_plugins(PLUGINS)
    assert ("filter", "inventory_check") in got
    assert ("lookup", "role_probes") in got
    want = {("filter", p.stem) for p in (PLUGINS / "filter").glob("*.py")} | {
        ("lookup", p.stem) for p in (PLUGINS / "lookup").glob("*.py")
    }
    assert set(got) == want
    assert not any(kind == "modules" for kind, _ in got)


def test_imports_the_collections_plugins() -> None:
    package = "ansible_collections.gpulab.slurm_cluster.plugins"
    assert preload.preload(package, PLUGINS) == []
    for kind, name in preload.collection_plugins(PLUGINS):
        assert f"{package}.{kind}.{name}" in sys.modules


def test_names_a_plugin_that_cannot_be_imported(tmp_path: Path, monkeypatch) -> None:
    pkg = tmp_path / "preload_probe_pkg"
    (pkg / "filter").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "filter" / "__init__.py").write_text("")
    (pkg / "filter" / "good.py").write_text("X = 1\n")
    (pkg / "filter" / "broken.py").write_text("import no_such_module_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    failures = preload.preload("preload_probe_pkg", pkg, ("filter", "lookup"))
    assert len(failures) == 1
    assert failures[0].startswith("preload_probe_pkg.filter.broken: ModuleNotFoundError")
    assert "preload_probe_pkg.filter.good" in sys.modules


def imported_by(tmp_path: Path, callbacks: str) -> list[str]:
    """The pid each task on each host saw, from a real ansible-playbook run."""
    collections = throwaway.collection(
        tmp_path / "coll", {"filter/imported_by.py": FILTER}, "preload"
    )
    out = throwaway.play(tmp_path, PLAYBOOK, "ab", collections, callbacks, timeout=120)
    assert "[WARNING]" not in out
    return [
        line.split("imported by ")[1].strip('"')
        for line in out.splitlines()
        if "imported by " in line
    ]


@pytest.mark.parametrize("enabled", [True, False], ids=["preloaded", "without"])
def test_workers_share_the_one_import_only_with_the_callback(tmp_path: Path, enabled: bool) -> None:
    pids = imported_by(tmp_path, "t.c.preload" if enabled else "ansible.builtin.timer")
    assert len(pids) == 4, pids  # two tasks on two hosts
    if enabled:
        assert len(set(pids)) == 1, pids
    else:
        assert len(set(pids)) == 4, pids


def test_the_projects_settings_enable_it() -> None:
    ansible_cfg, molecule = throwaway.project_callbacks()
    assert "gpulab.slurm_cluster.preload" in ansible_cfg
    assert "gpulab.slurm_cluster.preload" in molecule
