"""The inventory's value rules: what Slurm, munge, NFS and MariaDB accept, and the
collector of problems (``_Check``) that plugins/filter/inventory_check.py fills.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

# Slurm time: MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, INFINITE/UNLIMITED.
_TIME_FORMS = (
    re.compile(r"(?P<m>\d+)"),
    re.compile(r"(?P<m>\d+):(?P<s>\d{1,2})"),
    re.compile(r"(?P<h>\d+):(?P<m>\d{1,2}):(?P<s>\d{1,2})"),
    re.compile(r"(?P<d>\d+)-(?P<h>\d{1,2})"),
    re.compile(r"(?P<d>\d+)-(?P<h>\d{1,2}):(?P<m>\d{1,2})"),
    re.compile(r"(?P<d>\d+)-(?P<h>\d{1,2}):(?P<m>\d{1,2}):(?P<s>\d{1,2})"),
)
TIME_FIX = "use MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM:SS or INFINITE, e.g. 2-00:00:00"
# ClusterName: lower case (Slurm maps upper case to lower), a MySQL table prefix.
# Every pattern is used with fullmatch: '$' would let a trailing newline through.
CLUSTER_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
PARTITION_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
SLURM_NAME = re.compile(r"[a-z0-9_][a-z0-9_.-]{0,63}")
# A POSIX user or group name as useradd takes it by default (no dot, no upper case).
USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
CONF_KEY = re.compile(r"[A-Z][A-Za-z0-9]+")
# A host name (RFC 1123 label): no underscore, Slurm's NodeName and the resolver agree.
HOST_NAME = re.compile(r"(?i)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
# Characters a path may hold here: it reaches shells, config files and exports.
SAFE_PATH = re.compile(r"/[A-Za-z0-9._/+-]*")
# The lowest uid/gid of a lab user (below: system accounts).
MIN_USER_ID = 1000
USER_KEYS = {
    "name",
    "uid",
    "group",
    "gid",
    "groups",
    "privileged_groups",
    "comment",
    "shell",
    "ssh_keys",
    "accounts",
}
# Groups that hand a member root, the key every daemon trusts, the cluster's
# secrets or its logs: a lab user joins one only when the inventory names it
# again in that user's privileged_groups (an explicit opt-in per user).
PRIVILEGED_GROUPS = {
    "root", "sudo", "wheel", "admin", "adm", "docker", "lxd", "libvirt", "disk", "shadow",
    "staff", "systemd-journal", "munge", "slurm", "mysql", "prometheus",
}  # fmt: skip
SSH_KEY = re.compile(
    r"(ssh-(ed25519|rsa|dss)|ecdsa-sha2-nistp(256|384|521)|sk-(ssh-ed25519|ecdsa-sha2-nistp256)"
    r"@openssh\.com) [A-Za-z0-9+/=]+( [^\n\r]*)?"
)
_TRES = re.compile(
    r"(cpu|mem|energy|node|billing|vmem|pages|fs/disk|fs/lustre|ic/ofed"
    r"|(gres|license|bb)/[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)?)=\d+[KMGTP]?"
)
TRES_FIX = "write TYPE=COUNT pairs separated by commas, e.g. gres/gpu=6000,cpu=100000"
# Keys the slurm_common template writes itself: a second line would fight it.
MANAGED_KEYS = {
    "ClusterName",
    "SlurmctldHost",
    "AuthType",
    "CryptoType",
    "MpiDefault",
    "SlurmUser",
    "SlurmctldPort",
    "SlurmdPort",
    "SlurmctldPidFile",
    "SlurmdPidFile",
    "StateSaveLocation",
    "SlurmdSpoolDir",
    "SlurmctldLogFile",
    "SlurmdLogFile",
    "ProctrackType",
    "TaskPlugin",
    "ReturnToService",
    "SchedulerType",
    "SelectType",
    "SelectTypeParameters",
    "GresTypes",
    "AccountingStorageType",
    "AccountingStorageHost",
    "AccountingStoragePort",
    "AccountingStorageTRES",
    "JobAcctGatherType",
    "JobAcctGatherFrequency",
    "NodeName",
    "PartitionName",
}
# Written by the role while cluster_health is on (the node health program).
HEALTH_KEYS = {
    "HealthCheckProgram": "skip (checks) or false",
    "HealthCheckInterval": "interval",
    "HealthCheckNodeState": "node_state",
}
# slurm.conf parameters (man slurm.conf, Slurm 22.05 to 24.11) that
# slurm_common_extra_config may set; MANAGED_KEYS are the role's own.
_SLURM_CONF_WORDS = """
    AccountingStorageBackupHost AccountingStorageEnforce AccountingStorageExternalHost
    AccountingStorageParameters AccountingStoragePass AccountingStorageUser
    AccountingStoreFlags AcctGatherNodeFreq AcctGatherEnergyType AcctGatherInterconnectType
    AcctGatherFilesystemType AcctGatherProfileType AllowSpecResourcesUsage AuthAltTypes
    AuthAltParameters AuthInfo BatchStartTimeout BcastExclude BcastParameters BurstBufferType
    CliFilterPlugins CommunicationParameters CompleteWait CoreSpecPlugin CpuFreqDef
    CpuFreqGovernors CredType DebugFlags DefCpuPerGPU DefMemPerCPU DefMemPerGPU DefMemPerNode
    DependencyParameters DisableRootJobs EioTimeout EnforcePartLimits Epilog EpilogMsgTime
    EpilogSlurmctld ExtSensorsFreq ExtSensorsType FairShareDampeningFactor FederationParameters
    FirstJobId GetEnvTimeout GpuFreqDef GroupUpdateForce GroupUpdateTime HashPlugin
    HealthCheckInterval HealthCheckNodeState HealthCheckProgram InactiveLimit
    InteractiveStepOptions JobAcctGatherParams JobCompHost JobCompLoc JobCompParams JobCompPass
    JobCompPort JobCompType JobCompUser JobContainerType JobDefaults JobFileAppend JobRequeue
    JobSubmitPlugins KillOnBadExit KillWait LaunchParameters Licenses LogTimeFormat
    MailDomain MailProg MaxArraySize MaxBatchRequeue MaxDBDMsgs MaxJobCount MaxJobId
    MaxMemPerCPU MaxMemPerNode MaxNodeCount MaxStepCount MaxTasksPerNode MCSParameters MCSPlugin
    MessageTimeout MinJobAge MpiParams OverTimeLimit PluginDir PlugStackConfig PowerParameters
    PowerPlugin PreemptExemptTime PreemptMode PreemptParameters PreemptType PrEpParameters
    PrEpPlugins PriorityCalcPeriod PriorityDecayHalfLife PriorityFavorSmall PriorityFlags
    PriorityMaxAge PriorityParameters PrioritySiteFactorParameters PrioritySiteFactorPlugin
    PriorityType PriorityUsageResetPeriod PriorityWeightAge PriorityWeightAssoc
    PriorityWeightFairshare PriorityWeightJobSize PriorityWeightPartition PriorityWeightQOS
    PriorityWeightTRES PrivateData Prolog PrologEpilogTimeout PrologFlags PrologSlurmctld
    PropagatePrioProcess PropagateResourceLimits PropagateResourceLimitsExcept RebootProgram
    ReconfigFlags RequeueExit RequeueExitHold ResumeFailProgram ResumeProgram ResumeRate
    ResumeTimeout ResvEpilog ResvOverRun ResvProlog RoutePlugin SchedulerParameters
    SchedulerTimeSlice ScronParameters SelectTypeParameters SlurmctldAddr SlurmctldDebug
    SlurmctldHost SlurmctldParameters SlurmctldPrimaryOffProg SlurmctldPrimaryOnProg
    SlurmctldSyslogDebug SlurmctldTimeout SlurmdDebug SlurmdParameters SlurmdSyslogDebug
    SlurmdTimeout SlurmdUser SlurmSchedLogFile SlurmSchedLogLevel SrunEpilog SrunPortRange
    SrunProlog SuspendExcNodes SuspendExcParts SuspendExcStates SuspendProgram SuspendRate
    SuspendTime SuspendTimeout SwitchParameters SwitchType TaskEpilog TaskPluginParam
    TaskProlog TCPTimeout TmpFS TopologyParam TopologyPlugin TrackWCKey TreeWidth
    UnkillableStepProgram UnkillableStepTimeout UsePAM VSizeFactor WaitTime X11Parameters
    MaxStepCount CgroupPlugin"""
SLURM_CONF_KEYS = set(_SLURM_CONF_WORDS.split())
PARTITION_KEYS = {"name", "nodes", "default", "max_time"}
NODE_FIELDS = {
    "CPUs",
    "Boards",
    "SocketsPerBoard",
    "CoresPerSocket",
    "ThreadsPerCore",
    "RealMemory",
}
SYSTEM_DIRS = {
    "/",
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/home",
    "/lib",
    "/lib32",
    "/lib64",
    "/opt",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/srv",
    "/sys",
    "/tmp",
    "/usr",
    "/usr/bin",
    "/usr/lib",
    "/usr/local",
    "/usr/sbin",
    "/var",
    "/var/lib",
    "/var/log",
}
# The daemons' ports (role cluster) and their defaults.
PORTS = {"cluster_slurmctld_port": 6817, "cluster_slurmd_port": 6818, "cluster_slurmdbd_port": 6819}


def slurm_time_ok(value: object) -> bool:
    """Whether Slurm takes `value` as a time limit (MaxTime, MaxWall)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 0
    text = str(value)
    if text.upper() in ("INFINITE", "UNLIMITED"):
        return True
    for form in _TIME_FORMS:
        m = form.fullmatch(text)
        if m:
            parts = {k: int(v) for k, v in m.groupdict().items() if v is not None}
            if "d" in parts and parts.get("h", 0) > 23:
                return False
            if "h" in parts and parts.get("m", 0) > 59:
                return False
            return parts.get("s", 0) <= 59
    return False


def tres_ok(value: object) -> bool:
    items = str(value).split(",")
    return all(_TRES.fullmatch(item.strip()) for item in items) and bool(str(value).strip())


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    # The whole string: "5\n" or " 5" is not a number (it would reach a file as typed).
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value):
        return int(value)
    return None


def _float(value: object) -> float | None:
    """A number, read as _int reads a whole one: a bool is none; a string counts
    only whole ("1.5", not "1.5 ")."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", value):
        return float(value)
    return None


def path_problem(value: object) -> str:
    """Why a path cannot hold cluster data, or ''."""
    text = str(value)
    if not text.startswith("/"):
        return "is not an absolute path"
    norm = re.sub(r"/+", "/", text).rstrip("/") or "/"
    if norm in SYSTEM_DIRS:
        return f"is {norm}, a system directory"
    if "/../" in norm + "/" or re.search(r"\s", text):
        return "has '..' or spaces"
    if not SAFE_PATH.fullmatch(text):
        return "has characters other than letters, digits and . _ - + /"
    return ""


class _Check:
    def __init__(self, hostvars: Mapping, groups: Mapping, defaults: Mapping) -> None:
        self.hv = hostvars
        self.groups = groups
        self.defaults = defaults
        self.hosts = sorted(groups.get("all", []))
        self.found: dict[tuple[str, str, str], tuple[str, list[str]]] = {}
        self._host_vars: dict[str, Mapping] = {}

    def host(self, h: str) -> Mapping:
        """hostvars[h], looked up once: each lookup makes Ansible gather the host's variables."""
        if h not in self._host_vars:
            self._host_vars[h] = self.hv[h]
        return self._host_vars[h]

    def values(self, var: str) -> dict[str, Any]:
        out = {}
        for h in self.hosts:
            hv = self.host(h)
            if var in hv:
                out[h] = hv[var]
        return out

    def bad(self, host: str, var: str, value: object, problem: str, fix: str) -> None:
        key = (var, repr(value), problem)
        self.found.setdefault(key, (fix, []))[1].append(host)

    def each(self, var: str, check: Callable[[str, Any], None]) -> None:
        for host, value in self.values(var).items():
            check(host, value)

    def messages(self) -> list[str]:
        out = []
        for (var, value, problem), (fix, hosts) in self.found.items():
            where = "all hosts" if len(hosts) == len(self.hosts) > 1 else ", ".join(hosts)
            out.append(f"{where}: {var}={value} {problem}. Fix: {fix}")
        return out


def _users(c: _Check, host: str, value: Any) -> None:
    var = "cluster_users"
    if not isinstance(value, list):
        c.bad(host, var, value, "is not a list", "e.g. [{name: alice, uid: 2001, accounts: [lab]}]")
        return
    ctl = (c.groups.get("slurm_controller") or [host])[0]
    accounts = {
        str(a.get("name"))
        for a in c.hv.get(ctl, {}).get("slurm_controller_accounts", []) or []
        if isinstance(a, Mapping)
    }
    proof = c.host(host).get("cluster_proof_user", "clusterproof")
    proof_uid = _int(c.host(host).get("cluster_proof_uid", 59000))
    accounting = bool(c.groups.get("slurm_dbd"))
    names: dict[str, int] = {}
    uids: dict[int, str] = {}
    gids: dict[str, int] = {}
    gid_names: dict[int, str] = {}
    for i, user in enumerate(value):
        where = f"{var}[{i}]"
        if not isinstance(user, Mapping) or "name" not in user or "uid" not in user:
            c.bad(host, where, user, "needs a name and a uid", "e.g. {name: alice, uid: 2001}")
            continue
        name = str(user["name"])
        unknown = sorted(set(map(str, user)) - USER_KEYS)
        if unknown:
            c.bad(
                host,
                where,
                dict(user),
                f"has unknown keys {', '.join(unknown)}",
                f"use only {', '.join(sorted(USER_KEYS))}",
            )
        if not USER_NAME.fullmatch(name):
            c.bad(
                host,
                f"{where}.name",
                user["name"],
                "is not a POSIX user name",
                "lower-case letters, digits, _ and -, a letter or _ first, at most 32",
            )
        if name in names or name == proof:
            c.bad(
                host,
                f"{where}.name",
                name,
                "is given twice" if name in names else f"is the proof account's name ({proof})",
                f"name each user once; rename {name}",
            )
        names[name] = i
        uid = _int(user["uid"])
        if uid is None or uid < MIN_USER_ID or uid > 4294967294:
            c.bad(
                host,
                f"{where}.uid",
                user["uid"],
                f"is not a whole number from {MIN_USER_ID} (below are system accounts)",
                f"give {name} a uid from {MIN_USER_ID}, the one it has in your directory",
            )
        elif uid in uids or uid == proof_uid:
            other = uids.get(uid, proof)
            c.bad(
                host,
                f"{where}.uid",
                uid,
                f"of {name} is also the uid of {other}",
                f"give {name} and {other} different uids",
            )
        if uid is not None:
            uids.setdefault(uid, name)
        group = str(user.get("group") or name)
        gid = _int(user.get("gid", user["uid"]))
        if not USER_NAME.fullmatch(group):
            c.bad(
                host,
                f"{where}.group",
                group,
                "is not a POSIX group name",
                "lower-case letters, digits, _ and -",
            )
        if gid is None or gid < MIN_USER_ID:
            c.bad(
                host,
                f"{where}.gid",
                user.get("gid"),
                f"is not a whole number from {MIN_USER_ID}",
                f"e.g. gid: {MIN_USER_ID + 1000}",
            )
        elif gids.get(group, gid) != gid or gid_names.get(gid, group) != group:
            c.bad(
                host,
                f"{where}",
                {"group": group, "gid": gid},
                f"gives group {group} gid {gid}, but another user gives "
                f"{group} gid {gids.get(group)} or gid {gid} to {gid_names.get(gid)}",
                "give each group one gid",
            )
        if gid is not None:
            gids.setdefault(group, gid)
            gid_names.setdefault(gid, group)
        extra = user.get("groups", []) or []
        if not isinstance(extra, list) or not all(USER_NAME.fullmatch(str(g)) for g in extra):
            c.bad(host, f"{where}.groups", extra, "is not a list of group names", "e.g. [video]")
        elif isinstance(extra, list):
            _privileged(c, host, where, user, extra)
        for key in ("comment", "shell"):
            text = str(user.get(key, ""))
            if re.search(r"[:\n\r\x00]", text):
                c.bad(
                    host,
                    f"{where}.{key}",
                    text,
                    "holds ':' or a line break",
                    "one line without ':'",
                )
        if "shell" in user and not SAFE_PATH.fullmatch(str(user["shell"])):
            c.bad(
                host,
                f"{where}.shell",
                user["shell"],
                "is not an absolute path",
                "e.g. shell: /bin/bash",
            )
        keys = user.get("ssh_keys", []) or []
        if not isinstance(keys, list) or not all(SSH_KEY.fullmatch(str(k).strip()) for k in keys):
            c.bad(
                host,
                f"{where}.ssh_keys",
                keys,
                "is not a list of one-line SSH public keys",
                "paste each key's line from ~/.ssh/id_ed25519.pub",
            )
        acc = user.get("accounts", []) or []
        if not isinstance(acc, list):
            c.bad(host, f"{where}.accounts", acc, "is not a list", "e.g. accounts: [lab]")
            continue
        missing = [a for a in acc if str(a) not in accounts]
        if missing and accounting:
            c.bad(
                host,
                f"{where}.accounts",
                acc,
                f"names {', '.join(map(str, missing))}, not in slurm_controller_accounts",
                "define the account in slurm_controller_accounts or fix the name",
            )


def _proof_user(c: _Check, host: str, value: Any) -> None:
    if not USER_NAME.fullmatch(str(value)):
        c.bad(
            host,
            "cluster_proof_user",
            value,
            "is not a POSIX user name",
            "e.g. cluster_proof_user: clusterproof",
        )


def _privileged(c: _Check, host: str, where: str, user: Mapping, extra: list) -> None:
    """A privileged group, or the proof account's, only with the user's own opt-in."""
    proof = str(c.host(host).get("cluster_proof_user", "clusterproof"))
    allowed = user.get("privileged_groups", []) or []
    if not isinstance(allowed, list) or not all(isinstance(g, str) for g in allowed):
        c.bad(host, f"{where}.privileged_groups", allowed, "is not a list of group names",
              "e.g. privileged_groups: [docker]")  # fmt: skip
        return
    risky = [str(g) for g in extra if str(g) in PRIVILEGED_GROUPS or str(g) == proof]
    denied = [g for g in risky if g not in allowed]
    if denied:
        c.bad(
            host,
            f"{where}.groups",
            extra,
            f"gives {user.get('name')} the privileged group {', '.join(denied)} (root, the "
            "cluster's key or secrets, or the proof account's results)",
            f"remove it, or opt in for this user: privileged_groups: {denied}",
        )


# Rule makers: a check of one variable from its shape.


def _path(var: str) -> Callable[[_Check, str, Any], None]:
    def check(c: _Check, host: str, value: Any) -> None:
        problem = path_problem(value)
        if problem:
            c.bad(
                host,
                var,
                value,
                problem,
                f"set {var} to an absolute folder of its own, e.g. /shared",
            )

    return check


def _int_range(
    var: str, low: int, high: int | None, example: int
) -> Callable[[_Check, str, Any], None]:
    def check(c: _Check, host: str, value: Any) -> None:
        n = _int(value)
        if n is None or n < low or (high is not None and n > high):
            span = f"{low}-{high}" if high is not None else f">= {low}"
            c.bad(host, var, value, f"is not a whole number in {span}", f"e.g. {var}: {example}")

    return check


def _pattern(var: str, regex: str, what: str, example: str) -> Callable[[_Check, str, Any], None]:
    def check(c: _Check, host: str, value: Any) -> None:
        if not re.fullmatch(regex, str(value)):
            c.bad(host, var, value, f"is not {what}", f"e.g. {var}: {example}")

    return check
