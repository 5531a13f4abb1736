"""The node health program (plugins/module_utils/node_health.py) on recorded outputs.

GPU checks run against tests/fixtures/health/<machine>/ through the fake
nvidia-smi there (the recorded answers of the two queries the program asks),
healthy and faulty; the drain rule (``decide``) case by case; and main()
end to end with a stand-in scontrol that records what the program asks.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils import (
    gpu_checks,
    node_checks,
)
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils import node_health as nh

ROOT = Path(__file__).resolve().parents[1]

FIX = Path(__file__).resolve().parent / "fixtures" / "health"
FAKE_SMI = str(FIX / "fake-nvidia-smi")
PREFIX = "health:"

# Every check id must be made to FAIL by some case below (a new check
# needs its fault fixture): filled by the cases, asserted at the end.
FAILED_IDS: set[str] = set()


def cfg(**kw) -> dict:
    base = {**nh.DEFAULTS, "node": "node1", "timeout_s": 3.0, "kinds": ["compute"]}
    base.update(kw)
    return base


def by_id(results: list[nh.Result]) -> dict[str, nh.Result]:
    out = {r.id: r for r in results}
    FAILED_IDS.update(r.id for r in results if r.status == "FAIL")
    return out


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch):
    """Point the program at a fixture machine: its fake nvidia-smi answers, N device files."""

    def use(machine: str, devices: int | None = None) -> dict:
        rows = (FIX / machine / "query-gpu.csv").read_text().strip().splitlines()
        count = len(rows) if devices is None else devices
        monkeypatch.setenv("FAKE_GPU_DIR", str(FIX / machine))
        monkeypatch.setattr(gpu_checks, "gpu_devices", lambda: [f"nvidia{i}" for i in range(count)])
        return cfg(gpus=len(rows), nvidia_smi=FAKE_SMI, kernel_log=str(FIX / "kmsg-none.txt"))

    return use


GPU_IDS = ("gpu.smi", "gpu.count", "gpu.ecc", "gpu.persistence", "gpu.throttle")


@pytest.mark.parametrize("machine", ["h200", "h100", "a100", "rtx4090"])
def test_healthy_gpu_machines_pass_every_gpu_check(gpus, machine: str) -> None:
    res = by_id(nh.run_checks(gpus(machine), only=list(GPU_IDS)))
    assert {i: r.status for i, r in res.items()} == dict.fromkeys(GPU_IDS, "PASS")


@pytest.mark.parametrize(
    ("machine", "check", "words"),
    [
        (
            "h100-ecc",
            "gpu.ecc",
            ["GPU 3 (00000000:61:00.0) has 2 uncorrectable ECC", "row remap pending"],
        ),
        ("a100-remap-failed", "gpu.ecc", ["GPU 6", "row remapping failed (replace the GPU)"]),
        ("h200-throttle", "gpu.throttle", ["GPU 5: HW thermal slowdown"]),
        ("rtx4090-persistence-off", "gpu.persistence", ["persistence mode is off on GPU 0"]),
    ],
)
def test_faulty_gpu_machines_fail_the_named_check(gpus, machine, check, words) -> None:
    res = by_id(nh.run_checks(gpus(machine), only=list(GPU_IDS)))
    assert res[check].status == "FAIL", res[check]
    for word in words:
        assert word in res[check].message
    assert res[check].fix
    others = [i for i, r in res.items() if r.status != "PASS" and i != check]
    assert others == []


def test_a_missing_device_fails_the_count(gpus) -> None:
    res = by_id(nh.run_checks(gpus("h100", devices=7), only=list(GPU_IDS)))
    assert res["gpu.count"].status == "FAIL"
    assert res["gpu.count"].message == "7 GPU devices, gres says 8: /dev/nvidia7 missing"


def test_nvidia_smi_failing_explains_the_checks_that_read_it(gpus, tmp_path, monkeypatch) -> None:
    broken = tmp_path / "gpu"
    broken.mkdir()
    (broken / "fail").write_text(
        "Unable to determine the device handle for GPU0000:18:00.0: Unknown Error\n"
    )
    conf = gpus("h200")
    monkeypatch.setenv("FAKE_GPU_DIR", str(broken))
    res = by_id(nh.run_checks(conf, only=list(GPU_IDS)))
    assert res["gpu.smi"].status == "FAIL"
    assert "Unknown Error" in res["gpu.smi"].message
    for check in ("gpu.ecc", "gpu.persistence", "gpu.throttle"):
        assert (res[check].status, res[check].caused_by) == ("SKIP", "gpu.smi")


def test_a_hung_nvidia_smi_is_cut_at_the_timeout(gpus, tmp_path, monkeypatch) -> None:
    hung = tmp_path / "gpu"
    hung.mkdir()
    (hung / "hang").write_text("")
    conf = gpus("rtx4090") | {"timeout_s": 0.5}
    monkeypatch.setenv("FAKE_GPU_DIR", str(hung))
    res = by_id(nh.run_checks(conf, only=["gpu.smi"]))
    assert res["gpu.smi"].status == "FAIL"
    assert "no answer in 0.5 s" in res["gpu.smi"].message


def test_xid_79_fails_until_acknowledged_and_application_xids_only_warn(gpus) -> None:
    conf = gpus("h200") | {"kernel_log": str(FIX / "kmsg-xid79.txt")}
    state: dict = {}
    first = by_id(nh.run_checks(conf, state, only=["gpu.xid"]))["gpu.xid"]
    assert first.status == "FAIL"
    assert "Xid 79 on 0000:3a:00 (GPU has fallen off the bus)" in first.message
    # Still there at the next run: a fallen GPU does not heal by itself.
    assert nh.run_checks(conf, state, only=["gpu.xid"])[0].status == "FAIL"
    acked = nh.run_checks(conf | {"_ack_xid": True}, state, only=["gpu.xid"])[0]
    assert acked.status == "PASS"
    assert nh.run_checks(conf, state, only=["gpu.xid"])[0].status == "PASS"
    app = nh.run_checks(conf | {"kernel_log": str(FIX / "kmsg-xid13.txt")}, {}, only=["gpu.xid"])
    assert app[0].status == "WARN"
    assert "Xid 13 on 0000:18:00" in app[0].message


# A program named "NVRM: Xid (PCI:0000:3b:00.0): 79 x" that faults: the kernel
# prints its task name (15 characters) first and the file name later in the line.
FORGED = (
    "[ 2001.5] NVRM: Xid (PCI:[4242]: segfault at 0 ip 00007f00 sp 00007ffd error 14 "
    "in NVRM: Xid (PCI:0000:3b:00.0): 79 x[55d0a000+1000] likely on CPU 1\n"
    "6,812,2001500000,-;x[4243]: segfault at 0 ip 0 sp 0 error 4 in NVRM: Xid (PCI:0000:3b:00.0): "
    "79, GPU has fallen off the bus.[400000+1000]\n"
    # A line a user made root write to /dev/kmsg has facility user (14 = 1 << 3 | 6).
    "14,813,2001600000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
)
REAL = (
    "4,900,2002000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus.\n"
)


def test_xid_text_a_user_can_place_in_the_log_is_not_the_drivers(gpus, tmp_path) -> None:
    log = tmp_path / "kmsg"
    log.write_text(FORGED)
    conf = gpus("h200") | {"kernel_log": str(log)}
    res = nh.run_checks(conf, {}, only=["gpu.xid"])[0]
    assert (res.status, res.message) == ("PASS", "no fatal Xid pending")


def test_a_fatal_xid_is_kept_after_its_line_is_gone_until_acknowledged(gpus, tmp_path) -> None:
    log = tmp_path / "kmsg"
    log.write_text(FORGED + REAL)
    conf = gpus("h200") | {"kernel_log": str(log)}
    state: dict = {}
    first = nh.run_checks(conf, state, only=["gpu.xid"])[0]
    assert first.status == "FAIL"
    assert first.message.startswith("Xid 79 on 0000:3b:00 (GPU has fallen off the bus)")
    log.write_text("")  # the ring buffer moved on
    again = nh.run_checks(conf, state, only=["gpu.xid"])[0]
    assert (again.status, again.message) == (first.status, first.message)
    # A reader with a copy of the state (the doctor's probe, the collector) agrees.
    assert nh.run_checks(conf, json.loads(json.dumps(state)), only=["gpu.xid"])[0].status == "FAIL"
    acked = nh.run_checks(conf | {"_ack_xid": True, "_ack_by": "alice as root"}, state,
                          only=["gpu.xid"])[0]  # fmt: skip
    assert (
        acked.message
        == "acknowledged by alice as root: Xid 79 on 0000:3b:00 (GPU has fallen off the bus)"
    )
    assert state["xid"]["acked"][-1]["by"] == "alice as root"
    assert nh.run_checks(conf, state, only=["gpu.xid"])[0].status == "PASS"
    # The same line logged again later is a new fault.
    log.write_text(REAL)
    assert nh.run_checks(conf, state, only=["gpu.xid"])[0].status == "FAIL"


def test_disk_below_its_threshold_fails_with_the_numbers(tmp_path) -> None:
    res = by_id(nh.run_checks(cfg(disk_free_mib={str(tmp_path): 10**9}), only=["disk.free"]))
    assert res["disk.free"].status == "FAIL"
    assert f"{tmp_path} has " in res["disk.free"].message
    assert "(threshold 976562.5 GiB)" in res["disk.free"].message
    ok = nh.run_checks(cfg(disk_free_mib={str(tmp_path): 1}), only=["disk.free"])
    assert ok[0].status == "PASS"


def test_config_fetched_compares_slurmds_copy_with_the_controllers(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(node_checks, "CONFIGLESS_DIR", str(tmp_path / "none"))
    (tmp_path / "slurm.conf").write_text("ClusterName=lab\n")
    settings = tmp_path / "health.json"
    settings.write_text("{}")
    conf = cfg(conf_dir=str(tmp_path), _config_path=str(settings))
    good = node_checks.sha1_file(str(tmp_path / "slurm.conf"))
    assert (
        nh.run_checks(conf | {"slurm_conf_sha1": good}, only=["config.fetched"])[0].status == "PASS"
    )
    stale = nh.run_checks(conf | {"slurm_conf_sha1": "0" * 40}, only=["config.fetched"])[0]
    # health.json was just written: a reconfigure may be on its way.
    assert stale.status == "WARN"
    # Written an hour ago, and slurmd's copy is older still: slurmd missed it.
    os.utime(settings, (time.time() - 3600,) * 2)
    os.utime(tmp_path / "slurm.conf", (time.time() - 7200,) * 2)
    stale = by_id(nh.run_checks(conf | {"slurm_conf_sha1": "0" * 40}, only=["config.fetched"]))
    assert stale["config.fetched"].status == "FAIL"
    assert "slurmd did not take the controller's new file" in stale["config.fetched"].message
    # slurmd's copy newer than the settings: the settings are behind (--limit), not slurmd.
    os.utime(tmp_path / "slurm.conf", None)
    newer = nh.run_checks(conf | {"slurm_conf_sha1": "0" * 40}, only=["config.fetched"])[0]
    assert newer.status == "WARN"
    assert "older than slurmd's copy" in newer.message


def test_the_shared_token_is_read_only_from_roots_own_files(tmp_path) -> None:
    check = tmp_path / "check"
    check.mkdir(mode=0o755)
    top = str(tmp_path)  # the shared mount point: trusted as it is
    assert node_checks.read_token(str(check), top) == f"no token file in {check}"
    (check / "123-3").write_text("123-3")
    if os.geteuid() == 0:
        assert node_checks.read_token(str(check), top) == ""
    # A link in place of the folder, or of a folder on the way, is not followed.
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    assert node_checks.read_token(str(link), top) == f"{link} is a link or not a folder"
    assert node_checks.read_token(str(link / "check"), top) == f"{link} is a link or not a folder"
    check.chmod(0o777)
    assert node_checks.read_token(str(check), top).startswith(
        f"{check} is not root's own folder (owner "
    )
    # Without a mount point every folder on the way counts, /tmp (1777) too.
    check.chmod(0o755)
    assert node_checks.read_token(str(check)).startswith("/tmp is not root's own folder")


UNSHARE = shutil.which("unshare")


@pytest.mark.skipif(
    os.geteuid() != 0 or UNSHARE is None, reason="needs root and unshare for a private mount"
)
def test_trust_counts_from_a_share_mounted_two_levels_deep(tmp_path) -> None:
    """A share mounted at <1777 folder>/lab/shared, its mount point 1777 and a lab user's:
    the token is found (only the folders below the mount point must be root's); a
    user's folder below the mount point is refused."""
    base = tmp_path / "scratch"
    base.mkdir()
    base.chmod(0o1777)
    point = base / "lab" / "shared"
    point.mkdir(parents=True)
    os.chown(base / "lab", 4242, 4242)
    script = f"""
set -e
mount -t tmpfs -o mode=1777 tmpfs {point}
chown 4242:4242 {point}
mkdir -m 0755 {point}/.cluster {point}/.cluster/shared-fs-check
echo -n 7-1 > {point}/.cluster/shared-fs-check/7-1
{sys.executable} - <<'PY'
import json, sys
sys.path.insert(0, {str(ROOT / "collections")!r})
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils import node_checks as n
cfg = {{**n.DEFAULTS, "node": "n1", "shared_path": {str(point)!r},
        "shared_check_dir": {str(point / ".cluster/shared-fs-check")!r}}}
first = n.run_checks(cfg, {{}}, only=["shared.fs"], use="health")[0]
PY_OUT = [first.status, first.message]
import os
os.chown({str(point / ".cluster")!r}, 4242, 4242)
second = n.run_checks(cfg, {{}}, only=["shared.fs"], use="health")[0]
print(json.dumps(PY_OUT + [second.status, second.message]))
PY
"""
    done = subprocess.run(
        [UNSHARE, "-m", "sh", "-c", script], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    status, message, status2, message2 = json.loads(done.stdout.strip().splitlines()[-1])
    assert (status, message) == ("PASS", f"{point} is tmpfs from tmpfs, writable by root")
    assert status2 == "FAIL"
    assert f"{point}/.cluster is not root's own folder (owner 4242, mode 0755)" in message2


def test_shared_fs_names_a_local_folder_in_place_of_the_mount(tmp_path) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    res = by_id(nh.run_checks(cfg(shared_path=str(folder)), only=["shared.fs"]))
    assert res["shared.fs"].status == "FAIL"
    assert res["shared.fs"].message.startswith(f"{folder} is a local folder (")
    assert res["shared.fs"].message.endswith("), not the cluster's shared filesystem")


def test_munge_failing_is_named(monkeypatch) -> None:
    monkeypatch.setattr(
        node_checks, "run", _fake_run({"munge": (1, "", "munge: Error: Failed to access socket")})
    )
    res = by_id(nh.run_checks(cfg(), only=["munge.local"]))
    assert res["munge.local"].status == "FAIL"
    assert res["munge.local"].message == ("munged is inactive: munge -n: Failed to access socket")


def test_clock_without_a_time_service_fails_outside_a_container(monkeypatch) -> None:
    monkeypatch.setattr(
        node_checks, "run", _fake_run({"systemctl": (3, "inactive\ninactive\n", "")})
    )
    monkeypatch.setattr(node_checks, "in_container", lambda: False)
    res = by_id(nh.run_checks(cfg(), only=["clock.sync"]))
    assert res["clock.sync"].status == "FAIL"
    assert "no time service is active" in res["clock.sync"].message
    tracking = (
        "A9FEA97B,169.254.169.123,3,1796212800.1,-2.5,0.1,0.1,1.0,0.0,0.1,0.0,0.0,64.0,Normal"
    )
    monkeypatch.setattr(
        node_checks,
        "run",
        _fake_run({"systemctl": (0, "active\ninactive\n", ""), "chronyc": (0, tracking, "")}),
    )
    res = by_id(nh.run_checks(cfg(), only=["clock.sync"]))
    assert res["clock.sync"].message == "clock is 2.500 s off (chrony; limit 1 s)"


def _fake_run(answers: dict):
    def fake(argv, timeout=10, stdin=None, **kw):
        rc, out, err = answers.get(argv[0], (0, "inactive\n", ""))
        return {"rc": rc, "out": out, "err": err}

    return fake


# ------------------------------------------------------------------ the drain rule

FAIL = [
    nh.Result("shared.fs", "FAIL", "/shared is tmpfs (tmpfs), not the cluster's shared filesystem")
]
PASS = [nh.Result("shared.fs", "PASS", "ok")]


def node(state: str, reason: str = "") -> dict:
    return nh.parse_node(f"NodeName=node2 Arch=x86_64 State={state} Reason={reason or 'none'}")


@pytest.mark.parametrize(
    ("state", "reason", "results", "action"),
    [
        ("IDLE", "", FAIL, "drain"),
        ("MIXED", "", FAIL, "drain"),
        ("IDLE", "", PASS, "none"),
        ("IDLE+DRAIN", f"health: shared.fs: {FAIL[0].message}", PASS, "resume"),
        ("IDLE+DRAIN", "health: disk.free: / has 10 MiB free", FAIL, "update"),
        # The admin's drain and the acceptance gate's are never lifted or rewritten.
        ("IDLE+DRAIN", "fan swap, back Monday [root@2026-12-02T10:00:00]", PASS, "kept"),
        ("IDLE+DRAIN", "fan swap, back Monday", FAIL, "kept"),
        ("DRAINING", "acceptance: pending", PASS, "kept"),
        ("IDLE+DRAIN", "acceptance: pending", FAIL, "kept"),
        ("DOWN+DRAIN+NOT_RESPONDING", "Kill task failed", PASS, "kept"),
        ("IDLE+DRAIN", "health: flapping: drained 3 times in 60 min", PASS, "none"),
    ],
)  # fmt: skip
def test_the_drain_rule(state, reason, results, action) -> None:
    got, why = nh.decide(node(state, reason), results, PREFIX, [], 1000.0, 3, 3600)
    assert got == action
    if action in ("drain", "update"):
        assert why.startswith("health: ")
        assert why == nh.drain_reason(results, PREFIX)


def test_the_drain_reason_names_the_first_failure_and_counts_the_rest() -> None:
    results = [
        *FAIL,
        nh.Result("disk.free", "FAIL", "/ has 10 MiB free"),
        nh.Result("clock.sync", "FAIL", "x"),
    ]
    assert nh.drain_reason(results, PREFIX) == (
        "health: shared.fs: /shared is tmpfs (tmpfs), not the cluster's shared filesystem"
        " (+2 more: disk.free, clock.sync)"
    )


def test_a_node_drained_three_times_in_the_window_stays_drained_as_flapping() -> None:
    ours = node("IDLE+DRAIN", "health: shared.fs: gone")
    action, reason = nh.decide(ours, PASS, PREFIX, [100.0, 900.0, 1700.0], 2000.0, 3, 3600)
    assert action == "flapping"
    assert reason.startswith(
        "health: flapping: drained 3 times in 60 min, last for shared.fs: gone"
    )
    # Outside the window the old drains do not count.
    assert nh.decide(ours, PASS, PREFIX, [100.0, 900.0, 1700.0], 9000.0, 3, 3600)[0] == "resume"


def test_parse_node_strips_the_user_and_time_from_the_reason() -> None:
    got = nh.parse_node(
        "NodeName=node2 Arch=x86_64 CoresPerSocket=1 State=IDLE+DRAIN ThreadsPerCore=1 "
        "Reason=health: shared.fs: /shared is tmpfs [root@2026-12-02T06:00:01] Comment=(null)"
    )
    assert got["reason"] == "health: shared.fs: /shared is tmpfs"
    assert got["flags"] == {"IDLE", "DRAIN"}


# ------------------------------------------------------------------ the program end to end


# The host running the tests has no munged; its clock is the host's.
SKIP = ["munge.local", "clock.sync"]


@pytest.fixture
def slurm(tmp_path, monkeypatch):
    """A stand-in scontrol: `show node` prints state/reason files, `update` is logged."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "state").write_text("IDLE")
    (tmp_path / "reason").write_text("none")
    script = bin_dir / "scontrol"
    script.write_text(
        "#!/bin/sh\n"
        f'd="{tmp_path}"\n'
        'if [ "$1" = --oneliner ]; then printf "NodeName=%s State=%s Reason=%s\\n" "$4" '
        '"$(cat "$d/state")" "$(cat "$d/reason")"; exit 0; fi\n'
        'printf "%s\\n" "$*" >> "$d/updates"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return tmp_path


def test_main_drains_on_fail_then_resumes_on_pass_and_keeps_events(slurm, tmp_path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    settings = tmp_path / "health.json"
    states = tmp_path / "var"
    settings.write_text(
        json.dumps({"node": "node2", "disk_free_mib": {str(disk): 10**9}, "skip": SKIP})
    )
    argv = ["--config", str(settings), "--state-dir", str(states)]
    assert nh.main([*argv, "--json"]) == 1
    last = json.loads((states / "last.json").read_text())
    assert last["verdict"] == "FAIL"
    assert last["action"] == "drain"
    assert last["reason"].startswith("health: disk.free: ")
    update = (slurm / "updates").read_text().splitlines()
    assert update == [f"update nodename=node2 state=drain reason={last['reason']}"]
    # Slurm now shows the drain; the disk is freed; one passing run lifts it.
    (slurm / "state").write_text("IDLE+DRAIN")
    (slurm / "reason").write_text(last["reason"])
    settings.write_text(
        json.dumps({"node": "node2", "disk_free_mib": {str(disk): 1}, "skip": SKIP})
    )
    assert nh.main(argv) == 0
    assert (slurm / "updates").read_text().splitlines()[-1] == "update nodename=node2 state=resume"
    events = [json.loads(x) for x in (states / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["drain", "resume"]
    assert json.loads((states / "last.json").read_text())["run_s"] < 5


def test_main_with_no_drain_changes_no_node_state(slurm, tmp_path) -> None:
    settings = tmp_path / "health.json"
    settings.write_text(
        json.dumps({"node": "node2", "disk_free_mib": {str(tmp_path): 10**9}, "skip": SKIP})
    )
    assert (
        nh.main(["--config", str(settings), "--state-dir", str(tmp_path / "v"), "--no-drain"]) == 1
    )
    assert not (slurm / "updates").exists()
    assert json.loads((tmp_path / "v" / "last.json").read_text())["action"] == "would drain"


def test_the_timer_run_does_nothing_while_munge_answers(slurm, tmp_path, monkeypatch) -> None:
    settings = tmp_path / "health.json"
    settings.write_text(json.dumps({"node": "node2", "disk_free_mib": {str(tmp_path): 10**9}}))
    monkeypatch.setattr(nh, "check_munge", lambda ctx: ("PASS", "munged answers"))
    argv = ["--config", str(settings), "--state-dir", str(tmp_path / "v"), "--if-munge-down"]
    assert nh.main(argv) == 0
    assert not (tmp_path / "v").exists()
    assert not (slurm / "updates").exists()


def test_a_bad_setting_is_refused_by_name(tmp_path, capsys) -> None:
    settings = tmp_path / "health.json"
    settings.write_text(json.dumps({"node": "n", "disk_free": 1}))
    assert nh.main(["--config", str(settings), "--state-dir", str(tmp_path)]) == 2
    assert "unknown settings disk_free" in capsys.readouterr().err
    settings.write_text(json.dumps({"node": "n", "skip": ["gpu.ecc", "gpu.nope"]}))
    assert nh.main(["--config", str(settings), "--state-dir", str(tmp_path)]) == 2
    assert "skip names no check gpu.nope (checks: services, munge.local," in capsys.readouterr().err


def test_every_check_has_a_fault_case() -> None:
    """Runs last in this file: each registry check failed in at least one case above."""
    assert set(nh.CHECK_IDS) - FAILED_IDS == set()
