"""The node health program's files, kept per cluster on the control machine.

Each compute node's health program (plugins/module_utils/node_health.py)
keeps its last verdict (``last.json``) and its drains, resumes and reason
changes (``events.jsonl``, one JSON object a line) in cluster_health_state_dir.
roles/monitoring/tasks/report.yml reads both on every compute node in one
command (``last.json``, the line ``READ_MARKER``, then the tail of
``events.jsonl``) and hands the outputs to the lookup cluster_report, which
keeps them here, in ``<results folder>/health/``:

- ``<node>.json``: the node's last verdict, replaced when it changed;
- ``<node>-events.jsonl``: every event ever read, each line once. Lines not
  kept yet are appended, so the events survive a node whose events.jsonl was
  truncated or whose tail no longer reaches them.

A node that was unreachable, or has no files yet, has nothing to keep: its
earlier files stay. Standard library only.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

# The line between last.json and the events in the read command's output (a
# JSON line never starts with "-"): tasks/report.yml prints it.
READ_MARKER = "--- events.jsonl ---"
# The line before the same read at the end of the monitoring role's probe
# (roles/monitoring/tasks/probe.yml): site.yml's report takes the files from
# there instead of reading each node a second time.
PROBE_MARKER = "--- health ---"
# A node's name as a file name: what Ansible and Slurm take, and no path.
NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def split_read(output: str) -> tuple[str, str]:
    """(last.json, events) of the read command's output, or of the part after
    PROBE_MARKER of the probe's; ("", "") for none (no READ_MARKER: not a read)."""
    output = output or ""
    if PROBE_MARKER in output:
        output = output.split(PROBE_MARKER, 1)[1]
    if READ_MARKER not in output:
        return "", ""
    last, events = output.split(READ_MARKER, 1)
    return last.strip(), events.strip()


def _read_of(value: object) -> tuple[str, str] | None:
    """(last, events) of one candidate; None for a kind that is none of the known ones."""
    if isinstance(value, Mapping) and ("last" in value or "events" in value):
        return str(value.get("last") or ""), str(value.get("events") or "")
    if isinstance(value, Mapping):
        # A registered result: skipped, unreachable or failed ones have no stdout.
        return split_read(str(value.get("stdout") or ""))
    if isinstance(value, str):
        return split_read(value)
    if value is None:
        return "", ""
    return None


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _event_lines(text: str) -> list[str]:
    """The lines of text that are JSON objects, as read (no other line is kept)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        try:
            doc = json.loads(line) if line else None
        except ValueError:
            continue
        if isinstance(doc, dict):
            out.append(line)
    return out


def merge_node(folder: Path, node: str, last: str, events: str) -> dict[str, int | bool]:
    """Keep one node's files in folder; what changed: {"last": bool, "events": new lines}."""
    changed: dict[str, int | bool] = {"last": False, "events": 0}
    try:
        doc = json.loads(last) if last else None
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        path = folder / f"{node}.json"
        text = json.dumps(doc, sort_keys=True) + "\n"
        try:
            old = path.read_text(encoding="utf-8")
        except OSError:
            old = ""
        if old != text:
            _replace(path, text)
            changed["last"] = True
    lines = _event_lines(events)
    if lines:
        path = folder / f"{node}-events.jsonl"
        try:
            kept = path.read_text(encoding="utf-8").splitlines()
        except OSError:
            kept = []
        seen = set(kept)
        new = []
        for line in lines:
            if line not in seen:
                seen.add(line)
                new.append(line)
        if new:
            _replace(path, "".join(f"{line}\n" for line in [*kept, *new]))
            changed["events"] = len(new)
    return changed


def merge(
    results_dir: str | os.PathLike, health: Mapping[str, object] | None
) -> dict[str, dict[str, int | bool]]:
    """Keep every node's health files under results_dir/health; what changed, per node.

    health maps a node to the read command's registered result or output (a
    str), or to {"last": last.json's text, "events": events.jsonl's lines},
    or to a list of those (the first that holds the files counts); a
    skipped, unreachable, empty or missing one keeps what is there.
    """
    if not health:
        return {}
    if not isinstance(health, Mapping):
        raise ValueError(
            f"health must map each compute node to its health files, not {type(health).__name__}"
        )
    folder = Path(results_dir) / "health"
    out = {}
    for node, value in sorted(health.items()):
        if not isinstance(node, str) or not NODE_RE.match(node):
            raise ValueError(
                f"health: {node!r} is not a node name (letters, digits, '.', '_', '-'); "
                "pass the compute nodes' inventory_hostname as keys"
            )
        # A list: candidates in order (the report's own read, then the probe's),
        # the first that holds the files counts.
        candidates = list(value) if isinstance(value, (list, tuple)) else [value]
        last = events = ""
        for candidate in candidates:
            read = _read_of(candidate)
            if read is None:
                raise ValueError(
                    f"health[{node!r}]: expected the read command's output or "
                    f"{{'last': ..., 'events': ...}}, not {type(candidate).__name__}"
                )
            if read[0] or read[1]:
                last, events = read
                break
        if not last and not events:
            continue
        folder.mkdir(parents=True, exist_ok=True)
        out[node] = merge_node(folder, node, last, events)
    return out
