"""The controller's side of the results: files, ``report`` and ``plot``. Standard library only.

- Result files: names, and the atomic JSON writes every result goes through.
- ``report``: read a job's ``rank-<N>.json`` files, judge them with what the launch
  printed about ranks that wrote none (``judge.evaluate``), and render the verdict
  as a short text table for a play to print.
- ``plot``: one PNG from one or more ``report`` JSON files (one per launch mode).
  Left: all_reduce busbw against message size, one line per report. Right: each
  rank's compute throughput, one group of bars per report. matplotlib is imported
  only there and only when called; without it the plot is skipped with a note,
  because nodes and minimal controllers do not have it.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ddp_smoke.crashes import Crash
from ddp_smoke.judge import RankFile, Verdict, evaluate

Record = dict[str, object]
# A report read back for plotting: indexed freely, checked as it is drawn.
Body = dict[str, Any]

RANK_FILE = re.compile(r"rank-(\d+)\.json")
RESULT_FILE = "result.json"


# --- Result files ---------------------------------------------------------------------


def rank_file(result_dir: Path, rank: int) -> Path:
    return result_dir / f"rank-{rank}.json"


def write_json_atomic(path: Path, data: dict[str, object]) -> None:
    """Write ``data`` so readers see the old file or the whole new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def load(result_dir: Path) -> tuple[list[RankFile], list[str]]:
    """Read every ``rank-<N>.json``; unreadable or malformed files become causes."""
    if not result_dir.is_dir():
        return [], [f"result directory {result_dir} does not exist"]
    files: list[RankFile] = []
    causes: list[str] = []
    paths = [path for path in result_dir.iterdir() if RANK_FILE.fullmatch(path.name)]
    for path in sorted(paths, key=lambda item: (len(item.name), item.name)):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            causes.append(f"{path.name} is unreadable: {exc}")
            continue
        if isinstance(record, dict) and isinstance(record.get("rank"), int):
            files.append(RankFile(path.name, record["rank"], record))
        else:
            causes.append(f"{path.name} holds no integer 'rank'")
    return files, causes


def report(result_dir: Path, expected: int | None, crashes: Sequence[Crash] = ()) -> Verdict:
    """The verdict on the rank files in ``result_dir`` (also used by ``tools/gpu_check.py``),
    and on the ``crashes`` the launch printed (``crashes.LaunchLog``) of ranks that wrote none.
    """
    files, causes = load(result_dir)
    return evaluate(files, causes, expected, crashes)


# --- The text table -------------------------------------------------------------------


# Jobs with more ranks show this many rows of the per-rank table; the JSON has all.
MAX_RANK_ROWS = 16


def render(body: Record) -> str:
    """Render a ``report`` JSON object (PASS or FAIL) as a few lines of text."""
    if body.get("verdict") != "PASS":
        causes = body.get("causes")
        lines = [f"ddp_smoke FAIL{_launch_line(body)}"]
        lines += [f"  - {cause}" for cause in _items(causes)]
        lines += [f"  (waited, not a cause: {note})" for note in _items(body.get("waited"))]
        return "\n".join(lines)
    measurements = body.get("measurements")
    parts = measurements if isinstance(measurements, dict) else {}
    lines = _pass_header(body)
    lines += _sweep_lines(parts.get("sweep"))
    lines += _tcp_lines(parts.get("tcp"), parts.get("busbw_fraction"))
    lines += _throughput_lines(parts.get("throughput"))
    lines += _scaling_lines(parts.get("scaling"))
    lines += _topology_lines(body.get("gpu_topology"))
    return "\n".join(lines)


def _launch_line(body: Record) -> str:
    mode, label, job = body.get("mode"), body.get("label"), body.get("job_id")
    text = f" {mode}" if mode else ""
    if label and label != mode:
        text += f" (label {label})"
    return f"{text}, job {job}" if job else text


def _pass_header(body: Record) -> list[str]:
    nodes = ", ".join(_items(body.get("nodes")))
    iface = body.get("iface")
    chosen = iface.get("GLOO_SOCKET_IFNAME") if isinstance(iface, dict) else None
    first = (
        f"ddp_smoke PASS{_launch_line(body)}: {body.get('world_size')} ranks on {nodes}, "
        f"backend {body.get('backend')}, torch {body.get('torch')}, iface {chosen or 'default'}"
    )
    second = f"checks: {body.get('checks_passed')} passed"
    if body.get("first_loss") is not None:
        second += f"; loss {_num(body['first_loss'], 4)} -> {_num(body.get('last_loss'), 4)}"
    return [first, f"{second}; {_num(body.get('elapsed_s'), 1)} s"]


def _sweep_lines(sweep: object) -> list[str]:
    if not isinstance(sweep, dict):
        return []
    if "skipped" in sweep:
        return [f"sweep: skipped ({sweep['skipped']})"]
    lines = [
        f"all_reduce {sweep.get('dtype')} over {sweep.get('ranks')} ranks "
        f"(busbw = algbw x {_num(sweep.get('bus_factor'), 3)}):",
        f"{'size':>10} {'time us':>11} {'algbw GB/s':>11} {'busbw GB/s':>11}",
    ]
    for row in _rows(sweep.get("rows")):
        lines.append(
            f"{format_bytes(int(row.get('bytes', 0))):>10} {_num(row.get('time_us'), 1):>11} "
            f"{_num(row.get('algbw_GBps'), 3):>11} {_num(row.get('busbw_GBps'), 3):>11}"
        )
    peak = sweep.get("peak_bytes")
    where = f" at {format_bytes(peak)}" if isinstance(peak, int) else ""
    lines.append(
        f"peak busbw {_num(sweep.get('peak_busbw_GBps'), 3)} GB/s = "
        f"{_num(sweep.get('peak_busbw_Gbps'), 2)} Gbit/s{where}"
    )
    return lines


def _tcp_lines(tcp: object, fraction: object) -> list[str]:
    if not isinstance(tcp, dict):
        return []
    if "skipped" in tcp:
        return [f"tcp: skipped ({tcp['skipped']})"]
    if tcp.get("error"):
        return [f"tcp: FAILED {tcp['error']}"]
    hosts = " <-> ".join(_items(tcp.get("hosts")))
    to_peer, from_peer = _num(tcp.get("to_peer_Gbps"), 2), _num(tcp.get("from_peer_Gbps"), 2)
    text = (
        f"tcp {hosts}: {_num(tcp.get('Gbps'), 2)} Gbit/s "
        f"(rank 0 -> peer {to_peer}, peer -> rank 0 {from_peer})"
    )
    link, share = tcp.get("link_Mbps"), tcp.get("link_fraction")
    if isinstance(link, int) and share is not None:
        # "x the link", not a percentage: a veth reports 10000 Mbit/s and moves more.
        text += f", {_num(share, 2)}x the {link} Mbit/s link"
    if fraction is not None:
        text += f"; peak busbw / tcp = {_num(fraction, 3)}"
    return [text]


def _throughput_lines(throughput: object) -> list[str]:
    if not isinstance(throughput, dict):
        return []
    rows = _rows(throughput.get("ranks"))
    lines = [
        f"compute throughput ({throughput.get('model')}, batch {throughput.get('batch')}, "
        f"{throughput.get('steps')} steps, no communication):",
        f"{'rank':>6} {'host':<16} {'step ms':>9} {'samples/s':>11}",
    ]
    for row in rows[:MAX_RANK_ROWS]:
        lines.append(
            f"{row.get('rank')!s:>6} {row.get('host')!s:<16} {_num(row.get('step_ms'), 3):>9} "
            f"{_num(row.get('samples_per_s'), 1):>11}"
        )
    if len(rows) > MAX_RANK_ROWS:
        lines.append(f"{'':>6} ... and {len(rows) - MAX_RANK_ROWS} more ranks in the JSON")
    slow = [
        f"rank {row.get('rank')} on {row.get('host')} ({row.get('ratio')}x)"
        for row in _rows(throughput.get("stragglers"))
    ]
    lines.append(
        f"stragglers (> {throughput.get('straggler_ratio')}x typical "
        f"{_num(throughput.get('typical_step_ms'), 3)} ms): {', '.join(slow) or 'none'}"
    )
    return lines


def _scaling_lines(scaling: object) -> list[str]:
    if not isinstance(scaling, dict):
        return []
    if "skipped" in scaling:
        return [f"scaling: skipped ({scaling['skipped']})"]
    one, every = scaling.get("one_node"), scaling.get("all_nodes")
    if not isinstance(one, dict) or not isinstance(every, dict):
        return []
    return [
        f"scaling: 1 node ({one.get('host')}, {one.get('ranks')} ranks) "
        f"{_num(one.get('samples_per_s'), 1)} samples/s, {scaling.get('nodes')} nodes "
        f"({every.get('ranks')} ranks) {_num(every.get('samples_per_s'), 1)} samples/s, "
        f"efficiency {_num(scaling.get('efficiency'), 3)}"
    ]


def _topology_lines(topology: object) -> list[str]:
    """``gpu topology gpu01: NV12 x6, SYS x8`` per host: how many device pairs have each link."""
    if not isinstance(topology, dict):
        return []
    lines = []
    for host, links in topology.items():
        if isinstance(links, dict):
            kinds = Counter(str(kind) for kind in links.values())
            counted = ", ".join(f"{kind} x{count}" for kind, count in kinds.most_common())
            lines.append(f"gpu topology {host}: {counted} (pairs of GPUs and NICs)")
    return lines


def _rows(value: object) -> list[Record]:
    return [row for row in value if isinstance(row, dict)] if isinstance(value, list) else []


def _items(value: object) -> Sequence[str]:
    return [str(item) for item in value] if isinstance(value, list) else []


def _num(value: object, digits: int) -> str:
    return f"{value:.{digits}f}" if isinstance(value, int | float) else "-"


def format_bytes(size: int) -> str:
    """``4096`` -> ``"4 KiB"``; exact multiples only, otherwise bytes."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


# --- The plot -------------------------------------------------------------------------


BAR_WIDTH = 0.8


def plot_reports(paths: list[Path], out: Path) -> Body:
    """Draw ``paths`` into ``out``; the outcome says what was drawn, skipped or wrong."""
    reports, problems = _load_reports(paths)
    outcome: Body = {"plot": None, "reports": [_name(r) for r in reports], "error": None}
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


def _load_reports(paths: list[Path]) -> tuple[list[Body], list[str]]:
    reports: list[Body] = []
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


def _name(report: Body) -> str:
    return str(report.get("label") or report.get("mode") or "run")


def _draw_sweep(axes: Any, reports: list[Body]) -> None:  # noqa: ANN401 - matplotlib Axes
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


def _draw_throughput(axes: Any, reports: list[Body]) -> None:  # noqa: ANN401 - matplotlib Axes
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


def _throughput_rows(report: Body) -> list[Body]:
    throughput = report["measurements"].get("throughput")
    rows = throughput.get("ranks") if isinstance(throughput, dict) else None
    return rows if isinstance(rows, list) else []
