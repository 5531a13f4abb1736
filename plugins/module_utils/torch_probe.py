"""torch in a node's venv, for the cluster doctor's probe (module cluster_probe).

Imported (version, CUDA devices), found without importing it, or read from
the report the pytorch role's own check (roles/pytorch/files/verify_torch.py)
kept, run read-only. Root runs the venv's python only from folders root owns.
"""

from __future__ import annotations

import json
import os

from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.node_base import (
    root_owned_problem,
    run,
)

TORCH_SNIPPET = (
    "import json, torch; print(json.dumps({'version': torch.__version__, "
    "'cuda': torch.version.cuda, 'device_count': torch.cuda.device_count()}))"
)


# torch found and its version read, not imported: the error line names what is missing.
TORCH_FIND = (
    "import importlib.util, importlib.metadata, json\n"
    "if importlib.util.find_spec('torch') is None:\n"
    "    raise SystemExit(\"ModuleNotFoundError: No module named 'torch'\")\n"
    "print(json.dumps({'version': importlib.metadata.version('torch')}))"
)


def torch_info(
    python: str, quick: bool = False, shared: str = "", script: str = "", fresh: bool = False
) -> dict | None:
    """torch in the venv: imported (version, CUDA devices), or with `quick` only found.

    The quick look (a few hundredths of a second, before a smoke job) finds
    the package and its version without importing it: a venv that lost torch
    is named before any rank starts. With `script` (the pytorch role's
    verify_torch.py), the report that role's check kept while its fingerprint
    holds, else that check run now, never written (the doctor changes nothing).
    """
    if not python:
        return None
    base = {"python": python, "quick": quick}
    if not os.path.exists(python):
        return {**base, "ok": False, "error": f"{python} does not exist"}
    # Root runs it: only from folders root owns all the way up.
    untrusted = root_owned_problem(python, shared)
    if untrusted:
        return {**base, "ok": False, "error": f"not run as root: {untrusted}"}
    verify = bool(script) and not quick
    if verify:
        # Read-only, as site.yml's probe runs it (roles/pytorch/meta/probe.yml):
        # no kept report and no bytecode written.
        argv = [python, "-I", "-B", "-c", script, "--no-write"] + (["--fresh"] if fresh else [])
    else:
        argv = [python, "-I", "-c", TORCH_FIND if quick else TORCH_SNIPPET]
    res = run(argv, timeout=120)
    lines = (res["err"] or res["out"]).strip().splitlines()
    if res["rc"] != 0:
        return {**base, "ok": False, "error": lines[-1] if lines else f"exit {res['rc']}"}
    try:
        info = json.loads(res["out"].strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {**base, "ok": False, "error": lines[-1] if lines else "no report"}
    if verify:
        return from_report(info, base)
    return {**base, **info, "ok": True}


def from_report(report: dict, base: dict) -> dict:
    """The pytorch role's check (files/verify_torch.py's report) in this probe's form.

    Also for the answer that check gave earlier in a site.yml run (the
    pytorch role's fact pytorch_torch_checked), which the doctor takes
    instead of asking torch again.
    """
    if "error" in report:
        error = str(report["error"]).removeprefix("import torch failed: ")
        return {**base, "ok": False, "error": error}
    names = {"torch": "version", "cuda_build": "cuda", "device_count": "device_count"}
    names |= {"cached": "cached", "verified_at": "verified_at"}
    return {**base, **{new: report.get(old) for old, new in names.items()}, "ok": True}
