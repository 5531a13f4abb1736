"""The cluster report per cluster: the health program's files kept from every compute
node (cluster_health_files.py), two clusters in one checkout, and the read task of
roles/monitoring/tasks/report.yml run by Ansible against this machine."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.gpulab.slurm_cluster.plugins.plugin_utils import (  # noqa: E402
    cluster_health_files,
    cluster_report,
)
from test_monitoring import playbook  # noqa: E402  (report.yml run on this machine)

FIXTURE = ROOT / "tests" / "fixtures" / "monitoring"
DRAIN = {"event": "drain", "node": "node2", "time": 1796188200.5,
         "reason": "health: shared.fs: /shared/.cluster is missing"}  # fmt: skip
RESUME = {"event": "resume", "node": "node2", "time": 1796188800.0, "reason": ""}


def line(event: dict) -> str:
    """An event as the health program writes it (json.dumps, sort_keys)."""
    return json.dumps(event, sort_keys=True)


def read_output(last: str, *events: dict) -> str:
    """What the read task's one command prints on a node."""
    tail = "\n".join(line(e) for e in events)
    return f"{last}\n{cluster_health_files.READ_MARKER}\n{tail}"


# --------------------------------------------------------------------------- merge


def test_merge_keeps_last_verdict_and_events(tmp_path: Path) -> None:
    last = (FIXTURE / "health-last-fail.json").read_text()
    changed = cluster_health_files.merge(tmp_path, {"node2": read_output(last, DRAIN)})
    assert changed == {"node2": {"last": True, "events": 1}}
    kept = json.loads((tmp_path / "health" / "node2.json").read_text())
    assert kept["verdict"] == "FAIL" and kept["slurm_state"] == "IDLE+DRAIN"
    assert (tmp_path / "health" / "node2-events.jsonl").read_text() == line(DRAIN) + "\n"
    # The same read again: nothing changes, nothing is written twice.
    again = cluster_health_files.merge(tmp_path, {"node2": read_output(last, DRAIN)})
    assert again == {"node2": {"last": False, "events": 0}}
    assert (tmp_path / "health" / "node2-events.jsonl").read_text() == line(DRAIN) + "\n"


def test_merge_appends_only_new_events_and_survives_truncation(tmp_path: Path) -> None:
    cluster_health_files.merge(tmp_path, {"node2": read_output("", DRAIN)})
    # The node's events.jsonl was truncated: its tail holds only the resume.
    cluster_health_files.merge(tmp_path, {"node2": read_output("", RESUME)})
    # Then the tail holds both again (a rotated file copied back): no duplicate.
    cluster_health_files.merge(tmp_path, {"node2": read_output("", DRAIN, RESUME)})
    kept = (tmp_path / "health" / "node2-events.jsonl").read_text().splitlines()
    assert kept == [line(DRAIN), line(RESUME)]


def test_merge_tolerates_missing_unreachable_and_broken_reads(tmp_path: Path) -> None:
    cluster_health_files.merge(tmp_path, {"node1": read_output("", DRAIN)})
    before = (tmp_path / "health" / "node1-events.jsonl").read_text()
    changed = cluster_health_files.merge(
        tmp_path,
        {
            "node1": {"unreachable": True, "msg": "ssh: connect to host node1"},
            "node2": {"skipped": True, "false_condition": "'compute' in cluster_node_kinds"},
            # No files on the node yet: the marker line alone.
            "node3": {"stdout": f"\n{cluster_health_files.READ_MARKER}", "rc": 0},
            # A half-written last.json and a garbled line: neither kept.
            "node4": {"stdout": read_output('{"node": "node4", "verd') + "\nnot json", "rc": 0},
        },
    )
    assert changed == {"node4": {"last": False, "events": 0}}
    assert (tmp_path / "health" / "node1-events.jsonl").read_text() == before
    assert sorted(p.name for p in (tmp_path / "health").iterdir()) == ["node1-events.jsonl"]


def test_merge_refuses_a_path_as_node_name(tmp_path: Path) -> None:
    for bad in ("../etc", ".hidden", "a/b", ""):
        try:
            cluster_health_files.merge(tmp_path, {bad: read_output("{}", DRAIN)})
        except ValueError as exc:
            assert "is not a node name" in str(exc) and "inventory_hostname" in str(exc)
        else:
            raise AssertionError(f"{bad!r} was taken as a node name")
    assert not (tmp_path / "health").exists()


def test_events_of_a_node_without_node_field_take_the_file_name(tmp_path: Path) -> None:
    (tmp_path / "health").mkdir()
    (tmp_path / "health" / "gpu-big-events.jsonl").write_text(
        json.dumps({"time": 1796188200.5, "event": "drain", "reason": "health: gpu.count"}) + "\n"
    )
    events = cluster_report.load(tmp_path)["events"]
    assert [(e["node"], e["event"]) for e in events] == [("gpu-big", "drain")]


# --------------------------------------------------------------------------- page


def test_report_lists_drain_and_resume_with_time_and_cause(tmp_path: Path) -> None:
    cluster_health_files.merge(tmp_path, {"node2": read_output("", DRAIN, RESUME)})
    html = cluster_report.render_html(cluster_report.load(tmp_path))
    table = html[html.index('<table id="events">') :]
    table = table[: table.index("</table>")]
    assert table.count("<tr>") == 3  # head, drain, resume
    drain = table.index("2026-12-02T05:10:00Z")
    resume = table.index("2026-12-02T05:20:00Z")
    assert drain < resume  # oldest first
    assert ">drain<" in table[drain:resume] and "shared.fs: /shared/.cluster is missing" in table
    assert ">resume<" in table[resume:]


def two_clusters(checkout: Path) -> dict[str, Path]:
    """results/<name>/ of two clusters with different hosts, in one checkout."""
    folders = {}
    for name, hosts in (("lab", ["ctl", "node1", "node2"]), ("big", ["head", "gpu-a", "gpu-b"])):
        results = checkout / "results" / name
        shutil.copytree(FIXTURE / "results", results)
        doctor_path = next(results.glob("doctor-2*.json"))
        text = doctor_path.read_text()
        for old, new in zip(["ctl", "node1", "node2"], hosts, strict=True):
            text = text.replace(f'"{old}"', f'"{new}"')
        doctor_path.write_text(text)
        (results / "history.jsonl").unlink()
        for p in results.glob("2*.json"):
            p.unlink()
        drain = {**DRAIN, "node": hosts[2]}
        cluster_health_files.merge(results, {hosts[2]: read_output("", drain)})
        folders[name] = results
    return folders


def test_two_clusters_in_one_checkout_never_mix(tmp_path: Path) -> None:
    folders = two_clusters(tmp_path)
    for name, mine, theirs in (
        ("lab", ("ctl", "node1", "node2"), ("head", "gpu-a", "gpu-b")),
        ("big", ("head", "gpu-a", "gpu-b"), ("ctl", "node1", "node2")),
    ):
        page, metrics = cluster_report.write(folders[name])
        assert page == tmp_path / "results" / name / "cluster-report.html"
        html = page.read_text()
        for host in mine:
            assert f">{host}<" in html, (name, host)
            assert f'node="{host}"' in metrics, (name, host)
        for host in theirs:
            assert f">{host}<" not in html and f'node="{host}"' not in metrics, (name, host)
    assert not (tmp_path / "results" / "cluster-report.html").exists()


def test_results_default_is_per_cluster() -> None:
    defaults = yaml.safe_load((ROOT / "roles/cluster/defaults/main.yml").read_text())
    assert defaults["cluster_results_dir"].endswith("/results/{{ cluster_name }}")


# --------------------------------------------------------------------------- the play


def test_report_play_reads_the_health_files_of_a_compute_node(tmp_path: Path) -> None:
    """report.yml on this machine as controller and compute node: its files kept, rerun too."""
    state = tmp_path / "state"
    state.mkdir()
    shutil.copy(FIXTURE / "health-last-fail.json", state / "last.json")
    (state / "events.jsonl").write_text(line(DRAIN) + "\n" + line(RESUME) + "\n")
    results = tmp_path / "results" / "lab"

    def play() -> subprocess.CompletedProcess:
        return playbook(
            tmp_path, results, "-e", f"cluster_health_state_dir={state}",
            "-e", "monitoring_enabled=false", compute=True,
        )  # fmt: skip

    first = play()
    assert first.returncode == 0, first.stdout + first.stderr
    kept = results / "health" / "localhost-events.jsonl"
    assert kept.read_text().splitlines() == [line(DRAIN), line(RESUME)]
    assert json.loads((results / "health" / "localhost.json").read_text())["node"] == "node2"
    html = (results / "cluster-report.html").read_text()
    assert "2026-12-02T05:10:00Z" in html and "2026-12-02T05:20:00Z" in html
    # The node's events.jsonl truncated, then the state folder gone: nothing kept is lost.
    (state / "events.jsonl").write_text("")
    second = play()
    shutil.rmtree(state)
    third = play()
    for run in (second, third):
        assert run.returncode == 0, run.stdout + run.stderr
        assert "changed=0" in run.stdout
    assert kept.read_text().splitlines() == [line(DRAIN), line(RESUME)]


def test_cli_picks_the_one_cluster_or_asks_which(tmp_path: Path, monkeypatch) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    import cluster_report as cli  # tools/cluster_report.py

    monkeypatch.setattr(cli, "ROOT", tmp_path)
    folders = two_clusters(tmp_path)
    (tmp_path / "results" / "make-test-times.txt").write_text("")  # make test's own file
    assert cli.results_folder("big", None) == folders["big"]
    assert cli.results_folder(None, str(tmp_path / "x")) == tmp_path / "x"
    try:
        cli.results_folder(None, None)
    except SystemExit as exc:
        assert "results of 2 clusters (big, lab)" in str(exc) and "--cluster NAME" in str(exc)
    else:
        raise AssertionError("two clusters and no --cluster: no refusal")
    shutil.rmtree(folders["big"])
    assert cli.results_folder(None, None) == folders["lab"]


def test_the_probes_read_counts_when_the_reports_own_was_skipped(tmp_path: Path) -> None:
    """site.yml: the report's read is skipped and the monitoring probe's output
    (its own lines, then PROBE_MARKER and the read) holds the files."""
    event = '{"event": "drain", "node": "node2", "reason": "health: shared.fs", "time": 1.0}'
    probe = {
        "stdout": "abc123\nactive active\n"
        + cluster_health_files.PROBE_MARKER
        + '\n{"node": "node2"}\n'
        + cluster_health_files.READ_MARKER
        + "\n"
        + event
    }
    skipped = {"skipped": True, "changed": False}
    changed = cluster_health_files.merge(
        tmp_path, {"node2": [skipped, probe], "ctl": [skipped, {"stdout": "x\ny"}]}
    )
    assert set(changed) == {"node2"}
    assert (tmp_path / "health" / "node2-events.jsonl").read_text() == event + "\n"
    # A probe without the health part (the controller) is no read: nothing kept.
    assert not (tmp_path / "health" / "ctl.json").exists()
    # The report's own read, when it ran, comes first.
    own = {"stdout": '{"node": "node2", "ok": 1}\n' + cluster_health_files.READ_MARKER + "\n"}
    cluster_health_files.merge(tmp_path, {"node2": [own, probe]})
    assert '"ok": 1' in (tmp_path / "health" / "node2.json").read_text()


def test_the_doctors_probe_reads_what_the_reports_command_reads(tmp_path: Path) -> None:
    """node_checks.health_files (the doctor's probe, in Python) gives what the read
    command of roles/monitoring gives: last.json, the last 500 lines of events.jsonl
    (a file of several 64 KiB blocks, and one without a last newline), none where absent."""
    import shlex

    import jinja2
    from ansible_collections.gpulab.slurm_cluster.plugins.module_utils import node_checks

    cmd_template = yaml.safe_load((ROOT / "roles/monitoring/vars/main.yml").read_text())[
        "__monitoring_health_read_cmd"
    ]
    assert f"tail -n {node_checks.EVENTS_TAIL} " in cmd_template
    env = jinja2.Environment()
    env.filters["quote"] = shlex.quote
    cmd = env.from_string(cmd_template).render(cluster_health_state_dir=str(tmp_path))

    def both() -> tuple[tuple[str, str], tuple[str, str]]:
        shell = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, check=False)
        read = cluster_health_files.split_read(shell.stdout)
        mine = node_checks.health_files(str(tmp_path))
        return read, (mine["last"].strip(), mine["events"].strip())

    assert both() == (("", ""), ("", ""))
    shutil.copy(FIXTURE / "health-last-fail.json", tmp_path / "last.json")
    long = {**DRAIN, "reason": "health: " + "x" * 150}
    events = [line({**long, "time": float(i)}) for i in range(1200)]
    (tmp_path / "events.jsonl").write_text("\n".join(events) + "\n")
    read, mine = both()
    assert read == mine and mine[1].splitlines() == events[-500:]
    (tmp_path / "events.jsonl").write_text("\n".join(events[:3]))  # no last newline
    read, mine = both()
    assert read == mine and mine[1].splitlines() == events[:3]


def test_the_report_takes_the_doctors_read_and_reads_nothing_itself(tmp_path: Path) -> None:
    """doctor.yml: cluster_doctor_health_files holds the node's files; the report's own
    read is skipped (its state folder here does not exist) and the doctor's is kept."""
    results = tmp_path / "results" / "lab"
    read = {"localhost": {"last": '{"node": "node2", "ok": 0}', "events": line(DRAIN)}}
    run = playbook(
        tmp_path, results, "-e", f"cluster_health_state_dir={tmp_path / 'absent'}",
        "-e", "monitoring_enabled=false",
        "-e", json.dumps({"cluster_doctor_health_files": read}), compute=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    # Skipped: no task header (skipped hosts are not shown), only the timing recap's line.
    assert "TASK [gpulab.slurm_cluster.monitoring : Read the node health" not in run.stdout
    assert (results / "health" / "localhost-events.jsonl").read_text() == line(DRAIN) + "\n"
    assert json.loads((results / "health" / "localhost.json").read_text())["node"] == "node2"
