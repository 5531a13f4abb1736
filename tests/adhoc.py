"""The collection run from this checkout: one module by `ansible localhost -m FQCN`, as a
role would run it, or a playbook on an inventory of local hosts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_module(module: str, args: str, local_temp: Path, *extra: str) -> dict:
    """The module's result: found in the collection by its FQCN, run in this Python."""
    out = subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible")),
            "localhost",
            "-c",
            "local",
            "-i",
            "localhost,",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            "-m",
            f"gpulab.slurm_cluster.{module}",
            "-a",
            args,
            "-o",
            *extra,
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env={**os.environ, "ANSIBLE_LOCAL_TEMP": str(local_temp)},
    )
    assert "=>" in out.stdout, out
    return json.loads(out.stdout.split("=>", 1)[1])


def run_playbook(
    inventory: Path, playbook: str | Path, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess:
    """ansible-playbook from the checkout (its ansible.cfg) on `inventory`, with the fact
    cache in a folder `facts` beside it; the finished process, whatever its exit status."""
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    env["ANSIBLE_CACHE_PLUGIN_CONNECTION"] = str(inventory.parent / "facts")
    return subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-playbook")),
            "-i",
            str(inventory),
            str(playbook),
            *args,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
