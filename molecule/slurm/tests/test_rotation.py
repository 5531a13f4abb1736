"""rotate_key.yml on a running cluster: work goes on, the old key stops working.

A lab user's job sleeps through the rotation and must complete with exit 0;
a loop submits `sbatch --wrap true` every second during it, as that user,
from the login host where the inventory has one (else the controller). Each
submission must get a job that completes, or fail with an error that names
the cause (authentication or protocol), and a submission after the rotation
must succeed. Then the old key is shown not to authenticate any more. The
duration and the window go to results/key-rotation-<suite>.json (a benchmark,
no timing assertion).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import time
from datetime import datetime

from conftest import ROOT, host, platforms

SUITE = os.environ.get("CLUSTER_SUITE", "bookworm")
USER = "alice"
LOOP_DIR = "/tmp/rotation-loop"  # in root's /tmp of the submitting host, made by root
CAUSE = re.compile(r"authenticat|protocol|credential|munge|auth/slurm|jwt|kid", re.I)
# Slurm 22.05 (Debian 12) closes the connection on a request whose munge
# credential it cannot decode, and sbatch says only this (MACHINE-NOTES.md,
# "munge key"). Such a refusal counts as named only where slurmctld's log
# names the credential it refused at that moment (ctld_refusals below).
ZERO_BYTES = "Zero Bytes were transmitted or received"
CTLD_LOG = "/var/log/slurm/slurmctld.log"
CTLD_REFUSED = re.compile(r"authentication|munge decode|credential", re.I)
OLD_JWKS = "/root/rotation-old.jwks"
OLD_MUNGE = "/root/rotation-old-munge.key"

# The retired key given to a sackd of its own (port 6899, its own empty
# /run/slurm in a private mount namespace), on the login host, where sackd
# is installed: sinfo through it must fail with an authentication error, and
# the same proof with the current key must pass (the setup fails loudly).
OLD_KEY_SACKD = r"""
set -eu
d=$(mktemp -d)
src=/etc/slurm/slurm.conf; [ -f "$src" ] || src=/run/slurm/conf/slurm.conf
grep -v "^SlurmdPort=" "$src" > "$d/slurm.conf"; echo SlurmdPort=6899 >> "$d/slurm.conf"
install -o slurm -m 0600 "$1" "$d/slurm.jwks"; chmod 755 "$d"
mount -t tmpfs none /run/slurm; chown slurm /run/slurm
sackd -f "$d/slurm.conf"
for i in $(seq 50); do [ -S /run/slurm/sack.socket ] && break; sleep 0.1; done
test -S /run/slurm/sack.socket
set +e
SLURM_CONF="$d/slurm.conf" sinfo -h; rc=$?
pkill -f "sackd -f $d"; rm -rf "$d"; exit $rc
"""

# A second munged with the retired key, on its own socket: a credential it
# makes must not decode with the current key.
OLD_KEY_MUNGED = r"""
set -u
d=$(mktemp -d); chown munge "$d"
install -o munge -m 0400 "$1" "$d/old.key"
runuser -u munge -- munged --force --key-file="$d/old.key" --socket="$d/old.sock" \
  --pid-file="$d/old.pid" --seed-file="$d/old.seed" --log-file="$d/old.log"
for i in $(seq 50); do [ -S "$d/old.sock" ] && break; sleep 0.1; done
munge -S "$d/old.sock" -n | unmunge; rc=$?
kill "$(cat "$d/old.pid")"; rm -rf "$d"; exit $rc
"""


def submitter() -> str:
    """The login host where the scenario has one (the user's way in), else the controller."""
    return "login" if "login" in {p["name"] for p in platforms()} else "ctl"


def auth_type() -> str:
    conf = host("ctl").check_output("cat /etc/slurm/slurm.conf")
    return "slurm" if "AuthType=auth/slurm" in conf else "munge"


def as_user(node, cmd: str):
    # From the user's own folder: a job's output goes where it was submitted.
    return node.run(f"runuser -u {USER} -- bash -lc {shlex.quote('cd && ' + cmd)}")


def wait_done(job: str, timeout: float = 180) -> str:
    """sacct's State|ExitCode of the job once it ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = host("ctl").run(f"sacct -n -X -P -j {job} -o State,ExitCode")
        line = out.stdout.strip().splitlines()[0] if out.stdout.strip() else ""
        if line and not line.startswith(("PENDING", "RUNNING", "COMPLETING")):
            return line
        time.sleep(2)
    raise AssertionError(f"job {job} did not end within {timeout} s")


def ctld_refusals(ctl) -> list[float]:
    """When slurmctld's log named a credential it refused (seconds since the epoch)."""
    zone = ctl.check_output("date +%z")
    out = ctl.run(f"grep -aiE {shlex.quote(CTLD_REFUSED.pattern)} {CTLD_LOG}").stdout
    times = []
    for line in out.splitlines():
        stamp = re.match(r"\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)\]", line)
        if stamp:
            times.append(datetime.fromisoformat(stamp.group(1) + zone).timestamp())
    return times


def unnamed_refusals(refused: list[tuple[float, str]], kind: str, ctl) -> list[str]:
    """The refusals that name no cause: neither in sbatch's words nor, for munge's
    bare "Zero Bytes", in slurmctld's log within the 10 s before sbatch returned."""
    seen = None
    out = []
    for at, text in refused:
        if CAUSE.search(text):
            continue
        if kind == "munge" and ZERO_BYTES in text:
            seen = ctld_refusals(ctl) if seen is None else seen
            if any(at - 10 <= t <= at + 1 for t in seen):
                continue
        out.append(text)
    return out


def start_loop(node) -> None:
    """sbatch --wrap true every second as the user, each outcome on its own line."""
    node.run(f"rm -rf {LOOP_DIR}; mkdir -m 0755 {LOOP_DIR}; touch {LOOP_DIR}/log")
    node.run(f"chown {USER} {LOOP_DIR}/log")
    loop = (
        f"cd; while [ ! -e {LOOP_DIR}/stop ]; do "
        "r=$(sbatch --parsable --output=/dev/null --wrap true 2>&1); rc=$?; "
        f'echo "$rc $(date +%s.%N) $(echo $r)" >> {LOOP_DIR}/log; sleep 1; done'
    )
    node.run(f"setsid nohup runuser -u {USER} -- bash -c {shlex.quote(loop)} >/dev/null 2>&1 &")


def test_a_rotation_keeps_work_going_and_retires_the_old_key(run_playbook) -> None:
    kind = auth_type()
    ctl, sub = host("ctl"), host(submitter())
    # The old key, kept by root for the proof at the end.
    if kind == "slurm":
        ctl.check_output(f"install -m 0600 /etc/slurm/slurm.jwks {OLD_JWKS}")
    else:
        ctl.check_output(f"install -m 0400 /etc/munge/munge.key {OLD_MUNGE}")

    long_job = as_user(sub, "sbatch --parsable --output=/dev/null --wrap 'sleep 40'")
    assert long_job.rc == 0, long_job.stderr
    job = long_job.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 60
    while ctl.run(f"squeue -h -j {job} -o %t").stdout.strip() != "R":
        assert time.monotonic() < deadline, f"job {job} never started"
        time.sleep(1)

    start_loop(sub)
    time.sleep(3)
    started = time.monotonic()
    done = run_playbook("rotate_key.yml")
    wall = time.monotonic() - started
    time.sleep(3)
    sub.run(f"touch {LOOP_DIR}/stop")
    time.sleep(2)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]

    assert wait_done(job) == "COMPLETED|0:0"

    refused, accepted = [], []
    for line in sub.check_output(f"cat {LOOP_DIR}/log").splitlines():
        parts = line.split(" ", 2)
        rc, text = parts[0], parts[2] if len(parts) > 2 else ""
        if rc == "0" and text.strip().split(";")[0].isdigit():
            accepted.append(text.strip().split(";")[0])
        else:
            refused.append((float(parts[1]), text))
    assert accepted, "no submission during the rotation got a job"
    unnamed = unnamed_refusals(refused, kind, ctl)
    assert unnamed == [], f"refused without a named cause: {unnamed}"
    for each in accepted:
        assert wait_done(each).startswith("COMPLETED"), each
    again = as_user(sub, "sbatch --parsable --output=/dev/null --wrap true")
    assert again.rc == 0, again.stderr
    assert wait_done(again.stdout.strip().split(";")[0]).startswith("COMPLETED")

    # The old key no longer authenticates.
    if kind == "slurm":
        assert sub.exists("sackd"), f"{submitter()} has no sackd for the old key's proof"
        # The retired key (a test's copy, kept by root) onto the login host.
        copy = ctl.check_output(f"base64 -w0 {OLD_JWKS}")
        sub.check_output(f"umask 077; echo {copy} | base64 -d > {OLD_JWKS}")
        old = sub.run(f"unshare -m bash -c {shlex.quote(OLD_KEY_SACKD)} oldkey {OLD_JWKS}")
        assert old.rc != 0, old.stdout + old.stderr
        assert re.search(r"authentication", old.stdout + old.stderr, re.I), old.stderr
        current = sub.run(
            f"unshare -m bash -c {shlex.quote(OLD_KEY_SACKD)} oldkey /etc/slurm/slurm.jwks"
        )
        assert current.rc == 0, current.stdout + current.stderr  # the same proof passes today
    else:
        old = ctl.run(f"bash -c {shlex.quote(OLD_KEY_MUNGED)} oldkey {OLD_MUNGE}")
        assert old.rc != 0, old.stdout + old.stderr
        current = ctl.run(f"bash -c {shlex.quote(OLD_KEY_MUNGED)} oldkey /etc/munge/munge.key")
        assert current.rc == 0, current.stdout + current.stderr
    ctl.run(f"rm -f {OLD_JWKS} {OLD_MUNGE}")
    sub.run(f"rm -f {OLD_JWKS}")

    reports = sorted((ROOT / "results").glob("*/key-rotation-*.json"))
    assert reports, "rotate_key.yml wrote no report"
    report = json.loads(reports[-1].read_text())
    assert report["kind"] == kind and report["resumed"] is False
    out = ROOT / "results" / f"key-rotation-{SUITE}.json"
    out.write_text(
        json.dumps(
            {
                "suite": SUITE,
                "kind": kind,
                "playbook_wall_s": round(wall, 1),
                "duration_s": report["duration_s"],
                "window_s": report["window_s"],
                "window": report["window"],
                "submissions": len(accepted) + len(refused),
                "refused": len(refused),
                "refused_texts": sorted({text for _, text in refused})[:10],
                "report": report,
            },
            indent=2,
        )
        + "\n"
    )
