"""The daemons' change plan of a run (module_utils/change_plan.py, tests/test_change_plan.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.change_plan import (
    daemon_up,
    file_writes,
    key_installs,
    node_of,
    noted_of,
    plan,
)


def daemon_plan(
    hosts: Iterable[Mapping],
    here: Mapping,
    ctl: Mapping,
    dbd: Mapping | None = None,
    sinfo_lines: Iterable[str] = (),
    outside: Iterable[str] = (),
    registered: bool = False,
    ctl_upgraded: bool = False,
    answered: bool = True,
    acceptance: str | None = None,
    batch: object = "25%",
    writers: Iterable[Mapping] = (),
    munge_key: str = "/etc/munge/munge.key",
    auth_key: str = "/etc/slurm/slurm.jwks",
) -> dict:
    """What slurmdbd, slurmctld and each slurmd do in this run, and why; the nodes
    the acceptance gate drains (``acceptance``: its prefix, None when off); the
    slurmd upgrade's batches (``batch``: slurm_upgrade_batch, N or N%).

    here: the variables of the host that asks (slurm_common's notes of the run);
    writers: the variables of every host of the play, whose files this run
    writes are gathered as the plan's ``files`` (``written``).
    """
    noted = noted_of(here, ctl, dbd, registered=registered, ctl_upgraded=ctl_upgraded)
    return plan(
        noted,
        [node_of(host) for host in hosts],
        dbd=bool(dbd),
        dbd_up=daemon_up(dbd, "slurmdbd"),
        ctl_up=daemon_up(ctl, "slurmctld"),
        sinfo_lines=sinfo_lines,
        outside=outside,
        answered=answered,
        nodes_changed=here.get("slurm_common_nodes_changed") or (),
        acceptance=acceptance,
        batch=batch,
        files=written(writers, here, dbd, munge_key, auth_key),
    ).to_dict()


def written(
    writers: Iterable[Mapping],
    here: Mapping,
    dbd: Mapping | None = None,
    munge_key: str = "/etc/munge/munge.key",
    auth_key: str = "/etc/slurm/slurm.jwks",
) -> dict:
    """``{host: {path: why}}``: the files the roles before slurm_daemons planned
    (a host without any may map to {}: ``plan`` leaves it out).

    From each host's public outputs: slurm_common_writes (its own files) and,
    set alike on every host, slurm_common_ctl_writes (the controller's, which
    ``here`` holds also under a --limit that leaves the controller out); the
    munge key where munge_key_install changed; Slurm's own key (auth_key) where
    slurm_auth_key_install changed; slurmdbd.conf where
    slurm_dbd_conf changed.
    """
    out: dict[str, dict] = {}

    def add(host: str, paths: Mapping) -> None:
        out.setdefault(host, {}).update(paths)

    ctl = here.get("slurm_common_ctl_writes") or {}
    if ctl.get("host"):
        add(str(ctl["host"]), ctl.get("files") or {})
    for host in writers:
        name = str(host["inventory_hostname"])
        add(name, host.get("slurm_common_writes") or {})
        if isinstance(host.get("munge_key_install"), Mapping) and host["munge_key_install"].get(
            "changed"
        ):
            add(name, {munge_key: "the key host's munge key (it had none, or another)"})
        auth = host.get("slurm_auth_key_install")
        if isinstance(auth, Mapping) and auth.get("changed"):
            add(name, {auth_key: "the controller's slurm.jwks (it had none, or another)"})
    conf = (dbd or {}).get("slurm_dbd_conf")
    if isinstance(conf, Mapping) and conf.get("changed"):
        add(
            str(dbd["inventory_hostname"]),
            {conf.get("dest", "slurmdbd.conf"): "not as this run renders it"},
        )
    return out


class FilterModule:
    def filters(self) -> dict:
        # munge_key_plan: module_utils/change_plan.py key_installs, as it is.
        return {
            "daemon_plan": daemon_plan,
            "file_plan": file_writes,
            "munge_key_plan": key_installs,
        }
