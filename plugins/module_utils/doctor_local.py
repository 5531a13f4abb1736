"""What the cluster doctor reads on one node (module cluster_probe's phases).

Here, not in the module, so that module node_state can take the doctor's
reading of a node in its own round trip (site.yml's first probe) with the
same code and the same options (SPEC).
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import socket
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpulab.slurm_cluster.plugins.module_utils import (
    node_checks as nodechecks,
)
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.doctor_exchange import cross
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.node_base import (
    as_user,
    file_info,
    run,
    units,
)
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.slurm_node import read_installed
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.torch_probe import torch_info

SERVICES = ("munge", "slurmd", "slurmctld", "slurmdbd", "sackd")
CONF_FILES = ("slurm.conf", "gres.conf", "cgroup.conf")
CONFIGLESS_DIR = "/run/slurm/conf"


def services() -> dict:
    """{unit: ActiveState/SubState or 'absent'} from one systemctl call."""
    return {
        name: "absent" if u["active"] == "absent" else f"{u['active']}/{u['sub']}"
        for name, u in units(list(SERVICES)).items()
    }


def key_info(path: str) -> dict:
    """Mode, owner and a fingerprint (first 16 hex of SHA-256) of a key (munge, slurm.jwks)."""
    info = file_info(path)
    if not info["exists"]:
        return info
    return {k: info[k] for k in ("exists", "mode", "owner", "group")} | {
        "fingerprint": info["sha256"][:16]
    }


def node_checks(config: str, state_dir: str) -> dict:
    """The registry's node checks (use doctor) run here now by their readers, without draining.

    The same readers (module_utils/node_checks.py) that the node health
    program and the metrics collector run, with this node's settings; the
    health program's kept state (fatal Xids not yet acknowledged) is read, not
    written.
    """
    if not config or not os.path.exists(config):
        return {"checks_error": f"no check settings ({config or 'none given'}) on this node"}
    try:
        cfg = nodechecks.load_config(config)
    except (OSError, ValueError) as exc:
        return {"checks_error": str(exc)}
    state = nodechecks.load_json(os.path.join(state_dir, "state.json"), {})
    state = json.loads(json.dumps(state)) if isinstance(state, dict) else {}
    results = nodechecks.run_checks(cfg, state, use="doctor")
    return {"checks": [r.as_dict() for r in results], "kinds": cfg["kinds"]}


def file_hashes(conf_dir: str) -> dict:
    out: dict[str, str | None] = {}
    for name in CONF_FILES:
        try:
            with open(os.path.join(conf_dir, name), "rb") as handle:
                out[name] = hashlib.sha256(handle.read()).hexdigest()
        except OSError:
            out[name] = None
    return out


def ids() -> dict:
    """{user: [uid, gid]} of the slurm and munge accounts."""
    out: dict[str, list[int] | None] = {}
    for user in ("slurm", "munge"):
        try:
            entry = pwd.getpwnam(user)
            out[user] = [entry.pw_uid, entry.pw_gid]
        except KeyError:
            out[user] = None
    return out


def resolve(name: str) -> list[str]:
    """Addresses `name` resolves to here (as the node's own resolver answers)."""
    if not name:
        return []
    try:
        infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        return [f"error: {exc.strerror}"]
    return sorted({info[4][0] for info in infos})


def connect(host: str, port: int, timeout: float) -> dict:
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        return {"ok": False, "error": reason, "target": f"{host}:{port}"}
    return {"ok": True, "target": f"{host}:{port}"}


def version_argv(compute: bool, controller: bool) -> list[str]:
    """The command that prints this node's Slurm version without reading slurm.conf."""
    if compute:
        return ["slurmd", "-V"]
    if controller:
        return ["slurmctld", "-V"]
    return ["sinfo", "--version"]


def config_dir(conf_dir: str) -> str:
    """Where this node's Slurm reads its files: conf_dir, or slurmd's fetched copies.

    A configless compute node has no slurm.conf in conf_dir; slurmd keeps what it
    fetched from slurmctld in /run/slurm/conf (as the client commands there read it).
    """
    if not os.path.exists(os.path.join(conf_dir, "slurm.conf")) and os.path.exists(
        os.path.join(CONFIGLESS_DIR, "slurm.conf")
    ):
        return CONFIGLESS_DIR
    return conf_dir


def gres_files(conf_dir: str, node: str) -> list[str]:
    """Device files gres.conf names for `node` (ranges like nvidia[0-3] expanded).

    Lines with NodeName= count only for that node (the controller's gres.conf
    holds every node's); lines without one count for all.
    """
    try:
        with open(os.path.join(conf_dir, "gres.conf")) as handle:
            text = handle.read()
    except OSError:
        return []
    mine = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0]
        m = re.search(r"(?:^|\s)NodeName=(\S+)", line)
        if m is None or m.group(1) == node:
            mine.append(line)
    files = []
    for spec in re.findall(r"File=(\S+)", "\n".join(mine)):
        m = re.fullmatch(r"(.*)\[(\d+)-(\d+)\]", spec)
        if m:
            files += [f"{m.group(1)}{i}" for i in range(int(m.group(2)), int(m.group(3)) + 1)]
        else:
            files.append(spec)
    return files


def hardware(conf_dir: str, node: str) -> dict:
    """gres.conf devices that are missing, and slurmd -G when none is.

    slurmd -C, the GPUs and the NVML plugin are read with O(slurm_node) (the fact
    slurm_node, as the slurm_node_info module sets it).
    """
    missing = [f for f in gres_files(conf_dir, node) if not os.path.exists(f)]
    conf = os.path.join(conf_dir, "slurm.conf")
    if missing:
        # slurmd -G waits for ever on a missing device ("Waiting for gres.conf file").
        slurmd_g = {"rc": 1, "out": "", "err": "not run: gres.conf devices missing"}
    elif not os.path.exists(conf):
        # A configless node whose slurmd is stopped holds no copy (Slurm 24.11
        # removes /run/slurm/conf); slurmd -G would wait on a fetch.
        slurmd_g = {"rc": 0, "out": "", "err": "", "skipped": "no slurm.conf on this node"}
    else:
        slurmd_g = slurmd_gres(conf_dir)
    return {"slurmd_g": slurmd_g, "gres_missing": missing}


# auth/slurm's keys: Slurm reads them beside the slurm.conf it was given.
AUTH_KEYS = ("slurm.jwks", "slurm.key")
KEY_DIR = "/etc/slurm"
RUN_DIR = "/run/slurm"
# Under auth/slurm every slurmd, slurmd -G too, opens /run/slurm/sack.socket and
# unlinks the one there: the running slurmd's. Jobs on the node then never end
# ("failed to connect to any sack sockets"). slurmd -G runs in a mount namespace
# of its own, with an empty /run/slurm.
PRIVATE_RUN = 'mount -t tmpfs -o mode=0755 none "$2" && exec slurmd -f "$1" -G'


def slurmd_gres(conf_dir: str) -> dict:
    """slurmd -G on conf_dir's files, with auth/slurm's keys beside them.

    A configless node's fetched copies (/run/slurm/conf) have no key next to
    them: slurmd -G there would stop on "auth/slurm: cannot stat". It runs on
    links to the files and keys (their real paths: /run/slurm is hidden from
    it), in a folder of root's own made for it.
    """
    keys = [k for k in AUTH_KEYS if os.path.exists(os.path.join(KEY_DIR, k))]
    if not keys:
        return run(["slurmd", "-f", os.path.join(conf_dir, "slurm.conf"), "-G"], timeout=8)
    with tempfile.TemporaryDirectory(prefix="cluster-probe-") as tmp:
        for folder, names in ((conf_dir, CONF_FILES), (KEY_DIR, keys)):
            for name in names:
                if os.path.exists(os.path.join(folder, name)):
                    target = os.path.realpath(os.path.join(folder, name))
                    os.symlink(target, os.path.join(tmp, name))
        conf = os.path.join(tmp, "slurm.conf")
        if not os.path.isdir(RUN_DIR):
            return run(["slurmd", "-f", conf, "-G"], timeout=8)
        return run(["unshare", "-m", "sh", "-c", PRIVATE_RUN, "sh", conf, RUN_DIR], timeout=8)


# Run as the job user (never root), in the user's own folder: the doctor's
# token, and on the controller the folders of earlier runs removed there (by
# that user: nobody else can write into its folder). sh, not python: a
# process per node and user on every doctor run.
WRITE_TOKEN = (
    'set -e; mkdir -p -- "$1/$2"; '
    'if [ "$5" = 1 ]; then find "$1" -mindepth 1 -maxdepth 1 -type d ! -name "$2" '
    "-exec rm -rf -- {} +; fi; "
    'printf %s "$4" > "$1/$2/$3"'
)
# Run as a lab user, in its folder: a file made and removed there.
WRITE_PROBE = 'f="$1/.doctor-write-$$"; : > "$f" && rm -f -- "$f"'


def shared(path: str, job_user: str, token_dir: str, run_id: str, token: str, host: str,
           is_ctl: bool) -> dict:  # fmt: skip
    """Filesystem of `path` and a token file written as `job_user` in its own folder."""
    if not path:
        return {}
    res = run(["findmnt", "--noheadings", "--output=SOURCE,FSTYPE", "--target", path])
    # Stacked mounts list bottom first: the last line is what the path shows.
    mounts = res["out"].strip().splitlines()
    out = {"path": path, "mount": " ".join(mounts[-1].split()) if mounts else ""}
    if not token:  # written before, by O(phase=seed)
        return out
    target = os.path.join(token_dir, run_id, host)
    argv = ["sh", "-c", WRITE_TOKEN, "sh", token_dir, run_id, host, token, "1" if is_ctl else "0"]
    res = as_user(job_user, argv)
    lines = res["err"].strip().splitlines()
    out["write"] = {
        "ok": res["rc"] == 0,
        "error": lines[-1] if lines else "",
        "file": target,
        "token": token,
    }
    return out


def shared_of(p: dict, host: str) -> dict:
    """shared() with the module's options (the token named after O(name), else `host`)."""
    return shared(
        p["shared_path"], p["job_user"], p["token_dir"], p["run_id"], p["token"],
        p["name"] or host, p["controller"],
    )  # fmt: skip


def lab_users(users: list[dict]) -> dict:
    """Per user: its uid and gid here, its folder, and a file written there as itself."""

    def one(user: dict) -> dict:
        name = str(user["name"])
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            return {"ids": None, "error": "does not exist here"}
        out: dict = {"ids": [entry.pw_uid, entry.pw_gid]}
        folder = str(user.get("dir") or "")
        if folder:
            res = as_user(entry.pw_uid, ["sh", "-c", WRITE_PROBE, "sh", folder])
            lines = res["err"].strip().splitlines()
            out["write"] = {"ok": res["rc"] == 0, "error": lines[-1] if lines else ""}
            out["dir"] = folder
        return out

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(one, users))
    return {str(u["name"]): r for u, r in zip(users, results, strict=True)}


def local(p: dict) -> dict:
    host = socket.gethostname().split(".")[0]
    now = time.time()
    conf_dir = config_dir(p["conf_dir"])
    with ThreadPoolExecutor(max_workers=8) as pool:
        jobs = {
            "services": pool.submit(services),
            "credential": pool.submit(run, ["munge", "--no-input"]),
            "versions": pool.submit(
                lambda: {
                    # The daemon's own binary: a configless node's client commands
                    # cannot start without slurmd's fetched copy (Slurm 24.11).
                    "slurm": run(version_argv(p["compute"], p["controller"]))["out"].strip(),
                    "munge": run(["munge", "--version"])["out"].strip(),
                }
            ),
            "ports": pool.submit(
                lambda: {
                    name: connect(target[0], target[1], p["connect_timeout"])
                    for name, target in p["ports"].items()
                }
            ),
            "torch": pool.submit(
                torch_info,
                p["venv_python"],
                p["torch_quick"],
                p["shared_path"],
                p["torch_script"],
                p["torch_fresh"],
            ),
            "resolved": pool.submit(lambda: {n: resolve(n) for n in p["resolve"]}),
            "users": pool.submit(lab_users, p["users"]),
            "shared": pool.submit(shared_of, p, host),
        }
        jobs["node_checks"] = pool.submit(node_checks, p["checks_config"], p["health_state_dir"])
        if p["health_files"]:
            jobs["health_files"] = pool.submit(nodechecks.health_files, p["health_state_dir"])
        if p["compute"]:
            jobs["hardware"] = pool.submit(hardware, conf_dir, host)
        if p["slurm_node"]:
            jobs["slurm_node"] = pool.submit(
                read_installed, lambda argv: tuple(run(argv, timeout=15).values())
            )
        if p["controller"]:
            jobs["ping"] = pool.submit(run, ["scontrol", "ping"])
            jobs["nodes"] = pool.submit(settled_nodes)
        if p["decode"] or p["read_tokens"]:
            # The exchange's other half in the same round trip: credentials
            # and token files the controller made before.
            jobs["cross"] = pool.submit(cross, p)
        result = {name: job.result() for name, job in jobs.items()}
    cred = result.pop("credential")
    result.update(result.pop("node_checks"))
    result.update(
        host=host,
        time=now,
        key=key_info(p["munge_key"]),
        auth_key=key_info(os.path.join(KEY_DIR, "slurm.jwks")),
        files=file_hashes(conf_dir),
        conf_dir=conf_dir,
        ids=ids(),
        self_addrs=resolve(host),
        credential=cred["out"].strip() if cred["rc"] == 0 else "",
        credential_error=cred["err"].strip() if cred["rc"] != 0 else "",
    )
    return result


# A node slurmctld has just resumed (an admin, site.yml, the health program)
# is NOT_RESPONDING until it answers slurmctld's next ping, about 0.5 s here:
# a node's State is read again a few times before the doctor judges it.
NOT_RESPONDING = re.compile(r"(?:^|\s)State=(?!\S*DOWN)\S*NOT_RESPONDING")
SETTLE_S = 3.0
SETTLE_POLL_S = 0.25


def settled_nodes(read=run, limit_s: float = SETTLE_S, sleep=time.sleep) -> dict:
    """``scontrol --oneliner show node``, read again every 0.25 s, at most ``limit_s``,
    while a node that is not DOWN is NOT_RESPONDING (resumed, not pinged yet). A node
    still not responding then is what the doctor judges."""
    argv = ["scontrol", "--oneliner", "show", "node"]
    res = read(argv)
    waited = 0.0
    while res.get("rc") == 0 and NOT_RESPONDING.search(res.get("out", "")) and waited < limit_s:
        sleep(SETTLE_POLL_S)
        waited += SETTLE_POLL_S
        res = read(argv)
    return res


def seed(p: dict) -> dict:
    """The controller's credential and token, made before the other nodes' probes read them."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        cred = pool.submit(run, ["munge", "--no-input"])
        token = pool.submit(shared_of, p, socket.gethostname().split(".")[0])
        made = time.time()
        res = cred.result()
        written = token.result()
    return {
        "time": made,
        "credential": res["out"].strip() if res["rc"] == 0 else "",
        "credential_error": res["err"].strip() if res["rc"] != 0 else "",
        "shared": written,
    }


# The options of phase local, seed and cross (cluster_probe documents them).
SPEC: dict = {
    "controller": {"type": "bool", "default": False},
    "compute": {"type": "bool", "default": False},
    "slurm_node": {"type": "bool", "default": False},
    "munge_key": {"type": "path", "default": "/etc/munge/munge.key"},
    "conf_dir": {"type": "path", "default": "/etc/slurm"},
    "shared_path": {"type": "str", "default": ""},
    "job_user": {"type": "str", "default": "nobody"},
    "token_dir": {"type": "str", "default": "", "no_log": False},
    "users": {"type": "list", "elements": "dict", "default": []},
    "run_id": {"type": "str", "default": ""},
    "name": {"type": "str", "default": ""},
    "token": {"type": "str", "default": "", "no_log": False},
    "venv_python": {"type": "str", "default": ""},
    "decode": {"type": "dict", "default": {}},
    "read_tokens": {"type": "dict", "default": {}, "no_log": False},
    "ports": {"type": "dict", "default": {}},
    "connect_timeout": {"type": "float", "default": 2.0},
    "resolve": {"type": "list", "elements": "str", "default": []},
    "checks_config": {"type": "str", "default": ""},
    "torch_quick": {"type": "bool", "default": False},
    "torch_script": {"type": "str", "default": ""},
    "torch_fresh": {"type": "bool", "default": False},
    "health_state_dir": {"type": "str", "default": "/var/lib/slurm-cluster/health"},
    "health_files": {"type": "bool", "default": False},
}

PHASES = {"local": local, "cross": cross, "seed": seed}


def node_facts(probe: dict, params: dict) -> dict:
    """The fact slurm_node as slurm_node_info sets it, taken out of a probe of
    phase local (with slurm_node asked: why it is missing, slurm_node_error)."""
    node = probe.pop("slurm_node", (None, ""))
    if params.get("slurm_node"):
        probe["slurm_node_error"] = node[1]
    return {"slurm_node": node[0]} if node[0] else {}
