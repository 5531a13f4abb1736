"""tools/molecule_state.py: a scenario whose containers are gone has its state cleared."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location(
    "molecule_state", ROOT / "tools" / "molecule_state.py"
)
molecule_state = importlib.util.module_from_spec(spec)
sys.modules["molecule_state"] = molecule_state
spec.loader.exec_module(molecule_state)

# `molecule list -s default -f plain`: name, driver, provisioner, scenario, created, converged.
CREATED = """\
ctl     docker  ansible default true    true
node1   docker  ansible default true    true
node2   docker  ansible default true    false
login   docker  ansible default true    true
"""
NOT_CREATED = CREATED.replace("true", "false")


def test_created_instances_are_read_from_the_fifth_column() -> None:
    assert molecule_state.created_instances(CREATED) == ["ctl", "node1", "node2", "login"]
    assert molecule_state.created_instances(NOT_CREATED) == []
    assert molecule_state.created_instances("") == []


def test_only_the_created_ones_docker_lacks_are_gone() -> None:
    present = {"ctl", "login"}
    assert molecule_state.gone(CREATED, present.__contains__) == ["node1", "node2"]
    assert molecule_state.gone(CREATED, lambda _name: True) == []
    assert molecule_state.gone(NOT_CREATED, lambda _name: False) == []


def test_main_destroys_only_where_containers_are_gone(monkeypatch, capsys) -> None:
    ran: list[list[str]] = []

    class Done:
        def __init__(self, stdout: str = "", returncode: int = 0) -> None:
            self.stdout, self.returncode = stdout, returncode

    def run(cmd, **_kw):
        ran.append(cmd)
        return Done(CREATED) if cmd[:2] == ["molecule", "list"] else Done()

    monkeypatch.setattr(molecule_state.subprocess, "run", run)
    monkeypatch.setattr(molecule_state, "container_exists", lambda name: name != "node2")
    assert molecule_state.main(["default"]) == 0
    assert ran == [
        ["molecule", "list", "-s", "default", "-f", "plain"],
        ["molecule", "destroy", "-s", "default"],
    ]
    assert "node2 exist, Docker has no such container" in capsys.readouterr().out

    ran.clear()
    monkeypatch.setattr(molecule_state, "container_exists", lambda _name: True)
    assert molecule_state.main([]) == 0
    assert ran == [["molecule", "list", "-s", "default", "-f", "plain"]]


def test_make_demo_checks_before_create() -> None:
    text = (ROOT / "Makefile").read_text()
    assert "tools/molecule_state.py default && molecule create" in text
