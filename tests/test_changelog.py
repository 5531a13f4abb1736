"""CHANGELOG.md is antsibull-changelog's, made from changelogs/, and names galaxy.yml's version.

A change is written as a fragment in changelogs/fragments/ (changelogs/config.yaml
lists the sections) and merged with `make changelog`; CHANGELOG.md is never
edited by hand.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.compat.version import LooseVersion

ROOT = Path(__file__).resolve().parents[1]
VERSION = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
BIN = Path(sys.executable).parent


def antsibull(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    binary = BIN / "antsibull-changelog"
    if not binary.exists():
        pytest.skip("antsibull-changelog (requirements.txt) is not installed")
    env = dict(
        os.environ,
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"),
        ANSIBLE_DEPRECATION_WARNINGS="0",
    )
    return subprocess.run(
        [str(binary), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_newest_release_is_galaxy_yml_version() -> None:
    releases = yaml.safe_load((ROOT / "changelogs" / "changelog.yaml").read_text())["releases"]
    assert max(releases, key=LooseVersion) == VERSION
    first = re.search(r"^## v(\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M)[1]
    assert first.replace("\\", "") == VERSION


def test_fragments_and_changelog_yaml_lint() -> None:
    fragments = antsibull("lint")
    assert fragments.returncode == 0 and not fragments.stdout.strip(), fragments.stdout
    changes = antsibull("lint-changelog-yaml", "changelogs/changelog.yaml")
    assert changes.returncode == 0 and not changes.stdout.strip(), changes.stdout


def test_changelog_md_is_generated(tmp_path: Path) -> None:
    """No hand edits: regenerating from changelogs/ gives the same CHANGELOG.md."""
    out = tmp_path / "CHANGELOG.md"
    done = antsibull("generate", "--output", str(out))
    assert done.returncode == 0, done.stderr
    assert out.read_text() == (ROOT / "CHANGELOG.md").read_text(), (
        "CHANGELOG.md differs from changelogs/: add a fragment and run make changelog"
    )
