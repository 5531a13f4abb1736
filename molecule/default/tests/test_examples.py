"""The job templates (files/examples) run as a lab user would submit them: copied
from root's folder into the user's own, submitted as that user, output there.

The test waits for each job by asking Slurm every half second, not with
`sbatch --wait`, which asks only after 2, 10 and 42 s: the two-node torchrun
job took 42.6 s that way (make test, 2026-12-07 05:39).
"""

from __future__ import annotations

import re
import time

import pytest
from conftest import host

CTL = host("ctl")
EXAMPLES = "/shared/.cluster/examples"
HOME = "/shared/home/alice"


# The states of a job that has ended (squeue --states=all keeps them for MinJobAge).
ENDED = {
    "BOOT_FAIL",
    "CANCELLED",
    "COMPLETED",
    "DEADLINE",
    "FAILED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "TIMEOUT",
}


def as_alice(cmd: str):
    return CTL.run(f"runuser -u alice -- sh -c {cmd!r}")


def wait_for_end(job: str, seconds: float) -> str:
    """The job's state once it has ended (within ``seconds``), asked every 0.5 s."""
    deadline = time.monotonic() + seconds
    while True:
        state = CTL.run(f"squeue --noheader --states=all --jobs={job} --format=%T").stdout.strip()
        if state in ENDED or time.monotonic() > deadline:
            return state
        time.sleep(0.5)


def accounted(job: str, seconds: float = 30) -> str:
    """The job's accounting line once slurmdbd has its end (it comes a moment after)."""
    deadline = time.monotonic() + seconds
    while True:
        line = CTL.check_output(
            f"sacct --noheader --parsable2 --jobs={job} --format=State,User,Account,ExitCode"
        ).splitlines()
        if (line and line[0].split("|")[0] in ENDED) or time.monotonic() > deadline:
            return line[0] if line else ""
        time.sleep(0.5)


@pytest.mark.parametrize(
    ("script", "world"),
    [("torchrun-one-node.sbatch", 1), ("torchrun-multi-node.sbatch", 2), ("srun-env.sbatch", 2)],
)
def test_template_runs_every_rank_as_a_lab_user(script: str, world: int) -> None:
    run = as_alice(
        f"cd {HOME} && cp {EXAMPLES}/{script} {EXAMPLES}/train_ddp.py . "
        f"&& sbatch --parsable {script}"
    )
    assert run.rc == 0 and run.stdout.strip(), f"sbatch exited {run.rc}: {run.stderr}"
    job = run.stdout.strip().splitlines()[-1].split(";")[0]
    state = wait_for_end(job, 300)
    name = script.removesuffix(".sbatch")
    output = CTL.file(f"{HOME}/{name}-{job}.out")
    out = CTL.check_output(f"cat {HOME}/{name}-{job}.out") if output.exists else run.stderr
    assert state == "COMPLETED", (
        f"job {job} ended {state or 'not within 300 s'}; it printed:\n{out}"
    )
    # The output is alice's, in alice's folder.
    assert (output.user, output.group) == ("alice", "lab")
    ranks = re.findall(rf"rank (\d+)/{world} on (\S+): loss [\d.]+, all_reduce {world}", out)
    assert sorted(int(r) for r, _ in ranks) == list(range(world)), out
    if world == 2:
        assert {h for _, h in ranks} == {"node1", "node2"}, out
    line = accounted(job)
    assert line == "COMPLETED|alice|lab|0:0", line
