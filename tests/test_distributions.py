"""Each supported distribution: complete, honest variables and config files its Slurm reads.

Debian 12 and 13 are proven in containers (molecule); Ubuntu 22.04 and 24.04 only here.
The variables are loaded as slurm_common loads them (vars/main.yml, then the first of
<Distribution>-<major>.yml and <os_family>.yml). They are compared with what each archive
holds (tests/fixtures/distributions.yml, read with apt). slurm.conf, gres.conf, cgroup.conf
and slurmdbd.conf are rendered by ansible-playbook for a three-node cluster with that
distribution's facts, and every key and plugin in them is checked against the parser
tables of the Slurm release it ships (tests/fixtures/slurm/parser_keys.yml, from
SchedMD's source). Where an scontrol of that release is on PATH, the rendered slurm.conf
also goes through slurm_common's own validate command.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from adhoc import run_playbook
from test_slurm_conf_filters import CONTAINER, DGX

ROOT = Path(__file__).resolve().parents[1]
ROLE = ROOT / "roles/slurm_common"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
sys.path.insert(0, str(ROOT / "plugins/filter"))
sys.path.insert(0, str(ROOT / "plugins/filter"))
import cuda  # noqa: E402
import slurm_versions  # noqa: E402

ARCHIVE = yaml.safe_load((FIXTURES / "distributions.yml").read_text())
PARSER = yaml.safe_load((FIXTURES / "slurm/parser_keys.yml").read_text())
# Ansible facts of each supported distribution (slurm_common's meta/main.yml platforms).
FACTS = {
    "Debian-12": {"distribution": "Debian", "distribution_major_version": "12"},
    "Debian-13": {"distribution": "Debian", "distribution_major_version": "13"},
    "Ubuntu-22": {"distribution": "Ubuntu", "distribution_major_version": "22"},
    "Ubuntu-24": {"distribution": "Ubuntu", "distribution_major_version": "24"},
}
for _key, _facts in FACTS.items():
    _facts.update(os_family="Debian", distribution_release=ARCHIVE[_key]["release"])
DISTROS = list(FACTS)
# The directory of NVIDIA's apt repository for each (…/compute/cuda/repos/<dir>/x86_64/).
NVIDIA_REPO = {
    "Debian-12": "debian12",
    "Debian-13": "debian13",
    "Ubuntu-22": "ubuntu2204",
    "Ubuntu-24": "ubuntu2404",
}
SLURM_PACKAGES = ("slurm-client", "slurmctld", "slurmd", "slurmdbd", "slurm-wlm-basic-plugins")
NVML_PACKAGE = "slurm-wlm-nvml-plugin"
# Keys whose value names a plugin: {key: plugin type} (None: the type is in the value).
PLUGIN_KEYS = {
    "AuthType": "auth",
    "CredType": "cred",
    "CryptoType": "cred",  # crypto/X is read as cred/X (read_config.c)
    "MpiDefault": "mpi",
    "ProctrackType": "proctrack",
    "TaskPlugin": "task",
    "SchedulerType": "sched",
    "SelectType": "select",
    "AccountingStorageType": "accounting_storage",
    "JobAcctGatherType": "jobacct_gather",
    "StorageType": "accounting_storage",
}


def load_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def first_found(facts: dict) -> Path | None:
    """The file slurm_common's os_vars.yml includes for these facts, as first_found finds it."""
    names = [
        f"{facts['distribution']}-{facts['distribution_major_version']}.yml",
        f"{facts['os_family']}.yml",
    ]
    return next((ROLE / "vars" / n for n in names if (ROLE / "vars" / n).is_file()), None)


def distro_vars(key: str) -> dict:
    path = first_found(FACTS[key])
    assert path is not None, f"{key}: no vars file"
    return load_yaml(path)


def role_vars(key: str) -> dict:
    """defaults, vars/main.yml, then the distribution's file (include_vars wins)."""
    out: dict = {}
    out.update(load_yaml(ROLE / "defaults/main.yml"))
    out.update(load_yaml(ROLE / "vars/main.yml"))
    out.update(distro_vars(key))
    return out


def shape(value: object) -> object:
    """The keys of a value, nested, for comparing what distributions define."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    return type(value).__name__


def words(release: str, table: str) -> set[str]:
    return set(PARSER[release][table].split())


# --- the variables -----------------------------------------------------------------------


@pytest.mark.parametrize("key", DISTROS)
def test_each_distribution_loads_its_own_file(key: str) -> None:
    assert first_found(FACTS[key]) == ROLE / "vars" / f"{key}.yml"


@pytest.mark.parametrize(("distribution", "major"), [("Debian", "11"), ("Ubuntu", "20")])
def test_an_unsupported_release_finds_no_file(distribution: str, major: str) -> None:
    # No os_family fallback: an unknown release stops the run instead of getting
    # another release's packages and Slurm version.
    facts = {"distribution": distribution, "distribution_major_version": major}
    assert first_found({**facts, "os_family": "Debian"}) is None


def test_every_distribution_defines_the_same_variables() -> None:
    shapes = {key: shape(distro_vars(key)) for key in DISTROS}
    first = shapes[DISTROS[0]]
    for key, got in shapes.items():
        assert got == first, f"{key} defines other variables than {DISTROS[0]}"
    assert set(first) >= {
        "__slurm_common_version",
        "__slurm_common_client_packages",
        "__slurm_common_nvml_plugin",
    }
    # Where slurm.conf lives is compiled into every supported distribution's
    # Slurm alike: the role's vars/main.yml says it once (its probe declaration
    # reads it before any fact is known); a distribution file may override it.
    assert {role_vars(key)["__slurm_common_conf_dir"] for key in DISTROS} == {"/etc/slurm"}


def _defined_by_tasks() -> set[str]:
    """Names slurm_common's tasks make: register, set_fact and task vars."""
    names: set[str] = set()
    for path in (ROLE / "tasks").glob("*.yml"):
        for task in _tasks(yaml.safe_load(path.read_text()) or []):
            names.update([task["register"]] if "register" in task else [])
            names.update(task.get("ansible.builtin.set_fact") or {})
            names.update(task.get("vars") or {})
    return names


@pytest.mark.parametrize("key", DISTROS)
def test_every_role_variable_in_use_is_defined(key: str) -> None:
    # Each __slurm_common_* name in the templates, tasks and vars/main.yml comes from
    # defaults, vars/main.yml, the distribution's file or a task.
    sources = [*(ROLE / "templates").rglob("*.j2"), *(ROLE / "tasks").glob("*.yml")]
    used = {
        name
        for path in [*sources, ROLE / "vars/main.yml"]
        for name in re.findall(r"\b__slurm_common_\w+", path.read_text())
    }
    missing = used - set(role_vars(key)) - _defined_by_tasks()
    assert not missing, f"{key}: {sorted(missing)} used but never defined"


@pytest.mark.parametrize("key", DISTROS)
def test_no_variable_is_empty(key: str) -> None:
    data = distro_vars(key)
    nvml = data.pop("__slurm_common_nvml_plugin")
    for name, value in data.items():
        assert value not in (None, "", []), f"{key}: {name} is empty"
    # Empty only where the distribution has no NVML plugin, and then all of it.
    if nvml["packages"]:
        assert nvml["component"]
    else:
        assert nvml == {"packages": [], "component": "", "installable": False}


@pytest.mark.parametrize("key", DISTROS)
def test_slurm_release_is_the_one_the_archive_ships(key: str) -> None:
    data, archive = distro_vars(key), ARCHIVE[key]["packages"]
    versions = {archive[p]["version"] for p in SLURM_PACKAGES}
    assert len(versions) == 1, f"{key}: Slurm packages at several versions {versions}"
    assert slurm_versions.release(versions.pop()) == data["__slurm_common_version"]
    for pkg in (*SLURM_PACKAGES, "munge", "mariadb-server", "python3-venv"):
        assert archive[pkg]["component"] == data["__slurm_common_component"], (key, pkg)


def _tasks(items: list) -> list[dict]:
    """Every task of a task list, those inside blocks included."""
    out = []
    for task in items:
        out.append(task)
        for part in ("block", "rescue", "always"):
            out.extend(_tasks(task.get(part) or []))
    return out


def _installed_by_roles(key: str) -> dict[str, list[str]]:
    """{role: package names} of every apt task outside the cuda role, names resolved."""
    known = {**role_vars(key)}
    for role_dir in sorted((ROOT / "roles").iterdir()):
        main = role_dir / "vars/main.yml"
        if role_dir.name != "slurm_common" and main.is_file():
            known.update(load_yaml(main))
    known["__slurm_common_packages"] = [
        pkg
        for kind in ("client", "controller", "compute")
        for pkg in known[f"__slurm_common_{kind}_packages"]
    ] + [known["__slurm_common_login_daemon"]]
    known["__monitoring_packages"] = (
        known["__monitoring_node_packages"]
        + known["__monitoring_controller_packages"]
        + known["__monitoring_alertmanager_packages"]
    )
    out: dict[str, list[str]] = {}
    for tasks in sorted((ROOT / "roles").glob("*/tasks/*.yml")):
        role = tasks.parts[-3]
        if role == "cuda":  # NVIDIA's repository: tests/test_cuda_filters.py
            continue
        for task in _tasks(yaml.safe_load(tasks.read_text()) or []):
            apt = task.get("ansible.builtin.apt") or task.get("apt")
            if not isinstance(apt, dict) or "name" not in apt:
                continue
            names = apt["name"]
            if isinstance(names, str) and "{{" not in names:
                names = [names]
            elif isinstance(names, str):
                var = names.strip().removeprefix("{{").removesuffix("}}").strip()
                assert var in known, f"{tasks.relative_to(ROOT)}: cannot resolve {names!r}"
                names = known[var]
            out.setdefault(role, []).extend(names)
    return out


@pytest.mark.parametrize("key", DISTROS)
def test_every_package_the_roles_install_is_in_the_archive(key: str) -> None:
    installed = _installed_by_roles(key)
    assert {"munge", "slurm_common", "slurm_dbd", "nfs_server", "pytorch"} <= set(installed)
    missing = {
        f"{role}: {pkg}"
        for role, pkgs in installed.items()
        for pkg in pkgs
        if pkg not in ARCHIVE[key]["packages"]
    }
    assert not missing, f"{ARCHIVE[key]['label']} has no {sorted(missing)}"


@pytest.mark.parametrize("key", DISTROS)
def test_nvml_plugin_is_what_the_archive_holds(key: str) -> None:
    nvml, archive = distro_vars(key)["__slurm_common_nvml_plugin"], ARCHIVE[key]["nvml_plugin"]
    if archive is None:
        assert nvml["packages"] == []
        return
    assert nvml["packages"] == [NVML_PACKAGE]
    assert nvml["component"] == archive["component"]
    assert nvml["installable"] is archive["installable"]
    # Debian 12 today: contrib's build pins another slurm-wlm-basic-plugins than main's.
    pinned = [d for d in archive["depends"] if "(= " in d]
    slurm = ARCHIVE[key]["packages"]["slurm-wlm-basic-plugins"]["version"]
    if pinned:
        assert archive["installable"] is (pinned[0].endswith(f"(= {slurm})"))


@pytest.mark.parametrize("key", DISTROS)
def test_cgroup_v2_matches_the_packaged_plugins(key: str) -> None:
    data = distro_vars(key)
    release = data["__slurm_common_version"]
    in_source = "v2" in PARSER[release]["plugins"]["cgroup"]
    in_package = "cgroup_v2" in ARCHIVE[key]["plugins"]
    assert data["__slurm_common_cgroup_v2"] is in_source is in_package


@pytest.mark.parametrize("key", DISTROS)
def test_nvidia_repository_line(key: str) -> None:
    platforms = load_yaml(ROOT / "roles/cuda/vars/main.yml")["__cuda_platforms"]
    facts = FACTS[key]
    args = (platforms, facts["distribution"], facts["distribution_major_version"], "x86_64")
    if key not in platforms:
        # The cuda role's table has no entry (Debian 13 today): it stops the run
        # on a GPU node, naming the supported ones.
        with pytest.raises(ValueError, match="unsupported distribution"):
            cuda.cuda_repo(*args)
        return
    repo = cuda.cuda_repo(*args)
    assert repo["url"] == (
        f"https://developer.download.nvidia.com/compute/cuda/repos/{NVIDIA_REPO[key]}/x86_64/"
    )


def test_ubuntu_22_to_24_in_place_is_refused() -> None:
    # 21.08 to 23.11 skips 22.05 and 23.02: SchedMD's window is two releases.
    old, new = (distro_vars(k)["__slurm_common_version"] for k in ("Ubuntu-22", "Ubuntu-24"))
    nodes = {"ctl": {"installed": {"slurmctld": old}, "target": new, "daemons": ["slurmctld"]}}
    assert "skips 22.05, 23.02" in slurm_versions.slurm_upgrade_problems(nodes)[0]


# --- the files, rendered by Ansible --------------------------------------------------------

FILES = {
    "slurm.conf": ROLE / "templates/etc/slurm/slurm.conf.j2",
    "gres.conf": ROLE / "templates/etc/slurm/gres.conf.j2",
    "cgroup.conf": ROLE / "templates/etc/slurm/cgroup.conf.j2",
    "slurmdbd.conf": ROOT / "roles/slurm_dbd/templates/etc/slurm/slurmdbd.conf.j2",
}


def _inventory(path: Path, key: str) -> Path:
    nvml = distro_vars(key)["__slurm_common_nvml_plugin"]["installable"]
    node1 = {**DGX, "node_name": "node1", "nvml_plugin": nvml}
    node2 = {**CONTAINER, "node_name": "node2", "gpus": [], "gpu_source": "none"}
    node2["nvml_plugin"] = False
    data = {
        "all": {
            "children": {
                "slurm_cluster": {
                    "vars": {
                        "ansible_connection": "local",
                        "ansible_python_interpreter": sys.executable,
                        "test_facts": FACTS[key],
                    },
                    "children": {
                        "slurm_controller": {"hosts": {"ctl": {}}},
                        "slurm_dbd": {"hosts": {"ctl": {}}},
                        "slurm_compute": {
                            "hosts": {
                                "node1": {"test_slurm_node": node1, "slurm_compute_gpus": 8},
                                "node2": {"test_slurm_node": node2, "slurm_compute_gpus": 0},
                            }
                        },
                    },
                }
            }
        }
    }
    path.mkdir(parents=True)
    inv = path / "hosts.yml"
    inv.write_text(yaml.safe_dump(data))
    return inv


def _playbook(path: Path, out: Path, keys: list[str]) -> Path:
    dump = "{{ {" + ", ".join(f"'{k}': {k}" for k in keys) + "} | to_json }}"
    play = [
        {
            "name": "Render the Slurm files for one distribution",
            "hosts": "slurm_cluster",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Take the distribution's facts and the node's hardware",
                    "ansible.builtin.set_fact": {
                        "ansible_distribution": "{{ test_facts.distribution }}",
                        "ansible_distribution_major_version": (
                            "{{ test_facts.distribution_major_version }}"
                        ),
                        "ansible_distribution_release": "{{ test_facts.distribution_release }}",
                        "ansible_os_family": "{{ test_facts.os_family }}",
                        "ansible_hostname": "{{ inventory_hostname }}",
                        "slurm_node": "{{ test_slurm_node | default({}) }}",
                        "cacheable": True,
                    },
                },
                {
                    "name": "Load the distribution's variables as slurm_common does",
                    "ansible.builtin.include_role": {
                        "name": "gpulab.slurm_cluster.slurm_common",
                        "tasks_from": "os_vars",
                        "public": True,
                    },
                },
                {
                    "name": "Load slurm_dbd's defaults",
                    "ansible.builtin.include_vars": str(ROOT / "roles/slurm_dbd/defaults/main.yml"),
                },
                {
                    "name": "Render the files",
                    "ansible.builtin.template": {
                        "src": "{{ item.value }}",
                        "dest": f"{out}/{{{{ item.key }}}}",
                        "mode": "0644",
                    },
                    "loop": "{{ test_files | dict2items }}",
                    "vars": {
                        "test_files": {k: str(v) for k, v in FILES.items()},
                        "__slurm_dbd_password": {"content": "c2VjcmV0"},
                    },
                    "run_once": True,
                },
                {
                    "name": "Write the variables Ansible loaded",
                    "ansible.builtin.copy": {
                        "content": dump,
                        "dest": f"{out}/vars.json",
                        "mode": "0644",
                    },
                    "run_once": True,
                },
            ],
        }
    ]
    book = path / "render.yml"
    book.write_text(yaml.safe_dump(play, sort_keys=False))
    return book


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """{distribution: {file name: text, 'vars': the loaded variables}}, one run each."""
    base = tmp_path_factory.mktemp("distributions")

    def one(key: str) -> tuple[str, subprocess.CompletedProcess, Path]:
        out = base / key / "out"
        out.mkdir(parents=True)
        inv = _inventory(base / key / "inventory", key)
        return (
            key,
            run_playbook(inv, str(_playbook(base / key, out, sorted(distro_vars(key))))),
            out,
        )

    with ThreadPoolExecutor(len(DISTROS)) as pool:
        results = list(pool.map(one, DISTROS))
    files: dict[str, dict] = {}
    for key, proc, out in results:
        assert proc.returncode == 0, f"{key}:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
        files[key] = {name: (out / name).read_text() for name in FILES}
        files[key]["vars"] = json.loads((out / "vars.json").read_text())
    return files


def _lines(text: str) -> list[list[tuple[str, str]]]:
    """Each setting line as its key=value pairs (slurm.conf syntax, no quoting used here)."""
    out = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            out.append([tuple(word.split("=", 1)) for word in line.split()])
    return out


def _plugin_problems(release: str, key: str, value: str) -> list[str]:
    kind = PLUGIN_KEYS[key]
    known = PARSER[release]["plugins"][kind]
    problems = []
    for item in value.split(","):
        name = item.removeprefix(f"{kind}/").removeprefix("crypto/")
        if name == "none":  # a plugin up to 22.05, built in from 23.11
            continue
        if name not in known:
            problems.append(f"{key}={value}: Slurm {release} has no {kind}/{name}")
    return problems


def _problems(release: str, name: str, text: str) -> list[str]:
    """Keys and plugins in a rendered file that Slurm `release` does not know."""
    tables = {
        "slurm.conf": words(release, "slurm.conf"),
        "NodeName": words(release, "NodeName"),
        "PartitionName": words(release, "PartitionName"),
        "cgroup.conf": words(release, "cgroup.conf"),
        "gres.conf": words(release, "gres.conf"),
        "gres.conf line": words(release, "gres.conf line"),
        "slurmdbd.conf": words(release, "slurmdbd.conf"),
    }
    problems = []
    for pairs in _lines(text):
        head = pairs[0][0]
        if name == "slurm.conf" and head in ("NodeName", "PartitionName"):
            table, rest = tables[head], pairs[1:]
        elif name == "gres.conf":
            assert head in tables["gres.conf"], head
            table, rest = tables["gres.conf line"], pairs[1:]
        else:
            table, rest = tables[name], pairs
        for pair in rest:
            assert len(pair) == 2, f"{name}: {pair} is not key=value"
            key, value = pair
            if key not in table:
                problems.append(f"{name}: Slurm {release} does not know {key}")
            elif key in PLUGIN_KEYS and name != "gres.conf":
                problems.extend(_plugin_problems(release, key, value))
    return problems


@pytest.mark.parametrize("key", DISTROS)
def test_ansible_loads_the_distribution_file(rendered: dict, key: str) -> None:
    assert rendered[key]["vars"] == distro_vars(key)


@pytest.mark.parametrize("key", DISTROS)
@pytest.mark.parametrize("name", list(FILES))
def test_every_key_and_plugin_is_known_to_the_release(rendered: dict, key: str, name: str) -> None:
    release = distro_vars(key)["__slurm_common_version"]
    text = rendered[key][name]
    assert _lines(text), f"{key}: {name} is empty"
    assert _problems(release, name, text) == []


@pytest.mark.parametrize("key", DISTROS)
def test_rendered_files_follow_the_distribution(rendered: dict, key: str) -> None:
    data, files = distro_vars(key), rendered[key]
    conf = dict(pair for line in _lines(files["slurm.conf"]) for pair in line[:1])
    assert conf["StateSaveLocation"] == f"{data['__slurm_common_state_dir']}/slurmctld"
    assert conf["SlurmdLogFile"] == f"{data['__slurm_common_log_dir']}/slurmd.log"
    # A lab's batch job is scheduled at slurmctld's next pass, not up to 3 s later.
    assert conf["SchedulerParameters"] == "batch_sched_delay=0"
    # The template's one version gate: CryptoType until 23.11 (CredType's old name after).
    assert ("CryptoType" in conf) is (data["__slurm_common_version"] in ("21.08", "22.05"))
    nodes = [line for line in _lines(files["slurm.conf"]) if line[0][0] == "NodeName"]
    assert [line[0][1] for line in nodes] == ["node1", "node2"]
    assert ("Gres", "gpu:h100:8") in nodes[0]
    gres = files["gres.conf"]
    if data["__slurm_common_nvml_plugin"]["installable"]:
        assert "NodeName=node1 AutoDetect=nvml" in gres
    else:
        assert gres.count("NodeName=node1 Name=gpu Type=h100 File=/dev/nvidia") == 8
    assert "# node2: no GPUs." in gres
    # cgroup.conf lets Slurm pick: cgroup/v2 on a unified host, which 21.08 lacks.
    assert "CgroupPlugin=autodetect" in files["cgroup.conf"]


def _scontrol_release(tmp_path: Path) -> str | None:
    """The Slurm release of the scontrol on PATH (it prints it only with a config to read)."""
    scontrol = shutil.which("scontrol")
    if not scontrol:
        return None
    conf = tmp_path / "minimal.conf"
    conf.write_text("ClusterName=probe\nSlurmctldHost=localhost\n")
    env = dict(os.environ, SLURM_CONF=str(conf))
    out = subprocess.run(
        [scontrol, "--version"], capture_output=True, text=True, env=env, check=False
    )
    try:
        return slurm_versions.release(out.stdout.split()[-1])
    except (IndexError, ValueError):
        return None


@pytest.mark.parametrize("key", DISTROS)
def test_slurm_of_that_release_reads_the_rendered_slurm_conf(
    rendered: dict, key: str, tmp_path: Path
) -> None:
    release = distro_vars(key)["__slurm_common_version"]
    have = _scontrol_release(tmp_path)
    if have != release:
        pytest.skip(f"no scontrol of Slurm {release} on PATH (found: {have or 'none'})")
    if subprocess.run(["getent", "passwd", "slurm"], capture_output=True).returncode != 0:
        pytest.skip("no user slurm (SlurmUser): Slurm's packages create it")
    conf = tmp_path / "slurm.conf"
    conf.write_text(rendered[key]["slurm.conf"])
    # slurm_common's own check, as the template task runs it (validate: ... %s).
    validate = load_yaml(ROLE / "vars/main.yml")["__slurm_common_conf_validate"]
    argv = shlex.split(validate.replace("%s", str(conf)))
    proc = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ), check=False)
    assert proc.returncode == 0, proc.stderr
