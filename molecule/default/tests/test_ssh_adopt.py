"""SSH to a compute node only with a job there (pam_slurm_adopt, roles/slurm_compute).

From the login host (the controller where the scenario has none): the lab user alice
is refused on node1 without a job there, let in (and her session adopted into the
job) while one runs, and refused again once it is gone; root is let in at any time.
The keys are made here and removed at the end (alice's on the shared filesystem).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterator

import pytest
from conftest import host, platforms

NODE = "node1"
USER = "alice"  # inventory/local/group_vars/slurm_cluster/users.yml
KEY = "id_ed25519_adopt"
COMMENT = "ssh-adopt-test"
JOB_NAME = "ssh-adopt"
# The client's default LogLevel (INFO): ERROR would hide the PAM message.
SSH = (
    "ssh -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
    "-o ConnectTimeout=10"
)
DENIED = "Access denied by pam_slurm_adopt: you have no active jobs on this node"


def source() -> str:
    return "login" if "login" in {p["name"] for p in platforms()} else "ctl"


def as_user(cmd: str):
    return host(source()).run(f"runuser -u {USER} -- sh -c {shlex.quote(cmd)}")


def wait_for(what: str, probe, timeout: float = 60.0, step: float = 1.0):
    end = time.monotonic() + timeout
    while True:
        got = probe()
        if got or time.monotonic() > end:
            assert got, f"{what} not within {timeout:.0f} s"
            return got
        time.sleep(step)


@pytest.fixture(scope="module")
def keys() -> Iterator[dict[str, str]]:
    """alice's key pair in her authorized_keys, root's from the source host on node1."""
    src = host(source())
    assert src.run("command -v ssh").rc == 0, f"no ssh client on {source()}"
    home = src.check_output(f"getent passwd {USER} | cut -d: -f6")
    user_key = f"{home}/.ssh/{KEY}"
    made = as_user(
        f"umask 077 && mkdir -p {home}/.ssh && "
        f"(test -f {user_key} || ssh-keygen -q -t ed25519 -N '' -C {COMMENT} -f {user_key}) && "
        f'(grep -qxF "$(cat {user_key}.pub)" {home}/.ssh/authorized_keys 2>/dev/null '
        f"|| cat {user_key}.pub >> {home}/.ssh/authorized_keys)"
    )
    assert made.rc == 0, made.stderr
    root_key = f"/root/.ssh/{KEY}"
    src.check_output(
        f"umask 077 && mkdir -p /root/.ssh && "
        f"(test -f {root_key} || ssh-keygen -q -t ed25519 -N '' -C {COMMENT} -f {root_key})"
    )
    pub = shlex.quote(src.check_output(f"cat {root_key}.pub"))
    host(NODE).check_output(
        f"umask 077 && mkdir -p /root/.ssh && (grep -qxF {pub} /root/.ssh/authorized_keys "
        f"2>/dev/null || echo {pub} >> /root/.ssh/authorized_keys)"
    )
    try:
        yield {"user": user_key, "root": root_key}
    finally:
        host("ctl").run(f"scancel --user={USER} --name={JOB_NAME}")
        as_user(f"sed -i '/ {COMMENT}$/d' {home}/.ssh/authorized_keys")
        as_user(f"rm -f {user_key} {user_key}.pub")
        host(NODE).run(f"sed -i '/ {COMMENT}$/d' /root/.ssh/authorized_keys")
        src.run(f"rm -f {root_key} {root_key}.pub")


def no_job_of_alice_on_node() -> None:
    ctl = host("ctl")
    ctl.run(f"scancel --user={USER} --nodelist={NODE}")
    wait_for(
        f"{USER}'s jobs on {NODE} gone",
        lambda: ctl.run(f"squeue -h -u {USER} -w {NODE}").stdout.strip() == "",
    )


def test_sshd_pam_on_the_compute_node_is_ours() -> None:
    node = host(NODE)
    assert node.service("ssh").is_running
    access = node.file("/etc/security/access-slurm-adopt.conf")
    assert (access.user, access.group, access.mode) == ("root", "root", 0o644)
    rules = [line for line in access.content_string.splitlines() if line and line[0] != "#"]
    # molecule connects with docker: no SSH user of Ansible's is added.
    assert rules == ["+ : root : ALL", "- : ALL : ALL"]
    pam = node.file("/etc/pam.d/sshd").content_string.splitlines()
    at = pam.index("@include common-account")
    assert pam[at + 1 : at + 5] == [
        "# BEGIN gpulab.slurm_cluster slurm_compute (cluster_ssh_adopt)",
        "account    sufficient   pam_access.so accessfile=/etc/security/access-slurm-adopt.conf"
        " nodefgroup",
        "account    required     pam_slurm_adopt.so action_no_jobs=deny action_unknown=newest"
        " action_adopt_failure=deny action_generic_failure=deny log_level=info",
        "# END gpulab.slurm_cluster slurm_compute (cluster_ssh_adopt)",
    ]
    assert "@include common-session" not in pam
    assert "@include common-session-noninteractive" in pam


def test_a_lab_user_without_a_job_is_refused(keys) -> None:
    no_job_of_alice_on_node()
    out = as_user(f"{SSH} -i {keys['user']} {USER}@{NODE} echo in")
    assert out.rc == 255, out.stdout + out.stderr
    assert DENIED in out.stderr
    assert "in" not in out.stdout.split()


def test_a_lab_user_with_a_job_there_is_let_in_and_adopted(keys) -> None:
    no_job_of_alice_on_node()
    home = host(source()).check_output(f"getent passwd {USER} | cut -d: -f6")
    submitted = as_user(
        f"cd {home} && sbatch --parsable --job-name={JOB_NAME} --nodelist={NODE} --time=5 "
        "--wrap 'sleep 300'"
    )
    assert submitted.rc == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    try:
        ctl = host("ctl")
        wait_for(
            f"job {job} running",
            lambda: ctl.run(f"squeue -h -j {job} -o %T").stdout.strip() == "RUNNING",
        )
        # The extern step starts with the job (PrologFlags=Contain); a few seconds' grace.
        out = wait_for(
            f"{USER}'s ssh to {NODE} with job {job}",
            lambda: (r := as_user(f"{SSH} -i {keys['user']} {USER}@{NODE} echo in")).rc == 0 and r,
            timeout=20,
            step=2,
        )
        assert out.stdout.split() == ["in"]
        log = host(NODE).run("journalctl -u ssh --no-pager -q | grep pam_slurm_adopt").stdout
        assert f"adopted into job {job}" in log, log[-2000:]
    finally:
        host("ctl").run(f"scancel {job}")
    no_job_of_alice_on_node()
    again = as_user(f"{SSH} -i {keys['user']} {USER}@{NODE} echo in")
    assert again.rc == 255 and DENIED in again.stderr, again.stdout + again.stderr


def test_root_is_let_in_without_a_job(keys) -> None:
    out = host(source()).run(f"{SSH} -i {keys['root']} root@{NODE} echo in")
    assert out.rc == 0, out.stderr
    assert out.stdout.split() == ["in"]
