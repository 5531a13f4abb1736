"""ddp_smoke sbatch: submit, poll scontrol, exit like ``sbatch --wait``, cancel when interrupted."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

import pytest

from ddp_smoke import batch
from ddp_smoke.cli import main

# Real `scontrol show job -o` lines (Slurm 22.05), shortened to the fields that matter.
RUNNING = (
    "JobId=7 JobName=ddp-smoke-sbatch UserId=root(0) GroupId=root(0) Priority=1 "
    "JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 "
    "ExitCode=0:0 RunTime=00:00:03 TimeLimit=00:10:00 NodeList=node[1-2] NumNodes=2"
)
PENDING = RUNNING.replace("JobState=RUNNING Reason=None", "JobState=PENDING Reason=Resources")
COMPLETED = RUNNING.replace("JobState=RUNNING", "JobState=COMPLETED")
FAILED = RUNNING.replace("JobState=RUNNING Reason=None", "JobState=FAILED Reason=NonZeroExitCode")
FAILED = FAILED.replace("ExitCode=0:0", "ExitCode=3:0")
TIMEOUT = RUNNING.replace("JobState=RUNNING Reason=None", "JobState=TIMEOUT Reason=TimeLimit")
TIMEOUT = TIMEOUT.replace("ExitCode=0:0", "ExitCode=0:15")


class FakeSlurm:
    """Answers sbatch, scontrol and scancel from a script of scontrol lines."""

    def __init__(self, states: list[str], sbatch_out: str = "7\n", sbatch_rc: int = 0) -> None:
        self.states = list(states)
        self.sbatch_out = sbatch_out
        self.sbatch_rc = sbatch_rc
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess:
        argv = list(argv)
        self.calls.append(argv)
        if argv[0] == "sbatch":
            err = "" if self.sbatch_rc == 0 else "sbatch: error: invalid partition specified: gpu"
            return subprocess.CompletedProcess(argv, self.sbatch_rc, self.sbatch_out, err)
        if argv[0] == "scontrol":
            if not self.states:
                err = "slurm_load_jobs error: Invalid job id specified"
                return subprocess.CompletedProcess(argv, 1, "", err)
            return subprocess.CompletedProcess(argv, 0, self.states.pop(0) + "\n", "")
        return subprocess.CompletedProcess(argv, 0, "", "")


def test_polls_until_completed_and_returns_zero() -> None:
    slurm = FakeSlurm([PENDING, RUNNING, RUNNING, COMPLETED])
    sleeps: list[float] = []
    end = batch.submit_and_wait("/shared/smoke.sbatch", 0.5, slurm, sleeps.append)
    assert end.state == "COMPLETED"
    assert end.returncode == 0
    assert sleeps == [0.5, 0.5, 0.5]
    assert slurm.calls[0] == ["sbatch", "--parsable", "/shared/smoke.sbatch"]
    assert slurm.calls[1] == ["scontrol", "show", "job", "-o", "7"]
    assert not [c for c in slurm.calls if c[0] == "scancel"]


def test_failed_job_returns_its_exit_code_and_is_described() -> None:
    end = batch.submit_and_wait("s", 1.0, FakeSlurm([RUNNING, FAILED]), lambda _s: None)
    assert end.returncode == 3
    assert end.describe() == "batch job 7 ended FAILED (exit code 3, reason NonZeroExitCode)"


def test_job_killed_by_its_time_limit_is_a_failure_without_exit_code() -> None:
    end = batch.submit_and_wait("s", 1.0, FakeSlurm([TIMEOUT]), lambda _s: None)
    assert end.returncode == 1
    assert end.describe() == "batch job 7 ended TIMEOUT (exit code 0:15, reason TimeLimit)"


@pytest.mark.parametrize(
    ("stdout", "job_id"), [("42\n", "42"), ("42;lab\n", "42"), ("  9  \n", "9")]
)
def test_parsable_job_id(stdout: str, job_id: str) -> None:
    assert batch.parse_job_id(stdout) == job_id


def test_no_job_id_is_an_error() -> None:
    with pytest.raises(batch.BatchError, match="printed no job id"):
        batch.parse_job_id("Submitted batch job\n")


def test_refused_submission_names_slurms_reason() -> None:
    slurm = FakeSlurm([], sbatch_rc=1, sbatch_out="")
    with pytest.raises(batch.BatchError, match="invalid partition specified: gpu"):
        batch.submit_and_wait("s", 1.0, slurm, lambda _s: None)
    assert [c[0] for c in slurm.calls] == ["sbatch"]


def test_job_that_vanished_is_an_error_and_is_cancelled() -> None:
    slurm = FakeSlurm([RUNNING])
    with pytest.raises(batch.BatchError, match="Invalid job id"):
        batch.submit_and_wait("s", 1.0, slurm, lambda _s: None)
    assert slurm.calls[-1] == ["scancel", "7"]


def test_interrupt_cancels_the_job() -> None:
    def interrupted(_s: float) -> None:
        raise KeyboardInterrupt("signal 15")

    slurm = FakeSlurm([RUNNING, RUNNING])
    with pytest.raises(KeyboardInterrupt):
        batch.submit_and_wait("s", 1.0, slurm, interrupted)
    assert slurm.calls[-1] == ["scancel", "7"]


def test_missing_job_state_is_an_error() -> None:
    with pytest.raises(batch.BatchError, match="no JobState"):
        batch.job_end("7", batch.parse_job("JobId=7 JobName=x"))


def test_command_line_exit_status_and_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    slurm = FakeSlurm([RUNNING, FAILED])
    monkeypatch.setattr(batch, "run_command", slurm)
    sleeps: list[float] = []
    monkeypatch.setattr(batch.time, "sleep", sleeps.append)
    assert main(["sbatch", "/shared/smoke.sbatch", "--poll", "0.2"]) == 3
    out, err = capsys.readouterr()
    assert out == "Submitted batch job 7\n"
    assert sleeps == [0.2]
    assert slurm.calls[0] == ["sbatch", "--parsable", "/shared/smoke.sbatch"]
    assert "ddp_smoke sbatch: batch job 7 ended FAILED (exit code 3, reason NonZeroExitCode)" in err


def test_command_line_rejects_a_bad_poll_interval(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["sbatch", "s", "--poll", "0"])
    assert "is not a positive number" in capsys.readouterr().err


def test_command_line_reports_a_refused_submission(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(batch, "run_command", FakeSlurm([], sbatch_rc=1, sbatch_out=""))
    assert main(["sbatch", "s"]) == 1
    assert "ddp_smoke sbatch: sbatch s failed: sbatch: error: invalid partition" in (
        capsys.readouterr().err
    )


def test_job_pending_past_the_start_timeout_is_cancelled_with_slurms_reason() -> None:
    slurm = FakeSlurm([PENDING] * 10)
    sleeps: list[float] = []
    with pytest.raises(batch.BatchError, match=r"still PENDING after 3 s \(Reason=Resources\)"):
        batch.submit_and_wait("s", 1.0, slurm, sleeps.append, start_timeout_s=3)
    assert sleeps == [1.0, 1.0, 1.0]
    assert slurm.calls[-1] == ["scancel", "7"]


def test_pending_then_running_is_not_cut_by_the_start_timeout() -> None:
    slurm = FakeSlurm([PENDING, RUNNING, RUNNING, RUNNING, COMPLETED])
    end = batch.submit_and_wait("s", 1.0, slurm, lambda _s: None, start_timeout_s=1.5)
    assert end.returncode == 0
