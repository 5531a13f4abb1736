"""Role docs come from one source: each role's meta/argument_specs.yml.

Its README's variable table is generated from it (tools/role_docs.py), and
its options are the public names of its defaults/main.yml.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import role_docs  # noqa: E402

ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if p.is_dir())


def spec_options(role: str) -> set[str]:
    specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
    return {
        name for entry in specs["argument_specs"].values() for name in entry.get("options") or {}
    }


@pytest.mark.parametrize("role", ROLES)
def test_every_role_has_argument_specs(role: str) -> None:
    assert (ROOT / "roles" / role / "meta" / "argument_specs.yml").is_file()


def test_readme_tables_match_argument_specs() -> None:
    assert role_docs.drift(write=False) == [], "run: .venv/bin/python tools/role_docs.py"


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_cover_the_defaults(role: str) -> None:
    path = ROOT / "roles" / role / "defaults" / "main.yml"
    defaults = yaml.safe_load(path.read_text()) if path.is_file() else {}
    public = {name for name in defaults or {} if not name.startswith("__")}
    assert sorted(public - spec_options(role)) == [], (
        f"defaults of {role} missing from argument_specs"
    )


def test_a_changed_spec_is_drift(tmp_path: Path) -> None:
    role = tmp_path / "roles" / "demo"
    (role / "meta").mkdir(parents=True)
    (role / "meta" / "argument_specs.yml").write_text(
        "argument_specs:\n  main:\n    options:\n"
        "      demo_port:\n        type: int\n        default: 1\n        description: A port.\n"
    )
    (role / "README.md").write_text(f"# demo\n\n{role_docs.BEGIN}\n{role_docs.END}\n")
    assert len(role_docs.drift(tmp_path, write=True)) == 1
    assert "| `demo_port` | int | `1` | A port. |" in (role / "README.md").read_text()
    assert role_docs.drift(tmp_path) == []
    spec = role / "meta" / "argument_specs.yml"
    spec.write_text(spec.read_text().replace("default: 1", "default: 2"))
    assert role_docs.drift(tmp_path) == [
        "roles/demo/README.md: variable table differs from argument_specs"
    ]
