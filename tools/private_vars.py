#!/usr/bin/env python3
"""Lint: no role or playbook reads another role's private (``__``) variable.

A name ``__<role>_…`` belongs to that role: only files under roles/<role>/
may name it. A ``__`` name that no role prefix claims belongs to the one
file that uses it (a playbook's own vars). Other roles read a role's
documented, public outputs (no leading ``__``), listed in its README.

Usage: tools/private_vars.py [ROOT]; exit 1 with one line per cross read.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

NAME = re.compile(r"(?<![A-Za-z0-9_])(__[a-z][a-z0-9_]*)")


def owner(root: Path, path: Path) -> str:
    parts = path.relative_to(root).parts
    return f"roles/{parts[1]}" if parts[0] == "roles" else "/".join(parts)


def cross_reads(root: Path) -> list[str]:
    roles = sorted(
        (p.name for p in (root / "roles").iterdir() if p.is_dir()), key=len, reverse=True
    )
    files = [
        p
        for p in [*(root / "roles").rglob("*"), *(root / "playbooks").glob("*.yml")]
        if p.is_file() and p.suffix in (".yml", ".yaml", ".j2")
    ]
    uses: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(files):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for name in NAME.findall(line):
                uses[name][owner(root, path)].append(f"{path.relative_to(root)}:{number}")
    problems = []
    for name, where in sorted(uses.items()):
        role = next((r for r in roles if name.startswith(f"__{r}_")), None)
        home = f"roles/{role}" if role else None
        if home is None and len(where) > 1:
            places = ", ".join(sorted(where))
            problems.append(f"{name} is private but used in {places}: give it one home")
            continue
        for place, lines in sorted(where.items()):
            if home is not None and place != home:
                problems.append(
                    f"{lines[0]}: {name} is {home}'s private variable; "
                    f"read a public output of {role} instead (see {home}/README.md)"
                )
    return problems


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else Path(__file__).resolve().parents[1])
    problems = cross_reads(root)
    for line in problems:
        sys.stdout.write(line + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
