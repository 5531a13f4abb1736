"""Slurm's own authentication key: module slurm_jwks, the rotation's plan (module_utils/jwks.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import slurm_jwks as m
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils import jwks

ROOT = Path(__file__).resolve().parents[1]
SECRET = base64.urlsafe_b64encode(b"\x01" * 32).decode().rstrip("=")


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder the module trusts (owned by whoever runs the tests, 0755)."""
    monkeypatch.setattr(m, "TRUSTED_UID", os.getuid())
    monkeypatch.setattr(m, "ids", lambda owner, group: (os.getuid(), os.getgid()))
    here = tmp_path / "etc-slurm"
    here.mkdir(mode=0o755)
    here.chmod(0o755)
    return here


def params(path: Path, state: str = "present", **more: object) -> dict:
    base = {"path": str(path), "state": state, "kid": None, "content": None}
    return {**base, "owner": "slurm", "group": "slurm", "mode": "0600", **more}


def keys_of(path: Path) -> list[dict]:
    return json.loads(path.read_text())["keys"]


def secrets_of(path: Path) -> set[str]:
    return {k["k"] for k in keys_of(path)}


def no_secret_in(result: dict, path: Path) -> None:
    shown = json.dumps(result)
    for secret in secrets_of(path):
        assert secret not in shown


# The file


def test_present_makes_one_default_key_of_32_random_bytes_0600(folder: Path) -> None:
    path = folder / "slurm.jwks"
    made = m.run(params(path), check_mode=False)
    assert made["changed"] is True and made["exists"] is True
    (key,) = keys_of(path)
    assert (key["alg"], key["kty"], key["use"]) == ("HS256", "oct", "default")
    assert len(base64.urlsafe_b64decode(key["k"] + "=")) == 32
    assert made["kids"] == [key["kid"]] == [made["default_kid"]] == [made["added_kid"]]
    assert key["kid"].startswith("k20") and key["kid"].endswith("Z")
    assert made["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert path.stat().st_mode & 0o7777 == 0o600
    assert made["reached"] == ""
    no_secret_in(made, path)
    again = m.run(params(path), check_mode=False)
    assert again["changed"] is False and again["sha256"] == made["sha256"]
    assert again["added_kid"] == ""


def test_check_mode_writes_nothing(folder: Path) -> None:
    path = folder / "slurm.jwks"
    made = m.run(params(path), check_mode=True)
    assert made["changed"] is True and not path.exists()
    m.run(params(path), check_mode=False)
    before = path.read_bytes()
    added = m.run(params(path, "add"), check_mode=True)
    assert added["changed"] is True and len(added["kids"]) == 2
    assert path.read_bytes() == before


def test_a_rotation_add_default_retire(folder: Path) -> None:
    path = folder / "slurm.jwks"
    old = m.run(params(path), check_mode=False)["default_kid"]
    added = m.run(params(path, "add", kid="k2"), check_mode=False)
    assert added["kids"] == [old, "k2"] and added["default_kid"] == old
    assert added["added_kid"] == "k2" and added["reached"] == "add"
    assert "use" not in keys_of(path)[1]
    no_secret_in(added, path)
    switched = m.run(params(path, "default", kid="k2"), check_mode=False)
    assert switched["default_kid"] == "k2" and switched["reached"] == "default"
    assert [k.get("use") for k in keys_of(path)] == [None, "default"]
    again = m.run(params(path, "default", kid="k2"), check_mode=False)
    assert again["changed"] is False
    retired = m.run(params(path, "retire", kid=old), check_mode=False)
    assert retired["kids"] == ["k2"] and retired["reached"] == ""
    assert m.run(params(path, "retire", kid=old), check_mode=False)["changed"] is False


def test_add_makes_a_unique_kid_from_the_utc_time() -> None:
    keys = [jwks.make_key("k20261203T195801Z", SECRET, True)]
    assert jwks.new_kid(keys, now=1796327881) == "k20261203T195801Z-2"
    keys.append(jwks.make_key("k20261203T195801Z-2", SECRET, False))
    assert jwks.new_kid(keys, now=1796327881) == "k20261203T195801Z-3"
    assert jwks.new_kid([], now=0) == "k19700101T000000Z"


def test_retire_refuses_the_default_and_the_last_key(folder: Path) -> None:
    path = folder / "slurm.jwks"
    old = m.run(params(path), check_mode=False)["default_kid"]
    with pytest.raises(jwks.JwksError, match="only key"):
        m.run(params(path, "retire", kid=old), check_mode=False)
    m.run(params(path, "add", kid="k2"), check_mode=False)
    with pytest.raises(jwks.JwksError, match=f"kid {old} is the default key"):
        m.run(params(path, "retire", kid=old), check_mode=False)
    with pytest.raises(jwks.JwksError, match="kid k9 is not in the file"):
        m.run(params(path, "default", kid="k9"), check_mode=False)
    with pytest.raises(jwks.JwksError, match="already in the file"):
        m.run(params(path, "add", kid="k2"), check_mode=False)


def test_a_missing_file_is_not_rotated_and_read_says_so(folder: Path) -> None:
    path = folder / "slurm.jwks"
    with pytest.raises(jwks.JwksError, match=r"run site\.yml first"):
        m.run(params(path, "add"), check_mode=False)
    read = m.run(params(path, "read"), check_mode=False)
    assert read == {
        "changed": False,
        "exists": False,
        "added_kid": "",
        "kids": [],
        "default_kid": "",
        "sha256": "",
        "reached": "",
        "owner_ok": False,
    }


def test_content_is_installed_byte_for_byte_and_checked(folder: Path) -> None:
    path = folder / "slurm.jwks"
    text = json.dumps({"keys": [jwks.make_key("a", SECRET, False)]})
    got = m.run(params(path, content=text), check_mode=False)
    assert path.read_text() == text and got["changed"] is True
    assert got["sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert got["default_kid"] == "a"  # the only key signs
    assert m.run(params(path, content=text), check_mode=False)["changed"] is False
    with pytest.raises(jwks.JwksError, match="not alg HS256"):
        m.run(params(path, content=text.replace("HS256", "RS256")), check_mode=False)
    assert path.read_text() == text


def test_the_owner_and_mode_are_set_again(folder: Path) -> None:
    path = folder / "slurm.jwks"
    assert m.run(params(path), check_mode=False)["owner_ok"] is True
    assert m.run(params(path, "read"), check_mode=False)["owner_ok"] is True
    path.chmod(0o644)
    # read says so (site.yml then installs the controller's copy there) and changes nothing
    read = m.run(params(path, "read"), check_mode=False)
    assert read["owner_ok"] is False and read["changed"] is False
    assert path.stat().st_mode & 0o7777 == 0o644
    fixed = m.run(params(path), check_mode=False)
    assert fixed["changed"] is True and path.stat().st_mode & 0o7777 == 0o600
    assert fixed["owner_ok"] is True


def test_read_without_the_owner_here_is_not_ok(folder: Path, monkeypatch) -> None:
    path = folder / "slurm.jwks"
    m.run(params(path), check_mode=False)

    def no_user(owner: str, group: str) -> tuple[int, int]:
        raise m.UnsafeJwks("user slurm or group slurm does not exist here")

    monkeypatch.setattr(m, "ids", no_user)
    read = m.run(params(path, "read"), check_mode=False)
    assert read["owner_ok"] is False and read["exists"] is True


def test_no_temporary_file_is_left_behind(folder: Path) -> None:
    path = folder / "slurm.jwks"
    m.run(params(path), check_mode=False)
    m.run(params(path, "add"), check_mode=False)
    assert sorted(p.name for p in folder.iterdir()) == ["slurm.jwks"]


# Refusals


def test_a_symlink_is_refused_naming_it(folder: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("{}")
    path = folder / "slurm.jwks"
    path.symlink_to(target)
    with pytest.raises(m.UnsafeJwks, match=f"{path} is not a regular file"):
        m.run(params(path), check_mode=False)
    assert target.read_text() == "{}"


def test_a_folder_others_can_write_is_refused(folder: Path) -> None:
    folder.chmod(0o777)
    with pytest.raises(m.UnsafeJwks, match=f"{folder} .*mode 0777.*chmod 0755"):
        m.run(params(folder / "slurm.jwks"), check_mode=False)


def test_a_folder_owned_by_another_user_is_refused(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(m, "TRUSTED_UID", os.getuid() + 1)
    with pytest.raises(m.UnsafeJwks, match="someone but root could replace the key"):
        m.run(params(folder / "slurm.jwks"), check_mode=False)


def test_a_linked_folder_is_refused(folder: Path, tmp_path: Path) -> None:
    link = tmp_path / "linked"
    link.symlink_to(folder)
    with pytest.raises(m.UnsafeJwks, match="not a real directory"):
        m.run(params(link / "slurm.jwks"), check_mode=False)


@pytest.mark.parametrize(
    ("doc", "why"),
    [
        ("nope", "not JSON"),
        ('{"keys": []}', 'no "keys"'),
        ('{"keys": [{"alg": "HS256", "kty": "oct", "k": "%s"}]}', "has no kid"),
        (
            '{"keys": [{"alg": "HS256", "kty": "oct", "kid": "a", "k": "c2hvcnQ"}]}',
            "Slurm wants more",
        ),
        (
            '{"keys": [{"alg": "HS256", "kty": "oct", "kid": "a", "k": "%s", "use": "default"},'
            ' {"alg": "HS256", "kty": "oct", "kid": "b", "k": "%s", "use": "default"}]}',
            "more than one",
        ),
        (
            '{"keys": [{"alg": "HS256", "kty": "oct", "kid": "a", "k": "%s"},'
            ' {"alg": "HS256", "kty": "oct", "kid": "a", "k": "%s"}]}',
            "appears twice",
        ),
        ('{"keys": [{"alg": "HS256", "kty": "oct", "kid": "a", "k": "%s", "use": "sig"}]}', "use"),
    ],
)
def test_parse_refuses_what_slurm_refuses(doc: str, why: str) -> None:
    text = doc.replace("%s", SECRET)
    with pytest.raises(jwks.JwksError, match=why):
        jwks.parse(text)
    assert SECRET not in why


def test_parse_takes_exp_and_standard_base64() -> None:
    std = base64.b64encode(b"\xfb" * 32).decode()
    keys = jwks.parse(json.dumps({"keys": [{**jwks.make_key("a", std, True), "exp": 1}]}))
    assert jwks.default_kid(keys) == "a"


def test_the_module_fails_without_showing_a_key(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run as Ansible runs it: a bad content fails and the secret is not in the output."""
    text = json.dumps({"keys": [{**jwks.make_key("a", SECRET, False), "alg": "RS256"}]})
    args = {"ANSIBLE_MODULE_ARGS": params(folder / "slurm.jwks", content=text)}
    env = dict(os.environ, PYTHONPATH=str(ROOT / "collections"))
    done = subprocess.run(
        [sys.executable, str(ROOT / "plugins/modules/slurm_jwks.py")],
        input=json.dumps(args),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    out = json.loads(done.stdout)
    assert out["failed"] is True and "not alg HS256" in out["msg"]
    assert SECRET not in done.stdout + done.stderr


# The rotation's plan


def seen(kids: list[str], default: str, sha: str = "s") -> dict:
    return {"kids": kids, "default_kid": default, "sha256": sha}


def test_a_converged_cluster_runs_the_three_steps() -> None:
    ctl = seen(["k1"], "k1")
    plan = jwks.rotation_plan(ctl, {"ctl": ctl, "node1": ctl, "node2": ctl})
    assert plan == {
        "problems": [],
        "reached": "",
        "steps": ["add", "default", "retire"],
        "resume": False,
    }


@pytest.mark.parametrize(
    ("ctl", "node", "steps"),
    [
        # Stopped after writing step 1 on the controller only.
        (seen(["k1", "k2"], "k1", "b"), seen(["k1"], "k1", "a"), ["sync", "default", "retire"]),
        # Step 1 everywhere, not reconfigured yet (or reconfigured): step 2 next.
        (seen(["k1", "k2"], "k1", "b"), seen(["k1", "k2"], "k1", "b"), ["default", "retire"]),
        # Stopped while step 2 was written.
        (seen(["k1", "k2"], "k2", "c"), seen(["k1", "k2"], "k1", "b"), ["sync", "retire"]),
        (seen(["k1", "k2"], "k2", "c"), seen(["k1", "k2"], "k2", "c"), ["retire"]),
        # Stopped while step 3 was written: finish it.
        (seen(["k2"], "k2", "d"), seen(["k1", "k2"], "k2", "c"), ["sync"]),
    ],
)
def test_an_interrupted_rotation_continues_from_its_step(ctl, node, steps) -> None:
    plan = jwks.rotation_plan(ctl, {"ctl": ctl, "node1": node})
    assert plan["problems"] == [] and plan["steps"] == steps and plan["resume"] is True


def test_hosts_that_cannot_authenticate_each_other_are_refused() -> None:
    ctl = seen(["k2"], "k2", "d")
    plan = jwks.rotation_plan(
        ctl, {"ctl": ctl, "node1": seen(["k1"], "k1", "a"), "node2": seen([], "")}
    )
    assert plan["problems"] == [
        "node1: its slurm.jwks (kids k1, default k1) and the controller's (kids k2, default k2) "
        "do not authenticate each other; fix: run site.yml first (it installs the controller's)",
        "node2: no slurm.jwks; fix: run site.yml first",
    ]
    empty = jwks.rotation_plan(seen([], ""), {})
    assert empty["problems"] == [
        "the controller has no slurm.jwks with a default key; fix: run site.yml first"
    ]
