"""The torch build per node and the check of what torch sees.

Imports plugins/filter/torch_variant.py directly; runs the
role's files/verify_torch.py with this venv's CPU torch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ROLE = ROOT / "roles" / "pytorch"
sys.path.insert(0, str(ROOT / "plugins/filter"))

import torch_variant as tv  # noqa: E402


@pytest.mark.parametrize(
    ("version", "variant"),
    [
        # NVIDIA drivers: CUDA 13.0 ≥ 580.65.06, 12.8 ≥ 570.26, 12.6 ≥ 560.28.03
        ("580.95.05", "cu130"),
        ("580.65.06", "cu130"),
        ("590.44.01", "cu130"),
        ("580", "cu130"),
        ("575.57.08", "cu128"),
        ("570.172.08", "cu128"),
        ("570.26", "cu128"),
        ("570", "cu128"),
        ("565.57.01", "cu126"),
        ("560.35.03", "cu126"),
        ("560.28.03", "cu126"),
        ("560", "cu126"),
        ("560.28.02", "cpu"),
        ("555.42.06", "cpu"),
        ("550.163.01", "cpu"),
        ("535.247.01", "cpu"),
        ("535", "cpu"),
        # CUDA versions
        ("13.0", "cu130"),
        ("13.1", "cu130"),
        ("12.9", "cu128"),
        ("12.8", "cu128"),
        ("12.7", "cu126"),
        ("12.6", "cu126"),
        ("12.4", "cpu"),
        ("12", "cpu"),
        ("11.8", "cpu"),
        ("14.0", "cpu"),
        # no driver
        ("", "cpu"),
        (None, "cpu"),
        (" 580.95.05\n", "cu130"),
    ],
)
def test_variant_from_driver_or_cuda(version, variant) -> None:
    assert tv.torch_variant(version) == variant


@pytest.mark.parametrize(
    ("version", "reason"),
    [
        ("580.95.05", "driver 580.95.05 >= 580.65.06, the oldest for CUDA 13.0"),
        ("570.172.08", "driver 570.172.08 >= 570.26, the oldest for CUDA 12.8"),
        ("535.247.01", "driver 535.247.01 is older than 560.28.03, which CUDA 12.6 (cu126"),
        ("", "no NVIDIA driver on the node"),
        ("12.4", "CUDA 12.4 has no torch build mapped here (cu130, cu128, cu126)"),
    ],
)
def test_variant_comes_with_a_reason(version, reason) -> None:
    assert reason in tv.torch_variant_info(version)["reason"]


@pytest.mark.parametrize("bad", ["abc", "580.x", "-1", "580..1", "v12.8"])
def test_bad_version_is_rejected(bad) -> None:
    with pytest.raises(ValueError, match="neither an NVIDIA driver version"):
        tv.torch_variant(bad)


@pytest.mark.parametrize("variant", ["cu130", "cu128", "cu126", "cpu"])
def test_index_url(variant) -> None:
    assert tv.torch_index_url(variant) == f"https://download.pytorch.org/whl/{variant}"
    assert (
        tv.torch_index_url(variant, "http://mirror.lab/whl/") == f"http://mirror.lab/whl/{variant}"
    )


def test_unknown_variant_has_no_index() -> None:
    with pytest.raises(ValueError, match="unknown torch variant 'cu118': use one of cu130"):
        tv.torch_index_url("cu118")


@pytest.mark.parametrize(
    ("packages", "version", "variant"),
    [
        (["torch==2.13.0+cpu", "numpy"], "2.13.0+cpu", "cpu"),
        (["numpy", "torch==2.13.0"], "2.13.0", ""),
        (["torch==2.13.0+cu128"], "2.13.0+cu128", "cu128"),
    ],
)
def test_pin_and_its_variant(packages, version, variant) -> None:
    assert tv.torch_pin(packages) == version
    assert tv.torch_pin_variant(packages) == variant


@pytest.mark.parametrize(
    "packages", [["numpy"], ["torch>=2.13", "numpy"], ["torch==2.13.0", "torch==2.12.0"]]
)
def test_torch_must_be_pinned_once(packages) -> None:
    with pytest.raises(ValueError, match="must pin torch exactly once"):
        tv.torch_pin(packages)


@pytest.mark.parametrize(
    ("variants", "shared"),
    [
        (["cu130", "cu130"], "cu130"),
        (["cu130", "cu128", "cpu"], "cu128"),
        (["cu126", "cu130"], "cu126"),
        (["cpu", "cpu"], "cpu"),
        ([], "cpu"),
    ],
)
def test_shared_venv_takes_the_oldest_cuda_build(variants, shared) -> None:
    assert tv.torch_shared_variant(variants) == shared


def test_shared_venv_rejects_unknown_variant() -> None:
    with pytest.raises(ValueError, match="unknown torch variant"):
        tv.torch_shared_variant(["cu130", "rocm6.4"])


@pytest.mark.parametrize(
    ("find_links", "index_url", "args"),
    [
        ("/opt/wheelhouse", "", ["--no-index", "--find-links", "/opt/wheelhouse"]),
        (
            "",
            "https://download.pytorch.org/whl/cu130",
            ["--index-url", "https://download.pytorch.org/whl/cu130"],
        ),
        (
            "/opt/wheelhouse",
            "https://pypi.org/simple",
            ["--find-links", "/opt/wheelhouse", "--index-url", "https://pypi.org/simple"],
        ),
        ("", "", []),
    ],
)
def test_pip_args(find_links, index_url, args) -> None:
    assert tv.torch_pip_args(find_links, index_url) == args


def test_docker_cluster_keeps_its_wheelhouse_install() -> None:
    """inventory/local: torch==2.13.0+cpu, wheelhouse only, no index, as before."""
    local = yaml.safe_load(
        (ROOT / "inventory" / "local" / "group_vars" / "slurm_compute" / "pytorch.yml").read_text()
    )
    assert tv.torch_pin_variant(local["pytorch_packages"]) == "cpu"
    assert local["pytorch_index_url"] == ""
    assert tv.torch_pip_args(local["pytorch_find_links"], "") == [
        "--no-index",
        "--find-links",
        "/opt/wheelhouse",
    ]


@pytest.mark.parametrize(
    ("installed", "pinned", "ok"),
    [
        ("2.13.0+cpu", "2.13.0+cpu", True),
        ("2.13.0+cu130", "2.13.0", True),
        ("2.13.0", "2.13.0", True),
        ("2.13.0+cu128", "2.13.0+cpu", False),
        ("2.12.1+cu128", "2.13.0", False),
        ("2.13.0", "2.13.0+cu130", False),
    ],
)
def test_installed_version_against_pin(installed, pinned, ok) -> None:
    assert tv.torch_version_ok(installed, pinned) is ok


CPU_REPORT = {
    "torch": "2.13.0+cpu",
    "cuda_build": None,
    "cuda_available": False,
    "device_count": 0,
    "devices": [],
    "nccl": None,
}
GPU_REPORT = {
    "torch": "2.13.0+cu130",
    "cuda_build": "13.0",
    "cuda_available": True,
    "device_count": 8,
    "devices": ["NVIDIA H100 80GB HBM3"] * 8,
    "nccl": "2.27.7",
}


@pytest.mark.parametrize(
    ("report", "expected", "pinned", "problems"),
    [
        (CPU_REPORT, 0, "2.13.0+cpu", []),
        (json.dumps(CPU_REPORT), "0", "2.13.0", []),
        (GPU_REPORT, 8, "2.13.0", []),
        (
            CPU_REPORT,
            1,
            "2.13.0+cpu",
            [
                "torch.cuda.is_available() is False, expected True",
                "torch.cuda.device_count() is 0, expected 1",
            ],
        ),
        (
            {**GPU_REPORT, "device_count": 4},
            8,
            "2.13.0",
            ["torch.cuda.device_count() is 4, expected 8"],
        ),
        (
            GPU_REPORT,
            0,
            "2.13.0",
            [
                "torch.cuda.is_available() is True, expected False",
                "torch.cuda.device_count() is 8, expected 0",
            ],
        ),
        (GPU_REPORT, 8, "2.12.0", ["torch is 2.13.0+cu130, pytorch_packages pins torch==2.12.0"]),
        (
            {"error": "import torch failed: ImportError: libcudart.so.13"},
            8,
            "2.13.0",
            ["import torch failed: ImportError: libcudart.so.13"],
        ),
        ("Traceback (most recent call last):", 0, "2.13.0", ["printed no report"]),
        ("", 0, "2.13.0", ["printed no report"]),
    ],
)
def test_report_problems_name_both_values(report, expected, pinned, problems) -> None:
    found = tv.torch_report_problems(report, expected, pinned)
    assert len(found) == len(problems)
    for text, wanted in zip(found, problems, strict=True):
        assert wanted in text


def test_verify_script_reports_this_cpu_torch() -> None:
    torch = pytest.importorskip("torch")
    result = subprocess.run(
        [sys.executable, str(ROLE / "files" / "verify_torch.py"), "--fresh", "--no-write"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = tv.torch_report(result.stdout)
    assert report["torch"] == torch.__version__
    if torch.version.cuda is None:  # the CPU build of the control machine
        assert report["cuda_available"] is False
        assert report["device_count"] == 0
        assert report["nccl"] is None
        assert tv.torch_report_problems(result.stdout, 0, torch.__version__) == []
        assert tv.torch_report_problems(result.stdout, 2, torch.__version__) == [
            "torch.cuda.is_available() is False, expected True",
            "torch.cuda.device_count() is 0, expected 2",
        ]


def test_argument_specs_match_defaults() -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert set(options) == set(defaults)
    for name, value in defaults.items():
        if isinstance(value, str) and "{{" in value and "default" not in options[name]:
            # A templated default of an int or bool is not a spec's default
            # (antsibull-docs' schema refuses it): the description says it.
            assert options[name]["type"] in ("int", "bool"), name
            assert "Default" in options[name]["description"], name
            continue
        assert options[name]["default"] == value, name
    assert set(options["pytorch_variant"]["choices"]) == {"", *tv.VARIANTS}


def test_venv_missing_judges_the_probes_read_as_the_module_does() -> None:
    """site.yml's probe runs the venv's python with the module's version script."""
    from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.venv_reqs import (
        VERSIONS_SCRIPT,
    )

    names = ["json5-not-here", "pip"]
    proc = subprocess.run(
        [sys.executable, "-c", VERSIONS_SCRIPT, *names], capture_output=True, text=True, check=True
    )
    read = {"rc": 0, "stdout": proc.stdout, "stderr": ""}
    assert tv.venv_missing(read, ["pip"]) == []
    assert tv.venv_missing(read, ["json5-not-here", "pip==0.0.1"]) == [
        "json5-not-here is not installed",
        f"pip {json.loads(proc.stdout)['pip']} installed, pip==0.0.1 wanted",
    ]
    torch = {"rc": 0, "stdout": '{"torch": "2.13.0+cpu"}', "stderr": ""}
    assert tv.venv_missing(torch, ["torch==2.13.0"], "cpu") == []
    assert tv.venv_missing(torch, ["torch==2.13.0"], "cu128") == [
        "torch 2.13.0+cpu installed, variant cu128 wanted"
    ]
    # A run that failed, was not run (untrusted), or printed no list: one reason.
    assert tv.venv_missing({"rc": 127, "stdout": "", "stderr": "x: not found"}, ["torch"]) == [
        "the venv's python did not list its packages: x: not found"
    ]
    assert tv.venv_missing({"rc": None, "stdout": "", "stderr": ""}, ["torch"]) == [
        "the venv's python did not list its packages: not run"
    ]
    assert tv.venv_missing({"rc": 0, "stdout": "oops", "stderr": ""}, ["torch"]) == [
        "the venv's python printed no package list"
    ]
