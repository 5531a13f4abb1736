"""``accept``: one partition's smoke run judged per node, against the lab's own history.

Standard library only (the control machine runs it). The inputs are the ``report
--out`` files of the run's launch modes, the job's nodes and the ones awaiting
acceptance (``pending``), and a JSON-lines history of earlier runs. A node fails

- when a failed mode's cause names it (as a whole word, so ``node1`` is not
  ``node10``); a cause that names no job node blames every pending node (with
  none pending, every job node), because nothing clears them;
- when a mode that passed did not run on it;
- when its compute step is more than ``1 + max_slowdown`` times its own median
  over the last ``window`` passing runs (with ``min_history`` of them at least),
  or that many times the lower median of its siblings in this run;
- when the TCP rate of a pair, or the peak all_reduce busbw of a node set, it
  belongs to falls below its median by more than that factor: the pending nodes
  of the pair or set fail, or all of them when none is pending.

Every run appends one line to the history, the failed ones too: a value counts
as baseline material only where the nodes it is about passed.
"""

from __future__ import annotations

import json
import os
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

Record = dict[str, object]
# One kind of figure: its key (node, "a|b" pair, "a,b" node set) -> value.
Figure = dict[str, float]

# Each cause a node carries is cut to this many characters.
CAUSE_CHARS = 200
HISTORY = "history"
FIGURE_KINDS = ("step_ms", "tcp_Gbps", "busbw_Gbps", "link_Gbps")


@dataclass(frozen=True)
class Limits:
    """``--max-slowdown``, ``--min-history``, ``--window``."""

    max_slowdown: float = 0.5
    min_history: int = 3
    window: int = 10

    @property
    def factor(self) -> float:
        return 1 + self.max_slowdown


@dataclass(frozen=True)
class Job:
    """The job's nodes in Slurm's order, and the subset awaiting acceptance."""

    nodes: tuple[str, ...]
    pending: tuple[str, ...] = ()

    def problems(self) -> list[str]:
        """Why these are not a job (bad input); empty if they are."""
        problems = [] if self.nodes else ["--nodes names no node"]
        if len(set(self.nodes)) != len(self.nodes):
            problems.append(f"--nodes names a node twice: {','.join(self.nodes)}")
        problems += [
            f"pending node {node} is not among --nodes {','.join(self.nodes)}"
            for node in self.pending
            if node not in self.nodes
        ]
        return problems

    def suspects(self, nodes: Iterable[str] = ()) -> tuple[str, ...]:
        """Whom an unattributed cause blames: the pending ones of ``nodes`` (default all),
        else all of ``nodes``."""
        within = tuple(nodes) or self.nodes
        pending = tuple(node for node in within if node in self.pending)
        return pending or within


@dataclass(frozen=True)
class Finding:
    """One cause of failure, where it came from (a mode, ``history``), and whom it blames."""

    source: str
    text: str
    nodes: tuple[str, ...]

    @property
    def line(self) -> str:
        return f"[{self.source}] {self.text}"

    @property
    def short(self) -> str:
        line = self.line
        return line if len(line) <= CAUSE_CHARS else line[: CAUSE_CHARS - 3] + "..."


@dataclass(frozen=True)
class ModeReport:
    """One launch mode's ``report`` body; a missing or unreadable file is a FAIL body."""

    mode: str
    body: Record

    @property
    def passed(self) -> bool:
        return self.body.get("verdict") == "PASS"

    @property
    def causes(self) -> list[str]:
        causes = self.body.get("causes")
        if isinstance(causes, list) and causes:
            return [str(cause) for cause in causes]
        return [str(self.body.get("cause") or f"mode {self.mode} failed without a cause")]

    @property
    def measurements(self) -> Record:
        value = self.body.get("measurements")
        return value if isinstance(value, dict) else {}


# --- Reading the reports --------------------------------------------------------------


def mode_name(path: Path) -> str:
    """The mode a report path is for: its stem (``srun.json``), or its folder for
    ``<mode>/report.json``; the same whether the file exists or not."""
    if path.stem == "report" and path.parent.name:
        return path.parent.name
    return path.stem


def read_report(path: Path) -> ModeReport:
    """The report at ``path``; none, or one that is not a report object, fails its mode."""
    mode = mode_name(path)
    if not path.exists():
        return _failed(mode, f"mode {mode} wrote no report ({path} does not exist)")
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return _failed(mode, f"mode {mode} report {path} is unreadable: {exc}")
    if not isinstance(body, dict) or body.get("verdict") not in ("PASS", "FAIL"):
        return _failed(mode, f"mode {mode} report {path} holds no PASS or FAIL verdict")
    return ModeReport(mode, body)


def _failed(mode: str, cause: str) -> ModeReport:
    return ModeReport(mode, {"verdict": "FAIL", "cause": cause, "causes": [cause]})


# --- Causes from the modes, attributed to nodes ---------------------------------------


# ``ranks 0-15 on gpu01, ..., gpu08 and 4 more failed``: the list names only some hosts.
_CUT_LIST = re.compile(r"\band \d+ more\b")


def named_nodes(text: str, nodes: Sequence[str]) -> tuple[str, ...]:
    """The ``nodes`` that ``text`` names as whole words: ``node1`` is not in ``node10``."""
    return tuple(node for node in nodes if re.search(rf"\b{re.escape(node)}\b", text))


def blamed_by(cause: str, job: Job) -> tuple[str, ...]:
    """The job nodes ``cause`` names, and the suspects (the pending nodes, else all).

    A cause that names pending nodes blames only those: the job is there to prove
    them, and the nodes in service it names too are the peers they were compared with
    ("parameters of rank 1 on node3 differ from rank 0 on node1"). One that names
    only nodes in service, or none, or whose list of hosts was cut short (``... and 4
    more``), also blames every pending node: the job failed, so none was proven."""
    named = named_nodes(cause, job.nodes)
    cut = bool(_CUT_LIST.search(cause))
    pending = tuple(node for node in named if node in job.pending)
    if pending and not cut:
        return pending
    if named and not cut and not job.pending:
        return named
    return tuple(node for node in job.nodes if node in named or node in job.suspects())


def mode_findings(report: ModeReport, job: Job) -> list[Finding]:
    """A failed mode's causes, each blaming the job nodes it names (else the suspects);
    a passed mode that did not run on some job node blames that node."""
    if not report.passed:
        return [Finding(report.mode, cause, blamed_by(cause, job)) for cause in report.causes]
    ran = report.body.get("nodes")
    ran_on = [str(node) for node in ran] if isinstance(ran, list) else []
    absent = tuple(node for node in job.nodes if node not in ran_on)
    if not absent:
        return []
    where = ", ".join(ran_on) or "no node"
    text = f"passed without {', '.join(absent)}: it ran on {where}"
    return [Finding(report.mode, text, absent)]


# --- This run's figures ---------------------------------------------------------------


@dataclass
class Figures:
    """This run's figures by kind, the mode each kind came from, and what they depend on."""

    values: dict[str, Figure] = field(default_factory=lambda: {k: {} for k in FIGURE_KINDS})
    sources: dict[str, str] = field(default_factory=dict)
    backend: str | None = None
    model: str | None = None

    def to_dict(self) -> Record:
        return {kind: dict(sorted(values.items())) for kind, values in self.values.items()}


def pair_key(hosts: Iterable[str]) -> str:
    return "|".join(sorted(hosts))


def set_key(nodes: Iterable[str]) -> str:
    return ",".join(sorted(nodes))


def key_nodes(key: str) -> tuple[str, ...]:
    """The nodes a figure's key is about: ``"a|b"``, ``"a,b,c"`` or a node name."""
    return tuple(re.split(r"[|,]", key))


def extract_figures(reports: Sequence[ModeReport]) -> Figures:
    """Each kind of figure from the first passing mode that measured it."""
    figures = Figures()
    for report in (report for report in reports if report.passed):
        for kind, found in _figures_of(report).items():
            if found and kind not in figures.sources:
                figures.values[kind] = found
                figures.sources[kind] = report.mode
                _note_context(figures, kind, report)
    return figures


def _note_context(figures: Figures, kind: str, report: ModeReport) -> None:
    if kind == "step_ms":
        throughput = _part(report.measurements, "throughput")
        figures.model = _text(throughput.get("model"))
    elif kind == "busbw_Gbps":
        figures.backend = _text(report.body.get("backend"))


def _figures_of(report: ModeReport) -> dict[str, Figure]:
    measured = report.measurements
    tcp = _part(measured, "tcp")
    hosts = tcp.get("hosts")
    pair = pair_key(map(str, hosts)) if isinstance(hosts, list) and len(hosts) == 2 else None
    networked = pair is not None and tcp.get("same_host") is False and not tcp.get("error")
    found: dict[str, Figure] = {"step_ms": step_times(_part(measured, "throughput"))}
    found["tcp_Gbps"] = _one(pair, tcp.get("Gbps")) if networked else {}
    link = _positive(tcp.get("link_Mbps"))
    found["link_Gbps"] = _one(pair, link / 1000 if link else None) if networked else {}
    nodes = report.body.get("nodes")
    # One node counts too: 8 GPUs of one node sweep over NVLink.
    ran_on = set_key(map(str, nodes)) if isinstance(nodes, list) and nodes else None
    found["busbw_Gbps"] = _one(ran_on, _part(measured, "sweep").get("peak_busbw_Gbps"))
    return found


def step_times(throughput: Record) -> Figure:
    """Each node's compute step (ms): the median of its ranks' medians."""
    by_node: dict[str, list[float]] = {}
    rows = throughput.get("ranks")
    for row in rows if isinstance(rows, list) else []:
        step = _positive(row.get("step_ms")) if isinstance(row, dict) else None
        if step is not None and row.get("host"):
            by_node.setdefault(str(row["host"]), []).append(step)
    return {node: round(statistics.median(values), 4) for node, values in by_node.items()}


def _one(key: str | None, value: object) -> Figure:
    number = _positive(value)
    return {key: number} if key is not None and number is not None else {}


def _part(record: Record, name: str) -> Record:
    value = record.get(name)
    return value if isinstance(value, dict) else {}


def _positive(value: object) -> float | None:
    """``value`` as a float if it is a positive number (not a bool), else ``None``."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def _text(value: object) -> str | None:
    return str(value) if value else None


# --- The history ----------------------------------------------------------------------


def read_history(path: Path) -> tuple[list[Record], list[str]]:
    """The entries of the JSON-lines history (none if the file is absent), and a warning
    for every line that is not an entry: those are skipped, never fatal."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return [], []
    except (OSError, UnicodeDecodeError) as exc:
        return [], [f"history {path} is unreadable, compared with nothing: {exc}"]
    entries: list[Record] = []
    warnings: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError as exc:
            warnings.append(f"history {path} line {number} is not JSON, skipped: {exc}")
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("figures"), dict):
            warnings.append(f"history {path} line {number} is no entry with figures, skipped")
            continue
        entries.append(entry)
    return entries, warnings


def append_history(path: Path, entry: Record) -> None:
    """Append ``entry`` as one line with one ``write`` (``O_APPEND``): whole, or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (json.dumps(entry, sort_keys=True) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def history_entry(result: Acceptance, run_id: str | None, partition: str | None) -> Record:
    """This run's history line."""
    return {
        "run_id": run_id,
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "partition": partition,
        "nodes": list(result.job.nodes),
        "pending": list(result.job.pending),
        "passed": result.passed,
        "node_passed": {node: not result.blamed(node) for node in result.job.nodes},
        "causes": [finding.short for finding in result.findings],
        "backend": result.figures.backend,
        "model": result.figures.model,
        "figures": result.figures.to_dict(),
    }


@dataclass(frozen=True)
class Baseline:
    """The median of the last passing values of one figure, and how many there were."""

    median: float | None
    runs: int

    def to_dict(self) -> Record:
        return {"median": self.median, "runs": self.runs}


def baseline(
    history: Sequence[Record], kind: str, key: str, limits: Limits, context: Record
) -> Baseline:
    """The last ``window`` values of ``kind[key]`` from entries where every node of ``key``
    passed and ``context`` (backend, model) matches; no median below ``min_history``."""
    values = [
        value
        for entry in history
        if _counts(entry, key, context)
        and (value := _positive(_part(_part(entry, "figures"), kind).get(key))) is not None
    ]
    recent = values[-limits.window :]
    if len(recent) < limits.min_history:
        return Baseline(None, len(recent))
    return Baseline(round(statistics.median(recent), 4), len(recent))


def _counts(entry: Record, key: str, context: Record) -> bool:
    if any(entry.get(name) != value for name, value in context.items()):
        return False
    passed = entry.get("node_passed")
    if not isinstance(passed, dict):
        return entry.get("passed") is True
    return all(passed.get(node) is True for node in key_nodes(key))


# --- Comparisons ----------------------------------------------------------------------


def history_findings(
    figures: Figures, history: Sequence[Record], job: Job, limits: Limits
) -> tuple[list[Finding], dict[str, dict[str, Record]]]:
    """Figures that fell behind their own history; and every baseline compared with."""
    findings: list[Finding] = []
    baselines: dict[str, dict[str, Record]] = {}
    contexts: dict[str, Record] = {
        "step_ms": {"model": figures.model},
        "tcp_Gbps": {},
        "busbw_Gbps": {"backend": figures.backend},
    }
    for kind, context in contexts.items():
        source = figures.sources.get(kind, HISTORY)
        baselines[kind] = {}
        for key, value in sorted(figures.values[kind].items()):
            base = baseline(history, kind, key, limits, context)
            baselines[kind][key] = base.to_dict()
            text = regression(kind, key, value, base, limits)
            if text is not None:
                blamed = (key,) if kind == "step_ms" else job.suspects(key_nodes(key))
                findings.append(Finding(source, text, blamed))
    return findings, baselines


LABELS = {"step_ms": "step", "tcp_Gbps": "TCP", "busbw_Gbps": "peak all_reduce busbw"}
UNITS = {"step_ms": "ms", "tcp_Gbps": "Gbit/s", "busbw_Gbps": "Gbit/s"}


def regression(kind: str, key: str, value: float, base: Baseline, limits: Limits) -> str | None:
    """``node3: step 31.2 ms, 62% slower than its median 19.3 ms over the last 5 runs
    (limit 50%)``, or ``None`` within the limit or without a baseline.

    A step time is slower by ``value / median``; a rate (Gbit/s) by ``median / value``.
    """
    if not base.median or value <= 0:
        return None
    slowdown = value / base.median if kind == "step_ms" else base.median / value
    if slowdown <= limits.factor:
        return None
    unit = UNITS[kind]
    return (
        f"{key}: {LABELS[kind]} {value:.3g} {unit}, {(slowdown - 1) * 100:.0f}% slower than "
        f"its median {base.median:.3g} {unit} over the last {base.runs} runs "
        f"(limit {limits.max_slowdown * 100:.0f}%)"
    )


def sibling_findings(figures: Figures, limits: Limits) -> tuple[list[Finding], float | None]:
    """Nodes whose step is more than the factor times the lower median of this run's nodes."""
    steps = figures.values["step_ms"]
    if len(steps) < 2:
        return [], None
    typical = statistics.median_low(steps.values())
    source = figures.sources.get("step_ms", HISTORY)
    findings = [
        Finding(
            source,
            f"{node}: step {value:.3g} ms, {value / typical:.1f}x its siblings' "
            f"{typical:.3g} ms (limit {limits.factor:.2g}x)",
            (node,),
        )
        for node, value in sorted(steps.items())
        if typical > 0 and value > limits.factor * typical
    ]
    return findings, typical


# --- The verdict ----------------------------------------------------------------------


@dataclass(frozen=True)
class Acceptance:
    """The run's verdict per node and as a whole, with the figures it rests on."""

    job: Job
    reports: tuple[ModeReport, ...]
    findings: tuple[Finding, ...]
    figures: Figures
    baselines: Record

    @property
    def passed(self) -> bool:
        return not self.findings

    def blamed(self, node: str) -> list[Finding]:
        return [finding for finding in self.findings if node in finding.nodes]

    def to_dict(self) -> Record:
        nodes = {
            node: {
                "passed": not self.blamed(node),
                "cause": "; ".join(finding.short for finding in self.blamed(node)),
            }
            for node in self.job.nodes
        }
        return {
            "passed": self.passed,
            "nodes": nodes,
            "pending": list(self.job.pending),
            "causes": [finding.line for finding in self.findings],
            "modes": {report.mode: report.body.get("verdict") for report in self.reports},
            "figures": self.figures.to_dict(),
            "baseline": self.baselines,
        }


def accept(
    reports: Sequence[ModeReport], job: Job, history: Sequence[Record], limits: Limits
) -> Acceptance:
    """Judge one run: the modes' causes, then its figures against history and siblings."""
    findings = [finding for report in reports for finding in mode_findings(report, job)]
    figures = extract_figures(reports)
    regressions, baselines = history_findings(figures, history, job, limits)
    stragglers, typical = sibling_findings(figures, limits)
    findings += regressions + stragglers
    summary: Record = {**baselines, "siblings_step_ms": typical, "limits": _limits(limits)}
    return Acceptance(job, tuple(reports), tuple(findings), figures, summary)


def _limits(limits: Limits) -> Record:
    return {
        "max_slowdown": limits.max_slowdown,
        "min_history": limits.min_history,
        "window": limits.window,
    }
