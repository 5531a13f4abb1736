"""The lookup results_file: a report written whole on the control machine."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins/lookup"))
from results_file import keep


def test_the_file_is_written_with_its_mode_and_its_folder_made(tmp_path) -> None:
    path = tmp_path / "results" / "doctor-1.json"
    assert keep(path, "{}\n") == str(path)
    assert path.read_text() == "{}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["doctor-1.json"]  # no temporary left


def test_a_second_write_replaces_the_file_and_moves_the_latest_link(tmp_path) -> None:
    keep(tmp_path / "doctor-1.json", "one", latest="doctor-latest.json")
    keep(tmp_path / "doctor-2.json", "two", latest="doctor-latest.json")
    link = tmp_path / "doctor-latest.json"
    assert os.readlink(link) == "doctor-2.json"  # relative: the folder can move
    assert link.read_text() == "two\n"
    keep(tmp_path / "doctor-2.json", "three")
    assert link.read_text() == "three\n"  # a text file ends with a newline


def test_a_latest_name_that_is_a_path_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="a name in the file's folder"):
        keep(tmp_path / "a.json", "x", latest="../a-latest.json")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_no_temporary_file(tmp_path, monkeypatch) -> None:
    def broken(*_args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        keep(tmp_path / "a.json", "x")
    assert list(tmp_path.iterdir()) == []
