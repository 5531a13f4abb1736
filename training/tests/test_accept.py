"""``accept``: per-node verdicts from the modes' reports, the history and the siblings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddp_smoke import accept
from ddp_smoke.accept import Job, Limits, ModeReport
from ddp_smoke.cli import main

NODES = ("node1", "node2", "node3")
MODEL = "mlp 1024-4096-1024-1"


def pass_body(
    steps: dict[str, float] | None = None,
    tcp_gbps: float | None = 20.0,
    busbw_gbps: float | None = 80.0,
    nodes: tuple[str, ...] = NODES,
    link_mbps: int | None = 25000,
) -> dict[str, object]:
    """A ``report --out`` PASS body: two ranks per node, rank 0 and the TCP peer."""
    steps = steps or {node: 19.3 for node in nodes}
    ranks = [
        {"rank": 2 * index + local, "host": node, "step_ms": step + local * 0.2}
        for index, (node, step) in enumerate(steps.items())
        for local in (0, 1)
    ]
    ends = [nodes[0], nodes[1 % len(nodes)]]
    tcp: dict[str, object] = {"hosts": ends, "same_host": len(nodes) == 1, "error": None}
    tcp.update(Gbps=tcp_gbps, link_Mbps=link_mbps)
    return {
        "verdict": "PASS",
        "mode": "srun",
        "label": "srun",
        "nodes": list(nodes),
        "backend": "nccl",
        "measurements": {
            "sweep": {"peak_busbw_Gbps": busbw_gbps},
            "tcp": tcp,
            "throughput": {"model": MODEL, "ranks": ranks},
            "scaling": None,
        },
    }


def fail_body(*causes: str) -> dict[str, object]:
    return {"verdict": "FAIL", "cause": "; ".join(causes), "causes": list(causes), "mode": "srun"}


def past(
    steps: dict[str, float] | None = None,
    tcp: float = 20.0,
    busbw: float = 80.0,
    node_passed: dict[str, bool] | None = None,
    **changes: object,
) -> dict[str, object]:
    """A history line as ``accept`` writes it."""
    entry: dict[str, object] = {
        "run_id": "old",
        "passed": True,
        "nodes": list(NODES),
        "node_passed": node_passed or dict.fromkeys(NODES, True),
        "backend": "nccl",
        "model": MODEL,
        "figures": {
            "step_ms": steps or dict.fromkeys(NODES, 19.3),
            "tcp_Gbps": {"node1|node2": tcp},
            "busbw_Gbps": {"node1,node2,node3": busbw},
            "link_Gbps": {"node1|node2": 25.0},
        },
    }
    entry.update(changes)
    return entry


def judged(
    *bodies: dict[str, object],
    pending: tuple[str, ...] = (),
    history: list[dict[str, object]] | None = None,
    nodes: tuple[str, ...] = NODES,
    limits: Limits | None = None,
) -> dict[str, object]:
    reports = [ModeReport(f"mode{index}", body) for index, body in enumerate(bodies)]
    job = Job(nodes=nodes, pending=pending)
    return accept.accept(reports, job, history or [], limits or Limits()).to_dict()


def verdicts(result: dict[str, object]) -> dict[str, bool]:
    nodes = result["nodes"]
    assert isinstance(nodes, dict)
    return {node: verdict["passed"] for node, verdict in nodes.items()}


def cause(result: dict[str, object], node: str) -> str:
    nodes = result["nodes"]
    assert isinstance(nodes, dict)
    return str(nodes[node]["cause"])


# --- Attribution ----------------------------------------------------------------------


def test_a_cause_names_a_node_as_a_whole_word() -> None:
    names = ("node1", "node10", "gpu-a1")
    assert accept.named_nodes("rank 3 on node10 failed: x", names) == ("node10",)
    assert accept.named_nodes("ranks 0-1 on node1, node10 failed", names) == ("node1", "node10")
    assert accept.named_nodes("rank 0 on gpu-a10 failed", names) == ()
    assert accept.named_nodes("node100 and xnode1", names) == ()


def test_failed_mode_blames_the_node_it_names_not_its_prefix() -> None:
    nodes = ("node1", "node10")
    result = judged(
        fail_body("rank 3 on node10 failed: all_reduce timed out"),
        pending=nodes,
        nodes=nodes,
    )
    assert result["passed"] is False
    assert verdicts(result) == {"node1": True, "node10": False}
    assert cause(result, "node10") == "[mode0] rank 3 on node10 failed: all_reduce timed out"
    assert cause(result, "node1") == ""
    assert result["causes"] == ["[mode0] rank 3 on node10 failed: all_reduce timed out"]


def test_unattributed_failure_blames_every_pending_node() -> None:
    result = judged(
        fail_body("rank 2 wrote no result: it did not finish"), pending=("node2", "node3")
    )
    assert verdicts(result) == {"node1": True, "node2": False, "node3": False}
    assert cause(result, "node3") == "[mode0] rank 2 wrote no result: it did not finish"


def test_unattributed_failure_without_pending_nodes_blames_every_node() -> None:
    result = judged(fail_body("no rank-*.json files: no rank finished (did the job start?)"))
    assert verdicts(result) == dict.fromkeys(NODES, False)


def test_a_cause_naming_only_a_node_in_service_leaves_the_pending_ones_unproven() -> None:
    result = judged(fail_body("rank 0 on node1 failed: CUDA error"), pending=("node3",))
    assert (result["passed"], verdicts(result)) == (
        False,
        {"node1": False, "node2": True, "node3": False},
    )


def test_a_cause_naming_a_pending_node_spares_the_peer_it_was_compared_with() -> None:
    text = "ranks 0-1 on node1, node3 failed: parameters of rank 1 on node3 differ from rank 0"
    result = judged(fail_body(text), pending=("node3",))
    assert verdicts(result) == {"node1": True, "node2": True, "node3": False}


def test_a_cut_list_of_hosts_also_blames_the_pending_nodes() -> None:
    cut = "ranks 0-5 on node1 and 2 more failed: NCCL error"
    result = judged(fail_body(cut), pending=("node3",))
    assert verdicts(result) == {"node1": False, "node2": True, "node3": False}


def test_causes_of_several_modes_are_joined_and_cut_short() -> None:
    long = "rank 5 on node3 failed: " + "x" * 400
    reports = [
        ModeReport("srun", fail_body("rank 4 on node3 failed: data set differs")),
        ModeReport("spawn", fail_body(long)),
    ]
    result = accept.accept(reports, Job(NODES, ("node3",)), [], Limits()).to_dict()
    first, second = cause(result, "node3").split("; ")
    assert first == "[srun] rank 4 on node3 failed: data set differs"
    assert len(second) == 200
    assert second.startswith("[spawn] rank 5 on node3 failed: xxx")
    assert second.endswith("...")
    assert result["modes"] == {"srun": "FAIL", "spawn": "FAIL"}


def test_missing_report_fails_its_mode(tmp_path: Path) -> None:
    report = accept.read_report(tmp_path / "torchrun.json")
    assert (report.mode, report.passed) == ("torchrun", False)
    assert report.causes == [
        f"mode torchrun wrote no report ({tmp_path}/torchrun.json does not exist)"
    ]
    assert accept.read_report(tmp_path / "spawn" / "report.json").mode == "spawn"
    result = accept.accept([report], Job(NODES, ("node2",)), [], Limits()).to_dict()
    assert verdicts(result) == {"node1": True, "node2": False, "node3": True}
    assert cause(result, "node2").startswith("[torchrun] mode torchrun wrote no report")


def test_unreadable_report_fails_its_mode(tmp_path: Path) -> None:
    (tmp_path / "srun.json").write_text("{not json")
    (tmp_path / "sbatch.json").write_text("[]")
    assert (
        accept.read_report(tmp_path / "srun.json")
        .causes[0]
        .startswith(f"mode srun report {tmp_path}/srun.json is unreadable: ")
    )
    assert accept.read_report(tmp_path / "sbatch.json").causes == [
        f"mode sbatch report {tmp_path}/sbatch.json holds no PASS or FAIL verdict"
    ]


def test_a_passed_mode_that_missed_a_node_fails_that_node() -> None:
    result = judged(pass_body(nodes=("node1", "node2")), pending=("node3",))
    assert verdicts(result) == {"node1": True, "node2": True, "node3": False}
    assert cause(result, "node3") == "[mode0] passed without node3: it ran on node1, node2"


# --- Figures --------------------------------------------------------------------------


def test_figures_of_the_first_mode_that_measured_them() -> None:
    bare = {"verdict": "PASS", "mode": "torchrun", "nodes": list(NODES), "measurements": {}}
    steps = {"node1": 10.0, "node2": 12.0, "node3": 11.0}
    result = judged(bare, pass_body(steps, tcp_gbps=18.5, busbw_gbps=70.25), fail_body("x"))
    assert result["figures"] == {
        # the median of each node's two ranks (step and step + 0.2)
        "step_ms": {"node1": 10.1, "node2": 12.1, "node3": 11.1},
        "tcp_Gbps": {"node1|node2": 18.5},
        "busbw_Gbps": {"node1,node2,node3": 70.25},
        "link_Gbps": {"node1|node2": 25.0},
    }


def test_tcp_on_one_host_or_failed_is_no_figure() -> None:
    body = pass_body()
    measurements = body["measurements"]
    assert isinstance(measurements, dict)
    measurements["tcp"] = {"hosts": ["node1", "node1"], "same_host": True, "Gbps": 90.0}
    figures = accept.extract_figures([ModeReport("srun", body)])
    assert (figures.values["tcp_Gbps"], figures.values["link_Gbps"]) == ({}, {})


def test_busbw_of_one_node_is_keyed_by_that_node() -> None:
    one = pass_body({"node2": 5.0}, nodes=("node2",), busbw_gbps=900.0)
    figures = accept.extract_figures([ModeReport("srun", one)])
    assert figures.values["busbw_Gbps"] == {"node2": 900.0}
    assert (figures.backend, figures.model) == ("nccl", MODEL)


# --- History --------------------------------------------------------------------------


def test_history_is_compared_only_with_min_history_passing_runs() -> None:
    # node3's step (31.2 ms) is 1.6x its past 19.3 ms, but only 1.24x its siblings' 25.1 ms.
    slow = pass_body({"node1": 25.0, "node2": 25.0, "node3": 31.1})
    two = [past(), past()]
    result = judged(slow, pending=("node3",), history=two)
    assert result["passed"] is True  # 2 passing runs are no baseline
    baseline = result["baseline"]
    assert isinstance(baseline, dict)
    assert baseline["step_ms"]["node3"] == {"median": None, "runs": 2}
    result = judged(slow, pending=("node3",), history=[*two, past()])
    assert verdicts(result) == {"node1": True, "node2": True, "node3": False}
    assert result["baseline"]["step_ms"]["node3"] == {"median": 19.3, "runs": 3}  # type: ignore[index]


def test_slowdown_fails_a_node_with_its_figures_in_the_message() -> None:
    slow = pass_body({"node1": 25.0, "node2": 25.0, "node3": 31.1})  # node3's ranks: 31.1, 31.3
    result = judged(slow, pending=("node3",), history=[past() for _ in range(5)])
    assert verdicts(result) == {"node1": True, "node2": True, "node3": False}  # 25.1: 30% slower
    assert cause(result, "node3") == (
        "[mode0] node3: step 31.2 ms, 62% slower than its median 19.3 ms over the last 5 runs "
        "(limit 50%)"
    )
    # the same step passes a looser limit
    result = judged(slow, history=[past()] * 5, limits=Limits(max_slowdown=0.7))
    assert result["passed"] is True


def test_baseline_is_the_median_of_the_last_window_passing_values() -> None:
    history = [past({"node1": 100.0}) for _ in range(5)]
    history += [past({"node1": value}) for value in (10.0, 11.0, 12.0)]
    history.append(past({"node1": 1.0}, node_passed={"node1": False}))  # failed: not counted
    history.append(past({"node1": 1.0}, model="mlp 256-1024-256-1"))  # another model
    base = accept.baseline(history, "step_ms", "node1", Limits(window=3), {"model": MODEL})
    assert (base.median, base.runs) == (11.0, 3)
    base = accept.baseline(history, "step_ms", "node1", Limits(window=10), {"model": MODEL})
    assert (base.median, base.runs) == (100.0, 8)


def test_sibling_straggler_in_the_same_run() -> None:
    result = judged(pass_body({"node1": 18.9, "node2": 18.9, "node3": 39.9}), pending=NODES)
    assert verdicts(result) == {"node1": True, "node2": True, "node3": False}
    assert (
        cause(result, "node3") == "[mode0] node3: step 40 ms, 2.1x its siblings' 19 ms (limit 1.5x)"
    )
    assert result["baseline"]["siblings_step_ms"] == 19.0  # type: ignore[index]


def test_pair_regression_fails_the_pending_node_of_the_pair() -> None:
    history = [past(tcp=10.0) for _ in range(3)]
    result = judged(pass_body(tcp_gbps=5.0), pending=("node2", "node3"), history=history)
    assert verdicts(result) == {"node1": True, "node2": False, "node3": True}
    assert cause(result, "node2") == (
        "[mode0] node1|node2: TCP 5 Gbit/s, 100% slower than its median 10 Gbit/s over the "
        "last 3 runs (limit 50%)"
    )
    # within the limit: 10 / 1.5 = 6.67 Gbit/s still passes
    assert judged(pass_body(tcp_gbps=6.7), pending=("node2",), history=history)["passed"] is True


def test_pair_regression_without_pending_nodes_fails_both() -> None:
    history = [past(tcp=10.0) for _ in range(3)]
    result = judged(pass_body(tcp_gbps=5.0), pending=("node3",), history=history)
    assert result["passed"] is False
    assert verdicts(result) == {"node1": False, "node2": False, "node3": True}


def test_busbw_regression_over_the_node_set() -> None:
    history = [past(busbw=80.0) for _ in range(4)]
    result = judged(pass_body(busbw_gbps=40.0), pending=("node3",), history=history)
    assert verdicts(result) == {"node1": True, "node2": True, "node3": False}
    assert cause(result, "node3") == (
        "[mode0] node1,node2,node3: peak all_reduce busbw 40 Gbit/s, 100% slower than its "
        "median 80 Gbit/s over the last 4 runs (limit 50%)"
    )
    gloo = [past(busbw=80.0, backend="gloo") for _ in range(4)]
    assert judged(pass_body(busbw_gbps=40.0), history=gloo)["passed"] is True  # not comparable


def test_history_skips_corrupt_lines_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    lines = [json.dumps(past()), "{truncated", "[1, 2]", "", json.dumps(past(tcp=11.0))]
    path.write_text("\n".join(lines) + "\n")
    entries, warnings = accept.read_history(path)
    assert [entry["figures"]["tcp_Gbps"] for entry in entries] == [  # type: ignore[index]
        {"node1|node2": 20.0},
        {"node1|node2": 11.0},
    ]
    assert len(warnings) == 2
    assert warnings[0].startswith(f"history {path} line 2 is not JSON, skipped: ")
    assert warnings[1] == f"history {path} line 3 is no entry with figures, skipped"
    assert accept.read_history(tmp_path / "absent.jsonl") == ([], [])


# --- The command ----------------------------------------------------------------------


def run_accept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, dict[str, object], str]:
    code = main(["accept", *args])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out else {}, err


def test_cli_passes_and_appends_the_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "srun.json").write_text(json.dumps(pass_body()))
    history = tmp_path / "lab" / "history.jsonl"  # the folder does not exist yet
    args = [str(tmp_path / "srun.json"), "--nodes", "node[1-3]", "--pending", "node3"]
    args += ["--history", str(history), "--run-id", "r1", "--partition", "gpu"]
    code, body, _ = run_accept(tmp_path, capsys, *args)
    assert (code, body["passed"], verdicts(body)) == (0, True, dict.fromkeys(NODES, True))
    assert body["modes"] == {"srun": "PASS"}
    (line,) = history.read_text().splitlines()
    entry = json.loads(line)
    assert {key: entry[key] for key in ("run_id", "partition", "nodes", "pending", "passed")} == {
        "run_id": "r1",
        "partition": "gpu",
        "nodes": list(NODES),
        "pending": ["node3"],
        "passed": True,
    }
    assert entry["node_passed"] == dict.fromkeys(NODES, True)
    assert entry["figures"] == body["figures"]
    assert entry["time"].endswith("+00:00")
    assert (entry["backend"], entry["model"]) == ("nccl", MODEL)


def test_cli_fails_with_exit_1_and_warns_of_corrupt_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = tmp_path / "history.jsonl"
    history.write_text(json.dumps(past()) + "\nnot json\n")
    args = [str(tmp_path / "srun.json"), "--nodes=node1,node2,node3", "--pending="]
    code, body, err = run_accept(tmp_path, capsys, *args, f"--history={history}")
    assert (code, body["passed"], verdicts(body)) == (1, False, dict.fromkeys(NODES, False))
    assert f"ddp_smoke accept: warning: history {history} line 2 is not JSON, skipped" in err
    assert "ddp_smoke accept: FAIL for node1, node2, node3" in err
    last = json.loads(history.read_text().splitlines()[-1])
    assert (last["passed"], last["node_passed"]) == (False, dict.fromkeys(NODES, False))


def test_cli_bad_input_exits_2_and_appends_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = tmp_path / "history.jsonl"
    args = [str(tmp_path / "srun.json"), "--nodes", "node1,node2", "--pending", "node9"]
    code, body, err = run_accept(tmp_path, capsys, *args, "--history", str(history))
    assert (code, body) == (2, {})
    assert "pending node node9 is not among --nodes node1,node2" in err
    assert not history.exists()
    with pytest.raises(SystemExit) as caught:
        main(["accept", "x.json", "--nodes", "a", "--history", str(history), "--window", "0"])
    assert caught.value.code == 2
