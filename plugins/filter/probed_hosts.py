"""What playbooks/packages.yml's probe found on each host of a play.

Pure functions (tests/test_probed_hosts.py) over `hostvars` and a host list
(ansible_play_hosts): a role's vars ask them for an answer about all its
hosts at once, without a Jinja loop. Each host's probe is its fact
cluster_node_state (the cluster role's public output); a host without one
(the role used on its own, the probe not run) was not proven anything, so
the task the answer gates runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

try:
    from ansible_collections.gpulab.slurm_cluster.plugins.filter.probed import probed_file
except ImportError:  # pragma: no cover - loaded by path beside probed.py
    from probed import probed_file  # type: ignore[no-redef]

# The fact that holds a host's probe result (playbooks/packages.yml).
PROBE = "cluster_node_state"
_MISSING = object()


def _dig(data: Any, *keys: str, default: Any = _MISSING) -> Any:
    """data[k1][k2]..., or default where a step is not a mapping or lacks the key.

    As Jinja's `data.k1.k2 | default(x)`: only a missing key falls back, a
    None value found at the end is kept.
    """
    for key in keys:
        if not isinstance(data, Mapping) or key not in data:
            return default
        data = data[key]
    return data


def _probed(hostvars: Mapping, host: str, path: str) -> dict:
    return probed_file(_dig(hostvars, host, PROBE, default={}), path)


def probed_checksums(hosts: Iterable[str], hostvars: Mapping, path: str, stat_var: str) -> dict:
    """{host: SHA-256 of path} for each host; '' where it is not known.

    From the host's registered ansible.builtin.stat result named stat_var
    where that task ran (its stat.checksum, '' when the file is absent),
    else from the probe (its sha256, '' when the probe did not find it).
    """
    out = {}
    for host in hosts:
        stat = _dig(hostvars, host, stat_var, "stat")
        if stat is not _MISSING:
            out[host] = _dig(stat, "checksum", default="")
        else:
            out[host] = _probed(hostvars, host, path).get("sha256", "")
    return out


def probed_copies_same(
    hosts: Iterable[str],
    hostvars: Mapping,
    source: str,
    path: str,
    owner: str,
    group: str,
    mode: str,
) -> bool:
    """True when the probe proves every host holds source's file with this owner, group and mode.

    source (the host whose file is the original) must be one of hosts and
    its probe must have found the file; then every host's probe must show
    the same SHA-256, owner, group and mode. False as soon as one was not
    probed, lacks the file or differs.
    """
    hosts = list(hosts)
    original = _probed(hostvars, source, path)
    wanted = [original.get("sha256", "-"), owner, group, mode]
    same = source in hosts and original.get("exists", False)
    for host in hosts:
        found = _probed(hostvars, host, path)
        if [found.get(k, "") for k in ("sha256", "owner", "group", "mode")] != wanted:
            same = False
    return bool(same)


def probed_root_owned(hosts: Iterable[str], hostvars: Mapping, path: str) -> bool:
    """True when every host's probe found path root's own all the way up.

    path is one of the probe's `trusted` paths: its answer is '' where every
    component is root's and writable by no one else. False as soon as a host
    was not probed, was not asked about path, or answered why not; and for
    no hosts at all.
    """
    hosts = list(hosts)
    return bool(hosts) and all(
        _dig(hostvars, host, PROBE, "trusted", path, default=None) == "" for host in hosts
    )


def probed_shared_reads(hosts: Iterable[str], hostvars: Mapping, folder: str) -> list:
    """[{file name: content}] per host: the root-owned files the probe read in folder.

    folder is one of the probe's shared_reads (a folder of root's on the
    shared filesystem); {} for a host whose probe did not read it.
    """
    return [
        _dig(hostvars, host, PROBE, "shared_reads", folder, "files", default={}) for host in hosts
    ]


class FilterModule:
    def filters(self) -> dict:
        return {
            "probed_checksums": probed_checksums,
            "probed_copies_same": probed_copies_same,
            "probed_root_owned": probed_root_owned,
            "probed_shared_reads": probed_shared_reads,
        }
