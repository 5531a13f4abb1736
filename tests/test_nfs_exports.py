"""Export lines and refusals of the nfs_server role (filter_plugins/nfs_exports.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins/filter"))
import nfs_exports as f

OPTS = ["rw", "sync", "no_subtree_check"]
HOSTS = ["10.0.0.10", "10.0.0.11"]
SHARED = {"path": "/srv/nfs/shared", "owner": "root", "group": "root", "mode": "1777"}


def test_line_for_the_cluster_hosts_has_root_squash() -> None:
    assert f.nfs_export_lines([SHARED], HOSTS, OPTS) == [
        "/srv/nfs/shared 10.0.0.10(rw,sync,no_subtree_check,root_squash) "
        "10.0.0.11(rw,sync,no_subtree_check,root_squash)"
    ]


def test_subnet_and_own_options() -> None:
    export = {"path": "/data", "clients": ["10.1.0.0/16"], "options": ["ro", "async"]}
    assert f.nfs_export_lines([export], HOSTS, OPTS) == ["/data 10.1.0.0/16(ro,async,root_squash)"]


def test_squash_options_come_only_from_root_squash() -> None:
    export = {"path": "/data", "options": ["rw", "root_squash", "all_squash"]}
    assert f.nfs_export_line(export, ["h"], OPTS) == "/data h(rw,root_squash)"


@pytest.mark.parametrize("world", ["*", "0.0.0.0/0", "::/0"])
def test_world_is_refused_with_the_reason(world: str) -> None:
    export = {"path": "/data", "clients": [world]}
    problems = f.nfs_export_problems([export], HOSTS)
    assert len(problems) == 1
    assert f"export /data would be open to every host ({world})" in problems[0]
    assert "nfs_server_allow_world: true" in problems[0]
    with pytest.raises(Exception, match="open to every host"):
        f.nfs_export_lines([export], HOSTS, OPTS)


def test_world_when_allowed() -> None:
    export = {"path": "/data", "clients": ["*"]}
    assert f.nfs_export_lines([export], HOSTS, OPTS, allow_world=True) == [
        "/data *(rw,sync,no_subtree_check,root_squash)"
    ]


@pytest.mark.parametrize(
    "export",
    [
        {"path": "/data", "root_squash": False},
        {"path": "/data", "options": ["rw", "no_root_squash"]},
    ],
)
def test_no_root_squash_is_refused_with_the_reason(export: dict) -> None:
    problems = f.nfs_export_problems([export], HOSTS)
    assert problems == [
        "export /data asks for no_root_squash: root on any client would be root on the "
        "server's files; keep root_squash, or set nfs_server_allow_no_root_squash: true "
        "to allow it"
    ]


def test_no_root_squash_when_allowed() -> None:
    export = {"path": "/data", "root_squash": False}
    assert f.nfs_export_lines([export], ["h"], OPTS, allow_no_root_squash=True) == [
        "/data h(rw,sync,no_subtree_check,no_root_squash)"
    ]


def test_bad_paths_clients_and_duplicates() -> None:
    problems = f.nfs_export_problems(
        [{"path": "/"}, {"path": "rel"}, {"path": "/a", "clients": ["x y"]}, {"path": "/a"}],
        HOSTS,
    )
    assert problems == [
        "export /: path must be an absolute directory other than /",
        "export rel: path must be an absolute directory other than /",
        "export /a: client 'x y' is not a host, address or net",
        "export /a is listed twice in nfs_server_exports",
    ]


def test_no_clients() -> None:
    (problem,) = f.nfs_export_problems([{"path": "/a"}], [])
    assert problem.startswith("export /a has no clients")


def test_host_addresses_prefer_storage_address() -> None:
    hostvars = {
        "head": {
            "inventory_hostname": "head",
            "ansible_host": "192.168.1.10",
            "shared_fs_address": "10.0.0.10",
        },
        "gpu01": {"inventory_hostname": "gpu01", "ansible_host": "10.0.0.11"},
        "gpu02": {"inventory_hostname": "gpu02"},
        "alias": {"inventory_hostname": "alias", "ansible_host": "10.0.0.11"},
    }
    assert f.nfs_host_addresses(["gpu02", "alias", "gpu01", "head"], hostvars) == [
        "10.0.0.10",
        "10.0.0.11",
        "gpu02",
    ]
    hostvars = {h: {"inventory_hostname": h} for h in ("10.0.0.9", "10.0.0.10", "10.0.0.100")}
    assert f.nfs_host_addresses(list(hostvars), hostvars) == list(hostvars)


@pytest.mark.parametrize(
    ("client", "words"),
    [
        ("*.*", "is a wildcard"),
        ("**", "is a wildcard"),
        ("?*", "is a wildcard"),
        ("gpu[0-9]*", "is a wildcard"),
        ("@all", "is a netgroup the inventory does not name"),
        ("::ffff:0.0.0.0/96", "IPv4 (mapped into IPv6) network of prefix /0, wider than /16"),
        ("10.0.0.0/8", "IPv4 network of prefix /8, wider than /16"),
        ("10.0.0.0/255.0.0.0", "IPv4 network of prefix /8, wider than /16"),
        ("2001:db8::/32", "IPv6 network of prefix /32, wider than /48"),
        ("-host", "is not a host, address or net"),
    ],
)
def test_clients_close_to_the_world_are_refused(client: str, words: str) -> None:
    problems = f.nfs_export_problems([{"path": "/data", "clients": [client]}], HOSTS)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"export /data: client {client!r} ")
    assert words in problems[0]
    # With the opt-in, wildcards and wide networks pass (a netgroup needs its name).
    allowed = f.nfs_export_problems([{"path": "/data", "clients": [client]}], HOSTS, True)
    assert (allowed == []) is (not client.startswith(("@", "-")))


@pytest.mark.parametrize(
    "client",
    ["gpu01", "gpu01.lab.example", "10.0.0.7", "10.0.0.0/24", "10.1.0.0/16",
     "fd00:1:2::/48", "::ffff:10.0.0.0/120", "2001:db8::7"],
)  # fmt: skip
def test_hosts_addresses_and_narrow_networks_pass(client: str) -> None:
    assert f.nfs_export_problems([{"path": "/data", "clients": [client]}], HOSTS) == []


def test_a_netgroup_named_on_purpose_and_a_wider_minimum() -> None:
    export = {"path": "/data", "clients": ["@gpu-nodes", "10.0.0.0/12"]}
    assert f.nfs_export_problems([export], HOSTS, min_prefix=12, netgroups=["gpu-nodes"]) == []
    assert f.nfs_export_lines([export], HOSTS, OPTS, min_prefix=12, netgroups=["gpu-nodes"]) == [
        "/data @gpu-nodes(rw,sync,no_subtree_check,root_squash) "
        "10.0.0.0/12(rw,sync,no_subtree_check,root_squash)"
    ]
