"""The job templates (files/examples) run as a user would submit them."""

from __future__ import annotations

import re

import pytest
from conftest import host

CTL = host("ctl")
EXAMPLES = "/shared/examples"


@pytest.mark.parametrize(
    ("script", "world"),
    [("torchrun-one-node.sbatch", 1), ("torchrun-multi-node.sbatch", 2), ("srun-env.sbatch", 2)],
)
def test_template_runs_every_rank(script: str, world: int) -> None:
    run = CTL.run(f"cd {EXAMPLES} && timeout 300 sbatch --wait --parsable {script}")
    job = run.stdout.strip()
    name = script.removesuffix(".sbatch")
    out = CTL.check_output(f"cat {EXAMPLES}/{name}-{job}.out")
    assert run.rc == 0, f"sbatch --wait exited {run.rc}; job {job} printed:\n{out}"
    ranks = re.findall(rf"rank (\d+)/{world} on (\S+): loss [\d.]+, all_reduce {world}", out)
    assert sorted(int(r) for r, _ in ranks) == list(range(world)), out
    if world == 2:
        assert {h for _, h in ranks} == {"node1", "node2"}, out
    state = CTL.check_output(f"sacct --noheader --parsable2 --jobs={job} --format=State")
    assert state.splitlines()[0] == "COMPLETED", state
