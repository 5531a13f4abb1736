"""The GPU checks of the registry (cluster_checks.py): nvidia-smi and the kernel's Xid messages.

Each ``check_*`` is the one reader of its check id (node_checks.RUNNERS): the
node health program, the doctor's probe and the collector all call it.
"""

from __future__ import annotations

import errno
import os
import re
import time

from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.cluster_checks import (
    XID_FAIL,
    kernel_record,
    parse_xid,
)
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.node_base import (
    Context,
    last_line,
    run,
)


def gpu_devices() -> list[str]:
    try:
        names = os.listdir("/dev")
    except OSError:
        return []
    return sorted(n for n in names if re.fullmatch(r"nvidia\d+", n))


SMI_FIELDS = (
    "index,pci.bus_id,persistence_mode,ecc.errors.uncorrected.volatile.total,retired_pages.pending,"
    "clocks_throttle_reasons.hw_slowdown,clocks_throttle_reasons.hw_thermal_slowdown,"
    "clocks_throttle_reasons.sw_thermal_slowdown,clocks_throttle_reasons.hw_power_brake_slowdown"
)
SMI_KEYS = ("index", "bus", "persistence", "ecc_dbe", "retired_pending", "hw_slowdown",
            "hw_thermal", "sw_thermal", "power_brake")  # fmt: skip
THROTTLES = (
    ("hw_slowdown", "HW slowdown"),
    ("hw_thermal", "HW thermal slowdown"),
    ("sw_thermal", "SW thermal slowdown"),
    ("power_brake", "power brake"),
)
REMAP_FIELDS = "gpu_bus_id,remapped_rows.pending,remapped_rows.failure"


def parse_csv(text: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.split(",")] for line in text.strip().splitlines() if line.strip()
    ]


def smi(ctx: Context) -> dict:
    """One nvidia-smi query of every GPU and one of the row remapper, parsed."""

    def query() -> dict:
        exe, timeout = ctx.cfg["nvidia_smi"], ctx.cfg["timeout_s"]
        res = run(
            [exe, f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits"], timeout=timeout
        )
        if res["rc"] != 0:
            return {"error": last_line(res), "rc": res["rc"]}
        gpus = []
        for row in parse_csv(res["out"]):
            if len(row) < 9:
                continue
            gpus.append(dict(zip(SMI_KEYS, row, strict=False)))
        remap = run(
            [exe, f"--query-remapped-rows={REMAP_FIELDS}", "--format=csv,noheader"], timeout=timeout
        )
        remaps = {}
        if remap["rc"] == 0:
            for row in parse_csv(remap["out"]):
                if len(row) >= 3:
                    remaps[row[0].lower()] = {"pending": row[1], "failure": row[2]}
        for gpu in gpus:
            gpu["remap"] = remaps.get(gpu["bus"].lower(), {})
        return {"gpus": gpus}

    return ctx.once("smi", query)  # type: ignore[return-value]


def check_gpu_count(ctx: Context) -> tuple[str, str]:
    want = int(ctx.cfg["gpus"])
    devs = gpu_devices()
    missing = [f"/dev/nvidia{i}" for i in range(want) if f"nvidia{i}" not in devs]
    if len(devs) < want or missing:
        return (
            "FAIL",
            f"{len(devs)} GPU devices, gres says {want}: {', '.join(missing) or 'fewer'} missing",
        )
    seen = smi(ctx)
    if "gpus" in seen and len(seen["gpus"]) != want:
        return "FAIL", f"nvidia-smi lists {len(seen['gpus'])} GPUs, gres says {want}"
    return "PASS", f"{want} GPUs, as gres says"


def check_gpu_smi(ctx: Context) -> tuple[str, str]:
    seen = smi(ctx)
    if "error" in seen:
        return "FAIL", f"nvidia-smi failed: {seen['error']}"
    return "PASS", f"nvidia-smi answers for {len(seen['gpus'])} GPUs"


def _count(value: str) -> int:
    return int(value) if value.strip().isdigit() else 0


def _active(value: str) -> bool:
    return value.strip().lower() == "active"


def check_gpu_ecc(ctx: Context) -> tuple[str, str]:
    seen = smi(ctx)
    if "error" in seen:
        return "SKIP", "nvidia-smi gave no answer"
    bad = []
    for g in seen["gpus"]:
        name = f"GPU {g['index']} ({g['bus']})"
        if _count(g["ecc_dbe"]):
            bad.append(f"{name} has {g['ecc_dbe']} uncorrectable ECC errors")
        if g["retired_pending"].strip().lower() == "yes":
            bad.append(f"{name} has a page retirement pending (reset the GPU)")
        remap = g["remap"]
        if remap.get("failure", "").strip().lower() == "yes":
            bad.append(f"{name} row remapping failed (replace the GPU)")
        elif remap.get("pending", "").strip().lower() == "yes":
            bad.append(f"{name} has a row remap pending (reset the GPU)")
    if bad:
        return "FAIL", "; ".join(bad)
    return "PASS", "no uncorrectable ECC error, no pending or failed row remap"


def check_gpu_persistence(ctx: Context) -> tuple[str, str]:
    seen = smi(ctx)
    if "error" in seen:
        return "SKIP", "nvidia-smi gave no answer"
    off = [g["index"] for g in seen["gpus"] if g["persistence"].strip().lower() != "enabled"]
    if off:
        return "FAIL", f"persistence mode is off on GPU {', '.join(off)}"
    return "PASS", "persistence mode on"


def check_gpu_throttle(ctx: Context) -> tuple[str, str]:
    seen = smi(ctx)
    if "error" in seen:
        return "SKIP", "nvidia-smi gave no answer"
    bad = []
    for g in seen["gpus"]:
        why = [
            label
            for key, label in THROTTLES
            if _active(g[key])
        ]  # fmt: skip
        if why:
            bad.append(f"GPU {g['index']}: {', '.join(why)}")
    if bad:
        return "FAIL", "throttled: " + "; ".join(bad)
    return "PASS", "no HW slowdown or thermal throttling"


def read_kernel_log(source: str) -> tuple[list[tuple[int, int, str]], str]:
    """(sequence, facility, message) records of the kernel log and its boot id.

    /dev/kmsg is read without blocking from its first record, each record's
    facility from its priority; a plain file (a test's stand-in, in /dev/kmsg's
    or dmesg's line format) is read whole, its lines numbered, lines of
    neither format left out.
    """
    if source != "/dev/kmsg":
        return _read_log_file(source)
    records: list[tuple[int, int, str]] = []
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise RuntimeError(f"{source}: {exc.strerror}") from exc
    try:
        while True:
            try:
                chunk = os.read(fd, 8192)
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten while reading: go on
                    continue
                if exc.errno == errno.EAGAIN:
                    break
                raise
            if not chunk:
                break
            head, _sep, msg = chunk.decode(errors="replace").partition(";")
            parts = head.split(",")
            if len(parts) > 1 and parts[0].isdigit() and parts[1].isdigit():
                text = msg.splitlines()[0] if msg else ""
                records.append((int(parts[1]), int(parts[0]) >> 3, text))
    finally:
        os.close(fd)
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            boot = handle.read().strip()
    except OSError:
        boot = ""
    return records, boot


def _read_log_file(source: str) -> tuple[list[tuple[int, int, str]], str]:
    try:
        with open(source, errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError as exc:
        raise RuntimeError(f"{source}: {exc.strerror}") from exc
    try:
        boot = f"file:{os.stat(source).st_ino}"
    except OSError:
        boot = "file"
    records = []
    for seq, line in enumerate(lines, 1):
        rec = kernel_record(line)
        if rec is not None:
            records.append((seq, rec[0], rec[1]))
    return records, boot


def _fatal_text(p: dict) -> str:
    return f"Xid {p['code']} on {p['bus']} ({XID_FAIL.get(int(p['code']), 'fatal')})"


def check_gpu_xid(ctx: Context) -> tuple[str, str]:
    """Fatal Xids not yet acknowledged, kept in the program's state; new application Xids warn.

    A fatal Xid is remembered (state "xid.pending") from the run that first
    reads it until ``cluster-health --ack-xid``: the node stays drained after
    its line has left the kernel's ring buffer. Only the driver's own
    message counts (cluster_checks.parse_xid): text a program placed in
    another kernel line does not.
    """
    try:
        records, boot = read_kernel_log(ctx.cfg["kernel_log"])
    except (RuntimeError, OSError) as exc:
        prior = ctx.state.get("xid") or {}
        if prior.get("pending"):
            return "FAIL", "; ".join(_fatal_text(p) for p in prior["pending"]) + (
                f" (kept until acknowledged; kernel log not readable: {exc})"
            )
        return "WARN", f"kernel log not readable: {exc}"
    prior = ctx.state.get("xid") or {}
    seen = int(prior.get("seen", 0)) if prior.get("boot") == boot else 0
    if records and records[-1][0] < seen:  # the log started again (a file emptied)
        seen = 0
    pending = [dict(p) for p in prior.get("pending") or []]
    known = {(p["boot"], p["seq"], p["code"], p["bus"]) for p in pending}
    apps = []
    for seq, facility, msg in records:
        hit = parse_xid(msg, facility) if seq > seen else None
        if hit is None:
            continue
        bus, code = hit
        if code not in XID_FAIL:
            apps.append(f"Xid {code} on {bus}")
        elif (boot, seq, code, bus) not in known:
            known.add((boot, seq, code, bus))
            pending.append({"boot": boot, "seq": seq, "code": code, "bus": bus,
                            "time": round(time.time(), 1)})  # fmt: skip
    acked = list(prior.get("acked") or [])[-19:]
    state = {"boot": boot, "seen": records[-1][0] if records else seen, "pending": pending,
             "acked": acked}  # fmt: skip
    ctx.state["xid"] = state
    if ctx.cfg.get("_ack_xid"):
        by, now = str(ctx.cfg.get("_ack_by") or "?"), round(time.time(), 1)
        state["acked"] = [*acked, *({**p, "by": by, "at": now} for p in pending)][-20:]
        state["pending"] = []
        what = "; ".join(_fatal_text(p) for p in pending) or "no fatal Xid was pending"
        return "PASS", f"acknowledged by {by}: {what}"
    if pending:
        return "FAIL", "; ".join(dict.fromkeys(_fatal_text(p) for p in pending)) + (
            " (kept until cluster-health --ack-xid)"
        )
    if apps:
        return "WARN", "new application Xids: " + "; ".join(dict.fromkeys(apps))
    return "PASS", "no fatal Xid pending" + (" since the last acknowledgement" if acked else "")
