"""Print, as one JSON line, what torch sees on this node (run by the pytorch role).

Runs with the venv's python. Always exits 0 with a report; a broken torch is
reported in "error", and the role's assert turns it into a failure that names
the node. Only the import costs time (about 2 s).
"""

from __future__ import annotations

import json
import sys


def report() -> dict:
    try:
        import torch
    except Exception as exc:  # any import failure is the finding
        return {"error": f"import torch failed: {type(exc).__name__}: {exc}"}
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


if __name__ == "__main__":
    print(json.dumps(report()))
