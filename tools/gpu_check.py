"""`make gpu-check`: the project's GPU code against this machine's real NVIDIA hardware.

Read-only and offline: runs nvidia-smi, lspci and the cuda role's PCI script,
reads sysfs and /proc, and where a CUDA torch is importable runs the
ddp_smoke package under ``torchrun --standalone`` (NCCL, one rank per GPU)
and a device-to-device copy on each GPU. The decisions are those of the
roles' own code (tools/gpu_facts.py). Writes results/gpu-check-<UTC>.json
and .txt; exits 1 when the project's code disagrees with the hardware, 0
otherwise (also where there is no GPU or no CUDA torch: it says so).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import gpu_facts as facts
from gpu_facts import Check, Observed

COMMAND_TIMEOUT_S = 60.0
TORCH_TIMEOUT_S = 180.0
SMOKE_TIMEOUT_S = 300.0
COPY_TIMEOUT_S = 180.0
# Seconds for the smoke job's rendezvous and each collective (ddp_smoke run --timeout).
SMOKE_COLLECTIVE_TIMEOUT_S = 60


def run(argv: list[str], timeout: float = COMMAND_TIMEOUT_S, **kwargs: Any) -> tuple[int, str]:
    """(exit status, stdout, + stderr on failure); 127 when it cannot start, 124 on timeout.

    The command runs in its own session, so that on timeout its whole process
    group goes (torchrun's workers too, which would otherwise hold the GPUs).
    """
    try:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            **kwargs,
        )
    except OSError as exc:
        return 127, str(exc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return 124, f"{argv[0]} did not finish within {timeout:.0f} s\n{out}{err}"
    return proc.returncode, out + (err if proc.returncode else "")


def read(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


# --- hardware --------------------------------------------------------------


def nvidia_smi() -> tuple[str | None, str | None, str | None]:
    """(query output, -q -x output, error); all None without nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None, None, None
    rc, query = run([smi, *facts.SMI_QUERY])
    if rc != 0:
        return None, None, f"nvidia-smi {' '.join(facts.SMI_QUERY)} failed (rc {rc}): {query[:300]}"
    rc, xml = run([smi, "-q", "-x"])
    return query, xml if rc == 0 else None, None


def pci_script(*args: str) -> str:
    """Output of the cuda role's files/nvidia-pci-devices (as its detect.yml runs it)."""
    rc, out = run(["sh", str(facts.PCI_SCRIPT), *args])
    return out if rc == 0 else ""


def pci_from_lspci(text: str) -> str:
    """The role's script run on a sysfs-like tree made from `lspci -nn` (no container marks)."""
    with tempfile.TemporaryDirectory(prefix="gpu-check-pci-") as tmp:
        tree = Path(tmp) / "devices"
        for address, files in facts.sysfs_tree(facts.parse_lspci(text)).items():
            for name, value in files.items():
                (tree / address).mkdir(parents=True, exist_ok=True)
                (tree / address / name).write_text(value + "\n")
        return pci_script(str(tree), tmp)


def slurmd_c() -> str | None:
    """`slurmd -C` (the node layout slurm_node_info parses), None without slurmd."""
    slurmd = shutil.which("slurmd")
    if slurmd is None:
        return None
    return run([slurmd, "-C"])[1]


def observe() -> Observed:
    query, xml, error = nvidia_smi()
    lspci = None
    if shutil.which("lspci"):
        rc, out = run(["lspci", "-nn", "-D"])
        lspci = out if rc == 0 else None
    return Observed(
        smi_query=query,
        smi_xml=xml,
        smi_error=error,
        device_nodes=tuple(sorted(glob.glob(facts.DEV_GLOB))),
        pci_sysfs=pci_script(),
        lspci=lspci,
        pci_lspci=pci_from_lspci(lspci) if lspci is not None else None,
        proc_version=read("/proc/driver/nvidia/version"),
        module_version=read("/sys/module/nvidia/version"),
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        slurmd_c=slurmd_c(),
    )


# --- torch -----------------------------------------------------------------


def torch_pythons(given: list[str]) -> list[str]:
    """Pythons to look for torch in: --python, else this one, then python3 on PATH, /usr/bin."""
    if given:
        return given
    found = [sys.executable, shutil.which("python3") or "", "/usr/bin/python3"]
    unique: dict[tuple[str, str], str] = {}
    for path in found:
        if path and os.path.exists(path):
            # A venv's python links to the system one: same binary, other packages.
            key = (os.path.realpath(path), os.path.dirname(os.path.abspath(path)))
            unique.setdefault(key, path)
    return list(unique.values())


def torch_report(python: str) -> dict[str, Any]:
    """The pytorch role's files/verify_torch.py under ``python`` (fresh, nothing kept)."""
    rc, out = run([python, str(facts.VERIFY_TORCH), "--fresh", "--no-write"], TORCH_TIMEOUT_S)
    report = facts.torch_variant.torch_report(out if rc == 0 else f"rc {rc}: {out}")
    return {**report, "python": python}


def find_torch(pythons: list[str]) -> dict[str, Any] | None:
    """The first python whose torch sees GPUs, else the first report with a torch, else None."""
    reports = [torch_report(p) for p in pythons]
    for report in reports:
        if facts.cuda_torch(report):
            return report
    return next((r for r in reports if not r.get("error")), reports[0] if reports else None)


def smoke_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(facts.TRAINING), env.get("PYTHONPATH", "")) if p
    )
    return env


def run_smoke(python: str, nproc: int, result_dir: Path) -> tuple[dict[str, Any], str]:
    """ddp_smoke under torchrun --standalone; (its report's summary, log tail)."""
    argv = [
        python,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "--max-restarts=0",
        "-m",
        "ddp_smoke",
        "run",
        "--mode",
        "torchrun",
        "--label",
        "gpu-check",
        "--result-dir",
        str(result_dir),
        "--expected-world-size",
        str(nproc),
        "--timeout",
        str(SMOKE_COLLECTIVE_TIMEOUT_S),
        "--measure",
        "sweep" if nproc > 1 else "none",
    ]
    rc, log = run(argv, SMOKE_TIMEOUT_S, env=smoke_env())
    if str(facts.TRAINING) not in sys.path:
        sys.path.insert(0, str(facts.TRAINING))
    from ddp_smoke.report import report  # standard library only

    verdict = report(result_dir, nproc).to_dict()
    rank0 = read(str(result_dir / "rank-0.json"))
    summary = facts.smoke_summary(verdict, json.loads(rank0) if rank0 else None)
    return {**summary, "torchrun_rc": rc, "command": " ".join(argv)}, log[-3000:]


def run_copy(python: str) -> dict[str, Any]:
    script = str(Path(__file__).with_name("gpu_copy_bandwidth.py"))
    rc, out = run([python, script], COPY_TIMEOUT_S)
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"devices": [], "error": f"rc {rc}: {out[-300:]!r}"}


def torch_part(hw: dict[str, Any], obs: Observed, args: argparse.Namespace, out: Path) -> dict:
    """torch, smoke job and copy bandwidth: checks, facts and notes."""
    part: dict[str, Any] = {"checks": [], "notes": [], "torch": None}
    if args.no_torch:
        part["notes"].append("torch parts skipped (--no-torch)")
        return part
    report = find_torch(torch_pythons(args.python))
    part["torch"] = report
    if report is None:
        part["notes"].append("no python found to look for torch in")
        return part
    expected = facts.visible_count(obs.cuda_visible_devices, hw["gpu_count"])
    part["checks"].append(facts.check_torch(report, expected))
    if not facts.cuda_torch(report):
        part["notes"].append(
            f"no CUDA-enabled torch with a GPU ({report['python']}: torch "
            f"{report.get('torch') or '-'}, CUDA build {report.get('cuda_build')}): "
            "ddp_smoke on NCCL and the copy bandwidth skipped"
        )
        return part
    nproc = int(report["device_count"])
    smoke, log = run_smoke(report["python"], nproc, out / "ddp_smoke")
    part["ddp_smoke"], part["ddp_smoke_log_tail"] = smoke, log
    part["checks"].append(facts.check_smoke(smoke, nproc))
    probe = run_copy(report["python"])
    rows = facts.copy_rows(probe)
    part["copy_bandwidth"] = rows
    part["checks"].append(facts.check_copy(rows, probe, nproc))
    return part


# --- report ----------------------------------------------------------------


def assemble(hw: dict[str, Any], torch: dict[str, Any], stamp: str) -> dict[str, Any]:
    checks = hw["checks"] + [asdict(c) if isinstance(c, Check) else c for c in torch["checks"]]
    result = {
        "schema": 1,
        "host": socket.gethostname(),
        "time": stamp,
        "hardware": {k: v for k, v in hw.items() if k != "checks"},
        "checks": checks,
        "torch": torch.get("torch"),
        "ddp_smoke": torch.get("ddp_smoke"),
        "ddp_smoke_log_tail": torch.get("ddp_smoke_log_tail"),
        "copy_bandwidth": torch.get("copy_bandwidth"),
        "notes": torch["notes"],
    }
    result["verdict"] = facts.verdict(checks, hw)
    return result


def write(result: dict[str, Any], results_dir: Path, stamp: str) -> tuple[Path, Path, str]:
    results_dir.mkdir(parents=True, exist_ok=True)
    base = results_dir / f"gpu-check-{stamp}"
    text = facts.summary_text(result)
    base.with_suffix(".json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    base.with_suffix(".txt").write_text(text)
    return base.with_suffix(".json"), base.with_suffix(".txt"), text


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=facts.ROOT / "results")
    parser.add_argument(
        "--python", action="append", default=[], help="python with torch (repeatable)"
    )
    parser.add_argument("--no-torch", action="store_true", help="hardware checks only")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    obs = observe()
    hw = facts.hardware(obs)
    torch = torch_part(hw, obs, args, args.results / f"gpu-check-{stamp}")
    result = assemble(hw, torch, stamp)
    json_path, text_path, text = write(result, args.results, stamp)
    print(text + f"report: {json_path}\nsummary: {text_path}")
    return 1 if result["verdict"] == "FAIL" else 0


if __name__ == "__main__":
    sys.exit(main())
