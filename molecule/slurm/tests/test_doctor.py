"""The doctor on a real cluster: no false alarm when healthy; each fault named, repaired, proven.

Faults are injected in rounds: a round breaks each of its nodes in one way (one
fault per node, on nodes and components whose failures do not explain each other),
as a lab finds a cluster after a bad day. doctor.yml must FAIL naming each fault's
node and component, and list nothing else (no node the round left alone, no
consequence of a fault). Then site.yml runs: it repairs what Ansible
can (and then the doctor PASSes), or it stops naming the same cause; then the fault
is undone by hand as an admin would (hardware, a mount of an existing filesystem, a
daemon's clock), site.yml runs again and the doctor PASSes. One round costs one
repair run for all its faults (it was one per fault: most of this suite's time).
Timings go to results/fault-suite-<suite>.json (benchmarks, not assertions).
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field

import pytest
from conftest import RESULTS, ROOT, host, platforms

SUITE = os.environ.get("CLUSTER_SUITE", "bookworm")
REPORT = RESULTS / "doctor-latest.json"
TIMINGS: dict[str, dict] = {}
FAKETIME_DROPIN = "/etc/systemd/system/munge.service.d/faketime.conf"


def doctor(run_playbook, *extra: str) -> tuple[int, dict, float, str]:
    REPORT.unlink(missing_ok=True)
    start = time.monotonic()
    done = run_playbook("doctor.yml", *extra)
    wall = time.monotonic() - start
    assert REPORT.exists(), done.stdout[-3000:] + done.stderr[-2000:]
    return done.returncode, json.loads(REPORT.read_text()), wall, done.stdout


def causes(report: dict) -> list[tuple[str, str]]:
    return [(c["host"], c["check"]) for c in report["causes"]]


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(1)


def node_state(name: str) -> str:
    return (
        host("ctl")
        .check_output(f"sinfo --noheader --Node --nodes={name} --format=%t | sort -u")
        .strip()
    )


@dataclass
class Fault:
    name: str
    node: str
    check: str
    evidence: str  # regex the cause's evidence must match
    inject: str  # shell on the node
    heal: str = ""  # shell on the node, when site.yml cannot repair it
    site_fails: str = ""  # regex site.yml's output must match when it cannot repair
    wait_down: bool = False  # wait until slurmctld marks the node not responding
    suites: tuple[str, ...] = ("bookworm",)
    # Other causes the fault itself brings on its node (every other failure is
    # a consequence: marked, not listed).
    also: list[tuple[str, str]] = field(default_factory=list)
    fix: str = ""  # regex the cause's fix must match


FAULTS = [
    Fault(
        "munge key differs",
        "node2",
        "munge.cross",
        r"key differs \(fingerprint \w{16}, ctl has \w{16}\)",
        "dd if=/dev/urandom bs=1024 count=1 of=/etc/munge/munge.key 2>/dev/null"
        " && chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key"
        " && systemctl restart munge",
        wait_down=True,
        # Debian 13's cluster authenticates with auth/slurm (group_vars/all.yml):
        # a munge key there takes no node down.
        suites=("bookworm",),
    ),
    # auth/slurm (Debian 13 here): another slurm.jwks on node2, the same kids
    # with other secrets, loaded by its slurmd; slurmctld then refuses it.
    Fault(
        "slurm key differs",
        "node2",
        "auth.key",
        r"key differs \(fingerprint \w{16}, ctl has \w{16}\)",
        'python3 -c \'import base64,json,os; p="/etc/slurm/slurm.jwks"; d=json.load(open(p));'
        ' [k.update(k=base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("="))'
        ' for k in d["keys"]]; json.dump(d, open(p, "w"))\''
        # slurmd cannot start again with it: its configless fetch is refused. Not
        # waited for: systemctl would block until the unit's 90 s start timeout.
        " && systemctl restart --no-block slurmd",
        wait_down=True,
        suites=("trixie",),
    ),
    # Another mode on node1's copy (the same key): slurmd -G refuses it, which
    # the doctor marks as its consequence; site.yml installs the copy again.
    Fault(
        "slurm key mode 0644",
        "node1",
        "auth.key",
        r"mode 0644 \(want 0600\)",
        "chmod 0644 /etc/slurm/slurm.jwks",
        suites=("trixie",),
        fix=r"installs the controller's slurm\.jwks",
    ),
    Fault(
        "munge key mode 0644",
        "node1",
        "munge.key",
        r"mode 0644 \(want 0400\)",
        "chmod 0644 /etc/munge/munge.key",
    ),
    Fault(
        "munged stopped",
        "node1",
        "munge.local",
        r"munged is inactive",
        "systemctl stop munge",
    ),
    Fault(
        "slurmd stopped",
        "node2",
        "services",
        r"slurmd.service is inactive/dead",
        "systemctl stop slurmd",
        suites=("bookworm", "trixie"),
    ),
    # The accounting daemon: jobs still run, so nothing else notices; the
    # doctor names it on its host with the fix, and site.yml starts it.
    Fault(
        "slurmdbd stopped",
        "ctl",
        "services",
        r"^slurmdbd.service is inactive/dead",
        "systemctl stop slurmdbd",
        suites=("bookworm", "trixie"),
        fix=r"^systemctl start slurmdbd on ctl",
    ),
    Fault(
        "slurm.conf edited by hand",
        "ctl",
        "config.files",
        r"/etc/slurm/slurm.conf sha256 \w{12}… differs from what site.yml writes",
        "sed -i 's/MaxTime=30:00/MaxTime=45:00/' /etc/slurm/slurm.conf",
    ),
    # A reconfigure that never reached the node (a failed run, a node that was
    # down): site.yml hands the files out again.
    Fault(
        "slurmd's fetched slurm.conf out of date",
        "node1",
        "config.files",
        r"/run/slurm/conf/slurm.conf sha256 \w{12}… differs from what site.yml writes",
        "sed -i 's/MaxTime=30:00/MaxTime=45:00/' /run/slurm/conf/slurm.conf",
    ),
    Fault(
        "GPU device missing",
        "node2",
        "hw.match",
        r"gres.conf names /dev/nvidia0, which does not exist",
        "rm /dev/nvidia0",
        heal="systemctl restart fake-gpu",
        site_fails=r"node2: slurm_compute_gpus=1 but the node has 0 GPU",
        also=[("node2", "gpu.count")],
    ),
    Fault(
        "/shared replaced by a local directory",
        "node2",
        "shared.fs",
        r"^/shared is tmpfs \(tmpfs\), not the cluster's shared filesystem",
        "mount -t tmpfs tmpfs /shared",
        heal="umount /shared",
        site_fails=r"node2 does not see the file .* /shared is not the same filesystem",
    ),
    Fault(
        "munged clock beyond the TTL",
        "node2",
        "clock",
        r"offset to ctl \+(39\d|40\d) s .*munged clock",
        f"mkdir -p {os.path.dirname(FAKETIME_DROPIN)} && printf '[Service]\\nEnvironment="
        "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 FAKETIME=+400\\n'"
        f" > {FAKETIME_DROPIN} && systemctl daemon-reload && systemctl restart munge",
        heal=f"rm -r {os.path.dirname(FAKETIME_DROPIN)} && systemctl daemon-reload"
        " && systemctl restart munge",
        site_fails=r"Doctor FAIL: node2 clock: offset to ctl",
    ),
    Fault(
        "port 6818 blocked",
        "node2",
        "net.ports",
        r"ctl → node2:6818 \(slurmd\) timed out",
        "iptables -I INPUT -p tcp --dport 6818 -j DROP",
    ),
    # The controller's name on a loopback line of one node: slurmd there
    # talks to itself. The cause is the name (not a firewall), and site.yml
    # removes the line.
    Fault(
        "controller name mapped to 127.0.1.1",
        "node1",
        "net.hostname",
        r"the controller's name ctl resolves on node1 to 127\.0\.1\.1 \(loopback\)",
        "cp /etc/hosts /tmp/hosts && (echo '127.0.1.1 ctl.slurm-lab ctl'; cat /tmp/hosts)"
        " > /etc/hosts",
    ),
    # scontrol ping fails too: a consequence, not a second cause with the wrong daemon.
    Fault(
        "munged stopped on the controller",
        "ctl",
        "munge.local",
        r"munged is inactive",
        "systemctl stop munge",
    ),
    # The nodes' fetched copies are explained by the controller's missing file.
    Fault(
        "gres.conf removed on the controller",
        "ctl",
        "config.files",
        r"/etc/slurm/gres.conf sha256 missing",
        "rm /etc/slurm/gres.conf",
    ),
    Fault(
        "hostname mapped to 127.0.1.1",
        "node1",
        "net.hostname",
        r"node1 resolves on node1 to 127\.0\.1\.1",
        "cp /etc/hosts /tmp/hosts && (echo '127.0.1.1 node1.slurm-lab node1'; cat /tmp/hosts)"
        " > /etc/hosts",
    ),
]

# The rounds: at most one fault per node, and no fault in a check that explains
# another's (the registry's explained_by*: a GPU that does not match explains the
# config files everywhere; a controller fault in munge, clock, config.files, the
# daemon or the ports makes the nodes' same failures its consequences). A fault
# whose repair run must fail first (site_fails) shares its round with none that
# also needs it.
ROUNDS = [
    ("keys", ("munge key differs", "munge key mode 0644")),
    ("Slurm's key", ("slurm key differs", "slurm key mode 0644")),
    ("daemons", ("munged stopped", "slurmd stopped", "slurmdbd stopped")),
    ("files and names", ("slurm.conf edited by hand", "hostname mapped to 127.0.1.1")),
    (
        "fetched copy, mount",
        ("slurmd's fetched slurm.conf out of date", "/shared replaced by a local directory"),
    ),
    (
        "controller's name, clock",
        ("controller name mapped to 127.0.1.1", "munged clock beyond the TTL"),
    ),
    (
        "controller's gres.conf, a port",
        ("gres.conf removed on the controller", "port 6818 blocked"),
    ),
    ("controller's munged, a GPU", ("munged stopped on the controller", "GPU device missing")),
]
BY_NAME = {f.name: f for f in FAULTS}
assert sorted(n for _, names in ROUNDS for n in names) == sorted(BY_NAME), "a fault in no round"
for _, names in ROUNDS:
    assert len({BY_NAME[n].node for n in names}) == len(names), names
    assert sum(bool(BY_NAME[n].site_fails) for n in names) <= 1, names


@pytest.fixture(scope="module", autouse=True)
def fault_tools():
    """iptables and libfaketime on node2 (the fault injectors; not part of the roles)."""
    node2 = host("node2")
    node2.check_output(
        "command -v iptables faketime >/dev/null || (apt-get update -qq"
        " && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends"
        " iptables faketime >/dev/null)"
    )
    yield
    out = ROOT / "results" / f"fault-suite-{SUITE}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(TIMINGS, indent=2) + "\n")
    print(json.dumps(TIMINGS, indent=2))


def test_healthy_cluster_has_no_false_alarm_in_ten_runs(run_playbook) -> None:
    runs = 10 if SUITE == "bookworm" else 2
    walls = []
    for i in range(runs):
        rc, report, wall, out = doctor(run_playbook)
        walls.append(round(wall, 1))
        assert (rc, report["verdict"], report["causes"]) == (0, "PASS", []), (i, out[-3000:])
        assert report["counts"].get("FAIL", 0) == 0
        assert report["counts"].get("WARN", 0) == 0, [
            r for r in report["results"] if r["status"] == "WARN"
        ]
    # Every node has a verdict for every check (SKIP where it does not apply).
    assert {(r["host"], r["check"]) for r in report["results"]} == {
        (p["name"], c) for p in platforms() for c in report["checks"]
    }
    TIMINGS["healthy"] = {"runs": runs, "wall_s": walls}


def test_doctor_works_under_check_mode(run_playbook) -> None:
    rc, report, _, _ = doctor(run_playbook, "--check")
    assert (rc, report["verdict"]) == (0, "PASS")


def test_doctor_prints_the_table_and_no_secret_at_vvv(run_playbook) -> None:
    key = host("ctl").check_output("base64 -w0 /etc/munge/munge.key")
    rc, _, _, out = doctor(run_playbook, "-vvv")
    assert rc == 0
    assert re.search(r"node2 +PASS +PASS", out)
    assert key[:40] not in out
    assert "MUNGE:" not in out  # no credential either


def check_named(fault: Fault, report: dict, out: str) -> None:
    """The doctor's report names this fault as a cause, with its evidence and fix."""
    assert (fault.node, fault.check) in causes(report), (fault.name, causes(report))
    cause = next(
        c for c in report["causes"] if (c["host"], c["check"]) == (fault.node, fault.check)
    )
    assert re.search(fault.evidence, cause["evidence"]), (fault.name, cause["evidence"])
    assert cause["fix"]
    assert re.search(fault.fix, cause["fix"]), (fault.name, cause["fix"])
    assert f"{fault.node} {fault.check}:" in out.split("Doctor FAIL: ", 1)[-1], fault.name
    if fault.wait_down:
        down = next(
            r for r in report["results"] if (r["host"], r["check"]) == (fault.node, "slurm.node")
        )
        assert re.search(r"NOT_RESPONDING|DOWN\*", down["evidence"]), down
        assert "caused_by" in down, down


# This suite's rounds, named by the round (the faults' names are in every message).
ROUNDS_HERE = [
    pytest.param(name, faults, id=name)
    for name, names in ROUNDS
    if (faults := [BY_NAME[n] for n in names if SUITE in BY_NAME[n].suites])
]


@pytest.mark.parametrize(("name", "faults"), ROUNDS_HERE)
def test_faults_are_named_repaired_and_proven(run_playbook, name: str, faults: list[Fault]) -> None:
    heals = {f.name: f.heal for f in faults if f.heal}
    done = False
    injected = time.monotonic()
    for fault in faults:
        host(fault.node).check_output(fault.inject)
    try:
        for fault in faults:
            if fault.wait_down:
                wait_for(
                    lambda f=fault: node_state(f.node).endswith("*"), 120, f"{fault.node} down*"
                )
        rc, report, wall, out = doctor(run_playbook)
        named = time.monotonic() - injected
        assert rc != 0, out[-3000:]
        assert "Doctor FAIL: " in out, out[-3000:]
        for fault in faults:
            check_named(fault, report, out)
        # The causes are the round's faults and nothing else: no node the round left
        # alone is blamed, and every consequence is marked, not listed.
        want = {(f.node, f.check) for f in faults} | {c for f in faults for c in f.also}
        assert set(causes(report)) == want, report["causes"]
        assert len(causes(report)) == len(want), report["causes"]
        timing = {"doctor_s": round(wall, 1), "named_after_s": round(named, 1)}

        start = time.monotonic()
        site = run_playbook("site.yml")
        timing["site_s"] = round(time.monotonic() - start, 1)
        failing = [f for f in faults if f.site_fails]
        if failing:
            assert site.returncode != 0
            assert re.search(failing[0].site_fails, site.stdout), site.stdout[-3000:]
            host(failing[0].node).check_output(heals.pop(failing[0].name))  # the admin mends it
            site = run_playbook("site.yml")
        assert site.returncode == 0, site.stdout[-4000:]
        rc, report, wall, out = doctor(run_playbook)
        assert (rc, report["causes"]) == (0, []), out[-3000:]
        for fault in faults:
            if fault.node != "ctl":  # a compute node takes work again
                assert node_state(fault.node) in ("idle", "mix"), fault.node
        timing["doctor_after_s"] = round(wall, 1)
        TIMINGS[name] = {"faults": [f.name for f in faults], **timing}
        done = True
    finally:
        for name, heal in heals.items():
            host(BY_NAME[name].node).run(heal)
        if not done:  # leave the cluster healthy for the next test
            run_playbook("site.yml")


def test_smoke_fails_fast_naming_a_stopped_slurmd(run_playbook) -> None:
    node2 = host("node2")
    node2.check_output("systemctl stop slurmd")
    try:
        start = time.monotonic()
        done = run_playbook("smoke_train.yml")
        wall = time.monotonic() - start
        assert done.returncode != 0
        assert "Doctor FAIL: node2 services: slurmd.service is inactive" in done.stdout
        assert "DDP smoke job through Slurm" not in done.stdout  # stopped before any launch
        TIMINGS["smoke with slurmd stopped"] = {"fail_s": round(wall, 1)}
    finally:
        node2.check_output("systemctl start slurmd")
    wait_for(lambda: node_state("node2") == "idle", 60, "node2 idle")
