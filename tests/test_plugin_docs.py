"""Every plugin of the collection is documented, and ansible-doc renders it.

Modules carry DOCUMENTATION (with author), EXAMPLES and RETURN; each filter
has plugins/filter/<filter name>.yml with the same three (Ansible's layout for
a file that holds several filters); the strategy and callback plugins have DOCUMENTATION.
ansible-test sanity (tools/sanity.py, make lint) checks the docs against the
argument specs; this test is the fast guard that names what is missing.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ROOT / "plugins"
NS = "gpulab.slurm_cluster"
sys.path.insert(0, str(ROOT / "collections"))

MODULES = sorted(p.stem for p in (PLUGINS / "modules").glob("*.py") if p.stem != "__init__")
STRATEGIES = sorted(p.stem for p in (PLUGINS / "strategy").glob("*.py") if p.stem != "__init__")
LOOKUPS = sorted(p.stem for p in (PLUGINS / "lookup").glob("*.py") if p.stem != "__init__")
CALLBACKS = sorted(p.stem for p in (PLUGINS / "callback").glob("*.py") if p.stem != "__init__")
FILTER_FILES = sorted(p.stem for p in (PLUGINS / "filter").glob("*.py") if p.stem != "__init__")


def assigned_strings(path: Path) -> dict[str, str]:
    """Module-level NAME = "..." assignments, read without importing the file."""
    found = {}
    for node in ast.parse(path.read_text()).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            found[node.targets[0].id] = node.value.value
    return found


def filters() -> dict[str, str]:
    """filter name -> the file that defines it."""
    names = {}
    for stem in FILTER_FILES:
        module = importlib.import_module(
            f"ansible_collections.gpulab.slurm_cluster.plugins.filter.{stem}"
        )
        for name in module.FilterModule().filters():
            names[name] = stem
    return names


def check_documentation(doc: object, name: str) -> None:
    assert isinstance(doc, dict), f"{name}: DOCUMENTATION is not a YAML mapping"
    assert doc.get("short_description"), f"{name}: no short_description"
    assert doc.get("description"), f"{name}: no description"
    assert doc.get("author"), f"{name}: no author"


@pytest.mark.parametrize("module", MODULES)
def test_module_has_documentation_examples_return(module: str) -> None:
    strings = assigned_strings(PLUGINS / "modules" / f"{module}.py")
    missing = [k for k in ("DOCUMENTATION", "EXAMPLES", "RETURN") if not strings.get(k, "").strip()]
    assert missing == [], f"plugins/modules/{module}.py lacks {', '.join(missing)}"
    doc = yaml.safe_load(strings["DOCUMENTATION"])
    check_documentation(doc, module)
    assert doc.get("module") == module
    assert isinstance(yaml.safe_load(strings["EXAMPLES"]), list), f"{module}: EXAMPLES is not tasks"
    assert isinstance(yaml.safe_load(strings["RETURN"]), dict), f"{module}: RETURN is not a mapping"


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_strategy_has_documentation(strategy: str) -> None:
    strings = assigned_strings(PLUGINS / "strategy" / f"{strategy}.py")
    doc = yaml.safe_load(strings.get("DOCUMENTATION", "") or "null")
    check_documentation(doc, strategy)
    assert doc.get("name") == strategy


def test_every_filter_has_its_doc_file() -> None:
    names = filters()
    missing = sorted(
        f"plugins/filter/{n}.yml ({stem}.py)"
        for n, stem in names.items()
        if not (PLUGINS / "filter" / f"{n}.yml").is_file()
    )
    assert missing == [], f"filters without docs: {missing}"
    orphans = sorted(p.name for p in (PLUGINS / "filter").glob("*.yml") if p.stem not in names)
    assert orphans == [], f"doc files of no filter: {orphans}"


@pytest.mark.parametrize("path", sorted((PLUGINS / "filter").glob("*.yml")), ids=lambda p: p.stem)
def test_filter_doc_file(path: Path) -> None:
    data = yaml.safe_load(path.read_text())
    assert set(data) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, path.name
    check_documentation(data["DOCUMENTATION"], path.stem)
    assert data["DOCUMENTATION"]["name"] == path.stem
    assert "_input" in data["DOCUMENTATION"].get("options", {}), f"{path.name}: no _input"
    assert f"{NS}.{path.stem}" in data["EXAMPLES"], f"{path.name}: EXAMPLES do not use the filter"
    assert data["RETURN"].get("_value", {}).get("type"), f"{path.name}: RETURN has no _value type"


def ansible_doc(plugin_type: str, names: list[str]) -> dict:
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"), ANSIBLE_NOCOLOR="1")
    binary = Path(sys.executable).parent / "ansible-doc"
    result = subprocess.run(
        [str(binary), "-t", plugin_type, "--json", *(f"{NS}.{n}" for n in names)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize(
    ("plugin_type", "names"),
    [
        ("module", MODULES),
        ("strategy", STRATEGIES),
        ("filter", sorted(filters())),
        ("lookup", LOOKUPS),
        ("callback", CALLBACKS),
    ],
    ids=["modules", "strategy", "filters", "lookups", "callbacks"],
)
def test_ansible_doc_renders_every_plugin(plugin_type: str, names: list[str]) -> None:
    docs = ansible_doc(plugin_type, names)
    for name in names:
        entry = docs.get(f"{NS}.{name}") or {}
        assert entry.get("doc", {}).get("short_description"), f"ansible-doc -t {plugin_type} {name}"
        # Strategy and callback plugins have no EXAMPLES or RETURN in Ansible's layout.
        if plugin_type not in ("strategy", "callback"):
            assert entry.get("examples"), f"ansible-doc shows no EXAMPLES for {name}"
            assert entry.get("return"), f"ansible-doc shows no RETURN for {name}"
