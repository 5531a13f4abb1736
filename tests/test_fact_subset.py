"""The facts site.yml gathers are the minimal subset, and the roles read no other.

Every task on every host decodes and copies the host's cached facts, so
their size is paid per task and host (all subsets: 16 KB a node; the
minimal one: 5 KB). ansible-core 2.19 ignores ``gather_subset`` in
ansible.cfg, so each play that gathers names the subset itself.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SUBSET = ["!all"]
# ansible_facts.NAME or ansible_facts['NAME'] / ["NAME"].
FACT_READ = re.compile(r"ansible_facts(?:\.(\w+)|\[['\"](\w+)['\"]\])")


def plays() -> list[tuple[str, dict]]:
    out = []
    for path in sorted([*ROOT.glob("*.yml"), *(ROOT / "playbooks").glob("*.yml")]):
        doc = yaml.safe_load(path.read_text())
        if isinstance(doc, list):
            out += [(path.name, p) for p in doc if isinstance(p, dict) and "hosts" in p]
    return out


def test_every_play_that_gathers_asks_for_the_minimal_subset() -> None:
    gathering = [(name, p) for name, p in plays() if p.get("gather_facts", True) is not False]
    assert gathering, "no play gathers facts: the roles need the distribution's"
    for name, play in gathering:
        assert play.get("gather_subset") == SUBSET, (name, play["name"])


def test_no_configuration_sets_the_subset_ansible_ignores() -> None:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "ansible.cfg")
    assert not cfg.has_option("defaults", "gather_subset")
    for path in [ROOT / ".config/molecule/config.yml", *ROOT.glob("molecule/*/molecule.yml")]:
        assert "gather_subset" not in path.read_text(), path


# A module of the collection returning facts: ansible_facts={"NAME": ...} or
# facts = {"NAME": ...} before exit_json(ansible_facts=facts).
MODULE_FACT = re.compile(r"(?:ansible_facts=|facts = )\{\"(\w+)\"")


def own_facts() -> set[str]:
    """The facts the collection keeps in the fact cache itself: its modules'
    (slurm_node) and the roles' set_fact with cacheable."""
    names = {
        m.group(1)
        for path in (ROOT / "plugins/modules").glob("*.py")
        for m in MODULE_FACT.finditer(path.read_text())
    }
    for path in ROOT.glob("roles/*/tasks/*.yml"):
        for task in yaml.safe_load(path.read_text()) or []:
            args = task.get("ansible.builtin.set_fact") if isinstance(task, dict) else None
            if isinstance(args, dict) and args.get("cacheable"):
                names |= set(args) - {"cacheable"}
    return names


@pytest.fixture(scope="module")
def minimal_facts(tmp_path_factory) -> set[str]:
    """The fact names Ansible's own setup gathers with the minimal subset, here."""
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(tmp_path_factory.mktemp("cfg") / "none.cfg"),
        ANSIBLE_NOCOLOR="1",
    )
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible"),
            "localhost",
            "-c",
            "local",
            "-m",
            "ansible.builtin.setup",
            "-a",
            f"gather_subset={','.join(SUBSET)}",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    # "localhost | SUCCESS => {...}"
    facts = json.loads(done.stdout.split("=>", 1)[1])["ansible_facts"]
    assert "ansible_distribution" in facts and "ansible_devices" not in facts
    return {k.removeprefix("ansible_") for k in facts}


def test_the_roles_read_only_minimal_or_their_own_facts(minimal_facts) -> None:
    allowed = minimal_facts | own_facts()
    read: dict[str, set[str]] = {}
    for folder in ("roles", "playbooks", "plugins", "molecule"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix not in {".yml", ".j2", ".py"} or not path.is_file():
                continue
            for m in FACT_READ.finditer(path.read_text(errors="replace")):
                read.setdefault(m.group(1) or m.group(2), set()).add(str(path.relative_to(ROOT)))
    assert read, "no fact read found: the pattern is wrong"
    beyond = {name: sorted(where) for name, where in read.items() if name not in allowed}
    assert not beyond, f"facts outside gather_subset {SUBSET}: {beyond}"
