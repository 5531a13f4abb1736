"""A throwaway collection t.c, and real ansible-playbook runs on local hosts with
it, for the tests of the project's callback plugins."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ROOT / "plugins"


def collection(root: Path, plugins: dict[str, str], callback: str) -> Path:
    """ansible_collections/t/c under root with plugins ({"filter/x.py": source}) and
    the project's callback plugins/callback/<callback>.py; returns the collections path."""
    coll = root / "ansible_collections" / "t" / "c"
    (coll / "plugins" / "callback").mkdir(parents=True)
    (coll / "galaxy.yml").write_text(
        "namespace: t\nname: c\nversion: 1.0.0\nreadme: README.md\nauthors: [t]\n"
    )
    for relative, source in plugins.items():
        path = coll / "plugins" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    name = f"{callback}.py"
    shutil.copy(PLUGINS / "callback" / name, coll / "plugins" / "callback" / name)
    return root


def play(
    tmp_path: Path,
    playbook: str,
    hosts: str,
    collections: Path,
    callbacks: str,
    env: dict[str, str] | None = None,
    extra_vars: dict[str, str] | None = None,
    timeout: float = 180,
) -> str:
    """playbook run by ansible-playbook on the local hosts named by the letters of
    hosts (one fork each), with the callbacks enabled; its output. Fails on a
    non-zero exit status."""
    lines = [
        f"{h} ansible_connection=local ansible_python_interpreter={sys.executable}" for h in hosts
    ]
    (tmp_path / "hosts.ini").write_text("[all]\n" + "\n".join(lines) + "\n")
    (tmp_path / "play.yml").write_text(playbook)
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    run_env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(collections),
        ANSIBLE_CALLBACKS_ENABLED=callbacks,
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORKS=str(len(hosts)),
        **(env or {}),
    )
    binary = Path(sys.executable).parent / "ansible-playbook"
    argv = [str(binary), "-i", str(tmp_path / "hosts.ini"), str(tmp_path / "play.yml")]
    for key, value in (extra_vars or {}).items():
        argv += ["-e", f"{key}={value}"]
    out = subprocess.run(
        argv,
        cwd=tmp_path,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout + out.stderr


def project_callbacks() -> tuple[list[str], list[str]]:
    """The callbacks enabled by the project's ansible.cfg, and by molecule's config."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "ansible.cfg")
    molecule = yaml.safe_load((ROOT / ".config" / "molecule" / "config.yml").read_text())
    mirrored = molecule["provisioner"]["config_options"]["defaults"]["callbacks_enabled"]
    return (
        [c.strip() for c in cfg["defaults"]["callbacks_enabled"].split(",")],
        [c.strip() for c in mirrored.split(",")],
    )
