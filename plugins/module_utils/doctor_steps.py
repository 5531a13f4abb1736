"""The doctor's cluster-scope checks, part one: names, munge, clocks, users, versions, files.

Each method judges one check id of the registry (cluster_checks.py, scope
``cluster``) from what cluster_probe read on every node, adding one result
per node. ``STEPS`` in doctor_slurm.py maps each id to its method.
"""

from __future__ import annotations

import re
from collections import Counter

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


class DoctorSteps:
    def __init__(self, probes: dict, ctx: dict) -> None:
        self.local = {h: p.get("local") or {} for h, p in probes.items()}
        self.cross = {h: p.get("cross") or {} for h, p in probes.items()}
        self.ctx = ctx
        self.ctl: str = ctx["controller"]
        self.computes: list[str] = [h for h in ctx["computes"] if h in probes]
        # {login host: its daemon}: sackd where its package is installed, else
        # slurmd in no partition (roles/slurm_login).
        self.logins: dict[str, str] = {
            h: "slurmd"
            if self.local[h].get("services", {}).get("sackd") in (None, "absent")
            else "sackd"
            for h in ctx.get("logins") or []
            if h in probes
        }
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

    def auth_key(self) -> None:
        """Slurm's own key (auth/slurm): on every host, slurm:slurm 0600, the controller's."""
        if self.ctx.get("auth_type", "munge") != "slurm":
            for h in self.hosts:
                self.add(h, "auth.key", "SKIP", "munge authenticates (cluster_auth_type: munge)")
            return
        keys = {h: self.local[h].get("auth_key") or {} for h in self.hosts}
        reference = keys.get(self.ctl, {}).get("fingerprint", "")
        for h in self.hosts:
            key = keys[h]
            wrong = []
            if not key.get("exists"):
                wrong.append(f"no /etc/slurm/slurm.jwks: {key.get('error', 'missing')}")
            else:
                if key["mode"] != "0600":
                    wrong.append(f"mode {key['mode']} (want 0600)")
                if key["owner"] != "slurm" or key["group"] != "slurm":
                    wrong.append(f"owner {key['owner']}:{key['group']} (want slurm:slurm)")
                if h != self.ctl and reference and key["fingerprint"] != reference:
                    wrong.append(
                        f"key differs (fingerprint {key['fingerprint']}, {self.ctl} has "
                        f"{reference}): the daemons there refuse each other's messages"
                    )
            if wrong:
                self.add(
                    h,
                    "auth.key",
                    "FAIL",
                    "slurm.jwks " + ", ".join(wrong),
                    "run site.yml: it installs the controller's slurm.jwks (0600 slurm:slurm) "
                    f"on {h} and restarts the daemons there",
                )
            else:
                fingerprint = key["fingerprint"]
                self.add(h, "auth.key", "PASS", f"0600 slurm:slurm, fingerprint {fingerprint}")

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
        # The probes read the clocks at different moments, up to the probes'
        # span apart (from the doctor's start to its judgement, on the control
        # machine's clock): an offset is at least what that span cannot
        # explain. On a loaded machine the nodes' probes started 6.5 s apart
        # (span 16.6 s) and a clock shared by all was judged 7 s off.
        spread = float(self.ctx.get("probe_spread_s") or 0)
        for h in self.hosts:
            t = self.local[h].get("time")
            if t is None or t_ctl is None:
                self.add(h, "clock", "SKIP", "no time reading")
                continue
            system = t - t_ctl
            skew = self._munged_skew(h) if h != self.ctl else 0.0
            offset = system + (skew or 0.0) - (ctl_skew or 0.0 if h != self.ctl else 0.0)
            least = max(0.0, abs(offset) - spread) if h != self.ctl else 0.0
            parts = [f"system clock {system:+.1f} s"]
            if skew:
                parts.append(f"munged clock {skew:+.0f} s from its own system clock")
            if spread and h != self.ctl:
                parts.append(f"read up to {spread:.1f} s apart: at least {least:.0f} s off")
            text = (
                f"offset to {self.ctl} {offset:+.0f} s ("
                + ", ".join(parts)
                + f"; munge TTL {ttl} s)"
            )
            if least >= fail:
                self.add(
                    h,
                    "clock",
                    "FAIL",
                    text,
                    f"synchronise the clock of {h} (chrony, systemd-timesyncd), restart munge; "
                    f"munge rejects credentials older than {ttl} s",
                )
            elif least > warn:
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
            ctl = self.local.get(self.ctl, {})
            # The time read where the credential was made (the doctor makes
            # the controller's before the other nodes' probes), else the probe's.
            made = ctl.get("credential_time", ctl.get("time"))
            if "encode_time" in d and made is not None:
                skew = d["encode_time"] - made
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
