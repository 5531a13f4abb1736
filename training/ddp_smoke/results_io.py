"""Atomic JSON writes; standard library only, shared by ``run`` and ``report``."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_json_atomic(path: Path, data: dict[str, object]) -> None:
    """Write ``data`` so readers see the old file or the whole new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
