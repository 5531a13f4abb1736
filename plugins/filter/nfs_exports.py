"""Filters that render /etc/exports lines from the inventory and refuse unsafe ones.

Pure functions, unit-tested in tests/test_nfs_exports.py.
"""

from __future__ import annotations

import ipaddress
import re

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - outside Ansible
    AnsibleFilterError = ValueError  # type: ignore[misc,assignment]

# Client specs that let every host in: '*' and the whole IPv4/IPv6 space.
WORLD = {"*", "0.0.0.0/0", "::/0"}
# What an exports(5) client may be: host name, address, CIDR, wildcard, @netgroup.
CLIENT_RE = re.compile(r"[A-Za-z0-9@*?._:/\[\]-]+")
# One exports(5) option: a word or word=value, no space, comma, newline or parenthesis
# (any of them would end the option list or start a second export line).
OPTION_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(=[A-Za-z0-9_.:/@+-]+)?")
# Options that decide who root is; set through `root_squash`, not `options`.
SQUASH_OPTIONS = {"root_squash", "no_root_squash", "all_squash"}


def nfs_host_address(host_vars: dict) -> str:
    """Address of an inventory host on the storage network."""
    return str(
        host_vars.get("shared_fs_address")
        or host_vars.get("ansible_host")
        or host_vars["inventory_hostname"]
    )


def _natural(text: str) -> list:
    """Sort key: 10.0.0.9 before 10.0.0.10, gpu2 before gpu10."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]


def nfs_host_addresses(hosts: list, hostvars: dict) -> list:
    """nfs_host_address of each host, sorted (a stable exports file), without repeats."""
    return sorted({nfs_host_address(hostvars[host]) for host in hosts}, key=_natural)


def _clients(export: dict, default_clients: list) -> list:
    return list(export.get("clients") or default_clients or [])


def _root_squash(export: dict, options: list) -> bool:
    if "no_root_squash" in options:
        return False
    return bool(export.get("root_squash", True))


def _covers_everything(clients: list) -> list:
    """The address-range clients when together they hold every IPv4 (or IPv6) address."""
    for version, whole in (
        (4, ipaddress.ip_network("0.0.0.0/0")),
        (6, ipaddress.ip_network("::/0")),
    ):
        nets = []
        for client in clients:
            try:
                net = ipaddress.ip_network(str(client), strict=False)
            except ValueError:
                continue
            if net.version == version:
                nets.append(net)
        merged = list(ipaddress.collapse_addresses(nets))
        if merged == [whole]:
            return sorted(map(str, nets))
    return []


def nfs_export_problems(
    exports: list,
    default_clients: list,
    allow_world: bool = False,
    allow_no_root_squash: bool = False,
    default_options: list | None = None,
) -> list:
    """Why the exports must not be written, one message per problem (empty: fine)."""
    problems = []
    seen: set = set()
    for export in exports or []:
        path = str(export.get("path", ""))
        name = path or "(an export without path)"
        if not path.startswith("/") or path.rstrip("/") == "":
            problems.append(f"export {name}: path must be an absolute directory other than /")
        if path in seen:
            problems.append(f"export {name} is listed twice in nfs_server_exports")
        seen.add(path)
        clients = _clients(export, default_clients)
        if not clients:
            problems.append(
                f"export {name} has no clients: put the cluster's hosts in "
                "cluster_groups.cluster, set nfs_server_networks or the export's clients"
            )
        for client in clients:
            if not CLIENT_RE.fullmatch(str(client)):
                problems.append(f"export {name}: client {client!r} is not a host, address or net")
        open_to = sorted(WORLD.intersection(map(str, clients))) or _covers_everything(clients)
        if open_to and not allow_world:
            problems.append(
                f"export {name} would be open to every host ({', '.join(open_to)}); list the "
                "cluster's hosts or subnets, or set nfs_server_allow_world: true if that is "
                "really wanted"
            )
        options = list(export.get("options") or [])
        for option in options + list(default_options or []):
            if not OPTION_RE.fullmatch(str(option)):
                problems.append(
                    f"export {name}: option {option!r} is not one exports(5) option (no space, "
                    "comma, newline or parenthesis); give each option as its own list item"
                )
        if not _root_squash(export, options) and not allow_no_root_squash:
            problems.append(
                f"export {name} asks for no_root_squash: root on any client would be root on "
                "the server's files; keep root_squash, or set "
                "nfs_server_allow_no_root_squash: true to allow it"
            )
    return problems


def nfs_export_line(export: dict, default_clients: list, default_options: list) -> str:
    """One exports(5) line: path client(options) client(options) ..."""
    options = [o for o in (export.get("options") or default_options) if o not in SQUASH_OPTIONS]
    squash = (
        "root_squash"
        if _root_squash(export, list(export.get("options") or []))
        else ("no_root_squash")
    )
    spec = ",".join([*options, squash])
    clients = " ".join(f"{c}({spec})" for c in _clients(export, default_clients))
    return f"{export['path']} {clients}"


def nfs_export_lines(
    exports: list,
    default_clients: list,
    default_options: list,
    allow_world: bool = False,
    allow_no_root_squash: bool = False,
) -> list:
    """All export lines; refuses (AnsibleFilterError) what nfs_export_problems reports."""
    problems = nfs_export_problems(
        exports, default_clients, allow_world, allow_no_root_squash, default_options
    )
    if problems:
        raise AnsibleFilterError("; ".join(problems))
    return [nfs_export_line(e, default_clients, default_options) for e in exports]


class FilterModule:
    def filters(self) -> dict:
        return {
            "nfs_host_address": nfs_host_address,
            "nfs_host_addresses": nfs_host_addresses,
            "nfs_export_problems": nfs_export_problems,
            "nfs_export_lines": nfs_export_lines,
        }
