"""tools/docs_site.py: the documentation site's completeness check (make lint runs it).

On the project itself it finds nothing; on a copy where a filter, a module, a
role's entry point or a playbook lost its documentation it names each one.
The site's build (antsibull-docs, sphinx-build) is `make docs`.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("docs_site", ROOT / "tools" / "docs_site.py")
docs_site = importlib.util.module_from_spec(spec)
spec.loader.exec_module(docs_site)

pytestmark = pytest.mark.skipif(
    not (docs_site.BIN / "ansible-doc").exists(), reason="ansible-doc is not in this venv"
)


def copy_collection(dest: Path) -> Path:
    for name in ("plugins", "roles", "playbooks", "meta"):
        shutil.copytree(
            ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.whl")
        )
    for name in ("galaxy.yml", "site.yml", "doctor.yml"):
        shutil.copy(ROOT / name, dest / name)
    link = dest / "collections" / "ansible_collections" / "gpulab" / "slurm_cluster"
    link.parent.mkdir(parents=True)
    link.symlink_to(dest)
    return dest


def test_the_project_has_no_gap() -> None:
    assert docs_site.gaps() == []


def test_each_gap_is_named(tmp_path: Path) -> None:
    root = copy_collection(tmp_path)
    # A filter with no documentation file.
    (root / "plugins" / "filter" / "cuda_repo.yml").unlink()
    # A module whose DOCUMENTATION is gone.
    module = root / "plugins" / "modules" / "slurm_jwks.py"
    module.write_text(module.read_text().replace("DOCUMENTATION = ", "NOT_DOCUMENTATION = ", 1))
    # A role option without a description, a playbook without its comment.
    specs = root / "roles" / "slurm_login" / "meta" / "argument_specs.yml"
    text = specs.read_text()
    start = text.index("        description:", text.index("slurm_login_ready_timeout"))
    specs.write_text(text[:start] + "        default: 60\n")
    book = root / "playbooks" / "slurm_dbd.yml"
    book.write_text("---\n" + "".join(
        line for line in book.read_text().splitlines(True)[1:] if not line.startswith("#")
    ))  # fmt: skip
    found = docs_site.gaps(root)
    assert found == [
        "plugins/filter/cuda.py: filter cuda_repo has no documentation "
        "(fix: plugins/filter/cuda_repo.yml)",
        "plugins/modules/slurm_jwks.py: module slurm_jwks has no documentation ansible-doc "
        "reads (fix: its DOCUMENTATION string)",
        "roles/slurm_login: main option slurm_login_ready_timeout has no description",
        "playbooks/slurm_dbd.yml: no opening comment saying what the playbook does",
    ], found


def test_the_playbooks_page_names_every_playbook() -> None:
    page = docs_site.playbooks_page()
    for path in docs_site.playbooks():
        assert f"``{path.relative_to(ROOT)}``" in page
    assert "rotate_key.yml" in page and "The login hosts" in page
