#!/usr/bin/env python3
"""Clear molecule's state of a Docker scenario whose containers are gone.

molecule keeps `created: true` in its state file until `molecule destroy`.
When the containers were removed another way (`docker rm -f`, a pruned
Docker), `molecule create` then skips ("instances already created") and the
next playbook fails with "No such container". Run before `molecule create`
(make demo does): where molecule lists an instance as created that Docker
does not know, this names them and runs `molecule destroy`, which removes
what is left and resets the state; otherwise it does nothing.

    python tools/molecule_state.py [SCENARIO]     (default: default)
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence


def created_instances(listing: str) -> list[str]:
    """Names of the instances `molecule list -f plain` marks created (its fifth column)."""
    names = []
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[4].lower() == "true":
            names.append(fields[0])
    return names


def container_exists(name: str) -> bool:
    done = subprocess.run(
        ["docker", "container", "inspect", name], capture_output=True, check=False
    )
    return done.returncode == 0


def gone(listing: str, exists: Callable[[str], bool]) -> list[str]:
    """The created instances whose container Docker does not have."""
    return [name for name in created_instances(listing) if not exists(name)]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    scenario = args[0] if args else "default"
    listing = subprocess.run(
        ["molecule", "list", "-s", scenario, "-f", "plain"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    missing = gone(listing, container_exists)
    if not missing:
        return 0
    print(
        f"molecule_state: scenario {scenario}: molecule's state says {', '.join(missing)} "
        "exist, Docker has no such container; clearing the state (molecule destroy)",
        flush=True,
    )
    return subprocess.run(["molecule", "destroy", "-s", scenario], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
