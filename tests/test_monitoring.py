"""The monitoring role: the textfile collector on fixtures, promtool on its output, the
alert rules (promtool check/test rules), Prometheus' configuration, the report tasks.

promtool comes from Debian's `prometheus` package (make test's host step installs
it); the tests that need it skip, saying so, where it is absent.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible_collections.gpulab.slurm_cluster.plugins.filter.check_registry import (
    check_alert_rules,
)
from ansible_collections.gpulab.slurm_cluster.plugins.filter.monitoring import (
    alertmanager_config,
)
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.cluster_checks import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
ROLE = ROOT / "roles" / "monitoring"
FIXTURES = ROOT / "tests" / "fixtures"
MON = FIXTURES / "monitoring"
PROMTOOL = shutil.which("promtool")
AMTOOL = shutil.which("amtool")
needs_amtool = pytest.mark.skipif(AMTOOL is None, reason="amtool (prometheus-alertmanager) missing")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool absent (Debian package prometheus)"
)


def load_collector():
    path = ROLE / "files" / "slurm_cluster_textfile.py"
    spec = importlib.util.spec_from_file_location("slurm_cluster_textfile", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


C = load_collector()


def parse(text: str) -> dict[tuple[str, frozenset], float]:
    """Exposition text -> {(name, labels): value}."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        name, _, labels = head.partition("{")
        pairs = frozenset(
            (p.split("=", 1)[0], p.split("=", 1)[1].strip('"'))
            for p in labels.rstrip("}").split('",')
            if p
        )
        out[(name, frozenset((k, v.strip('"')) for k, v in pairs))] = float(value)
    return out


def sample(metrics: dict, name: str, **labels: str) -> float:
    return metrics[(name, frozenset(labels.items()))]


def promtool_metrics(text: str) -> None:
    out = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr


# --------------------------------------------------------------------------- slurm


def slurm_text() -> str:
    m = C.Metrics()
    C.node_metrics(m, (MON / "scontrol-show-node.txt").read_text(), "acceptance:", "health: ")
    now = time.mktime(time.strptime("2026-12-02T05:30:00", "%Y-%m-%dT%H:%M:%S"))
    C.job_metrics(m, (MON / "squeue.txt").read_text(), now)
    return m.render()


def test_slurm_nodes_states_and_drain_reasons() -> None:
    got = parse(slurm_text())
    assert sample(got, "slurm_node_state", node="node1", state="mixed") == 1
    assert sample(got, "slurm_node_state", node="node2", state="drained") == 1
    assert sample(got, "slurm_node_state", node="node4", state="down") == 1
    assert sample(got, "slurm_node_drained", node="node2", reason_kind="health") == 1
    assert sample(got, "slurm_node_drained", node="node3", reason_kind="acceptance") == 1
    assert sample(got, "slurm_node_drained", node="node4", reason_kind="admin") == 1
    assert sample(got, "slurm_node_drained", node="node1", reason_kind="none") == 0
    assert sample(got, "slurm_node_down", node="node4") == 1
    assert sample(got, "slurm_nodes_unavailable", reason_kind="health") == 1
    assert sample(got, "slurm_nodes", state="drained") == 2


def test_slurm_cpus_gpus_jobs_and_pending_time() -> None:
    got = parse(slurm_text())
    assert sample(got, "slurm_node_cpus", node="node1") == 2
    assert sample(got, "slurm_node_cpus_allocated", node="node1") == 1
    assert sample(got, "slurm_node_gpus", node="node1") == 1
    assert sample(got, "slurm_node_gpus_allocated", node="node1") == 1
    assert sample(got, "slurm_node_gpus", node="node4") == 0
    assert sample(got, "slurm_jobs", state="pending", partition="gpu") == 2
    assert sample(got, "slurm_jobs", state="running", partition="gpu") == 1
    assert sample(got, "slurm_job_pending_oldest_seconds", partition="gpu") == 1200
    assert sample(got, "slurm_job_pending_oldest_seconds", partition="cpu") == 300


def test_reason_with_spaces_is_kept_whole() -> None:
    line = (MON / "scontrol-show-node.txt").read_text().splitlines()[3]
    assert C.parse_oneliner(line)["Reason"] == "disk replacement [admin@2026-12-02T04:00:00]"


# --------------------------------------------------------------------------- node, health


def test_health_program_last_run() -> None:
    m = C.Metrics()
    C.health_metrics(m, json.loads((MON / "health-last-fail.json").read_text()))
    got = parse(m.render())
    assert sample(got, "cluster_health_verdict_ok") == 0
    assert sample(got, "cluster_health_last_run_timestamp_seconds") == 1796188200.5


def settings(tmp_path: Path, **over: object) -> Path:
    """A node's check settings as the slurm_common role writes them (a compute node)."""
    cfg = {"node": "node1", "kinds": ["compute"], "units": [], "shared_path": "",
           "gpus": 0, "timeout_s": 3, "disk_free_mib": {"/": 1}, **over}  # fmt: skip
    path = tmp_path / "health.json"
    path.write_text(json.dumps(cfg))
    return path


def test_the_collector_judges_with_the_readers_and_the_programs_kept_state(
    tmp_path: Path,
) -> None:
    """A fatal Xid the program keeps (its line long gone) is FAIL here too: alert = drain."""
    log = tmp_path / "kmsg"
    log.write_text("")
    cfg = C.checks_lib().node.load_config(
        str(settings(tmp_path, gpus=1, nvidia_smi=str(tmp_path / "none"), kernel_log=str(log)))
    )
    kept = {"xid": {"boot": f"file:{log.stat().st_ino}", "seen": 7, "pending": [
        {"boot": "b", "seq": 7, "code": 79, "bus": "0000:3b:00", "time": 1.0}]}}  # fmt: skip
    got = C.check_verdicts(cfg, kept)
    assert got["gpu.xid"] == "FAIL"
    assert got["disk.free"] == "PASS"
    assert kept["xid"]["seen"] == 7  # the program's state as it was: a copy is judged
    assert C.check_verdicts(cfg, {})["gpu.xid"] == "PASS"


def fake_bin(folder: Path, name: str, script: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + script + "\n")
    path.chmod(0o755)


def run_main(tmp_path: Path, parts: str, health: Path | None, cfg: Path) -> dict[str, str]:
    out = tmp_path / "textfile"
    out.mkdir(exist_ok=True)
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    if health:
        doc = json.loads(health.read_text())
        doc["time"] = time.time()
        (state / "last.json").write_text(json.dumps(doc))
    args = ["--out", str(out), "--parts", parts, "--settings", str(cfg)]
    args += ["--health-dir", str(state)]
    args += ["--dbd-host", "127.0.0.1", "--dbd-port", "1"]
    assert C.main(args) == 0
    return {p.name: p.read_text() for p in sorted(out.glob("*.prom"))}


@pytest.fixture
def fake_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_bin(bin_dir, "munge", "echo CRED")
    fake_bin(bin_dir, "unmunge", 'read x; [ "$x" = CRED ]')
    fake_bin(
        bin_dir,
        "scontrol",
        f"""case "$1" in
  ping) echo 'Slurmctld(primary) at ctl is UP';;
  show) cat {MON / "scontrol-show-node.txt"};;
esac""",
    )
    fake_bin(bin_dir, "squeue", f"cat {MON / 'squeue.txt'}")
    fake_bin(bin_dir, "nvidia-smi", f"cat {MON / 'nvidia-smi-q-x-faulty.xml'}")
    fake_bin(bin_dir, "systemctl", "exit 3")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return bin_dir


def test_main_writes_every_part(tmp_path: Path, fake_path: Path) -> None:
    cfg = settings(tmp_path, kernel_log=str(MON / "kernel-xid.log"))
    files = run_main(tmp_path, "node,gpu,slurm", MON / "health-last-fail.json", cfg)
    assert sorted(files) == [f"slurm_cluster_{p}.prom" for p in ("gpu", "node", "slurm")]
    node = parse(files["slurm_cluster_node.prom"])
    status = "cluster_check_status"
    assert sample(node, status, check="munge.local", status="PASS") == 1
    assert sample(node, status, check="munge.local", status="FAIL") == 0
    assert sample(node, "cluster_health_verdict_ok") == 0
    slurm = parse(files["slurm_cluster_slurm.prom"])
    assert sample(slurm, "slurm_daemon_up", daemon="slurmctld") == 1
    assert sample(slurm, "slurm_daemon_up", daemon="slurmdbd") == 0  # nothing on port 1
    assert sample(slurm, "cluster_textfile_part_ok", part="slurm") == 1
    assert sample(parse(files["slurm_cluster_gpu.prom"]), "cluster_gpus") == 2
    if PROMTOOL:  # each file alone: the node exporter merges the families
        for text in files.values():
            promtool_metrics(text)


def test_main_faults_munge_shared_fs_and_slurmctld(tmp_path: Path, fake_path: Path) -> None:
    fake_bin(fake_path, "unmunge", "echo 'unmunge: Error: Invalid credential' >&2; exit 1")
    fake_bin(fake_path, "scontrol", "echo 'Slurmctld(primary) at ctl is DOWN'; exit 1")
    fake_bin(
        fake_path,
        "systemctl",
        "printf 'Id=slurmdbd.service\\nLoadState=loaded\\nActiveState=inactive\\n"
        "SubState=dead\\nUnitFileState=enabled\\n'",
    )
    shared = tmp_path / "shared"
    shared.mkdir()
    cfg = settings(tmp_path, kinds=["controller", "dbd"], units=["slurmdbd"],
                   shared_path=str(shared))  # fmt: skip
    files = run_main(tmp_path, "node,slurm", None, cfg)
    node = parse(files["slurm_cluster_node.prom"])
    status = "cluster_check_status"
    assert sample(node, status, check="munge.local", status="FAIL") == 1
    assert sample(node, status, check="shared.fs", status="FAIL") == 1
    # The accounting daemon stopped: the services check names it, as the doctor does.
    assert sample(node, status, check="services", status="FAIL") == 1
    assert not any(k[0].startswith("cluster_health_") for k in node)  # no last.json: quiet
    slurm = parse(files["slurm_cluster_slurm.prom"])
    assert sample(slurm, "slurm_daemon_up", daemon="slurmctld") == 0
    assert sample(slurm, "cluster_textfile_part_ok", part="slurm") == 0


def test_no_nvidia_smi_no_gpu_series(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    files = run_main(tmp_path, "gpu", None, settings(tmp_path))
    got = parse(files["slurm_cluster_gpu.prom"])
    assert [k[0] for k in got] == [
        "cluster_textfile_part_ok",
        "cluster_textfile_part_duration_seconds",
    ]
    assert sample(got, "cluster_textfile_part_ok", part="gpu") == 1


# --------------------------------------------------------------------------- gpu


def test_gpu_faulty_fixture_ecc_xid_power() -> None:
    m = C.Metrics()
    records, _boot = C.checks_lib().gpu.read_kernel_log(str(MON / "kernel-xid.log"))
    n = C.gpu_metrics(m, (MON / "nvidia-smi-q-x-faulty.xml").read_text(), records)
    assert n == 2
    got = parse(m.render())
    g0 = {"gpu": "0", "uuid": "GPU-b2000000-5e2f-4c1d-8b7a-009f3e2d1cb2"}
    g1 = {"gpu": "1", "uuid": "GPU-b2000001-5e2f-4c1d-8b7a-019f3e2d1cb2"}
    assert sample(got, "cluster_gpu_utilization_ratio", **g0) == 0.87
    assert sample(got, "cluster_gpu_memory_used_bytes", **g0) == 40960 * 2**20
    assert sample(got, "cluster_gpu_temperature_celsius", **g0) == 61
    assert sample(got, "cluster_gpu_power_watts", **g0) == 512.35
    assert sample(got, "cluster_gpu_power_watts", **g1) == 71.52
    assert sample(got, "cluster_gpu_ecc_errors_total", type="corrected", **g0) == 3
    assert sample(got, "cluster_gpu_ecc_errors_total", type="uncorrected", **g0) == 0
    assert sample(got, "cluster_gpu_ecc_errors_total", type="uncorrected", **g1) == 2
    fatal = {"class": "fatal"}
    assert sample(got, "cluster_gpu_xid_errors_total", xid="79", **fatal, **g1) == 2
    assert sample(got, "cluster_gpu_xid_errors_total", xid="48", **fatal, **g1) == 1
    # The forged segfault line of the fixture (a program named like the driver's message).
    assert sample(got, "cluster_gpu_xid_events_total", **g1) == 3
    assert sample(got, "cluster_gpu_xid_events_total", **g0) == 0  # PCI 99:00 is no GPU here
    if PROMTOOL:
        promtool_metrics(m.render())


@pytest.mark.parametrize("model", ["a100", "h100", "h200", "rtx4090"])
def test_gpu_project_fixtures(model: str) -> None:
    """The GPU fixtures of tests/fixtures/gpu: one memory series per GPU listed."""
    xml = (FIXTURES / "gpu" / model / "nvidia-smi-q-x.xml").read_text()
    listed = (FIXTURES / "gpu" / model / "nvidia-smi-query-gpu.csv").read_text().splitlines()
    m = C.Metrics()
    assert C.gpu_metrics(m, xml) == len(listed)
    got = parse(m.render())
    for line in listed:
        index, _, uuid, mem = (f.strip() for f in line.split(","))
        labels = {"gpu": index, "uuid": uuid}
        assert (
            sample(got, "cluster_gpu_memory_total_bytes", **labels) == int(mem.split()[0]) * 2**20
        )
    if PROMTOOL:
        promtool_metrics(m.render())


# --------------------------------------------------------------------------- rules, config


def render(template: str, **extra: object) -> str:
    """A role template as Ansible renders it (trim_blocks; the defaults plus extra)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(ROLE / "templates"),
        trim_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["comment"] = lambda s: f"#\n# {s}\n#"
    env.filters["to_json"] = json.dumps
    env.filters["regex_replace"] = lambda s, p, r: __import__("re").sub(p, r, s)
    env.filters["gpulab.slurm_cluster.check_alert_rules"] = check_alert_rules
    env.filters["gpulab.slurm_cluster.alertmanager_config"] = alertmanager_config
    env.filters["trim"] = str.strip
    env.filters["bool"] = lambda v: (
        v if isinstance(v, bool) else str(v).lower() in ("true", "yes", "1")
    )
    env.filters["to_nice_yaml"] = lambda d, indent=2, width=80: yaml.safe_dump(
        d, indent=indent, width=width, default_flow_style=False
    )
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    return env.get_template(template).render(
        ansible_managed="Ansible managed", **{**defaults, **ROLE_VARS, **extra}
    )


# The role's vars/main.yml values the templates read, as on a controller at 10.0.0.1.
ROLE_VARS = {
    "__monitoring_local_am": True,
    "__monitoring_am_target": "10.0.0.1:9093",
    "__monitoring_am_at": "10.0.0.1:9093",
    "__monitoring_prometheus_at": "10.0.0.1:9090",
    "__monitoring_prometheus_target": "10.0.0.1:9090",
    "__monitoring_password_file": "/etc/prometheus/auth/password",
    "__monitoring_web_config": "/etc/prometheus/web-auth.yml",
    "__monitoring_exporter_web_flag": "--web.config.file",
    "__monitoring_hash": "$2b$10$JN9bZfGOhwPz0GkLbiDvX.gUkkB8u5q0aU2zYgCIdW7ZWY2mAcbL6",
}


def rules_file(tmp_path: Path, **extra: object) -> Path:
    path = tmp_path / "slurm_cluster.rules.yml"
    path.write_text(render("etc/prometheus/rules/slurm_cluster.rules.yml.j2", **extra))
    return path


@needs_promtool
def test_rules_pass_promtool_check(tmp_path: Path) -> None:
    out = subprocess.run(
        [PROMTOOL, "check", "rules", str(rules_file(tmp_path))],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    n = sum(len(c.alerts) for c in REGISTRY if "alert" in c.uses)
    assert f"SUCCESS: {n} rules found" in out.stdout


def test_rules_cover_the_issue() -> None:
    rules = yaml.safe_load(render("etc/prometheus/rules/slurm_cluster.rules.yml.j2"))
    names = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert {
        "NodeDrainedByHealth", "NodeDown", "SlurmctldDown", "ServiceDown", "MungeFailing",
        "SharedFilesystemMissing", "GpuXid", "GpuUncorrectableEcc",
    } <= names  # fmt: skip
    # Each rule is a check's: its label names a registry check with use alert.
    checks = {r["labels"]["check"] for g in rules["groups"] for r in g["rules"]}
    assert checks <= {c.id for c in REGISTRY if "alert" in c.uses}
    by_name = {r["alert"]: r for g in rules["groups"] for r in g["rules"]}
    assert by_name["NodeDrainedByHealth"]["for"] == "10m"
    again = yaml.safe_load(
        render("etc/prometheus/rules/slurm_cluster.rules.yml.j2", monitoring_alert_node_minutes=3)
    )
    assert {r["alert"]: r for g in again["groups"] for r in g["rules"]}["NodeDown"]["for"] == "3m"
    # A fraction of a minute: whole seconds (the Docker scenarios' 0.25 minutes).
    short = yaml.safe_load(
        render(
            "etc/prometheus/rules/slurm_cluster.rules.yml.j2",
            monitoring_alert_node_minutes=0.25,
            monitoring_alert_daemon_minutes=1.5,
        )
    )
    by_name = {r["alert"]: r for g in short["groups"] for r in g["rules"]}
    assert (by_name["NodeDown"]["for"], by_name["SlurmctldDown"]["for"]) == ("15s", "90s")


@needs_promtool
def test_rules_unit_tests(tmp_path: Path) -> None:
    """promtool test rules: each alert fires after its for:, and not before (N=10, daemons 2)."""
    rules_file(tmp_path)
    tests = (MON / "rules_test.yml").read_text()
    (tmp_path / "rules_test.yml").write_text(tests)
    out = subprocess.run(
        [PROMTOOL, "test", "rules", "rules_test.yml"],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


@needs_promtool
def test_rules_unit_tests_fail_with_other_minutes(tmp_path: Path) -> None:
    """The unit tests are sensitive: a longer for: breaks them."""
    rules_file(tmp_path, monitoring_alert_node_minutes=30, monitoring_alert_daemon_minutes=20)
    (tmp_path / "rules_test.yml").write_text((MON / "rules_test.yml").read_text())
    out = subprocess.run(
        [PROMTOOL, "test", "rules", "rules_test.yml"],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode != 0


@needs_promtool
@pytest.mark.parametrize("external", [False, True], ids=["own-alertmanager", "lab-alertmanager"])
def test_prometheus_config_scrapes_every_node(tmp_path: Path, external: bool) -> None:
    rules_file(tmp_path)
    password = tmp_path / "password"
    password.write_text("secret")
    am = {"__monitoring_local_am": False, "__monitoring_am_target": "am.lab:9093"}
    text = render(
        "etc/prometheus/prometheus.yml.j2",
        groups={"slurm_cluster": ["ctl", "node1", "node2"]},
        cluster_groups={"cluster": "slurm_cluster"},
        hostvars={"ctl": {}, "node1": {"monitoring_scrape_host": "10.0.0.11"}, "node2": {}},
        cluster_name="lab",
        __monitoring_password_file=str(password),
        **(am if external else {}),
    ).replace("/etc/prometheus/slurm_cluster.rules.yml", str(tmp_path / "slurm_cluster.rules.yml"))
    (tmp_path / "prometheus.yml").write_text(text)
    out = subprocess.run(
        [PROMTOOL, "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    conf = yaml.safe_load(text)
    node_job = next(j for j in conf["scrape_configs"] if j["job_name"] == "node")
    assert [(s["targets"], s["labels"]["instance"]) for s in node_job["static_configs"]] == [
        (["ctl:9100"], "ctl"),
        (["10.0.0.11:9100"], "node1"),
        (["node2:9100"], "node2"),
    ]
    # Every scrape asks with the password file; Prometheus scrapes itself at its address.
    auth = {"username": "metrics", "password_file": str(password)}
    assert all(job["basic_auth"] == auth for job in conf["scrape_configs"])
    own = next(j for j in conf["scrape_configs"] if j["job_name"] == "prometheus")
    assert own["static_configs"][0]["targets"] == ["10.0.0.1:9090"]
    sender = conf["alerting"]["alertmanagers"][0]
    if external:
        assert sender["static_configs"][0]["targets"] == ["am.lab:9093"]
        assert "basic_auth" not in sender
    else:
        assert sender["static_configs"][0]["targets"] == ["10.0.0.1:9093"]
        assert sender["basic_auth"] == auth


def test_daemons_listen_on_the_cluster_address_and_ask_for_the_password() -> None:
    web = "--web.config.file=/etc/prometheus/web-auth.yml"
    prometheus = render("etc/default/prometheus.j2")
    assert "--web.listen-address=10.0.0.1:9090 " in prometheus and web in prometheus
    am = render("etc/default/prometheus-alertmanager.j2")
    assert "--web.listen-address=10.0.0.1:9093 " in am and web in am
    assert "--cluster.listen-address= " in am  # no HA peers: no port 9094
    exporter = render("etc/default/prometheus-node-exporter.j2")
    assert web in exporter
    jammy = render(
        "etc/default/prometheus-node-exporter.j2", __monitoring_exporter_web_flag="--web.config"
    )
    assert "--web.config=/etc/prometheus/web-auth.yml" in jammy


@needs_promtool
def test_web_config_passes_promtool(tmp_path: Path) -> None:
    (tmp_path / "web.yml").write_text(render("etc/prometheus/web-auth.yml.j2"))
    out = subprocess.run(
        [PROMTOOL, "check", "web-config", str(tmp_path / "web.yml")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    users = yaml.safe_load((tmp_path / "web.yml").read_text())["basic_auth_users"]
    assert users == {"metrics": ROLE_VARS["__monitoring_hash"]}


RECEIVERS = {
    "monitoring_alert_webhook_url": "https://chat.example.org/hooks/TOKEN",
    "monitoring_alert_email_to": ["admin@lab.example", "gpu@lab.example"],
    "monitoring_alert_email_from": "slurm@lab.example",
    "monitoring_alert_smarthost": "smtp.lab.example:587",
    "monitoring_alert_smtp_username": "slurm",
    "monitoring_alert_smtp_password": "relay-secret",
}


@needs_amtool
@pytest.mark.parametrize("given", ["none", "webhook", "all"])
def test_alertmanager_config_passes_amtool(tmp_path: Path, given: str) -> None:
    values = {
        "none": {},
        "webhook": {"monitoring_alert_webhook_url": "http://node1:9999/hook"},
        "all": RECEIVERS,
    }[given]
    text = render("etc/prometheus/alertmanager.yml.j2", **values)
    (tmp_path / "alertmanager.yml").write_text(text)
    out = subprocess.run(
        [AMTOOL, "check-config", str(tmp_path / "alertmanager.yml")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    conf = yaml.safe_load(text)
    assert conf["route"]["group_by"] == ["alertname", "instance", "node", "check"]
    (receiver,) = conf["receivers"]
    if given == "none":
        assert set(receiver) == {"name"}
    else:
        assert all(w["send_resolved"] for w in receiver["webhook_configs"])
    if given == "all":
        assert [e["to"] for e in receiver["email_configs"]] == RECEIVERS[
            "monitoring_alert_email_to"
        ]
        assert all(e["send_resolved"] for e in receiver["email_configs"])
        assert conf["global"]["smtp_smarthost"] == "smtp.lab.example:587"
        assert conf["global"]["smtp_auth_password"] == "relay-secret"
        assert conf["global"]["smtp_require_tls"] is True


def test_receivers_file_is_never_logged_and_not_world_readable() -> None:
    tasks = yaml.safe_load((ROLE / "tasks" / "configure.yml").read_text())
    task, spec = next(
        (t, f)
        for t in tasks
        for f in t.get("gpulab.slurm_cluster.write_files", {}).get("files", [])
        if isinstance(f, dict) and "alertmanager.yml.j2" in f.get("content", "")
    )
    assert spec["mode"] == "0640"
    assert spec["group"] == "prometheus"
    assert spec["secret"] is True  # never in a diff
    assert "monitoring_alert_smtp_password" in task["no_log"]
    assert spec["validate"].startswith("amtool check-config")


def test_defaults_match_argument_specs() -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert sorted(options) == sorted(defaults)
    for name, value in defaults.items():
        assert options[name].get("default") == value, name


# --------------------------------------------------------------------------- playbook


def playbook(
    tmp_path: Path, results: Path, *extra: str, compute: bool = False
) -> subprocess.CompletedProcess:
    """report.yml on this machine, as doctor.yml's hook runs it (the controller: localhost;
    with compute, localhost is a compute node too and the report reads its health files)."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    groups = {"slurm_controller": {"hosts": {"localhost": local}}}
    if compute:
        groups["slurm_compute"] = {"hosts": {"localhost": local}}
    (tmp_path / "hosts.yml").write_text(
        yaml.safe_dump({"all": {"children": {"slurm_cluster": {"children": groups}}}})
    )
    (tmp_path / "play.yml").write_text(
        yaml.safe_dump(
            [{"name": "Report", "hosts": "slurm_cluster", "gather_facts": False,
              "tasks": [{"name": "Report", "ansible.builtin.import_role": {
                  "name": "gpulab.slurm_cluster.monitoring", "tasks_from": "report"}}]}]
        )
    )  # fmt: skip
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
         str(tmp_path / "play.yml"), "-e", f"cluster_results_dir={results}",
         "-e", f"monitoring_textfile_dir={tmp_path / 'textfile'}", *extra],
        capture_output=True, text=True, check=False, env=env, cwd=ROOT, timeout=300,
    )  # fmt: skip


def test_report_tasks_push_metrics_only_when_changed(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(MON / "results", results)
    (tmp_path / "textfile").mkdir()
    first = playbook(tmp_path, results)
    assert first.returncode == 0, first.stdout + first.stderr
    pushed = tmp_path / "textfile" / "slurm_cluster_verdicts.prom"
    assert pushed.read_text() == (results / "cluster-verdicts.prom").read_text()
    assert "Cluster PASS" in (results / "cluster-report.html").read_text()
    # The copy ran (its output, not a change to the cluster: changed_when false);
    # the read of the health program's files skipped (localhost is no compute node).
    assert "changed=0" in first.stdout and "skipped=1" in first.stdout
    second = playbook(tmp_path, results)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "changed=0" in second.stdout and "skipped=2" in second.stdout
    off = playbook(tmp_path, results, "-e", "monitoring_enabled=false")
    assert "changed=0" in off.stdout and off.returncode == 0


def test_the_stamp_covers_every_template_the_role_writes() -> None:
    """The probe's stamp hashes templates/monitoring-digest.j2, which includes the
    templates the role writes: one written and not included would change on the
    nodes without the stamp noticing, and a rerun would skip it."""
    written = set()
    lookup = r"lookup\('(?:ansible\.builtin\.template|gpulab\.slurm_cluster\.rendered)', '([^']+)'"
    for tasks in (ROLE / "tasks").glob("*.yml"):
        written |= set(re.findall(lookup, tasks.read_text()))
    digest = (ROLE / "templates" / "monitoring-digest.j2").read_text()
    included = set(re.findall(r"\{% include '([^']+)' %\}", digest))
    assert written, "no template found in the role's tasks"
    assert included == written, (sorted(written - included), sorted(included - written))
    for name in included:
        assert (ROLE / "templates" / name).is_file(), name
