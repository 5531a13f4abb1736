"""Sizes a person can read: no plugin or role Python file over 700 lines.

The training package has its own guard (training/tests); this one covers the
collection's plugins (modules, filters, module_utils, ...) and the Python
files the roles install.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 700


def python_files() -> list[Path]:
    return sorted([*ROOT.glob("plugins/**/*.py"), *ROOT.glob("roles/**/*.py")])


def test_no_plugin_or_role_python_file_is_over_700_lines() -> None:
    files = python_files()
    assert len(files) > 40  # the globs still find the collection's Python
    long = {
        str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text().splitlines())) > LIMIT
    }
    assert long == {}, f"split these by concern (limit {LIMIT} lines): {long}"
