#!/usr/bin/env python3
"""Build the ddp-smoke wheel (and, on request, its sdist): the one build of the package.

    python training/build_wheel.py --out DIR [--sdist]

Used by `make collection` (the wheel the collection carries), the smoke_train
role in a clone (roles/smoke_train/tasks/deploy.yml) and
training/tests/test_wheel.py. Offline: it copies pyproject.toml, README.md,
the package's modules and the repository's LICENSE into a temporary folder
and calls setuptools' build hooks there with this Python (no build isolation,
no index). Needs setuptools >= 77 (the SPDX licence expression). Standard
library only; prints the path of each file it built.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TRAINING = Path(__file__).resolve().parent
LICENSE = TRAINING.parent / "LICENSE"
SETUPTOOLS_MIN = (77, 0)
HOOKS = """
import sys
import setuptools.build_meta as backend
out, what = sys.argv[1:3]  # read first: the build hooks rewrite sys.argv
print("BUILT:" + backend.build_wheel(out))
if what == "sdist":
    print("BUILT:" + backend.build_sdist(out))
"""


def setuptools_version(python: str) -> tuple[int, ...]:
    probe = subprocess.run(
        [python, "-c", "import setuptools; print(setuptools.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return ()
    return tuple(int(p) for p in probe.stdout.strip().split(".")[:2] if p.isdigit())


def stage(where: Path) -> Path:
    """The package's build input, and nothing else (no tests, no caches)."""
    src = where / "ddp-smoke"
    (src / "ddp_smoke").mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(TRAINING / name, src / name)
    shutil.copy2(LICENSE, src / "LICENSE")
    for module in sorted((TRAINING / "ddp_smoke").glob("*.py")):
        shutil.copy2(module, src / "ddp_smoke" / module.name)
    return src


def build(out: Path, sdist: bool = False, python: str = sys.executable) -> list[Path]:
    found = setuptools_version(python)
    if found < SETUPTOOLS_MIN:
        have = ".".join(map(str, found)) or "none"
        raise SystemExit(
            f"build_wheel.py: {python} has setuptools {have}; the ddp-smoke build needs "
            f">= {'.'.join(map(str, SETUPTOOLS_MIN))}. Fix: {python} -m pip install "
            "'setuptools>=77' (requirements.txt pins it)"
        )
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ddp-smoke-build-") as tmp:
        src = stage(Path(tmp))
        done = subprocess.run(
            [python, "-c", HOOKS, str(out), "sdist" if sdist else "wheel"],
            cwd=src,
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        raise SystemExit(f"build_wheel.py: the build failed:\n{done.stdout}{done.stderr}")
    return [out / line[6:] for line in done.stdout.splitlines() if line.startswith("BUILT:")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the built files")
    parser.add_argument("--sdist", action="store_true", help="also build the sdist")
    args = parser.parse_args(argv)
    for path in build(args.out, args.sdist):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
