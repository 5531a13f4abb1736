"""The cluster watches itself: the node health program, run by slurmd every
HealthCheckInterval (10 s here), drains a failing node with its named cause
and resumes it when healed, while jobs keep being submitted to every node.

Runs after test_topology.py (file order): by then each node has run the
program twenty times and more on a healthy cluster, and none may have drained.
Each fault is made on node2 (one GPU, in both partitions) the way it happens
on a real node; the figures land in results/fault-suite-health.json.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "results"
INTERVAL = 10  # cluster_health_interval in this scenario's inventory
NODES = ("ctl", "node1", "node2")
CONTAINER = {"ctl": "ctl", "node1": "gpu-big", "node2": "node2.lab.example"}
FAULT_NODE = "node2"
STATE = "/var/lib/slurm-cluster/health"


def sh(node: str, script: str, check: bool = True) -> str:
    done = subprocess.run(
        ["docker", "exec", CONTAINER[node], "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"{node}: {script}: rc {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def node_line(node: str) -> tuple[str, str]:
    out = sh("ctl", f"sinfo --noheader --Node --nodes={node} --format='%t|%E' | head -1").strip()
    state, _sep, reason = out.partition("|")
    return state, reason


# Faults on node2: (name, inject, heal, words the drain reason must hold).
FAULTS = [
    (
        "shared.fs local folder",
        "mkdir -p /var/local-shared && mount --bind /var/local-shared /shared",
        "umount /shared",
        "health: shared.fs: /shared is ",
    ),
    (
        "gpu.count device removed",
        "rm -f /dev/nvidia0",
        "/usr/local/sbin/fake-gpu",
        "health: gpu.count: 0 GPU devices",
    ),
    (
        "disk.free spool full",
        "d=/var/lib/slurm/slurmd; "
        "cp -a $d/. /run/spool-copy 2>/dev/null || mkdir -p /run/spool-copy; "
        "mount -t tmpfs -o size=64m,mode=0755 tmpfs $d && cp -a /run/spool-copy/. $d/ && "
        "head -c 62M /dev/zero > $d/fill",
        "umount -l /var/lib/slurm/slurmd; rm -rf /run/spool-copy",
        "health: disk.free: /var/lib/slurm/slurmd has ",
    ),
    # slurmd cannot take slurmctld's RPC then: cluster-health.timer runs it.
    (
        "munge.local munged stopped",
        "systemctl stop munge",
        "systemctl start munge",
        "health: munge.local: munged is inactive",
    ),
    (
        "gpu.xid 79",
        "echo \"[ 99.1] NVRM: Xid (PCI:0000:00:00): 79, pid='<unknown>', name=<unknown>, "
        'GPU has fallen off the bus." >> /var/log/fake-kmsg',
        # A fatal Xid is kept until acknowledged (the line alone going does not heal it).
        ": > /var/log/fake-kmsg && /usr/local/sbin/cluster-health --ack-xid >/dev/null",
        "health: gpu.xid: Xid 79 on 0000:00:00 (GPU has fallen off the bus)",
    ),
    (
        "gpu.ecc uncorrectable",
        "cp /etc/fake-gpu/query-gpu.csv /run/query-gpu.csv && "
        "sed -i 's/Enabled, 0,/Enabled, 3,/' /etc/fake-gpu/query-gpu.csv",
        "cp /run/query-gpu.csv /etc/fake-gpu/query-gpu.csv",
        "health: gpu.ecc: GPU 0 (00000000:00:00.0) has 3 uncorrectable ECC errors",
    ),
]


class JobStream:
    """sbatch jobs on every node, one per node every 3 s (as the proof account),
    and what runs where, polled every second from squeue."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.seen: dict[str, tuple[str, float]] = {}  # job id -> (node, first seen running)
        self.threads = [threading.Thread(target=self._submit), threading.Thread(target=self._watch)]

    def _submit(self) -> None:
        while not self.stop.is_set():
            for node in NODES:
                sh(
                    "ctl",
                    f"cd /tmp && runuser -u clusterproof -- sbatch -Q -p main -w {node} -t 1 "
                    "-o /dev/null -e /dev/null -J watch --wrap 'sleep 1'",
                    check=False,
                )
            self.stop.wait(3)

    def _watch(self) -> None:
        while not self.stop.is_set():
            out = sh("ctl", "squeue -h -n watch -t R -o '%i %N'", check=False)
            now = time.time()
            for line in out.splitlines():
                job, _sep, node = line.partition(" ")
                self.seen.setdefault(job, (node, now))
            self.stop.wait(1)

    def started(self, node: str, after: float, before: float) -> list[str]:
        return [j for j, (n, t) in self.seen.items() if n == node and after < t < before]

    def __enter__(self) -> JobStream:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()
        sh("ctl", "scancel -n watch", check=False)
        # Nothing left behind: a job still ending on node2 would hold the next
        # test's drain in "drng" (a job cancelled as it started can take
        # slurmd's KillWait, 30 s, to end).
        try:
            wait_for(lambda: not sh("ctl", "squeue -h -n watch -o %i", check=False).strip(), 90)
        except AssertionError as e:
            raise AssertionError(f"watch jobs still queued after scancel: {queue()}") from e


def queue() -> str:
    """Every job Slurm holds and node2's line, for a failure's message."""
    jobs = sh("ctl", "squeue -h -t all -o '%i %j %u %T %M %N %r'", check=False)
    node = sh("ctl", f"scontrol show node {FAULT_NODE} | grep -E 'State|Reason'", check=False)
    return f"\n{jobs}{node}"


def wait_for(pred, limit: float) -> float:
    """Seconds until pred() holds (polled every 0.5 s), or fail after limit."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if pred():
            return time.monotonic() - start
        time.sleep(0.5)
    raise AssertionError(f"not within {limit} s")


def health_state(node: str) -> dict:
    return json.loads(sh(node, f"cat {STATE}/state.json"))


def events(node: str) -> list[dict]:
    out = sh(node, f"cat {STATE}/events.jsonl 2>/dev/null || true")
    return [json.loads(line) for line in out.splitlines()]


def test_a_healthy_cluster_runs_the_program_without_a_false_drain() -> None:
    # Twenty runs per node at least (slurmd runs it every INTERVAL s).
    wait_for(lambda: min(health_state(n).get("runs", 0) for n in NODES) >= 20, 25 * INTERVAL)
    figures = {}
    for node in NODES:
        assert events(node) == [], f"{node} drained itself on a healthy cluster"
        state = health_state(node)
        assert state["fails"] == 0, state
        times = state["run_s"]
        figures[node] = {
            "runs": state["runs"],
            "median_s": statistics.median(times),
            "max_s": max(times),
        }
        last = json.loads(sh(node, f"cat {STATE}/last.json"))
        assert last["verdict"] == "PASS", last
        assert max(times) < 5, (node, times)
    (RESULTS / "fault-suite-health-runs.json").write_text(json.dumps(figures, indent=1))
    print(figures)


def test_each_fault_drains_its_node_with_the_cause_and_heals() -> None:
    figures = []
    assert node_line(FAULT_NODE) == ("idle", "none")
    with JobStream() as jobs:
        time.sleep(4)
        for name, inject, heal, words in FAULTS:
            t0 = time.time()
            sh(FAULT_NODE, inject)
            try:
                drain_s = wait_for(
                    lambda: node_line(FAULT_NODE)[1].startswith("health:"), INTERVAL + 10
                )
                state, reason = node_line(FAULT_NODE)
                assert state.rstrip("*") in ("drain", "drng"), (name, state, reason)
                assert reason.startswith(words), (name, reason)
                drained_at = time.time()
                time.sleep(INTERVAL / 2)
                for other in ("ctl", "node1"):
                    # One read: the job stream flips a node between idle and alloc,
                    # through comp (a job of the stream ending there: still in service).
                    state, why = node_line(other)
                    assert state in ("idle", "mix", "alloc", "comp") and why == "none", (
                        other,
                        state,
                        why,
                    )
            finally:
                t1 = time.time()
                sh(FAULT_NODE, heal)
            resume_s = wait_for(
                lambda: not node_line(FAULT_NODE)[1].startswith("health:"), INTERVAL + 10
            )
            resumed_at = time.time()
            assert node_line(FAULT_NODE)[0] not in ("drain", "drng"), name
            # No job started on node2 while drained; the other nodes kept running jobs.
            assert jobs.started(FAULT_NODE, drained_at + 1, t1) == [], name
            assert jobs.started("ctl", t0, resumed_at) or jobs.started("node1", t0, resumed_at), (
                name
            )
            figures.append(
                {
                    "fault": name,
                    "reason": reason,
                    "drain_s": round(drain_s, 1),
                    "resume_s": round(resume_s, 1),
                }
            )
            print(figures[-1])
    (RESULTS / "fault-suite-health.json").write_text(json.dumps(figures, indent=1))


def test_an_admin_drain_during_a_fault_is_left_after_the_fix() -> None:
    _name, inject, heal, words = FAULTS[1]
    # No job on node2 (a job there holds an admin's drain in "drng").
    wait_for(lambda: not sh("ctl", f"squeue -h -w {FAULT_NODE} -o %i").strip(), 90)
    sh(FAULT_NODE, inject)
    try:
        wait_for(lambda: node_line(FAULT_NODE)[1].startswith(words), INTERVAL + 10)
        sh(
            "ctl",
            f"scontrol update nodename={FAULT_NODE} state=drain reason='swap the GPU, back Monday'",
        )
    finally:
        sh(FAULT_NODE, heal)
    try:
        # Two runs after the fix: the admin's drain stays, untouched.
        time.sleep(2 * INTERVAL + 2)
        line = node_line(FAULT_NODE)
        assert line == ("drain", "swap the GPU, back Monday"), (line, queue())
        last = json.loads(sh(FAULT_NODE, f"cat {STATE}/last.json"))
        assert (last["verdict"], last["action"]) == ("PASS", "kept")
    finally:
        sh("ctl", f"scontrol update nodename={FAULT_NODE} state=resume")


@pytest.mark.parametrize("node", NODES)
def test_the_program_lists_its_checks(node: str) -> None:
    out = sh(node, "/usr/local/sbin/cluster-health --list")
    ids = [line.split()[0] for line in out.splitlines()]
    assert ids[:5] == ["munge.local", "clock.sync", "config.fetched", "shared.fs", "disk.free"]


KMSG = "/var/log/fake-kmsg"
# The kernel's segfault report of a program a user named after the driver's
# message: the task name (15 characters) first, the file name later in the line.
FORGED = (
    "[ 2001.5] NVRM: Xid (PCI:[4242]: segfault at 0 ip 00007f00 sp 00007ffd error 14 "
    "in NVRM: Xid (PCI:0000:00:00.0): 79 x[55d0a000+1000]"
)
REAL = (
    "[ 2002.1] NVRM: Xid (PCI:0000:00:00): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus."
)
XID_REASON = "health: gpu.xid: Xid 79 on 0000:00:00 (GPU has fallen off the bus)"


def xid_metric(node: str) -> dict[str, str]:
    """The collector's gpu.xid series on the node, run now: {status: value}."""
    sh(node, "systemctl start slurm-cluster-textfile.service")
    out = sh(node, "cat /var/lib/prometheus/node-exporter/slurm_cluster_node.prom")
    found = {}
    for line in out.splitlines():
        if line.startswith("cluster_check_status{") and 'check="gpu.xid"' in line:
            status = line.split('status="', 1)[1].split('"', 1)[0]
            found[status] = line.rsplit(" ", 1)[1]
    return found


def test_a_forged_xid_line_does_not_drain_and_a_real_one_stays_until_acknowledged() -> None:
    figures: dict = {}
    # The test before resumed node2: idle* until slurmctld's next ping reaches it.
    wait_for(lambda: node_line(FAULT_NODE) == ("idle", "none"), 60)
    sh(FAULT_NODE, f"echo {json.dumps(FORGED)} >> {KMSG}")
    try:
        # Two runs of the program later: still in service, nothing kept.
        time.sleep(2 * INTERVAL + 2)
        assert node_line(FAULT_NODE) == ("idle", "none")
        xid = {c["id"]: c for c in json.loads(sh(FAULT_NODE, f"cat {STATE}/last.json"))["checks"]}
        assert xid["gpu.xid"]["status"] == "PASS", xid["gpu.xid"]
        assert xid_metric(FAULT_NODE)["FAIL"] == "0"
        # The driver's own message: drained with the cause, alert and drain agree.
        t0 = time.time()
        sh(FAULT_NODE, f"echo {json.dumps(REAL)} >> {KMSG}")
        figures["drain_s"] = round(
            wait_for(lambda: node_line(FAULT_NODE)[1].startswith(XID_REASON), INTERVAL + 10), 1
        )
        assert xid_metric(FAULT_NODE)["FAIL"] == "1"
        # The line leaves the log (the ring buffer moved on): the node stays drained.
        sh(FAULT_NODE, f": > {KMSG}")
        time.sleep(2 * INTERVAL + 2)
        assert node_line(FAULT_NODE)[1].startswith(XID_REASON), node_line(FAULT_NODE)
        assert xid_metric(FAULT_NODE)["FAIL"] == "1"
        # The acknowledgement, by an admin through sudo: logged with who and when.
        ack = time.time()
        sh(FAULT_NODE, "SUDO_USER=alice /usr/local/sbin/cluster-health --ack-xid", check=False)
        figures["resume_s"] = round(
            wait_for(lambda: not node_line(FAULT_NODE)[1].startswith("health:"), INTERVAL + 10), 1
        )
        acks = [e for e in events(FAULT_NODE) if e["event"] == "ack-xid"]
        assert acks and acks[-1]["by"] == "alice as root", acks
        assert acks[-1]["time"] >= ack - 1
        assert "Xid 79 on 0000:00:00" in acks[-1]["reason"]
        assert "gpu.xid acknowledged by alice as root" in sh(
            FAULT_NODE, "journalctl -t cluster-health --no-pager -n 5", check=False
        )
        assert xid_metric(FAULT_NODE)["FAIL"] == "0"
        figures["fault_to_named_s"] = figures["drain_s"]
        figures["held_after_line_gone"] = True
        print(figures, time.time() - t0)
        (RESULTS / "fault-suite-xid.json").write_text(json.dumps(figures, indent=1))
    finally:
        sh(FAULT_NODE, f": > {KMSG}; /usr/local/sbin/cluster-health --ack-xid", check=False)
