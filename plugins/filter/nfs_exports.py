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
# A host name (RFC 1123 labels, dots between): what a client is by default.
HOST_NAME_RE = re.compile(
    r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)
# The narrowest networks a client may name by default (a wider one needs the
# opt-in nfs_server_allow_world): /16 for IPv4 (also inside ::ffff:0:0/96), /48 for IPv6.
MIN_PREFIX = 16
MIN_PREFIX6 = 48
MAPPED = ipaddress.ip_network("::ffff:0:0/96")


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


def client_problem(
    client: object,
    allow_world: bool = False,
    min_prefix: int = MIN_PREFIX,
    netgroups: list | None = None,
    min_prefix6: int = MIN_PREFIX6,
) -> str:
    """Why `client` may not be an exports(5) client, or ''.

    A client is a host name, an address, a network at least as narrow as the
    minimum prefix, or a netgroup the inventory names on purpose
    (nfs_server_netgroups); a wildcard or a wider network only with
    nfs_server_allow_world.
    """
    text = str(client)
    if text.startswith("@"):
        if text[1:] in (netgroups or []):
            return ""
        return (
            f"client {text!r} is a netgroup the inventory does not name; list it in "
            "nfs_server_netgroups if every host in it should mount the share"
        )
    if any(ch in text for ch in "*?["):
        if allow_world:
            return ""
        return (
            f"client {text!r} is a wildcard (it matches hosts by name, which anyone who "
            "controls a DNS entry can take); list the cluster's hosts or subnets, or set "
            "nfs_server_allow_world: true"
        )
    try:
        ipaddress.ip_address(text)
        return ""
    except ValueError:
        pass
    try:
        net = ipaddress.ip_network(text, strict=False)
    except ValueError:
        return (
            ""
            if HOST_NAME_RE.fullmatch(text)
            else (f"client {text!r} is not a host, address or net")
        )
    if net.version == 6 and net.prefixlen >= 96 and net.subnet_of(MAPPED):
        size, need, kind = net.prefixlen - 96, min_prefix, "IPv4 (mapped into IPv6)"
    elif net.version == 6:
        size, need, kind = net.prefixlen, min_prefix6, "IPv6"
    else:
        size, need, kind = net.prefixlen, min_prefix, "IPv4"
    if size < need and not allow_world:
        return (
            f"client {text!r} is an {kind} network of prefix /{size}, wider than /{need}; "
            "list the cluster's subnet, lower nfs_server_min_prefix on purpose, or set "
            "nfs_server_allow_world: true"
        )
    return ""


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
    min_prefix: int = MIN_PREFIX,
    netgroups: list | None = None,
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
            elif str(client) not in WORLD:
                why = client_problem(client, allow_world, min_prefix, netgroups)
                if why:
                    problems.append(f"export {name}: {why}")
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
    min_prefix: int = MIN_PREFIX,
    netgroups: list | None = None,
) -> list:
    """All export lines; refuses (AnsibleFilterError) what nfs_export_problems reports."""
    problems = nfs_export_problems(
        exports,
        default_clients,
        allow_world,
        allow_no_root_squash,
        default_options,
        min_prefix,
        netgroups,
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
