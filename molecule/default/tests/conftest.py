"""Shared helpers for the verify tests: run the project's playbooks against the cluster."""

from __future__ import annotations

import os
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


def host(name: str):
    """testinfra host of a node of molecule's inventory."""
    return testinfra.get_host(f"ansible://{name}?ansible_inventory={INVENTORY}")


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
