"""Submit a batch script and wait for its end, polling often; standard library only.

``sbatch --wait`` polls the controller after 2, 10 and 42 s (and less often
after that), so a 12 s job holds its caller for 42 s. ``submit_and_wait``
polls ``scontrol show job`` every ``poll_s`` seconds instead and returns what
``sbatch --wait`` returns: the job's exit code, or 1 when the job ended in a
state other than COMPLETED without one. Interrupted (SIGTERM from a
``timeout`` guard, or Ctrl-C), it cancels the job so no allocation is left.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType

# Job states in which the job has not ended yet (squeue's long names).
ACTIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
        "SPECIAL_EXIT",
    }
)

Runner = Callable[[Sequence[str]], subprocess.CompletedProcess]


class BatchError(RuntimeError):
    """The job could not be submitted or followed; the message names the command."""


@dataclass(frozen=True)
class JobEnd:
    job_id: str
    state: str
    exit_code: int
    signal: int
    reason: str

    @property
    def returncode(self) -> int:
        """What ``sbatch --wait`` would exit with."""
        if self.state == "COMPLETED" and self.exit_code == 0:
            return 0
        return self.exit_code or 1

    def describe(self) -> str:
        text = f"batch job {self.job_id} ended {self.state} (exit code {self.exit_code}"
        text += f":{self.signal}" if self.signal else ""
        text += f", reason {self.reason})" if self.reason not in ("", "None") else ")"
        return text


def run_command(argv: Sequence[str]) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


def parse_job_id(stdout: str) -> str:
    """``sbatch --parsable`` prints ``ID`` or ``ID;CLUSTER``."""
    first = stdout.strip().splitlines()[0] if stdout.strip() else ""
    job_id = first.split(";", 1)[0].strip()
    if not job_id.isdigit():
        raise BatchError(f"sbatch --parsable printed no job id: {stdout.strip()!r}")
    return job_id


def parse_job(text: str) -> dict[str, str]:
    """Fields of one ``scontrol show job -o`` line (values without spaces are enough here)."""
    fields: dict[str, str] = {}
    for token in text.split():
        key, sep, value = token.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return fields


def job_end(job_id: str, fields: dict[str, str]) -> JobEnd | None:
    """The end of the job, or None while it is still pending or running."""
    state = fields.get("JobState", "")
    if not state:
        raise BatchError(f"scontrol show job {job_id} printed no JobState")
    if state in ACTIVE_STATES:
        return None
    code, _, sig = fields.get("ExitCode", "0:0").partition(":")
    return JobEnd(
        job_id=job_id,
        state=state,
        exit_code=int(code) if code.isdigit() else 1,
        signal=int(sig) if sig.isdigit() else 0,
        reason=fields.get("Reason", ""),
    )


def submit(script: str, run: Runner) -> str:
    done = run(["sbatch", "--parsable", script])
    if done.returncode != 0:
        raise BatchError(f"sbatch {script} failed: {done.stderr.strip() or done.stdout.strip()}")
    return parse_job_id(done.stdout)


def submit_and_wait(
    script: str,
    poll_s: float = 1.0,
    run: Runner | None = None,
    sleep: Callable[[float], None] | None = None,
    start_timeout_s: float = 0,
) -> JobEnd:
    """Wait for the job's end; with start_timeout_s > 0, cancel it if still PENDING by then.

    Pending time is counted in polls (polls x poll_s), so a job that Slurm cannot
    start (nodes down, a partition too small) fails in seconds with Slurm's
    reason instead of waiting out its time limit.
    """
    run = run or run_command
    sleep = sleep or time.sleep
    job_id = submit(script, run)
    print(f"Submitted batch job {job_id}", flush=True)
    pending_s = 0.0
    try:
        while True:
            done = run(["scontrol", "show", "job", "-o", job_id])
            if done.returncode != 0:
                # Gone from slurmctld's memory (MinJobAge, 300 s by default) or no controller.
                raise BatchError(f"scontrol show job {job_id} failed: {done.stderr.strip()}")
            fields = parse_job(done.stdout)
            end = job_end(job_id, fields)
            if end is not None:
                return end
            if fields.get("JobState") == "PENDING":
                if start_timeout_s > 0 and pending_s >= start_timeout_s:
                    raise BatchError(
                        f"batch job {job_id} still PENDING after {pending_s:.0f} s "
                        f"(Reason={fields.get('Reason', '?')}): cancelled; check the partition's "
                        "nodes with sinfo and the doctor (doctor.yml)"
                    )
                pending_s += poll_s
            sleep(poll_s)
    except BaseException:
        run(["scancel", job_id])
        raise


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(script: str, poll_s: float, start_timeout_s: float = 0) -> int:
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        end = submit_and_wait(script, poll_s, start_timeout_s=start_timeout_s)
    except BatchError as exc:
        print(f"ddp_smoke sbatch: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        print(f"ddp_smoke sbatch: interrupted ({exc}), job cancelled", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    if end.returncode != 0:
        print(f"ddp_smoke sbatch: {end.describe()}", file=sys.stderr)
    return end.returncode
