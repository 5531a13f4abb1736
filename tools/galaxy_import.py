#!/usr/bin/env python3
"""Galaxy's importer on the built collection, offline, as a gate: any ERROR or WARNING fails.

    python tools/galaxy_import.py [dist/gpulab-slurm_cluster-X.tar.gz]

galaxy-importer (requirements.txt) is what Galaxy and Automation Hub run on an
upload: it checks galaxy.yml, the roles' metadata and READMEs, runs ansible-doc
on every plugin and ansible-lint (production profile, --offline) on the
content. It runs here with this venv's ansible-doc and ansible-lint on PATH, so
the collections the roles call (the `ansible` bundle of requirements.txt)
resolve without Galaxy. It logs problems and still exits 0; this wrapper
counts them and exits 1 on any.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# Lines galaxy-importer logs as WARNING that are not findings about the content.
NOT_FINDINGS = (
    # Its own notice that it will not pull collection dependencies offline.
    re.compile(r"Skipped installing collection dependencies due to running in offline mode"),
)


def default_tarball() -> Path:
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    return ROOT / "dist" / f"gpulab-slurm_cluster-{version}.tar.gz"


def findings(log: str) -> tuple[list[str], list[str]]:
    errors = [line for line in log.splitlines() if line.startswith("ERROR")]
    warnings = [
        line
        for line in log.splitlines()
        if line.startswith("WARNING") and not any(p.search(line) for p in NOT_FINDINGS)
    ]
    return errors, warnings


def main(argv: list[str]) -> int:
    tarball = Path(argv[0]) if argv else default_tarball()
    if not tarball.is_file():
        print(f"tools/galaxy_import.py: {tarball} is missing; run make collection", file=sys.stderr)
        return 2
    bindir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    with tempfile.TemporaryDirectory(prefix="galaxy-import-") as work:  # it writes a result file
        done = subprocess.run(
            [sys.executable, "-m", "galaxy_importer.main", str(tarball.resolve())],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    log = done.stdout + done.stderr
    errors, warnings = findings(log)
    for line in errors + warnings:
        print(line)
    ok = done.returncode == 0 and "Importer processing completed successfully" in log
    print(
        f"galaxy-importer: {len(errors)} errors, {len(warnings)} warnings"
        f"{'' if ok else ', the import did not complete'} ({tarball.name})"
    )
    if not ok and not errors:
        print(log[-3000:])
    return 0 if ok and not errors and not warnings else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
