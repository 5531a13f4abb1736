"""The cuda role's decisions: repository, packages and pins per distribution, and PCI detection.

Imports plugins/filter/cuda.py directly and feeds it the role's
real table (roles/cuda/vars/main.yml); runs the real PCI detection script
against fake sysfs trees.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ROLE = ROOT / "roles" / "cuda"
sys.path.insert(0, str(ROOT / "plugins/filter"))

import cuda  # noqa: E402

PLATFORMS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__cuda_platforms"]
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
NVIDIA = "https://developer.download.nvidia.com/compute/cuda/repos"
KERNEL = "6.1.0-26-amd64"


@pytest.mark.parametrize(
    ("distribution", "major", "arch", "url"),
    [
        ("Debian", "12", "x86_64", f"{NVIDIA}/debian12/x86_64/"),
        ("Ubuntu", "22", "x86_64", f"{NVIDIA}/ubuntu2204/x86_64/"),
        ("Ubuntu", "24", "x86_64", f"{NVIDIA}/ubuntu2404/x86_64/"),
        ("Ubuntu", "24", "aarch64", f"{NVIDIA}/ubuntu2404/sbsa/"),
        ("Debian", 12, "aarch64", f"{NVIDIA}/debian12/sbsa/"),
    ],
)
def test_nvidia_repository_per_distribution(distribution, major, arch, url) -> None:
    repo = cuda.cuda_repo(PLATFORMS, distribution, major, arch)
    assert repo["url"] == url
    assert repo["keyring_package"] == "cuda-keyring"
    assert repo["keyring_deb"] == "cuda-keyring_1.1-1_all.deb"
    assert repo["keyring_url"] == url + "cuda-keyring_1.1-1_all.deb"


def test_repository_mirror_and_keyring_version() -> None:
    repo = cuda.cuda_repo(PLATFORMS, "Debian", "12", "x86_64", "http://mirror.lab/cuda/", "1.2-1")
    assert (
        repo["keyring_url"] == "http://mirror.lab/cuda/debian12/x86_64/cuda-keyring_1.2-1_all.deb"
    )


@pytest.mark.parametrize(
    ("distribution", "major"),
    [("Debian", "13"), ("Debian", "11"), ("Ubuntu", "20"), ("Rocky", "9")],
)
def test_unsupported_distribution_names_it_and_the_supported_ones(distribution, major) -> None:
    with pytest.raises(ValueError) as err:
        cuda.cuda_repo(PLATFORMS, distribution, major, "x86_64")
    assert f"unsupported distribution {distribution} {major}" in str(err.value)
    assert "Debian 12, Ubuntu 22.04, Ubuntu 24.04" in str(err.value)
    with pytest.raises(ValueError, match=f"{distribution} {major}"):
        cuda.cuda_packages(PLATFORMS, distribution, major, "nvidia", "580.95.05")


def test_unsupported_architecture() -> None:
    with pytest.raises(ValueError, match=r"unsupported architecture ppc64le: .*x86_64, aarch64"):
        cuda.cuda_repo(PLATFORMS, "Ubuntu", "24", "ppc64le")


# (distribution, major, source, driver, toolkit, modules, fabric manager) → expected packages
PACKAGE_TABLE = [
    pytest.param(
        ("Debian", "12", "nvidia", "580.95.05", "13-0", "open", False),
        [f"linux-headers-{KERNEL}"],
        ["nvidia-open", "nvidia-persistenced"],
        ["cuda-toolkit-13-0"],
        "580.95.05-*",
        id="debian12-nvidia-open",
    ),
    pytest.param(
        ("Debian", "12", "nvidia", "580", "", "proprietary", True),
        [f"linux-headers-{KERNEL}"],
        ["cuda-drivers", "nvidia-persistenced"],
        ["nvidia-fabricmanager-580"],
        "580.*",
        id="debian12-nvidia-branch-fabricmanager-no-toolkit",
    ),
    pytest.param(
        ("Ubuntu", "22", "nvidia", "570.172.08", "12-8", "open", False),
        [f"linux-headers-{KERNEL}"],
        ["nvidia-open"],
        ["cuda-toolkit-12-8"],
        "570.172.08-*",
        id="ubuntu2204-nvidia-open",
    ),
    pytest.param(
        ("Ubuntu", "24", "nvidia", "580.95.05", "13-0", "proprietary", True),
        [f"linux-headers-{KERNEL}"],
        ["cuda-drivers"],
        ["nvidia-fabricmanager-580", "cuda-toolkit-13-0"],
        "580.95.05-*",
        id="ubuntu2404-nvidia-proprietary-fabricmanager",
    ),
    pytest.param(
        ("Debian", "12", "distribution", "535.247.01", "11-8", "proprietary", False),
        [f"linux-headers-{KERNEL}", "firmware-misc-nonfree"],
        ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-smi", "libcuda1"],
        ["nvidia-persistenced", "nvidia-cuda-toolkit"],
        "535.247.01-*",
        id="debian12-distribution",
    ),
    pytest.param(
        ("Ubuntu", "22", "distribution", "570", "11-5", "open", True),
        [f"linux-headers-{KERNEL}"],
        ["nvidia-headless-570-server-open", "nvidia-utils-570-server"],
        ["nvidia-fabricmanager-570", "nvidia-cuda-toolkit"],
        "570.*",
        id="ubuntu2204-distribution-open-fabricmanager",
    ),
    pytest.param(
        ("Ubuntu", "24", "distribution", "580.95.05", "", "proprietary", False),
        [f"linux-headers-{KERNEL}"],
        ["nvidia-headless-580-server", "nvidia-utils-580-server"],
        [],
        "580.95.05-*",
        id="ubuntu2404-distribution-no-toolkit",
    ),
]


@pytest.mark.parametrize(("args", "prerequisites", "driver", "extras", "pin"), PACKAGE_TABLE)
def test_packages_per_distribution_and_source(args, prerequisites, driver, extras, pin) -> None:
    plan = cuda.cuda_packages(PLATFORMS, *args, kernel=KERNEL)
    assert plan["prerequisites"] == prerequisites
    assert plan["driver"] == driver
    assert plan["extras"] == extras
    assert plan["pin"] == pin
    assert plan["nonfree_sources"] is (args[0] == "Debian" and args[2] == "distribution")


@pytest.mark.parametrize("key", sorted(PLATFORMS))
def test_role_defaults_make_a_plan_on_every_supported_distribution(key) -> None:
    distribution, major = key.split("-")
    plan = cuda.cuda_packages(
        PLATFORMS,
        distribution,
        major,
        DEFAULTS["cuda_install_source"],
        DEFAULTS["cuda_driver_version"],
        DEFAULTS["cuda_toolkit_version"],
        DEFAULTS["cuda_kernel_modules"],
        DEFAULTS["cuda_fabricmanager"],
        KERNEL,
    )
    assert plan["driver"][0] == "nvidia-open"
    assert plan["extras"][-1] == "cuda-toolkit-13-0"
    assert plan["pin"] == "580.95.05-*"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(
            ("Debian", "12", "distribution", "580.95.05", "11-8", "proprietary", False),
            "Debian 12 packages driver branch 535, not 580",
            id="debian-distribution-wrong-branch",
        ),
        pytest.param(
            ("Debian", "12", "distribution", "535.247.01", "13-0", "proprietary", False),
            "Debian 12 packages CUDA toolkit 11-8, not 13-0",
            id="debian-distribution-wrong-toolkit",
        ),
        pytest.param(
            ("Debian", "12", "distribution", "535", "11-8", "open", False),
            "set cuda_kernel_modules: proprietary",
            id="debian-distribution-no-open-modules",
        ),
        pytest.param(
            ("Debian", "12", "distribution", "535", "11-8", "proprietary", True),
            "have no NVIDIA fabric manager: use cuda_install_source: nvidia",
            id="debian-distribution-no-fabricmanager",
        ),
        pytest.param(
            ("Ubuntu", "24", "distribution", "580", "13-0", "open", False),
            "Ubuntu 24.04 packages CUDA toolkit 12-0, not 13-0",
            id="ubuntu-distribution-wrong-toolkit",
        ),
        pytest.param(
            ("Ubuntu", "24", "nvidia", "latest", "13-0", "open", False),
            "cuda_driver_version='latest' is not a driver version",
            id="driver-not-a-version",
        ),
        pytest.param(
            ("Ubuntu", "24", "nvidia", "58", "13-0", "open", False),
            "cuda_driver_version='58' is not a driver version",
            id="driver-too-short",
        ),
        pytest.param(
            ("Ubuntu", "24", "nvidia", "580", "13.0", "open", False),
            "cuda_toolkit_version='13.0': use major-minor such as '13-0'",
            id="toolkit-with-dot",
        ),
        pytest.param(
            ("Ubuntu", "24", "runfile", "580", "13-0", "open", False),
            "cuda_install_source='runfile': use one of nvidia, distribution",
            id="unknown-source",
        ),
        pytest.param(
            ("Ubuntu", "24", "nvidia", "580", "13-0", "closed", False),
            "cuda_kernel_modules='closed': use one of open, proprietary",
            id="unknown-modules",
        ),
    ],
)
def test_impossible_combinations_are_rejected_with_the_fix(args, expected) -> None:
    with pytest.raises(ValueError) as err:
        cuda.cuda_packages(PLATFORMS, *args)
    assert expected in str(err.value)


@pytest.mark.parametrize(
    ("version", "pin", "branch"),
    [
        ("580.95.05", "580.95.05-*", "580"),
        ("580", "580.*", "580"),
        ("570.172.08", "570.172.08-*", "570"),
        ("535.247.01", "535.247.01-*", "535"),
        ("580.95", "580.95-*", "580"),
    ],
)
def test_driver_pin(version, pin, branch) -> None:
    assert cuda.cuda_driver_pin(version) == pin
    assert cuda.cuda_driver_branch(version) == branch


@pytest.mark.parametrize(
    ("loaded", "wanted", "ok"),
    [
        ("580.95.05", "580.95.05", True),
        ("580.82.07", "580", True),
        ("570.172.08", "580", False),
        ("580.82.07", "580.95.05", False),
        ("", "580", False),
        (" 580.95.05\n", "580.95.05", True),
    ],
)
def test_running_driver_matches_the_pin(loaded, wanted, ok) -> None:
    assert cuda.cuda_driver_matches(loaded, wanted) is ok


@pytest.mark.parametrize(
    ("versions", "expected", "odd"),
    [
        ({"gpu01": "580.95.05", "gpu02": "580.95.05"}, "580.95.05", {}),
        (
            {"gpu01": "580.95.05", "gpu02": "570.172.08", "gpu03": "580.95.05"},
            "580.95.05",
            {"gpu02": "570.172.08"},
        ),
        ({"gpu01": "570.172.08", "gpu02": "580.95.05"}, "570.172.08", {"gpu02": "580.95.05"}),
        ({}, "", {}),
    ],
)
def test_driver_outliers_name_the_odd_node(versions, expected, odd) -> None:
    assert cuda.cuda_version_outliers(versions) == {"expected": expected, "odd": odd}


def _fake_device(root: Path, address: str, vendor: str, klass: str) -> None:
    device = root / address
    device.mkdir(parents=True)
    (device / "vendor").write_text(vendor + "\n")
    (device / "class").write_text(klass + "\n")


def _detect(devices: Path, root: Path | None = None) -> subprocess.CompletedProcess:
    # root: where the script looks for container marks; a fresh folder by default,
    # so that the result does not depend on whether the tests run in a container.
    root = root or devices.parent / "root"
    root.mkdir(exist_ok=True)
    return subprocess.run(
        ["sh", str(ROLE / "files" / "nvidia-pci-devices"), str(devices), str(root)],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )


def test_pci_detection_counts_nvidia_gpus_only(tmp_path) -> None:
    devices = tmp_path / "devices"
    _fake_device(devices, "0000:00:02.0", "0x8086", "0x030000")  # Intel iGPU
    _fake_device(devices, "0000:17:00.0", "0x10de", "0x030200")  # H100 SXM (3D controller)
    _fake_device(devices, "0000:17:00.1", "0x10de", "0x040300")  # GPU's HDMI audio
    _fake_device(devices, "0000:65:00.0", "0x10de", "0x030000")  # RTX (VGA)
    _fake_device(devices, "0000:05:00.0", "0x10de", "0x068000")  # NVSwitch
    _fake_device(devices, "0000:3b:00.0", "0x15b3", "0x020700")  # ConnectX
    result = _detect(devices)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "nvswitch 0000:05:00.0",
        "gpu 0000:17:00.0",
        "gpu 0000:65:00.0",
    ]
    assert cuda.parse_pci_devices(result.stdout) == {
        "gpu": ["0000:17:00.0", "0000:65:00.0"],
        "nvswitch": ["0000:05:00.0"],
        "container": False,
    }


@pytest.mark.parametrize("tree", ["empty", "missing", "no-nvidia"])
def test_pci_detection_without_nvidia_prints_nothing(tmp_path, tree) -> None:
    root = tmp_path / "devices"
    if tree != "missing":
        root.mkdir()
    if tree == "no-nvidia":
        _fake_device(root, "0000:00:02.0", "0x8086", "0x030000")
        _fake_device(root, "0000:03:00.0", "0x1002", "0x030000")  # AMD
    result = _detect(root)
    assert (result.returncode, result.stdout) == (0, "")
    assert cuda.parse_pci_devices(result.stdout) == {"gpu": [], "nvswitch": [], "container": False}


@pytest.mark.parametrize("mark", [".dockerenv", "run/.containerenv"])
def test_pci_detection_says_when_it_runs_in_a_container(tmp_path, mark) -> None:
    devices, root = tmp_path / "devices", tmp_path / "root"
    _fake_device(devices, "0000:17:00.0", "0x10de", "0x030200")
    (root / mark).parent.mkdir(parents=True, exist_ok=True)
    (root / mark).touch()
    result = _detect(devices, root)
    assert result.stdout.splitlines() == ["gpu 0000:17:00.0", "container yes"]
    assert cuda.parse_pci_devices(result.stdout) == {
        "gpu": ["0000:17:00.0"],
        "nvswitch": [],
        "container": True,
    }


def test_argument_specs_match_defaults() -> None:
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert set(options) == set(DEFAULTS)
    for name, value in DEFAULTS.items():
        assert options[name]["default"] == value, name
