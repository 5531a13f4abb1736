"""Monitoring on the converged cluster: the real Prometheus on ctl scrapes every node's
exporter, and a query through its HTTP API returns each metric family for every node.

Literal expectations (ports 9090/9100, unit names, node names). A fault (the
shared folder hidden on node2 by a tmpfs) turns SharedFilesystemMissing to
firing within its for: (2 min) plus one collector and one scrape interval.
"""

from __future__ import annotations

import json
import time
import urllib.parse

import pytest
from conftest import host

NODES = ["ctl", "node1", "node2"]
COMPUTE = ["node1", "node2"]
# Families every node exports (label instance = the inventory name).
NODE_FAMILIES = [
    "node_load1",
    "cluster_check_status",
    "cluster_textfile_part_ok",
]
# Families the controller exports per Slurm node (label node).
SLURM_FAMILIES = [
    "slurm_node_state",
    "slurm_node_drained",
    "slurm_node_down",
    "slurm_node_cpus",
    "slurm_node_cpus_allocated",
    "slurm_node_gpus",
    "slurm_node_gpus_allocated",
]
# Verdicts per node from the control machine (doctor's report: every host).
VERDICT_FAMILIES = ["cluster_doctor_check_status"]


def query(expr: str) -> list[dict]:
    """Prometheus' /api/v1/query on ctl, asked from ctl itself (no curl needed)."""
    url = "http://127.0.0.1:9090/api/v1/query?query=" + urllib.parse.quote(expr)
    out = host("ctl").run(
        "python3 -c 'import sys, urllib.request; "
        "sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' %s",
        url,
    )
    assert out.rc == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["status"] == "success", doc
    return doc["data"]["result"]


def wait_for(expr: str, check, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while True:
        result = query(expr)
        if check(result) or time.monotonic() > deadline:
            return result
        time.sleep(5)


@pytest.mark.parametrize("name", NODES)
def test_exporter_and_timer_active(name: str) -> None:
    h = host(name)
    assert h.service("prometheus-node-exporter").is_running
    assert h.service("slurm-cluster-textfile.timer").is_running
    assert h.socket("tcp://0.0.0.0:9100").is_listening or h.socket("tcp://:::9100").is_listening
    assert h.file("/usr/local/sbin/slurm-cluster-textfile").mode == 0o755


def test_prometheus_on_the_controller() -> None:
    h = host("ctl")
    assert h.service("prometheus").is_running
    assert h.socket("tcp://0.0.0.0:9090").is_listening
    assert "--storage.tsdb.retention.time=15d" in h.file("/etc/default/prometheus").content_string


def test_every_node_scraped_up() -> None:
    result = wait_for('up{job="node"} == 1', lambda r: len(r) == 3)
    assert sorted(r["metric"]["instance"] for r in result) == NODES


@pytest.mark.parametrize("family", NODE_FAMILIES)
def test_node_family_for_every_node(family: str) -> None:
    result = wait_for(family, lambda r: len({x["metric"]["instance"] for x in r}) == 3)
    assert sorted({r["metric"]["instance"] for r in result}) == NODES


@pytest.mark.parametrize("family", SLURM_FAMILIES)
def test_slurm_family_for_every_compute_node(family: str) -> None:
    result = wait_for(family, lambda r: len({x["metric"].get("node") for x in r}) >= 2)
    assert sorted({r["metric"]["node"] for r in result}) == COMPUTE


@pytest.mark.parametrize("family", VERDICT_FAMILIES)
def test_verdict_family_for_every_node(family: str) -> None:
    result = wait_for(family, lambda r: len({x["metric"].get("node") for x in r}) == 3)
    assert sorted({r["metric"]["node"] for r in result}) == NODES


def test_cluster_wide_families() -> None:
    for expr in (
        'slurm_daemon_up{daemon="slurmctld"} == 1',
        'slurm_daemon_up{daemon="slurmdbd"} == 1',
        "slurm_nodes",
        "slurm_nodes_unavailable",
        "cluster_doctor_verdict_ok",
    ):
        assert wait_for(expr, bool), expr


def test_munge_and_shared_fs_healthy() -> None:
    for check in ("munge.local", "shared.fs", "services"):
        expr = f'cluster_check_status{{check="{check}",status="PASS"}} == 1'
        assert sorted(r["metric"]["instance"] for r in query(expr)) == NODES, check


def test_rules_loaded_and_quiet() -> None:
    out = host("ctl").run(
        "python3 -c 'import urllib.request; print(urllib.request.urlopen("
        '"http://127.0.0.1:9090/api/v1/rules", timeout=10).read().decode())\''
    )
    rules = json.loads(out.stdout)["data"]["groups"][0]["rules"]
    # One rule per alert of the check registry (cluster_checks.py).
    assert len(rules) == 17
    assert all(r["labels"]["check"] for r in rules)
    assert [r["name"] for r in rules if r["state"] == "firing"] == []


def test_shared_fs_fault_fires_alert() -> None:
    """Hide /shared on node2 (tmpfs over it), wait for the alert, then heal."""
    node2 = host("node2")
    assert node2.run("mount -t tmpfs tmpfs /shared").rc == 0
    start = time.monotonic()
    try:
        result = wait_for(
            'ALERTS{alertname="SharedFilesystemMissing",alertstate="firing"}',
            lambda r: any(x["metric"].get("instance") == "node2" for x in r),
            timeout=240,
        )
        took = time.monotonic() - start
        assert any(x["metric"].get("instance") == "node2" for x in result), result
        # for: 1 min (inventory/local group_vars) + collector 15 s + scrape 15 s
        # + evaluation 15 s (and this loop's 5 s).
        assert took <= 60 + 15 + 15 + 15 + 10, took
        print(f"SharedFilesystemMissing firing {took:.0f} s after the fault")
    finally:
        node2.run("umount /shared")
        # The node health program drained node2 meanwhile: one run resumes it
        # now (as site.yml would), so the next tests find it in service.
        node2.run("/usr/local/sbin/cluster-health")
