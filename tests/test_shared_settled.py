"""A shared venv's folders judged by the node probe, and the users' folders beside them.

The pytorch role skips tasks/install.yml as one task where the probe found the
shared venv complete and its folders as shared_tree would leave them; the
lab_users role judges only its own folders among those the probe read.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from probed import probed_dirs_ok
from test_doctor_reuse import rendered

ROOT = Path(__file__).resolve().parents[1]
FILTERS = {"gpulab.slurm_cluster.probed_dirs_ok": probed_dirs_ok}
VENV = "/shared/.cluster/venvs/torch-2.13.0-cpu"
TREE = {"/shared/.cluster": "ok", "/shared/.cluster/venvs": "ok", VENV: "ok"}


def role_vars(role: str) -> dict:
    return yaml.safe_load((ROOT / f"roles/{role}/vars/main.yml").read_text())


def tree_ok(shared: bool, found: dict) -> bool:
    return rendered(
        role_vars("pytorch")["__pytorch_tree_ok"],
        {
            "pytorch_venv_shared": shared,
            "cluster_tools_dir": "/shared/.cluster",
            "pytorch_venv_shared_dir": "/shared/.cluster/venvs",
            "__pytorch_venv": VENV,
            "cluster_node_state": {"shared_dirs": found},
        },
        FILTERS,
    )


def test_a_shared_venvs_folders_stand_only_where_all_three_are_as_wanted() -> None:
    assert tree_ok(True, TREE) is True
    for path, why in (("/shared/.cluster/venvs", "differs"), (VENV, "missing")):
        assert tree_ok(True, {**TREE, path: why}) is False, path
    # Another venv's folder read (the one the last run kept) is not this run's.
    assert tree_ok(True, {k: v for k, v in TREE.items() if k != VENV}) is False
    # A node's own venv has no shared folders to judge.
    assert tree_ok(False, {}) is True


def users_proven(found: dict) -> bool:
    return rendered(
        role_vars("lab_users")["__lab_users_proven"],
        {
            "__lab_users_probed": {"conflicts": [], "groups": [], "users": [], "add_groups": []},
            "__lab_users_first": True,
            "cluster_node_state": {"shared_dirs": found},
            "cluster_shared_dirs": [{"path": "/shared/.cluster"}, {"path": "/shared/home/ada"}],
            "cluster_users": [{"name": "ada"}],
        },
        FILTERS,
    )


def test_the_users_folders_are_judged_among_other_roles_folders() -> None:
    mine = {"/shared/.cluster": "ok", "/shared/home/ada": "ok"}
    assert users_proven(mine) is True
    # The pytorch role's folders, read by the same probe, change nothing.
    assert users_proven({**mine, "/shared/.cluster/venvs": "ok", VENV: "missing"}) is True
    assert users_proven({**mine, "/shared/home/ada": "differs"}) is False
    assert users_proven({"/shared/.cluster": "ok", VENV: "ok"}) is False


def test_no_probe_proves_no_folder() -> None:
    assert probed_dirs_ok(None, ["/shared/.cluster"]) is False
    assert probed_dirs_ok({}, ["/shared/.cluster"]) is False
    assert (
        probed_dirs_ok(
            {"shared_dirs": {"/shared/.cluster": "unsafe: a link"}}, ["/shared/.cluster"]
        )
        is False
    )
    # The same folder named twice is one folder.
    assert probed_dirs_ok({"shared_dirs": {"/a": "ok"}}, ["/a", "/a"]) is True
