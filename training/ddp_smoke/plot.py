"""``plot``: one PNG from one or more ``report`` JSON files (one per launch mode).

Left: all_reduce busbw against message size, one line per report. Right: each
rank's compute throughput, one group of bars per report. matplotlib is imported
only here and only when called; without it the plot is skipped with a note,
because nodes and minimal controllers do not have it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

Record = dict[str, Any]

BAR_WIDTH = 0.8


def plot_reports(paths: list[Path], out: Path) -> Record:
    """Draw ``paths`` into ``out``; the outcome says what was drawn, skipped or wrong."""
    reports, problems = _load(paths)
    outcome: Record = {"plot": None, "reports": [_name(r) for r in reports], "error": None}
    outcome["ignored"] = problems
    if not reports:
        outcome["error"] = "no report with measurements to plot"
        return outcome
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError as exc:
        outcome["skipped"] = f"matplotlib is not installed ({exc}): no plot written"
        return outcome
    figure, (left, right) = pyplot.subplots(1, 2, figsize=(13, 4.8))
    _draw_sweep(left, reports)
    _draw_throughput(right, reports)
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=100)
    pyplot.close(figure)
    outcome["plot"] = str(out)
    return outcome


def _load(paths: list[Path]) -> tuple[list[Record], list[str]]:
    reports: list[Record] = []
    problems: list[str] = []
    for path in paths:
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(f"{path}: unreadable: {exc}")
            continue
        if not isinstance(body, dict) or not isinstance(body.get("measurements"), dict):
            verdict = body.get("verdict") if isinstance(body, dict) else None
            problems.append(f"{path}: no measurements (verdict {verdict})")
            continue
        reports.append(body)
    return reports, problems


def _name(report: Record) -> str:
    return str(report.get("label") or report.get("mode") or "run")


def _draw_sweep(axes: Any, reports: list[Record]) -> None:  # noqa: ANN401 - matplotlib Axes
    drawn = False
    for report in reports:
        sweep = report["measurements"].get("sweep")
        rows = sweep.get("rows") if isinstance(sweep, dict) else None
        if not rows:
            continue
        sizes = [row["bytes"] for row in rows]
        axes.plot(sizes, [row["busbw_GBps"] for row in rows], marker="o", label=_name(report))
        drawn = True
    axes.set_xscale("log", base=2)
    axes.set_xlabel("message size (bytes)")
    axes.set_ylabel("all_reduce busbw (GB/s)")
    axes.set_title("all_reduce bus bandwidth")
    axes.grid(True, which="both", alpha=0.3)
    if drawn:
        axes.legend()
    else:
        axes.text(0.5, 0.5, "no sweep measured", ha="center", transform=axes.transAxes)


def _draw_throughput(axes: Any, reports: list[Record]) -> None:  # noqa: ANN401 - matplotlib Axes
    series = [(report, _throughput_rows(report)) for report in reports]
    series = [(report, rows) for report, rows in series if rows]
    from matplotlib.ticker import MaxNLocator  # plot_reports has checked matplotlib

    width = BAR_WIDTH / max(1, len(series))
    for index, (report, rows) in enumerate(series):
        # Each rank's bars sit side by side, centred on the rank number.
        ranks = [row["rank"] - BAR_WIDTH / 2 + (index + 0.5) * width for row in rows]
        values = [row["samples_per_s"] for row in rows]
        axes.bar(ranks, values, width=width, label=_name(report))
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("rank")
    axes.set_ylabel("samples/s (compute only)")
    axes.set_title("per-rank throughput")
    axes.grid(True, axis="y", alpha=0.3)
    if series:
        axes.legend()
    else:
        axes.text(0.5, 0.5, "no throughput measured", ha="center", transform=axes.transAxes)


def _throughput_rows(report: Record) -> list[Record]:
    throughput = report["measurements"].get("throughput")
    rows = throughput.get("ranks") if isinstance(throughput, dict) else None
    return rows if isinstance(rows, list) else []
