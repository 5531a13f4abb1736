"""site.yml --check --diff on the converged cluster: nothing would change, nothing fails."""

from __future__ import annotations

from conftest import recap


def test_site_yml_in_check_mode_on_a_converged_cluster(run_playbook) -> None:
    result = run_playbook("site.yml", "--check", "--diff")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    counts = recap(out)
    assert set(counts) >= {"ctl", "node1", "node2"}, out[-3000:]
    assert all(
        (c["changed"], c["unreachable"], c["failed"]) == (0, 0, 0) for c in counts.values()
    ), [line for line in out.splitlines() if "changed:" in line]
