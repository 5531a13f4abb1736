"""The pytorch role with pytorch_install_background, as site.yml runs it: pip
left running while later plays go on, then tasks_from finish waits for it and
verifies torch. Real ansible-playbook runs of the collection's role on a local
host, real pip in a real venv (CPU torch from the wheelhouse for the passing
run; a pin no wheelhouse holds for the failing one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WHEELHOUSE = ROOT / ".cache" / "wheelhouse"

# Play 1 starts pip (site.yml's pytorch.yml), play 2 stands for the Slurm plays
# between, play 3 is site.yml's pytorch_finish.yml (the same task).
PLAYBOOK = """
- name: Start
  hosts: slurm_compute
  gather_facts: false
  tasks:
    - name: PyTorch
      ansible.builtin.include_role:
        name: gpulab.slurm_cluster.pytorch
- name: Between
  hosts: slurm_compute
  gather_facts: false
  tasks:
    - name: What the nodes did meanwhile
      ansible.builtin.debug:
        msg: >-
          between: deferred={{ pytorch_install_deferred | default(false) }}
          job={{ pytorch_install.ansible_job_id | default('none') }}
"""
FINISH = (ROOT / "playbooks" / "pytorch_finish.yml").read_text()


def run(tmp_path: Path, extra: dict, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    local = f"ansible_connection=local ansible_python_interpreter={sys.executable}"
    # The controller only names the host that a shared venv's folders are made
    # on (a task's delegate_to is templated before its condition); no play has it.
    (tmp_path / "hosts.ini").write_text(
        f"[slurm_compute]\nnode {local}\n[slurm_controller]\nctl {local}\n"
    )
    (tmp_path / "play.yml").write_text(PLAYBOOK + FINISH.replace("---\n", "", 1))
    (tmp_path / "vars.json").write_text(json.dumps(extra))
    # pip reads only the role's arguments (no PIP_* or pip.conf of this machine).
    env = dict(
        {k: v for k, v in os.environ.items() if not k.startswith("PIP_")},
        PIP_CONFIG_FILE=os.devnull,
        ANSIBLE_CONFIG=str(tmp_path / "none.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"),
        ANSIBLE_ASYNC_DIR=str(tmp_path / "async"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_DEPRECATION_WARNINGS="0",
    )
    playbook = Path(sys.executable).parent / "ansible-playbook"
    out = subprocess.run(
        [str(playbook), "-i", "hosts.ini", "play.yml", "-e", "@vars.json", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if check:
        assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    return out


def role_vars(tmp_path: Path, **more) -> dict:
    """The role on a node whose venv lies in tmp_path, its system packages there
    (the host's python3 makes the venv), no GPU, pip in the background."""
    return {
        "cluster_venv": str(tmp_path / "venv"),
        "cluster_packages_installed": ["python3-venv", "python3-packaging"],
        "pytorch_variant": "cpu",
        "pytorch_install_background": True,
        "pytorch_install_timeout": 300,
        **more,
    }


def section(output: str, start: str, end: str | None = None) -> str:
    text = output.split(f"PLAY [{start}]", 1)[1]
    return text.split(f"PLAY [{end}]", 1)[0] if end else text


def outcome(text: str, task: str) -> str | None:
    """The first result line (ok, changed, skipping, fatal) of the task named task in text."""
    if f"{task}] " not in text:
        return None
    after = text.split(f"{task}] ", 1)[1].split("\n", 1)[1]
    return after.lstrip().split(":", 1)[0]


def test_a_failing_pip_in_the_background_fails_the_finish_with_pips_own_words(tmp_path) -> None:
    empty = tmp_path / "wheels"
    empty.mkdir()
    extra = role_vars(tmp_path, pytorch_packages=["torch==0.0.1"], pytorch_find_links=str(empty))
    out = run(tmp_path, extra, check=False)
    assert out.returncode != 0, out.stdout[-3000:]
    start = section(out.stdout, "Start", "Between")
    # pip was started and left: the play moved on, torch was not asked yet.
    assert outcome(start, "Install torch into the venv") == "changed"
    assert outcome(start, "Ask torch what it sees") == "skipping"
    between = section(out.stdout, "Between", "PyTorch on the compute nodes, once pip is done")
    assert "between: deferred=True job=j" in between, between
    finish = section(out.stdout, "PyTorch on the compute nodes, once pip is done")
    assert "fatal: [node]: FAILED!" in finish, finish
    assert "No matching distribution found for torch==0.0.1" in finish, finish
    assert outcome(finish, "Check torch against the pin and the node's GPUs") is None


@pytest.mark.skipif(
    not any(WHEELHOUSE.glob("torch-*.whl")), reason="no wheelhouse (make host builds it)"
)
def test_torch_installed_in_the_background_is_waited_for_verified_then_left_alone(tmp_path) -> None:
    extra = role_vars(tmp_path, pytorch_find_links=str(WHEELHOUSE))
    out = run(tmp_path, extra)
    start = section(out.stdout, "Start", "Between")
    assert outcome(start, "Install torch into the venv") == "changed"
    assert outcome(start, "Check torch against the pin and the node's GPUs") == "skipping"
    finish = section(out.stdout, "PyTorch on the compute nodes, once pip is done")
    assert outcome(finish, "Wait for pip in the background") == "ok"
    assert outcome(finish, "Ask torch what it sees") == "ok"
    # Verified after the wait, as a fresh install (--fresh: pip's result kept as changed).
    assert "node: torch 2.13.0" in finish and "0 GPU(s) visible, 0 expected" in finish, finish
    assert "nothing changed since" not in finish
    assert (tmp_path / "venv" / "bin" / "python").exists()
    # The job's file is removed once its result is read.
    assert list((tmp_path / "async").glob("j*")) == []

    # A second run: nothing missing, no pip, so nothing deferred; the role
    # verifies in its own play and the finish play is one skipped task.
    again = run(tmp_path, extra)
    start = section(again.stdout, "Start", "Between")
    assert outcome(start, "Install torch into the venv") == "skipping"
    assert "between: deferred=False job=none" in again.stdout
    assert outcome(start, "Check torch against the pin and the node's GPUs") == "ok"
    finish = section(again.stdout, "PyTorch on the compute nodes, once pip is done")
    assert outcome(finish, "Wait for pip, then verify torch") == "skipping"
    assert "changed=0" in again.stdout


def test_check_mode_runs_pip_in_the_foreground(tmp_path) -> None:
    """Ansible cannot run a task in the background in check mode: pip's check
    runs in place, nothing is deferred, and the role says torch is not verified."""
    empty = tmp_path / "wheels"
    empty.mkdir()
    extra = role_vars(tmp_path, pytorch_find_links=str(empty))
    out = run(tmp_path, extra, "--check")
    assert "between: deferred=False job=none" in out.stdout, out.stdout[-3000:]
    assert "torch not verified" in out.stdout
    assert not (tmp_path / "venv").exists()
