"""The cluster doctor's judgement: probe results of every node in, checks and causes out.

Pure functions (unit-tested in tests/test_doctor.py). ``doctor_report`` turns what
``cluster_probe`` read on each node into one result per node and check, each with a
stable id, PASS/WARN/FAIL/SKIP, the evidence and the fix. A FAIL that another FAIL
explains (on the same node, or on the controller for every node) carries
``caused_by`` and is not listed among the causes: the report names the broken
component, not its consequences.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable

CHECKS = (
    "net.hostname",
    "munge.service",
    "munge.key",
    "clock",
    "munge.cross",
    "users.ids",
    "users",
    "config.versions",
    "config.files",
    "slurm.daemon",
    "net.ports",
    "hw.match",
    "slurm.node",
    "shared.fs",
    "health",
    "torch.venv",
)
# Checks whose FAIL on the same node explains a FAIL of the key check.
LOCAL_CAUSES = {
    "munge.cross": ("munge.service", "clock", "net.hostname"),
    "clock": ("munge.service",),
    "slurm.node": (
        "net.hostname",
        "munge.service",
        "munge.cross",
        "clock",
        "users.ids",
        "config.files",
        "config.versions",
        "slurm.daemon",
        "net.ports",
        "hw.match",
        "health",
    ),
    "net.ports": ("slurm.daemon", "net.hostname"),
    # A user's folder is on the shared filesystem: a node without it fails both.
    "users": ("shared.fs",),
    # The node health program's checks repeat the doctor's finer ones here.
    "health": ("munge.service", "munge.key", "clock", "config.files", "slurm.daemon", "shared.fs"),
    # scontrol ping needs munge on the controller.
    "slurm.daemon": ("munge.service", "munge.key"),
}
# Checks whose FAIL on any node explains a FAIL of the key check on every node
# (slurm.conf holds every node's line: a node whose hardware changed changes it).
ANY_HOST_CAUSES = {"config.files": ("hw.match",)}
# Checks whose FAIL on the controller explains a FAIL of the key check on any node.
CONTROLLER_CAUSES = {
    "munge.cross": ("munge.service", "clock", "munge.cross"),
    "clock": ("munge.service",),
    "slurm.node": ("munge.service", "munge.cross", "slurm.daemon", "config.files", "net.ports"),
    "net.ports": ("slurm.daemon", "net.ports"),
    "shared.fs": ("shared.fs",),
    # A file missing or changed on the controller is what its nodes fetched stale.
    "config.files": ("config.files",),
}
# A config file named in config.files' evidence ("/etc/slurm/gres.conf sha256 …").
CONF_NAME = re.compile(r"/([\w.-]+\.conf) sha256")
MUNGE_CLOCK_STATUSES = ("Expired credential", "Rewound credential")
DOWN_STATES = ("DOWN", "FAIL", "NOT_RESPONDING", "INVAL", "UNKNOWN", "FUTURE")
# Drain reasons that slurmctld sets itself (the node's hardware or config is wrong).
SLURM_DRAIN_REASONS = re.compile(
    r"^(Low |gres/|Node unexpectedly rebooted|Prolog|Epilog|Kill task failed|batch job complete)"
)


def _result(host: str, check: str, status: str, evidence: str, fix: str = "") -> dict:
    return {"host": host, "check": check, "status": status, "evidence": evidence, "fix": fix}


def _majority(values: dict[str, object], prefer: str) -> object:
    """The value most hosts hold; on a tie the one of `prefer` (the controller)."""
    counts = Counter(repr(v) for v in values.values())
    best = max(counts.values())
    if counts[repr(values.get(prefer))] == best:
        return values.get(prefer)
    return next(v for v in values.values() if counts[repr(v)] == best)


def parse_nodes(text: str) -> dict[str, dict]:
    """``scontrol --oneliner show node`` → {NodeName: {state, reason, cpus, memory, gres}}."""
    nodes = {}
    for line in text.splitlines():
        name = re.search(r"(?:^|\s)NodeName=(\S+)", line)
        if not name:
            continue

        def field(key: str, text: str = line) -> str:
            m = re.search(rf"(?:^|\s){key}=(\S*)", text)
            return m.group(1) if m else ""

        reason = re.search(r"(?:^|\s)Reason=(.*?)(?=\s+\w+=|$)", line)
        nodes[name.group(1)] = {
            "state": field("State"),
            "reason": reason.group(1).strip() if reason else "",
            "cpus": int(field("CPUTot") or 0),
            "memory": int(field("RealMemory") or 0),
            "gres": field("Gres"),
            "addr": field("NodeAddr"),
        }
    return nodes


def gres_gpu_count(gres: str) -> int:
    """'gpu:1', 'gpu:h100:8', 'gpu:h100:4(S:0),gpu:a100:2' → total GPUs; '(null)' → 0."""
    total = 0
    for item in gres.split(","):
        parts = re.sub(r"\(.*?\)", "", item).split(":")
        if parts[0] == "gpu" and len(parts) >= 2 and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def _loopback(addr: str) -> bool:
    return addr.startswith("127.") or addr == "::1"


class _Doctor:
    def __init__(self, probes: dict, ctx: dict) -> None:
        self.local = {h: p.get("local") or {} for h, p in probes.items()}
        self.cross = {h: p.get("cross") or {} for h, p in probes.items()}
        self.ctx = ctx
        self.ctl: str = ctx["controller"]
        self.computes: list[str] = [h for h in ctx["computes"] if h in probes]
        self.hosts: list[str] = [h for h in ctx["hosts"] if h in probes]
        self.unreachable: list[str] = [h for h in ctx["hosts"] if h not in probes]
        self.results: list[dict] = []
        self._versions: dict[str, tuple[dict, object]] = {}
        ctl_probe = self.local.get(self.ctl, {})
        nodes = ctl_probe.get("nodes") or {}
        self.slurm_nodes = parse_nodes(nodes.get("out", ""))
        self.ctl_nodes_error = "" if nodes.get("rc", 1) == 0 else nodes.get("err", "").strip()

    def add(self, *args: str) -> None:
        self.results.append(_result(*args))

    def others(self) -> list[str]:
        return [h for h in self.hosts if h != self.ctl]

    # --- checks -----------------------------------------------------------------

    def hostname(self) -> None:
        ctl_name = self.local.get(self.ctl, {}).get("host", self.ctl)
        ctl_addrs = [
            a for a in self.local.get(self.ctl, {}).get("self_addrs", []) if not _loopback(a)
        ]
        for h in self.hosts:
            addrs = self.local[h].get("self_addrs", [])
            name = self.local[h].get("host", h)
            bad = [a for a in addrs if _loopback(a) or a.startswith("error")]
            seen = (self.local[h].get("resolved") or {}).get(ctl_name)
            if (
                h != self.ctl
                and seen is not None
                and (
                    not seen
                    or any(_loopback(a) or a.startswith("error") for a in seen)
                    or (ctl_addrs and not set(seen) & set(ctl_addrs))
                )
            ):
                wrong = ", ".join(seen) or "nothing"
                loop = any(_loopback(a) for a in seen)
                self.add(
                    h,
                    "net.hostname",
                    "FAIL",
                    f"the controller's name {ctl_name} resolves on {h} to {wrong}"
                    + (" (loopback)" if loop else "")
                    + f"; {self.ctl} is {', '.join(ctl_addrs) or '?'}: "
                    "slurmd there cannot reach slurmctld",
                    f"remove the line that maps {ctl_name} to {wrong} from /etc/hosts on {h} "
                    f"(site.yml removes a loopback line of {ctl_name}), or fix its DNS entry",
                )
            elif not addrs or bad:
                self.add(
                    h,
                    "net.hostname",
                    "FAIL",
                    f"{name} resolves on {h} to {', '.join(addrs) or 'nothing'}"
                    + (
                        " (loopback: slurmd and srun would offer an address no other node reaches)"
                        if any(_loopback(a) for a in addrs)
                        else ""
                    ),
                    f"map {name} to the node's cluster address in /etc/hosts or DNS, not 127.0.1.1 "
                    "(site.yml removes a loopback line of the node's own name)",
                )
            else:
                self.add(h, "net.hostname", "PASS", f"{name} → {', '.join(addrs)}")

    def munge_service(self) -> None:
        for h in self.hosts:
            state = self.local[h].get("services", {}).get("munge", "absent")
            if state.startswith("active/running"):
                self.add(h, "munge.service", "PASS", f"munge {state}")
            else:
                self.add(
                    h,
                    "munge.service",
                    "FAIL",
                    f"munge.service is {state}",
                    f"systemctl start munge on {h} (journalctl -u munge); site.yml starts it",
                )

    def munge_key(self) -> None:
        for h in self.hosts:
            key = self.local[h].get("key", {})
            if not key.get("exists"):
                self.add(
                    h,
                    "munge.key",
                    "FAIL",
                    f"no munge key: {key.get('error', '?')}",
                    "run site.yml: it installs the controller's key",
                )
                continue
            wrong = []
            if key["mode"] != "0400":
                wrong.append(f"mode {key['mode']} (want 0400)")
            if key["owner"] != "munge" or key["group"] != "munge":
                wrong.append(f"owner {key['owner']}:{key['group']} (want munge:munge)")
            if wrong:
                self.add(
                    h,
                    "munge.key",
                    "FAIL",
                    "munge.key " + ", ".join(wrong),
                    "run site.yml (it sets 0400 munge:munge), or "
                    f"chown munge:munge and chmod 0400 the key on {h}",
                )
            else:
                self.add(
                    h, "munge.key", "PASS", f"0400 munge:munge, fingerprint {key['fingerprint']}"
                )

    def _fingerprints(self) -> dict[str, str]:
        return {h: self.local[h].get("key", {}).get("fingerprint", "") for h in self.hosts}

    def clock(self) -> None:
        ttl = int(self.ctx.get("munge_ttl", 300))
        warn, fail = (
            float(self.ctx.get("clock_warn_s", 5)),
            float(self.ctx.get("clock_fail_s", 240)),
        )
        t_ctl = self.local.get(self.ctl, {}).get("time")
        ctl_skew = self._munged_skew_of_ctl()
        for h in self.hosts:
            t = self.local[h].get("time")
            if t is None or t_ctl is None:
                self.add(h, "clock", "SKIP", "no time reading")
                continue
            system = t - t_ctl
            skew = self._munged_skew(h) if h != self.ctl else 0.0
            offset = system + (skew or 0.0) - (ctl_skew or 0.0 if h != self.ctl else 0.0)
            parts = [f"system clock {system:+.1f} s"]
            if skew:
                parts.append(f"munged clock {skew:+.0f} s from its own system clock")
            text = (
                f"offset to {self.ctl} {offset:+.0f} s ("
                + ", ".join(parts)
                + f"; munge TTL {ttl} s)"
            )
            if abs(offset) >= fail:
                self.add(
                    h,
                    "clock",
                    "FAIL",
                    text,
                    f"synchronise the clock of {h} (chrony, systemd-timesyncd), restart munge; "
                    f"munge rejects credentials older than {ttl} s",
                )
            elif abs(offset) > warn:
                self.add(h, "clock", "WARN", text, f"synchronise the clock of {h} with NTP")
            else:
                self.add(h, "clock", "PASS", text)

    def _munged_skew(self, h: str) -> float | None:
        """Node h's munged clock minus its system clock, from the controller's decode."""
        d = self.cross.get(self.ctl, {}).get("decoded", {}).get(h, {})
        if "encode_time" in d and "time" in self.local[h]:
            skew = d["encode_time"] - self.local[h]["time"]
            return skew if abs(skew) > 2 else 0.0
        return None

    def _munged_skew_of_ctl(self) -> float | None:
        for h in self.others():
            d = self.cross.get(h, {}).get("decoded", {}).get(self.ctl, {})
            if "encode_time" in d and "time" in self.local.get(self.ctl, {}):
                skew = d["encode_time"] - self.local[self.ctl]["time"]
                return skew if abs(skew) > 2 else 0.0
        return None

    def munge_cross(self) -> None:
        prints = self._fingerprints()
        reference = _majority(prints, self.ctl)
        if prints.get(self.ctl) != reference:
            self.add(
                self.ctl,
                "munge.cross",
                "FAIL",
                f"{self.ctl}'s key (fingerprint {prints.get(self.ctl)}) differs from the one "
                f"{sum(v == reference for v in prints.values())} other nodes share ({reference})",
                f"put the cluster key back on {self.ctl} and restart munge, slurmctld and slurmd",
            )
        else:
            self.add(self.ctl, "munge.cross", "PASS", f"key fingerprint {reference}")
        for h in self.others():
            theirs = self.cross.get(self.ctl, {}).get("decoded", {}).get(h, {})
            ours = self.cross.get(h, {}).get("decoded", {}).get(self.ctl, {})
            problems = []
            if prints.get(h) != prints.get(self.ctl) and prints.get(h):
                problems.append(
                    f"key differs (fingerprint {prints[h]}, {self.ctl} has {prints.get(self.ctl)})"
                )
            if theirs.get("status") != "Success":
                why = self.local[h].get("credential_error") or theirs.get("status", "not decoded")
                problems.append(f"credential from {h} rejected by {self.ctl}: {why}")
            if ours.get("status") != "Success":
                problems.append(
                    f"credential from {self.ctl} rejected by {h}: "
                    + ours.get("status", "not decoded")
                )
            if problems:
                self.add(
                    h,
                    "munge.cross",
                    "FAIL",
                    "; ".join(problems),
                    "run site.yml: it installs the controller's key and restarts munge and slurmd"
                    if prints.get(h) != prints.get(self.ctl)
                    else f"check munged on {h} and {self.ctl} (journalctl -u munge)",
                )
            else:
                self.add(h, "munge.cross", "PASS", f"both ways with {self.ctl}")

    def users(self) -> None:
        ids = {h: self.local[h].get("ids", {}) for h in self.hosts}
        reference = ids.get(self.ctl, {})
        for h in self.hosts:
            diff = [
                f"{u} {ids[h].get(u)} (on {self.ctl}: {reference.get(u)})"
                for u in ("slurm", "munge")
                if ids[h].get(u) != reference.get(u)
            ]
            if h != self.ctl and diff:
                self.add(
                    h,
                    "users.ids",
                    "FAIL",
                    "uid/gid differ: " + "; ".join(diff),
                    "give slurm and munge the same UID and GID on every node (before installing "
                    "the packages, or with usermod/groupmod and a chown of their files)",
                )
            else:
                self.add(
                    h,
                    "users.ids",
                    "PASS",
                    ", ".join(f"{u} {':'.join(map(str, v or ['-']))}" for u, v in ids[h].items()),
                )

    def lab_users(self) -> None:
        """Each lab user (and the proof account) with the inventory's uid and gid, writing
        into its folder as itself, on every node."""
        users = list(self.ctx.get("users") or [])
        if not users:
            for h in self.hosts:
                self.add(h, "users", "SKIP", "no lab users in the inventory (cluster_users)")
            return
        found = {h: self.local[h].get("users") or {} for h in self.hosts}
        for h in self.hosts:
            bad, fixes = [], []
            for user in users:
                name = str(user["name"])
                want = [int(user["uid"]), int(user.get("gid", user["uid"]))]
                got = found[h].get(name) or {}
                ids = got.get("ids")
                same = [o for o in self.hosts if (found[o].get(name) or {}).get("ids") == want]
                where = f" (as on {', '.join(same)})" if same else ""
                if ids is None:
                    bad.append(
                        f"{name} does not resolve here, expected uid {want[0]} gid {want[1]}{where}"
                    )
                    fixes.append(f"run site.yml, or add {name} to the directory service")
                    continue
                if ids != want:
                    bad.append(
                        f"{name} is uid {ids[0]} gid {ids[1]} here, expected uid {want[0]} "
                        f"gid {want[1]}{where}"
                    )
                    fixes.append(
                        f"make {name} uid {want[0]} gid {want[1]} on {h} (usermod -u {want[0]} "
                        f"-g {want[1]} {name}, then chown its files)"
                    )
                    continue
                write = got.get("write")
                if write is not None and not write.get("ok"):
                    bad.append(
                        f"{name} cannot write into {got.get('dir')} as itself: "
                        f"{write.get('error') or 'failed'}"
                    )
                    fixes.append(f"check the owner and mode of {got.get('dir')} (site.yml sets it)")
            if bad:
                self.add(h, "users", "FAIL", "; ".join(bad), "; ".join(dict.fromkeys(fixes)))
            else:
                self.add(
                    h,
                    "users",
                    "PASS",
                    f"{len(users)} users with their uid and gid, each writes its folder",
                )

    def versions(self) -> None:
        for kind in ("slurm", "munge"):
            values = {h: self.local[h].get("versions", {}).get(kind, "") for h in self.hosts}
            self._versions[kind] = (values, _majority(values, self.ctl))
        for h in self.hosts:
            bad = [
                f"{kind} {values[h] or 'missing'} (others: {ref})"
                for kind, (values, ref) in self._versions.items()
                if values[h] != ref
            ]
            if bad:
                self.add(
                    h,
                    "config.versions",
                    "FAIL",
                    "; ".join(bad),
                    f"install the same Slurm and munge packages on {h} as on the other nodes",
                )
            else:
                self.add(
                    h,
                    "config.versions",
                    "PASS",
                    " ".join(
                        self.local[h].get("versions", {}).get(k, "") for k in ("slurm", "munge")
                    ),
                )

    def files(self) -> None:
        expected = self.ctx.get("expected", {})
        for h in self.hosts:
            want = expected.get(h) or {}
            have = self.local[h].get("files", {})
            where = self.local[h].get("conf_dir", "/etc/slurm")
            bad = []
            for name, sha in sorted(want.items()):
                if have.get(name) != sha:
                    got = (have.get(name) or "missing")[:12]
                    bad.append(
                        f"{where}/{name} sha256 {got}… differs from what site.yml writes "
                        f"({sha[:12]}…)"
                    )
            slurmd = self.local[h].get("services", {}).get("slurmd", "absent")
            if (
                bad
                and h != self.ctl
                and not any(have.get(name) for name in want)
                and not slurmd.startswith("active")
            ):
                # Configless: slurmd fetches the files when it starts; slurm.daemon names it.
                self.add(
                    h,
                    "config.files",
                    "SKIP",
                    f"no fetched copy in {where}: slurmd is not running ({slurmd})",
                )
            elif bad:
                self.add(
                    h,
                    "config.files",
                    "FAIL",
                    "; ".join(bad),
                    "run site.yml: it writes the files back and reconfigures or restarts Slurm",
                )
            elif not want:
                self.add(h, "config.files", "SKIP", "no expected hashes")
            else:
                self.add(
                    h,
                    "config.files",
                    "PASS",
                    f"{where}: " + ", ".join(sorted(want)) + " as site.yml writes them",
                )

    def daemons(self) -> None:
        for h in self.hosts:
            svc = self.local[h].get("services", {})
            problems, fine = [], []
            ctl_problem = False
            if h == self.ctl:
                ping = self.local[h].get("ping", {})
                state = svc.get("slurmctld", "absent")
                if not state.startswith("active/running"):
                    problems.append(f"slurmctld.service is {state}")
                elif "is UP" not in ping.get("out", ""):
                    problems.append(
                        "scontrol ping: " + (ping.get("out") or ping.get("err", "")).strip()
                    )
                else:
                    fine.append("slurmctld answers (scontrol ping)")
                ctl_problem = bool(problems)
            if h in self.computes:
                state = svc.get("slurmd", "absent")
                if state.startswith("active/running"):
                    fine.append(f"slurmd {state}")
                else:
                    problems.append(f"slurmd.service is {state}")
            if problems:
                unit = "slurmctld" if h == self.ctl and ctl_problem else "slurmd"
                self.add(
                    h,
                    "slurm.daemon",
                    "FAIL",
                    "; ".join(problems),
                    f"systemctl start {unit} on {h} (journalctl -u {unit}, /var/log/slurm); "
                    "site.yml starts it",
                )
            else:
                self.add(h, "slurm.daemon", "PASS", "; ".join(fine) or "no Slurm daemon here")

    def ports(self) -> None:
        ctl_ports = self.local.get(self.ctl, {}).get("ports", {})

        def text(src: str, name: str, res: dict) -> tuple[bool, str]:
            state = "open" if res.get("ok") else res.get("error", "?")
            return bool(res.get("ok")), f"{src} → {res['target']} ({name}) {state}"

        for h in self.hosts:
            # Each node's own connects; the controller's connect to a slurmd is that node's.
            seen = [
                text(h, name, res)
                for name, res in self.local[h].get("ports", {}).items()
                if not name.startswith("slurmd@")
            ]
            if h in self.computes and f"slurmd@{h}" in ctl_ports:
                seen.append(text(self.ctl, "slurmd", ctl_ports[f"slurmd@{h}"]))
            bad = [t for ok, t in seen if not ok]
            if bad:
                self.add(
                    h,
                    "net.ports",
                    "FAIL",
                    "; ".join(bad),
                    f"open TCP 6817 (slurmctld) and 6818 (slurmd) between {h} and {self.ctl} "
                    "(firewall, iptables/nftables); site.yml accepts them where iptables is in use",
                )
            else:
                self.add(h, "net.ports", "PASS", "; ".join(t for _ok, t in seen) or "no port")

    def hardware(self) -> None:
        margin = int(self.ctx.get("realmemory_margin_percent", 5))
        for h in self.hosts:
            if h not in self.computes:
                self.add(h, "hw.match", "SKIP", "not a compute node")
                continue
            hw = self.local[h].get("hardware", {})
            name = self.local[h].get("host", h)
            conf = self.slurm_nodes.get(name)
            have = self.ctx.get("hardware", {}).get(h) or {}
            # GPUs as the slurm_common role's slurm_node_info reads them (nvidia-smi, else
            # /dev/nvidia*), fresh in this run.
            smi = have.get("gpu_source") == "nvidia-smi"
            gpus = len(have.get("gpus", []))
            devices = ", ".join(g["file"] for g in have.get("gpus", [])) or "no /dev/nvidia*"
            bad, warn = [], []
            for path in hw.get("gres_missing", []):
                bad.append(f"gres.conf names {path}, which does not exist (slurmd waits for it)")
            g = hw.get("slurmd_g", {})
            if not hw.get("gres_missing") and g.get("rc", 0) != 0:
                bad.append("slurmd -G: " + (g.get("err") or g.get("out", "")).strip()[-200:])
            if conf:
                if have.get("cpus") is not None and conf["cpus"] > have["cpus"]:
                    bad.append(
                        f"slurm.conf CPUs={conf['cpus']} but slurmd -C reports {have['cpus']}"
                    )
                if have.get("real_memory") is not None and conf["memory"] > have["real_memory"]:
                    bad.append(
                        f"RealMemory={conf['memory']} above the {have['real_memory']} MB slurmd -C "
                        "reports (slurmctld drains it: Low RealMemory)"
                    )
                configured = gres_gpu_count(conf["gres"])
                if configured != gpus:
                    bad.append(
                        f"slurm.conf Gres={conf['gres']} ({configured} GPUs) but {gpus} present "
                        f"({'nvidia-smi' if smi else devices})"
                    )
                expected = int(self.ctx.get("gpus", {}).get(h, configured))
                if expected != gpus and configured == gpus:
                    bad.append(f"inventory slurm_compute_gpus={expected} but {gpus} GPUs present")
            if smi and gpus and not have.get("nvml_plugin"):
                warn.append(
                    "GPUs present but Slurm's gpu_nvml plugin is not installed (gres.conf lists "
                    "File= lines instead of AutoDetect=nvml)"
                )
            evidence = (
                f"CPUs {have.get('cpus')}, RealMemory {have.get('real_memory')} MB "
                f"(configured {conf['cpus'] if conf else '?'}, {conf['memory'] if conf else '?'}, "
                f"{margin}% margin), {gpus} GPUs"
            )
            if bad:
                self.add(
                    h,
                    "hw.match",
                    "FAIL",
                    "; ".join(bad),
                    f"make the hardware of {h} match (a missing GPU: reseat it, check the driver, "
                    f"nvidia-smi), or set slurm_compute_gpus for {h} and run site.yml",
                )
            elif warn:
                self.add(
                    h,
                    "hw.match",
                    "WARN",
                    "; ".join(warn) + "; " + evidence,
                    "install Slurm built with NVML for AutoDetect=nvml",
                )
            else:
                self.add(h, "hw.match", "PASS", evidence)

    def node_state(self) -> None:
        gate = str(self.ctx.get("acceptance_prefix") or "acceptance:")
        health = str(self.ctx.get("health_prefix") or "health:")
        for h in self.hosts:
            if h not in self.computes:
                self.add(h, "slurm.node", "SKIP", "not a compute node")
                continue
            name = self.local[h].get("host", h)
            if self.ctl_nodes_error or self.ctl not in self.local:
                self.add(
                    h,
                    "slurm.node",
                    "FAIL",
                    f"{self.ctl} cannot list the nodes: {self.ctl_nodes_error or 'no probe'}",
                    f"fix slurmctld on {self.ctl} first",
                )
                continue
            node = self.slurm_nodes.get(name)
            if node is None:
                self.add(
                    h,
                    "slurm.node",
                    "FAIL",
                    f"no NodeName={name} (hostname -s of {h}) in slurmctld; registered: "
                    + (", ".join(sorted(self.slurm_nodes)) or "none"),
                    f"run site.yml: slurm.conf must name {h} as {name}",
                )
                continue
            state, reason = node["state"], node["reason"]
            text = f"State={state}" + (f" Reason={reason}" if reason else "")
            flags = set(re.split(r"[+]", state.rstrip("*")))
            down = state.endswith("*") or flags & set(DOWN_STATES)
            if down:
                self.add(
                    h,
                    "slurm.node",
                    "FAIL",
                    text,
                    f"fix the cause on {h}, then site.yml returns it to service "
                    f"(scontrol update nodename={name} state=resume)",
                )
            elif flags & {"DRAIN", "DRAINING", "DRAINED"} and reason.startswith(gate):
                # The acceptance gate's own drain: not a fault of the cluster;
                # the smoke job is what resumes it (or names why it failed).
                self.add(
                    h,
                    "slurm.node",
                    "WARN",
                    text,
                    "smoke_train.yml runs the acceptance job on it and resumes it when it passes"
                    + ("" if reason.startswith(f"{gate} pending") else "; fix the cause first"),
                )
            elif flags & {"DRAIN", "DRAINING", "DRAINED"} and reason.startswith(health):
                # The node health program's own drain: a fault while its checks fail.
                live = (self.local[h].get("health") or {}).get("live") or []
                failing = any(r["status"] == "FAIL" for r in live)
                self.add(
                    h,
                    "slurm.node",
                    "FAIL" if failing else "WARN",
                    text,
                    "fix what the reason names; the health program then resumes the node",
                )
            elif flags & {"DRAIN", "DRAINING", "DRAINED"}:
                status = "FAIL" if SLURM_DRAIN_REASONS.match(reason) else "WARN"
                self.add(
                    h,
                    "slurm.node",
                    status,
                    text,
                    f"scontrol update nodename={name} state=resume once the reason is fixed",
                )
            else:
                self.add(h, "slurm.node", "PASS", text)

    def shared_fs(self) -> None:
        mounts = {h: self.local[h].get("shared", {}) for h in self.hosts}
        if not any(mounts.values()):
            for h in self.hosts:
                self.add(h, "shared.fs", "SKIP", "no shared filesystem configured")
            return
        ctl_reads = self.cross.get(self.ctl, {}).get("tokens", {})
        for h in self.hosts:
            m = mounts[h]
            bad = []
            if not m.get("write", {}).get("ok"):
                bad.append(
                    f"{m.get('path')} not writable by {self.ctx.get('job_user', 'root')}: "
                    f"{m.get('write', {}).get('error') or 'no folder'}"
                )
            if h != self.ctl:
                seen = ctl_reads.get(h, {})
                back = self.cross.get(h, {}).get("tokens", {}).get(self.ctl, {})
                # What each side wrote, as its probe reported it.
                want_h = m.get("write", {}).get("token")
                want_c = mounts[self.ctl].get("write", {}).get("token")
                if seen.get("value") != want_h and m.get("write", {}).get("ok"):
                    bad.append(
                        f"{self.ctl} does not see the file {h} wrote "
                        f"({seen.get('error', 'other content')})"
                    )
                if back.get("value") != want_c and mounts[self.ctl].get("write", {}).get("ok"):
                    bad.append(
                        f"{h} does not see the file {self.ctl} wrote "
                        f"({back.get('error', 'other content')})"
                    )
                if bad and m.get("mount") != mounts[self.ctl].get("mount"):
                    bad.append(
                        f"{m.get('path')} on {h} is '{m.get('mount')}', on {self.ctl} "
                        f"'{mounts[self.ctl].get('mount')}'"
                    )
            if bad:
                self.add(
                    h,
                    "shared.fs",
                    "FAIL",
                    "; ".join(bad),
                    f"mount the shared filesystem at {m.get('path')} on {h} "
                    "(shared_fs_type=nfs: site.yml mounts it)",
                )
            else:
                self.add(
                    h,
                    "shared.fs",
                    "PASS",
                    f"{m.get('path')}: {m.get('mount')}, token seen across nodes",
                )

    def health(self) -> None:
        """The node health program's checks, run now by the probe, and slurmd's last run."""
        prefix = str(self.ctx.get("health_prefix") or "health:")
        for h in self.hosts:
            if h not in self.computes:
                self.add(h, "health", "SKIP", "not a compute node (no slurmd runs the program)")
                continue
            probe = self.local[h].get("health") or {}
            if not probe.get("installed"):
                self.add(h, "health", "SKIP", probe.get("error") or "no health program here")
                continue
            live = probe.get("live") or []
            last = probe.get("last") or {}
            fails = [r for r in live if r["status"] == "FAIL"]
            warns = [r for r in live if r["status"] == "WARN"]
            if last:
                age = float(self.local[h].get("time", 0)) - float(last.get("time", 0))
                act = last.get("action", "none")
                seen = f"slurmd's last run {age:.0f} s ago: {last.get('verdict')}" + (
                    f", {act}" if act not in ("none", "") else ""
                )
            else:
                seen = "slurmd has not run it yet"
            node = self.slurm_nodes.get(self.local[h].get("host", h), {})
            if fails:
                self.add(
                    h,
                    "health",
                    "FAIL",
                    "; ".join(f"{r['id']}: {r['message']}" for r in fails) + f" ({seen})",
                    fails[0].get("fix") or "see cluster-health on the node",
                )
            elif node.get("reason", "").startswith(prefix):
                self.add(
                    h,
                    "health",
                    "WARN",
                    f"every check passes now; still drained as '{node['reason']}' ({seen})",
                    "the program's next run lifts its drain (HealthCheckInterval)",
                )
            elif warns or not last:
                self.add(
                    h,
                    "health",
                    "WARN",
                    "; ".join(f"{r['id']}: {r['message']}" for r in warns) or seen,
                    "see cluster-health on the node",
                )
            else:
                self.add(h, "health", "PASS", f"{len(live)} checks pass ({seen})")

    def torch(self) -> None:
        for h in self.hosts:
            info = self.local[h].get("torch")
            if info is None:
                self.add(h, "torch.venv", "SKIP", "no torch venv on this node")
                continue
            want = int(self.ctx.get("torch_gpus", {}).get(h, 0))
            if not info.get("ok"):
                self.add(
                    h,
                    "torch.venv",
                    "FAIL",
                    f"import torch failed: {info.get('error')}",
                    "run site.yml (role pytorch reinstalls the venv)",
                )
            elif info.get("device_count") != want:
                self.add(
                    h,
                    "torch.venv",
                    "FAIL",
                    f"torch {info.get('version')} sees {info.get('device_count')} CUDA devices, "
                    f"expected {want}",
                    "check the NVIDIA driver and the torch variant (CUDA build)",
                )
            else:
                self.add(
                    h,
                    "torch.venv",
                    "PASS",
                    f"torch {info.get('version')}, {info.get('device_count')} CUDA devices",
                )

    def reachability(self) -> None:
        for h in self.unreachable:
            for check in CHECKS:
                self.add(
                    h,
                    check,
                    "FAIL" if check == CHECKS[0] else "SKIP",
                    self.ctx.get("unreachable", {}).get(h, "Ansible could not reach the node"),
                    f"check that {h} is up and reachable over SSH",
                )

    # --- causes -----------------------------------------------------------------

    def attribute(self) -> None:
        failed = {(r["host"], r["check"]) for r in self.results if r["status"] == "FAIL"}
        for r in self.results:
            if r["status"] != "FAIL":
                continue
            for dep in LOCAL_CAUSES.get(r["check"], ()):
                if (r["host"], dep) in failed and dep != r["check"]:
                    r["caused_by"] = f"{r['host']} {dep}"
                    break
            else:
                for dep in ANY_HOST_CAUSES.get(r["check"], ()):
                    culprit = next((h for h, c in failed if c == dep), None)
                    if culprit is not None:
                        r["caused_by"] = f"{culprit} {dep}"
                        break
                if "caused_by" in r or r["host"] == self.ctl:
                    continue
                for dep in CONTROLLER_CAUSES.get(r["check"], ()):
                    if (self.ctl, dep) in failed and self._ctl_explains(dep, r["check"], r):
                        r["caused_by"] = f"{self.ctl} {dep}"
                        break

        self._break_cycles()

    def _break_cycles(self) -> None:
        """A chain of caused_by that comes back to itself has no cause: its first FAIL is one."""
        index = {f"{r['host']} {r['check']}": r for r in self.results}
        for r in self.results:
            seen = set()
            cur = r
            while "caused_by" in cur:
                key = f"{cur['host']} {cur['check']}"
                if key in seen:
                    del cur["caused_by"]
                    break
                seen.add(key)
                cur = index[cur["caused_by"]]

    def _ctl_explains(self, dep: str, check: str, result: dict | None = None) -> bool:
        """A controller failure of the same check explains a node's only when all nodes fail it."""
        if dep != check:
            return True
        if check == "config.files" and result is not None:
            # The controller's file explains a node's stale copy of the same file.
            mine = set(CONF_NAME.findall(result["evidence"]))
            ctl = next(
                r for r in self.results if r["host"] == self.ctl and r["check"] == "config.files"
            )
            return bool(mine) and mine <= set(CONF_NAME.findall(ctl["evidence"]))
        return all(
            any(
                r["host"] == h and r["check"] == check and r["status"] == "FAIL"
                for r in self.results
            )
            for h in self.others()
        )


def doctor_report(probes: dict, ctx: dict) -> dict:
    """{hosts, checks, results, causes, counts, verdict} from {host: {local, cross}} probes."""
    d = _Doctor(probes, ctx)
    steps: Iterable[Callable[[], None]] = (
        d.hostname,
        d.munge_service,
        d.munge_key,
        d.clock,
        d.munge_cross,
        d.users,
        d.lab_users,
        d.versions,
        d.files,
        d.daemons,
        d.ports,
        d.hardware,
        d.node_state,
        d.shared_fs,
        d.health,
        d.torch,
        d.reachability,
    )
    for step in steps:
        step()
    d.attribute()
    # A controller-wide cause found on a node (all nodes agree against the controller) is kept.
    order = {c: i for i, c in enumerate(CHECKS)}
    hosts = list(ctx["hosts"])
    d.results.sort(
        key=lambda r: (hosts.index(r["host"]) if r["host"] in hosts else 99, order[r["check"]])
    )
    causes = [r for r in d.results if r["status"] == "FAIL" and "caused_by" not in r]
    counts = Counter(r["status"] for r in d.results)
    return {
        "hosts": hosts,
        "checks": list(CHECKS),
        "results": d.results,
        "causes": causes,
        "counts": dict(counts),
        "verdict": "FAIL" if causes else ("WARN" if counts.get("WARN") else "PASS"),
    }


def doctor_table(report: dict) -> list[str]:
    """Node x check table: PASS/WARN/FAIL, '(fail)' for a consequence, '-' for SKIP."""
    cell = {(r["host"], r["check"]): r for r in report["results"]}
    short = [c.split(".", 1)[-1] if c != "clock" else c for c in report["checks"]]
    width = max(len(h) for h in report["hosts"] + ["node"])
    cols = [max(len(s), 6) for s in short]
    lines = [
        "node".ljust(width) + "  " + "  ".join(s.ljust(w) for s, w in zip(short, cols, strict=True))
    ]
    for h in report["hosts"]:
        row = []
        for check, w in zip(report["checks"], cols, strict=True):
            r = cell.get((h, check))
            text = "-" if r is None or r["status"] == "SKIP" else r["status"]
            if r is not None and r["status"] == "FAIL" and "caused_by" in r:
                text = "(fail)"
            row.append(text.ljust(w))
        lines.append(h.ljust(width) + "  " + "  ".join(row).rstrip())
    return lines


def doctor_causes(report: dict) -> list[str]:
    """One line per root cause: 'host check: evidence. Fix: …'."""
    return [f"{r['host']} {r['check']}: {r['evidence']}. Fix: {r['fix']}" for r in report["causes"]]


class FilterModule:
    def filters(self) -> dict:
        return {
            "doctor_report": doctor_report,
            "doctor_table": doctor_table,
            "doctor_causes": doctor_causes,
        }
