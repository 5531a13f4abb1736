"""Monitoring on the converged cluster: the real Prometheus on ctl scrapes every node's
exporter, and a query through its HTTP API returns each metric family for every node.

Literal expectations (ports 9090/9093/9100, unit names, node names). Prometheus,
Alertmanager and every exporter ask for the password (basic authentication):
refused without it, from a compute node as from anywhere. A fault (the shared
folder hidden on node2 by a tmpfs) turns SharedFilesystemMissing to firing
within its for: (15 s here) plus one collector and one scrape interval; the
node health program drains node2 meanwhile, and Alertmanager's webhook (a
receiver these tests start on node1) gets NodeDrainedByHealth firing, then
resolved once node2 is back. The intervals are the demo inventory's
(inventory/local/group_vars) and the Docker scenarios' (molecule/shared/host_vars/ctl.yml).
"""

from __future__ import annotations

import json
import sys
import time
import urllib.parse

import pytest
from conftest import RESULTS, ROOT, host

# The alerts' for: (monitoring_alert_*_minutes), the collector's and Prometheus'
# intervals, Alertmanager's group_wait and group_interval, in seconds, as set for
# the Docker scenarios; SLACK for this machine's load and the tests' own polling.
FOR_S, COLLECTOR_S, SCRAPE_S, GROUP_WAIT_S, GROUP_INTERVAL_S, SLACK_S = 15, 10, 5, 10, 10, 20
# Every host of the cluster, the login host too (sorted, as the tests compare).
NODES = ["ctl", "login", "node1", "node2"]
COMPUTE = ["node1", "node2"]
# Slurm's nodes: the compute nodes, and the login host's slurmd in no
# partition (Slurm 22.05 has no sackd: roles/slurm_login).
SLURM_NODES = ["login", "node1", "node2"]
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


PASSWORD_FILE = "/etc/prometheus/auth/password"
# GET a URL from a node with python3 (no curl there): prints the HTTP status,
# then the body; the password (a file on that node), if given, as basic auth.
FETCH = r"""
import base64, sys, urllib.error, urllib.request
url, user, pw_file = sys.argv[1:4]
req = urllib.request.Request(url)
if pw_file != "-":
    pw = open(pw_file).read().strip()
    req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode())
try:
    with urllib.request.urlopen(req, timeout=10) as r:
        print(r.status); sys.stdout.write(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code)
"""


def fetch(node: str, url: str, password_file: str = "", user: str = "metrics") -> tuple[int, str]:
    out = host(node).run("python3 -c %s %s %s %s", FETCH, url, user, password_file or "-")
    assert out.rc == 0, out.stderr
    status, _, body = out.stdout.partition("\n")
    return int(status), body


def query(expr: str) -> list[dict]:
    """Prometheus' /api/v1/query, asked on ctl with the password (its cluster address)."""
    url = "http://ctl:9090/api/v1/query?query=" + urllib.parse.quote(expr)
    status, body = fetch("ctl", url, PASSWORD_FILE)
    assert status == 200, body
    doc = json.loads(body)
    assert doc["status"] == "success", doc
    return doc["data"]["result"]


def wait_for(expr: str, check, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while True:
        result = query(expr)
        if check(result) or time.monotonic() > deadline:
            return result
        time.sleep(2)


@pytest.mark.parametrize("name", NODES)
def test_exporter_and_timer_active(name: str) -> None:
    h = host(name)
    assert h.service("prometheus-node-exporter").is_running
    assert h.service("slurm-cluster-textfile.timer").is_running
    assert h.socket("tcp://0.0.0.0:9100").is_listening or h.socket("tcp://:::9100").is_listening
    assert h.file("/usr/local/sbin/slurm-cluster-textfile").mode == 0o755


def test_prometheus_and_alertmanager_on_the_cluster_address() -> None:
    h = host("ctl")
    address = h.check_output("getent ahostsv4 ctl | awk 'NR==1 {print $1}'")
    assert not address.startswith("127.")
    for unit, port in (("prometheus", 9090), ("prometheus-alertmanager", 9093)):
        assert h.service(unit).is_running, unit
        assert h.socket(f"tcp://{address}:{port}").is_listening, unit
        assert not h.socket(f"tcp://0.0.0.0:{port}").is_listening, unit
    assert not h.socket("tcp://0.0.0.0:9094").is_listening  # no HA peers' port
    assert "--storage.tsdb.retention.time=15d" in h.file("/etc/default/prometheus").content_string


def test_metrics_ask_for_the_password_even_from_a_compute_node() -> None:
    """From node1 (where users log in to run jobs): refused without the password,
    answered with it; the password itself is on ctl only, 0640 root:prometheus."""
    api = "http://ctl:9090/api/v1/query?query=up"
    assert fetch("node1", api)[0] == 401
    assert fetch("node1", "http://ctl:9093/api/v2/status")[0] == 401
    assert fetch("node1", "http://node2:9100/metrics")[0] == 401
    # Wrong password: refused too.
    node1 = host("node1")
    node1.run("printf wrong > /tmp/wrong-password")
    assert fetch("node1", api, "/tmp/wrong-password")[0] == 401
    # With the real one (copied for this test only) it answers.
    password = host("ctl").file(PASSWORD_FILE)
    assert (password.user, password.group, password.mode) == ("root", "prometheus", 0o640)
    assert not node1.file(PASSWORD_FILE).exists
    node1.run("umask 077 && echo %s > /tmp/metrics-password", password.content_string.strip())
    try:
        status, body = fetch("node1", api, "/tmp/metrics-password")
        assert status == 200 and json.loads(body)["status"] == "success", body
        assert fetch("node1", "http://node2:9100/metrics", "/tmp/metrics-password")[0] == 200
        assert fetch("node1", "http://ctl:9093/api/v2/status", "/tmp/metrics-password")[0] == 200
    finally:
        node1.run("rm -f /tmp/metrics-password /tmp/wrong-password")


def test_generated_files_pass_promtool_and_amtool() -> None:
    ctl = host("ctl")
    for cmd in (
        "promtool check config /etc/prometheus/prometheus.yml",
        "promtool check rules /etc/prometheus/slurm_cluster.rules.yml",
        "promtool check web-config /etc/prometheus/web-auth.yml",
        "amtool check-config /etc/prometheus/alertmanager.yml",
    ):
        out = ctl.run(cmd)
        assert out.rc == 0, f"{cmd}: {out.stdout}{out.stderr}"
    # The receivers' file holds the relay's password: not world-readable.
    am = ctl.file("/etc/prometheus/alertmanager.yml")
    assert (am.user, am.group, am.mode) == ("root", "prometheus", 0o640)
    assert "email_configs" in am.content_string and "webhook_configs" in am.content_string


def test_every_node_scraped_up() -> None:
    result = wait_for('up{job="node"} == 1', lambda r: len(r) == len(NODES))
    assert sorted(r["metric"]["instance"] for r in result) == NODES


@pytest.mark.parametrize("family", NODE_FAMILIES)
def test_node_family_for_every_node(family: str) -> None:
    result = wait_for(family, lambda r: len({x["metric"]["instance"] for x in r}) == len(NODES))
    assert sorted({r["metric"]["instance"] for r in result}) == NODES


@pytest.mark.parametrize("family", SLURM_FAMILIES)
def test_slurm_family_for_every_compute_node(family: str) -> None:
    result = wait_for(family, lambda r: len({x["metric"].get("node") for x in r}) >= 3)
    assert sorted({r["metric"]["node"] for r in result}) == SLURM_NODES


@pytest.mark.parametrize("family", VERDICT_FAMILIES)
def test_verdict_family_for_every_node(family: str) -> None:
    result = wait_for(family, lambda r: len({x["metric"].get("node") for x in r}) == len(NODES))
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
        # A test before (test_login) stopped and restarted a daemon: the
        # collector's next run (its interval) says PASS again.
        result = wait_for(expr, lambda r: sorted(x["metric"]["instance"] for x in r) == NODES)
        assert sorted(r["metric"]["instance"] for r in result) == NODES, check


def test_rules_loaded_and_quiet() -> None:
    status, body = fetch("ctl", "http://ctl:9090/api/v1/rules", PASSWORD_FILE)
    assert status == 200, body
    rules = json.loads(body)["data"]["groups"][0]["rules"]
    # One rule per alert of the check registry (cluster_checks.py).
    assert len(rules) == 17
    assert all(r["labels"]["check"] for r in rules)
    assert [r["name"] for r in rules if r["state"] == "firing"] == []


# The webhook's receiver (monitoring_alert_webhook_url in molecule/shared/
# host_vars/ctl.yml): each POST's body, with the receipt time, one JSON per line.
SINK = r"""
import http.server, json, time
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with open("/tmp/alerts.jsonl", "a") as out:
            out.write(json.dumps({"received": time.time(), "body": body}) + "\n")
        self.send_response(200); self.end_headers()
http.server.HTTPServer(("", 9999), Sink).serve_forever()
"""


def webhook_calls(alert: str, node: str, status: str) -> list[dict]:
    """The webhook's receipts naming this alert on this node with this status."""
    out = host("node1").run("cat /tmp/alerts.jsonl 2>/dev/null")
    calls = []
    for line in out.stdout.splitlines():
        doc = json.loads(line)
        for a in doc["body"]["alerts"]:
            labels = a["labels"]
            if (
                labels.get("alertname") == alert
                and labels.get("node") == node
                and a["status"] == status
            ):
                calls.append({"received": doc["received"], **a})
    return calls


def wait_webhook(alert: str, node: str, status: str, timeout: float) -> list[dict]:
    deadline = time.monotonic() + timeout
    while not (calls := webhook_calls(alert, node, status)) and time.monotonic() < deadline:
        time.sleep(2)
    return calls


def health_events(node: str) -> list[dict]:
    out = host(node).run("cat /var/lib/slurm-cluster/health/events.jsonl 2>/dev/null")
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def test_shared_fs_fault_fires_alert_and_reaches_the_webhook() -> None:
    """Hide /shared on node2 (tmpfs over it): SharedFilesystemMissing fires, the health
    program drains node2, the webhook gets NodeDrainedByHealth firing; heal: resolved."""
    node1, node2 = host("node1"), host("node2")
    node1.run("systemctl stop alert-sink; rm -f /tmp/alerts.jsonl")
    assert node1.run("systemd-run --unit=alert-sink --collect python3 -c %s", SINK).rc == 0
    assert node2.run("mount -t tmpfs tmpfs /shared").rc == 0
    start = time.monotonic()
    try:
        # The health program's run now, as slurmd starts it every
        # cluster_health_interval (its own timing: molecule/topology/tests/test_watch.py).
        # rc 1: a check failed (2: slurmd's own run held the lock; it drains the same).
        health = node2.run("/usr/local/sbin/cluster-health")
        assert health.rc in (1, 2), (health.rc, health.stdout, health.stderr)
        result = wait_for(
            'ALERTS{alertname="SharedFilesystemMissing",alertstate="firing"}',
            lambda r: any(x["metric"].get("instance") == "node2" for x in r),
            timeout=240,
        )
        took = time.monotonic() - start
        assert any(x["metric"].get("instance") == "node2" for x in result), result
        # for: + collector + scrape + evaluation (one scrape interval).
        assert took <= FOR_S + COLLECTOR_S + 2 * SCRAPE_S + SLACK_S, took
        print(f"SharedFilesystemMissing firing {took:.0f} s after the fault")
        # The drain's alert reaches the webhook: for: + collector, scrape,
        # evaluation + group_wait after the health program's drain.
        firing = wait_webhook("NodeDrainedByHealth", "node2", "firing", timeout=180)
        assert firing, "no NodeDrainedByHealth firing for node2 reached the webhook"
        drains = [e for e in health_events("node2") if e["event"] == "drain"]
        assert drains, health_events("node2")
        drained_at = max(e["time"] for e in drains if e["time"] <= firing[0]["received"])
        lag = firing[0]["received"] - drained_at
        print(f"NodeDrainedByHealth at the webhook {lag:.0f} s after the drain")
        assert lag <= FOR_S + COLLECTOR_S + 2 * SCRAPE_S + GROUP_WAIT_S + SLACK_S, lag
    finally:
        node2.run("umount /shared")
        # The node health program drained node2 meanwhile: one run resumes it
        # now (as site.yml would), so the next tests find it in service.
        node2.run("/usr/local/sbin/cluster-health")
    back = time.time()
    resolved = wait_webhook("NodeDrainedByHealth", "node2", "resolved", timeout=120)
    node1.run("systemctl stop alert-sink")
    assert resolved, "no resolved NodeDrainedByHealth for node2 reached the webhook"
    took = resolved[0]["received"] - back
    print(f"resolved at the webhook {took:.0f} s after node2's resume")
    assert took <= COLLECTOR_S + 2 * SCRAPE_S + GROUP_INTERVAL_S + SLACK_S, took


def test_receivers_rewritten_without_showing_a_secret(run_playbook, tmp_path) -> None:
    """The receivers' file lost: site.yml --tags monitoring --diff -vvv writes it again,
    and neither the relay's password nor the metrics password appears in its output.
    The report it writes lists node2's drain and resume of the fault above (Chromium)."""
    ctl = host("ctl")
    password = ctl.file(PASSWORD_FILE).content_string.strip()
    assert ctl.run("rm -f /etc/prometheus/alertmanager.yml").rc == 0
    result = run_playbook("site.yml", "--tags", "monitoring", "--diff", "-vvv")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "relay-test-password" not in out
    assert password not in out
    assert "relay-test-password" in ctl.file("/etc/prometheus/alertmanager.yml").content_string
    assert ctl.service("prometheus-alertmanager").is_running
    # The monitoring play read node2's health files itself: the report, as
    # Chromium renders it, lists the drain and the resume with time and cause.
    drains = [e for e in health_events("node2") if e["event"] in ("drain", "resume")][-2:]
    assert [e["event"] for e in drains] == ["drain", "resume"], drains
    sys.path.insert(0, str(ROOT / "tests"))
    from test_cluster_report import CHROMIUM, Browser

    if CHROMIUM is None:
        pytest.fail("chromium absent (make test-tools installs it)")
    browser = Browser(CHROMIUM, tmp_path / "profile")
    try:
        browser.open((RESULTS / "cluster-report.html").as_uri())
        rows = browser.value(
            "[...document.querySelectorAll('#events tr')].slice(1)"
            ".map(r => [...r.cells].map(c => c.innerText))"
        )
    finally:
        browser.close()
    for event in drains:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(event["time"]))
        assert [when, "node2", event["event"]] in [r[:3] for r in rows], (event, rows)
    drain_row = next(r for r in rows if r[1:3] == ["node2", "drain"])
    assert "shared" in drain_row[3], drain_row
