"""The short text form of a ``report`` verdict, for a play to print. Standard library only."""

from __future__ import annotations

from collections.abc import Sequence

from ddp_smoke.metrics import format_bytes

Record = dict[str, object]

# Jobs with more ranks show this many rows of the per-rank table; the JSON has all.
MAX_RANK_ROWS = 16


def render(body: Record) -> str:
    """Render a ``report`` JSON object (PASS or FAIL) as a few lines of text."""
    if body.get("verdict") != "PASS":
        causes = body.get("causes")
        lines = [f"ddp_smoke FAIL{_launch(body)}"]
        lines += [f"  - {cause}" for cause in _items(causes)]
        return "\n".join(lines)
    measurements = body.get("measurements")
    parts = measurements if isinstance(measurements, dict) else {}
    lines = _pass_header(body)
    lines += _sweep_lines(parts.get("sweep"))
    lines += _tcp_lines(parts.get("tcp"), parts.get("busbw_fraction"))
    lines += _throughput_lines(parts.get("throughput"))
    lines += _scaling_lines(parts.get("scaling"))
    return "\n".join(lines)


def _launch(body: Record) -> str:
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
        f"ddp_smoke PASS{_launch(body)}: {body.get('world_size')} ranks on {nodes}, "
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


def _rows(value: object) -> list[Record]:
    return [row for row in value if isinstance(row, dict)] if isinstance(value, list) else []


def _items(value: object) -> Sequence[str]:
    return [str(item) for item in value] if isinstance(value, list) else []


def _num(value: object, digits: int) -> str:
    return f"{value:.{digits}f}" if isinstance(value, int | float) else "-"
