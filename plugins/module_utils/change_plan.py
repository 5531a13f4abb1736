"""What the Slurm daemons do in a run, decided in one place (issue 26).

The roles before slurm_daemons only write files and note what changed
(slurm_common: how the controller's files changed; slurm_dbd: its config and
package; munge: a new key; pytorch: a reinstall). ``daemon_plan`` turns those
notes, and what the probe found running, into one documented structure that
the slurm_daemons role carries out in order, deciding nothing itself:

- ``slurmdbd``, ``slurmctld``: ``{"action": "restart" | "start" | "none", "why"}``.
  "start" makes sure a daemon that is not running (or was stopped for a
  dump) runs; "none" is a daemon found running that nothing asks to restart.
- ``reconfigure``: ``{"action": "reconfigure" | "none", "why"}`` - one
  ``scontrol reconfigure`` hands the controller's new files to every slurmd,
  also outside ``--limit``.
- ``slurmd``: ``{inventory host: {"action", "why"}}`` for the play's compute nodes.
- ``outside``: ``{"hosts": [...], "why"}`` - compute nodes outside ``--limit``
  whose slurmd a reconfigure cannot update (a restart-only change).
- ``revive``: NodeNames slurmctld could not reach before this run.
- ``drain``: ``{NodeName: why}`` - the play's compute nodes the acceptance gate
  drains with ``<prefix> pending`` before their new files or slurmd take effect
  (never one an admin drained); the smoke job resumes those it proves.
- ``upgrade``: ``{"hosts", "batches", "sizes", "why"}`` - the compute nodes whose
  slurmd moves to another Slurm release, in the batches playbooks/slurm_upgrade.yml
  takes one after another (after slurmdbd and slurmctld), as Ansible's ``serial``
  would cut them for the batch size asked (``N`` or ``N%``).

- ``files``: ``{inventory host: {path: why}}`` - the files this run writes on
  each host of the play (slurm_common's controller files, configless drop-in
  and health program; the munge key installs; slurmdbd.conf), as the roles
  before slurm_daemons planned them with ``file_writes``.

Earlier in the run, before any daemon's plan can be known, each role asks
``file_writes`` (filter ``file_plan``) which of its files the probe did not find
as this run renders them, and why, and writes only those; the munge role asks
``key_installs`` (filter ``munge_key_plan``) which nodes get the key host's
munge key, and why; those answers reach the daemons' plan as ``files`` and
``munge_key_install``.

Pure Python, no Ansible: the filters ``daemon_plan``, ``file_plan`` and
``munge_key_plan`` (plugins/filter/change_plan.py) read the hosts' variables and
call ``plan``, ``file_writes`` and ``key_installs``; tests/test_change_plan.py
covers them case by case.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

# slurm_common_conf_change values: how the daemons take a slurm.conf change.
CONF_CHANGES = ("none", "reconfigure", "nodes", "restart")
FIRST_OR_RESTART = "a first install or a slurm.conf change only a restart applies"
# Why a daemon restarts for Slurm's own key (role slurm_auth): it loads
# slurm.jwks at start, and a daemon that held another key cannot take the
# reconfigure that would load it (the RPC is signed with a key it does not know).
AUTH_KEY = "a new slurm.jwks key (auth/slurm)"
# sinfo %t of a drained or draining node (with or without flags such as '*').
_DRAINED = re.compile(r"^(drain|drng|drained|draining)")


@dataclass(frozen=True)
class Noted:
    """What this run changed, as the roles before slurm_daemons noted it."""

    conf: str = "none"  # slurm_common_conf_change
    gres_changed: tuple[str, ...] = ()  # NodeNames whose GPU lines in gres.conf changed
    cgroup_changed: bool = False
    dbd_conf: bool = False  # slurmdbd.conf changed
    dbd_packages: bool = False  # slurmdbd's package changed
    dbd_key: bool = False  # a new munge key on the slurmdbd host
    dbd_auth_key: bool = False  # a new slurm.jwks (auth/slurm) on the slurmdbd host
    dbd_dumped: bool = (
        False  # slurm_dbd dumped the database (slurmdbd stopped) for a release change
    )
    ctl_key: bool = False  # a new munge key on the controller
    ctl_auth_key: bool = False  # a new slurm.jwks (auth/slurm) on the controller
    registered: bool = False  # the cluster was added to accounting in this run
    ctl_upgrade: bool = False  # slurmctld moves to another release in this run
    ctl_upgraded: bool = False  # ... and its package was upgraded

    def __post_init__(self) -> None:
        if self.conf not in CONF_CHANGES:
            raise ValueError(
                f"conf change {self.conf!r}: expected one of {', '.join(CONF_CHANGES)}"
            )


@dataclass(frozen=True)
class Node:
    """One compute node of the play."""

    host: str  # inventory name
    name: str  # NodeName (hostname -s)
    key: bool = False  # a new munge key here
    auth_key: bool = False  # a new slurm.jwks (auth/slurm) here
    unit: bool = False  # slurmd's configless drop-in is new
    up: bool = True  # the probe found slurmd active and enabled
    release: bool = False  # its slurmd moves to another Slurm release in this run
    torch: bool = False  # its PyTorch was (re)installed in this run


@dataclass
class Plan:
    slurmdbd: dict = field(default_factory=lambda: _act("none"))
    slurmctld: dict = field(default_factory=lambda: _act("none"))
    reconfigure: dict = field(default_factory=lambda: _act("none"))
    slurmd: dict = field(default_factory=dict)
    outside: dict = field(default_factory=lambda: {"hosts": [], "why": ""})
    revive: list = field(default_factory=list)
    drain: dict = field(default_factory=dict)
    upgrade: dict = field(
        default_factory=lambda: {"hosts": [], "batches": [], "sizes": [], "why": ""}
    )
    files: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _act(action: str, why: str = "") -> dict:
    return {"action": action, "why": why}


def known_nodes(sinfo_lines: Iterable[str]) -> dict[str, tuple[str, str]]:
    """``{NodeName: (state, reason)}`` from ``sinfo --Node '%N|%t|%E'`` lines (first line wins)."""
    out: dict[str, tuple[str, str]] = {}
    for line in sinfo_lines or []:
        name, _sep, rest = str(line).partition("|")
        state, _sep, reason = rest.partition("|")
        if name and name not in out:
            out[name] = (state.strip(), reason.strip())
    return out


def acceptance_drains(
    nodes: Iterable[Node],
    sinfo_lines: Iterable[str],
    changed: Iterable[str],
    prefix: str,
    answered: bool = True,
) -> dict[str, str]:
    """``{NodeName: why}`` of the nodes that wait for the acceptance job.

    Of the play's compute nodes: those slurmctld did not know before this run
    (every one when it did not answer: a first install), whose NodeName line or
    GPUs changed (``changed``), whose slurmd changes release or whose PyTorch
    was (re)installed; never one an admin drained (a reason without ``prefix``).
    """
    known = known_nodes(sinfo_lines) if answered else {}
    changed = set(changed or ())
    out: dict[str, str] = {}
    for node in nodes:
        state, reason = known.get(node.name, ("", ""))
        if _DRAINED.match(state) and not reason.startswith(prefix):
            continue
        why = _first(
            [
                (not answered, "a first install (slurmctld did not answer)"),
                (node.name not in known, "new to slurmctld"),
                (node.name in changed, "its NodeName line or GPUs changed"),
                (node.release, "its slurmd changes release"),
                (node.torch, "its PyTorch was reinstalled"),
            ]
        )
        if why:
            out[node.name] = why
    return dict(sorted(out.items()))


def upgrade_batches(hosts: Iterable[str], batch: object = "25%") -> list[list[str]]:
    """The hosts in batches of ``batch`` (a count, or a share of them as ``"N%"``), cut
    as Ansible's ``serial`` cuts a play: a share rounds down, to at least one host."""
    hosts = list(hosts)
    text = str(batch).strip()
    try:
        size = (int(float(text[:-1]) / 100 * len(hosts)) if text.endswith("%") else int(text)) or 1
        if float(text.rstrip("%")) <= 0:
            raise ValueError(text)
    except ValueError:
        raise ValueError(
            f"slurm_upgrade_batch {batch!r}: give a number of nodes (2) or a share of them (25%)"
        ) from None
    return [hosts[i : i + size] for i in range(0, len(hosts), size)]


def key_installs(checksums: Mapping[str, str], source: str, key_host: str) -> dict[str, str]:
    """``{host: why}`` of the hosts that get the key host's munge key.

    checksums: ``{host: SHA-256}`` of each play host's key as this run knows it
    ('' where it has none); source: the key host's (itself one of them or not,
    under ``--limit``). A host whose key is the source's gets nothing. Refuses to
    plan without the source: every node would get a key nobody holds.
    """
    if not source:
        raise ValueError(
            f"the key host {key_host} has no munge key: it is made there first "
            "(role munge); run the play with that host in it"
        )
    out = {}
    for host, have in sorted(checksums.items()):
        if host == key_host or have == source:
            continue
        out[host] = "no munge key" if not have else f"another munge key than {key_host}'s"
    return out


def file_writes(
    state: Mapping | None, wanted: Iterable[Mapping], folder: str = ""
) -> dict[str, str]:
    """``{path: why}`` of the wanted files a host needs written.

    state: the host's probe (module node_state, fact ``cluster_node_state``);
    wanted: per file as this run renders it, ``path`` (or ``dest``, as a copy
    task's loop item has it; relative ones are taken in ``folder``), ``sha1``
    or ``content`` (hashed here as Ansible's ``hash('sha1')`` does), ``owner``
    and ``group`` (root) and ``mode`` (0644). Neither sha1 nor content wants the
    file to exist, whatever it holds (a key or a password made once, never
    replaced). A file is not written where the probe found it as wanted.
    Without a probe (a role used on its own) or for a path the probe was not
    asked about, nothing is proven and the file is planned, so its write task
    runs and decides for itself. The order is the wanted order.
    """
    files = state.get("files") if isinstance(state, Mapping) else None
    out: dict[str, str] = {}
    for want in wanted or ():
        path = str(want.get("path") or want["dest"])
        if folder and not path.startswith("/"):
            path = f"{folder.rstrip('/')}/{path}"
        sha1 = want.get("sha1") or (
            hashlib.sha1(str(want["content"]).encode()).hexdigest() if "content" in want else ""
        )
        found = files.get(path) if isinstance(files, Mapping) else None
        info = found if isinstance(found, Mapping) else {}
        wants = tuple(
            str(want.get(k, d)) for k, d in (("owner", "root"), ("group", "root"), ("mode", "0644"))
        )
        have = tuple(str(info.get(k)) for k in ("owner", "group", "mode"))
        why = _first(
            [
                (not isinstance(files, Mapping), "no probe of this host"),
                ("exists" not in info, "the probe did not read it"),
                (not info.get("exists"), "absent"),
                (bool(sha1) and info.get("sha1") != sha1, "its content differs"),
                (
                    bool(sha1) and have != wants,
                    f"{have[0]}:{have[1]} {have[2]}, not {wants[0]}:{wants[1]} {wants[2]}",
                ),
            ]
        )
        if why:
            out[path] = why
    return out


def unreachable(sinfo_lines: Iterable[str]) -> list[str]:
    """NodeNames slurmctld could not reach before this run (``sinfo --Node '%N|%t|%E'``):
    not responding (``*`` after the state) or DOWN for "Not responding"."""
    return [
        name
        for name, (state, reason) in known_nodes(sinfo_lines).items()
        if state.endswith("*") or (state == "down" and reason.startswith("Not responding"))
    ]


def _choose(restart: str, start: str) -> dict:
    """Restart when a change asks for it, else start when it does not run, else nothing."""
    if restart:
        return _act("restart", restart)
    return _act("start", start) if start else _act("none")


def _first(reasons: list[tuple[bool, str]]) -> str:
    return next((why for wanted, why in reasons if wanted), "")


def plan(
    noted: Noted,
    nodes: Iterable[Node],
    *,
    files: Mapping[str, Mapping[str, str]] | None = None,
    dbd: bool = True,
    dbd_up: bool = True,
    ctl_up: bool = True,
    sinfo_lines: Iterable[str] = (),
    outside: Iterable[str] = (),
    answered: bool = True,
    nodes_changed: Iterable[str] = (),
    acceptance: str | None = None,
    batch: object = "25%",
) -> Plan:
    """The daemons' actions for this run.

    dbd: the cluster has a slurmdbd host; dbd_up/ctl_up: the probe found the
    daemon active and enabled; sinfo_lines: what slurmctld reported before this
    run (answered: whether it answered); outside: the compute hosts outside this
    play (``--limit``); nodes_changed: NodeNames whose NodeName line changed;
    acceptance: the gate's reason prefix, None when the gate is off; batch: the
    upgrade's batch size (slurm_upgrade_batch); files: ``{host: {path: why}}``
    the roles planned to write (``file_writes``), hosts without any left out.
    """
    nodes = list(nodes)
    out = Plan(revive=unreachable(sinfo_lines))
    out.files = {host: dict(paths) for host, paths in sorted((files or {}).items()) if paths}
    moving = [node.host for node in nodes if node.release]
    if moving:
        batches = upgrade_batches(moving, batch)
        out.upgrade = {
            "hosts": moving,
            "batches": batches,
            "sizes": [len(b) for b in batches],
            "why": "its slurmd moves to another Slurm release",
        }
    if acceptance is not None:
        changed = [*nodes_changed, *noted.gres_changed]
        out.drain = acceptance_drains(nodes, sinfo_lines, changed, acceptance, answered)
    if dbd:
        restart = _first(
            [
                (noted.dbd_conf, "slurmdbd.conf changed"),
                (noted.dbd_packages, "its package changed"),
                (noted.dbd_key, "a new munge key"),
                (noted.dbd_auth_key, AUTH_KEY),
            ]
        )
        start = _first(
            [
                (noted.dbd_dumped, "stopped for the database dump before a release change"),
                (not dbd_up, "not running"),
            ]
        )
        out.slurmdbd = _choose(restart, start)
    restart = _first(
        [
            (noted.conf == "restart", FIRST_OR_RESTART),
            (noted.conf == "nodes", "nodes were added, removed or redefined"),
            (noted.ctl_key, "a new munge key"),
            (noted.ctl_auth_key, AUTH_KEY),
            (noted.registered, "its cluster is new to accounting (slurmctld registers at start)"),
            (noted.ctl_upgraded, "its release changed"),
        ]
    )
    start = _first([(noted.ctl_upgrade, "its release changes"), (not ctl_up, "not running")])
    out.slurmctld = _choose(restart, start)
    if noted.conf != "restart":
        why = _first(
            [
                (noted.conf == "reconfigure", "slurm.conf changed"),
                (noted.conf == "nodes", "nodes were added, removed or redefined"),
                (bool(noted.gres_changed), "gres.conf changed"),
                (noted.cgroup_changed, "cgroup.conf changed"),
            ]
        )
        out.reconfigure = _act("reconfigure", why) if why else _act("none")
    for node in nodes:
        why = _first(
            [
                (noted.conf == "restart", FIRST_OR_RESTART),
                (node.key, "a new munge key"),
                (node.auth_key, AUTH_KEY),
                (node.unit, "slurmd now runs configless"),
                (node.name in noted.gres_changed, "its GPUs changed (gres.conf)"),
                (noted.cgroup_changed, "cgroup.conf changed"),
                (node.name in out.revive, "slurmctld cannot reach it (Not responding)"),
            ]
        )
        out.slurmd[node.host] = _choose(why, "" if node.up else "not running")
    why = _first(
        [
            (noted.conf == "restart", "a slurm.conf change only a restart applies"),
            (noted.cgroup_changed, "cgroup.conf changed"),
        ]
    )
    hosts = sorted(outside) if why else []
    out.outside = {"hosts": hosts, "why": why if hosts else ""}
    return out


def _changed(result: object) -> bool:
    return isinstance(result, Mapping) and bool(result.get("changed"))


def unit_up(state: Mapping | None, name: str) -> bool:
    """True when the probe (module node_state) found the systemd unit active and enabled
    at boot; also the filter ``unit_up`` (plugins/filter/probed.py)."""
    unit = ((state or {}).get("units") or {}).get(name) or {}
    return unit.get("active") == "active" and unit.get("enabled") == "enabled"


def daemon_up(hostvars: Mapping | None, unit: str) -> bool:
    """Whether the probe (``cluster_node_state``) found the unit active and enabled."""
    return unit_up((hostvars or {}).get("cluster_node_state"), unit)


def node_of(hostvars: Mapping) -> Node:
    """A compute node from its host variables (what the roles registered there)."""
    return Node(
        host=str(hostvars["inventory_hostname"]),
        name=str(hostvars["ansible_facts"]["hostname"]),
        key=_changed(hostvars.get("munge_key_install")),
        auth_key=_changed(hostvars.get("slurm_auth_key_install")),
        unit=_changed(hostvars.get("slurm_common_unit")),
        up=daemon_up(hostvars, "slurmd"),
        release="slurmd" in (hostvars.get("slurm_common_upgrade") or {}),
        torch=_changed(hostvars.get("pytorch_install")),
    )


def noted_of(here: Mapping, ctl: Mapping, dbd: Mapping | None, **run: object) -> Noted:
    """What the roles noted: slurm_common's notes of the run as this host holds them
    (set once for the play's hosts: the controller is not in a ``--limit node3``
    play), the controller's and the slurmdbd host's own results.

    run: what slurm_daemons itself registered so far (registered, ctl_upgraded).
    """
    dbd = dbd or {}
    return Noted(
        conf=str(here.get("slurm_common_conf_change") or "none"),
        gres_changed=tuple(here.get("slurm_common_gres_changed") or ()),
        cgroup_changed=bool(here.get("slurm_common_cgroup_changed")),
        dbd_conf=_changed(dbd.get("slurm_dbd_conf")),
        dbd_packages=_changed(dbd.get("slurm_dbd_packages")),
        dbd_key=_changed(dbd.get("munge_key_install")),
        dbd_auth_key=_changed(dbd.get("slurm_auth_key_install")),
        dbd_dumped=_changed(dbd.get("slurm_dbd_dump")),
        ctl_key=_changed(ctl.get("munge_key_install")),
        ctl_auth_key=_changed(ctl.get("slurm_auth_key_install")),
        registered=bool(run.get("registered")),
        ctl_upgrade="slurmctld" in (ctl.get("slurm_common_upgrade") or {}),
        ctl_upgraded=bool(run.get("ctl_upgraded")),
    )
