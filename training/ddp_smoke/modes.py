"""Run a partition's launch modes one after the other and judge each: ``ddp_smoke modes``.

Standard library only: the smoke_train role runs it once per partition on the
controller, as the proof account, instead of one Ansible task per mode (each
cost a round trip and a python start for its ``report``). The plan comes as
JSON on stdin::

    {"world_size": 2, "nodes": "node1,node2", "settle_s": 5,
     "modes": [{"mode": "srun", "dir": "/shared/.../srun", "argv": ["timeout", "630", ...]},
               {"mode": "sbatch", "dir": "...", "argv": [...], "script": "#!/bin/bash ..."}]}

For each mode, in order: make its folder (and write ``smoke.sbatch`` where a
``script`` is given), wait at most ``settle_s`` for the job's nodes to leave
Slurm's "completing" state (the previous mode's epilog: a job asked for then
waits for a later scheduling pass, a batch job up to batch_sched_delay),
launch with the launch's output passed on to stderr, then judge the rank
files (``ddp_smoke.report``, written to ``report.json`` in the folder) with what
the launch's output, and a batch job's ``slurm-<id>.out`` in the folder, say of
the tasks that ended before they wrote one (``crashes.LaunchLog``). One
line of JSON per mode goes to stdout as soon as the mode ends (an outcome,
``outcome()``); a mode that fails does not stop the next one.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from ddp_smoke.crashes import LaunchLog
from ddp_smoke.report import render, report, write_json_atomic

# The launcher's own failures (the folder, the batch script): no launch ran.
LAUNCHER_FAILED = 97
TAIL_LINES = 6
# The modes whose srun tasks are the ranks; torchrun and spawn run one task per node.
TASK_PER_RANK = frozenset({"srun", "sbatch"})
SETTLE_POLL_S = 0.1


def completing(nodes: str, run: Callable[..., Any] = subprocess.run) -> bool:
    """Whether one of ``nodes`` is still completing a job (sinfo's short state ``comp``)."""
    try:
        out = run(
            ["sinfo", "--noheader", "--Node", f"--nodes={nodes}", "--format=%t"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return any(line.strip().startswith("comp") for line in out.splitlines())


def settle(nodes: str, limit_s: float, busy: Callable[[str], bool] = completing) -> float:
    """Wait at most ``limit_s`` for ``nodes`` to finish completing; the seconds waited."""
    started = time.monotonic()
    while nodes and limit_s > 0 and busy(nodes):
        if time.monotonic() - started >= limit_s:
            break
        time.sleep(SETTLE_POLL_S)
    return round(time.monotonic() - started, 3)


def launch(
    argv: Sequence[str], echo: IO[str] | None = None, log: LaunchLog | None = None
) -> tuple[int, list[str]]:
    """Run ``argv`` (stdin closed), passing its output on to ``echo`` (stderr) and ``log``;
    its exit status and its last lines. A command that cannot start is exit 127 with the
    reason."""
    out = echo or sys.stderr
    log = log or LaunchLog()
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
    except OSError as exc:
        line = f"ddp_smoke modes: cannot run {argv[0] if argv else '(nothing)'}: {exc}"
        print(line, file=out, flush=True)
        return 127, [line]
    assert proc.stdout is not None
    for line in proc.stdout:
        out.write(line)
        log.feed(line)
        tail.append(line.rstrip("\n"))
    out.flush()
    return proc.wait(), list(tail)


def outcome(
    mode: str, rc: int, launch_s: float, body: Mapping[str, Any] | None, tail: list[str]
) -> dict[str, Any]:
    """What the role keeps of one mode: passed, the cause, and where the time went.

    ``launch_s`` is the launch's wall time (with the wait for the nodes);
    ``phases_s`` the slowest rank's phases (import: python and torch starting in
    a rank); ``startup_s`` what no rank holds: srun or sbatch, a torchrun agent
    or spawn's node process, the wait.
    """
    report_body = dict(body) if isinstance(body, Mapping) else None
    phases = (report_body or {}).get("phases_s") or {}
    elapsed = float((report_body or {}).get("elapsed_s") or 0)
    imported = float(phases.get("import") or 0) if isinstance(phases, Mapping) else 0.0
    cause = (report_body or {}).get("cause") or "no report: " + (tail[-1] if tail else "")
    return {
        "mode": mode,
        "passed": rc == 0 and (report_body or {}).get("verdict") == "PASS",
        "launch_rc": rc,
        "launch_s": round(launch_s, 2),
        "phases_s": dict(phases) if isinstance(phases, Mapping) else {},
        "startup_s": round(launch_s - elapsed - imported, 2),
        "table": render(report_body) if report_body else "",
        "report": report_body,
        "cause": cause,
        "tail": tail,
    }


def read_job_output(folder: Path, log: LaunchLog) -> LaunchLog:
    """``log`` after the batch job's output files in ``folder`` (``slurm-<id>.out``, where
    the role's batch script writes the ranks' output; a fresh folder per run holds one)."""
    for path in sorted(folder.glob("slurm-*.out")):
        with contextlib.suppress(OSError):  # a log that cannot be read only says less
            log.read(path)
    return log


def run_mode(spec: Mapping[str, Any], world_size: int, nodes: str, settle_s: float) -> dict:
    mode, folder = str(spec["mode"]), Path(spec["dir"])
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if spec.get("script") is not None:
            (folder / "smoke.sbatch").write_text(str(spec["script"]))
    except OSError as exc:
        line = f"ddp_smoke launcher: cannot prepare {folder}: {exc}"
        print(line, file=sys.stderr, flush=True)
        return outcome(mode, LAUNCHER_FAILED, 0.0, None, [line])
    started = time.monotonic()
    settle(nodes, settle_s)
    log = LaunchLog()
    rc, tail = launch([str(arg) for arg in spec["argv"]], log=log)
    launch_s = time.monotonic() - started
    body: dict[str, Any] | None
    try:
        crashes = read_job_output(folder, log).crashes(task_is_rank=mode in TASK_PER_RANK)
        body = report(folder, world_size, crashes).to_dict()
        write_json_atomic(folder / "report.json", body)
    except (OSError, ValueError) as exc:
        body = None
        tail = [*tail, f"ddp_smoke modes: no report for {folder}: {exc}"][-TAIL_LINES:]
    return outcome(mode, rc, launch_s, body, tail)


def main(stdin: IO[str] | None = None, stdout: IO[str] | None = None) -> int:
    """Every mode of the plan on stdin; one JSON line per mode on stdout. 2 on a bad plan."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    try:
        plan = json.load(stdin)
        modes = list(plan["modes"])
        world_size = int(plan["world_size"])
        nodes = str(plan.get("nodes") or "")
        settle_s = float(plan.get("settle_s", 5))
        for spec in modes:
            if not spec.get("mode") or not spec.get("dir") or not spec.get("argv"):
                raise ValueError(f"a mode needs mode, dir and argv: {spec!r}")
    except (ValueError, KeyError, TypeError) as exc:
        print(f"ddp_smoke modes: bad plan on stdin: {exc}", file=sys.stderr)
        return 2
    for spec in modes:
        print(json.dumps(run_mode(spec, world_size, nodes, settle_s)), file=stdout, flush=True)
    return 0
