"""The cluster report's SVG charts: the node timeline and the per-node line charts.

Inline SVG with a viewBox, so the page's CSS shrinks a chart to a narrow
window. Part of the cluster report (cluster_report.py); standard library only.
"""

from __future__ import annotations

import datetime as dt
import html

COLOURS = {"FAIL": "#d62728", "WARN": "#ff9f1c", "PASS": "#2ca02c", "SKIP": "#b0b0b0"}
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


def escape(text: object) -> str:
    return html.escape(str(text), quote=True)


_e = escape


def utc_minute(when: float | None) -> str:
    if when is None:
        return "?"
    return dt.datetime.fromtimestamp(when, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


_fmt_time = utc_minute


def timeline(marks: dict[str, list[tuple[float, str, str]]]) -> str:
    """node -> [(time, status, label)] as one row of coloured marks per node."""
    if not marks:
        return '<p class="muted">No runs recorded yet.</p>'
    times = [m[0] for ms in marks.values() for m in ms]
    t0, t1 = min(times), max(times)
    span = max(t1 - t0, 1.0)
    width, left, row = 900, 80, 22
    height = row * len(marks) + 30
    parts = [
        f'<svg id="timeline" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img">'
    ]
    for i, node in enumerate(sorted(marks)):
        y = 10 + i * row
        parts.append(f'<text x="0" y="{y + 12}">{_e(node)}</text>')
        for when, status, label in sorted(marks[node]):
            x = left + (when - t0) / span * (width - left - 10)
            parts.append(
                f'<rect x="{x:.1f}" y="{y}" width="6" height="14" fill="{COLOURS[status]}">'
                f"<title>{_e(_fmt_time(when))} {_e(label)}</title></rect>"
            )
    parts.append(f'<text x="{left}" y="{height - 4}">{_e(_fmt_time(t0))}</text>')
    parts.append(
        f'<text x="{width - 10}" y="{height - 4}" text-anchor="end">{_e(_fmt_time(t1))}</text>'
    )
    parts.append("</svg>")
    legend = " ".join(
        f'<span class="{s}" style="color:#fff;padding:0 4px">{s}</span>'
        for s in ("PASS", "WARN", "FAIL")
    )
    return "".join(parts) + f"<p>{legend} doctor runs, smoke runs and health events.</p>"


PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


def line_chart(
    series: dict[str, list[tuple[float, float]]], title: str, unit: str, scale: float = 1.0
) -> str:
    points = [(t, v) for s in series.values() for t, v in s]
    if not points:
        return f'<p class="muted">{_e(title)}: no figures in the history yet.</p>'
    t0, t1 = min(p[0] for p in points), max(p[0] for p in points)
    vmax = max(p[1] for p in points) * scale or 1.0
    width, height, left, bottom = 640, 220, 60, 30
    span = max(t1 - t0, 1.0)

    def xy(t: float, v: float) -> str:
        x = left + (t - t0) / span * (width - left - 110)
        y = 10 + (1 - v * scale / vmax) * (height - bottom - 10)
        return f"{x:.1f},{y:.1f}"

    parts = [
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">'
        f"<title>{_e(title)}</title>"
    ]
    parts.append(
        f'<line x1="{left}" y1="{height - bottom}" x2="{width - 110}" '
        f'y2="{height - bottom}" stroke="#999"/>'
    )
    parts.append(f'<text x="2" y="14">{vmax:.3g} {_e(unit)}</text>')
    parts.append(f'<text x="2" y="{height - bottom}">0</text>')
    for i, (name, pts) in enumerate(sorted(series.items())):
        colour = PALETTE[i % len(PALETTE)]
        path = " ".join(xy(t, v) for t, v in sorted(pts))
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
        for t, v in pts:
            x, y = xy(t, v).split(",")
            parts.append(
                f'<circle cx="{x}" cy="{y}" r="2.5" fill="{colour}"><title>{_e(name)} '
                f"{_e(_fmt_time(t))}: {v * scale:.4g} {_e(unit)}</title></circle>"
            )
        parts.append(f'<text x="{width - 100}" y="{20 + 14 * i}" fill="{colour}">{_e(name)}</text>')
    parts.append(f'<text x="{left}" y="{height - 8}">{_e(_fmt_time(t0))}</text>')
    parts.append(
        f'<text x="{width - 110}" y="{height - 8}" text-anchor="end">{_e(_fmt_time(t1))}</text>'
    )
    parts.append("</svg>")
    return f"<h3>{_e(title)}</h3>" + "".join(parts)
