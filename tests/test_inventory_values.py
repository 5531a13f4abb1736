"""Bad inventory values stop site.yml on the control machine, naming host, variable and fix.

Each case is the demo inventory with one value wrong. site.yml runs against hosts that
point at containers that do not exist: a check that let the run through would make
Ansible reach for them (UNREACHABLE), which the tests reject.
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

import pytest
import yaml
from adhoc import run_playbook

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins/filter"))
import inventory_check as ic  # noqa: E402

GOOD = {
    "cluster_name": "lab",
    "slurm_common_partitions": [
        {"name": "gpu", "default": True, "max_time": "1-00:00:00"},
        {"name": "debug", "nodes": ["node1"], "max_time": "30:00"},
    ],
    "slurm_controller_qos": [{"name": "gpu-hours", "grp_tres_mins": "gres/gpu=6000"}],
    "slurm_controller_accounts": [{"name": "lab", "qos": ["normal", "gpu-hours"]}],
    "cluster_users": [{"name": "alice", "uid": 2001, "accounts": ["lab"]}],
    "shared_fs_type": "existing",
    "shared_fs_path": "/shared",
}


def inventory(tmp_path: Path, cluster_vars: dict, node1: dict | None = None) -> Path:
    def host(name: str, **extra) -> dict:
        return {"ansible_host": f"no-such-container-{name}", **extra}

    data = {
        "all": {
            "children": {
                "slurm_cluster": {
                    "vars": {"ansible_connection": "community.docker.docker", **cluster_vars},
                    "children": {
                        "slurm_controller": {"hosts": {"ctl": host("ctl")}},
                        "slurm_dbd": {"hosts": {"ctl": {}}},
                        "slurm_compute": {
                            "hosts": {
                                "node1": host("node1", slurm_compute_gpus=1, **(node1 or {})),
                                "node2": host("node2", slurm_compute_gpus=1),
                            }
                        },
                    },
                }
            }
        }
    }
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def with_(**changes) -> dict:
    out = copy.deepcopy(GOOD)
    out.update(changes)
    return out


def partition(**changes) -> list[dict]:
    parts = copy.deepcopy(GOOD["slurm_common_partitions"])
    parts[0].update(changes)
    return parts


CASES = [
    (
        "max-time-hours",
        with_(slurm_common_partitions=partition(max_time="1-25:00:00")),
        None,
        ["slurm_common_partitions[0].max_time='1-25:00:00' is not a Slurm time", "2-00:00:00"],
    ),
    (
        "max-time-words",
        with_(slurm_common_partitions=partition(max_time="one day")),
        None,
        ["max_time='one day' is not a Slurm time"],
    ),
    (
        "max-time-seconds",
        with_(slurm_common_partitions=partition(max_time="10:00:75")),
        None,
        ["max_time='10:00:75' is not a Slurm time"],
    ),
    (
        "partition-unknown-node",
        with_(slurm_common_partitions=partition(nodes=["node9"])),
        None,
        ["names node9, not in group slurm_compute", "add the host to slurm_compute"],
    ),
    (
        "partition-empty-nodes",
        with_(slurm_common_partitions=partition(nodes=[])),
        None,
        ["nodes=[] must be a non-empty list"],
    ),
    (
        "partition-duplicate-name",
        with_(slurm_common_partitions=partition(name="debug")),
        None,
        ["has the partition name debug twice"],
    ),
    (
        "two-default-partitions",
        with_(
            slurm_common_partitions=[{"name": "a", "default": True}, {"name": "b", "default": True}]
        ),
        None,
        ["has 2 default partitions", "default: true on one only"],
    ),
    (
        "partition-name-space",
        with_(slurm_common_partitions=partition(name="big gpu")),
        None,
        ["name='big gpu' is not a partition name"],
    ),
    (
        "partition-unknown-key",
        with_(slurm_common_partitions=partition(maxtime="1:00:00")),
        None,
        ["has unknown keys maxtime"],
    ),
    (
        "partition-default-not-bool",
        with_(slurm_common_partitions=partition(default="yes")),
        None,
        ["default='yes' is not true or false"],
    ),
    (
        "partitions-not-a-list",
        with_(slurm_common_partitions="gpu"),
        None,
        ["slurm_common_partitions='gpu' must be a non-empty list"],
    ),
    (
        "cluster-name-space",
        with_(cluster_name="My Lab"),
        None,
        [
            "cluster_name='My Lab' is not a name Slurm's accounting takes",
            "cluster_name: my_lab",
        ],
    ),
    (
        "cluster-name-dot",
        with_(cluster_name="lab.example"),
        None,
        ["cluster_name='lab.example'"],
    ),
    ("cluster-name-too-long", with_(cluster_name="a" * 41), None, ["at most 40"]),
    (
        "qos-tres",
        with_(slurm_controller_qos=[{"name": "gpu-hours", "grp_tres_mins": "gpu=6000"}]),
        None,
        ["grp_tres_mins='gpu=6000' is not a TRES string", "gres/gpu=6000"],
    ),
    (
        "qos-max-wall",
        with_(slurm_controller_qos=[{"name": "short", "max_wall": "2 hours"}]),
        None,
        ["max_wall='2 hours' is not a Slurm time"],
    ),
    (
        "qos-name-upper",
        with_(slurm_controller_qos=[{"name": "GPU Hours"}]),
        None,
        ["slurm_controller_qos[0]", "needs a lower-case name"],
    ),
    (
        "account-unknown-qos",
        with_(slurm_controller_accounts=[{"name": "lab", "qos": ["gold"]}]),
        None,
        ["names QoS gold, not in slurm_controller_qos"],
    ),
    (
        "account-names-users",
        with_(slurm_controller_accounts=[{"name": "lab", "qos": ["normal"], "users": ["bob"]}]),
        None,
        ["slurm_controller_accounts[0].users=['bob'] names users here", "in cluster_users"],
    ),
    (
        "user-uid-twice",
        with_(
            cluster_users=[
                {"name": "alice", "uid": 2001, "accounts": ["lab"]},
                {"name": "bob", "uid": 2001, "accounts": ["lab"]},
            ]
        ),
        None,
        ["cluster_users[1].uid=2001 of bob is also the uid of alice"],
    ),
    (
        "user-unknown-account",
        with_(cluster_users=[{"name": "alice", "uid": 2001, "accounts": ["physics"]}]),
        None,
        ["names physics, not in slurm_controller_accounts"],
    ),
    (
        "shared-path-shell",
        with_(shared_fs_path="/shared;touch${IFS}/tmp/pwned"),
        None,
        ["has characters other than letters, digits"],
    ),
    (
        "extra-config-managed-key",
        with_(slurm_common_extra_config={"ClusterName": "x"}),
        None,
        ["slurm_common_extra_config.ClusterName='x' is written by the role itself"],
    ),
    (
        "extra-config-bad-key",
        with_(slurm_common_extra_config={"max_job_count": 5}),
        None,
        ["slurm_common_extra_config.max_job_count=5 is not a slurm.conf parameter name"],
    ),
    (
        "extra-config-multiline",
        with_(slurm_common_extra_config={"MaxJobCount": "5\nNodeName=x"}),
        None,
        ["is not a single slurm.conf value"],
    ),
    (
        "shared-path-relative",
        with_(shared_fs_path="shared"),
        None,
        ["shared_fs_path='shared' is not an absolute path"],
    ),
    (
        "shared-path-root",
        with_(shared_fs_path="/"),
        None,
        ["shared_fs_path='/' is /, a system directory"],
    ),
    (
        "shared-path-etc",
        with_(shared_fs_path="/etc/"),
        None,
        ["shared_fs_path='/etc/' is /etc, a system directory"],
    ),
    (
        "munge-key-relative",
        with_(munge_key_path="munge.key"),
        None,
        ["munge_key_path='munge.key' is not an absolute path"],
    ),
    (
        "venv-in-usr",
        with_(cluster_venv="/usr"),
        None,
        ["cluster_venv='/usr' is /usr, a system directory"],
    ),
    (
        "dbd-port-range",
        with_(cluster_slurmdbd_port=70000),
        None,
        ["cluster_slurmdbd_port=70000 is not a TCP port (1-65535)"],
    ),
    (
        "dbd-port-slurmd",
        with_(cluster_slurmdbd_port=6818),
        None,
        ["cluster_slurmdbd_port=6818 is also cluster_slurmd_port"],
    ),
    (
        "slurmctld-port-range",
        with_(cluster_slurmctld_port=0),
        None,
        ["cluster_slurmctld_port=0 is not a TCP port (1-65535)"],
    ),
    (
        "slurmd-port-moved-onto-slurmctld",
        with_(cluster_slurmd_port=6817),
        None,
        ["cluster_slurmd_port=6817 is also cluster_slurmctld_port", "cluster_slurmd_port: 6818"],
    ),
    (
        "dbd-name",
        with_(slurm_dbd_db_name="slurm-acct"),
        None,
        ["slurm_dbd_db_name='slurm-acct' is not a MariaDB database name"],
    ),
    (
        "margin-range",
        with_(slurm_common_realmemory_margin_percent=80),
        None,
        ["slurm_common_realmemory_margin_percent=80 is not a whole number in 0-50"],
    ),
    (
        "return-to-service",
        with_(slurm_common_return_to_service=3),
        None,
        ["slurm_common_return_to_service=3 is not a whole number in 0-2"],
    ),
    (
        "acceptance-not-a-bool",
        with_(cluster_acceptance="sometimes"),
        None,
        ["cluster_acceptance='sometimes' is not true or false"],
    ),
    (
        "acceptance-mode-unknown",
        with_(cluster_acceptance_modes=["srun", "mpirun"]),
        None,
        ["cluster_acceptance_modes=['srun', 'mpirun'] names mpirun, not a launch mode", "[srun]"],
    ),
    (
        "smoke-time-limit",
        with_(smoke_train_time_limit=0),
        None,
        ["smoke_train_time_limit=0 is not a whole number in >= 1"],
    ),
    (
        "override-unknown-field",
        GOOD,
        {"slurm_compute_node_overrides": {"Memory": 1000}},
        ["node1: slurm_compute_node_overrides.Memory=1000 is not a NodeName field"],
    ),
    (
        "override-not-a-number",
        GOOD,
        {"slurm_compute_node_overrides": {"RealMemory": "lots"}},
        ["node1: slurm_compute_node_overrides.RealMemory='lots' is not a whole number"],
    ),
]


@pytest.mark.parametrize(
    ("cluster_vars", "node1", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_value_stops_site_yml_before_any_node(tmp_path, cluster_vars, node1, expected) -> None:
    result = run_playbook(inventory(tmp_path, cluster_vars, node1), "site.yml")
    out = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0, out
    for text in expected:
        assert text in out, f"missing {text!r} in:\n{out}"
    assert "Fix:" in out
    assert "UNREACHABLE" not in out, "a node was contacted before validation failed"
    assert "Gathering Facts" not in out


def test_the_good_inventory_passes_the_value_checks(tmp_path) -> None:
    result = run_playbook(inventory(tmp_path, GOOD), "playbooks/preflight.yml")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("1-00:00:00", True),
        ("30:00", True),
        ("90:00", True),
        ("INFINITE", True),
        ("UNLIMITED", True),
        ("60", True),
        (0, True),
        ("2-12", True),
        ("1-00:00", True),
        ("1-24:00:00", False),
        ("1:60:00", False),
        ("10:00:60", False),
        ("-5", False),
        ("1h", False),
        (True, False),
    ],
)
def test_slurm_time_grammar(value, ok) -> None:
    assert ic.slurm_time_ok(value) is ok


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("gres/gpu=6000", True),
        ("gres/gpu:h100=8,cpu=64", True),
        ("mem=100G", True),
        ("license/matlab=2", True),
        ("gpu=1", False),
        ("gres/gpu=", False),
        ("", False),
        ("cpu=1,", False),
    ],
)
def test_tres_grammar(value, ok) -> None:
    assert ic.tres_ok(value) is ok


def test_a_group_value_wrong_on_every_host_is_reported_once() -> None:
    hv = {h: {"cluster_name": "Bad Name"} for h in ("ctl", "node1")}
    problems = ic.inventory_problems(hv, {"all": ["ctl", "node1"], "slurm_compute": ["node1"]})
    assert problems == [
        "all hosts: cluster_name='Bad Name' is not a name Slurm's accounting takes "
        "(lower-case letters, digits and _, a letter first, at most 40). "
        "Fix: e.g. cluster_name: bad_name"
    ]


@pytest.mark.parametrize(
    ("var", "value", "words"),
    [
        ("cluster_health_interval", 2, "is not a whole number in 5-3600"),
        ("cluster_health_node_state", "IDLE,BUSY", "is not a HealthCheckNodeState"),
        ("cluster_health_node_state", "CYCLE", "is not a HealthCheckNodeState"),
        (
            "cluster_health_disk_free_mib",
            {"tmp": 10},
            "cluster_health_disk_free_mib[tmp]=10 names no",
        ),
        ("cluster_health_disk_free_mib", {"/": -1}, "is not a whole number of MiB >= 0"),
        # A key or a number with a newline would reach the settings file as written.
        ("cluster_health_disk_free_mib", {"/scratch\n": 10}, "names no absolute path of safe"),
        ("cluster_health_disk_free_mib", {"/": "5\n"}, "is not a whole number of MiB >= 0"),
        ("cluster_health_interval", "60\n", "is not a whole number in 5-3600"),
        ("cluster_health_clock_max_offset_s", "soon", "is not a number in 0.001-240"),
        ("cluster_health_timeout_s", 60, "is not a number in 0.5-15"),
        ("cluster_health_skip", ["gpu.ecc", "gpu.temp"], "names gpu.temp, not a health check"),
        ("monitoring_prometheus_listen_address", "9090", "or host:port (port 1-65535)"),
        ("monitoring_prometheus_listen_address", "0.0.0.0:70000", "or host:port (port 1-65535)"),
        ("monitoring_prometheus_retention", "15 days", "is not a Prometheus duration"),
        ("slurm_upgrade_batch", "half", "is no batch size"),
        ("slurm_common_batch_sched_delay", -1, "is not a whole number in 0-3600"),
        (
            "slurm_common_extra_config",
            {"SchedulerParameters": "bf_interval=60,batch_sched_delay=5"},
            "set slurm_common_batch_sched_delay instead",
        ),
        ("slurm_upgrade_batch", 0, "e.g. slurm_upgrade_batch: 25%"),
    ],
)
def test_bad_health_settings_are_named(var, value, words) -> None:
    hv = {h: {var: value} for h in ("ctl", "node1")}
    problems = ic.inventory_problems(hv, {"all": ["ctl", "node1"], "slurm_compute": ["node1"]})
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"all hosts: {var}")
    assert words in problems[0]


@pytest.mark.parametrize("name", ["default", "DEFAULT", "Default"])
def test_slurms_reserved_partition_name_is_refused(name: str) -> None:
    parts = [{"name": name, "default": True}, {"name": "gpu"}]
    hv = {h: {"slurm_common_partitions": parts} for h in ("ctl", "node1")}
    problems = ic.inventory_problems(hv, {"all": ["ctl", "node1"], "slurm_compute": ["node1"]})
    assert problems == [
        f"all hosts: slurm_common_partitions[0].name={name!r} is Slurm's reserved name: "
        "PartitionName=DEFAULT, in any case, is the line of every partition's defaults, so "
        "this partition would not exist. Fix: choose another name (e.g. main)"
    ]


def test_good_health_settings_pass() -> None:
    good = {
        "cluster_health_interval": 60,
        "cluster_health_node_state": "IDLE,CYCLE",
        "cluster_health_disk_free_mib": {"/": 1024, "/tmp": 512, "spool": 256},
        "cluster_health_clock_max_offset_s": 1.0,
        "cluster_health_timeout_s": 4,
        "cluster_health_skip": ["clock.sync"],
        "monitoring_prometheus_listen_address": "[::1]:9090",
        "monitoring_prometheus_retention": "30d12h",
        "slurm_upgrade_batch": "50%",
        "slurm_common_batch_sched_delay": 3,
        "slurm_common_extra_config": {"SchedulerParameters": "bf_interval=60"},
    }
    hv = {h: dict(good) for h in ("ctl", "node1")}
    assert ic.inventory_problems(hv, {"all": ["ctl", "node1"], "slurm_compute": ["node1"]}) == []


# --- one check for every value (issue 38) -----------------------------------------


def test_every_role_variable_has_a_rule() -> None:
    """Each variable of every role's argument spec is checked: its own rule or its type's."""
    rules = ic.all_checks()
    assert set(ic.role_variables()) <= set(rules)
    assert len(ic.role_variables()) > 100  # the specs were read


@pytest.mark.parametrize(
    ("var", "value", "words"),
    [
        ("smoke_train_partition", "gpu\nextra", "holds a line break or a control character"),
        ("pytorch_expected_gpus", "8\n", "holds a line break or a control character"),
        ("pytorch_expected_gpus", "8 GPUs", "is not a whole number"),
        ("cluster_doctor_clock_warn_s", "5 s", "is not a number"),
        ("cuda_repo_base_url", "https://x\r\n", "holds a line break or a control character"),
        ("monitoring_prometheus_listen_address", ":65999", "or host:port (port 1-65535)"),
        ("monitoring_alertmanager_listen_address", "ctl:9093\n", "or host:port"),
        ("monitoring_alertmanager", "am:70000", "is not empty or host:port"),
        ("monitoring_listen_host", "10.0.0.1 ", "is not empty, a host name or an address"),
        ("monitoring_auth_user", "me tr", "is not a user name"),
        ("monitoring_auth_dir", "etc/prometheus", "monitoring_auth_dir"),
        ("monitoring_alert_webhook_url", "ftp://chat/hook", "an http:// or https:// URL"),
        ("monitoring_alert_webhook_url", "https://chat/a b", "an http:// or https:// URL"),
        ("monitoring_alert_webhook_url", "https://chat/hook\n", "an http:// or https:// URL"),
        ("monitoring_alert_email_to", ["admin@lab", "not an address"], "a list of e-mail"),
        ("monitoring_alert_email_to", "admin@lab.example", "a list of e-mail"),
        ("monitoring_alert_email_from", "slurm@lab\n", "an e-mail address"),
        ("monitoring_alert_smarthost", "smtp.lab", "the SMTP relay's host:port"),
        ("monitoring_alert_smarthost", "smtp.lab:99999", "the SMTP relay's host:port"),
        ("monitoring_alert_repeat_interval", "4 hours", "a Prometheus duration"),
        ("monitoring_alert_group_wait", "30", "a Prometheus duration"),
        ("monitoring_textfile_dir", "/var/lib/node\nexporter", "has '..' or spaces"),
        ("monitoring_collector_interval_s", "15\n", "is not a whole number"),
        ("monitoring_alert_node_minutes", "0.01", "comes to whole seconds"),
        ("monitoring_alert_node_minutes", 0, "a number of minutes above 0"),
        ("monitoring_alert_daemon_minutes", "2m", "a number of minutes above 0"),
        ("monitoring_alert_daemon_minutes", True, "a number of minutes above 0"),
        ("monitoring_alert_daemon_minutes", float("inf"), "a number of minutes above 0"),
        ("monitoring_alert_daemon_minutes", "-1", "a number of minutes above 0"),
    ],
)
def test_a_value_is_checked_whole_by_its_type(var: str, value: object, words: str) -> None:
    assert var in ic.role_variables()
    hv = {h: {var: value} for h in ("ctl", "node1")}
    problems = ic.inventory_problems(hv, {"all": ["ctl", "node1"], "slurm_compute": ["node1"]})
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"all hosts: {var}=")
    assert words in problems[0]


def test_alert_mail_needs_its_relay_and_sender() -> None:
    hv = {h: {"monitoring_alert_email_to": ["admin@lab.example"]} for h in ("ctl", "node1")}
    problems = ic.inventory_problems(hv, {"all": ["ctl", "node1"], "slurm_compute": ["node1"]})
    assert len(problems) == 2, problems
    assert "needs monitoring_alert_smarthost" in problems[0] + problems[1]
    assert "needs monitoring_alert_email_from" in problems[0] + problems[1]
    for h in hv.values():
        h.update(monitoring_alert_smarthost="smtp.lab.example:587",
                 monitoring_alert_email_from="slurm@lab.example")  # fmt: skip
    assert ic.inventory_problems(hv, {"all": ["ctl", "node1"], "slurm_compute": ["node1"]}) == []


def test_good_monitoring_values_pass() -> None:
    good = {
        "monitoring_prometheus_listen_address": "",
        "monitoring_alertmanager_listen_address": "0.0.0.0:9093",
        "monitoring_listen_host": "fd00::1",
        "monitoring_alert_webhook_url": "https://chat.example.org:8443/hooks/a-b_c?token=x&y=1",
        "monitoring_alert_email_to": ["admin@lab.example", "o'neil+gpu@lab.example"],
        "monitoring_alert_email_from": "slurm@lab.example",
        "monitoring_alert_smarthost": "smtp.lab.example:587",
        "monitoring_alert_repeat_interval": "1d12h",
        "monitoring_alert_node_minutes": 0.25,
        "monitoring_alert_daemon_minutes": "2",
    }
    hv = {h: dict(good) for h in ("ctl", "node1")}
    assert ic.inventory_problems(hv, {"all": ["ctl", "node1"], "slurm_compute": ["node1"]}) == []
    hv["ctl"]["monitoring_listen_host"] = "ctl.lab"
    hv["ctl"]["monitoring_alert_webhook_url"] = "http://node1:9999/hook"
    assert ic.inventory_problems(hv, {"all": ["ctl", "node1"], "slurm_compute": ["node1"]}) == []


def test_no_role_brings_its_own_looser_assert() -> None:
    """Role tasks assert no inventory value with match/search/regex (a prefix match let a
    trailing newline through): the one inventory check holds the value rules."""
    loose = []
    for path in sorted((ROOT / "roles").glob("*/tasks/*.yml")):
        for task in yaml.safe_load(path.read_text()) or []:
            assertion = task.get("ansible.builtin.assert") if isinstance(task, dict) else None
            if not assertion:
                continue
            that = assertion.get("that")
            for cond in that if isinstance(that, list) else [that]:
                if re.search(r"\bis (not )?(match|search|regex)\(", str(cond)):
                    loose.append(f"{path.relative_to(ROOT)}: {cond}")
    assert loose == []


LOGIN_GROUPS = {
    "all": ["ctl", "node1", "login"],
    "slurm_cluster": ["ctl", "node1", "login"],
    "slurm_controller": ["ctl"],
    "slurm_compute": ["node1"],
    "slurm_login": ["login"],
}


def test_a_login_host_of_its_own_passes() -> None:
    hv = {h: {} for h in LOGIN_GROUPS["all"]}
    assert ic.inventory_problems(hv, LOGIN_GROUPS) == []


@pytest.mark.parametrize(
    ("group", "words"),
    [
        ("slurm_controller", "the key every daemon trusts"),
        ("slurm_dbd", "the accounting database"),
        ("slurm_compute", "outside Slurm's limits"),
    ],
)
def test_a_login_host_that_is_also_a_slurm_server_is_refused(group: str, words: str) -> None:
    groups = {k: list(v) for k, v in LOGIN_GROUPS.items()}
    for name in ("all", "slurm_cluster", "slurm_login"):
        groups[name].append("x")
    groups[group] = [*groups.get(group, []), "x"]
    hv = {h: {} for h in groups["all"]}
    (problem,) = ic.inventory_problems(hv, groups)
    assert problem.startswith("x: slurm_login=")
    assert f"in {group}" in problem and words in problem and "Fix: give the login host" in problem


def test_a_login_host_outside_the_cluster_group_is_refused() -> None:
    groups = dict(LOGIN_GROUPS, slurm_cluster=["ctl", "node1"])
    hv = {h: {} for h in groups["all"]}
    (problem,) = ic.inventory_problems(hv, groups)
    assert problem.startswith("login: slurm_login=") and "child of slurm_cluster" in problem


@pytest.mark.parametrize(
    ("value", "ok"), [("munge", True), ("slurm", True), ("jwt", False), ("", False)]
)
def test_the_auth_type_is_munge_or_slurm(value: str, ok: bool) -> None:
    hv = {h: {"cluster_auth_type": value} for h in LOGIN_GROUPS["all"]}
    problems = ic.inventory_problems(hv, LOGIN_GROUPS)
    assert (problems == []) is ok, problems
    if not ok:
        assert "cluster_auth_type" in problems[0] and "munge or slurm" in problems[0]
