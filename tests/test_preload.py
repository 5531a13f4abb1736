"""The callback gpulab.slurm_cluster.preload: plugins imported once, before the workers fork.

The real check runs ansible-playbook on a throwaway collection whose filter
records the process that imported it: with the callback, every task on every
host sees the one import made in Ansible's own process; without it, each
worker imports the filter itself.
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
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


def throwaway_collection(root: Path) -> Path:
    """ansible_collections/t/c with the callback and one filter; returns the collections path."""
    coll = root / "ansible_collections" / "t" / "c"
    (coll / "plugins" / "filter").mkdir(parents=True)
    (coll / "plugins" / "callback").mkdir()
    (coll / "galaxy.yml").write_text(
        "namespace: t\nname: c\nversion: 1.0.0\nreadme: README.md\nauthors: [t]\n"
    )
    (coll / "plugins" / "filter" / "imported_by.py").write_text(FILTER)
    shutil.copy(PLUGINS / "callback" / "preload.py", coll / "plugins" / "callback" / "preload.py")
    return root


def imported_by(tmp_path: Path, callbacks: str) -> list[str]:
    """The pid each task on each host saw, from a real ansible-playbook run."""
    collections = throwaway_collection(tmp_path / "coll")
    (tmp_path / "hosts.ini").write_text(
        f"[all]\na ansible_connection=local ansible_python_interpreter={sys.executable}\n"
        f"b ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(collections),
        ANSIBLE_CALLBACKS_ENABLED=callbacks,
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORKS="2",
    )
    binary = Path(sys.executable).parent / "ansible-playbook"
    out = subprocess.run(
        [str(binary), "-i", str(tmp_path / "hosts.ini"), str(tmp_path / "play.yml")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[WARNING]" not in out.stdout + out.stderr
    return [
        line.split("imported by ")[1].strip('"')
        for line in out.stdout.splitlines()
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
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "ansible.cfg")
    enabled = [c.strip() for c in cfg["defaults"]["callbacks_enabled"].split(",")]
    assert "gpulab.slurm_cluster.preload" in enabled
    molecule = yaml.safe_load((ROOT / ".config" / "molecule" / "config.yml").read_text())
    mirrored = molecule["provisioner"]["config_options"]["defaults"]["callbacks_enabled"]
    assert "gpulab.slurm_cluster.preload" in [c.strip() for c in mirrored.split(",")]
