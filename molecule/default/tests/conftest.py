"""Shared helpers for the verify tests: run the project's playbooks against the cluster."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import testinfra
import yaml

ROOT = Path(__file__).resolve().parents[3]
INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
INVENTORY_DIR = Path(INVENTORY).parent


def cluster_name(inventory: Path = INVENTORY_DIR) -> str:
    """cluster_name as the inventory's group_vars set it; else the cluster role's default."""
    for folder, _, files in sorted(os.walk(inventory / "group_vars", followlinks=True)):
        for name in sorted(files):
            if name.endswith((".yml", ".yaml")):
                doc = yaml.safe_load((Path(folder) / name).read_text())
                if isinstance(doc, dict) and "cluster_name" in doc:
                    return str(doc["cluster_name"])
    return "cluster"


# The scenario's results folder (cluster_results_dir: results/<cluster_name>
# where the playbooks run, here the checkout). make test's own files and the
# tests' timings (fault-suite-*.json) stay in results/ itself.
RESULTS = ROOT / "results" / cluster_name()


def host(name: str):
    """testinfra host of a node of molecule's inventory."""
    return testinfra.get_host(f"ansible://{name}?ansible_inventory={INVENTORY}")


def recap(out: str) -> dict[str, dict[str, int]]:
    """An ansible-playbook run's PLAY RECAP: {host: {ok, changed, unreachable, failed, ...}}."""
    return {
        m[1]: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m[2])}
        for m in re.finditer(r"^(\S+)\s+: (ok=.*)$", out, re.M)
    }


def platforms() -> list[dict]:
    """The scenario's platforms, as molecule interpolated them (MOLECULE_FILE)."""
    return yaml.safe_load(Path(os.environ["MOLECULE_FILE"]).read_text())["platforms"]


def _run_playbook(
    playbook: str, *extra: str, inventories: tuple[Path, ...] = ()
) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    # Share the fact cache of molecule's converge (--limit runs need the others' facts).
    if "MOLECULE_EPHEMERAL_DIRECTORY" in os.environ:
        env["ANSIBLE_CACHE_PLUGIN_CONNECTION"] = (
            os.environ["MOLECULE_EPHEMERAL_DIRECTORY"] + "/facts"
        )
    binary = Path(sys.executable).parent / "ansible-playbook"
    return subprocess.run(
        [
            str(binary),
            "-i",
            str(INVENTORY_DIR),
            *[arg for inv in inventories for arg in ("-i", str(inv))],
            playbook,
            *extra,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture
def run_playbook() -> Callable[..., subprocess.CompletedProcess]:
    """run_playbook('site.yml', '-e', 'x=y'): repo ansible.cfg, molecule's inventory."""
    return _run_playbook


# A fifth container the add-a-node tests make, and take away, themselves.
NEW_NODE = "node3"


def node_state(name: str) -> str:
    """The node's short sinfo state (idle, drain, ...); "" when Slurm does not know it."""
    out = host("ctl").run(f"sinfo --noheader --Node --nodes={name} --format=%t")
    return out.stdout.strip().splitlines()[0] if out.rc == 0 and out.stdout.strip() else ""


def remove_new_node() -> None:
    subprocess.run(["docker", "rm", "-f", NEW_NODE], capture_output=True, check=False)


def add_new_node(tmp_path: Path) -> Path:
    """Start node3 like the scenario's compute nodes (its own create play); its inventory file."""
    remove_new_node()
    compute = next(p for p in platforms() if "slurm_compute" in p.get("groups", []))
    made = _run_playbook(
        str(ROOT / "molecule/shared/create.yml"),
        "-e",
        json.dumps(
            {
                "molecule_yml": {
                    "platforms": [{**compute, "name": NEW_NODE, "hostname": NEW_NODE}]
                },
                "create_keep_facts": True,
            }
        ),
    )
    assert made.returncode == 0, made.stdout + made.stderr
    extra = tmp_path / f"{NEW_NODE}.yml"
    node = {"slurm_compute_gpus": 1, "ansible_connection": "docker"}
    inventory = {"all": {"children": {"slurm_compute": {"hosts": {NEW_NODE: node}}}}}
    extra.write_text(yaml.safe_dump(inventory))
    return extra
