"""The check registry (plugins/module_utils/cluster_checks.py) is the one definition of
every check: this walks it.

- Each check has one judge: a reader in node_checks.RUNNERS (scope node) or a
  doctor step in doctor_slurm.STEPS (scope cluster), and nothing else has one.
- Each check FAILs on a fault fixture of its own for every use it declares: the
  node health program (run_checks, use health), the doctor (doctor_report over
  what the probe's reader returned), the collector (the metric
  cluster_check_status) and the alert rules (a rule of that check whose
  expression promtool fires on the collector's metric).
- A check added to the registry in one place shows up in all four.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpulab.slurm_cluster.plugins.filter import doctor as d
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils import (
    cluster_checks as registry,
)
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils import (
    gpu_checks,
    node_checks,
)
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.doctor_slurm import STEPS

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(ROOT / "tests"))

from probe_data import slurm_keys  # noqa: E402
from test_monitoring import C as COLLECTOR  # noqa: E402
from test_monitoring import parse, sample  # noqa: E402

HEALTHY = json.loads((FIX / "doctor" / "healthy.json").read_text())
PROMTOOL = shutil.which("promtool")


def node_ids(use: str = "") -> list[str]:
    return [c.id for c in registry.REGISTRY if c.scope == "node" and (not use or use in c.uses)]


# ----------------------------------------------------------------- one definition


def test_ids_are_unique_and_well_formed() -> None:
    ids = [c.id for c in registry.REGISTRY]
    assert len(ids) == len(set(ids))
    for c in registry.REGISTRY:
        assert re.fullmatch(r"[a-z]+(\.[a-z]+)?", c.id), c.id
        assert c.scope in ("node", "cluster"), c.id
        assert set(c.uses) <= set(registry.USES) and c.uses, c.id
        assert set(c.kinds) <= set(registry.KINDS), c.id
        assert c.reads and c.fix, c.id
        for dep in c.explained_by + c.explained_by_any + c.explained_by_controller:
            assert dep in registry.BY_ID, f"{c.id} explained by unknown {dep}"


def test_each_check_has_exactly_one_judge() -> None:
    assert set(node_checks.RUNNERS) == set(node_ids())
    cluster = {c.id for c in registry.REGISTRY if c.scope == "cluster"}
    assert set(STEPS) == cluster
    # Cluster checks are the doctor's alone (they compare nodes).
    for c in registry.REGISTRY:
        if c.scope == "cluster":
            assert set(c.uses) <= {"doctor", "alert"}, c.id


def test_alerting_checks_have_rules_and_a_metric() -> None:
    names = []
    for c in registry.REGISTRY:
        if "alert" in c.uses:
            assert c.alerts, f"{c.id}: use alert without a rule"
            names += [a.name for a in c.alerts]
            if c.scope == "node":
                assert "collector" in c.uses, f"{c.id}: a node check's rule needs its metric"
        else:
            assert not c.alerts, f"{c.id}: rules without use alert"
    assert len(names) == len(set(names))


def test_each_check_id_is_defined_once_in_the_code() -> None:
    """No other plugin or role file holds its own list of check ids."""
    code = [
        p
        for p in [*ROOT.glob("plugins/**/*.py"), *ROOT.glob("roles/*/files/*.py")]
        if p.name != "cluster_checks.py"
    ]
    for c in registry.REGISTRY:
        defined = [
            str(p.relative_to(ROOT))
            for p in code
            if re.search(rf'Check\(\s*"{re.escape(c.id)}"', p.read_text())
        ]
        assert defined == [], f"{c.id} defined again in {defined}"
    text = (ROOT / "plugins/module_utils/cluster_checks.py").read_text()
    for c in registry.REGISTRY:
        assert len(re.findall(rf'Check\(\s*"{re.escape(c.id)}"', text)) == 1, c.id


# ----------------------------------------------------------------- fault fixtures

REAL_XID = (
    "4,900,2002000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus.\n"
)
SMI = str(FIX / "health" / "fake-nvidia-smi")


def _gpu(mp: pytest.MonkeyPatch, machine: str, devices: int | None = None) -> dict:
    rows = (FIX / "health" / machine / "query-gpu.csv").read_text().strip().splitlines()
    mp.setenv("FAKE_GPU_DIR", str(FIX / "health" / machine))
    count = len(rows) if devices is None else devices
    mp.setattr(gpu_checks, "gpu_devices", lambda: [f"nvidia{i}" for i in range(count)])
    return {"gpus": len(rows), "nvidia_smi": SMI, "kernel_log": str(FIX / "health/kmsg-none.txt")}


def _fake_run(answers: dict) -> Callable:
    def fake(argv, timeout=10, stdin=None, **kw):
        rc, out, err = answers.get(argv[0], (0, "inactive\n", ""))
        return {"rc": rc, "out": out, "err": err}

    return fake


def _services(mp: pytest.MonkeyPatch, tmp: Path) -> dict:
    down = {"active": "inactive", "sub": "dead", "enabled": "enabled"}
    mp.setattr(node_checks, "units", lambda names: dict.fromkeys(names, down))
    return {"units": ["slurmdbd"]}


def _munge(mp: pytest.MonkeyPatch, tmp: Path) -> dict:
    mp.setattr(node_checks, "run", _fake_run({"munge": (1, "", "munge: Error: socket")}))
    return {}


def _clock(mp: pytest.MonkeyPatch, tmp: Path) -> dict:
    mp.setattr(node_checks, "run", _fake_run({"systemctl": (3, "inactive\ninactive\n", "")}))
    mp.setattr(node_checks, "in_container", lambda: False)
    return {}


def _config(mp: pytest.MonkeyPatch, tmp: Path) -> dict:
    mp.setattr(node_checks, "CONFIGLESS_DIR", str(tmp / "none"))
    return {"conf_dir": str(tmp), "slurm_conf_sha1": "0" * 40}


def _shared(mp: pytest.MonkeyPatch, tmp: Path) -> dict:
    (tmp / "shared").mkdir()
    return {"shared_path": str(tmp / "shared")}


def _disk(mp: pytest.MonkeyPatch, tmp: Path) -> dict:
    return {"disk_free_mib": {"/": 2**40}}


def _xid(mp: pytest.MonkeyPatch, tmp: Path) -> dict:
    (tmp / "kmsg").write_text(REAL_XID)
    return _gpu(mp, "h200") | {"kernel_log": str(tmp / "kmsg")}


NODE_FAULTS: dict[str, Callable[[pytest.MonkeyPatch, Path], dict]] = {
    "services": _services,
    "munge.local": _munge,
    "clock.sync": _clock,
    "config.fetched": _config,
    "shared.fs": _shared,
    "disk.free": _disk,
    "gpu.smi": lambda mp, tmp: _gpu(mp, "h200") | {"nvidia_smi": str(tmp / "no-smi")},
    "gpu.count": lambda mp, tmp: _gpu(mp, "h100", devices=7),
    "gpu.xid": _xid,
    "gpu.ecc": lambda mp, tmp: _gpu(mp, "h100-ecc"),
    "gpu.persistence": lambda mp, tmp: _gpu(mp, "rtx4090-persistence-off"),
    "gpu.throttle": lambda mp, tmp: _gpu(mp, "h200-throttle"),
}


def fault_cfg(check: str, mp: pytest.MonkeyPatch, tmp: Path) -> dict:
    base = {**node_checks.DEFAULTS, "node": "node1", "kinds": ["compute"], "timeout_s": 3.0}
    return base | NODE_FAULTS[check](mp, tmp)


def test_every_node_check_has_a_fault_fixture() -> None:
    assert set(NODE_FAULTS) == set(node_ids())


def probes_with(checks: dict[str, list[dict]]) -> dict:
    """The healthy doctor fixture with the node checks' results of some hosts replaced."""
    probes = copy.deepcopy(HEALTHY["probes"])
    for host, results in checks.items():
        seen = {r["id"]: r for r in results}
        probes[host]["local"]["checks"] = [
            seen.get(r["id"], r) for r in probes[host]["local"]["checks"]
        ] + [
            r for r in results if r["id"] not in {x["id"] for x in probes[host]["local"]["checks"]}
        ]
    return probes


def doctor_ctx() -> dict:
    return {
        "controller": "ctl",
        "computes": ["node1", "node2"],
        "hosts": ["ctl", "node1", "node2"],
        "expected": HEALTHY["expected"],
        "hardware": HEALTHY["hardware"],
        "gpus": {"node1": 1, "node2": 1},
        "torch_gpus": {"node1": 0, "node2": 0},
    }


@pytest.mark.parametrize("check", node_ids())
def test_a_node_check_fails_on_its_fixture_in_each_of_its_uses(
    check: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    spec = registry.BY_ID[check]
    cfg = fault_cfg(check, monkeypatch, tmp_path)
    for use in ("health", "doctor", "collector"):
        ran = {r.id: r for r in node_checks.run_checks(cfg, {}, only=[check], use=use)}
        if use not in spec.uses:
            assert check not in ran, f"{check} ran for {use}"
            continue
        assert ran[check].status == "FAIL", (use, ran[check])
        assert ran[check].fix
        if use == "doctor":
            rep = d.doctor_report(probes_with({"node1": [ran[check].as_dict()]}), doctor_ctx())
            assert ("node1", check) in [(c["host"], c["check"]) for c in rep["causes"]]
        if use == "collector":
            alone = cfg | {"skip": [i for i in node_ids() if i != check]}
            assert COLLECTOR.check_verdicts(alone, {})[check] == "FAIL"
    if "alert" in spec.uses:
        assert_rule_fires(check)


def assert_rule_fires(check: str) -> None:
    """The generated rule of a node check fires on the collector's FAIL of that check."""
    rules = registry.alert_rules({"node": 1, "daemon": 1})["groups"][0]["rules"]
    mine = [
        r for r in rules if r["labels"]["check"] == check and "cluster_check_status" in r["expr"]
    ]
    assert mine, f"no rule fires on {check}'s verdict"
    m = COLLECTOR.Metrics()
    fam = m.family("cluster_check_status", "gauge", "status")
    fam.add(1, check=check, status="FAIL")
    got = parse(m.render())
    assert sample(got, "cluster_check_status", check=check, status="FAIL") == 1
    assert mine[0]["expr"] == f'cluster_check_status{{check="{check}",status="FAIL"}} == 1'


CLUSTER_FAULTS: dict[str, Callable[[dict], tuple[str, str]]] = {}


def cluster_fault(check: str) -> Callable:
    def register(fn: Callable[[dict], str]) -> Callable:
        CLUSTER_FAULTS[check] = fn
        return fn

    return register


@cluster_fault("net.hostname")
def _hostname(p: dict) -> str:
    p["node2"]["local"]["self_addrs"] = ["127.0.1.1"]
    return "node2"


@cluster_fault("munge.key")
def _key(p: dict) -> str:
    p["node1"]["local"]["key"].update(mode="0644")
    return "node1"


@cluster_fault("auth.key")
def _auth_key(p: dict) -> str:
    # auth/slurm (the test sets cluster_auth_type slurm): node1 holds another key.
    slurm_keys(p)
    p["node1"]["local"]["auth_key"]["fingerprint"] = "b" * 16
    return "node1"


@cluster_fault("clock")
def _clock_offset(p: dict) -> str:
    p["node1"]["local"]["time"] += 400
    p["ctl"]["cross"]["decoded"]["node1"]["encode_time"] += 400
    return "node1"


@cluster_fault("munge.cross")
def _cross(p: dict) -> str:
    p["node1"]["local"]["key"]["fingerprint"] = "f" * 16
    return "node1"


@cluster_fault("users.ids")
def _ids(p: dict) -> str:
    p["node1"]["local"]["ids"]["munge"] = [999, 999]
    return "node1"


@cluster_fault("users")
def _users(p: dict) -> str:
    for h in p:
        p[h]["local"]["users"] = {"alice": {"ids": [2001, 2000], "write": {"ok": True}}}
    p["node2"]["local"]["users"]["alice"]["ids"] = [2102, 2000]
    return "node2"


@cluster_fault("config.versions")
def _versions(p: dict) -> str:
    p["node2"]["local"]["versions"]["slurm"] = "slurm 23.11.4"
    return "node2"


@cluster_fault("config.files")
def _files(p: dict) -> str:
    p["node1"]["local"]["files"]["cgroup.conf"] = "1" * 64
    return "node1"


@cluster_fault("slurm.daemon")
def _daemon(p: dict) -> str:
    p["ctl"]["local"]["ping"] = {"rc": 1, "out": "Slurmctld(primary) at ctl is DOWN"}
    return "ctl"


@cluster_fault("net.ports")
def _ports(p: dict) -> str:
    p["ctl"]["local"]["ports"]["slurmd@node2"].update(ok=False, error="timed out")
    return "node2"


@cluster_fault("hw.match")
def _hw(p: dict) -> str:
    p["node1"]["local"]["hardware"]["gres_missing"] = ["/dev/nvidia0"]
    return "node1"


@cluster_fault("slurm.node")
def _node(p: dict) -> str:
    nodes = p["ctl"]["local"]["nodes"]
    nodes["out"] = re.sub(r"(NodeName=node2 .*?State=)\S+", r"\1DOWN*", nodes["out"])
    return "node2"


@cluster_fault("shared.cross")
def _shared_cross(p: dict) -> str:
    p["ctl"]["cross"]["tokens"]["node2"] = {"ok": False, "error": "No such file or directory"}
    return "node2"


@cluster_fault("torch.venv")
def _torch(p: dict) -> str:
    p["node2"]["local"]["torch"] = {"ok": False, "quick": True, "error": "ModuleNotFoundError"}
    return "node2"


@pytest.mark.parametrize("check", [c.id for c in registry.REGISTRY if c.scope == "cluster"])
def test_a_cluster_check_fails_on_its_fixture(check: str) -> None:
    probes = copy.deepcopy(HEALTHY["probes"])
    host = CLUSTER_FAULTS[check](probes)
    ctx = doctor_ctx()
    if check == "users":
        ctx["users"] = [{"name": "alice", "uid": 2001, "gid": 2000}]
    if check == "auth.key":
        ctx["auth_type"] = "slurm"
    rep = d.doctor_report(probes, ctx)
    assert (host, check) in [(c["host"], c["check"]) for c in rep["causes"]], rep["causes"]


def test_every_cluster_check_has_a_fault_fixture() -> None:
    assert set(CLUSTER_FAULTS) == {c.id for c in registry.REGISTRY if c.scope == "cluster"}


def test_cluster_rules_read_metrics_the_collector_writes() -> None:
    """The rules of cluster checks (Slurm's view) use metric families the collector emits."""
    m = COLLECTOR.Metrics()
    COLLECTOR.node_metrics(
        m, (FIX / "monitoring" / "scontrol-show-node.txt").read_text(), "acceptance:", "health: "
    )
    m.set("slurm_daemon_up", "gauge", "up", 1, daemon="slurmctld")
    emitted = {name for name, _labels in parse(m.render())} | {"up"}
    rules = registry.alert_rules({"node": 1, "daemon": 1})["groups"][0]["rules"]
    for rule in rules:
        names = set(re.findall(r"([a-z_]+)\{", rule["expr"])) | set(
            re.findall(r"^([a-z_]+) ==", rule["expr"])
        )
        assert names <= emitted | {"absent", "cluster_check_status"}, rule


# ----------------------------------------------------------------- one place, four uses

NEW = registry.Check(
    "test.new",
    "node",
    "a file the test names",
    "remove the file",
    registry.ALL,
    alerts=(registry.Alert("TestNew", "warning", "test.new on {{ $labels.instance }}"),),
)


def test_a_check_added_in_one_place_shows_up_in_all_four(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(registry, "REGISTRY", (*registry.REGISTRY, NEW))
    monkeypatch.setattr(registry, "BY_ID", {**registry.BY_ID, "test.new": NEW})
    monkeypatch.setitem(node_checks.RUNNERS, "test.new", lambda ctx: ("FAIL", "the file is there"))
    cfg = {**node_checks.DEFAULTS, "node": "node1", "kinds": ["compute"]}
    # The node health program.
    health = {r.id: r for r in node_checks.run_checks(cfg, {}, use="health")}
    assert (health["test.new"].status, health["test.new"].fix) == ("FAIL", "remove the file")
    # The doctor: a column, and a cause on the node.
    rep = d.doctor_report(probes_with({"node1": [health["test.new"].as_dict()]}), doctor_ctx())
    assert "test.new" in rep["checks"]
    assert ("node1", "test.new") in [(c["host"], c["check"]) for c in rep["causes"]]
    # The collector.
    assert COLLECTOR.check_verdicts(cfg, {})["test.new"] == "FAIL"
    # The alert rules.
    rules = registry.alert_rules({"node": 1, "daemon": 1})["groups"][0]["rules"]
    assert [r["expr"] for r in rules if r["alert"] == "TestNew"] == [
        'cluster_check_status{check="test.new",status="FAIL"} == 1'
    ]


@pytest.mark.skipif(PROMTOOL is None, reason="promtool absent (Debian package prometheus)")
def test_promtool_fires_every_node_rule_on_its_check_fail(tmp_path: Path) -> None:
    rules = registry.alert_rules({"node": 1, "daemon": 1})
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules))
    node_rules = [
        r for r in rules["groups"][0]["rules"] if r["expr"].startswith("cluster_check_status")
    ]
    series = [
        {
            "series": 'cluster_check_status{instance="n1",job="node",'
            f'check="{r["labels"]["check"]}",status="FAIL"}}',
            "values": "1x5",
        }
        for r in node_rules
    ]
    tests = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {
                        "eval_time": "3m",
                        "alertname": r["alert"],
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "instance": "n1",
                                    "job": "node",
                                    "check": r["labels"]["check"],
                                    "status": "FAIL",
                                    "severity": r["labels"]["severity"],
                                },
                                "exp_annotations": {
                                    k: v.replace("{{ $labels.instance }}", "n1")
                                    for k, v in r["annotations"].items()
                                },
                            }
                        ],
                    }
                    for r in node_rules
                ],
            }
        ],
    }
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(tests))
    out = subprocess.run(
        [PROMTOOL, "test", "rules", "tests.yml"],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_doctors_check_table_in_its_readme_is_the_registrys() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "check_docs.py"), "--check"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
