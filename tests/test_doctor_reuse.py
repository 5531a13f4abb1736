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


def reuse(early: dict, changes_now: int | None, hostvars: dict, reuse_s: float = 120) -> bool:
    """probe.yml's decision, rendered by Ansible (the lookup's count given as a variable)."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    tasks = yaml.safe_load((ROOT / "roles/cluster_doctor/tasks/probe.yml").read_text())
    task = next(
        t
        for t in tasks
        if t["name"] == "Take site.yml's first readings where nothing changed since"
    )
    template = task["ansible.builtin.set_fact"]["__cluster_doctor_reuse"]
    assert LOOKUP in template
    variables = {
        "__cluster_doctor_early": early,
        "__changes_now": changes_now,
        "__cluster_doctor_probed": list(hostvars),
        "hostvars": hostvars,
        "cluster_doctor_reuse_s": reuse_s,
    }
    templar = Templar(loader=DataLoader(), variables=variables)
    return bool(templar.template(trust_as_template(template.replace(LOOKUP, "__changes_now"))))


def nodes(**over: dict) -> dict:
    read = {"cluster_node_probe": {"doctor": {"time": 1.0}}, "__cluster_doctor_same": True}
    return {h: read | over.get(h, {}) for h in ("ctl", "node1", "node2")}


def early(changes: int | None = 3, age_s: float = 20) -> dict:
    return {"changes": changes, "at": time.time() - age_s, "spread": 4.2}


def test_the_first_readings_stand_where_nothing_changed_since() -> None:
    assert reuse(early(), 3, nodes()) is True


@pytest.mark.parametrize(
    ("why", "first", "changes_now", "hostvars", "reuse_s"),
    [
        ("a task changed something since", early(), 4, nodes(), 120),
        ("nobody counted (the callback is not enabled)", early(None), None, nodes(), 120),
        ("the readings are too old", early(age_s=130), 3, nodes(), 120),
        ("reuse turned off", early(), 3, nodes(), 0),
        ("no first readings (doctor.yml, or judged once already)", {}, 3, nodes(), 120),
        ("a node was not read first", early(), 3, nodes(node2={"cluster_node_probe": {}}), 120),
        (
            "a node would be asked otherwise now",
            early(),
            3,
            nodes(node1={"__cluster_doctor_same": False}),
            120,
        ),
    ],
)
def test_every_node_is_read_again(why, first, changes_now, hostvars, reuse_s) -> None:
    assert reuse(first, changes_now, hostvars, reuse_s) is False, why


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
