"""tools/private_vars.py: a role's private (__) variables stay inside the role."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import private_vars  # noqa: E402


def tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / "playbooks").mkdir(exist_ok=True)
    return tmp_path


def test_the_repository_has_no_cross_read() -> None:
    assert private_vars.cross_reads(ROOT) == []


def test_a_role_reading_another_roles_private_variable_is_named(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "roles/slurm_daemons/tasks/main.yml": "- register: __slurm_daemons_slurmd\n",
            "roles/slurm_compute/vars/main.yml": 'x: "{{ __slurm_daemons_slurmd is changed }}"\n',
        },
    )
    assert private_vars.cross_reads(root) == [
        "roles/slurm_compute/vars/main.yml:1: __slurm_daemons_slurmd is roles/slurm_daemons's "
        "private variable; read a public output of slurm_daemons instead "
        "(see roles/slurm_daemons/README.md)"
    ]
    assert private_vars.main(["x", str(root)]) == 1


def test_a_playbooks_own_private_names_and_public_outputs_pass(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "roles/slurm_daemons/tasks/main.yml": "- register: slurm_daemons_slurmd\n",
            "roles/slurm_compute/vars/main.yml": 'x: "{{ slurm_daemons_slurmd is changed }}"\n',
            "playbooks/acceptance.yml": (
                "vars:\n  __acceptance_pending: 1\n  y: '{{ __acceptance_pending }}'\n"
            ),
        },
    )
    assert private_vars.main(["x", str(root)]) == 0
    (root / "playbooks/other.yml").write_text("z: '{{ __acceptance_pending }}'\n")
    assert private_vars.cross_reads(root) == [
        "__acceptance_pending is private but used in playbooks/acceptance.yml, "
        "playbooks/other.yml: give it one home"
    ]
