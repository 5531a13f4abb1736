"""Verify the 3-container cluster after converge (testinfra).

Expected values are literals (ports, modes, owners, node names), not values
read back from the roles' defaults.
"""

from __future__ import annotations

import os
import shlex

import pytest
import testinfra.utils.ansible_runner
from conftest import INVENTORY, host

RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY)
ALL = RUNNER.get_hosts("all")
CONTROLLER = RUNNER.get_hosts("slurm_controller")
COMPUTE = RUNNER.get_hosts("slurm_compute")
# Set by the scenario (molecule/slurm runs on bookworm and trixie images).
SUITE = os.environ.get("CLUSTER_SUITE", "bookworm")
SLURM_RELEASE = {"bookworm": "22.05", "trixie": "24.11"}


def test_inventory_shape() -> None:
    assert CONTROLLER == ["ctl"]
    assert sorted(COMPUTE) == ["node1", "node2"]


@pytest.mark.parametrize("name", ALL)
def test_slurm_release_of_the_suite(name: str) -> None:
    """The image is the Debian release asked for, with its own Slurm."""
    h = host(name)
    assert h.check_output(". /etc/os-release && echo $VERSION_CODENAME") == SUITE
    version = h.check_output("sinfo --version").split()[-1]
    assert version.startswith(SLURM_RELEASE[SUITE] + "."), version


@pytest.mark.parametrize("name", ALL)
def test_munge_running_with_private_key(name: str) -> None:
    h = host(name)
    assert h.service("munge").is_running
    assert h.service("munge").is_enabled
    key = h.file("/etc/munge/munge.key")
    assert key.user == "munge"
    assert key.group == "munge"
    assert key.mode == 0o400
    assert key.size >= 32


def test_munge_key_identical_and_credentials_cross_nodes() -> None:
    sums = {n: host(n).check_output("sha256sum /etc/munge/munge.key").split()[0] for n in ALL}
    assert len(set(sums.values())) == 1, sums
    cred = host("ctl").check_output("munge -n")
    for n in COMPUTE:
        out = host(n).run(f"printf '%s' '{cred}' | unmunge")
        assert out.rc == 0, f"{n} cannot decode ctl's credential: {out.stderr}"
        assert "STATUS:          Success (0)" in out.stdout


def test_slurm_conf_on_the_controller_only_and_fetched_by_each_slurmd() -> None:
    conf = host("ctl").file("/etc/slurm/slurm.conf")
    assert conf.mode == 0o644
    assert conf.contains("^SlurmctldParameters=enable_configless$")
    assert conf.contains("^SlurmctldHost=ctl$")
    assert conf.contains("^GresTypes=gpu$")
    assert conf.contains("^ReturnToService=2$")
    assert conf.contains(
        "^NodeName=node1 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 "
        "RealMemory=[1-9][0-9]* Gres=gpu:1 State=UNKNOWN$"
    )
    assert conf.contains(
        "^NodeName=node2 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 "
        "RealMemory=[1-9][0-9]* Gres=gpu:1 State=UNKNOWN$"
    )
    files = ("slurm.conf", "gres.conf", "cgroup.conf")
    want = host("ctl").check_output("cd /etc/slurm && sha256sum " + " ".join(files))
    for n in COMPUTE:
        h = host(n)
        for name in files:
            assert not h.file(f"/etc/slurm/{name}").exists, f"{n} holds a local {name}"
        assert h.check_output("cd /run/slurm/conf && sha256sum " + " ".join(files)) == want, n
        assert "--conf-server=ctl:6817" in h.check_output("systemctl show -p Environment slurmd")
        # Client commands on a compute node read slurmd's copy.
        assert (
            h.check_output("sinfo --noheader --format=%P").split()
            == host("ctl").check_output("sinfo --noheader --format=%P").split()
        )


@pytest.mark.parametrize("name", COMPUTE)
def test_gres_conf_names_each_nodes_gpu(name: str) -> None:
    gres = host("ctl").file("/etc/slurm/gres.conf")
    assert gres.contains(f"^NodeName={name} Name=gpu File=/dev/nvidia0$")
    # slurmd reads its own line from the fetched file.
    out = host(name).check_output(f"sh -c {shlex.quote(SLURMD_G)} 2>&1")
    assert "Name=gpu" in out and "File=/dev/nvidia0" in out, out


# slurmd -G as the doctor's probe runs it (cluster_probe.py, slurmd_gres): under
# auth/slurm (a key in /etc/slurm) on links to the fetched files' real paths and
# the key, in a mount namespace with an empty /run/slurm, since every slurmd, -G
# too, replaces /run/slurm/sack.socket: the running slurmd's.
SLURMD_G = r"""
set -eu
[ -e /etc/slurm/slurm.jwks ] || exec slurmd -f /run/slurm/conf/slurm.conf -G
d=$(mktemp -d)
for f in /run/slurm/conf/*.conf /etc/slurm/slurm.jwks; do ln -s "$(realpath "$f")" "$d/"; done
rc=0
unshare -m sh -c 'mount -t tmpfs -o mode=0755 none /run/slurm && exec slurmd -f "$1" -G' \
  sh "$d/slurm.conf" || rc=$?
rm -rf "$d"
exit $rc
"""


def test_slurmctld_running_and_listening() -> None:
    h = host("ctl")
    assert h.service("slurmctld").is_running
    assert h.service("slurmctld").is_enabled
    assert h.socket("tcp://0.0.0.0:6817").is_listening
    assert "is UP" in h.check_output("scontrol ping")


@pytest.mark.parametrize("name", COMPUTE)
def test_slurmd_running_and_listening(name: str) -> None:
    h = host(name)
    assert h.service("slurmd").is_running
    assert h.service("slurmd").is_enabled
    assert h.socket("tcp://0.0.0.0:6818").is_listening


@pytest.mark.parametrize("name", ALL)
def test_no_slurm_daemon_waited_out_its_start_timeout(name: str) -> None:
    """Packages never start a daemon before its config exists.

    Slurm 24.11's slurmd, started by its postinst without slurm.conf, hangs
    on a configless fetch until systemd kills it after 90 s.
    """
    log = host(name).check_output(
        "journalctl -b --no-pager -o cat -u slurmd -u slurmctld -u slurmdbd"
    )
    assert "start operation timed out" not in log, log[-2000:]


def test_sinfo_shows_both_nodes_idle() -> None:
    out = host("ctl").check_output("sinfo --noheader --Node --format='%N %P %t %G'")
    assert sorted(out.splitlines()) == [
        "node1 debug idle gpu:1",
        "node1 gpu* idle gpu:1",
        "node2 gpu* idle gpu:1",
    ]


def test_srun_runs_on_both_nodes() -> None:
    out = host("ctl").check_output("timeout 60 srun --immediate=30 -N2 hostname")
    assert sorted(out.split()) == ["node1", "node2"]


def test_srun_gpu_request_sets_cuda_visible_devices() -> None:
    out = host("ctl").check_output(
        "timeout 60 srun --immediate=30 -N1 --gres=gpu:1 printenv CUDA_VISIBLE_DEVICES"
    )
    assert out.strip() == "0"


def test_shared_directory_seen_by_all_nodes() -> None:
    token = os.urandom(8).hex()
    host("node1").check_output(f"printf %s {token} > /shared/verify-{token}")
    try:
        for n in ALL:
            assert host(n).file(f"/shared/verify-{token}").content_string == token
    finally:
        host("node1").run(f"rm -f /shared/verify-{token}")


@pytest.mark.parametrize("name", COMPUTE)
def test_torch_in_venv(name: str) -> None:
    if not RUNNER.get_variables(name).get("pytorch_enabled", True):  # role kept off
        assert not host(name).file("/opt/pytorch/venv").exists
        return
    out = host(name).check_output(
        "/opt/pytorch/venv/bin/python -c 'import torch; print(torch.__version__)'"
    )
    assert out.strip() == "2.13.0+cpu"


# What a DDP job imports (roles/pytorch/files/verify_torch.py JOB_MODULES).
JOB_IMPORTS = (
    "torch, torch.distributed, torch.nn.parallel, torch._dynamo, torch.utils.data, "
    "torch.optim, torch.multiprocessing, torch.distributed.run"
)
# Prints the modules a lab user's job would compile from source: those whose
# bytecode is missing from root's venv (the user cannot write it there).
NO_BYTECODE = (
    "import importlib.util, sys; "
    f"import {JOB_IMPORTS}; "
    "missing = [m.__name__ for m in list(sys.modules.values()) "
    "if getattr(m, '__file__', None) and m.__file__.endswith('.py') "
    "and m.__file__.startswith(sys.prefix) "
    "and not __import__('os').path.exists(importlib.util.cache_from_source(m.__file__))]; "
    "print(len(missing), ' '.join(sorted(missing)[:5]))"
)


@pytest.mark.parametrize("name", COMPUTE)
def test_a_users_ddp_job_finds_the_bytecode_in_roots_venv(name: str) -> None:
    """pip installs with --no-compile; the role's torch check compiles what a job imports.

    Without it each rank of every job compiled about 800 modules from source
    (torch._dynamo, sympy: 1.8 s of CPU per rank on this cluster).
    """
    if not RUNNER.get_variables(name).get("pytorch_enabled", True):
        return
    out = host(name).check_output(
        f"runuser -u clusterproof -- env PYTHONDONTWRITEBYTECODE=1 "
        f'/opt/pytorch/venv/bin/python -c "{NO_BYTECODE}"'
    )
    count, _, some = out.strip().partition(" ")
    assert count == "0", f"{name}: {count} modules without bytecode, e.g. {some}"


def _apt_transactions(name: str) -> list[set[str]]:
    """The packages each apt transaction on the node installed (its history log), oldest first."""
    log = host(name).file("/var/log/apt/history.log").content_string
    out = []
    for entry in log.split("\n\n"):
        for line in entry.splitlines():
            if line.startswith("Install: "):
                out.append({p.split(":", 1)[0].strip() for p in line[9:].split("), ")})
    return out


@pytest.mark.parametrize("name", ALL)
def test_the_roles_packages_came_in_two_transactions_munge_and_slurm_first(name: str) -> None:
    """site.yml's first run: munge and Slurm in one apt transaction, the roles' others in one more.

    playbooks/packages.yml, not one transaction per role. The monitoring
    role's come later (site.yml's doctor runs before it). munge's account
    took the first free system ID on every node, before sshd's, mysql's
    or prometheus's, so it is the same everywhere.
    """
    done = _apt_transactions(name)
    first = next(i for i, t in enumerate(done) if "munge" in t)
    assert "slurm-client" in done[first], done[first]
    others = {"openssh-server", "libpam-slurm-adopt", "python3-venv", "mariadb-server", "slurmdbd"}
    where = {p: i for i, t in enumerate(done) for p in t & others}
    assert where, f"{name}: none of {sorted(others)} installed"
    assert set(where.values()) == {first + 1}, where


def test_munges_account_is_the_same_on_every_node() -> None:
    ids = {n: host(n).check_output("id -u munge; id -g munge").split() for n in ALL}
    assert len({tuple(v) for v in ids.values()}) == 1, ids
