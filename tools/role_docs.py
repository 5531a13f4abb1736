#!/usr/bin/env python3
"""Role READMEs' variable tables, generated from each role's meta/argument_specs.yml.

The table of a role lives in its README.md between two marker comments:

    <!-- BEGIN role_docs: generated from meta/argument_specs.yml by tools/role_docs.py -->
    ...
    <!-- END role_docs -->

    python tools/role_docs.py           rewrite every table that differs
    python tools/role_docs.py --check   list the READMEs that differ and exit 1
                                        (tests/test_role_docs.py does the same)

argument_specs is the one source: change an option there, then run the first command.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- BEGIN role_docs: generated from meta/argument_specs.yml by tools/role_docs.py -->"
END = "<!-- END role_docs -->"
BLOCK = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END), re.S)
# A plain YAML scalar that reads back as the same string.
PLAIN = re.compile(r"^[A-Za-z0-9_./][A-Za-z0-9_./=,:+@-]*$")


def scalar(value: Any) -> str:
    """One value in YAML flow style, as a reader would write it in group_vars."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(scalar(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{scalar(k)}: {scalar(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if PLAIN.match(text) and yaml.safe_load(text) == text and ": " not in text:
        return text
    return json.dumps(text, ensure_ascii=False)


def cell(text: str) -> str:
    """Markdown table cell: one line, pipes escaped (also inside code spans)."""
    return " ".join(text.split()).replace("|", "\\|")


def kind(spec: dict) -> str:
    name = spec.get("type", "str")
    return f"{name} of {spec['elements']}" if "elements" in spec else name


def default(spec: dict) -> str:
    if spec.get("required"):
        return "required"
    if "default" not in spec:
        return "unset"
    return f"`{scalar(spec['default'])}`"


def description(spec: dict) -> str:
    text = spec.get("description", "")
    text = " ".join(text) if isinstance(text, list) else str(text)
    if "choices" in spec:
        text += " One of " + ", ".join(f"`{scalar(c)}`" for c in spec["choices"]) + "."
    return text.strip()


def rows(options: dict, prefix: str = "") -> list[str]:
    out = []
    for name, spec in options.items():
        spec = spec or {}
        full = f"{prefix}{name}"
        out.append(
            "| "
            + " | ".join(
                cell(c) for c in (f"`{full}`", kind(spec), default(spec), description(spec))
            )
            + " |"
        )
        if spec.get("options"):
            sub = f"{full}[]." if spec.get("type") == "list" else f"{full}."
            out.extend(rows(spec["options"], sub))
    return out


def table(role: Path) -> str:
    """The generated block of one role, markers included."""
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    parts = [BEGIN]
    for entry, spec in specs.items():
        parts.append("")
        if len(specs) > 1:
            parts.append(f"Entry point `{entry}`: {cell(spec.get('short_description', ''))}")
            parts.append("")
        options = spec.get("options") or {}
        if not options:
            parts.append("No variables.")
            continue
        parts.append("| variable | type | default | description |")
        parts.append("|---|---|---|---|")
        parts.extend(rows(options))
    parts.append("")
    parts.append(END)
    return "\n".join(parts)


def roles(root: Path = ROOT) -> list[Path]:
    return sorted(p.parent.parent for p in (root / "roles").glob("*/meta/argument_specs.yml"))


def drift(root: Path = ROOT, write: bool = False) -> list[str]:
    """Role READMEs whose block differs from their argument_specs (rewritten when write)."""
    problems = []
    for role in roles(root):
        readme = role / "README.md"
        text = readme.read_text()
        if not BLOCK.search(text):
            problems.append(f"{readme.relative_to(root)}: no {BEGIN!r} ... {END!r} block")
            continue
        wanted = BLOCK.sub(lambda _m, role=role: table(role), text, count=1)
        if wanted != text:
            problems.append(
                f"{readme.relative_to(root)}: variable table differs from argument_specs"
            )
            if write:
                readme.write_text(wanted)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a README differs")
    args = parser.parse_args(argv)
    problems = drift(write=not args.check)
    for line in problems:
        print(("" if args.check else "rewritten: ") + line)
    missing = [p for p in problems if "no '" in p]
    if args.check and problems:
        print("Fix: python tools/role_docs.py", file=sys.stderr)
        return 1
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
