"""Ranks that fail before they can report: named, with their node and exception, from
the launch's output (``crashes.LaunchLog``), and the ranks that only waited not blamed."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

from ddp_smoke import accept, modes
from ddp_smoke.crashes import Crash, LaunchLog, task_ids
from ddp_smoke.report import render, report

WHEEL = "/shared/.cluster/smoke/ddp_smoke-0.1.0-py3-none-any.whl/ddp_smoke"
TORCH_MISSING = "ModuleNotFoundError: No module named 'torch'"
# `python -m ddp_smoke run` on a node whose venv lost torch (the traceback as Python
# 3.11 prints it), labelled by `srun --label`.
IMPORT_TRACEBACK = f"""Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "<frozen runpy>", line 88, in _run_code
  File "{WHEEL}/__main__.py", line 10, in <module>
    sys.exit(main())
             ^^^^^^
  File "{WHEEL}/cli.py", line 418, in main
    from ddp_smoke.rank import start
  File "{WHEEL}/rank.py", line 32, in <module>
    import torch
{TORCH_MISSING}"""
# The user's run: srun mode, 2 ranks, --kill-on-bad-exit=1 ends rank 0 at rendezvous.
KILLED_AT_RENDEZVOUS = [
    *(f"1: {line}" for line in IMPORT_TRACEBACK.splitlines()),
    "srun: error: node2: task 1: Exited with exit code 1",
    "srun: Terminating StepId=41.0",
    "slurmstepd: error: *** STEP 41.0 ON node1 CANCELLED AT 2026-12-03T08:31:55 ***",
    "srun: error: node1: task 0: Terminated",
    "srun: Force Terminated StepId=41.0",
]
RDZV = "RuntimeError: rendezvous at tcp://node1:29533 failed: "
TIMED_OUT = RDZV + "Timed out after 31 seconds waiting for clients. 2/3 clients joined."
LOST = RDZV + "Failed to recv, got 0 bytes. Connection was likely closed."
# What `ddp_smoke run` prints when its rendezvous times out (as captured, shortened).
RDZV_TRACEBACK = """Traceback (most recent call last):
  File "{wheel}/rank.py", line 126, in _run_rank
    dist.init_process_group(
torch.distributed.DistStoreError: Timed out after 31 seconds waiting for clients.

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "{wheel}/rank.py", line 84, in run_rank
    _run_rank(ctx, options, parse_faults(env.get(FAULT_ENV, "")), record)
  File "{wheel}/rank.py", line 135, in _run_rank
    raise RuntimeError(f"rendezvous at {{ctx.rendezvous}} failed: {{exc}}") from exc
{error}
ddp_smoke: FAIL rank {rank} on {host}: {error}"""


def labelled(task: int, text: str) -> list[str]:
    return [f"{task}: {line}" for line in text.splitlines()]


def timed_out_job_output() -> list[str]:
    """A batch job's slurm-<id>.out: 3 ranks, rank 1 raises at import, ranks 0 and 2
    time out at rendezvous (write their files, print their tracebacks)."""
    return [
        *labelled(0, RDZV_TRACEBACK.format(wheel=WHEEL, error=TIMED_OUT, rank=0, host="node1")),
        *labelled(1, IMPORT_TRACEBACK),
        "srun: error: node2: task 1: Exited with exit code 1",
        *labelled(2, RDZV_TRACEBACK.format(wheel=WHEEL, error=LOST, rank=2, host="node3")),
        "srun: error: node1: task 0: Exited with exit code 1",
        "srun: error: node3: task 2: Exited with exit code 1",
    ]


def rendezvous_record(rank: int, host: str, error: str) -> dict[str, object]:
    """The rank file of a rank whose rendezvous failed (``rank.run_rank``)."""
    return {
        "schema": 2,
        "rank": rank,
        "local_rank": 0,
        "world_size": 3,
        "job_id": "77",
        "host": host,
        "mode": "srun",
        "label": "sbatch",
        "status": "fail",
        "error": error,
        "checks": [],
    }


def read(lines: list[str], task_is_rank: bool = True) -> list[Crash]:
    log = LaunchLog()
    for line in lines:
        log.feed(line + "\n")
    return log.crashes(task_is_rank)


def judge_node(body: dict[str, object], nodes: tuple[str, ...]) -> list[accept.Finding]:
    """What ``accept`` blames for a mode that failed with ``body``, all nodes pending."""
    job = accept.Job(nodes=nodes, pending=nodes)
    return accept.mode_findings(accept.ModeReport("srun", body), job)


# --- Reading the launch's output ------------------------------------------------------


def test_the_exception_line_is_kept_with_the_task_and_node_srun_named() -> None:
    assert read(KILLED_AT_RENDEZVOUS) == [
        Crash("ended by signal Terminated", task=0, host="node1", rank=0),
        Crash(f"raised {TORCH_MISSING}", task=1, host="node2", rank=1),
    ]
    assert [crash.waited for crash in read(KILLED_AT_RENDEZVOUS)] == [True, False]


def test_chained_tracebacks_keep_the_last_exception_and_rendezvous_failures_wait() -> None:
    crashes = read(timed_out_job_output())
    assert [(crash.rank, crash.host, crash.waited) for crash in crashes] == [
        (0, "node1", True),
        (1, "node2", False),
        (2, "node3", True),
    ]
    # ddp_smoke's own FAIL line, after the traceback, is the last word of ranks 0 and 2
    assert crashes[0].what == f"failed: {TIMED_OUT}"
    assert crashes[1].what == f"raised {TORCH_MISSING}"


def test_one_line_failures_torchrun_without_torch_and_a_missing_python() -> None:
    runpy = (
        "1: /shared/.cluster/venvs/ddp-smoke/bin/python3: Error while finding module "
        f"specification for 'torch.distributed.run' ({TORCH_MISSING})"
    )
    execve = "0: slurmstepd: error: execve(): /opt/venv/bin/python3: No such file or directory"
    lines = [
        execve,
        runpy,
        "srun: error: node[1-2]: tasks 0-1: Exited with exit code 1",
        "srun: error: node3: task 2: Segmentation fault (core dumped)",
        " 3: ddp_smoke: cannot start: SLURM_PROCID is not set: launch each rank with srun",
    ]
    assert read(lines, task_is_rank=False) == [
        Crash("failed: execve(): /opt/venv/bin/python3: No such file or directory", task=0),
        Crash(f"raised {TORCH_MISSING}", task=1),  # srun's line names two hosts: neither
        Crash("ended by signal Segmentation fault (core dumped)", task=2, host="node3"),
        Crash("failed: SLURM_PROCID is not set: launch each rank with srun", task=3),
    ]


def test_unlabelled_output_is_the_one_task_that_exited_with_a_code() -> None:
    unlabelled = [line.removeprefix("1: ") for line in KILLED_AT_RENDEZVOUS]
    assert read(unlabelled)[1] == Crash(f"raised {TORCH_MISSING}", task=1, host="node2", rank=1)
    # Two tasks exited with a code: whose traceback it was is not known.
    both = [*unlabelled, "srun: error: node3: task 2: Exited with exit code 1"]
    assert read(both)[-1] == Crash(f"raised {TORCH_MISSING}")


def test_srun_task_lists() -> None:
    assert task_ids("0-2,5") == [0, 1, 2, 5]
    assert task_ids("[3]") == [3]


# --- The verdict: who is a cause ------------------------------------------------------


def test_no_rank_finished_names_the_node_that_raised_and_quotes_the_exception(
    tmp_path: Path,
) -> None:
    body = report(tmp_path, 2, read(KILLED_AT_RENDEZVOUS)).to_dict()
    cause = f"rank 1 on node2 raised {TORCH_MISSING} before writing its result"
    assert body["causes"] == [cause]
    assert body["waited"] == ["rank 0 on node1 ended by signal Terminated"]
    assert body["crashed"] == [
        {"what": f"raised {TORCH_MISSING}", "task": 1, "host": "node2", "rank": 1}
    ]
    assert render(body).splitlines()[1:] == [
        f"  - {cause}",
        "  (waited, not a cause: rank 0 on node1 ended by signal Terminated)",
    ]
    # accept blames node2 alone; node1's rank only waited for it
    [finding] = judge_node(body, ("node1", "node2"))
    assert finding.nodes == ("node2",)


def test_ranks_that_timed_out_at_rendezvous_are_not_causes(tmp_path: Path) -> None:
    for rank, host, error in ((0, "node1", TIMED_OUT), (2, "node3", LOST)):
        record = rendezvous_record(rank, host, error)
        (tmp_path / f"rank-{rank}.json").write_text(json.dumps(record))
    body = report(tmp_path, 3, read(timed_out_job_output())).to_dict()
    assert body["causes"] == [f"rank 1 on node2 raised {TORCH_MISSING} before writing its result"]
    assert body["waited"] == [
        f"rank 0 on node1 failed: {TIMED_OUT}",
        f"rank 2 on node3 failed: {LOST}",
    ]
    nodes = ("node1", "node2", "node3")
    assert [finding.nodes for finding in judge_node(body, nodes)] == [("node2",)]
    # Without what the launch printed, the verdict is what it was: every rank a cause.
    assert report(tmp_path, 3).causes == [
        "rank 1 wrote no result: it did not finish",
        f"rank 0 on node1 failed: {TIMED_OUT}",
        f"rank 2 on node3 failed: {LOST}",
    ]


def test_a_node_that_crashed_in_torchrun_mode_is_named_without_a_rank(tmp_path: Path) -> None:
    crashes = [
        Crash("failed: RendezvousTimeoutError: ", task=0, host="node1"),
        Crash(f"raised {TORCH_MISSING}", task=1, host="node2"),
    ]
    body = report(tmp_path, 4, crashes).to_dict()
    assert body["causes"] == [f"task 1 on node2 raised {TORCH_MISSING} before writing its result"]
    assert body["waited"] == [
        "task 0 on node1 failed: RendezvousTimeoutError: ",
        "ranks 0-3 wrote no result",
    ]


def test_waiting_alone_blames_nobody_new_and_a_complete_set_ignores_the_output(
    tmp_path: Path,
) -> None:
    ended = [Crash("ended by signal Terminated", task=0, host="node1", rank=0)]
    body = report(tmp_path, 2, ended).to_dict()
    # no rank crashed on its own: the verdict names no node, as before
    assert body["causes"] == [
        "no rank-*.json files: no rank finished (did the job start?)",
        "ranks 0-1 wrote no result: they did not finish",
    ]
    assert body["waited"] == ["rank 0 on node1 ended by signal Terminated"]
    passing = {**rendezvous_record(0, "node1", ""), "world_size": 1, "status": "pass"}
    (tmp_path / "rank-0.json").write_text(json.dumps({**passing, "error": None}))
    stray = [Crash(f"raised {TORCH_MISSING}")]  # a traceback nobody's: no cause once all passed
    assert report(tmp_path, 1, stray).passed


# --- The mode runner reads the launch's output and the batch job's file ----------------


def run_plan(plan: dict) -> dict:
    out = io.StringIO()
    assert modes.main(io.StringIO(json.dumps(plan)), out) == 0
    return json.loads(out.getvalue())


def test_the_mode_runner_judges_with_the_launch_output(tmp_path: Path) -> None:
    printer = "import sys; print(sys.argv[1]); sys.exit(1)"
    folder = tmp_path / "srun"
    argv = [sys.executable, "-c", printer, "\n".join(KILLED_AT_RENDEZVOUS)]
    spec = {"mode": "srun", "dir": str(folder), "argv": argv}
    outcome = run_plan({"world_size": 2, "modes": [spec]})
    assert outcome["cause"] == f"rank 1 on node2 raised {TORCH_MISSING} before writing its result"
    assert json.loads((folder / "report.json").read_text())["crashed"][0]["host"] == "node2"


def test_the_mode_runner_reads_the_batch_jobs_output_file(tmp_path: Path) -> None:
    folder = tmp_path / "sbatch"
    folder.mkdir()
    (folder / "slurm-77.out").write_text("\n".join(timed_out_job_output()) + "\n")
    spec = {"mode": "sbatch", "dir": str(folder), "argv": ["sh", "-c", "exit 1"]}
    outcome = run_plan({"world_size": 3, "modes": [spec]})
    assert outcome["cause"] == f"rank 1 on node2 raised {TORCH_MISSING} before writing its result"
