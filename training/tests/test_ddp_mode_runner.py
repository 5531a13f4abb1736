"""``ddp_smoke modes``: a partition's launch modes one after another, each judged."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

from ddp_smoke import modes

# A launch that writes two passing rank files (what `ddp_smoke run` leaves) and says so.
WRITE_RANKS = (
    "import json, sys, pathlib; d = pathlib.Path(sys.argv[1]);\n"
    "for r in (0, 1):\n"
    "    (d / f'rank-{r}.json').write_text(json.dumps({'schema': 1, 'rank': r, 'local_rank': 0,"
    " 'world_size': 2, 'job_id': '7', 'host': f'node{r + 1}', 'master': 'node1:20007',"
    " 'backend': 'gloo', 'device': 'cpu', 'torch': '2.13.0+cpu', 'nodes': ['node1', 'node2'],"
    " 'checks': [{'name': 'world_size', 'ok': True, 'detail': 'world size 2'}],"
    " 'losses': [0.6, 0.2], 'elapsed_s': 1.5, 'status': 'pass', 'error': None,"
    " 'timings_s': {'import': 0.9, 'train': 0.5}}))\n"
    "print('ddp_smoke: PASS')\n"
)


def run(plan: dict) -> tuple[int, list[dict]]:
    out = io.StringIO()
    rc = modes.main(io.StringIO(json.dumps(plan)), out)
    return rc, [json.loads(line) for line in out.getvalue().splitlines()]


def test_each_mode_is_launched_judged_and_timed(tmp_path: Path) -> None:
    plan = {
        "world_size": 2,
        "nodes": "",  # no Slurm here: nothing to wait for
        "modes": [
            {
                "mode": "srun",
                "dir": str(tmp_path / "srun"),
                "argv": [sys.executable, "-c", WRITE_RANKS, str(tmp_path / "srun")],
            },
            {
                "mode": "sbatch",
                "dir": str(tmp_path / "sbatch"),
                "argv": [
                    "sh",
                    "-c",
                    f"cat {tmp_path}/sbatch/smoke.sbatch >/dev/null; echo no >&2; exit 3",
                ],
                "script": "#!/bin/bash\nsrun true\n",
            },
        ],
    }
    rc, outcomes = run(plan)
    assert rc == 0
    first, second = outcomes
    assert first["mode"] == "srun"
    assert first["passed"] is True
    assert first["launch_rc"] == 0
    assert first["tail"] == ["ddp_smoke: PASS"]
    assert first["phases_s"] == {"import": 0.9, "train": 0.5}
    # what no rank holds: the launch less the slowest rank's own time and its import
    assert first["startup_s"] == round(first["launch_s"] - 1.5 - 0.9, 2)
    assert first["table"].startswith("ddp_smoke PASS")
    assert json.loads((tmp_path / "srun" / "report.json").read_text())["verdict"] == "PASS"
    # A failing mode does not stop the plan; its batch script was written first.
    assert (tmp_path / "sbatch" / "smoke.sbatch").read_text() == "#!/bin/bash\nsrun true\n"
    assert second["passed"] is False
    assert second["launch_rc"] == 3
    assert second["tail"] == ["no"]
    assert "no rank-*.json files" in second["cause"]


def test_a_command_that_cannot_start_and_a_folder_that_cannot_be_made(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    rc, outcomes = run(
        {
            "world_size": 1,
            "modes": [
                {"mode": "srun", "dir": str(tmp_path / "a"), "argv": ["/no/such/srun"]},
                {"mode": "spawn", "dir": str(blocked / "spawn"), "argv": ["true"]},
            ],
        }
    )
    assert rc == 0
    assert outcomes[0]["launch_rc"] == 127
    assert "cannot run /no/such/srun" in outcomes[0]["tail"][0]
    assert outcomes[1]["launch_rc"] == modes.LAUNCHER_FAILED
    assert outcomes[1]["cause"].startswith("no report: ddp_smoke launcher: cannot prepare")


def test_a_bad_plan_runs_nothing() -> None:
    assert run({"world_size": 2, "modes": [{"mode": "srun"}]}) == (2, [])
    assert modes.main(io.StringIO("not json"), io.StringIO()) == 2


def test_the_wait_for_completing_nodes_is_bounded() -> None:
    asked: list[str] = []

    def busy(nodes: str) -> bool:
        asked.append(nodes)
        return len(asked) < 3

    assert modes.settle("node[1-2]", 5, busy) < 1
    assert asked == ["node[1-2]"] * 3
    assert modes.settle("node1", 0.3, lambda _: True) >= 0.3  # never frees: gives up
    assert modes.settle("", 5, lambda _: True) == 0  # no nodes named: no wait
