"""The cluster report: one self-contained HTML page and the verdict metrics, from results/.

Controller-side code (the lookup plugin gpulab.slurm_cluster.cluster_report
and tools/cluster_report.py call it). Inputs, all optional, read from the
control machine's results folder of one cluster (cluster_results_dir,
results/<cluster_name>/ by default):

- ``doctor-latest.json`` and the last ``doctor-*.json`` runs (the doctor's
  node x check verdicts, roles/cluster_doctor);
- ``history.jsonl`` (one line per smoke run and partition: step time per
  node, busbw per node set, pass/fail per node, the nodes that awaited
  acceptance; roles/smoke_train) and the newest ``<run id>.json`` verdict;
- ``health/<node>.json`` and ``health/<node>-events.jsonl``: the node health
  program's last verdict and its drains, resumes and reason changes, which
  the monitoring play reads on every compute node and keeps there
  (cluster_health_files.py);
- PNG charts and bench JSON in the bench folder, when given.

The page has no script and loads nothing: styles, SVG charts and images are
inline, so it opens from a file on the shared filesystem or a laptop. It
fits a laptop's window (1,280 pixels): the doctor's check names stand
upright over one-letter cells, in tables of at most CHECK_COLUMNS checks;
long words wrap; charts shrink.
Standard library only.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import re
from pathlib import Path

from ansible_collections.gpulab.slurm_cluster.plugins.plugin_utils import report_svg

STATUS_ORDER = {"FAIL": 0, "WARN": 1, "PASS": 2, "SKIP": 3}
DOCTOR_RUNS = 40
HISTORY_LINES = 200
EVENT_ROWS = 100
# The colour of a health event: drains red, resumes green, reason changes amber.
ACTION_STATUS = {"drain": "FAIL", "flapping": "FAIL", "resume": "PASS"}
CHECK_COLUMNS = 32
RUN_ID_RE = re.compile(r"(\d{8}T\d{6}Z)")


# --------------------------------------------------------------------------- inputs


def run_time(run_id: str) -> float | None:
    """Unix time of a run id such as 20261202T045540Z-12195."""
    match = RUN_ID_RE.search(run_id or "")
    if not match:
        return None
    stamp = dt.datetime.strptime(match.group(1), "%Y%m%dT%H%M%SZ")
    return stamp.replace(tzinfo=dt.UTC).timestamp()


def iso_time(text: str) -> float | None:
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except (TypeError, ValueError):
        return None


def _json(path: Path) -> dict | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _jsonl(path: Path, limit: int) -> list[dict]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()[-limit:]
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out


def load(results_dir: str | os.PathLike, bench_dir: str | os.PathLike | None = None) -> dict:
    """Everything the report and the metrics read, as plain data."""
    results = Path(results_dir)
    doctor_files = sorted(results.glob("doctor-2*.json"))[-DOCTOR_RUNS:]
    doctor_runs = [d for d in (_json(p) for p in doctor_files) if d]
    latest = _json(results / "doctor-latest.json") or (doctor_runs[-1] if doctor_runs else None)
    smoke_files = sorted(p for p in results.glob("2*.json") if RUN_ID_RE.match(p.name))
    smoke = _json(smoke_files[-1]) if smoke_files else None
    health: dict[str, dict] = {}
    events: list[dict] = []
    for path in sorted((results / "health").glob("*.json")):
        doc = _json(path)
        if doc:
            health[str(doc.get("node") or path.stem)] = doc
    for path in sorted((results / "health").glob("*-events.jsonl")):
        node = path.name.removesuffix("-events.jsonl")
        events.extend({"node": node, **ev} for ev in _jsonl(path, HISTORY_LINES))
    charts: list[tuple[str, bytes]] = []
    bench: list[dict] = []
    if bench_dir and Path(bench_dir).is_dir():
        for path in sorted(Path(bench_dir).glob("**/*.png")):
            if path.stat().st_size <= 2_000_000:
                charts.append((str(path.relative_to(bench_dir)), path.read_bytes()))
        for path in sorted(Path(bench_dir).glob("results/*.json"))[-5:]:
            doc = _json(path)
            if doc:
                bench.append({"file": path.name, **doc})
    return {
        "doctor": latest,
        "doctor_runs": doctor_runs,
        "history": _jsonl(results / "history.jsonl", HISTORY_LINES),
        "smoke": smoke,
        "health": health,
        "events": events,
        "charts": charts,
        "bench": bench,
    }


# --------------------------------------------------------------------------- judgement


def node_figures(history: list[dict]) -> dict[str, list[tuple[float, float | None, float | None]]]:
    """node -> [(time, step seconds, busbw bytes/s)] over the history.

    A node's busbw is that of the largest node set it belonged to in the run.
    """
    series: dict[str, list[tuple[float, float | None, float | None]]] = {}
    for run in history:
        when = iso_time(run.get("time", "")) or run_time(run.get("run_id", ""))
        figures = run.get("figures") or {}
        if when is None:
            continue
        step = figures.get("step_ms") or {}
        sets = figures.get("busbw_Gbps") or {}
        for node in run.get("nodes") or []:
            best = None
            best_size = 0
            for members, value in sets.items():
                names = members.split(",")
                if node in names and len(names) > best_size:
                    best, best_size = value, len(names)
            ms = step.get(node)
            series.setdefault(node, []).append(
                (
                    when,
                    None if ms is None else ms / 1000,
                    None if best is None else best * 1e9 / 8,
                )
            )
    return series


def acceptance(history: list[dict]) -> dict[str, tuple[float, bool]]:
    """node -> (time, passed) of the last run that judged it while it awaited acceptance."""
    out: dict[str, tuple[float, bool]] = {}
    for run in history:
        when = iso_time(run.get("time", "")) or run_time(run.get("run_id", "")) or 0.0
        passed = run.get("node_passed") or {}
        for node in run.get("pending") or []:
            if node in passed:
                out[node] = (when, bool(passed[node]))
    return out


def problems(data: dict) -> list[dict]:
    """What is wrong now, worst first: [{node, check, status, text, source}]."""
    found = []
    doctor = data.get("doctor") or {}
    for r in doctor.get("results") or []:
        if r.get("status") in ("FAIL", "WARN"):
            text = r.get("evidence", "")
            if r.get("caused_by"):
                text += f" (caused by {r['caused_by']})"
            found.append(
                {
                    "node": r.get("host", "?"),
                    "check": r.get("check", "?"),
                    "status": r["status"],
                    "text": text,
                    "fix": r.get("fix", ""),
                    "source": "doctor",
                    "primary": not r.get("caused_by"),
                }
            )
    for node, doc in sorted((data.get("health") or {}).items()):
        for check in doc.get("checks") or []:
            if check.get("status") in ("FAIL", "WARN"):
                found.append(
                    {
                        "node": node,
                        "check": check.get("id", "?"),
                        "status": check["status"],
                        "text": check.get("message", ""),
                        "fix": check.get("fix", ""),
                        "source": "health",
                        "primary": True,
                    }
                )
    smoke = data.get("smoke") or {}
    for part in smoke.get("nodes") or []:
        for node, verdict in sorted((part.get("nodes") or {}).items()):
            if not verdict.get("passed", True):
                found.append(
                    {
                        "node": node,
                        "check": f"smoke.{part.get('partition', '?')}",
                        "status": "FAIL",
                        "text": verdict.get("cause", ""),
                        "fix": "",
                        "source": f"smoke job {smoke.get('run_id', '')}",
                        "primary": True,
                    }
                )
    found.sort(key=lambda p: (STATUS_ORDER[p["status"]], not p["primary"], p["node"], p["check"]))
    return found


# --------------------------------------------------------------------------- metrics


def _escape(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _line(name: str, value: float, **labels: object) -> str:
    text = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    number = str(int(value)) if float(value) == int(value) else repr(float(value))
    return f"{name}{{{text}}} {number}" if text else f"{name} {number}"


def verdict_metrics(data: dict) -> str:
    """The doctor's, the smoke job's and the acceptance gate's verdicts, as text exposition."""
    fams: list[tuple[str, str, str, list[str]]] = []

    def fam(name: str, kind: str, help_text: str) -> list[str]:
        lines: list[str] = []
        fams.append((name, kind, help_text, lines))
        return lines

    doctor = data.get("doctor") or {}
    lines = fam(
        "cluster_doctor_check_status",
        "gauge",
        "1 for the status of each node and check in the doctor's last report.",
    )
    # By node and check: the file stays the same when only the order of the
    # report's hosts or checks differs (a rerun then writes nothing).
    results = sorted(
        doctor.get("results") or [], key=lambda r: (str(r.get("host", "")), str(r.get("check", "")))
    )
    for r in results:
        if r.get("status") in STATUS_ORDER:
            lines.append(
                _line(
                    "cluster_doctor_check_status",
                    1,
                    node=r.get("host", ""),
                    check=r.get("check", ""),
                    status=r["status"],
                )
            )
    if doctor:
        fam(
            "cluster_doctor_verdict_ok", "gauge", "1 when the doctor's last verdict was PASS."
        ).append(_line("cluster_doctor_verdict_ok", int(doctor.get("verdict") == "PASS")))
        # No run time: an unchanged verdict leaves the file unchanged (the
        # node exporter's node_textfile_mtime_seconds says when it changed).
    gate = acceptance(data.get("history") or [])
    lines = fam(
        "cluster_acceptance_passed",
        "gauge",
        "1 when the node passed the last smoke job that judged it for acceptance.",
    )
    stamps = fam(
        "cluster_acceptance_last_timestamp_seconds",
        "gauge",
        "When the node was last judged for acceptance (Unix time).",
    )
    for node, (when, passed) in sorted(gate.items()):
        lines.append(_line("cluster_acceptance_passed", int(passed), node=node))
        stamps.append(_line("cluster_acceptance_last_timestamp_seconds", when, node=node))
    smoke = data.get("smoke")
    if smoke:
        fam("cluster_smoke_passed", "gauge", "1 when the last smoke job passed.").append(
            _line("cluster_smoke_passed", int(smoke.get("verdict") == "PASS"))
        )
        when = run_time(smoke.get("run_id", ""))
        if when:
            fam(
                "cluster_smoke_last_run_timestamp_seconds",
                "gauge",
                "When the last smoke job ran (Unix time).",
            ).append(_line("cluster_smoke_last_run_timestamp_seconds", when))
    steps = fam(
        "cluster_smoke_step_seconds",
        "gauge",
        "The node's training step time in its last smoke run that measured it.",
    )
    busbw = fam(
        "cluster_smoke_busbw_bytes_per_second",
        "gauge",
        "all_reduce bus bandwidth of the largest node set with this node, last smoke run.",
    )
    for node, points in sorted(node_figures(data.get("history") or []).items()):
        step = [p[1] for p in points if p[1] is not None]
        bw = [p[2] for p in points if p[2] is not None]
        if step:
            steps.append(_line("cluster_smoke_step_seconds", round(step[-1], 6), node=node))
        if bw:
            busbw.append(_line("cluster_smoke_busbw_bytes_per_second", round(bw[-1]), node=node))
    out = []
    for name, kind, help_text, lines in fams:
        if lines:
            out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *lines]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- html

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em;margin:0 0 .4em}h2{font-size:1.15em;margin:1.4em 0 .4em}
.banner{padding:.8em 1em;border-radius:6px;color:#fff;font-size:1.1em}
.banner.bad{background:#d62728}.banner.ok{background:#2ca02c}.banner.warn{background:#c77800}
.banner ul{margin:.3em 0 0;padding-left:1.2em}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 6px;text-align:left}
td.s{color:#fff;font-weight:600;text-align:center}
.FAIL{background:#d62728}.WARN{background:#ff9f1c}.PASS{background:#2ca02c}.SKIP{background:#b0b0b0}
.muted{color:#666}svg text{font:11px system-ui,sans-serif}
svg,img{max-width:100%;height:auto}
table.doctor{margin-bottom:.6em}table.doctor td.s{padding:2px 4px;min-width:1em}
table.doctor th.c{vertical-align:bottom;padding:4px 2px;font-weight:500}
table.doctor th.c span{display:inline-block;writing-mode:vertical-rl;transform:rotate(180deg);
white-space:nowrap;font-size:12px}
table.doctor th.n{max-width:14em}p,li,td{overflow-wrap:anywhere}td.n{overflow-wrap:normal}
td.t,td.s,#events th{white-space:nowrap}
"""


_e = report_svg.escape
_fmt_time = report_svg.utc_minute
line_chart = report_svg.line_chart


def _iso(when: float) -> str:
    """UTC, ISO 8601 to the second: 2026-12-02T04:55:40Z."""
    return dt.datetime.fromtimestamp(when, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def banner(found: list[dict]) -> str:
    fails = [p for p in found if p["status"] == "FAIL" and p["primary"]] or [
        p for p in found if p["status"] == "FAIL"
    ]
    if fails:
        items = "".join(
            f"<li><b>FAIL: {_e(p['node'])} — {_e(p['check'])}</b>: {_e(p['text'])}"
            + (f" <i>Fix: {_e(p['fix'])}</i>" if p["fix"] else "")
            + f" <span>({_e(p['source'])})</span></li>"
            for p in fails
        )
        nodes = ", ".join(sorted({p["node"] for p in fails}))
        return (
            f'<div class="banner bad" id="verdict"><b>Cluster FAIL</b> on {_e(nodes)}'
            f"<ul>{items}</ul></div>"
        )
    warns = [p for p in found if p["status"] == "WARN"]
    if warns:
        items = "".join(
            f"<li>WARN: {_e(p['node'])} — {_e(p['check'])}: {_e(p['text'])}</li>" for p in warns
        )
        return (
            '<div class="banner warn" id="verdict"><b>Cluster PASS with warnings</b>'
            f"<ul>{items}</ul></div>"
        )
    return (
        '<div class="banner ok" id="verdict"><b>Cluster PASS</b>: no failing node or check.</div>'
    )


def doctor_table(doctor: dict | None) -> str:
    if not doctor or not doctor.get("results"):
        return '<p class="muted">No doctor report in this results folder yet.</p>'
    checks = list(doctor.get("checks") or [])
    for r in doctor["results"]:
        if r.get("check") not in checks:
            checks.append(r.get("check"))
    hosts = list(doctor.get("hosts") or sorted({r.get("host") for r in doctor["results"]}))
    cells: dict[tuple[str, str], list[dict]] = {}
    for r in doctor["results"]:
        cells.setdefault((r.get("host"), r.get("check")), []).append(r)
    tables = []
    # Check names upright, one letter a cell (its tooltip: check, status,
    # evidence), at most CHECK_COLUMNS checks a table: a laptop's width.
    for start in range(0, len(checks), CHECK_COLUMNS):
        part = checks[start : start + CHECK_COLUMNS]
        head = "".join(f'<th class="c" title="{_e(c)}"><span>{_e(c)}</span></th>' for c in part)
        rows = []
        for h in hosts:
            tds = []
            for c in part:
                rs = cells.get((h, c))
                if not rs:
                    tds.append("<td></td>")
                    continue
                worst = min(rs, key=lambda r: STATUS_ORDER.get(r.get("status"), 9))
                status = worst.get("status", "?")
                title = f"{h} {c}: {status}: " + " | ".join(r.get("evidence", "") for r in rs)
                tds.append(f'<td class="s {_e(status)}" title="{_e(title)}">{_e(status[:1])}</td>')
            rows.append(f'<tr><th class="n">{_e(h)}</th>{"".join(tds)}</tr>')
        name = ' id="doctor"' if start == 0 else ""
        tables.append(
            f'<table class="doctor"{name}><tr><th class="n">node</th>{head}</tr>'
            f"{''.join(rows)}</table>"
        )
    causes = [
        r
        for r in doctor["results"]
        if r.get("status") in ("FAIL", "WARN") and not r.get("caused_by")
    ]
    cause_list = "".join(
        f"<li><b>{_e(r['status'])} {_e(r.get('host'))} {_e(r.get('check'))}</b>: "
        f"{_e(r.get('evidence', ''))}"
        + (f" — fix: {_e(r['fix'])}" if r.get("fix") else "")
        + "</li>"
        for r in causes
    )
    when = _fmt_time(run_time(doctor.get("run_id", "")))
    return (
        f"<p>Doctor run {_e(doctor.get('run_id', '?'))} ({when}): "
        f"<b>{_e(doctor.get('verdict', '?'))}</b></p>"
        + "".join(tables)
        + '<p class="muted">P PASS, W WARN, F FAIL, S SKIP; hover a cell for its evidence.</p>'
        + (f"<ul>{cause_list}</ul>" if cause_list else "")
    )


def timeline(data: dict) -> str:
    """Per node, one mark per doctor run, smoke run and health event, on one time axis."""
    marks: dict[str, list[tuple[float, str, str]]] = {}
    for run in data.get("doctor_runs") or []:
        when = run_time(run.get("run_id", ""))
        if when is None:
            continue
        worst: dict[str, str] = {}
        for r in run.get("results") or []:
            h, s = r.get("host"), r.get("status", "SKIP")
            if STATUS_ORDER.get(s, 9) < STATUS_ORDER.get(worst.get(h, "SKIP"), 9):
                worst[h] = s
        for h, s in worst.items():
            marks.setdefault(h, []).append((when, s, f"doctor {s}"))
    for run in data.get("history") or []:
        when = iso_time(run.get("time", "")) or run_time(run.get("run_id", ""))
        for node, passed in (run.get("node_passed") or {}).items():
            if when:
                s = "PASS" if passed else "FAIL"
                marks.setdefault(node, []).append((when, s, f"smoke {s}"))
    for ev in data.get("events") or []:
        kind = ev.get("event", "")
        if isinstance(ev.get("time"), (int, float)) and ev.get("node"):
            s = ACTION_STATUS.get(kind, "WARN")
            marks.setdefault(ev["node"], []).append(
                (ev["time"], s, f"{kind}: {ev.get('reason', '')}")
            )
    return report_svg.timeline(marks)


def events_table(events: list[dict]) -> str:
    """The node health program's drains, resumes and reason changes: time, node, action, cause."""
    timed = sorted(
        (ev for ev in events if isinstance(ev.get("time"), (int, float))),
        key=lambda ev: (ev["time"], str(ev.get("node", ""))),
    )
    if not timed:
        return (
            '<p class="muted" id="events">No drain or resume by the node health program '
            "in this results folder.</p>"
        )
    shown = timed[-EVENT_ROWS:]
    rows = []
    for ev in shown:
        action = str(ev.get("event", "?"))
        cause = str(ev.get("reason", ""))
        if ev.get("by"):
            cause += f" (by {ev['by']})"
        rows.append(
            f'<tr><td class="t">{_e(_iso(ev["time"]))}</td>'
            f'<td class="n">{_e(ev.get("node", "?"))}</td>'
            f'<td class="s {ACTION_STATUS.get(action, "WARN")}">{_e(action)}</td>'
            f"<td>{_e(cause)}</td></tr>"
        )
    more = f" (the last {len(shown)} of {len(timed)})" if len(timed) > len(shown) else ""
    return (
        f'<p class="muted">Oldest first{more}; times in UTC.</p><table id="events"><tr>'
        "<th>time (UTC)</th><th>node</th><th>action</th><th>cause</th></tr>"
        f"{''.join(rows)}</table>"
    )


def smoke_section(smoke: dict | None) -> str:
    if not smoke:
        return '<p class="muted">No smoke job verdict in this results folder yet.</p>'
    verdict = smoke.get("verdict", "?")
    when = _fmt_time(run_time(smoke.get("run_id", "")))
    causes = []
    for part in smoke.get("nodes") or []:
        causes += part.get("causes") or []
    modes = ", ".join(
        f"{m.get('partition', '?')}/{m.get('mode', '?')} {'PASS' if m.get('passed') else 'FAIL'}"
        for m in smoke.get("modes") or []
    )
    items = "".join(f"<li>{_e(c)}</li>" for c in causes)
    return (
        f'<p id="smoke">Smoke job {_e(smoke.get("run_id", "?"))} ({when}): '
        f'<b class="{_e(verdict)}" style="color:#fff;padding:0 4px">{_e(verdict)}</b> '
        f"{_e(modes)}</p>" + (f"<ul>{items}</ul>" if items else "")
    )


def bench_section(data: dict) -> str:
    parts = []
    for doc in data.get("bench") or []:
        figures = {k: v for k, v in doc.items() if isinstance(v, (int, float))}
        if figures:
            rows = "".join(
                f"<tr><td>{_e(k)}</td><td>{v:.4g}</td></tr>" for k, v in sorted(figures.items())
            )
            parts.append(f"<h3>{_e(doc['file'])}</h3><table>{rows}</table>")
    for name, png in data.get("charts") or []:
        b64 = base64.b64encode(png).decode()
        parts.append(
            f'<figure><img alt="{_e(name)}" '
            f'src="data:image/png;base64,{b64}">'
            f"<figcaption>{_e(name)}</figcaption></figure>"
        )
    return "".join(parts) or '<p class="muted">No bench or scale results given.</p>'


def render_html(data: dict, title: str = "Slurm cluster report") -> str:
    found = problems(data)
    figures = node_figures(data.get("history") or [])
    steps = {n: [(p[0], p[1]) for p in pts if p[1] is not None] for n, pts in figures.items()}
    bws = {n: [(p[0], p[2]) for p in pts if p[2] is not None] for n, pts in figures.items()}
    gate = acceptance(data.get("history") or [])
    gate_rows = "".join(
        f'<tr><td>{_e(n)}</td><td class="s {"PASS" if ok else "FAIL"}">'
        f"{'PASS' if ok else 'FAIL'}</td>"
        f"<td>{_e(_fmt_time(t))}</td></tr>"
        for n, (t, ok) in sorted(gate.items())
    )
    health_rows = "".join(
        f'<tr><td>{_e(n)}</td><td class="s {_e(d.get("verdict", "SKIP"))}">'
        f"{_e(d.get('verdict', '?'))}</td>"
        f"<td>{_e(d.get('slurm_state', ''))}</td><td>{_e(d.get('reason', ''))}</td></tr>"
        for n, d in sorted((data.get("health") or {}).items())
    )
    body = [
        f"<h1>{_e(title)}</h1>",
        banner(found),
        "<h2>Last smoke job</h2>",
        smoke_section(data.get("smoke")),
        "<h2>Drains and resumes (node health program)</h2>",
        events_table(data.get("events") or []),
        "<h2>Node \u00d7 check (cluster doctor)</h2>",
        doctor_table(data.get("doctor")),
    ]
    if health_rows:
        body += [
            "<h2>Node health program, last run</h2>",
            "<table><tr><th>node</th><th>verdict</th><th>Slurm state</th><th>reason</th></tr>"
            f"{health_rows}</table>",
        ]
    body += [
        "<h2>Health and drain timeline</h2>",
        timeline(data),
    ]
    if gate_rows:
        body.append(
            "<h2>Acceptance</h2><table><tr><th>node</th><th>last result</th><th>when</th></tr>"
            f"{gate_rows}</table>"
        )
    body += [
        "<h2>Per-node figures over the history</h2>",
        line_chart(steps, "Training step time per node", "ms", 1000.0),
        line_chart(bws, "all_reduce busbw per node", "Gbit/s", 8 / 1e9),
        "<h2>Bench and scale</h2>",
        bench_section(data),
    ]
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>"
        + "".join(body)
        + "</body></html>\n"
    )


def _replace(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write(
    results_dir: str | os.PathLike,
    out: str | os.PathLike | None = None,
    bench_dir: str | os.PathLike | None = None,
) -> tuple[Path, str]:
    """Write the HTML report (default results/cluster-report.html); its path and the metrics."""
    data = load(results_dir, bench_dir)
    path = Path(out) if out else Path(results_dir) / "cluster-report.html"
    _replace(path, render_html(data))
    return path, verdict_metrics(data)


def keep_metrics(path: str | os.PathLike, metrics: str) -> bool:
    """Write the verdict metrics to path unless it holds them already; True when it changed."""
    path = Path(path)
    try:
        if path.read_text(encoding="utf-8") == metrics:
            return False
    except OSError:
        pass
    _replace(path, metrics)
    return True
