"""Device-to-device copy bandwidth of every visible GPU; prints one JSON object.

Run by tools/gpu_check.py with the python that has a CUDA torch. Each GPU
copies a buffer into another one on the same GPU (``dst.copy_(src)``),
timed with CUDA events after warm-up. A copy reads and writes every byte,
so the rate counts 2 x bytes per copy, as CUDA's bandwidthTest does for
device-to-device. Always exits 0; a failure is reported in "error".
"""

from __future__ import annotations

import json
import sys
from typing import Any

WARMUP = 3
ITERS = 20
MAX_BYTES = 1 << 30  # 1 GiB per buffer


def copy_tbps(nbytes: int, iters: int, elapsed_ms: float) -> float:
    """TB/s (10^12 bytes/s) of ``iters`` copies of ``nbytes`` in ``elapsed_ms``: read + write."""
    return 2 * nbytes * iters / (elapsed_ms / 1e3) / 1e12


def buffer_bytes(free_bytes: int) -> int:
    """1 GiB, or an eighth of the free memory where less is free, in whole MiB."""
    return max(1 << 20, min(MAX_BYTES, free_bytes // 8) >> 20 << 20)


def measure(torch: Any, index: int) -> dict[str, Any]:
    device = torch.device("cuda", index)
    torch.cuda.set_device(device)
    free, _ = torch.cuda.mem_get_info(device)
    nbytes = buffer_bytes(free)
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    for _ in range(WARMUP):
        dst.copy_(src)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(device)
    start.record()
    for _ in range(ITERS):
        dst.copy_(src)
    stop.record()
    stop.synchronize()
    elapsed = start.elapsed_time(stop)
    same = bool(torch.equal(src, dst))
    del src, dst
    torch.cuda.empty_cache()
    return {
        "index": index,
        "name": torch.cuda.get_device_name(index),
        "bytes": nbytes,
        "iters": ITERS,
        "elapsed_ms": round(elapsed, 3),
        "TBps": round(copy_tbps(nbytes, ITERS, elapsed), 4),
        "copy_correct": same,
    }


def main() -> dict[str, Any]:
    try:
        import torch

        if not torch.cuda.is_available():
            return {"devices": [], "error": "torch.cuda.is_available() is False"}
        rows = [measure(torch, i) for i in range(torch.cuda.device_count())]
    except Exception as exc:  # the finding, reported to gpu_check.py
        return {"devices": [], "error": f"{type(exc).__name__}: {exc}"}
    wrong = [r["index"] for r in rows if not r["copy_correct"]]
    error = f"copied data differs on cuda:{wrong}" if wrong else None
    return {"devices": rows, "error": error}


if __name__ == "__main__":
    print(json.dumps(main()))
    sys.exit(0)
