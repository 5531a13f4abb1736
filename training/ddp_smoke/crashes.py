"""What a launch printed about the tasks that ended before they wrote their result.

Standard library only: the controller reads it (``modes``, ``report``). A rank
that raises before it can report (torch missing from its node's venv, a crash
at start) writes no ``rank-<N>.json``; what it raised is only in the launch's
output, which srun passes on, or, for sbatch, in the job's ``slurm-<id>.out``.
``LaunchLog`` reads that output line by line and keeps, per task, what ended it:

- ``srun --label`` starts each line of a task with its id (``1: ...``; srun's
  own lines carry none);
- a Python traceback ends in the exception's line (``ModuleNotFoundError: No
  module named 'torch'``): that line is kept, not the traceback's first;
- one-line failures: ``python -m`` that finds no module (runpy), slurmstepd that
  cannot run the program (``execve()``), ddp_smoke's own ``FAIL`` and ``cannot
  start`` lines;
- srun's ``srun: error: node2: task 1: Exited with exit code 1`` names the node of
  each task that ended badly, and how it ended.

A crash ``waited`` when it only followed another one: a rendezvous that timed out
or lost its peer, a task that srun or Slurm ended (SIGTERM, SIGKILL).
``judge.evaluate`` blames those only when no task crashed on its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ddp_smoke.launch import expand_hostlist

# ``srun --label``: the task id, right-aligned to the widest id, then ": ".
LABEL = re.compile(r" *(\d+): (.*)")
# srun's line for tasks that exited non-zero or were killed (src/srun launch plugin).
TASK_END = re.compile(r"srun: error: (?P<hosts>\S+): tasks? (?P<tasks>[\d,\[\]-]+): (?P<how>.+)")
EXIT_CODE = re.compile(r"Exited with exit code (\d+)")
TRACEBACK = "Traceback (most recent call last):"
# ``python -m torch.distributed.run`` without torch, ``python -m ddp_smoke`` without it.
RUNPY = re.compile(
    r"\S*python[\d.]*: (?:Error while finding module specification for \S+ "
    r"\((?P<raised>\w+: .*)\)|(?P<failed>No module named .*|can't open file .*))"
)
EXECVE = re.compile(r"(?:slurmstepd: error: )?(?P<failed>execve\(\): .*)")
OWN = re.compile(r"ddp_smoke: (?:FAIL (?:rank|node) \d+ on \S+|cannot start): (?P<failed>.*)")

# Failures that follow another's: the peer never came or went away, or the task was
# ended from outside. ``rendezvous at ... failed`` is ``rank._run_rank``'s wording.
WAITING = re.compile(
    r"rendezvous at \S+ failed"
    r"|Rendezvous\w*Error"  # torchrun's agent: RendezvousTimeoutError, ...ClosedError
    r"|DistStoreError|DistNetworkError"  # the c10d store: no peer joined, or it left
    r"|did not report their worker count"  # spawn: a node process that never came
    r"|SignalException"  # torchrun's agent, ended by srun
    r"|signal (Terminated|Killed)$"  # srun or Slurm ended the task
)


def waited(error: str) -> bool:
    """Whether ``error`` only says that a peer was missing, or that the task was ended."""
    return bool(WAITING.search(error))


@dataclass(frozen=True)
class Crash:
    """A task that ended before it wrote a result: what it said last, and where.

    ``what`` reads after the task's name: ``raised ModuleNotFoundError: ...``,
    ``exited with exit code 1``. ``rank`` is the task id where each task is one rank
    (srun, sbatch); torchrun and spawn run one task per node.
    """

    what: str
    task: int | None = None
    host: str | None = None
    rank: int | None = None

    @property
    def waited(self) -> bool:
        return waited(self.what)

    def quotes(self, error: str) -> bool:
        """Whether a rank's recorded ``error`` is what this crash said."""
        said = self.what.split(" ", 1)[-1]
        return said in error or error in said

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class TaskEnd:
    """srun's word on how a task ended, and the hosts of that line."""

    hosts: tuple[str, ...]
    how: str

    @property
    def host(self) -> str | None:
        return self.hosts[0] if len(self.hosts) == 1 else None

    @property
    def what(self) -> str:
        code = EXIT_CODE.fullmatch(self.how)
        if code:
            return f"exited with exit code {code[1]}"
        if self.how == "Out Of Memory":
            return "ran out of memory"
        return f"ended by signal {self.how}"

    @property
    def exited(self) -> bool:
        return EXIT_CODE.fullmatch(self.how) is not None


class TaskLines:
    """What one task's lines said: the last failure, and whether a traceback is open."""

    def __init__(self) -> None:
        self.what: str | None = None
        self._in_traceback = False

    def read(self, text: str) -> None:
        if text.startswith(TRACEBACK):
            self._in_traceback = True
        elif self._in_traceback:
            # Frames and their source lines are indented; the first line that is not
            # is the exception. A chained one starts another traceback after it.
            if text and not text[0].isspace():
                self._in_traceback = False
                self.what = f"raised {text.strip()}"
        else:
            said = one_line_failure(text)
            self.what = said or self.what


def one_line_failure(text: str) -> str | None:
    """``raised ...``/``failed: ...`` for a failure said in one line, else ``None``."""
    for pattern in (RUNPY, EXECVE, OWN):
        match = pattern.fullmatch(text.strip())
        if match:
            raised = match.groupdict().get("raised")
            return f"raised {raised}" if raised else f"failed: {match['failed']}"
    return None


class LaunchLog:
    """Reads a launch's output (srun's, a batch job's file) and names its crashes."""

    def __init__(self) -> None:
        self._lines: dict[int | None, TaskLines] = {}
        self._ends: dict[int, TaskEnd] = {}

    def feed(self, line: str) -> None:
        line = line.rstrip("\r\n")
        end = TASK_END.fullmatch(line)
        if end:
            self._task_end(end)
            return
        label = LABEL.fullmatch(line)
        task, text = (int(label[1]), label[2]) if label else (None, line)
        self._lines.setdefault(task, TaskLines()).read(text)

    def read(self, path: Path) -> None:
        with path.open(encoding="utf-8", errors="replace") as handle:
            for line in handle:
                self.feed(line)

    def _task_end(self, match: re.Match[str]) -> None:
        try:
            hosts = tuple(expand_hostlist(match["hosts"]))
        except ValueError:
            hosts = (match["hosts"],)
        for task in task_ids(match["tasks"]):
            self._ends[task] = TaskEnd(hosts, match["how"].strip())

    def crashes(self, task_is_rank: bool) -> list[Crash]:
        """Every task that failed, in task order; one without a label last."""
        said = {task: lines.what for task, lines in self._lines.items() if lines.what}
        unlabelled = said.pop(None, None)
        found: list[Crash] = []
        if unlabelled is not None:
            # Output without --label: its failure is the one task's that srun saw
            # exit with a code, if there is exactly one; otherwise nobody's known.
            exited = [task for task, end in self._ends.items() if end.exited and task not in said]
            if len(exited) == 1:
                said[exited[0]] = unlabelled
            else:
                found.append(Crash(unlabelled))
        tasks = sorted({task for task in said if task is not None} | set(self._ends))
        return [self._crash(task, said.get(task), task_is_rank) for task in tasks] + found

    def _crash(self, task: int, what: str | None, task_is_rank: bool) -> Crash:
        end = self._ends.get(task)
        what = what or (end.what if end else "failed")
        host = end.host if end else None
        return Crash(what, task, host, task if task_is_rank else None)


def task_ids(text: str) -> list[int]:
    """``0-1,3`` or ``[0-1,3]`` (srun's task lists) -> ``[0, 1, 3]``."""
    ids: list[int] = []
    for part in text.strip("[]").split(","):
        low, _, high = part.partition("-")
        if low.isdigit() and (high.isdigit() or not high):
            ids.extend(range(int(low), int(high or low) + 1))
    return ids


def without_result(
    crashes: Sequence[Crash], reported: Sequence[tuple[int, Mapping[str, object]]]
) -> list[Crash]:
    """The ``crashes`` of tasks that wrote no rank file (``reported``: rank, record): what
    a rank wrote says more than its output. A whole node's crash (torchrun, spawn) counts
    where no rank on that host reported; an unknown task's where no record holds its error.
    """
    ranks = {rank for rank, _ in reported}
    hosts = {str(record.get("host")) for _, record in reported}
    errors = [str(record["error"]) for _, record in reported if record.get("error")]
    return [
        crash
        for crash in crashes
        if (crash.rank is None or crash.rank not in ranks)
        and (crash.rank is not None or crash.host is None or crash.host not in hosts)
        and (crash.task is not None or not any(crash.quotes(error) for error in errors))
    ]
