"""site.yml's doctor judges its first probe's readings only where nothing changed since.

The callback run_changes counts the results that changed something; the lookup
of the same name reads the count; roles/cluster_doctor/tasks/probe.yml decides,
with Ansible's own templating, whether the readings that playbooks/packages.yml
took (module node_state's option doctor) still stand.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from ansible_collections.gpulab.slurm_cluster.plugins.callback.run_changes import (
    CallbackModule,
)
from ansible_collections.gpulab.slurm_cluster.plugins.lookup.run_changes import LookupModule
from ansible_collections.gpulab.slurm_cluster.plugins.plugin_utils import run_changes

ROOT = Path(__file__).resolve().parents[1]
LOOKUP = "lookup('gpulab.slurm_cluster.run_changes')"


def result(changed: bool) -> SimpleNamespace:
    return SimpleNamespace(_result={"changed": changed})


def test_nobody_counts_until_the_callback_sees_the_playbook_start() -> None:
    run_changes.COUNT["changed"] = None
    run_changes.add(True)
    assert LookupModule().run([]) == [None]


def test_the_callback_counts_changed_results_handlers_and_failures_included() -> None:
    cb = CallbackModule()
    cb.v2_playbook_on_start(None)
    assert LookupModule().run([]) == [0]
    cb.v2_runner_on_ok(result(False))
    cb.v2_runner_on_ok(result(True))
    cb.v2_runner_on_failed(result(True), ignore_errors=True)
    cb.v2_runner_on_failed(result(False))
    assert LookupModule().run([]) == [2]
    cb.v2_playbook_on_start(None)  # a second playbook in the same process starts again
    assert LookupModule().run([]) == [0]


def rendered(template: str, variables: dict, filters: dict | None = None):
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    # Ansible's own lookups by their short names: this process has no collection
    # loader, so the collection's filters a template uses are given by full name.
    template = template.replace("ansible.builtin.", "")
    templar = Templar(loader=DataLoader(), variables=variables)
    for name, function in (filters or {}).items():
        templar._engine.environment.filters[name] = function
    return templar.template(trust_as_template(template))


def reuse(early: dict, changes_now: int | None, hostvars: dict, **over) -> bool:
    """probe.yml's decision, rendered by Ansible (the lookup's count given as a variable)."""
    tasks = yaml.safe_load((ROOT / "roles/cluster_doctor/tasks/probe.yml").read_text())
    task = next(t for t in tasks if t["name"] == TAKE)
    template = task["ansible.builtin.set_fact"]["__cluster_doctor_reuse"]
    assert LOOKUP in template
    variables = {
        "__cluster_doctor_early": early,
        "__changes_now": changes_now,
        "__cluster_doctor_probed": list(hostvars),
        "hostvars": hostvars,
        "cluster_doctor_reuse_s": 120,
        "__cluster_doctor_reuse_max_s": doctor_vars()["__cluster_doctor_reuse_max_s"],
        "__cluster_doctor_settings": "s1",
        "__cluster_doctor_torch_answered": True,
    } | over
    return bool(rendered(template.replace(LOOKUP, "__changes_now"), variables))


TAKE = "Take site.yml's first readings where nothing changed since"


def nodes(**over: dict) -> dict:
    read = {"cluster_node_probe": {"doctor": {"time": 1.0}}}
    return {h: read | over.get(h, {}) for h in ("ctl", "node1", "node2")}


def early(changes: int | None = 3, age_s: float = 20) -> dict:
    return {"changes": changes, "at": time.time() - age_s, "spread": 4.2, "settings": "s1"}


def test_the_first_readings_stand_where_nothing_changed_since() -> None:
    assert reuse(early(), 3, nodes()) is True


@pytest.mark.parametrize(
    ("why", "first", "changes_now", "hostvars", "over"),
    [
        ("a task changed something since", early(), 4, nodes(), {}),
        ("nobody counted (the callback is not enabled)", early(None), None, nodes(), {}),
        ("the readings are too old", early(age_s=130), 3, nodes(), {}),
        ("reuse turned off", early(), 3, nodes(), {"cluster_doctor_reuse_s": 0}),
        (
            "older than munge's credentials allow, whatever reuse_s says",
            early(age_s=250),
            3,
            nodes(),
            {"cluster_doctor_reuse_s": 3600},
        ),
        ("no first readings (doctor.yml, or judged once already)", {}, 3, nodes(), {}),
        ("a node was not read first", early(), 3, nodes(node2={"cluster_node_probe": {}}), {}),
        (
            "the doctor's settings differ now",
            early(),
            3,
            nodes(),
            {"__cluster_doctor_settings": "s2"},
        ),
        (
            "torch not answered on a node",
            early(),
            3,
            nodes(),
            {"__cluster_doctor_torch_answered": False},
        ),
    ],
)
def test_every_node_is_read_again(why, first, changes_now, hostvars, over) -> None:
    assert reuse(first, changes_now, hostvars, **over) is False, why


def doctor_vars() -> dict:
    return yaml.safe_load((ROOT / "roles/cluster_doctor/vars/main.yml").read_text())


def test_the_settings_are_the_doctors_variables_without_its_outputs_and_first_readings() -> None:
    template = doctor_vars()["__cluster_doctor_settings"]
    base = {
        "cluster_doctor_read_health": True,
        "cluster_doctor_torch": False,
        "cluster_doctor_early": True,
        "cluster_doctor_early_args": {"decode": {"ctl": "credential"}},
        "cluster_doctor_verdict": "PASS",
        "cluster_doctor_health_files": {},
        "cluster_users": [],
    }
    same = rendered(template, base)
    for name, value in [
        ("cluster_doctor_early", False),
        ("cluster_doctor_early_args", {}),
        ("cluster_doctor_verdict", "FAIL"),
        ("cluster_doctor_health_files", {"node1": {}}),
        ("cluster_users", [{"name": "alice"}]),  # the inventory's: the same all run long
    ]:
        assert rendered(template, base | {name: value}) == same, name
    for name, value in [
        ("cluster_doctor_read_health", False),
        ("cluster_doctor_torch_fresh", True),
    ]:
        assert rendered(template, base | {name: value}) != same, name


def test_torch_is_answered_where_every_compute_node_has_the_pytorch_roles_answer() -> None:
    template = doctor_vars()["__cluster_doctor_torch_answered"]
    hostvars = {
        "ctl": {},
        "node1": {"pytorch_torch_checked": {}},
        "node2": {"pytorch_enabled": False},
    }
    given = {
        "__cluster_doctor_probed": list(hostvars),
        "__cluster_doctor_computes": ["node1", "node2"],
        "hostvars": hostvars,
        "cluster_doctor_torch_checked": True,
    }
    assert rendered(template, given) is True
    hostvars["node2"] = {}  # torch is this node's too, and its role left no answer
    assert rendered(template, given) is False
    assert rendered(template, given | {"cluster_doctor_torch_checked": False}) is True


def test_the_first_readings_are_judged_once() -> None:
    tasks = yaml.safe_load((ROOT / "roles/cluster_doctor/tasks/probe.yml").read_text())
    task = next(
        t
        for t in tasks
        if t["name"] == "Take site.yml's first readings where nothing changed since"
    )
    # A second doctor in the same run (its credentials decode once) reads again.
    assert task["ansible.builtin.set_fact"]["__cluster_doctor_early"] == {}
    assert task["run_once"] is True


# --- module node_state's option doctor, run by Ansible on this machine ------------


def test_node_state_takes_the_doctors_reading_beside_its_state(tmp_path: Path) -> None:
    from adhoc import run_module

    args = '{"packages": false, "doctor": {"name": "here", "resolve": ["localhost"]}}'
    out = run_module("node_state", args, tmp_path)
    assert not out.get("failed"), out
    reading = out["doctor"]
    # The doctor's reading, as cluster_probe's phase local returns it.
    assert {"host", "time", "services", "credential", "resolved", "files"} <= set(reading)
    assert reading["resolved"]["localhost"]
    # Not in the state the roles copy (cluster_node_state): it holds a credential.
    assert "doctor" not in out["state"] and "credential" not in str(out["state"])
    plain = run_module("node_state", '{"packages": false}', tmp_path)
    assert "doctor" not in plain, plain


def test_node_state_names_an_unknown_or_wrong_option_of_the_doctors(tmp_path: Path) -> None:
    from adhoc import run_module

    out = run_module("node_state", '{"doctor": {"nmae": "here"}}', tmp_path)
    assert "state" not in out, out
    assert out["msg"].startswith("option doctor (cluster_probe's options): unknown option nmae"), (
        out
    )
    out = run_module("node_state", '{"doctor": {"connect_timeout": "soon"}}', tmp_path)
    assert "state" not in out and "connect_timeout" in out["msg"], out


def test_the_first_readings_never_render_what_they_do_not_ask() -> None:
    """site.yml's first readings leave torch to the pytorch role's check: its two
    options are not rendered at all (they read the node's variables through
    hostvars, a tenth of a second a node), and the hardware is not asked."""
    docvars = doctor_vars()
    base = {
        "__cluster_doctor_seed_probe": {"credential": "MUNGE:abc"},
        "__cluster_doctor_read_args": {"name": "node1", "controller": False},
        # Rendering either would fail: proof that they are left alone.
        "__cluster_doctor_torch_args": {
            "venv_python": "{{ no_such_variable.python }}",
            "torch_script": "{{ no_such_variable.script }}",
        },
        "cluster_doctor_torch_checked": True,
    }
    early = rendered(docvars["cluster_doctor_early_args"], base)
    assert early == {
        "name": "node1",
        "controller": False,
        "slurm_node": False,
        "venv_python": "",
        "torch_script": "",
    }, early
    # Where torch is not checked by the pytorch role in the run, it is asked.
    asked = dict(base, cluster_doctor_torch_checked=False)
    asked["__cluster_doctor_torch_args"] = {"venv_python": "/venv/bin/python", "torch_script": "x"}
    early = rendered(docvars["cluster_doctor_early_args"], asked)
    assert early["venv_python"] == "/venv/bin/python" and early["slurm_node"] is False, early
    # The doctor's own readings are the same options with torch and the hardware.
    local = rendered(
        docvars["__cluster_doctor_local_args"],
        dict(
            asked,
            __cluster_doctor_node="node1",
            __cluster_doctor_computes=["node1"],
            inventory_hostname="node1",
        ),
    )
    assert local == dict(early, slurm_node=True), local


def test_no_first_reading_where_the_controller_made_no_credential() -> None:
    """A cold run: munge is not on the controller yet, so the first probe asks nothing of
    the doctor's (the run changes something, and the doctor reads every node)."""
    template = doctor_vars()["cluster_doctor_early_args"]
    for seed in ({}, {"credential": "", "credential_error": "munge: not found"}):
        assert rendered(template, {"__cluster_doctor_seed_probe": seed}) == {}, seed
