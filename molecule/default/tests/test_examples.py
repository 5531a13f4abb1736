"""The job templates (files/examples) run as a lab user would submit them: copied
from root's folder into the user's own, submitted as that user, output there."""

from __future__ import annotations

import re

import pytest
from conftest import host

CTL = host("ctl")
EXAMPLES = "/shared/.cluster/examples"
HOME = "/shared/home/alice"


def as_alice(cmd: str):
    return CTL.run(f"runuser -u alice -- sh -c {cmd!r}")


@pytest.mark.parametrize(
    ("script", "world"),
    [("torchrun-one-node.sbatch", 1), ("torchrun-multi-node.sbatch", 2), ("srun-env.sbatch", 2)],
)
def test_template_runs_every_rank_as_a_lab_user(script: str, world: int) -> None:
    run = as_alice(
        f"cd {HOME} && cp {EXAMPLES}/{script} {EXAMPLES}/train_ddp.py . "
        f"&& timeout 300 sbatch --wait --parsable {script}"
    )
    job = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    name = script.removesuffix(".sbatch")
    output = CTL.file(f"{HOME}/{name}-{job}.out")
    out = CTL.check_output(f"cat {HOME}/{name}-{job}.out") if output.exists else run.stderr
    assert run.rc == 0, f"sbatch --wait exited {run.rc}; job {job} printed:\n{out}"
    # The output is alice's, in alice's folder.
    assert (output.user, output.group) == ("alice", "lab")
    ranks = re.findall(rf"rank (\d+)/{world} on (\S+): loss [\d.]+, all_reduce {world}", out)
    assert sorted(int(r) for r, _ in ranks) == list(range(world)), out
    if world == 2:
        assert {h for _, h in ranks} == {"node1", "node2"}, out
    state = CTL.check_output(
        f"sacct --noheader --parsable2 --jobs={job} --format=State,User,Account"
    )
    assert state.splitlines()[0] == "COMPLETED|alice|lab", state
