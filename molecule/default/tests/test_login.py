"""The lab's front door: the login host.

A lab user logs in there over SSH with her own key, runs the client commands as
herself, and her job runs on the compute nodes, never on the login host. Its
daemon (sackd on Slurm 24.11, slurmd in no partition on 22.05) fetched the
controller's configuration; the doctor names a login host whose daemon is down,
and one whose configuration differs from the controller's. (The smoke job of
converge was submitted from there too: roles/smoke_train, test_smoke.py.)
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import RESULTS, host

LOGIN = "login"
USER = "alice"
FETCHED = "/run/slurm/conf/slurm.conf"


def daemon() -> str:
    """The login daemon this release runs (slurm_common's vars: sackd from 23.11)."""
    h = host(LOGIN)
    return "sackd" if h.package("sackd").is_installed else "slurmd"


def address(name: str) -> str:
    fmt = "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}"
    out = subprocess.run(
        ["docker", "inspect", "--format", fmt, name], capture_output=True, text=True, check=True
    )
    return out.stdout.split()[0]


@pytest.fixture(scope="module")
def user_key(tmp_path_factory) -> Iterator[Path]:
    """A key pair of the test machine, its public half added to alice's authorized_keys as alice."""
    folder = tmp_path_factory.mktemp("ssh")
    key = folder / "id_ed25519"
    argv = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "front-door", "-f", str(key)]
    subprocess.run(argv, check=True)
    pub = (folder / "id_ed25519.pub").read_text().strip()
    script = (
        f"umask 077; mkdir -p ~/.ssh; grep -qxF {shlex.quote(pub)} ~/.ssh/authorized_keys "
        f"2>/dev/null || echo {shlex.quote(pub)} >> ~/.ssh/authorized_keys"
    )
    host(LOGIN).check_output(f"runuser -u {USER} -- sh -c {shlex.quote(script)}")
    yield key
    drop = (
        f"grep -vxF {shlex.quote(pub)} ~/.ssh/authorized_keys > ~/.ssh/keys.new; "
        "mv ~/.ssh/keys.new ~/.ssh/authorized_keys"
    )
    host(LOGIN).check_output(f"runuser -u {USER} -- sh -c {shlex.quote(drop)}")


def ssh(key: Path, command: str, user: str = USER) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["ssh", "-i", str(key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
         "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR",
         f"{user}@{address(LOGIN)}", command],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


def test_the_login_daemon_runs_and_holds_the_controllers_configuration() -> None:
    h = host(LOGIN)
    unit = daemon()
    assert h.service(unit).is_running and h.service(unit).is_enabled
    assert h.service("ssh").is_running
    ctl_sha = host("ctl").check_output("sha1sum /etc/slurm/slurm.conf").split()[0]
    assert h.check_output(f"sha1sum {FETCHED}").split()[0] == ctl_sha
    # No local copy that the client commands would read instead.
    assert not h.file("/etc/slurm/slurm.conf").exists


def test_a_user_logs_in_with_her_key_and_her_job_runs_on_a_compute_node(user_key: Path) -> None:
    done = ssh(
        user_key,
        "set -e; id -un; sinfo --noheader --format=%P; "
        "sbatch --wait --parsable --output=$HOME/front-door-%j.out --wrap 'hostname; id -un'; "
        "cat $HOME/front-door-*.out; rm -f $HOME/front-door-*.out",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.split()
    assert lines[0] == USER
    job_id, ran_on, ran_as = lines[-3], lines[-2], lines[-1]
    assert ran_on in ("node1", "node2") and ran_as == USER, done.stdout
    acct = host("ctl").check_output(
        f"sacct -X --noheader --parsable2 -j {job_id} --format=User,State,ExitCode"
    )
    assert acct.strip() == f"{USER}|COMPLETED|0:0"


def test_no_job_runs_on_the_login_host(user_key: Path) -> None:
    done = ssh(user_key, "srun --nodelist=login --time=1 true")
    assert done.returncode != 0
    assert "node" in done.stderr.lower() or "partition" in done.stderr.lower(), done.stderr
    partitions = host("ctl").check_output("sinfo --noheader --format=%N")
    assert "login" not in partitions


def doctor(run_playbook) -> tuple[int, dict]:
    report = RESULTS / "doctor-latest.json"
    report.unlink(missing_ok=True)
    done = run_playbook("doctor.yml")
    assert report.exists(), done.stdout[-3000:]
    return done.returncode, json.loads(report.read_text())


def restore(unit: str) -> None:
    h = host(LOGIN)
    h.check_output(f"systemctl restart {unit}")
    deadline = time.monotonic() + 60
    while h.run(f"runuser -u {USER} -- sinfo --noheader").rc != 0:
        assert time.monotonic() < deadline, f"{unit} on login: sinfo fails after its restart"
        time.sleep(1)


def test_the_doctor_names_a_login_host_whose_daemon_is_down(run_playbook) -> None:
    unit = daemon()
    host(LOGIN).check_output(f"systemctl stop {unit}")
    try:
        rc, report = doctor(run_playbook)
    finally:
        restore(unit)
    causes = {(c["host"], c["check"]) for c in report["causes"]}
    assert rc != 0
    assert {(LOGIN, "services")} <= causes or {(LOGIN, "slurm.daemon")} <= causes, report["causes"]
    assert all(h == LOGIN for h, _check in causes), report["causes"]
    text = json.dumps(report["causes"])
    assert f"{unit}.service" in text


def test_the_doctor_names_a_login_host_whose_configuration_differs(run_playbook) -> None:
    unit = daemon()
    # A copy that drifted: what a daemon that missed a reconfigure would hold.
    # Old, and older than the node's check settings (a copy fresher than
    # they are, or settings written within config_grace_s, read as the
    # controller having just moved on: a WARN).
    host(LOGIN).check_output(
        f"echo '# drifted' >> {FETCHED} && touch -d '-1 hour' /etc/slurm-cluster/health.json "
        f"&& touch -d '-2 hour' {FETCHED}"
    )
    try:
        rc, report = doctor(run_playbook)
    finally:
        restore(unit)
    causes = {(c["host"], c["check"]) for c in report["causes"]}
    assert rc != 0
    assert causes == {(LOGIN, "config.fetched")}, report["causes"]
    rc, report = doctor(run_playbook)
    assert rc == 0, report["causes"]
