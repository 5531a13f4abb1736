"""Which torch build a node gets, and whether what torch reports is right.

One table, ``CUDA_VARIANTS``, maps the NVIDIA driver (or CUDA version) of a
node to a wheel variant of download.pytorch.org; everything else in the
pytorch role asks these functions. tests/test_torch_variant.py imports this
module directly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# The venv_packages module applies the same version rule on the nodes.
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.pep440 import (
    version_matches as _version_matches,
)
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.venv_reqs import missing
from ansible_collections.gpulab.slurm_cluster.plugins.plugin_utils.filter_errors import (
    ansible_errors,
)

# Newest first: (wheel variant, CUDA version, oldest Linux driver for it).
# Minimum drivers from NVIDIA's CUDA Toolkit release notes, table "CUDA
# Toolkit and Corresponding Driver Versions" (GA releases, Linux x86_64).
CUDA_VARIANTS: tuple[tuple[str, tuple[int, int], tuple[int, ...]], ...] = (
    ("cu130", (13, 0), (580, 65, 6)),
    ("cu128", (12, 8), (570, 26)),
    ("cu126", (12, 6), (560, 28, 3)),
)
CPU = "cpu"
VARIANTS = (*(v for v, _cuda, _driver in CUDA_VARIANTS), CPU)
INDEX_BASE_URL = "https://download.pytorch.org/whl"

_VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*$")
_TORCH_PIN = re.compile(r"^torch==(?P<version>[^\s;]+)$")


def _parse(version: object) -> tuple[int, ...]:
    text = str(version).strip()
    if not _VERSION.match(text):
        raise ValueError(
            f"{version!r} is neither an NVIDIA driver version (e.g. 580.95.05) "
            "nor a CUDA version (e.g. 12.8)"
        )
    return tuple(int(part) for part in text.split("."))


def _fmt(version: Sequence[int]) -> str:
    return ".".join(f"{part:02d}" if i == 2 else str(part) for i, part in enumerate(version))


def torch_variant_info(version: object) -> dict:
    """``{"variant": ..., "reason": ...}`` for a driver version, a CUDA version or nothing.

    A driver version has a 3-digit branch (``580.95.05``; a bare branch such
    as ``580`` stands for any release of it); a CUDA version has a 2-digit
    major (``12.8``). Empty or None: no NVIDIA driver, hence ``cpu``.
    """
    if version is None or str(version).strip() == "":
        return {"variant": CPU, "reason": "no NVIDIA driver on the node"}
    parsed = _parse(version)
    if parsed[0] >= 100:  # driver
        for variant, cuda, minimum in CUDA_VARIANTS:
            # A bare branch compares by branch only: every release of a branch
            # that has at least one release supporting this CUDA qualifies.
            have = parsed if len(parsed) > 1 else parsed[:1]
            need = minimum if len(parsed) > 1 else minimum[:1]
            if have >= need:
                return {
                    "variant": variant,
                    "reason": f"driver {version} >= {_fmt(minimum)}, the oldest for CUDA "
                    f"{cuda[0]}.{cuda[1]}",
                }
        oldest_variant, oldest_cuda, oldest_minimum = CUDA_VARIANTS[-1]
        return {
            "variant": CPU,
            "reason": f"driver {version} is older than {_fmt(oldest_minimum)}, which CUDA "
            f"{oldest_cuda[0]}.{oldest_cuda[1]} ({oldest_variant}, the oldest build mapped "
            "here) needs: torch would not use the GPUs; upgrade the driver",
        }
    cuda = (*parsed, 0)[:2]
    for variant, built, _driver in CUDA_VARIANTS:
        # A build for CUDA X.Y runs with any X.Z runtime/driver where Z >= Y;
        # never across a major version.
        if cuda[0] == built[0] and cuda[1] >= built[1]:
            return {
                "variant": variant,
                "reason": f"CUDA {version} runs torch built for CUDA {built[0]}.{built[1]}",
            }
    return {
        "variant": CPU,
        "reason": f"CUDA {version} has no torch build mapped here "
        f"({', '.join(v for v, _cuda, _driver in CUDA_VARIANTS)})",
    }


def torch_variant(version: object) -> str:
    """'580.95.05' → 'cu130', '570.172.08' → 'cu128', '12.6' → 'cu126', '' → 'cpu'."""
    return torch_variant_info(version)["variant"]


def torch_index_url(variant: str, base_url: str = INDEX_BASE_URL) -> str:
    """'cu128' → 'https://download.pytorch.org/whl/cu128'."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown torch variant {variant!r}: use one of {', '.join(VARIANTS)}")
    return f"{base_url.rstrip('/')}/{variant}"


def torch_pin(packages: Iterable[str]) -> str:
    """The version pinned by the one ``torch==X`` entry of a requirements list."""
    pins = [m.group("version") for p in packages if (m := _TORCH_PIN.match(str(p).strip()))]
    if len(pins) != 1:
        raise ValueError(
            f"pytorch_packages must pin torch exactly once (torch==X), found {len(pins)}"
        )
    return pins[0]


def torch_pin_variant(packages: Iterable[str]) -> str:
    """The variant written into the pin ('torch==2.13.0+cpu' → 'cpu'), '' when none."""
    version = torch_pin(packages)
    return version.partition("+")[2]


def torch_shared_variant(variants: Iterable[str]) -> str:
    """One variant for a venv shared by nodes with different drivers.

    The oldest CUDA build any node needs (it also runs on newer drivers and
    on CPU-only nodes); ``cpu`` only when no node has a GPU driver.
    """
    wanted = set(variants)
    unknown = wanted - set(VARIANTS)
    if unknown:
        raise ValueError(f"unknown torch variant(s) {', '.join(sorted(unknown))}")
    for variant, _cuda, _driver in reversed(CUDA_VARIANTS):
        if variant in wanted:
            return variant
    return CPU


def torch_pip_args(find_links: str, index_url: str) -> list[str]:
    """pip arguments: a wheelhouse alone is used with --no-index."""
    args: list[str] = []
    if find_links and not index_url:
        args.append("--no-index")
    if find_links:
        args += ["--find-links", find_links]
    if index_url:
        args += ["--index-url", index_url]
    return args


def torch_version_ok(installed: str, pinned: str) -> bool:
    """PEP 440 ``==``: a pin without '+local' accepts any local build of that version."""
    return _version_matches(installed, pinned)


_REPORT_DEFAULTS: dict[str, Any] = {
    "torch": "",
    "cuda_build": None,
    "cuda_available": False,
    "device_count": 0,
    "devices": [],
    "nccl": None,
    "cached": False,
    "verified_at": None,
}


def torch_report(output: object) -> dict:
    """files/verify_torch.py's JSON line as a dict with every key; 'error' when unreadable."""
    if isinstance(output, Mapping):
        data = dict(output)
    else:
        text = str(output).strip()
        try:
            data = json.loads(text.splitlines()[-1] if text else "")
        except ValueError:
            data = {"error": f"verify_torch.py printed no report: {text[:300]!r}"}
        if not isinstance(data, dict):
            data = {"error": f"verify_torch.py printed no report: {text[:300]!r}"}
    return {**_REPORT_DEFAULTS, **data}


def torch_report_problems(report: object, expected_gpus: object, pinned: str) -> list[str]:
    """What is wrong in files/verify_torch.py's report; [] when all is right.

    ``report`` is its output or ``torch_report`` of it; ``expected_gpus`` is
    the number of GPUs torch must see (pytorch_expected_gpus, by default the
    node's count in gres.conf); ``pinned`` the version pinned in pytorch_packages.
    """
    data = torch_report(report)
    if data.get("error"):
        return [str(data["error"])]
    problems = []
    expected = int(expected_gpus)
    if not torch_version_ok(data["torch"], pinned):
        problems.append(f"torch is {data['torch']}, pytorch_packages pins torch=={pinned}")
    available = bool(data["cuda_available"])
    if available != (expected > 0):
        problems.append(f"torch.cuda.is_available() is {available}, expected {expected > 0}")
    count = int(data["device_count"] or 0)
    if count != expected:
        problems.append(f"torch.cuda.device_count() is {count}, expected {expected}")
    return problems


def venv_missing(
    read: Mapping[str, Any], requirements: Sequence[str], variant: str = ""
) -> list[str]:
    """Why each requirement is not met in a venv, from the probe's run of its python.

    ``read`` is node_state's result of a command that ran the venv's python
    with venv_reqs.VERSIONS_SCRIPT ({rc, stdout, stderr}); a failed or
    unreadable run is one reason (the venv_packages module then asks again).
    """
    if not isinstance(read, Mapping) or read.get("rc") != 0:
        err = str(read.get("stderr", "") if isinstance(read, Mapping) else "").strip()[-300:]
        return [f"the venv's python did not list its packages: {err or 'not run'}"]
    try:
        versions = json.loads(str(read.get("stdout", "")))
    except ValueError:
        return ["the venv's python printed no package list"]
    if not isinstance(versions, dict):
        return ["the venv's python printed no package list"]
    return missing(list(requirements), variant, versions)


class FilterModule:
    """pytorch role filters; ValueError becomes an Ansible filter error with the same message."""

    def filters(self) -> dict:
        return {
            name: ansible_errors(func)
            for name, func in {
                "torch_variant": torch_variant,
                "torch_variant_info": torch_variant_info,
                "torch_index_url": torch_index_url,
                "torch_pin": torch_pin,
                "torch_pin_variant": torch_pin_variant,
                "torch_shared_variant": torch_shared_variant,
                "torch_pip_args": torch_pip_args,
                "torch_version_ok": torch_version_ok,
                "torch_report": torch_report,
                "torch_report_problems": torch_report_problems,
                "venv_missing": venv_missing,
            }.items()
        }
