"""What rotate_key.yml does, decided before it changes anything (tests/test_key_rotation.py).

rotation_refusals: why a cluster is not ready for a rotation (a host
unreachable, a daemon down, a node not responding), each naming the host and
the fix. jwks_rotation_plan: auth/slurm's steps still to run
(module_utils/jwks.py). munge_rotation_plan: munge's hosts to stage the new
key on and to swap, also when an earlier rotation stopped halfway.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.jwks import rotation_plan

FIX = "run site.yml first"


def rotation_refusals(seen: Iterable[Mapping], sinfo_lines: Iterable[str] = ()) -> list[str]:
    """Why the cluster is not converged: one line per host and cause, with the fix.

    seen: ``[{host, reachable, wanted: [unit, or 'a|b' for either], units:
    {unit: systemctl is-active}}]``; sinfo_lines: ``sinfo -h -N -o '%N|%t|%E'``
    on the controller.
    """
    out = []
    for entry in seen:
        host = str(entry.get("host"))
        if not entry.get("reachable", False):
            out.append(f"{host}: unreachable; fix: bring it back (or take it out of the inventory)")
            continue
        units = entry.get("units") or {}
        for want in entry.get("wanted") or []:
            choices = str(want).split("|")
            if not any(units.get(u) == "active" for u in choices):
                states = ", ".join(f"{u} {units.get(u) or 'unknown'}" for u in choices)
                out.append(f"{host}: {' or '.join(choices)} not active ({states}); fix: {FIX}")
    for line in sinfo_lines:
        parts = line.split("|")
        if len(parts) < 2:
            continue
        name, state = parts[0].strip(), parts[1].strip()
        reason = parts[2].strip() if len(parts) > 2 else ""
        if state.endswith("*") or (state.startswith("down") and "responding" in reason.lower()):
            out.append(f"{name}: not responding to slurmctld (state {state}); fix: {FIX}")
    return out


def jwks_rotation_plan(hosts: Mapping[str, Mapping], controller: str) -> dict:
    """auth/slurm: ``{problems, reached, steps, resume}`` from every host's slurm_jwks read."""
    ctl = hosts.get(controller) or {}
    return rotation_plan(ctl, hosts)


def munge_rotation_plan(hosts: Mapping[str, Mapping], controller: str) -> dict:
    """munge: which hosts get the new key staged (munge.key.new) and which swap it in.

    hosts: ``{host: {key: sha256 of munge.key ('' without), new: sha256 of
    munge.key.new ('' without)}}``. The controller's munge.key.new is the new
    key while a rotation is under way; without one, hosts that hold the
    controller's munge.key as their munge.key.new finish an interrupted swap.
    Returns ``{problems, create, stage, swap, resume}``.
    """
    problems = []
    ctl = hosts.get(controller) or {}
    old, target = str(ctl.get("key") or ""), str(ctl.get("new") or "")
    if not old:
        problems.append(f"{controller}: no munge key; fix: {FIX}")
        return {"problems": problems, "create": False, "stage": [], "swap": [], "resume": False}
    stage, swap, finishing = [], [], []
    for host, seen in sorted(hosts.items()):
        key, new = str(seen.get("key") or ""), str(seen.get("new") or "")
        if not key:
            problems.append(f"{host}: no munge key; fix: {FIX}")
        elif target and key == target:
            continue  # swapped already (the controller has not yet)
        elif target and key == old:
            swap.append(host)
            if new != target and host != controller:
                stage.append(host)
        elif not target and key == old:
            swap.append(host)
            if host != controller:
                stage.append(host)
        elif not target and new == old:
            finishing.append(host)  # the controller swapped, this host had not
        else:
            problems.append(
                f"{host}: its munge key is neither the controller's nor the new one; fix: {FIX}"
            )
    if finishing:
        # An interrupted swap: only the hosts left behind swap, to the controller's key.
        return {
            "problems": problems,
            "create": False,
            "stage": [],
            "swap": finishing,
            "resume": True,
        }
    return {
        "problems": problems,
        "create": not target,
        "stage": stage,
        "swap": swap,
        "resume": bool(target),
    }


def _pair(stdout: object) -> tuple[float, float] | None:
    parts = str(stdout or "").split()
    try:
        return (float(parts[0]), float(parts[1])) if len(parts) == 2 else None
    except ValueError:
        return None


def rotation_report(noted: Mapping, kind: str, plan: Mapping, ended: float) -> dict:
    """The rotation's figures: duration, window, and each step or restart.

    noted: what the tasks noted on the control machine (``__slurm_auth_rotate_started``;
    auth/slurm: ``__slurm_auth_rotate_timeline``, one entry per step with the
    reconfigure's start and times; munge: ``__slurm_auth_rotate_swaps``, each host's
    registered swap whose stdout is "<restart began> <ended>"). The window is,
    for munge, the first restart's start to the last one's end (hosts may
    hold different keys); for auth/slurm, the time from each reconfigure to
    the cluster answering again, summed over the steps.
    """
    started = float(noted.get("__slurm_auth_rotate_started") or ended)
    out = {
        "kind": kind,
        "stamp": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started)),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "duration_s": round(ended - started, 2),
        "resumed": bool(plan.get("resume")),
    }
    if kind == "slurm":
        steps = list(noted.get("__slurm_auth_rotate_timeline") or [])
        out["steps"] = steps
        out["window_s"] = round(sum(float(s.get("ready_s") or 0) for s in steps), 2)
        out["window"] = (
            "scontrol reconfigure to slurmctld UP and every node responding, summed "
            + (
                f"over {len(steps)} steps: "
                + ", ".join(f"{s.get('step')} {s.get('reconfigure_s')} s" for s in steps)
            )
        )
        return out
    swaps = {
        host: pair
        for host, result in sorted((noted.get("__slurm_auth_rotate_swaps") or {}).items())
        if isinstance(result, Mapping) and (pair := _pair(result.get("stdout")))
    }
    out["restarts"] = {h: {"start": a, "restart_s": round(b - a, 3)} for h, (a, b) in swaps.items()}
    if swaps:
        first = min(pair[0] for pair in swaps.values())
        last = max(pair[1] for pair in swaps.values())
        out["window_s"] = round(last - first, 3)
        out["window"] = f"first to last munged restart, {len(swaps)} hosts"
    else:
        out["window_s"] = 0.0
        out["window"] = "no munged restarted"
    return out


class FilterModule:
    def filters(self) -> dict:
        return {
            "rotation_refusals": rotation_refusals,
            "jwks_rotation_plan": jwks_rotation_plan,
            "munge_rotation_plan": munge_rotation_plan,
            "rotation_report": rotation_report,
        }
