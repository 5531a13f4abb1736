"""The collection's metadata tells the truth about the code.

One version for the collection (galaxy.yml), the wheel (ddp_smoke.__version__),
the roles (cluster_release) and the CHANGELOG; the declared dependencies are
exactly the collections the roles call; requires_ansible covers the pinned
ansible-core; every role and plugin reference is by FQCN; no runpy path tricks.
The build and the install are proven on the cluster
(molecule/default/tests/test_collection.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from ansible.module_utils.compat.version import LooseVersion

ROOT = Path(__file__).resolve().parents[1]
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
FQCN = f"{GALAXY['namespace']}.{GALAXY['name']}"
YAML = [p for d in ("roles", "playbooks") for p in (ROOT / d).rglob("*.yml")]
TEXT = {p: p.read_text() for p in YAML + list((ROOT / "roles").rglob("*.j2"))}


def test_one_version_everywhere() -> None:
    version = GALAXY["version"]
    init = (ROOT / "training/ddp_smoke/__init__.py").read_text()
    assert re.search(r'^__version__ = "([^"]+)"', init, re.M)[1] == version
    release = yaml.safe_load((ROOT / "roles/cluster/vars/main.yml").read_text())["cluster_release"]
    assert release == version
    # The changelog's newest release (antsibull-changelog; tests/test_changelog.py).
    releases = yaml.safe_load((ROOT / "changelogs/changelog.yaml").read_text())["releases"]
    assert max(releases, key=LooseVersion) == version


def test_dependencies_are_the_collections_the_roles_call() -> None:
    used = set()
    for text in TEXT.values():
        # module keys, filters and tests, lookups and queries
        used |= {m[1] for m in re.finditer(r"\b([a-z_]+\.[a-z_0-9]+)\.[a-z_0-9]+:", text)}
        used |= {
            m[1]
            for m in re.finditer(
                r"(?:\||\bis|lookup\(|query\()\s*'?([a-z_]+\.[a-z_0-9]+)\.[a-z_0-9]+", text
            )
        }
    used -= {"ansible.builtin", FQCN}
    assert used == set(GALAXY["dependencies"]), used
    listed = yaml.safe_load((ROOT / "requirements.yml").read_text())["collections"]
    assert {c["name"]: c["version"] for c in listed} == GALAXY["dependencies"]


def test_requires_ansible_covers_the_pinned_core() -> None:
    spec = yaml.safe_load((ROOT / "meta/runtime.yml").read_text())["requires_ansible"]
    pin = re.search(r"^ansible-core==(\S+)", (ROOT / "requirements.txt").read_text(), re.M)[1]
    for clause in spec.split(","):
        op, bound = re.match(r"\s*([<>=!]+)\s*(\S+)", clause).groups()
        pinned, limit = LooseVersion(pin), LooseVersion(bound)
        ok = {
            ">=": pinned >= limit,
            ">": pinned > limit,
            "<": pinned < limit,
            "<=": pinned <= limit,
        }[op]
        assert ok, f"ansible-core {pin} is outside requires_ansible {spec!r}"


def test_roles_are_referenced_by_fqcn() -> None:
    roles = {p.name for p in (ROOT / "roles").iterdir() if p.is_dir()}
    names = "|".join(sorted(roles))
    short = re.compile(
        rf"^\s*-?\s*role:\s*({names})\s*$|(?:include|import)_role:\s*\n\s+name:\s*({names})\s*$",
        re.M,
    )
    found = [(str(p.relative_to(ROOT)), m[0]) for p, t in TEXT.items() for m in short.finditer(t)]
    assert found == [], found


def test_plugins_are_referenced_by_fqcn() -> None:
    filters = set()
    for path in (ROOT / "plugins/filter").glob("*.py"):
        filters |= set(re.findall(r'^\s+"([a-z_0-9]+)": ', path.read_text(), re.M))
    modules = {p.stem for p in (ROOT / "plugins/modules").glob("*.py")}
    assert filters and modules
    bare_filter = re.compile(r"\|\s*(" + "|".join(sorted(filters)) + r")\b")
    bare_module = re.compile(r"^\s*-?\s*(" + "|".join(sorted(modules)) + r"):", re.M)
    found = [
        (str(p.relative_to(ROOT)), m[1])
        for p, t in TEXT.items()
        for rx in (bare_filter, bare_module)
        for m in rx.finditer(t)
    ]
    assert found == [], found


def test_no_role_embedded_plugins_or_path_tricks() -> None:
    assert not list((ROOT / "roles").glob("*/filter_plugins/*.py"))
    assert not list((ROOT / "roles").glob("*/library/*.py"))
    for path in (ROOT / "plugins").rglob("*.py"):
        assert "runpy" not in path.read_text(), path
