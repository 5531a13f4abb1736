"""The cuda role's GPU path on the Debian 12 cluster, in check mode.

No NVIDIA driver or repository is reachable here: the path runs with
``--check --diff`` on a node that pretends to have a GPU, and must change
nothing. (Debian 13 is not in the role's table; there the role stops with
"unsupported distribution Debian 13" when a GPU is present.)
"""

from __future__ import annotations

from conftest import host


def test_gpu_path_in_check_mode(run_playbook) -> None:
    """The cuda role's GPU path, --check --diff on a node that pretends to have a GPU."""
    result = run_playbook(
        "playbooks/gpu.yml", "--check", "--diff", "-e", "cuda_test_fake_gpus=1", "--limit", "node1"
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "node1: 1 NVIDIA GPU(s) (FAKE" in out
    assert "repos/debian12/x86_64/" in out
    assert "Pin: version 580.95.05-*" in out
    assert not host("node1").file("/etc/apt/preferences.d/nvidia-driver.pref").exists
