"""The doctor's judgement (plugins/filter/doctor.py) on probe results.

The fixture is what cluster_probe read on the healthy demo cluster (credentials
redacted); each test breaks one thing the way the fault would show in a probe and
asserts the named cause, the node, and that no healthy node is blamed.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins/filter"))
sys.path.insert(0, str(ROOT / "plugins/modules"))
import doctor as d  # noqa: E402
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils import (  # noqa: E402
    doctor_exchange as exchange,
)
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils import (  # noqa: E402
    doctor_local as probe,
)
from probe_data import slurm_keys  # noqa: E402

FIXTURE = json.loads((ROOT / "tests/fixtures/doctor/healthy.json").read_text())
HOSTS = ["ctl", "node1", "node2"]


def ctx(**over) -> dict:
    base = {
        "controller": "ctl",
        "computes": ["node1", "node2"],
        "hosts": HOSTS,
        "expected": FIXTURE["expected"],
        "hardware": FIXTURE["hardware"],
        "gpus": {"node1": 1, "node2": 1},
        "torch_gpus": {"node1": 0, "node2": 0},
        "clock_warn_s": 5,
        "clock_fail_s": 240,
    }
    base.update(over)
    return base


@pytest.fixture
def probes() -> dict:
    return copy.deepcopy(FIXTURE["probes"])


def report(probes: dict, **over) -> dict:
    return d.doctor_report(probes, ctx(**over))


def causes(rep: dict) -> list[tuple[str, str]]:
    return [(c["host"], c["check"]) for c in rep["causes"]]


def result(rep: dict, host: str, check: str) -> dict:
    return next(r for r in rep["results"] if r["host"] == host and r["check"] == check)


def root_cause(rep: dict, host: str, check: str) -> str:
    """The end of the caused_by chain of one result."""
    r = result(rep, host, check)
    while "caused_by" in r:
        r = result(rep, *r["caused_by"].split(" ", 1))
    return f"{r['host']} {r['check']}"


def set_node(probes: dict, name: str, field: str, value: str) -> None:
    nodes = probes["ctl"]["local"]["nodes"]
    lines = []
    for line in nodes["out"].splitlines():
        if line.startswith(f"NodeName={name} "):
            line = re.sub(rf"(?<=\s){field}=\S+", f"{field}={value}", line)
        lines.append(line)
    nodes["out"] = "\n".join(lines)


def set_check(probes: dict, host: str, check: str, status: str, message: str, **more) -> None:
    """A node check's result as the probe's reader returned it on `host`."""
    checks = probes[host]["local"]["checks"]
    entry = {"id": check, "status": status, "message": message, "fix": "the fix", **more}
    for i, r in enumerate(checks):
        if r["id"] == check:
            checks[i] = entry
            return
    raise AssertionError(f"{check} does not apply on {host} in the fixture")


def test_healthy_cluster_passes_every_check_on_every_node(probes: dict) -> None:
    rep = report(probes)
    assert rep["verdict"] == "PASS"
    assert rep["causes"] == []
    assert set(rep["counts"]) <= {"PASS", "SKIP"}
    assert {(r["host"], r["check"]) for r in rep["results"]} == {
        (h, c) for h in HOSTS for c in d.CHECKS
    }
    assert result(rep, "node2", "slurm.node")["evidence"] == "State=IDLE"
    assert result(rep, "node1", "torch.venv")["evidence"] == "torch 2.13.0+cpu, 0 CUDA devices"


def test_foreign_key_on_one_node_names_that_node_and_the_key(probes: dict) -> None:
    probes["node2"]["local"]["key"]["fingerprint"] = "0123456789abcdef"
    probes["ctl"]["cross"]["decoded"]["node2"] = {"status": "unmunge: Error: Invalid credential"}
    probes["node2"]["cross"]["decoded"]["ctl"] = {"status": "unmunge: Error: Invalid credential"}
    set_node(probes, "node2", "State", "DOWN*")
    rep = report(probes)
    assert causes(rep) == [("node2", "munge.cross")]
    cause = rep["causes"][0]
    assert cause["evidence"].startswith("key differs (fingerprint 0123456789abcdef, ctl has ")
    assert "credential from node2 rejected by ctl" in cause["evidence"]
    assert result(rep, "node2", "slurm.node")["caused_by"] == "node2 munge.cross"
    assert result(rep, "node1", "munge.cross")["status"] == "PASS"


def test_a_node_with_another_slurm_key_is_named_with_both_fingerprints(probes: dict) -> None:
    slurm_keys(probes)
    probes["node2"]["local"]["auth_key"]["fingerprint"] = "0123456789abcdef"
    set_node(probes, "node2", "State", "DOWN*")
    rep = report(probes, auth_type="slurm")
    assert causes(rep) == [("node2", "auth.key")]
    cause = rep["causes"][0]
    assert cause["evidence"].startswith(
        f"slurm.jwks key differs (fingerprint 0123456789abcdef, ctl has {'a' * 16})"
    )
    assert "installs the controller's slurm.jwks (0600 slurm:slurm) on node2" in cause["fix"]
    assert result(rep, "node2", "slurm.node")["caused_by"] == "node2 auth.key"
    assert (
        result(rep, "node1", "auth.key")["evidence"] == f"0600 slurm:slurm, fingerprint {'a' * 16}"
    )


def test_slurm_key_mode_owner_and_absence(probes: dict) -> None:
    slurm_keys(probes)
    probes["node1"]["local"]["auth_key"].update(mode="0644", owner="root")
    probes["node2"]["local"]["auth_key"] = {"exists": False, "error": "No such file or directory"}
    rep = report(probes, auth_type="slurm")
    assert result(rep, "node1", "auth.key")["evidence"] == (
        "slurm.jwks mode 0644 (want 0600), owner root:slurm (want slurm:slurm)"
    )
    assert result(rep, "node2", "auth.key")["evidence"] == (
        "slurm.jwks no /etc/slurm/slurm.jwks: No such file or directory"
    )


def test_the_slurm_key_is_not_judged_where_munge_authenticates(probes: dict) -> None:
    rep = report(probes)
    assert {result(rep, h, "auth.key")["status"] for h in HOSTS} == {"SKIP"}


def test_key_fingerprints_never_show_key_material(probes: dict) -> None:
    rep = report(probes)
    text = json.dumps(rep)
    fingerprint = probes["ctl"]["local"]["key"]["fingerprint"]
    assert re.fullmatch(r"[0-9a-f]{16}", fingerprint)
    assert "MUNGE:" not in text


def test_controller_key_that_differs_from_all_nodes_is_the_controllers_fault(
    probes: dict,
) -> None:
    probes["ctl"]["local"]["key"]["fingerprint"] = "ffffffffffffffff"
    for node in ("node1", "node2"):
        probes["ctl"]["cross"]["decoded"][node] = {"status": "Invalid credential"}
        probes[node]["cross"]["decoded"]["ctl"] = {"status": "Invalid credential"}
    rep = report(probes)
    assert causes(rep) == [("ctl", "munge.cross")]
    assert result(rep, "node1", "munge.cross")["caused_by"] == "ctl munge.cross"


def test_munged_stopped_on_the_controller_explains_every_nodes_failures(probes: dict) -> None:
    set_check(probes, "ctl", "munge.local", "FAIL", "munged is inactive: munge -n: socket")
    for node in ("node1", "node2"):
        probes["ctl"]["cross"]["decoded"][node] = {"status": "Failed to access socket"}
        probes[node]["cross"]["decoded"]["ctl"] = {"status": "no credential", "code": -1}
    rep = report(probes)
    assert causes(rep) == [("ctl", "munge.local")]
    for node in ("node1", "node2"):
        assert result(rep, node, "munge.cross")["caused_by"] == "ctl munge.local"


def test_key_mode_and_owner(probes: dict) -> None:
    probes["node1"]["local"]["key"].update(mode="0644", owner="root")
    rep = report(probes)
    assert causes(rep) == [("node1", "munge.key")]
    assert rep["causes"][0]["evidence"] == (
        "munge.key mode 0644 (want 0400), owner root:munge (want munge:munge)"
    )


def test_clock_offset_warns_then_fails_near_the_ttl(probes: dict) -> None:
    decoded = probes["ctl"]["cross"]["decoded"]["node1"]  # munged follows the system clock
    probes["node1"]["local"]["time"] += 12
    decoded["encode_time"] += 12
    rep = report(probes)
    assert result(rep, "node1", "clock")["status"] == "WARN"
    assert rep["verdict"] == "WARN"
    probes["node1"]["local"]["time"] += 300
    decoded.update(encode_time=decoded["encode_time"] + 300, status="Rewound credential")
    rep = report(probes)
    assert causes(rep) == [("node1", "clock")]
    assert result(rep, "node1", "clock")["evidence"].startswith("offset to ctl +312 s")


def test_readings_apart_by_the_probes_span_are_no_clock_offset(probes: dict) -> None:
    # A loaded control machine: node1's probe started 6.5 s after the
    # controller's, within a 16.6 s span (make test, 2026-12-07 06:23: a false
    # WARN in the healthy runs). The clock all containers share is not off.
    decoded = probes["ctl"]["cross"]["decoded"]["node1"]  # munged follows the system clock
    probes["node1"]["local"]["time"] += 6.5
    decoded["encode_time"] += 6.5
    rep = report(probes, probe_spread_s=16.6)
    assert rep["verdict"] == "PASS", rep["causes"]
    evidence = result(rep, "node1", "clock")["evidence"]
    assert evidence.startswith("offset to ctl +6 s (system clock +6.5 s, read up to 16.6 s apart")
    assert "at least 0 s off" in evidence
    # Read close together, the same readings are a clock 6.5 s off.
    rep = report(probes, probe_spread_s=1.0)
    assert result(rep, "node1", "clock")["status"] == "WARN"
    # Beyond the TTL, a span does not hide it.
    probes["node1"]["local"]["time"] += 300
    decoded.update(encode_time=decoded["encode_time"] + 300, status="Rewound credential")
    rep = report(probes, probe_spread_s=16.6)
    assert causes(rep) == [("node1", "clock")]
    assert "at least 290 s off" in result(rep, "node1", "clock")["evidence"]


def test_a_munged_with_a_shifted_clock_is_found_through_its_credential(probes: dict) -> None:
    decoded = probes["ctl"]["cross"]["decoded"]["node2"]
    decoded.update(status="Rewound credential", code=16)
    decoded["encode_time"] += 400
    probes["node2"]["cross"]["decoded"]["ctl"] = {"status": "Expired credential", "code": 15}
    rep = report(probes)
    assert causes(rep) == [("node2", "clock")]
    assert re.search(r"munged clock \+(399|400) s", rep["causes"][0]["evidence"])
    assert result(rep, "node2", "munge.cross")["caused_by"] == "node2 clock"


def test_the_controllers_credential_is_judged_against_the_time_it_was_made(probes: dict) -> None:
    # The doctor makes the controller's credential before every node's probe
    # (roles/cluster_doctor/tasks/probe.yml), here 6 s before.
    ctl = probes["ctl"]["local"]
    made = int(ctl["time"]) - 6
    for name in ("node1", "node2"):
        probes[name]["cross"]["decoded"]["ctl"]["encode_time"] = made
    # Against the probe's own time read, the controller's munged would seem
    # 6 s behind, and every node's clock 6 s ahead of it.
    rep = report(probes)
    assert result(rep, "node1", "clock")["status"] == "WARN"
    assert re.match(r"offset to ctl \+[67] s", result(rep, "node1", "clock")["evidence"])
    ctl["credential_time"] = made
    rep = report(probes)
    assert rep["verdict"] == "PASS", rep["causes"]
    assert re.match(r"offset to ctl [+-]0 s", result(rep, "node1", "clock")["evidence"])
    # A controller's munged whose clock is off is still found through it.
    ctl["credential_time"] = made - 30
    rep = report(probes)
    assert result(rep, "node1", "clock")["evidence"].startswith("offset to ctl -30 s")


def test_stopped_slurmd_is_the_cause_of_the_closed_port_and_the_down_node(
    probes: dict,
) -> None:
    probes["node2"]["local"]["services"]["slurmd"] = "inactive/dead"
    probes["ctl"]["local"]["ports"]["slurmd@node2"].update(ok=False, error="Connection refused")
    set_node(probes, "node2", "State", "DOWN*")
    rep = report(probes)
    assert causes(rep) == [("node2", "slurm.daemon")]
    assert result(rep, "node2", "net.ports")["caused_by"] == "node2 slurm.daemon"
    assert result(rep, "node2", "slurm.node")["caused_by"] == "node2 slurm.daemon"
    assert result(rep, "node1", "slurm.node")["status"] == "PASS"


def test_a_stopped_configless_slurmd_without_copies_is_only_the_daemons_fault(
    probes: dict,
) -> None:
    # Slurm 24.11 removes /run/slurm/conf when slurmd stops: no file to compare.
    probes["node2"]["local"]["services"]["slurmd"] = "inactive/dead"
    probes["node2"]["local"]["files"] = dict.fromkeys(probes["node2"]["local"]["files"])
    probes["node2"]["local"]["conf_dir"] = "/etc/slurm"
    probes["ctl"]["local"]["ports"]["slurmd@node2"].update(ok=False, error="Connection refused")
    rep = report(probes)
    assert causes(rep) == [("node2", "slurm.daemon")]
    files = result(rep, "node2", "config.files")
    assert files["status"] == "SKIP" and "slurmd is not running" in files["evidence"]
    # A running slurmd without its copies is a config.files FAIL of its own.
    probes["node2"]["local"]["services"]["slurmd"] = "active/running"
    probes["ctl"]["local"]["ports"]["slurmd@node2"].update(ok=True, error="")
    assert ("node2", "config.files") in causes(report(probes))


def test_slurmctld_down_is_the_controllers_fault_not_the_nodes(probes: dict) -> None:
    probes["ctl"]["local"]["services"]["slurmctld"] = "inactive/dead"
    probes["ctl"]["local"]["nodes"] = {
        "rc": 1,
        "out": "",
        "err": "Unable to contact slurm controller",
    }
    probes["ctl"]["local"]["ping"] = {
        "rc": 1,
        "out": "Slurmctld(primary) at ctl is DOWN",
        "err": "",
    }
    for node in HOSTS:
        probes[node]["local"]["ports"]["slurmctld"].update(ok=False, error="Connection refused")
    rep = report(probes)
    assert causes(rep) == [("ctl", "slurm.daemon")]
    assert result(rep, "node1", "net.ports")["caused_by"] == "ctl slurm.daemon"
    assert root_cause(rep, "node2", "slurm.node") == "ctl slurm.daemon"


def test_port_blocked_on_one_node(probes: dict) -> None:
    probes["ctl"]["local"]["ports"]["slurmd@node2"].update(ok=False, error="timed out")
    rep = report(probes)
    assert causes(rep) == [("node2", "net.ports")]
    assert rep["causes"][0]["evidence"] == "ctl → node2:6818 (slurmd) timed out"


def test_node_not_registered_under_its_short_hostname(probes: dict) -> None:
    probes["node2"]["local"]["host"] = "gpu02"
    rep = report(probes)
    cause = result(rep, "node2", "slurm.node")
    assert cause["status"] == "FAIL"
    assert cause["evidence"].startswith("no NodeName=gpu02 (hostname -s of node2) in slurmctld")


@pytest.mark.parametrize(
    ("state", "reason", "status"),
    [
        ("IDLE+DRAIN", "maintenance by admin", "WARN"),
        ("IDLE+DRAIN", "Low RealMemory", "FAIL"),
        ("IDLE+DRAIN", "acceptance: pending", "WARN"),
        ("IDLE+DRAIN", "acceptance: Low RealMemory", "WARN"),
        ("DOWN", "Not responding", "FAIL"),
        ("MIXED", "", "PASS"),
    ],
)
def test_node_state_and_reason_verbatim(probes: dict, state: str, reason: str, status: str) -> None:
    set_node(probes, "node1", "State", state)
    if reason:
        nodes = probes["ctl"]["local"]["nodes"]
        nodes["out"] = nodes["out"].replace(
            "NodeName=node1 ", f"NodeName=node1 Reason={reason} [slurm@2026-12-01T09:00:00] ", 1
        )
    rep = report(probes)
    r = result(rep, "node1", "slurm.node")
    assert r["status"] == status
    if reason:
        assert r["evidence"] == f"State={state} Reason={reason} [slurm@2026-12-01T09:00:00]"
    if reason.startswith("acceptance:"):  # the gate's own drain: the smoke job resumes it
        assert r["fix"].startswith("smoke_train.yml runs the acceptance job")
        assert ("fix the cause first" in r["fix"]) == (reason != "acceptance: pending")


def test_missing_gpu_is_the_cause_of_the_changed_slurm_conf_everywhere(probes: dict) -> None:
    probes["node2"]["local"]["hardware"]["gres_missing"] = ["/dev/nvidia0"]
    hardware = copy.deepcopy(FIXTURE["hardware"])
    hardware["node2"].update(gpus=[], gpu_source="none")  # slurm_node_info finds none
    expected = copy.deepcopy(FIXTURE["expected"])
    for host in HOSTS:
        expected[host]["slurm.conf"] = "0" * 64  # rendered from the node's hardware now
    rep = report(probes, expected=expected, hardware=hardware)
    assert causes(rep) == [("node2", "hw.match")]
    evidence = rep["causes"][0]["evidence"]
    assert "gres.conf names /dev/nvidia0, which does not exist" in evidence
    assert "slurm.conf Gres=gpu:1 (1 GPUs) but 0 present (no /dev/nvidia*)" in evidence
    assert result(rep, "ctl", "config.files")["caused_by"] == "node2 hw.match"


def test_hand_edited_slurm_conf_on_one_node(probes: dict) -> None:
    probes["node1"]["local"]["files"]["slurm.conf"] = "a" * 64
    rep = report(probes)
    assert causes(rep) == [("node1", "config.files")]
    # node1 runs configless: the file is slurmd's copy fetched from the controller.
    assert rep["causes"][0]["evidence"].startswith(
        "/run/slurm/conf/slurm.conf sha256 aaaaaaaaaaaa… differs from what site.yml writes"
    )


def test_configured_memory_above_the_hardware(probes: dict) -> None:
    hardware = copy.deepcopy(FIXTURE["hardware"])
    hardware["node1"]["real_memory"] = 1000
    rep = report(probes, hardware=hardware)
    assert causes(rep) == [("node1", "hw.match")]
    assert "above the 1000 MB slurmd -C reports" in rep["causes"][0]["evidence"]


def test_shared_path_that_is_a_local_folder_on_one_node(probes: dict) -> None:
    probes["node2"]["local"]["shared"]["mount"] = "tmpfs tmpfs"
    probes["ctl"]["cross"]["tokens"]["node2"] = {"ok": False, "error": "No such file or directory"}
    probes["node2"]["cross"]["tokens"]["ctl"] = {"ok": False, "error": "No such file or directory"}
    rep = report(probes)
    assert causes(rep) == [("node2", "shared.cross")]
    assert "/shared on node2 is 'tmpfs tmpfs'" in rep["causes"][0]["evidence"]
    # The node's own reader saw it too: its verdict is the cause, the cross check follows.
    set_check(probes, "node2", "shared.fs", "FAIL", "/shared is a local folder (tmpfs of tmpfs)")
    rep = report(probes)
    assert causes(rep) == [("node2", "shared.fs")]
    assert result(rep, "node2", "shared.cross")["caused_by"] == "node2 shared.fs"


def test_shared_path_not_writable_by_the_job_user(probes: dict) -> None:
    probes["node1"]["local"]["shared"]["write"].update(ok=False, error="Permission denied")
    rep = report(probes, job_user="alice")
    assert causes(rep) == [("node1", "shared.cross")]
    assert rep["causes"][0]["evidence"].startswith("/shared not writable by alice: Permission")


def test_hostname_on_loopback(probes: dict) -> None:
    probes["node2"]["local"]["self_addrs"] = ["127.0.1.1", "172.18.0.4"]
    rep = report(probes)
    assert causes(rep) == [("node2", "net.hostname")]


def test_uid_and_version_mismatches_name_the_odd_node(probes: dict) -> None:
    probes["node1"]["local"]["ids"]["munge"] = [999, 999]
    probes["node2"]["local"]["versions"]["slurm"] = "slurm 23.11.4"
    rep = report(probes)
    assert causes(rep) == [("node1", "users.ids"), ("node2", "config.versions")]


def test_torch_that_does_not_import_or_sees_other_gpus(probes: dict) -> None:
    probes["node1"]["local"]["torch"] = {"ok": False, "error": "ModuleNotFoundError: torch"}
    probes["node2"]["local"]["torch"]["device_count"] = 1
    rep = report(probes)
    assert causes(rep) == [("node1", "torch.venv"), ("node2", "torch.venv")]


def test_an_unreachable_node_is_named_and_others_are_judged(probes: dict) -> None:
    del probes["node2"]
    rep = report(probes, unreachable={"node2": "Failed to connect"})
    assert ("node2", "net.hostname") in causes(rep)
    assert {h for h, _ in causes(rep)} == {"node2"}


def test_a_loop_of_consequences_still_names_a_cause(probes: dict) -> None:
    rep = report(probes)
    a, b = result(rep, "node1", "clock"), result(rep, "node1", "munge.cross")
    rep2 = d.Doctor(probes, ctx())
    rep2.results = [dict(a, status="FAIL"), dict(b, status="FAIL")]
    rep2.results[0]["caused_by"] = "node1 munge.cross"
    rep2.results[1]["caused_by"] = "node1 clock"
    d._break_cycles(rep2)
    assert sum("caused_by" not in r for r in rep2.results) == 1


def test_table_has_one_row_per_node_and_marks_consequences(probes: dict) -> None:
    probes["node2"]["local"]["services"]["slurmd"] = "inactive/dead"
    probes["ctl"]["local"]["ports"]["slurmd@node2"].update(ok=False, error="Connection refused")
    set_check(probes, "node2", "services", "FAIL", "slurmd.service is inactive/dead (enabled)",
              fix="systemctl start slurmd on node2 (journalctl -u slurmd)",
              data={"down": ["slurmd"]})  # fmt: skip
    lines = d.doctor_table(report(probes))
    assert lines[0].split()[:4] == ["node", "hostname", "services", "local"]
    assert [ln.split()[0] for ln in lines[1:]] == HOSTS
    row = lines[3].split()
    assert row[d.CHECKS.index("services") + 1] == "FAIL"
    assert row[d.CHECKS.index("slurm.daemon") + 1] == "(fail)"
    assert row[d.CHECKS.index("net.ports") + 1] == "(fail)"
    assert d.doctor_causes(report(probes)) == [
        "node2 services: slurmd.service is inactive/dead (enabled). "
        "Fix: systemctl start slurmd on node2 (journalctl -u slurmd)"
    ]


@pytest.mark.parametrize(
    ("gres", "count"),
    [("gpu:1", 1), ("gpu:h100:8(S:0-1)", 8), ("gpu:a100:2,gpu:h100:4", 6), ("(null)", 0)],
)
def test_gres_gpu_count(gres: str, count: int) -> None:
    assert d.gres_gpu_count(gres) == count


def test_unmunge_metadata_is_parsed() -> None:
    text = (
        "STATUS:          Rewound credential (16)\n"
        "ENCODE_HOST:     node2.slurm-lab (172.18.0.4)\n"
        "ENCODE_TIME:     2026-12-01 09:56:17 +0000 (1796118977)\n"
        "DECODE_TIME:     2026-12-01 09:49:37 +0000 (1796118577)\n"
    )
    assert exchange.parse_unmunge(text) == {
        "status": "Rewound credential",
        "code": 16,
        "encode_time": 1796118977,
        "decode_time": 1796118577,
        "encode_host": "node2.slurm-lab (172.18.0.4)",
    }


def test_gres_files_expand_ranges(tmp_path: Path) -> None:
    (tmp_path / "gres.conf").write_text(
        "# managed\nName=gpu Type=h100 File=/dev/nvidia[0-3]\nName=gpu File=/dev/nvidia7\n"
    )
    assert probe.gres_files(str(tmp_path), "node1") == [
        "/dev/nvidia0",
        "/dev/nvidia1",
        "/dev/nvidia2",
        "/dev/nvidia3",
        "/dev/nvidia7",
    ]


def test_gres_files_of_the_cluster_wide_file_are_this_nodes(tmp_path: Path) -> None:
    (tmp_path / "gres.conf").write_text(
        "NodeName=node1 Name=gpu File=/dev/nvidia[0-1]\n"
        "NodeName=node2 Name=gpu File=/dev/nvidia9\n"
        "# node3: no GPUs.\n"
    )
    assert probe.gres_files(str(tmp_path), "node1") == ["/dev/nvidia0", "/dev/nvidia1"]
    assert probe.gres_files(str(tmp_path), "node2") == ["/dev/nvidia9"]
    assert probe.gres_files(str(tmp_path), "node3") == []


def test_configless_nodes_are_read_from_slurmds_copies(tmp_path: Path, monkeypatch) -> None:
    etc, run = tmp_path / "etc", tmp_path / "run"
    etc.mkdir()
    run.mkdir()
    monkeypatch.setattr(probe, "CONFIGLESS_DIR", str(run))
    assert probe.config_dir(str(etc)) == str(etc)  # neither: the usual folder
    (run / "slurm.conf").write_text("x")
    assert probe.config_dir(str(etc)) == str(run)
    (etc / "slurm.conf").write_text("x")  # the controller's own file wins
    assert probe.config_dir(str(etc)) == str(etc)


def test_real_gpus_without_the_nvml_plugin_warn(probes: dict) -> None:
    hardware = copy.deepcopy(FIXTURE["hardware"])
    hardware["node1"].update(gpu_source="nvidia-smi", nvml_plugin=False)
    rep = report(probes, hardware=hardware)
    r = result(rep, "node1", "hw.match")
    assert r["status"] == "WARN"
    assert r["evidence"].startswith("GPUs present but Slurm's gpu_nvml plugin is not installed")


def test_versions_come_from_the_daemon_binaries() -> None:
    # A configless node's sinfo cannot start while its slurmd is stopped (24.11).
    assert probe.version_argv(True, False) == ["slurmd", "-V"]
    assert probe.version_argv(True, True) == ["slurmd", "-V"]
    assert probe.version_argv(False, True) == ["slurmctld", "-V"]
    assert probe.version_argv(False, False) == ["sinfo", "--version"]


def test_controller_name_on_loopback_is_its_own_cause_not_a_firewall(probes: dict) -> None:
    probes["node1"]["local"]["resolved"] = {"ctl": ["127.0.1.1"]}
    probes["node1"]["local"]["ports"]["slurmctld"].update(ok=False, error="Connection refused")
    set_node(probes, "node1", "State", "DOWN*")
    rep = report(probes)
    assert causes(rep) == [("node1", "net.hostname")]
    cause = rep["causes"][0]
    assert cause["evidence"].startswith(
        "the controller's name ctl resolves on node1 to 127.0.1.1 (loopback); ctl is 172.18.0.2"
    )
    assert "/etc/hosts on node1" in cause["fix"] and "firewall" not in cause["fix"]
    assert result(rep, "node1", "net.ports")["caused_by"] == "node1 net.hostname"
    assert root_cause(rep, "node1", "slurm.node") == "node1 net.hostname"
    # A wrong (not loopback) address is named the same way.
    probes["node1"]["local"]["resolved"] = {"ctl": ["10.9.9.9"]}
    assert causes(report(probes)) == [("node1", "net.hostname")]


def test_munged_stopped_on_the_controller_is_one_cause_with_the_right_daemon(probes: dict) -> None:
    set_check(probes, "ctl", "munge.local", "FAIL", "munged is inactive: munge -n: socket")
    probes["ctl"]["local"]["ping"] = {
        "rc": 1,
        "out": "Slurmctld(primary) at ctl is DOWN",
        "err": "",
    }
    for node in ("node1", "node2"):
        probes["ctl"]["cross"]["decoded"][node] = {"status": "Failed to access socket"}
        probes[node]["cross"]["decoded"]["ctl"] = {"status": "no credential", "code": -1}
    rep = report(probes)
    assert causes(rep) == [("ctl", "munge.local")]
    daemon = result(rep, "ctl", "slurm.daemon")
    assert daemon["caused_by"] == "ctl munge.local"
    assert daemon["fix"].startswith("systemctl start slurmctld on ctl")


def test_a_file_removed_on_the_controller_explains_the_nodes_stale_copies(probes: dict) -> None:
    probes["ctl"]["local"]["files"]["gres.conf"] = None
    for node in ("node1", "node2"):
        probes[node]["local"]["files"]["gres.conf"] = "0" * 64
    rep = report(probes)
    assert causes(rep) == [("ctl", "config.files")]
    for node in ("node1", "node2"):
        assert result(rep, node, "config.files")["caused_by"] == "ctl config.files"
    # A node's own other file is its own cause.
    probes["node2"]["local"]["files"]["cgroup.conf"] = "1" * 64
    assert ("node2", "config.files") in causes(report(probes))


def test_a_node_check_failing_is_the_cause_of_its_health_drain(probes: dict) -> None:
    set_check(probes, "node2", "disk.free", "FAIL",
              "/var/lib/slurm/slurmd has 2 MiB free (threshold 256 MiB)")  # fmt: skip
    reason = "health: disk.free: /var/lib/slurm/slurmd has 2 MiB free (threshold 256 MiB)"
    set_node(probes, "node2", "State", "IDLE+DRAIN")
    probes["ctl"]["local"]["nodes"]["out"] = probes["ctl"]["local"]["nodes"]["out"].replace(
        "NodeName=node2 ", f"NodeName=node2 Reason={reason} [root@2026-12-02T06:00:00] ", 1
    )
    rep = report(probes)
    assert causes(rep) == [("node2", "disk.free")]
    assert (
        rep["causes"][0]["evidence"] == "/var/lib/slurm/slurmd has 2 MiB free (threshold 256 MiB)"
    )
    assert result(rep, "node2", "slurm.node")["caused_by"] == "node2 disk.free"
    # Healed, still drained until the program's next run: a warning, no cause.
    set_check(probes, "node2", "disk.free", "PASS", "free: / 9.0 GiB")
    rep = report(probes)
    assert causes(rep) == []
    assert result(rep, "node2", "slurm.node")["status"] == "WARN"


def test_the_accounting_daemon_stopped_is_named_on_its_host_with_the_fix(probes: dict) -> None:
    set_check(probes, "ctl", "services", "FAIL", "slurmdbd.service is inactive/dead (enabled)",
              fix="systemctl start slurmdbd on ctl (journalctl -u slurmdbd); site.yml starts "
              "every unit the cluster runs", data={"down": ["slurmdbd"]})  # fmt: skip
    rep = report(probes)
    assert causes(rep) == [("ctl", "services")]
    assert rep["verdict"] == "FAIL"
    assert d.doctor_causes(rep)[0].startswith(
        "ctl services: slurmdbd.service is inactive/dead (enabled). "
        "Fix: systemctl start slurmdbd on ctl"
    )
    # A stopped exporter explains no Slurm fault: slurmctld down stays its own cause.
    set_check(probes, "ctl", "services", "FAIL", "prometheus-node-exporter.service is failed",
              data={"down": ["prometheus-node-exporter"]})  # fmt: skip
    probes["ctl"]["local"]["ping"] = {"rc": 1, "out": "Slurmctld(primary) at ctl is DOWN"}
    assert ("ctl", "slurm.daemon") in causes(report(probes))


def test_node_checks_missing_settings_are_named(probes: dict) -> None:
    del probes["node1"]["local"]["checks"]
    probes["node1"]["local"]["checks_error"] = "no check settings (/etc/slurm-cluster/health.json)"
    rep = report(probes)
    assert causes(rep) == [("node1", "services")]
    assert "no check settings" in rep["causes"][0]["evidence"]
    assert rep["causes"][0]["fix"] == "run site.yml: it writes the node's check settings"


def test_torch_missing_is_found_without_importing_it(probes: dict) -> None:
    probes["node2"]["local"]["torch"] = {
        "ok": False,
        "quick": True,
        "python": "/opt/venv/bin/python",
        "error": "ModuleNotFoundError: No module named 'torch'",
    }
    rep = report(probes)
    assert causes(rep) == [("node2", "torch.venv")]
    assert rep["causes"][0]["evidence"] == (
        "torch not found in /opt/venv/bin/python: ModuleNotFoundError: No module named 'torch'"
    )


def test_a_node_just_resumed_is_read_again_until_it_answers() -> None:
    # slurmctld marks a resumed node NOT_RESPONDING until its next ping (~0.5 s).
    answers = iter(
        [
            "NodeName=node1 State=IDLE\nNodeName=node2 State=IDLE+NOT_RESPONDING\n",
            "NodeName=node1 State=IDLE\nNodeName=node2 State=IDLE+NOT_RESPONDING\n",
            "NodeName=node1 State=IDLE\nNodeName=node2 State=IDLE\n",
        ]
    )
    slept = []
    res = probe.settled_nodes(
        lambda argv: {"rc": 0, "out": next(answers), "err": ""}, sleep=slept.append
    )
    assert "NOT_RESPONDING" not in res["out"]
    assert slept == [probe.SETTLE_POLL_S, probe.SETTLE_POLL_S]


def test_a_node_that_stays_silent_or_is_down_is_judged_as_read() -> None:
    reads = []

    def read(argv: list) -> dict:
        reads.append(argv)
        return {"rc": 0, "out": "NodeName=node2 State=IDLE+NOT_RESPONDING\n", "err": ""}

    res = probe.settled_nodes(read, limit_s=1.0, sleep=lambda s: None)
    assert "NOT_RESPONDING" in res["out"]
    assert len(reads) == 5  # the first read, then one every 0.25 s for 1 s
    reads.clear()
    down = {"rc": 0, "out": "NodeName=node2 State=DOWN+NOT_RESPONDING Reason=x\n", "err": ""}
    assert probe.settled_nodes(lambda a: reads.append(a) or down, sleep=lambda s: None) == down
    assert len(reads) == 1  # DOWN is not a resume under way: no wait


def test_the_probe_runs_no_venv_python_from_a_folder_others_may_write(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    venv.chmod(0o777)
    info = probe.torch_info(str(venv / "bin" / "python"), True, str(tmp_path))
    assert info["ok"] is False
    assert info["error"] == (f"not run as root: {venv} is writable by others than root (mode 0777)")


def test_the_probe_reads_the_report_the_pytorch_roles_check_kept(tmp_path: Path) -> None:
    """With the role's verify_torch.py: its kept report while the fingerprint holds, no write.

    A venv of its own whose site-packages lead to this venv's torch. A kept
    report with the right fingerprint (and a version no import would give) is
    what the probe returns; torch_fresh imports torch (a stale fingerprint:
    tests/test_torch_gates.py).
    """
    import socket
    import subprocess
    import sysconfig

    script = (ROOT / "roles/pytorch/files/verify_torch.py").read_text()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    Path(site, "torch-here.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    fingerprint = subprocess.run(
        [python, "-I", "-c", script + "\nprint(fingerprint())"],
        capture_output=True, text=True, check=True,
    ).stdout.split()[-1]  # fmt: skip
    kept = venv / f".torch-verified-{socket.gethostname()}.json"
    report = {"torch": "9.9.9", "cuda_build": None, "device_count": 0, "devices": []}
    kept.write_text(json.dumps({"fingerprint": fingerprint, "verified_at": "T1", "report": report}))
    before = kept.read_text()

    info = probe.torch_info(python, False, str(tmp_path), script)
    assert info["ok"] and (info["version"], info["cached"], info["verified_at"]) == (
        "9.9.9",
        True,
        "T1",
    ), info
    fresh = probe.torch_info(python, False, str(tmp_path), script, fresh=True)
    assert fresh["ok"] and fresh["cached"] is False, fresh
    assert fresh["version"] == pytest.importorskip("torch").__version__
    assert kept.read_text() == before  # the doctor writes nothing


def test_a_slurmd_munge_cannot_serve_is_the_clocks_consequence_not_a_cause(probes: dict) -> None:
    """munged's clock 400 s off on node2: slurmd fails to start; the clock is the one cause."""
    probes["node2"]["local"]["time"] += 0  # the system clock is right: munged's is not
    probes["ctl"]["cross"]["decoded"]["node2"]["encode_time"] += 400
    set_check(probes, "node2", "services", "FAIL", "slurmd.service is failed/failed (enabled)",
              data={"down": ["slurmd"]})  # fmt: skip
    rep = report(probes)
    assert causes(rep) == [("node2", "clock")]
    assert result(rep, "node2", "services")["caused_by"] == "node2 clock"
    # Another unit down as well (the exporter): services is a cause of its own.
    set_check(probes, "node2", "services", "FAIL", "two units down",
              data={"down": ["slurmd", "prometheus-node-exporter"]})  # fmt: skip
    assert ("node2", "services") in causes(report(probes))


@pytest.mark.parametrize("daemon", ["sackd", "slurmd"])
def test_a_login_hosts_daemon_is_judged_and_named_when_down(probes: dict, daemon: str) -> None:
    # node2 as a login host: sackd where its unit is installed, else slurmd in no partition.
    svc = probes["node2"]["local"]["services"]
    svc["sackd"] = "active/running" if daemon == "sackd" else "absent"
    svc["slurmd"] = "absent" if daemon == "sackd" else "active/running"
    rep = report(probes, computes=["node1"], logins=["node2"])
    daemon_check = result(rep, "node2", "slurm.daemon")
    assert daemon_check["status"] == "PASS" and daemon in daemon_check["evidence"]
    svc[daemon] = "inactive/dead"
    rep = report(probes, computes=["node1"], logins=["node2"])
    daemon_check = result(rep, "node2", "slurm.daemon")
    assert daemon_check["status"] == "FAIL"
    assert f"{daemon}.service is inactive/dead (the login daemon" in daemon_check["evidence"]
    assert f"systemctl start {daemon} on node2" in daemon_check["fix"]


def conf_cache(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A configless node: /run/slurm/conf a link to slurmd's cache, keys in /etc/slurm."""
    run_dir, cache, keys = tmp_path / "run", tmp_path / "cache", tmp_path / "etc"
    for folder in (run_dir, cache, keys):
        folder.mkdir()
    (cache / "slurm.conf").write_text("ClusterName=lab\n")
    (cache / "gres.conf").write_text("")
    (run_dir / "conf").symlink_to(cache)
    (run_dir / "sack.socket").write_text("the running slurmd's socket")
    (keys / "slurm.jwks").write_text("{}")
    return run_dir, cache, keys


def test_slurmd_g_under_auth_slurm_gets_the_keys_and_a_private_run_folder(
    tmp_path: Path, monkeypatch
) -> None:
    run_dir, cache, keys = conf_cache(tmp_path)
    monkeypatch.setattr(probe, "KEY_DIR", str(keys))
    monkeypatch.setattr(probe, "RUN_DIR", str(run_dir))
    seen = {}

    def fake_run(argv, timeout=10, **kw):
        conf = Path(argv[-2])
        seen["argv"] = argv
        seen["links"] = {p.name: str(p.resolve()) for p in conf.parent.iterdir()}
        return {"rc": 0, "out": "", "err": ""}

    monkeypatch.setattr(probe, "run", fake_run)
    probe.slurmd_gres(str(run_dir / "conf"))
    assert seen["argv"][:4] == ["unshare", "-m", "sh", "-c"]
    assert seen["argv"][-1] == str(run_dir)
    # The real files, not paths under the folder the namespace hides.
    assert seen["links"] == {
        "slurm.conf": str(cache / "slurm.conf"),
        "gres.conf": str(cache / "gres.conf"),
        "slurm.jwks": str(keys / "slurm.jwks"),
    }
    # Munge clusters: slurmd -G on the files as they are.
    (keys / "slurm.jwks").unlink()
    probe.slurmd_gres(str(run_dir / "conf"))
    assert seen["argv"] == ["slurmd", "-f", str(run_dir / "conf/slurm.conf"), "-G"]


def test_slurmd_g_leaves_the_running_slurmds_socket_alone(tmp_path: Path, monkeypatch) -> None:
    """The real namespace: a slurmd -G that replaces sack.socket does so in its own /run/slurm."""
    if probe.run(["unshare", "-m", "true"])["rc"] != 0:
        pytest.skip("no mount namespaces here (needs root)")
    run_dir, _cache, keys = conf_cache(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "slurmd"
    fake.write_text(
        '#!/bin/sh\nset -e\ncat "$2" >/dev/null\n'
        f'rm -f {run_dir}/sack.socket\necho new >{run_dir}/sack.socket\necho "Name=gpu"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin")
    monkeypatch.setattr(probe, "KEY_DIR", str(keys))
    monkeypatch.setattr(probe, "RUN_DIR", str(run_dir))
    got = probe.slurmd_gres(str(run_dir / "conf"))
    assert got["rc"] == 0 and got["out"] == "Name=gpu\n", got
    assert (run_dir / "sack.socket").read_text() == "the running slurmd's socket"


def test_the_controllers_seed_makes_its_credential_and_token_and_local_then_writes_none(
    monkeypatch,
) -> None:
    """phase=seed: the controller's credential and token before the other
    probes; phase=local with an empty token (the controller's, then) writes none."""
    calls: list[list[str]] = []

    def fake_run(argv, *args, **kw):
        calls.append(list(argv))
        if argv[:2] == ["munge", "--no-input"]:
            return {"rc": 0, "out": "MUNGE:cred:\n", "err": ""}
        return {"rc": 0, "out": "/dev/vda ext4\n", "err": ""}

    def fake_as_user(user, argv, *args, **kw):
        calls.append(["as", str(user), *argv])
        return {"rc": 0, "out": "", "err": ""}

    monkeypatch.setattr(probe, "run", fake_run)
    monkeypatch.setattr(probe, "as_user", fake_as_user)
    params = {
        "shared_path": "/shared",
        "job_user": "proof",
        "token_dir": "/shared/home/proof/doctor",
        "run_id": "r1",
        "token": "r1-ctl",
        "name": "ctl",
        "controller": True,
    }
    before = probe.time.time()
    got = probe.seed(params)
    assert got["credential"] == "MUNGE:cred:" and got["credential_error"] == ""
    assert before <= got["time"] <= probe.time.time()
    assert got["shared"]["write"] == {
        "ok": True,
        "error": "",
        "file": "/shared/home/proof/doctor/r1/ctl",
        "token": "r1-ctl",
    }
    writes = [c for c in calls if c[0] == "as"]
    assert len(writes) == 1 and writes[0][1] == "proof" and writes[0][-2:] == ["r1-ctl", "1"]
    calls.clear()
    out = probe.shared("/shared", "proof", "/shared/home/proof/doctor", "r1", "", "ctl", True)
    assert out == {"path": "/shared", "mount": "/dev/vda ext4"}
    assert not [c for c in calls if c[0] == "as"]


# --- torch asked once per run (site.yml: cluster_doctor_torch_checked) ---------


def torch_checked(computes: list, hostvars: dict, checked: bool) -> dict:
    """report.yml's torch_checked (the judgement's context), rendered by Ansible."""
    import yaml
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    tasks = yaml.safe_load((ROOT / "roles/cluster_doctor/tasks/report.yml").read_text())
    judge = next(t for t in tasks if t["name"] == "Judge the cluster")
    variables = {
        "__cluster_doctor_computes": computes,
        "hostvars": hostvars,
        "cluster_doctor_torch_checked": checked,
    }
    templar = Templar(loader=DataLoader(), variables=variables)
    template = judge["vars"]["__cluster_doctor_ctx"]["torch_checked"]
    return templar.template(trust_as_template(template))


@pytest.mark.parametrize(
    ("over", "status", "evidence"),
    [
        ({}, "PASS", "torch 2.13.0+cpu, 0 CUDA devices (torch's check of 2026-12-07T17:57:16Z"),
        ({"device_count": 1}, "FAIL", "torch 2.13.0+cpu sees 1 CUDA devices, expected 0"),
        (
            {"error": "import torch failed: ModuleNotFoundError: No module named 'torch'"},
            "FAIL",
            "import torch failed in /opt/pytorch/venv/bin/python: ModuleNotFoundError: No module",
        ),
    ],
)
def test_the_doctor_takes_torchs_answer_from_the_pytorch_roles_check_in_the_run(
    probes: dict, over: dict, status: str, evidence: str
) -> None:
    node2_alone = result(report(probes), "node2", "torch.venv")
    probes["node1"]["local"]["torch"] = None  # the probe did not ask (vars/main.yml)
    checked = {
        "torch": "2.13.0+cpu",
        "cuda_build": None,
        "device_count": 0,
        "cached": True,
        "verified_at": "2026-12-07T17:57:16Z",
        "python": "/opt/pytorch/venv/bin/python",
    } | over  # torch_report's keys: no "error" where the check passed
    hostvars = {h: {"pytorch_torch_checked": checked} for h in ("node1", "node2")} | {"ctl": {}}
    taken = torch_checked(["node1", "node2"], hostvars, checked=True)
    assert set(taken) == {"node1", "node2"}
    rep = report(probes, torch_checked=taken)
    row = result(rep, "node1", "torch.venv")
    assert row["status"] == status and row["evidence"].startswith(evidence), row
    # node2's probe asked torch itself: its answer stands.
    assert result(rep, "node2", "torch.venv") == node2_alone
    # Not taken where the doctor is not told to (doctor.yml, the smoke job's pass).
    off = torch_checked(["node1", "node2"], hostvars, checked=False)
    assert result(report(probes, torch_checked=off), "node1", "torch.venv")["status"] == "SKIP"
