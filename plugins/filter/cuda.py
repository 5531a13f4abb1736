"""Decisions of the cuda role, as plain functions with Ansible filter wrappers.

The per-distribution data (NVIDIA repository path, package names) lives in
the role's ``vars/main.yml`` as ``__cuda_platforms``; these functions turn it
and the role's variables into what the tasks need, and reject what cannot
work with a message that names the bad value and the supported ones.
tests/test_cuda_filters.py imports this module directly.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.gpulab.slurm_cluster.plugins.plugin_utils.filter_errors import (
    ansible_errors,
)

NVIDIA_REPO_BASE_URL = "https://developer.download.nvidia.com/compute/cuda/repos"
# The cuda-keyring package that configures NVIDIA's apt repository.
KEYRING_PACKAGE = "cuda-keyring"
# Ansible's architecture fact → directory of NVIDIA's repository (sbsa: Arm servers).
REPO_ARCHES = {"x86_64": "x86_64", "aarch64": "sbsa"}
SOURCES = ("nvidia", "distribution")
KERNEL_MODULES = ("open", "proprietary")

_DRIVER_VERSION = re.compile(r"^(?P<branch>[1-9][0-9]{2})(\.[0-9]+){0,2}$")
_TOOLKIT_VERSION = re.compile(r"^[1-9][0-9]?-[0-9]+$")


def _platform(platforms: Mapping[str, Any], distribution: str, major_version: object) -> dict:
    key = f"{distribution}-{major_version}"
    if key not in platforms:
        supported = ", ".join(p["label"] for p in platforms.values())
        raise ValueError(
            f"unsupported distribution {distribution} {major_version}: the cuda role supports "
            f"{supported}"
        )
    return dict(platforms[key])


def cuda_driver_branch(driver_version: str) -> str:
    """'580.95.05' or '580' → '580'."""
    match = _DRIVER_VERSION.match(str(driver_version))
    if not match:
        raise ValueError(
            f"cuda_driver_version={driver_version!r} is not a driver version: use a full "
            "version such as '580.95.05' or a branch such as '580'"
        )
    return match.group("branch")


def cuda_driver_pin(driver_version: str) -> str:
    """apt preferences ``Pin: version`` glob: '580.95.05' → '580.95.05-*', '580' → '580.*'."""
    branch = cuda_driver_branch(driver_version)
    if str(driver_version) == branch:
        return f"{branch}.*"
    return f"{driver_version}-*"


def cuda_driver_matches(loaded: str, wanted: str) -> bool:
    """Whether a running driver version (nvidia-smi) is the pinned version or branch."""
    loaded, wanted = str(loaded).strip(), str(wanted).strip()
    if not loaded:
        return False
    if wanted == cuda_driver_branch(wanted):
        return loaded.split(".", maxsplit=1)[0] == wanted
    return loaded == wanted


def cuda_repo(
    platforms: Mapping[str, Any],
    distribution: str,
    major_version: object,
    arch: str,
    base_url: str = NVIDIA_REPO_BASE_URL,
    keyring_version: str = "1.1-1",
) -> dict:
    """NVIDIA's apt repository for a distribution and the cuda-keyring package that adds it."""
    platform = _platform(platforms, distribution, major_version)
    if arch not in REPO_ARCHES:
        raise ValueError(
            f"unsupported architecture {arch}: NVIDIA's repository has {', '.join(REPO_ARCHES)}"
        )
    url = f"{base_url.rstrip('/')}/{platform['nvidia_repo']}/{REPO_ARCHES[arch]}/"
    deb = f"{KEYRING_PACKAGE}_{keyring_version}_all.deb"
    return {
        "path": platform["nvidia_repo"],
        "arch": REPO_ARCHES[arch],
        "url": url,
        "keyring_package": KEYRING_PACKAGE,
        "keyring_version": keyring_version,
        "keyring_url": url + deb,
        "keyring_deb": deb,
    }


def _fill(names: Sequence[str], branch: str) -> list[str]:
    return [name.format(branch=branch) for name in names]


def cuda_packages(
    platforms: Mapping[str, Any],
    distribution: str,
    major_version: object,
    source: str,
    driver_version: str,
    toolkit_version: str = "",
    kernel_modules: str = "open",
    fabricmanager: bool = False,
    kernel: str = "",
) -> dict:
    """Package names for one node.

    Returns, in install order, ``prerequisites`` (kernel headers, firmware),
    ``driver`` (versions follow the apt pin: install with state=latest, so
    that a new pin moves them) and ``extras`` (fabric manager, toolkit and
    the rest, state=present); then the apt ``pin`` glob, the driver
    ``branch`` and whether Debian's non-free components must be added
    (``nonfree_sources``).
    """
    if source not in SOURCES:
        raise ValueError(f"cuda_install_source={source!r}: use one of {', '.join(SOURCES)}")
    if kernel_modules not in KERNEL_MODULES:
        raise ValueError(
            f"cuda_kernel_modules={kernel_modules!r}: use one of {', '.join(KERNEL_MODULES)}"
        )
    platform = _platform(platforms, distribution, major_version)
    label = platform["label"]
    branch = cuda_driver_branch(driver_version)
    spec = platform[source]
    if toolkit_version and not _TOOLKIT_VERSION.match(str(toolkit_version)):
        raise ValueError(
            f"cuda_toolkit_version={toolkit_version!r}: use major-minor such as '13-0', "
            "or '' for no toolkit"
        )

    if source == "distribution":
        if spec.get("driver_branches") and branch not in spec["driver_branches"]:
            raise ValueError(
                f"{label} packages driver branch {' or '.join(spec['driver_branches'])}, not "
                f"{branch} (cuda_driver_version={driver_version}): set cuda_driver_version to "
                "the distribution's version or use cuda_install_source: nvidia"
            )
        if toolkit_version and str(toolkit_version) != spec["toolkit_version"]:
            raise ValueError(
                f"{label} packages CUDA toolkit {spec['toolkit_version']}, not {toolkit_version}: "
                f"set cuda_toolkit_version: '{spec['toolkit_version']}' (or '' for none) "
                "or use cuda_install_source: nvidia"
            )

    driver_names = spec["driver"].get(kernel_modules)
    if not driver_names:
        other = next(k for k in KERNEL_MODULES if k != kernel_modules)
        raise ValueError(
            f"{label} {source} packages have no {kernel_modules} kernel modules: "
            f"set cuda_kernel_modules: {other}"
        )
    prerequisites = _fill(spec.get("prerequisites", []), branch)
    if kernel:
        # DKMS builds the module for the running kernel: its headers come first.
        prerequisites.insert(0, f"linux-headers-{kernel}")
    driver = _fill(driver_names, branch) + _fill(spec.get("driver_extra", []), branch)
    extras = _fill(spec.get("other", []), branch)
    if fabricmanager:
        if not spec.get("fabricmanager"):
            raise ValueError(
                f"{label} {source} packages have no NVIDIA fabric manager: "
                "use cuda_install_source: nvidia"
            )
        # Its version follows the apt pin too; on some branches the name is a
        # virtual package, which apt resolves with state=present only.
        extras += _fill(spec["fabricmanager"], branch)
    if toolkit_version:
        extras.append(spec["toolkit"].format(toolkit=toolkit_version))
    return {
        "prerequisites": prerequisites,
        "driver": driver,
        "extras": extras,
        "pin": cuda_driver_pin(driver_version),
        "branch": branch,
        "nonfree_sources": bool(spec.get("nonfree_sources", False)),
    }


def cuda_version_outliers(versions: Mapping[str, str]) -> dict:
    """Hosts whose driver version differs from the most common one.

    ``versions`` maps host → version (hosts without a GPU left out). Returns
    ``{"expected": <most common>, "odd": {host: version}}``; on a tie the
    version of the alphabetically first host counts as expected.
    """
    hosts = sorted(versions)
    if not hosts:
        return {"expected": "", "odd": {}}
    counts = Counter(versions[h] for h in hosts)
    top = max(counts.values())
    expected = next(versions[h] for h in hosts if counts[versions[h]] == top)
    return {"expected": expected, "odd": {h: versions[h] for h in hosts if versions[h] != expected}}


def parse_pci_devices(text: str) -> dict:
    """Parse the output of files/nvidia-pci-devices.

    Lines 'gpu <address>', 'nvswitch <address>' and 'container yes' become
    ``{"gpu": [...], "nvswitch": [...], "container": bool}``.
    """
    found: dict[str, Any] = {"gpu": [], "nvswitch": [], "container": False}
    for line in str(text).splitlines():
        kind, _sep, value = line.strip().partition(" ")
        if kind in ("gpu", "nvswitch") and value:
            found[kind].append(value)
        elif kind == "container":
            found["container"] = value == "yes"
    return found


class FilterModule:
    """cuda role filters; ValueError becomes an Ansible filter error with the same message."""

    def filters(self) -> dict:
        return {
            name: ansible_errors(func)
            for name, func in {
                "cuda_repo": cuda_repo,
                "cuda_packages": cuda_packages,
                "cuda_driver_pin": cuda_driver_pin,
                "cuda_driver_branch": cuda_driver_branch,
                "cuda_driver_matches": cuda_driver_matches,
                "cuda_version_outliers": cuda_version_outliers,
                "cuda_pci_devices": parse_pci_devices,
            }.items()
        }
