"""cluster-health: a node's own health checks, the registry's node checks run by Slurm.

Standard library only: the roles install this file as the node's
HealthCheckProgram (/usr/local/sbin/cluster-health) and slurmd runs it with
the system python3 every HealthCheckInterval. The checks are the registry's
(cluster_checks.py) with use ``health``, each run by its one reader
(node_checks.py, gpu_checks.py): the doctor's probe and the metrics
collector call the same readers. Adding a check touches the registry, its
reader and one fixture (tests/test_check_registry.py walks them).

A run reads its settings from /etc/slurm-cluster/health.json (written by the
slurm_common role, tasks/health.yml, from the inventory), runs every check that applies to the
node, and then acts on the node's Slurm state (``decide``):

- a FAIL drains the node with a reason under its own prefix
  (``health: <check>: <cause>``), unless the node is already drained by
  someone else (the admin, the acceptance gate): that drain is left as it is;
- a PASS lifts only a drain that carries the prefix. One passing run clears
  it; a node that the program drained ``flap_drains`` times within
  ``flap_window_s`` stays drained as ``health: flapping: …`` until the admin
  resumes it by hand.

The verdict is kept in /var/lib/slurm-cluster/health/last.json and each
drain, resume and reason change is appended to events.jsonl there.
Exit status: 0 when every check passed, 1 on a FAIL, 2 on a bad config.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pwd
import re
import shutil
import sys
import tempfile
import time

from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.cluster_checks import REGISTRY
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.node_base import (
    Context,
    Result,
    last_line,
    run,
)
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.node_checks import (
    CONFIG,
    DEFAULTS,
    check_munge,
    fetched_conf,
    load_config,
    load_json,
    node_check_ids,
    run_checks,
)

STATE_DIR = "/var/lib/slurm-cluster/health"
CHECK_IDS = node_check_ids("health")
__all__ = ["CONFIG", "DEFAULTS", "REGISTRY", "Result", "load_config", "run_checks"]

# ---------------------------------------------------------------- the Slurm side


def parse_node(text: str) -> dict:
    """``scontrol --oneliner show node X`` → {state, flags, reason} (without [user@time])."""
    state = re.search(r"(?:^|\s)State=(\S+)", text)
    reason = re.search(r"(?:^|\s)Reason=(.*?)(?=\s+\w+=|$)", text)
    text_reason = reason.group(1).strip() if reason else ""
    text_reason = re.sub(r"\s*\[[^\]]*@[^\]]*\]$", "", text_reason)
    value = state.group(1) if state else ""
    return {
        "state": value,
        "flags": set(value.split("+")),
        "reason": "" if text_reason == "none" else text_reason,
    }


def drain_reason(results: list[Result], prefix: str) -> str:
    fails = [r for r in results if r.status == "FAIL"]
    first = fails[0]
    more = (
        f" (+{len(fails) - 1} more: {', '.join(r.id for r in fails[1:])})" if len(fails) > 1 else ""
    )
    reason = f"{prefix} {first.id}: {first.message}{more}"
    # scontrol takes the reason as one argument; keep it short enough to read in sinfo -R.
    return reason if len(reason) <= 240 else reason[:237] + "..."


def decide(node: dict, results: list[Result], prefix: str, drains: list[float], now: float,
           flap_drains: int, flap_window_s: float) -> tuple[str, str]:  # fmt: skip
    """What to do with the node: ("drain"|"update"|"resume"|"flapping"|"none"|"kept", reason).

    - FAIL, node not drained: drain it under the prefix.
    - FAIL, drained under the prefix for another cause: update the reason.
    - FAIL or PASS, drained by anyone else (admin, acceptance gate, Slurm): kept.
    - PASS, drained under the prefix: resume, unless the program drained it
      ``flap_drains`` times within ``flap_window_s`` (then "flapping": it stays
      drained, the reason says so, the admin resumes it).
    """
    drained = bool(node["flags"] & {"DRAIN", "DRAINED", "DRAINING"}) or node["state"].startswith(
        "DRAIN"
    )
    ours = node["reason"].startswith(prefix)
    failed = any(r.status == "FAIL" for r in results)
    if drained and not ours:
        return "kept", node["reason"]
    if failed:
        reason = drain_reason(results, prefix)
        if not drained:
            return "drain", reason
        if node["reason"].startswith(f"{prefix} flapping:"):
            return "none", node["reason"]
        return ("update", reason) if node["reason"] != reason else ("none", reason)
    if not drained:
        return "none", ""
    if node["reason"].startswith(f"{prefix} flapping:"):
        return "none", node["reason"]
    recent = [t for t in drains if now - t <= flap_window_s]
    if flap_drains and len(recent) >= flap_drains:
        was = node["reason"][len(prefix) :].strip()
        return "flapping", (
            f"{prefix} flapping: drained {len(recent)} times in {flap_window_s / 60:.0f} min, "
            f"last for {was}; resume by hand: scontrol update nodename=NODE state=resume"
        )[:240]
    return "resume", ""


def slurm_node(name: str, timeout: float, env: dict | None = None) -> tuple[dict | None, str]:
    res = run(["scontrol", "--oneliner", "show", "node", name], timeout=timeout, env=env)
    if res["rc"] != 0 or "NodeName=" not in res["out"]:
        return None, last_line(res)
    return parse_node(res["out"]), ""


def apply(name: str, action: str, reason: str, timeout: float, env: dict | None = None) -> str:
    """The scontrol update for an action; '' on success, else why not."""
    if action in ("drain", "update", "flapping"):
        argv = [
            "scontrol",
            "update",
            f"nodename={name}",
            "state=drain",
            f"reason={reason.replace('NODE', name)}",
        ]
    elif action == "resume":
        argv = ["scontrol", "update", f"nodename={name}", "state=resume"]
    else:
        return ""
    res = run(argv, timeout=timeout, env=env)
    return "" if res["rc"] == 0 else last_line(res)


class PrivateMunge:
    """A munged of this run only, on its own socket, with the node's key.

    With the node's munged down, slurmd cannot take slurmctld's health-check
    RPC and scontrol cannot talk to slurmctld: the program (then started by
    cluster-health.timer) drains its node through a munged of its own, run as
    the munge user with the same key, and leaves munge.service as it found it.
    ``env`` is None when it could not start (``error`` says why).
    """

    def __init__(self, cfg: dict) -> None:
        self.env: dict | None = None
        self.error = ""
        self.dir = ""
        try:
            user = pwd.getpwnam("munge")
        except KeyError:
            self.error = "no munge user"
            return
        self.dir = tempfile.mkdtemp(prefix="cluster-health-munge-", dir="/run")
        os.chown(self.dir, user.pw_uid, user.pw_gid)
        os.chmod(self.dir, 0o755)  # munged wants its socket folder searchable by all
        sock = os.path.join(self.dir, "munge.socket")
        started = run(
            ["munged", f"--socket={sock}", f"--key-file={cfg['munge_key']}",
             f"--pid-file={self.dir}/munged.pid", f"--seed-file={self.dir}/munged.seed",
             f"--log-file={self.dir}/munged.log", "--num-threads=1"],
            timeout=cfg["timeout_s"], user=user.pw_uid, group=user.pw_gid, extra_groups=[],
        )  # fmt: skip
        if started["rc"] != 0:
            self.error = f"a munged of its own did not start: {last_line(started)}"
            return
        try:
            with open(fetched_conf(cfg)) as handle:
                text = handle.read()
        except OSError as exc:
            self.error = f"no slurm.conf to reach slurmctld with: {exc.strerror}"
            return
        text = re.sub(r"(?im)^\s*AuthInfo\s*=.*$", "", text) + f"\nAuthInfo=socket={sock}\n"
        conf = os.path.join(self.dir, "slurm.conf")
        with open(conf, "w") as handle:
            handle.write(text)
        self.env = {**os.environ, "SLURM_CONF": conf}

    def close(self) -> None:
        if not self.dir:
            return
        try:
            with open(os.path.join(self.dir, "munged.pid")) as handle:
                os.kill(int(handle.read().strip()), 15)
        except (OSError, ValueError):
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------- main


def say(text: str, err: bool = False) -> None:
    """One line of the command's output (stdout, or stderr for errors)."""
    (sys.stderr if err else sys.stdout).write(f"{text}\n")


def write_json(path: str, data: object) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
        handle.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def who() -> str:
    """Who asked: the login user behind sudo or su (the audit login uid), else the caller."""
    name = os.environ.get("SUDO_USER", "")
    try:
        with open("/proc/self/loginuid") as handle:
            uid = int(handle.read().strip())
        if uid != 4294967295:
            name = name or pwd.getpwuid(uid).pw_name
    except (OSError, ValueError, KeyError):
        pass
    try:
        caller = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        caller = str(os.getuid())
    return f"{name} as {caller}" if name and name != caller else caller


def log_ack(state_dir: str, cfg: dict, pending: list) -> None:
    """The acknowledgement in events.jsonl and the system log: who, when, which Xids."""
    what = ", ".join(f"Xid {p['code']} on {p['bus']}" for p in pending) or "none pending"
    event = {"time": time.time(), "node": cfg["node"], "event": "ack-xid",
             "by": cfg["_ack_by"], "reason": what}  # fmt: skip
    with open(os.path.join(state_dir, "events.jsonl"), "a") as handle:
        handle.write(json.dumps(event, sort_keys=True) + "\n")
    text = f"gpu.xid acknowledged by {cfg['_ack_by']} on {cfg['node']}: {what}"
    run(["logger", "-p", "auth.notice", "-t", "cluster-health", text], timeout=3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="cluster-health", description=__doc__.split("\n\n", maxsplit=1)[0]
    )
    parser.add_argument("--config", default=CONFIG)
    parser.add_argument("--state-dir", default=STATE_DIR)
    parser.add_argument(
        "--no-drain", action="store_true", help="judge and report only; change no node state"
    )
    parser.add_argument(
        "--ack-xid",
        action="store_true",
        help="acknowledge the fatal Xids kept so far (after a GPU reset or a reboot); "
        "logged with who and when",
    )
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")
    parser.add_argument("--list", action="store_true", help="list the checks and exit")
    parser.add_argument(
        "--if-munge-down",
        action="store_true",
        help="cluster-health.timer's run: nothing unless munged fails (then slurmd cannot run it)",
    )
    args = parser.parse_args(argv)
    if args.list:
        for check in REGISTRY:
            if check.id in CHECK_IDS:
                say(f"{check.id:16} {check.reads}")
        return 0
    start = time.monotonic()
    try:
        cfg = load_config(args.config)
        if args.if_munge_down and not cfg["drain"]:
            return 0
        # The timer's run: nothing while munged answers, unless this program
        # drained the node for munge (then it resumes it without waiting for slurmd).
        drained_for_munge = load_json(os.path.join(args.state_dir, "state.json"), {})
        drained_for_munge = isinstance(drained_for_munge, dict) and drained_for_munge.get(
            "munge_drain"
        )
        if args.if_munge_down and not drained_for_munge and check_munge(Context(cfg))[0] == "PASS":
            return 0
    except (OSError, ValueError) as exc:
        say(f"cluster-health: {exc}", err=True)
        return 2
    os.makedirs(args.state_dir, mode=0o755, exist_ok=True)
    # One run at a time (slurmd's and one by hand): the second waits up to 10 s.
    lock = open(os.path.join(args.state_dir, "lock"), "w")  # noqa: SIM115 - held until exit
    deadline = time.monotonic() + 10
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                say("cluster-health: another run holds the lock", err=True)
                return 2
            time.sleep(0.2)
    state_path = os.path.join(args.state_dir, "state.json")
    state = load_json(state_path, {})
    if not isinstance(state, dict):
        state = {}
    cfg["_ack_xid"] = args.ack_xid
    cfg["_ack_by"] = who() if args.ack_xid else ""
    pending = list((state.get("xid") or {}).get("pending") or [])
    results = run_checks(cfg, state)
    if args.ack_xid:
        log_ack(args.state_dir, cfg, pending)
    now = time.time()
    verdict = "FAIL" if any(r.status == "FAIL" for r in results) else "PASS"
    # With munged failing here, scontrol reaches slurmctld through a munged of its own.
    munge_down = any(r.id == "munge.local" and r.status == "FAIL" for r in results)
    private = PrivateMunge(cfg) if munge_down and not args.no_drain and cfg["drain"] else None
    env = private.env if private else None
    node, why = slurm_node(cfg["node"], cfg["timeout_s"], env)
    if private and private.error:
        why = f"{why} ({private.error})"
    action, reason, error = "none", "", ""
    drains = [float(t) for t in state.get("drains", [])]
    if node is None:
        error = f"scontrol show node {cfg['node']}: {why}"
    else:
        action, reason = decide(
            node,
            results,
            cfg["prefix"],
            drains,
            now,
            int(cfg["flap_drains"]),
            float(cfg["flap_window_s"]),
        )
        if args.no_drain or not cfg["drain"]:
            action = f"would {action}" if action not in ("none", "kept") else action
        else:
            error = apply(cfg["node"], action, reason, cfg["timeout_s"], env)
            if not error and action in ("drain", "update", "resume", "flapping"):
                if action == "drain":
                    drains.append(now)
                event = {"time": now, "node": cfg["node"], "event": action, "reason": reason}
                with open(os.path.join(args.state_dir, "events.jsonl"), "a") as handle:
                    handle.write(json.dumps(event, sort_keys=True) + "\n")
    if private:
        private.close()
    state["munge_drain"] = munge_down and action in ("drain", "update", "none") and bool(node)
    state["drains"] = [t for t in drains if now - t <= float(cfg["flap_window_s"])]
    # Counts since install and the last 50 run times, for the figures.
    run_s = round(time.monotonic() - start, 3)
    state["runs"] = int(state.get("runs", 0)) + 1
    state["fails"] = int(state.get("fails", 0)) + (verdict == "FAIL")
    state["run_s"] = [*list(state.get("run_s", []))[-49:], run_s]
    write_json(state_path, state)
    report = {
        "node": cfg["node"],
        "time": now,
        "verdict": verdict,
        "run_s": run_s,
        "checks": [r.as_dict() for r in results],
        "action": action,
        "reason": reason,
        "slurm_state": node["state"] if node else "",
        "error": error,
    }
    write_json(os.path.join(args.state_dir, "last.json"), report)
    if args.json:
        say(json.dumps(report, indent=1))
    else:
        for r in results:
            say(f"{r.status:4} {r.id:16} {r.message}")
        say(f"{verdict} in {report['run_s']:.2f} s; node {cfg['node']}: {action} {reason}".rstrip())
        if error:
            say(f"cluster-health: {error}", err=True)
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    raise SystemExit(main())
