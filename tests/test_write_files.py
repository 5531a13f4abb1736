"""plugins/modules/write_files.py: several files in one round trip, safely.

The module's run() on real files in tmp_path (a stand-in module object gives
check and diff mode and runs the validate command), and once through
`ansible -m gpulab.slurm_cluster.write_files` as the roles call it.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
import write_files as wf
from adhoc import run_module

ROOT = Path(__file__).resolve().parents[1]
UID, GID = os.getuid(), os.getgid()


class Module:
    """What run() uses of AnsibleModule."""

    def __init__(self, files=(), dirs=(), check=False, diff=False):
        self.params = {"files": list(files), "dirs": list(dirs)}
        self.check_mode = check
        self._diff = diff

    @staticmethod
    def run_command(cmd):
        proc = subprocess.run(cmd, shell=True, capture_output=True, text=True, check=False)
        return proc.returncode, proc.stdout, proc.stderr


def spec(path, content="x\n", mode="0644", **kw):
    return {"path": str(path), "content": content, "mode": mode, "owner": UID, "group": GID, **kw}


def mode(path) -> str:
    return f"{stat.S_IMODE(os.lstat(path).st_mode):04o}"


def test_writes_then_changes_nothing(tmp_path) -> None:
    files = [spec(tmp_path / "a", "one\n"), spec(tmp_path / "b", "two\n", "0600")]
    first = wf.run(Module(files))
    assert first == {"changed": True, "changed_paths": [str(tmp_path / "a"), str(tmp_path / "b")]}
    assert (tmp_path / "a").read_text() == "one\n" and mode(tmp_path / "b") == "0600"
    assert wf.run(Module(files)) == {"changed": False, "changed_paths": []}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]  # no temporary left


def test_only_the_changed_file_is_reported(tmp_path) -> None:
    files = [spec(tmp_path / "a", "one\n"), spec(tmp_path / "b", "two\n")]
    wf.run(Module(files))
    files[1]["content"] = "three\n"
    assert wf.run(Module(files))["changed_paths"] == [str(tmp_path / "b")]


def test_dest_is_taken_for_path(tmp_path) -> None:
    result = wf.run(Module([{"dest": str(tmp_path / "a"), "content": "", "mode": "0644"}]))
    assert result["changed_paths"] == [str(tmp_path / "a")]


def test_mode_alone_is_fixed_in_place(tmp_path) -> None:
    target = tmp_path / "a"
    wf.run(Module([spec(target)]))
    inode = target.stat().st_ino
    result = wf.run(Module([spec(target, mode="0640")]))
    assert result["changed_paths"] == [str(target)]
    assert mode(target) == "0640" and target.stat().st_ino == inode


def test_a_link_is_replaced_not_followed(tmp_path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    link = tmp_path / "conf"
    link.symlink_to(victim)
    wf.run(Module([spec(link, "new\n")]))
    assert victim.read_text() == "keep\n"
    assert not link.is_symlink() and link.read_text() == "new\n"


def test_a_failed_validate_keeps_the_old_file(tmp_path) -> None:
    target = tmp_path / "rules"
    target.write_text("good\n")
    bad = spec(target, "bad\n", validate="grep -q good %s")
    failed = r"rules: the new content failed 'grep -q good %s' \(rc 1\)"
    with pytest.raises(wf.Refused, match=failed):
        wf.run(Module([bad]))
    assert target.read_text() == "good\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rules"]
    ok = spec(target, "good too\n", validate="grep -q good %s")
    assert wf.run(Module([ok]))["changed"] and target.read_text() == "good too\n"


def test_check_mode_writes_nothing(tmp_path) -> None:
    result = wf.run(
        Module(
            [spec(tmp_path / "d" / "a")],
            dirs=[{"path": str(tmp_path / "d"), "mode": "0750", "owner": UID, "group": GID}],
            check=True,
        )
    )
    assert result["changed_paths"] == [str(tmp_path / "d"), str(tmp_path / "d" / "a")]
    assert not (tmp_path / "d").exists()


def test_dirs_are_made_first_with_their_mode(tmp_path) -> None:
    folder = tmp_path / "etc" / "app"
    dirs = [{"path": str(folder), "mode": "0750", "owner": UID, "group": GID}]
    wf.run(Module([spec(folder / "a")], dirs=dirs))
    assert mode(folder) == "0750" and (folder / "a").read_text() == "x\n"
    assert wf.run(Module([spec(folder / "a")], dirs=dirs))["changed"] is False


def test_diff_shows_content_but_never_a_secret(tmp_path) -> None:
    (tmp_path / "a").write_text("old\n")
    files = [spec(tmp_path / "a", "new\n"), spec(tmp_path / "s", "hunter2\n", secret=True)]
    result = wf.run(Module(files, diff=True))
    plain, secret = result["diff"]
    assert (plain["before"], plain["after"]) == ("old\n", "new\n")
    assert "hunter2" not in json.dumps(secret)


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ({"path": "rel/a", "content": "", "mode": "0644"}, "path 'rel/a' must be absolute"),
        ({"path": "/tmp/a", "mode": "0644"}, "/tmp/a: content is required"),
        ({"path": "/tmp/a", "content": ""}, "/tmp/a: mode is required"),
        ({"path": "/tmp/a", "content": "", "mode": "644x"}, "is not an octal string"),
        ({"path": "/tmp/a", "content": "", "mode": "0644", "colour": 1}, "unknown keys colour"),
        (
            {"path": "/tmp/a", "content": "", "mode": "0644", "owner": "no-such-user-x"},
            "/tmp/a: owner no-such-user-x does not exist on this node",
        ),
    ],
)
def test_bad_specs_name_the_path_and_the_fix(bad, error) -> None:
    with pytest.raises(wf.Refused, match=error):
        wf.run(Module([bad]))


def test_a_missing_folder_and_a_twice_given_path_are_refused(tmp_path) -> None:
    with pytest.raises(wf.Refused, match="does not exist; add it to dirs"):
        wf.run(Module([spec(tmp_path / "none" / "a")]))
    with pytest.raises(wf.Refused, match="is given twice"):
        wf.run(Module([spec(tmp_path / "a"), spec(tmp_path / "a")]))
    (tmp_path / "f").write_text("")
    with pytest.raises(wf.Refused, match="is not a folder"):
        wf.run(Module(dirs=[{"path": str(tmp_path / "f")}]))


def test_through_ansible_by_its_fqcn(tmp_path) -> None:
    """As a role calls it: found in the collection, check mode, then for real."""
    args = json.dumps({"files": [spec(tmp_path / "a", "hello\n", "0640")]})

    def call(*extra: str) -> dict:
        return run_module("write_files", args, tmp_path / ".tmp", *extra)

    assert call("--check")["changed_paths"] == [str(tmp_path / "a")]
    assert not (tmp_path / "a").exists()
    assert call()["changed"] is True and mode(tmp_path / "a") == "0640"
    assert call()["changed"] is False
