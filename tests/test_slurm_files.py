"""The controller's Slurm files against the probe (plugins/filter/slurm_files.py).

roles/slurm_common/vars asks it: __slurm_common_node_clean (the writes are the
change plan's file_writes, tests/test_change_plan.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins/filter"))
from slurm_files import FilterModule, slurm_node_clean

SHA1S = {"slurm.conf": "a1", "gres.conf": "b2", "cgroup.conf": "c3"}
DROPIN = "/etc/systemd/system/slurmd.service.d/configless.conf"


def ctl_file(sha1: str, owner: str = "root", mode: str = "0644") -> dict:
    return {"exists": True, "sha1": sha1, "owner": owner, "group": "root", "mode": mode}


def node(changes: dict | None = None) -> dict:
    """A clean configless node's probe; changes {path: info} replace (None: remove) entries."""
    files = {
        "/etc/slurm/slurm.conf": {"exists": False},
        "/etc/slurm/gres.conf": {"exists": False},
        "/etc/slurm/cgroup.conf": {"exists": False},
        "/run/slurm/conf/slurm.conf": {"exists": True, "sha1": "a1"},
        "/run/slurm/conf/gres.conf": {"exists": False},
        "/run/slurm/conf/cgroup.conf": {"exists": True, "sha1": "c3"},
        DROPIN: {"exists": True},
    }
    for path, info in (changes or {}).items():
        if info is None:
            files.pop(path)
        else:
            files[path] = info
    return {"files": files}


def test_registered() -> None:
    assert set(FilterModule().filters()) == {"slurm_node_clean"}


# slurm_node_clean: __slurm_common_node_clean


def clean(state: dict | None, dropin: str = DROPIN, sha1s: dict = SHA1S) -> bool:
    return slurm_node_clean(state, sha1s, "/etc/slurm", dropin)


def test_a_clean_configless_node() -> None:
    assert clean(node()) is True


def test_without_probe_nothing_is_proven() -> None:
    assert clean({}) is False
    assert clean(None) is False
    assert clean({"units": {}}) is False


def test_a_local_copy_is_work() -> None:
    assert clean(node({"/etc/slurm/gres.conf": {"exists": True}})) is False


def test_a_local_file_not_probed_counts_as_there() -> None:
    # `local.exists | default(true)`.
    assert clean(node({"/etc/slurm/slurm.conf": None})) is False


def test_a_fetched_copy_not_probed_is_work() -> None:
    assert clean(node({"/run/slurm/conf/gres.conf": None})) is False


def test_a_stale_fetched_copy_is_work() -> None:
    assert clean(node({"/run/slurm/conf/slurm.conf": {"exists": True, "sha1": "old"}})) is False
    # exists without a sha1 cannot be the controller's.
    assert clean(node({"/run/slurm/conf/cgroup.conf": {"exists": True}})) is False


def test_an_absent_fetched_copy_is_fine() -> None:
    assert clean(node({"/run/slurm/conf/slurm.conf": {"exists": False}})) is True


def test_a_configless_node_needs_its_dropin() -> None:
    assert clean(node({DROPIN: {"exists": False}})) is False
    assert clean(node({DROPIN: None})) is False


def test_a_node_that_is_not_configless_needs_no_dropin() -> None:
    assert clean(node({DROPIN: None}), dropin="") is True


def test_no_rendered_files_leaves_only_the_dropin() -> None:
    assert clean({"files": {}}, sha1s={}, dropin="") is True
    assert clean({"files": {}}, sha1s={}) is False


def test_another_fetched_folder() -> None:
    state = node({"/run/slurm/conf/slurm.conf": None})
    state["files"]["/var/spool/slurmd/conf-cache/slurm.conf"] = {"exists": False}
    assert slurm_node_clean(state, {"slurm.conf": "a1"}, "/etc/slurm", "") is False
    assert (
        slurm_node_clean(
            state, {"slurm.conf": "a1"}, "/etc/slurm", "", "/var/spool/slurmd/conf-cache"
        )
        is True
    )
