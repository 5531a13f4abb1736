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
    assert ml.local_only(connection, hosts) is expected


def test_shim_is_mitogen_over_linear():
    mro = [c.__module__ for c in ml.StrategyModule.__mro__]
    assert "ansible_mitogen.strategy" in mro
    assert ml.StrategyModule.__mro__[2] is ml._Linear
