"""The job templates (files/examples) run as a lab user would submit them: copied
from root's folder into the user's own, submitted as that user, output there.

The test waits for each job by asking Slurm every half second, not with
`sbatch --wait`, which asks only after 2, 10 and 42 s: the two-node torchrun
job took 42.6 s that way (make test, 2026-12-07 05:39).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable

import pytest
from conftest import ROOT, host

sys.path.insert(0, str(ROOT / "training"))
from ddp_smoke.batch import ACTIVE_STATES

CTL = host("ctl")
EXAMPLES = "/shared/.cluster/examples"
HOME = "/shared/home/alice"


def as_alice(cmd: str):
    return CTL.run(f"runuser -u alice -- sh -c {cmd!r}")


def queued(job: str) -> str:
    """The job's state; squeue --states=all keeps an ended job for MinJobAge (300 s by default)."""
    return CTL.run(f"squeue --noheader --states=all --jobs={job} --format=%T").stdout.strip()


def accounted(job: str) -> str:
    """The job's accounting line (slurmdbd records its end a moment after slurmctld)."""
    lines = CTL.check_output(
        f"sacct --noheader --parsable2 --jobs={job} --format=State,User,Account,ExitCode"
    ).splitlines()
    return lines[0] if lines else ""


def ended(read: Callable[[], str], seconds: float) -> str:
    """``read()``'s answer once its first field is the state of a job that has ended
    (asked every 0.5 s); its last answer after ``seconds``. The states a job has not
    ended in are the smoke package's own list (ddp_smoke.batch, ``ddp_smoke sbatch``)."""
    deadline = time.monotonic() + seconds
    while True:
        got = read()
        state = got.split("|")[0]
        if (state and state not in ACTIVE_STATES) or time.monotonic() > deadline:
            return got
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
    state = ended(lambda: queued(job), 300)
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
    line = ended(lambda: accounted(job), 30)
    assert line == "COMPLETED|alice|lab|0:0", line
