"""`site.yml --tags X` runs component X alone (plus the inventory checks and
the package list, tagged always): checked on the task list Ansible resolves."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Tag -> the roles its tasks may come from, or the names of the playbook-level
# and include tasks (listed without a role prefix) that belong to it.
COMPONENTS = {
    "munge": {"munge"},
    "auth": {"slurm_auth", "Slurm's own key (cluster_auth_type slurm)"},
    "slurm": {
        "slurm_common",
        "slurm_daemons",
        "slurm_compute",
        "slurm_login",
        "Upgrade this batch",
        "Ask the doctor why nodes are not usable",
    },
    "accounting": {"slurm_dbd", "slurm_daemons", "slurm_controller"},
    "shared_fs": {
        "nfs_server",
        "shared_fs",
        "lab_users",
        # playbooks/shared_fs.yml's first play: the NFS packages everywhere at once.
        "The NFS server's packages",
        "The NFS client's packages",
    },
    "users": {"lab_users"},
    "cuda": {"cuda"},
    "pytorch": {
        "pytorch",
        "PyTorch in the venv (pytorch_enabled)",
        "Wait for pip, then verify torch",
    },
    "smoke": {
        "Hash the job templates on the shared filesystem",
        "Make root's folder of the job templates",
        "Copy the job templates",
        "Run the acceptance job (submitted from the first login host, else the controller)",
    },
    "doctor": {"cluster_doctor", "Hash the config files as site.yml would write them"},
}
TASK = re.compile(r"^\s{6}(?P<name>.+?)\tTAGS: \[(?P<tags>[^\]]*)\]$")


def tasks(tag: str) -> list[tuple[str, set[str]]]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    binary = Path(sys.executable).parent / "ansible-playbook"
    out = subprocess.run(
        [str(binary), "site.yml", "--list-tasks", "--tags", tag],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    found = []
    for line in out.splitlines():
        m = TASK.match(line)
        if m:
            found.append((m["name"], {t.strip() for t in m["tags"].split(",")}))
    return found


def origin(name: str) -> str:
    role = name.split(" : ", 1)[0] if " : " in name else name
    return role.removeprefix("gpulab.slurm_cluster.")


@pytest.mark.parametrize("tag", sorted(COMPONENTS))
def test_a_tag_runs_its_component_only(tag: str) -> None:
    listed = tasks(tag)
    own = [(name, tags) for name, tags in listed if "always" not in tags]
    assert own, f"--tags {tag} runs no task of its own"
    strangers = [name for name, _ in own if origin(name) not in COMPONENTS[tag]]
    assert strangers == [], strangers
    assert all(tag in tags for _, tags in own)


def test_without_tags_every_component_runs() -> None:
    origins = {origin(name) for name, _ in tasks("all")}
    for tag, allowed in COMPONENTS.items():
        assert origins & allowed, tag
