"""Slurm version skew and upgrade jumps that SchedMD does not support, refused up front.

Pure functions (tests/test_slurm_versions.py). SchedMD's rules (upgrade notes of
each release): slurmdbd >= slurmctld >= slurmd >= the client commands, and a
daemon reads the state and RPCs of at most two earlier major releases (three
from 24.11 on), so an upgrade may not skip more than that.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import pairwise

# Major releases in order (YY.MM).
RELEASES = (
    "17.02",
    "17.11",
    "18.08",
    "19.05",
    "20.02",
    "20.11",
    "21.08",
    "22.05",
    "23.02",
    "23.11",
    "24.05",
    "24.11",
    "25.05",
    "25.11",
)
# Daemons from the newest (must be upgraded first) to the oldest.
ORDER = ("slurmdbd", "slurmctld", "slurmd")


def release(version: object) -> str:
    """'22.05.8-4+deb12u1', '22.05.8' or '22.05' → '22.05'."""
    m = re.match(r"^(?:\d+:)?(\d{2})\.(\d{2})", str(version).strip())
    if not m or f"{m.group(1)}.{m.group(2)}" not in RELEASES:
        raise ValueError(f"not a Slurm release: {version!r}")
    return f"{m.group(1)}.{m.group(2)}"


def window(target: str) -> int:
    """How many earlier releases a daemon of `target` can upgrade from."""
    return 3 if RELEASES.index(target) >= RELEASES.index("24.11") else 2


def slurm_upgrade_problems(nodes: Mapping[str, Mapping]) -> list[str]:
    """Refusals for {host: {installed: {package: version}, target: 'YY.MM', daemons: [...]}}."""
    problems = []
    for host, node in sorted(nodes.items()):
        target = release(node["target"])
        for pkg, version in sorted((node.get("installed") or {}).items()):
            if pkg not in ORDER:
                continue
            have = release(version)
            gap = RELEASES.index(target) - RELEASES.index(have)
            if gap < 0:
                problems.append(
                    f"{host}: {pkg} {version} is installed and this run would go back to {target}: "
                    "Slurm cannot be downgraded. Fix: keep the node on its distribution release, "
                    "or rebuild it"
                )
            elif gap > window(target):
                skipped = ", ".join(RELEASES[RELEASES.index(have) + 1 : RELEASES.index(target)])
                step = RELEASES[RELEASES.index(have) + window(target)]
                problems.append(
                    f"{host}: {pkg} {version} to {target} skips {skipped}; SchedMD supports an "
                    f"upgrade from at most {window(target)} earlier releases. Fix: upgrade in "
                    f"steps (to {step} first), or drain the cluster and start it afresh "
                    "(slurmctld state and the database are not carried)"
                )
    # After the run: the newest daemon role must run the newest release.
    roles: dict[str, list[tuple[str, str]]] = {d: [] for d in ORDER}
    for host, node in nodes.items():
        for daemon in node.get("daemons", []):
            if daemon in roles:
                roles[daemon].append((host, release(node["target"])))
    for newer, older in pairwise(ORDER):
        for host_a, rel_a in roles[newer]:
            for host_b, rel_b in roles[older]:
                if RELEASES.index(rel_b) > RELEASES.index(rel_a):
                    problems.append(
                        f"{host_b}: {older} would run {rel_b}, newer than {newer} {rel_a} on "
                        f"{host_a}; Slurm needs {' >= '.join(ORDER)}. Fix: upgrade {host_a} first "
                        f"(its distribution release), then {host_b}"
                    )
                elif RELEASES.index(rel_a) - RELEASES.index(rel_b) > window(rel_a):
                    problems.append(
                        f"{host_b}: {older} {rel_b} is more than {window(rel_a)} releases behind "
                        f"{newer} {rel_a} on {host_a}. Fix: upgrade {host_b}"
                    )
    return problems


def slurm_upgrades(installed: Mapping | None, target: str) -> dict:
    """{daemon: {'from': version, 'to': release}} for the installed daemons whose
    release differs from `target` (after slurm_upgrade_problems allowed the run)."""
    out = {}
    for pkg, version in sorted((installed or {}).items()):
        if pkg in ORDER and release(version) != release(target):
            out[pkg] = {"from": str(version), "to": release(target)}
    return out


class FilterModule:
    def filters(self) -> dict:
        return {
            "slurm_upgrade_problems": slurm_upgrade_problems,
            "slurm_release": release,
            "slurm_upgrades": slurm_upgrades,
        }
