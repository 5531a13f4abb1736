#!/usr/bin/env python3
"""Prepare this machine to run the local Docker cluster.

Sub-commands (each idempotent, each fast when there is nothing to do):

  packages    install docker.io and mmdebstrap when missing, in one apt-get
              transaction (needs root; make demo runs it before the steps that
              use them, which then find them installed)
  test-packages
              what make test needs beyond them, without recommends, in one
              apt-get transaction: qemu and its tools for the nfs scenario's VMs
              (vm.py's HOST_PACKAGES), promtool and chromium for the
              monitoring tests (needs root; after packages: one dpkg lock)
  docker      start dockerd when it is not answering (install docker.io when
              missing; needs root)
  image       build the Debian systemd base image(s) with mmdebstrap + docker
              import when the tag is absent or its recipe changed
              (--suite bookworm --suite trixie: Slurm 22.05 and 24.11)
  wheelhouse  fill a local wheelhouse with the CPU torch build for the nodes
  all         the three above
  cgroups     fail when Slurm left cgroup folders in the host's tree

No registry is used: images are built from Debian's archive with the default
sources of mmdebstrap, wheels come from the local /opt/wheels or PyPI.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import rootfs
import vm

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache"
HOST_CA_DIR = Path("/usr/local/share/ca-certificates")
IMAGE_PACKAGES = [
    "python3",
    "python3-apt",
    "systemd",
    "systemd-sysv",
    "dbus",
    "iproute2",
    "sudo",
    "ca-certificates",
]
# The host's packages by the command that shows each is installed.
HOST_PACKAGES = {"dockerd": "docker.io", "mmdebstrap": "mmdebstrap"}
# make test's on top, by the same rule (vm.py's are added where they are used).
TEST_PACKAGES = {"promtool": "prometheus", "chromium": "chromium"}
TORCH_SPEC = "torch==2.13.0+cpu"
LOCAL_WHEELS = Path("/opt/wheels")


def log(msg: str) -> None:
    print(f"hostprep: {msg}", flush=True)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, **kw)


def missing_packages(wanted: dict[str, str]) -> list[str]:
    """The packages of `wanted` ({command: package}) whose command is not on PATH."""
    return sorted({package for command, package in wanted.items() if shutil.which(command) is None})


def apt_install(wanted: dict[str, str], recommends: bool) -> None:
    """One apt-get transaction (one dpkg lock) for the packages of `wanted` that are missing."""
    missing = missing_packages(wanted)
    if not missing:
        log(f"{', '.join(sorted(set(wanted.values())))} are installed")
        return
    if os.geteuid() != 0:
        sys.exit(f"hostprep: {' '.join(missing)} missing; run as root or install them")
    log(f"installing {' '.join(missing)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-qq"], env=env)
    without = [] if recommends else ["--no-install-recommends"]
    run(["apt-get", "install", "-y", "-qq", *without, *missing], env=env)


def ensure_packages() -> None:
    """What the docker and image steps install. With recommends, as docker.io was
    always installed here (apparmor, xz-utils)."""
    apt_install(HOST_PACKAGES, recommends=True)


def ensure_test_packages() -> None:
    """What only make test uses (qemu's for the VMs, promtool, chromium), without recommends."""
    apt_install({**vm.HOST_PACKAGES, **TEST_PACKAGES}, recommends=False)


def docker_up() -> bool:
    return (
        shutil.which("docker") is not None
        and subprocess.run(["docker", "info"], capture_output=True).returncode == 0
    )


def ensure_docker() -> None:
    if docker_up():
        log("dockerd is running")
        return
    if shutil.which("dockerd") is None:
        if os.geteuid() != 0:
            sys.exit("hostprep: docker.io is not installed; run as root or install it")
        log("installing docker.io")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        run(["apt-get", "update", "-qq"], env=env)
        run(["apt-get", "install", "-y", "-qq", "docker.io"], env=env)
    log("starting dockerd")
    logf = open(CACHE / "dockerd.log", "ab")  # noqa: SIM115 - handed to the daemon
    subprocess.Popen(
        ["dockerd"], stdout=logf, stderr=logf, stdin=subprocess.DEVNULL, start_new_session=True
    )
    for _ in range(60):
        if docker_up():
            log("dockerd is up")
            return
        time.sleep(1)
    sys.exit(f"hostprep: dockerd did not answer in 60 s; see {CACHE / 'dockerd.log'}")


def host_cas() -> list[Path]:
    return sorted(HOST_CA_DIR.glob("*.crt")) if HOST_CA_DIR.is_dir() else []


def recipe_hash(suite: str) -> str:
    """Everything that goes into the image (rootfs.py included); a change rebuilds it."""
    cas = [hashlib.sha256(ca.read_bytes()).hexdigest() for ca in host_cas()]
    return rootfs.recipe_hash(suite, IMAGE_PACKAGES, cas, functions=[customise])


def image_label(tag: str) -> str | None:
    out = subprocess.run(
        ["docker", "image", "inspect", "-f", '{{ index .Config.Labels "recipe" }}', tag],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip() if out.returncode == 0 else None


def ensure_image(suite: str, tag: str) -> None:
    want = recipe_hash(suite)
    if image_label(tag) == want:
        log(f"image {tag} is current")
        return
    log(f"mmdebstrap {suite} (about 20 s)")
    with rootfs.bootstrap(suite, IMAGE_PACKAGES, CACHE) as tree:
        customise(tree)
        log(f"docker import → {tag}")
        tar = subprocess.Popen(["tar", "-C", str(tree), "-c", "."], stdout=subprocess.PIPE)
        run(
            [
                "docker",
                "import",
                "--change",
                f"LABEL recipe={want}",
                "--change",
                'CMD ["/lib/systemd/systemd"]',
                "-",
                tag,
            ],
            stdin=tar.stdout,
            stdout=subprocess.DEVNULL,
        )
        if tar.wait() != 0:
            sys.exit("hostprep: tar of the rootfs failed")


def customise(tree: Path) -> None:
    """Trust the host's extra CAs, keep the image small, quiet systemd units."""
    for ca in host_cas():
        shutil.copy2(ca, tree / "usr/local/share/ca-certificates" / ca.name)
    rootfs.chroot(tree, "update-ca-certificates")
    # Units that make no sense in a container (and slow its boot).
    rootfs.mask_units(
        tree,
        (
            "systemd-remount-fs.service",
            "getty.target",
            "console-getty.service",
            "systemd-logind.service",
        ),
    )
    rootfs.quiet_apt(tree, "90cluster")
    rootfs.forget_identity(tree)
    shutil.rmtree(tree / "var/cache/apt/archives", ignore_errors=True)
    (tree / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)


def ensure_wheelhouse(dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    have = [p.name for p in dest.glob("torch-2.13.0+cpu-*.whl")]
    if have and list(dest.glob("numpy-*.whl")):
        log(f"wheelhouse {dest} is filled")
        return
    log(f"filling wheelhouse {dest}")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--only-binary=:all:",
        "--python-version",
        "3.11",
        "--platform",
        "manylinux_2_28_x86_64",
        "--platform",
        "manylinux2014_x86_64",
        "--platform",
        "manylinux_2_17_x86_64",
        "-d",
        str(dest),
        TORCH_SPEC,
        "numpy",
    ]
    if LOCAL_WHEELS.is_dir():
        cmd[4:4] = ["--find-links", str(LOCAL_WHEELS)]
    run(cmd)


def slurm_cgroups(root: Path = Path("/sys/fs/cgroup")) -> list[Path]:
    """Slurm cgroup folders in the host's tree (left behind by containers)."""
    found: list[Path] = []
    for top in root.iterdir() if root.is_dir() else []:
        found.extend(p for p in top.glob("*") if "slurm" in p.name)
        found.extend(p for p in top.glob("*/*") if "slurm" in p.name)
    return sorted(found)


def check_cgroups() -> None:
    left = slurm_cgroups()
    if left:
        sys.exit(
            "hostprep: Slurm cgroups left in the host's tree after the scenario: "
            + ", ".join(map(str, left))
        )
    log("no Slurm cgroups left in the host's cgroup tree")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "what",
        choices=["packages", "test-packages", "docker", "image", "wheelhouse", "all", "cgroups"],
    )
    parser.add_argument(
        "--suite",
        action="append",
        help="Debian suite of an image, repeatable (default bookworm)",
    )
    parser.add_argument("--tag", default=None, help="image tag (default cluster-base:SUITE)")
    parser.add_argument("--wheelhouse", type=Path, default=CACHE / "wheelhouse")
    args = parser.parse_args()
    CACHE.mkdir(exist_ok=True)
    suites = args.suite or ["bookworm"]
    if args.tag and len(suites) > 1:
        parser.error("--tag names one image: give one --suite with it")
    if args.what == "packages":
        ensure_packages()
    if args.what == "test-packages":
        ensure_test_packages()
    if args.what in ("docker", "all"):
        ensure_docker()
    if args.what in ("image", "all"):
        for suite in suites:
            ensure_image(suite, args.tag or f"cluster-base:{suite}")
    if args.what in ("wheelhouse", "all"):
        ensure_wheelhouse(args.wheelhouse)
    if args.what == "cgroups":
        check_cgroups()


if __name__ == "__main__":
    main()
