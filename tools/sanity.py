#!/usr/bin/env python3
"""`ansible-test sanity` on the built collection, offline but for the package index.

    python tools/sanity.py [--tarball dist/gpulab-slurm_cluster-X.tar.gz] [--keep]
                           [ansible-test sanity arguments, e.g. --test pylint]

1. The tarball (`make collection`) is installed where ansible-test wants a
   collection, <tmp>/ansible_collections/gpulab/slurm_cluster, with the
   repository's tests/sanity/ignore-*.txt (findings that cannot be fixed,
   each with its reason; ansible-test's `ignores` test fails on a stale one).
2. ansible-test --venv makes one venv per test and Python, and bootstraps pip
   in each with a get-pip script it would download from a host that is not
   reachable here. tools/get_pip_standin.py is put in its cache instead
   (~/.ansible/test/cache/get_pip_<pip version>.py), unless a script is
   already cached there. The tests' own requirements come from pip's
   configured package index, once: ansible-test keeps the venvs in
   ~/.ansible/test/venv.
3. Every Python that ansible-test supports and that is installed here (on
   PATH, or under ~/.pyenv/versions) is tested; ansible-test skips the others.

Exit status: ansible-test's. Its findings are under <tmp>/.../tests/output
(--keep keeps <tmp>).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
STANDIN = Path(__file__).resolve().parent / "get_pip_standin.py"
CACHE = Path.home() / ".ansible" / "test" / "cache"


def ansible_test_dir() -> Path:
    import ansible_test  # from the venv that runs this script

    return Path(ansible_test.__file__).parent


def pip_version() -> str:
    """The pip that ansible-test bootstraps into its venvs (get_venv_packages)."""
    source = (ansible_test_dir() / "_internal" / "python_requirements.py").read_text()
    found = re.search(r"default_packages = dict\(\s*pip='([0-9.]+)'", source)
    if not found:
        sys.exit("tools/sanity.py: no pip version in ansible-test; see tools/get_pip_standin.py")
    return found[1]


def install_standin() -> Path:
    """The stand-in as ansible-test's cached get-pip script, unless a real one is there."""
    target = CACHE / f"get_pip_{pip_version().replace('.', '_')}.py"
    marker = "gpulab.slurm_cluster get-pip stand-in"
    if not target.exists() or marker in target.read_text(errors="replace"):
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(STANDIN, target)
    return target


def supported_versions() -> list[str]:
    text = (ansible_test_dir() / "_util" / "target" / "common" / "constants.py").read_text()
    return re.findall(r"'(3\.\d+)'", text)


def interpreter(version: str) -> str | None:
    """A working pythonX.Y: on PATH first, then pyenv's installed versions."""
    candidates = [shutil.which(f"python{version}")]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates += sorted(str(p) for p in pyenv.glob(f"{version}.*/bin/python{version}"))
    for path in filter(None, candidates):
        probe = subprocess.run([path, "-c", "import sys, ensurepip, venv"], capture_output=True)
        if probe.returncode == 0:
            return path
    return None


def interpreters_dir(work: Path) -> tuple[Path, list[str]]:
    """A folder of pythonX.Y links to every usable interpreter, for PATH."""
    folder = work / "bin"
    folder.mkdir()
    found = []
    for version in supported_versions():
        path = interpreter(version)
        if path:
            (folder / f"python{version}").symlink_to(path)
            found.append(version)
    return folder, found


def default_tarball() -> Path:
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    return ROOT / "dist" / f"gpulab-slurm_cluster-{version}.tar.gz"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tarball", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the temporary collection tree")
    args, rest = parser.parse_known_args(argv)
    tarball = args.tarball or default_tarball()
    if not tarball.is_file():
        print(f"tools/sanity.py: {tarball} is missing; run make collection", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="sanity-"))
    try:
        tree = work / "ansible_collections" / "gpulab" / "slurm_cluster"
        tree.mkdir(parents=True)
        with tarfile.open(tarball) as tar:
            tar.extractall(tree, filter="data")
        # The ignore file (each entry with its reason) is not in the tarball
        # (galaxy.yml's build_ignore leaves tests/ out).
        shutil.copytree(ROOT / "tests" / "sanity", tree / "tests" / "sanity", dirs_exist_ok=True)
        standin = install_standin()
        folder, versions = interpreters_dir(work)
        print(f"ansible-test sanity: Python {', '.join(versions)}; get-pip: {standin}", flush=True)
        env = dict(
            os.environ,
            PATH=f"{folder}{os.pathsep}{Path(sys.executable).parent}"
            f"{os.pathsep}{os.environ.get('PATH', '')}",
        )
        command = [
            str(Path(sys.executable).parent / "ansible-test"),
            "sanity",
            "--venv",
            "--color",
            "no",
            *rest,
        ]
        return subprocess.run(command, cwd=tree, env=env, check=False).returncode
    finally:
        if args.keep:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
