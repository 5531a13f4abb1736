"""Print, as one JSON line, what torch sees on this node (run by the pytorch role).

Runs with the venv's python. Always exits 0 with a report; a broken torch is
reported in "error", and the role's assert turns it into a failure that names
the node. Only the import costs time (about 2 s on a small machine), so a
passing report is kept in the venv with a fingerprint of everything it
depends on: the installed torch (version and files), every package in the
venv's site-packages, the folders torch and its libraries lie in (a renamed,
moved or deleted entry changes their times), the NVIDIA driver loaded, the
GPU device files, CUDA_VISIBLE_DEVICES, the python. While that fingerprint
holds, the kept report is printed ("cached": true) and torch is not
imported; any difference, a failed report, or --fresh (the role passes it
when it has just installed torch) verifies again. --no-write (check mode,
and the cluster doctor, which reads the same report) keeps nothing.

It also imports what every distributed job imports (``JOB_MODULES``: DDP's
constructor imports torch._dynamo, torchrun its elastic agent). pip installs
with --no-compile, and a lab user's job cannot write bytecode into root's
venv: without this, each rank of every job compiled about 800 modules from
source (1.8 s of CPU per rank measured on the demo cluster; a DDP rank took
4.8 s of CPU, 3.0 s with the bytecode). Run as root, these imports write the
bytecode once; a module that fails to import is reported like torch itself.
"""

from __future__ import annotations

import glob
import hashlib
import importlib
import json
import os
import socket
import sys
import time
from importlib import metadata
from pathlib import Path

# What a DDP job imports beyond torch, in the four launch patterns of the smoke
# job: the process group, DDP (its constructor imports torch._dynamo), the data
# loader and optimiser, torch.multiprocessing (mp.spawn) and torchrun's agent.
# Part of the fingerprint: a changed list verifies (and compiles) again.
JOB_MODULES = (
    "torch.distributed",
    "torch.nn.parallel",
    "torch._dynamo",
    "torch.utils.data",
    "torch.optim",
    "torch.multiprocessing",
    "torch.distributed.run",
)


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace").strip()
    except OSError:
        return ""


def _stamp(path: object) -> str:
    """Modification time and size of a file or folder; "-" where it is not there."""
    try:
        stat = os.stat(str(path))
    except OSError:
        return "-"
    return f"{stat.st_mtime_ns} {stat.st_size}"


def installed(site: str) -> str:
    """Each distribution's metadata folder in site-packages, with its RECORD's stamp."""
    try:
        names = sorted(n for n in os.listdir(site) if n.endswith(".dist-info"))
    except OSError:
        return "-"
    return "\n".join(f"{n} {_stamp(os.path.join(site, n, 'RECORD'))}" for n in names)


def fingerprint() -> str:
    """Hash of what torch's answer depends on, read without importing torch."""
    try:
        dist = metadata.distribution("torch")
        site = str(dist.locate_file(""))
        torch_id = "\n".join(
            [
                dist.version,
                _stamp(site),
                _stamp(os.path.join(site, "torch")),
                _stamp(os.path.join(site, "torch", "lib")),
                installed(site),
            ]
        )
    except (metadata.PackageNotFoundError, OSError):
        torch_id = "no torch"
    parts = [
        torch_id,
        _read("/sys/module/nvidia/version"),
        " ".join(sorted(glob.glob("/dev/nvidia*"))),
        os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"),
        sys.version,
        sys.prefix,
        " ".join(JOB_MODULES),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def report() -> dict:
    try:
        import torch
    except Exception as exc:  # any import failure is the finding
        return {"error": f"import torch failed: {type(exc).__name__}: {exc}"}
    for name in JOB_MODULES:
        try:
            importlib.import_module(name)
        except Exception as exc:  # a job would fail the same way: the finding
            return {"error": f"import {name} failed: {type(exc).__name__}: {exc}"}
    available = torch.cuda.is_available()
    nccl = None
    if torch.version.cuda and torch.distributed.is_available():
        try:
            if torch.distributed.is_nccl_available():
                nccl = ".".join(str(part) for part in torch.cuda.nccl.version())
        except Exception as exc:  # reported, not fatal: the GPU checks decide
            nccl = f"unknown ({type(exc).__name__}: {exc})"
    return {
        "torch": torch.__version__,
        "cuda_build": torch.version.cuda,
        "cuda_available": available,
        "device_count": torch.cuda.device_count() if available else 0,
        "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if available
        else [],
        "nccl": nccl,
        "python": sys.version.split()[0],
    }


def kept_path() -> Path:
    # One file per node: a shared venv serves nodes with different GPUs.
    return Path(sys.prefix) / f".torch-verified-{socket.gethostname()}.json"


def main(argv: list[str]) -> dict:
    fresh = "--fresh" in argv
    write = "--no-write" not in argv
    key = fingerprint()
    path = kept_path()
    if not fresh:
        try:
            kept = json.loads(path.read_text())
        except (OSError, ValueError):
            kept = {}
        if kept.get("fingerprint") == key and isinstance(kept.get("report"), dict):
            return {**kept["report"], "cached": True, "verified_at": kept.get("verified_at")}
    result = report()
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if write and "error" not in result:
        try:
            # Read again: the first import as root wrote torch's __pycache__,
            # a new entry in torch's folder.
            kept = {"fingerprint": fingerprint(), "verified_at": now, "report": result}
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(kept))
            tmp.replace(path)
        except OSError:
            pass  # an unwritable venv only costs the next run the import
    elif "error" in result:
        path.unlink(missing_ok=True)
    return {**result, "cached": False, "verified_at": now}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
