"""The cluster report: what it says, the verdict metrics, and the page in a real browser.

The browser test drives Debian's headless chromium over the DevTools protocol
on a pipe (--remote-debugging-pipe: no port, no websocket library), reads the
page's text, every console message and exception, and saves a screenshot to
results/. It needs the `chromium` package (make test's host step installs
it; .ci/run runs make test) and skips, saying so, where it is absent.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.gpulab.slurm_cluster.plugins.plugin_utils import (  # noqa: E402
    cluster_report,
)

FIXTURE = ROOT / "tests" / "fixtures" / "monitoring"
HEALTHY = FIXTURE / "results"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PROMTOOL = shutil.which("promtool")


def faulty_results(tmp_path: Path) -> Path:
    """The healthy results with node2's shared filesystem gone: the doctor's and health's FAIL."""
    out = tmp_path / "results"
    shutil.copytree(HEALTHY, out)
    doctor_path = next(out.glob("doctor-2*.json"))
    doctor = json.loads(doctor_path.read_text())
    for r in doctor["results"]:
        if r["host"] == "node2" and r["check"] == "shared.fs":
            r.update(
                status="FAIL",
                evidence="/shared/.cluster is missing on node2 (another filesystem is mounted)",
                fix="mount the shared filesystem on node2 (site.yml --tags shared_fs)",
            )
    doctor["verdict"] = "FAIL"
    doctor_path.write_text(json.dumps(doctor))
    (out / "health").mkdir()
    shutil.copy(FIXTURE / "health-last-fail.json", out / "health" / "node2.json")
    (out / "health" / "node2-events.jsonl").write_text(
        json.dumps(
            {
                "time": 1796188200.5,
                "node": "node2",
                "event": "drain",
                "reason": "health: shared.fs: /shared/.cluster is missing",
            }
        )
        + "\n"
    )
    return out


# --------------------------------------------------------------------------- judgement


def test_healthy_results_have_no_problem() -> None:
    data = cluster_report.load(HEALTHY)
    assert data["doctor"]["verdict"] == "PASS"
    assert cluster_report.problems(data) == []
    assert "Cluster PASS" in cluster_report.banner([])


def test_faulty_results_name_node_and_check_first(tmp_path: Path) -> None:
    found = cluster_report.problems(cluster_report.load(faulty_results(tmp_path)))
    assert [(p["node"], p["check"], p["status"]) for p in found][:2] == [
        ("node2", "shared.fs", "FAIL"),
        ("node2", "shared.fs", "FAIL"),
    ]
    assert {p["source"] for p in found} == {"doctor", "health"}
    html = cluster_report.render_html(cluster_report.load(faulty_results(tmp_path / "b")))
    banner = html[html.index('id="verdict"') : html.index("</div>")]
    assert "FAIL: node2 — shared.fs" in banner
    assert "mount the shared filesystem on node2" in banner


def test_node_figures_take_the_largest_node_set() -> None:
    history = [
        {
            "time": "2026-12-02T02:32:18+00:00",
            "nodes": ["node1", "node2", "node3"],
            "figures": {
                "step_ms": {"node1": 2.5, "node2": 4.0},
                "busbw_Gbps": {"node1,node2": 8.0, "node1,node2,node3": 4.0},
            },
        }
    ]
    series = cluster_report.node_figures(history)
    assert series["node1"][0][1:] == (0.0025, 0.5e9)
    assert series["node3"][0][1:] == (None, 0.5e9)


def test_acceptance_is_the_last_judgement_while_pending() -> None:
    history = [
        {"run_id": "20261202T010000Z-1", "pending": ["node3"], "node_passed": {"node3": False}},
        {"run_id": "20261202T020000Z-2", "pending": [], "node_passed": {"node3": True}},
        {"run_id": "20261202T030000Z-3", "pending": ["node3"], "node_passed": {"node3": True}},
        {"run_id": "20261202T040000Z-4", "pending": ["node4"], "node_passed": {"node4": False}},
    ]
    gate = cluster_report.acceptance(history)
    assert gate == {
        "node3": (cluster_report.run_time("20261202T030000Z-3"), True),
        "node4": (cluster_report.run_time("20261202T040000Z-4"), False),
    }


def test_verdict_metrics_of_the_fault(tmp_path: Path) -> None:
    text = cluster_report.verdict_metrics(cluster_report.load(faulty_results(tmp_path)))
    assert 'cluster_doctor_check_status{check="shared.fs",node="node2",status="FAIL"} 1' in text
    assert 'cluster_doctor_check_status{check="shared.fs",node="node1",status="PASS"} 1' in text
    assert "cluster_doctor_verdict_ok 0" in text
    assert "cluster_smoke_passed 1" in text
    assert 'cluster_acceptance_passed{node="node2"} 1' in text
    assert 'cluster_acceptance_passed{node="node3"} 1' in text
    assert 'cluster_smoke_step_seconds{node="node1"} ' in text
    assert 'cluster_smoke_busbw_bytes_per_second{node="node2"} ' in text
    # No value that changes on every doctor run: an unchanged verdict is an unchanged file.
    assert "cluster_doctor_last_run_timestamp_seconds" not in text
    again = cluster_report.verdict_metrics(cluster_report.load(tmp_path / "results"))
    assert again == text


def test_verdict_metrics_do_not_follow_the_hosts_order(tmp_path: Path) -> None:
    """The same verdicts with the hosts in another order: the same file (a rerun writes nothing)."""
    data = cluster_report.load(faulty_results(tmp_path))
    results = data["doctor"]["results"]
    assert len({r["host"] for r in results}) > 1
    shuffled = {**data, "doctor": {**data["doctor"], "results": list(reversed(results))}}
    assert cluster_report.verdict_metrics(shuffled) == cluster_report.verdict_metrics(data)


@pytest.mark.skipif(PROMTOOL is None, reason="promtool absent (Debian package prometheus)")
@pytest.mark.parametrize("faulty", [False, True], ids=["healthy", "faulty"])
def test_verdict_metrics_pass_promtool(tmp_path: Path, faulty: bool) -> None:
    results = faulty_results(tmp_path) if faulty else HEALTHY
    text = cluster_report.verdict_metrics(cluster_report.load(results))
    out = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_report_is_self_contained(tmp_path: Path) -> None:
    path, _ = cluster_report.write(faulty_results(tmp_path), tmp_path / "r.html", ROOT / "bench")
    html = path.read_text()
    for needle in ("<script", "http://", "https://", 'src="//', "@import", "url("):
        assert needle not in html, needle
    assert 'id="doctor"' in html and 'id="timeline"' in html and 'id="smoke"' in html
    assert "Training step time per node" in html and "<polyline" in html
    assert "data:image/png;base64," in html  # bench/scale-3-8-16.png inline


def test_report_is_cheap(tmp_path: Path) -> None:
    """The playbooks write it on every run: well under the 0.3 s a rerun may grow by."""
    results = faulty_results(tmp_path)
    cluster_report.write(results)
    start = time.perf_counter()
    for _ in range(5):
        cluster_report.write(results, None, ROOT / "bench")
    assert (time.perf_counter() - start) / 5 < 0.15


def test_cli_writes_page_and_metrics(tmp_path: Path) -> None:
    results = faulty_results(tmp_path)
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "cluster_report.py"), "--results", str(results),
         "--prom", str(tmp_path / "v.prom")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(results / "cluster-report.html")
    assert "FAIL: node2 — shared.fs" in (results / "cluster-report.html").read_text()
    assert 'node="node2",status="FAIL"' in (tmp_path / "v.prom").read_text()


def test_lookup_plugin_through_ansible(tmp_path: Path) -> None:
    results = faulty_results(tmp_path)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"), ANSIBLE_NOCOLOR="1")
    expr = (
        f"{{{{ query('gpulab.slurm_cluster.cluster_report', '{results}', "
        f"verdicts_file='{tmp_path / 'v.prom'}') | first | to_json }}}}"
    )
    out = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "localhost", "-c", "local", "-o",
         "-m", "ansible.builtin.debug", "-a", f"msg={expr}"],
        capture_output=True, text=True, check=False, env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "cluster_doctor_check_status" in out.stdout
    assert (results / "cluster-report.html").is_file()
    assert (tmp_path / "v.prom").read_text().startswith("# HELP cluster_doctor_check_status")


def test_lookup_plugin_documented() -> None:
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"), ANSIBLE_NOCOLOR="1")
    out = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-doc"), "-t", "lookup", "--json",
         "gpulab.slurm_cluster.cluster_report"],
        capture_output=True, text=True, check=False, env=env, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    entry = json.loads(out.stdout)["gpulab.slurm_cluster.cluster_report"]
    assert entry["doc"]["short_description"] and entry["examples"] and entry["return"]


# --------------------------------------------------------------------------- browser


class Browser:
    """Headless chromium over the DevTools protocol on fds 3/4 (NUL-terminated JSON)."""

    def __init__(self, binary: str, profile: Path) -> None:
        to_child_r, self._w = os.pipe()
        self._r, from_child_w = os.pipe()
        low = (to_child_r, from_child_w)

        def child_fds() -> None:  # fds 3 and 4, as --remote-debugging-pipe wants them
            high = [os.dup(fd) for fd in low]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self.proc = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-dev-shm-usage", "--remote-debugging-pipe", f"--user-data-dir={profile}",
             "about:blank"],
            preexec_fn=child_fds, pass_fds=(3, 4, *low),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []
        self.session = ""

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._r], [], [], left)[0]:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the pipe: " + self.proc.stderr.read().decode())
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, timeout: float = 30, **params: object) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        for ev in self.events:
            if ev.get("method") == method:
                return ev
        while True:
            ev = self._read(deadline)
            self.events.append(ev)
            if ev.get("method") == method:
                return ev

    def open(self, url: str, width: int = 1280) -> None:
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width, height=900, deviceScaleFactor=1, mobile=False,
        )  # fmt: skip
        self.events.clear()
        self.call("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")

    def text(self) -> str:
        return self.value("document.body.innerText")

    def value(self, expression: str) -> object:
        """An expression's value, evaluated by DevTools (the page itself has no script)."""
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return res["result"]["value"]

    def console_errors(self) -> list[str]:
        errors = []
        for ev in self.events:
            p = ev.get("params", {})
            if ev.get("method") == "Runtime.consoleAPICalled" and p.get("type") in (
                "error",
                "assert",
            ):
                errors.append(
                    " ".join(str(a.get("value", a.get("description"))) for a in p["args"])
                )
            elif ev.get("method") == "Runtime.exceptionThrown":
                details = p["exceptionDetails"]
                described = details.get("exception", {}).get("description", "")
                errors.append(f"{details.get('text', 'exception')} {described}".strip())
            elif ev.get("method") == "Log.entryAdded" and p["entry"].get("level") == "error":
                errors.append(p["entry"].get("text", ""))
        return errors

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(data["data"]))

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.call("Browser.close", timeout=5)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._w)
        os.close(self._r)


@pytest.fixture
def browser(tmp_path: Path):
    if CHROMIUM is None:
        pytest.skip("chromium absent (Debian package chromium; make test's host step installs it)")
    b = Browser(CHROMIUM, tmp_path / "profile")
    try:
        yield b
    finally:
        b.close()


def test_browser_sees_console_errors(browser: Browser, tmp_path: Path) -> None:
    """The check below can fail: a page with a console error and a failed load is caught."""
    page = tmp_path / "bad.html"
    page.write_text(
        "<html><body>x<script>console.error('boom'); undefinedCall();</script>"
        '<img src="missing.png"></body></html>'
    )
    browser.open(page.as_uri())
    errors = browser.console_errors()
    assert any("boom" in e for e in errors), errors
    assert any("undefinedCall" in e for e in errors), errors
    assert any("ERR_FILE_NOT_FOUND" in e for e in errors), errors


@pytest.mark.parametrize("faulty", [False, True], ids=["healthy", "faulty"])
def test_report_in_chromium(browser: Browser, tmp_path: Path, faulty: bool) -> None:
    results = faulty_results(tmp_path) if faulty else HEALTHY
    page, _ = cluster_report.write(results, tmp_path / "cluster-report.html", ROOT / "bench")
    browser.open(page.as_uri())
    text = browser.text()
    assert browser.console_errors() == []
    name = "faulty" if faulty else "healthy"
    shot = ROOT / "results" / f"cluster-report-{name}.png"
    shot.parent.mkdir(exist_ok=True)
    shot.unlink(missing_ok=True)
    browser.screenshot(shot)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    first_lines = "\n".join(text.splitlines()[:4])
    if faulty:
        assert "Cluster FAIL on node2" in first_lines
        assert "FAIL: node2 — shared.fs" in first_lines
        assert "/shared/.cluster is missing" in first_lines
    else:
        assert "Cluster PASS" in first_lines
        assert "FAIL:" not in text
    assert "Node \u00d7 check" in text and "node1" in text


def wide_results(tmp_path: Path, checks: int = 45, nodes: int = 24) -> Path:
    """A doctor report of many long-named checks on many nodes, and a drain and a resume."""
    out = tmp_path / "results"
    shutil.copytree(HEALTHY, out)
    doctor_path = next(out.glob("doctor-2*.json"))
    doctor = json.loads(doctor_path.read_text())
    names = [f"gpu.interconnect.check_number_{i:02d}" for i in range(checks)]
    hosts = [f"gpu-node-{i:03d}.rack-a.example.org" for i in range(nodes)]
    doctor.update(checks=names, hosts=hosts, verdict="FAIL")
    doctor["results"] = [
        {"host": h, "check": c, "status": "FAIL" if (h, c) == (hosts[1], names[3]) else "PASS",
         "evidence": "/a/very/long/path/that/does/not/break/anywhere/" * 4, "fix": ""}
        for h in hosts for c in names
    ]  # fmt: skip
    doctor_path.write_text(json.dumps(doctor))
    (out / "health").mkdir()
    events = [
        {"time": 1796188200.5, "node": hosts[1], "event": "drain",
         "reason": "health: gpu.xid: Xid 79 on 0000:3b:00.0 (GPU fell off the bus)" * 3},
        {"time": 1796188800.0, "node": hosts[1], "event": "resume", "reason": ""},
    ]  # fmt: skip
    (out / "health" / f"{hosts[1]}-events.jsonl").write_text(
        "".join(json.dumps(e, sort_keys=True) + "\n" for e in events)
    )
    return out


@pytest.mark.parametrize("width", [1400, 1280])
def test_report_fits_a_laptop_window(browser: Browser, tmp_path: Path, width: int) -> None:
    """Nothing scrolls out of view: the page is no wider than the window, every table inside."""
    page, _ = cluster_report.write(wide_results(tmp_path), tmp_path / "r.html", ROOT / "bench")
    browser.open(page.as_uri(), width=width)
    assert browser.console_errors() == []
    assert browser.value("window.innerWidth") == width
    assert browser.value("document.documentElement.scrollWidth") <= width
    rights = browser.value(
        "[...document.querySelectorAll('table,svg,img,li,p')]"
        ".map(e => Math.ceil(e.getBoundingClientRect().right))"
    )
    assert rights and max(rights) <= width, max(rights)
    # 45 checks: two doctor tables, every check named upright in a header.
    assert browser.value("document.querySelectorAll('table.doctor').length") == 2
    assert browser.value("document.querySelectorAll('table.doctor th.c').length") == 45
    if width == 1280:
        shot = ROOT / "results" / "cluster-report-wide.png"
        shot.parent.mkdir(exist_ok=True)
        browser.screenshot(shot)


def test_report_in_chromium_lists_drain_and_resume(browser: Browser, tmp_path: Path) -> None:
    """The drain and the resume, each with its node, UTC time and cause, as the page shows them."""
    page, _ = cluster_report.write(wide_results(tmp_path), tmp_path / "r.html")
    browser.open(page.as_uri())
    rows = browser.value(
        "[...document.querySelectorAll('#events tr')].slice(1)"
        ".map(r => [...r.cells].map(c => c.innerText))"
    )
    node = "gpu-node-001.rack-a.example.org"
    assert [r[:3] for r in rows] == [
        ["2026-12-02T05:10:00Z", node, "drain"],
        ["2026-12-02T05:20:00Z", node, "resume"],
    ]
    assert rows[0][3].startswith("health: gpu.xid: Xid 79 on 0000:3b:00.0")
    text = browser.text()
    # Next to the verdicts: after the banner and the smoke job, before the doctor's table.
    assert (
        text.index("Last smoke job")
        < text.index("Drains and resumes")
        < text.index("Node \u00d7 check")
    )
