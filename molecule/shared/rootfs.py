"""The one Debian image builder of the test harness: an mmdebstrap tree, customised.

hostprep.py turns the tree into a Docker image (`docker import`), vm.py into a
qemu disk (`mkfs.ext4 -d`). Both start here: the same mmdebstrap call (the
tool's default sources, no registry), the same apt settings, the same way of
masking units, and a recipe hash that covers this module, so a change here
rebuilds both images.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

APT_QUIET = 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n'
APT_KEEP_DEBS = 'Binary::apt::APT::Keep-Downloaded-Packages "true";\n'
# dpkg in a throwaway test image, as Docker's debian images set it: no fsync per
# file, and no manuals, docs or translations (the copyrights stay). A cold
# install of the controller's packages took 15 % less (2026-12-06: 21.1 s
# against 17.9 s, two runs each); the roles read none of these folders.
DPKG_FAST = """\
force-unsafe-io
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
"""


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, **kw)


def ensure_mmdebstrap() -> None:
    """Install mmdebstrap when missing (root; Debian's package archive)."""
    if shutil.which("mmdebstrap") is not None:
        return
    if os.geteuid() != 0:
        sys.exit("rootfs: mmdebstrap is missing; run as root or install it")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    _run(["apt-get", "update", "-qq"], env=env)
    _run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "mmdebstrap"], env=env)


@contextlib.contextmanager
def bootstrap(suite: str, packages: Iterable[str], workdir: Path) -> Iterator[Path]:
    """A minbase tree of `suite` with `packages`, in a folder removed afterwards.

    mmdebstrap, not debootstrap: apt fetches the packages side by side and
    installs them in one pass, where debootstrap fetched one file after the
    other (2026-12-07, bookworm with IMAGE_PACKAGES: 18.7-19.5 s against
    46.5 s, the same 141 packages). Its sources are the tool's defaults (the
    host's where the suite is the host's, with the suite's security and
    updates). The merged-usr hook installs usr-is-merged as debootstrap did,
    not usrmerge and perl. The package lists stay (as debootstrap left them),
    so the roles' first apt task finds them fresh.
    """
    ensure_mmdebstrap()
    workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=workdir, prefix=f"rootfs-{suite}-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        _run(
            [
                "mmdebstrap",
                "--variant=minbase",
                "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
                "--skip=cleanup/apt/lists",
                f"--include={','.join(packages)}",
                suite,
                str(rootfs),
            ],
            stdout=subprocess.DEVNULL,
        )
        yield rootfs


def chroot(rootfs: Path, *cmd: str) -> None:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive", LC_ALL="C")
    _run(["chroot", str(rootfs), *cmd], env=env, stdout=subprocess.DEVNULL)


def quiet_apt(rootfs: Path, name: str, keep_debs: bool = False) -> None:
    """No recommends or suggests; with keep_debs, apt keeps what it downloads; dpkg
    without fsync and docs (DPKG_FAST)."""
    text = APT_QUIET + (APT_KEEP_DEBS if keep_debs else "")
    (rootfs / "etc/apt/apt.conf.d" / name).write_text(text)
    (rootfs / "etc/dpkg/dpkg.cfg.d" / name).write_text(DPKG_FAST)


def mask_units(rootfs: Path, units: Iterable[str]) -> None:
    """Units that only cost boot time where the image runs (linked to /dev/null)."""
    for unit in units:
        link = rootfs / "etc/systemd/system" / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")


def forget_identity(rootfs: Path) -> None:
    """An empty machine-id: every container or VM made from the image gets its own."""
    (rootfs / "etc/machine-id").write_text("")


def recipe_hash(*parts: object, functions: Iterable[object] = ()) -> str:
    """A short hash of the data and the code (this module included) that make an image."""
    h = hashlib.sha256()
    for part in parts:
        h.update(json.dumps(part, sort_keys=True, default=str).encode())
    h.update(inspect.getsource(sys.modules[__name__]).encode())
    for function in functions:
        h.update(inspect.getsource(function).encode())
    return h.hexdigest()[:16]
