"""site.yml --check --diff on the converged cluster: nothing would change, nothing fails."""

from __future__ import annotations

import re


def test_site_yml_in_check_mode_on_a_converged_cluster(run_playbook) -> None:
    result = run_playbook("site.yml", "--check", "--diff")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    recap = re.findall(
        r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", out, re.M
    )
    assert {host for host, *_ in recap} >= {"ctl", "node1", "node2"}, out[-3000:]
    assert all(
        (changed, unreachable, failed) == ("0", "0", "0")
        for _, changed, unreachable, failed in recap
    ), [line for line in out.splitlines() if "changed:" in line]
