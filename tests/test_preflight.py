"""Bad inventories fail before any node is contacted, naming the variable and the fix.

Each case runs the real site.yml against an inventory whose hosts point at
containers that do not exist: a check that let the run through would make
Ansible try to reach them (UNREACHABLE), which the tests reject.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from adhoc import run_playbook

ROOT = Path(__file__).resolve().parents[1]


def inventory(tmp_path: Path, controllers: list[str], computes: dict[str, object]) -> Path:
    def hosts(names):
        return {n: {"ansible_host": f"no-such-container-{n}"} for n in names}

    compute_hosts = hosts(computes)
    for name, gpus in computes.items():
        if gpus is not None:
            compute_hosts[name]["slurm_compute_gpus"] = gpus
    data = {
        "all": {
            "children": {
                "slurm_cluster": {
                    "vars": {"ansible_connection": "community.docker.docker"},
                    "children": {
                        "slurm_controller": {"hosts": hosts(controllers)},
                        "slurm_compute": {"hosts": compute_hosts},
                    },
                }
            }
        }
    }
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("controllers", "computes", "expected"),
    [
        pytest.param(
            [],
            {"node1": 1},
            ["'slurm_controller' has 0 hosts", "list exactly one host under slurm_controller"],
            id="no-controller",
        ),
        pytest.param(
            ["ctl", "ctl2"],
            {"node1": 1},
            ["'slurm_controller' has 2 hosts (ctl, ctl2)", "exactly one"],
            id="two-controllers",
        ),
        pytest.param(
            ["ctl"],
            {"node1": 1, "node2": None},
            ["slurm_compute_gpus is not set for node2", "set slurm_compute_gpus"],
            id="gpu-count-missing",
        ),
        pytest.param(
            ["ctl"],
            {"node1": "two", "node2": 1.5},
            ["node1 has 'two'", "node2 has '1.5'", "whole number"],
            id="gpu-count-not-integer",
        ),
        pytest.param(
            ["ctl"],
            {},
            ["'slurm_compute' is empty"],
            id="no-compute",
        ),
    ],
)
def test_bad_inventory_fails_before_any_host(tmp_path, controllers, computes, expected) -> None:
    result = run_playbook(inventory(tmp_path, controllers, computes), "site.yml")
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    for text in expected:
        assert text in " ".join(out.split()), f"missing {text!r} in:\n{out}"
    assert "UNREACHABLE" not in out, "a node was contacted before validation failed"
    assert "Gathering Facts" not in out


def test_good_inventory_passes_preflight(tmp_path) -> None:
    result = run_playbook(
        inventory(tmp_path, ["ctl"], {"node1": 8, "node2": 0}), "playbooks/preflight.yml"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "UNREACHABLE" not in result.stdout
