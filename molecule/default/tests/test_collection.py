"""The collection as a user takes it: built, installed offline, run from elsewhere.

`make collection` builds gpulab-slurm_cluster-<version>.tar.gz (the smoke
wheel inside). A fresh venv gets only ansible-core (requirements.txt's pin)
and the collections galaxy.yml declares, copied from the `ansible` bundle of
the project's venv (Galaxy is out of reach here), plus community.docker for
this test's own transport to the containers. The collection's playbooks then
run against the converged cluster from a folder outside the repository, with
no ansible.cfg: the doctor passes, site changes nothing and prints no
deprecation warning, the smoke job passes, and the reports land in that
folder, never in the installed collection.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, cluster_name, recap

BUNDLE = Path(sys.prefix) / "lib"
TRANSPORT = "community.docker"  # this test's connection to the containers only


def _pin(name: str) -> str:
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if line.startswith(f"{name}=="):
            return line.strip()
    raise AssertionError(f"requirements.txt pins no {name}")


def _installed(fqcn: str) -> Path:
    """The project venv's copy of a collection (the `ansible` bundle's)."""
    found = sorted(
        BUNDLE.glob(f"python3*/site-packages/ansible_collections/{fqcn.replace('.', '/')}")
    )
    assert found, f"{fqcn} is not in the project venv's ansible bundle"
    return found[0]


def _with_dependencies(names: list[str]) -> list[str]:
    out: list[str] = []
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in out:
            continue
        out.append(name)
        manifest = json.loads((_installed(name) / "MANIFEST.json").read_text())
        todo += list(manifest["collection_info"].get("dependencies") or {})
    return out


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False
    )


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("collection")
    built = subprocess.run(
        ["make", "collection"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert built.returncode == 0, built.stdout + built.stderr
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    tarball = ROOT / "dist" / f"{galaxy['namespace']}-{galaxy['name']}-{galaxy['version']}.tar.gz"
    assert tarball.is_file(), sorted((ROOT / "dist").iterdir())

    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = _run(
        [str(venv / "bin/pip"), "install", "--quiet", _pin("ansible-core")],
        base,
        dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"),
    )
    assert pip.returncode == 0, pip.stderr
    collections = base / "collections"
    declared = list(galaxy["dependencies"])
    for name in _with_dependencies([*declared, TRANSPORT]):
        shutil.copytree(
            _installed(name),
            collections / "ansible_collections" / name.replace(".", "/"),
            ignore=shutil.ignore_patterns("__pycache__"),
        )

    lab = base / "lab"
    inventory = lab / "inventory"
    shutil.copytree(ROOT / "inventory/local", inventory, symlinks=False)
    (inventory / "host_vars").mkdir(exist_ok=True)
    hosts = _run(
        [str(Path(sys.executable).with_name("ansible-inventory")), "-i", str(inventory), "--list"],
        lab,
        dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg")),
    )
    # The scenario's own host values (molecule/shared/host_vars: the receivers
    # of the alerts on ctl), so that site.yml finds the cluster as it is; the
    # connection by the collection's full name.
    for name in json.loads(hosts.stdout)["_meta"]["hostvars"]:
        shared = ROOT / "molecule/shared/host_vars" / f"{name}.yml"
        values = (yaml.safe_load(shared.read_text()) if shared.is_file() else None) or {}
        values["ansible_connection"] = "community.docker.docker"
        (inventory / "host_vars" / f"{name}.yml").write_text(
            "---\n" + yaml.safe_dump(values, default_flow_style=False)
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "MOLECULE_"))}
    env.update(
        PATH=f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        PWD=str(lab),
        HOME=str(base),
        ANSIBLE_COLLECTIONS_PATH=str(collections),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_PIPELINING="1",
    )
    install = _run(
        [
            str(venv / "bin/ansible-galaxy"),
            "collection",
            "install",
            "--offline",
            "-p",
            str(collections),
            str(tarball),
        ],
        lab,
        env,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    listed = _run([str(venv / "bin/ansible-galaxy"), "collection", "list"], lab, env).stdout
    return {
        "venv": venv,
        "lab": lab,
        "env": env,
        "listed": listed,
        "collections": collections,
        "declared": declared,
        "galaxy": galaxy,
    }


def play(lab: dict, name: str, *extra: str) -> subprocess.CompletedProcess:
    return _run(
        [
            str(lab["venv"] / "bin/ansible-playbook"),
            "-i",
            "inventory",
            f"gpulab.slurm_cluster.{name}",
            *extra,
        ],
        lab["lab"],
        lab["env"],
    )


def test_installed_with_only_its_declared_collections(lab: dict) -> None:
    assert lab["declared"] == ["ansible.posix", "community.mysql"], lab["declared"]
    names = set(re.findall(r"^([a-z_]+\.[a-z_0-9]+)\s+\d", lab["listed"], re.M))
    allowed = {"gpulab.slurm_cluster", *_with_dependencies([*lab["declared"], TRANSPORT])}
    assert "gpulab.slurm_cluster" in names and names <= allowed | {"ansible._protomatter"}, names
    installed = lab["collections"] / "ansible_collections/gpulab/slurm_cluster"
    wheel = f"roles/smoke_train/files/ddp_smoke-{lab['galaxy']['version']}-py3-none-any.whl"
    assert (installed / wheel).is_file()
    assert not (installed / "training").exists() and not (installed / "molecule").exists()


def test_doctor_site_and_smoke_from_the_installed_collection(lab: dict) -> None:
    doctor = play(lab, "doctor")
    assert doctor.returncode == 0, doctor.stdout[-3000:] + doctor.stderr[-2000:]
    assert "Doctor PASS" in doctor.stdout

    site = play(lab, "site")
    assert site.returncode == 0, site.stdout[-4000:] + site.stderr[-2000:]
    counts = recap(site.stdout)
    assert counts and all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), counts
    assert "DEPRECATION WARNING" not in site.stdout + site.stderr

    smoke = play(lab, "smoke_train", "-e", '{"smoke_train_modes": ["srun"]}')
    assert smoke.returncode == 0, smoke.stdout[-4000:] + smoke.stderr[-2000:]
    assert "Smoke job PASS: srun" in smoke.stdout, smoke.stdout[-3000:]

    # The lab's inventory is a copy of inventory/local: cluster_name local.
    results = lab["lab"] / "results" / cluster_name(lab["lab"] / "inventory")
    report = json.loads((results / "doctor-latest.json").read_text())
    assert report["verdict"] == "PASS" and report["release"] == lab["galaxy"]["version"]
    assert (results / "history.jsonl").is_file()
    assert not list(lab["collections"].rglob("doctor-latest.json"))
