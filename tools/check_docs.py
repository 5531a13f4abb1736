"""The table of checks in roles/cluster_doctor/README.md, from the check registry.

``python tools/check_docs.py`` rewrites the block between the BEGIN and END
markers; ``--check`` exits 1 when it is out of date (tests/test_check_registry.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.cluster_checks import (  # noqa: E402
    REGISTRY,
)

README = ROOT / "roles" / "cluster_doctor" / "README.md"
BEGIN = (
    "<!-- BEGIN checks: generated from plugins/module_utils/cluster_checks.py "
    "by tools/check_docs.py -->"
)
END = "<!-- END checks -->"


def table() -> str:
    rows = [
        "| id | scope | nodes | what it reads | fix | used by | alerts |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in REGISTRY:
        kinds = ", ".join(c.kinds) or "all"
        if c.needs:
            kinds += " (with " + ", ".join(c.needs) + ")"
        alerts = ", ".join(a.name for a in c.alerts) if "alert" in c.uses else ""
        cells = [f"`{c.id}`", c.scope, kinds, c.reads, c.fix, ", ".join(c.uses), alerts or "-"]
        rows.append("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
    return "\n".join(rows)


def render(text: str) -> str:
    head, _sep, rest = text.partition(BEGIN)
    _old, _sep2, tail = rest.partition(END)
    return f"{head}{BEGIN}\n\n{table()}\n\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    text = README.read_text()
    if BEGIN not in text or END not in text:
        print(f"{README}: no {BEGIN} ... {END} block", file=sys.stderr)
        return 1
    new = render(text)
    if args.check:
        if new != text:
            print(f"{README}: the checks table is out of date: python tools/check_docs.py")
            return 1
        return 0
    README.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
