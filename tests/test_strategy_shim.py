"""plugins/strategy/mitogen_linear.py: which plays go without Mitogen.

Mitogen's async runner never finishes ``poll: 0`` jobs on the local
connection, so molecule's docker destroy hung for the whole CI budget; the
shim hands local-only plays to Ansible's own linear strategy.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins" / "strategy"))

import mitogen_linear as ml  # noqa: E402


def host(name, implicit=False, **hostvars):
    return SimpleNamespace(name=name, implicit=implicit, vars=hostvars)


@pytest.mark.parametrize(
    ("connection", "hosts", "expected"),
    [
        ("local", [host("ctl")], True),  # molecule's create/destroy plays
        (None, [host("localhost", implicit=True)], True),  # preflight play
        (None, [host("127.0.0.1")], True),
        (None, [host("ws", ansible_connection="local")], True),
        (None, [host("ctl", ansible_connection="docker")], False),
        (None, [host("localhost"), host("node1")], False),
        ("docker", [host("node1")], False),
        (None, [], False),
    ],
)
def test_local_only(connection, hosts, expected):
    assert ml.local_only(connection, hosts, lambda h: h.vars.get("ansible_connection")) is expected


def test_connection_var_sees_group_vars_of_file_and_folder(tmp_path):
    """A group of local hosts set in group_vars/ is local-only too (real inventory)."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.playbook.play import Play
    from ansible.vars.manager import VariableManager

    (tmp_path / "hosts.yml").write_text(
        "all:\n"
        "  children:\n"
        "    workstations:\n"
        "      hosts: {ws1: {}, ws2: {}}\n"
        "    inline:\n"
        "      hosts: {ws3: {}}\n"
        "      vars: {ansible_connection: local}\n"
        "    nodes:\n"
        "      hosts: {node1: {}}\n"
    )
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "workstations.yml").write_text("ansible_connection: local\n")
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(tmp_path / "hosts.yml")])
    manager = VariableManager(loader=loader, inventory=inventory)
    play = Play.load(
        {"hosts": "all", "gather_facts": False}, variable_manager=manager, loader=loader
    )

    def connection_of(h):
        return ml.connection_var(manager, play, h)

    assert {h.name: connection_of(h) for h in inventory.get_hosts("all")} == {
        "ws1": "local",
        "ws2": "local",
        "ws3": "local",
        "node1": None,
    }
    assert ml.local_only(None, inventory.get_hosts("workstations:inline"), connection_of)
    assert not ml.local_only(None, inventory.get_hosts("all"), connection_of)


def test_shim_is_mitogen_over_linear():
    mro = [c.__module__ for c in ml.StrategyModule.__mro__]
    assert "ansible_mitogen.strategy" in mro
    assert ml.StrategyModule.__mro__[2] is ml._Linear


def test_without_mitogen_the_plugin_loads_and_refuses_to_run(monkeypatch):
    """ansible-test's import test loads the plugin without mitogen installed."""
    import importlib.util

    from ansible.errors import AnsibleError

    monkeypatch.setitem(sys.modules, "ansible_mitogen", None)  # import fails
    spec = importlib.util.spec_from_file_location(
        "mitogen_linear_without", ROOT / "plugins" / "strategy" / "mitogen_linear.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert isinstance(module.MITOGEN_IMPORT_ERROR, ImportError)
    with pytest.raises(AnsibleError, match="needs the Python package mitogen"):
        module.StrategyModule(None)
