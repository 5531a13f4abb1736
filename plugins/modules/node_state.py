#!/usr/bin/python
"""Ansible module: what site.yml reads on a node before it changes anything, in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
module: node_state
short_description: Read a node's packages, units, files and hardware in one call
description:
  - One call instead of one task per read, so that a rerun that changes nothing
    costs few round trips (playbooks/packages.yml). The roles use what it found
    where it is there and read for themselves where it is not (a role used on
    its own, a path it was not asked about, a package this run installed).
  - Read-only; runs the same in check mode. The commands must be read-only too.
options:
  packages: {description: List the installed packages (dpkg)., type: bool, default: true}
  package_names:
    description: >-
      Report only these of the installed packages (the ones the roles ask
      about); empty - every installed package. A server holds a few thousand:
      each one would be carried in the result, and copied by Ansible for every
      task on the host, for the handful a run asks about.
    type: list
    elements: str
    default: []
  units:
    description: systemd units whose ActiveState and UnitFileState to report.
    type: list
    elements: str
    default: []
  files:
    description: Paths whose SHA-1, SHA-256, owner, group and mode to report.
    type: list
    elements: path
    default: []
  read:
    description: Small text files whose content to return (a missing one - null).
    type: list
    elements: path
    default: []
  commands:
    description: >-
      {name: command}: a list is argv, a string a /bin/sh script (rc, stdout, stderr).
      An argv whose program is one of O(trusted) runs only where that program is
      root's own all the way up; elsewhere its rc is null and stderr says why.
    type: dict
    default: {}
  masked:
    description: >-
      Config files that hold a secret taken from another file, as
      {path, key, secret}: the SHA-1 of the file with the value of its
      C(key=) line replaced by C(@SECRET@), and whether that value equals
      the secret file's content. The controller compares the hash with the
      template rendered with the same placeholder; no secret leaves the node.
    type: list
    elements: dict
    default: []
  users:
    description: >-
      The lab's users and the proof account ([{name, uid, group, gid, groups}]):
      the lab_users module's plan against this node's passwd and group
      databases (conflicts, groups and users to create, groups to add).
    type: list
    elements: dict
    default: []
  users_refuse:
    description: >-
      Fail, naming the node and both identities, where a name or id of O(users)
      is someone else's here (and, with O(users_manage=false), where one is missing).
    type: bool
    default: false
  users_manage:
    description: Whether site.yml creates missing users (false - a directory service gives them).
    type: bool
    default: true
  users_extra:
    description: Names of O(users) created even with O(users_manage=false) (the proof account).
    type: list
    elements: str
    default: []
  shared_root:
    description: The shared mount point, anchor of shared_dirs and shared_reads.
    type: path
    default: /shared
  shared_dirs:
    description: >-
      Folders below shared_root as [{path, uid, gid, mode}]: "ok" where the
      folder is there as wanted below folders of root's, else what differs.
      Nothing is followed through a link.
    type: list
    elements: dict
    default: []
  shared_reads:
    description: >-
      Folders of root's below shared_root whose root-owned files to return
      (as the shared_tree module reads them; nothing else is read).
    type: list
    elements: path
    default: []
  shared_hashes:
    description: >-
      Like O(shared_reads), the SHA-1 of each file instead of its content
      (in the same result, state.shared_reads).
    type: list
    elements: path
    default: []
  shared_list:
    description: >-
      A folder of root's below shared_root whose entries to name (the users'
      folders: those of users no longer in the inventory are reported).
    type: path
  trusted:
    description: >-
      Programs root will run (a venv's python), or folders root writes a key
      into: each is checked root's own all the way up, below O(shared_root)
      where it lies under it; a missing one is fine while its folders are
      (root makes it).
    type: list
    elements: path
    default: []
  slurm_node:
    description: >-
      Report slurmd -C and the GPUs where slurmd is installed, also as the fact
      C(slurm_node) that the module slurm_node_info sets.
    type: bool
    default: false
  doctor:
    description:
      - >-
        The cluster doctor's reading of this node in the same round trip, as
        module M(gpulab.slurm_cluster.cluster_probe) reads it in its phase
        C(local): a mapping of that module's other options (an unknown one, or a value of
        the wrong type, fails this module, naming it). Empty - none.
      - >-
        site.yml asks for it in its first probe, and its doctor judges that
        reading where the run changed nothing since (role cluster_doctor,
        C(cluster_doctor_reuse_s)): one round trip per node fewer on a rerun.
      - The reading holds a fresh munge credential - register the result with C(no_log).
    type: dict
    default: {}
  wants:
    description:
      - The reads the roles declare, each in its C(meta/probe.yml), gathered by
        the lookup P(gpulab.slurm_cluster.role_probes#lookup) into one mapping of this
        module's other options. They are added to the options the task sets
        itself, lists joined without repeats and commands merged by name; a
        single value the task sets away from its default wins.
      - An unknown option or a value of the wrong type fails the module, naming it.
    type: dict
    default: {}
author:
  - slurm-cluster-in-a-box contributors (@gpulab)
"""

EXAMPLES = r"""
- name: Read, in one round trip, what the roles would otherwise read one task at a time
  gpulab.slurm_cluster.node_state:
    units: [munge, slurmd]
    files: [/etc/munge/munge.key, /etc/slurm/cgroup.conf]
    read: [/etc/hosts]
    commands:
      sinfo: [sinfo, --Node, --noheader, --format, "%N|%t|%E"]
    slurm_node: true
  register: probe

- name: Skip a start that the probe proves done
  ansible.builtin.systemd_service:
    name: munge
    state: started
    enabled: true
  when: not (probe.state | gpulab.slurm_cluster.unit_up('munge'))
"""

RETURN = r"""
state:
  description: >-
    packages {name: version} (those of O(package_names) where given);
    units {name: {active, enabled}} (absent units: active=absent);
    files {path: {exists, sha1, sha256, owner, group, mode}};
    read {path: text or null}; commands {name: {rc, stdout, stderr}};
    masked {path: {exists, sha1, secret_matches}};
    slurm_node (as slurm_node_info's fact) or null; slurm_node_error;
    users (the lab_users plan), shared_dirs {path: ok or what differs},
    shared_reads {dir: {files}}; trusted {path: '' or why root must not trust it}.
  returned: always
  type: dict
doctor:
  description: >-
    With O(doctor), the doctor's reading of this node, as module
    M(gpulab.slurm_cluster.cluster_probe) returns it (probe) in its phase C(local).
    It holds a munge credential.
  returned: when O(doctor) is given
  type: dict
ansible_facts:
  description: C(slurm_node), as the slurm_node_info module sets it, when O(slurm_node) is true.
  returned: when O(slurm_node) is true
  type: dict
"""

import hashlib
import os
import socket
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.errors import UnsupportedError
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils import doctor_local
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.identities import (
    plan_identities,
    read_identities,
    refusals,
)
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.node_base import (
    file_info,
    root_owned_problem,
    run,
    units,
)
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.probe_wants import (
    SPEC,
    WantsError,
    combine,
)
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.safe_fs import (
    UnsafePath,
    ensure_dir,
    open_trusted,
    read_trusted_files,
)
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.slurm_node import read_installed

TIMEOUT = 30


def packages(names: list[str] | None = None) -> dict[str, str]:
    """{name: version} of the installed packages; only those in names where given."""
    res = run(
        ["dpkg-query", "--show", "--showformat=${db:Status-Status} ${Package} ${Version}\\n"],
        TIMEOUT,
    )
    found: dict[str, str] = {}
    for line in res["out"].splitlines() if res["rc"] == 0 else []:
        fields = line.split()
        if len(fields) == 3 and fields[0] == "installed":
            found[fields[1]] = fields[2]
    if names:
        wanted = set(names)
        return {name: version for name, version in found.items() if name in wanted}
    return found


MASK = "@SECRET@"


def masked_info(path: str, key: str, secret_path: str) -> dict:
    """SHA-1 of a config file with its KEY= value masked, and whether that value is the secret."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        with open(secret_path, encoding="utf-8") as handle:
            secret = handle.read()
    except (OSError, UnicodeDecodeError):
        return {"exists": False}
    lines, found = [], []
    for line in text.splitlines(keepends=True):
        if line.startswith(key + "="):
            ending = "\n" if line.endswith("\n") else ""
            found.append(line[len(key) + 1 :].removesuffix("\n") == secret)
            line = f"{key}={MASK}{ending}"
        lines.append(line)
    return {
        "exists": True,
        "sha1": hashlib.sha1("".join(lines).encode("utf-8")).hexdigest(),
        "secret_matches": bool(found) and all(found),
    }


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def command(spec: str | list, trusted: dict[str, str] | None = None) -> dict:
    """rc, stdout, stderr of a read-only command; one whose program is among the
    O(trusted) paths runs only where that program is root's own all the way up."""
    program = str(spec[0]) if isinstance(spec, list) and spec else ""
    why = (trusted or {}).get(program, "")
    if why:
        return {"rc": None, "stdout": "", "stderr": f"not run: {program}: {why}"}
    res = run(
        [str(a) for a in spec] if isinstance(spec, list) else ["/bin/sh", "-c", str(spec)], TIMEOUT
    )
    return {"rc": res["rc"], "stdout": res["out"], "stderr": res["err"]}


def slurm_node() -> tuple[dict | None, str]:
    # read_installed takes a run_command(argv) -> (rc, out, err), as Ansible's.
    return read_installed(lambda argv: tuple(run(argv, TIMEOUT).values()))


def list_trusted(root: str, path: str) -> list[str]:
    """The names in root's folder `path` (the users' folders), without following a link."""
    try:
        fd = open_trusted(root, path)
    except (UnsafePath, OSError):
        return []
    try:
        return sorted(entry.name for entry in os.scandir(fd) if not entry.name.startswith("."))
    finally:
        os.close(fd)


def dir_state(root: str, spec: dict) -> str:
    """ "ok" when the folder is there as wanted below folders of root's; else why not."""
    path = os.path.normpath(os.path.join(root, str(spec["path"])))
    try:
        fd = open_trusted(root, os.path.dirname(path))
    except FileNotFoundError:
        return "missing"
    except (UnsafePath, OSError) as exc:
        return f"unsafe: {exc}"
    try:
        changed, child = ensure_dir(
            fd,
            os.path.basename(path),
            path,
            int(spec["uid"]),
            int(spec["gid"]),
            int(str(spec["mode"]), 8),
            check_mode=True,
        )
    except (UnsafePath, OSError) as exc:
        return f"unsafe: {exc}"
    finally:
        os.close(fd)
    if child is not None:
        os.close(child)
    return "differs" if changed else "ok"


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            **SPEC,
            "wants": {"type": "dict", "default": {}},
            "doctor": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    try:
        p, problem = combine(module.params, module.params["wants"]), ""
    except WantsError as exc:
        p, problem = {}, str(exc)
    doctor = None
    if module.params["doctor"]:
        checked = ArgumentSpecValidator(doctor_local.SPEC).validate(module.params["doctor"])
        if checked.error_messages:
            problem = "option doctor (cluster_probe's options): " + "; ".join(
                f"unknown option {err}" if isinstance(err, UnsupportedError) else str(err)
                for err in checked.errors.errors
            )
        doctor = checked.validated_parameters
    if problem:
        module.fail_json(msg=problem)
    # Programs root will run (a venv's python): root's own all the way up. A
    # command that runs one of them runs only where it is.
    trusted = {path: root_owned_problem(path, p["shared_root"]) for path in p["trusted"]}
    # The slow reads (dpkg, systemctl, slurmd -C, the commands) run side by side.
    with ThreadPoolExecutor(max_workers=8) as pool:
        pkgs = pool.submit(packages, p["package_names"]) if p["packages"] else None
        unit_states = pool.submit(units, p["units"])
        node = pool.submit(slurm_node) if p["slurm_node"] else None
        # The doctor's reading: its own commands, side by side with these.
        reading = pool.submit(doctor_local.PHASES["local"], doctor) if doctor else None
        cmds = {
            name: pool.submit(command, script, trusted) for name, script in p["commands"].items()
        }
        state = {
            "files": {path: file_info(path) for path in p["files"]},
            "read": {path: read_text(path) for path in p["read"]},
            "masked": {
                str(m["path"]): masked_info(str(m["path"]), str(m["key"]), str(m["secret"]))
                for m in p["masked"]
            },
            "packages": pkgs.result() if pkgs else {},
            "units": unit_states.result(),
            "commands": {name: job.result() for name, job in cmds.items()},
        }
        state["slurm_node"], state["slurm_node_error"] = node.result() if node else (None, "")
        probe = reading.result() if reading else None
    if p["users"]:
        host = socket.gethostname().split(".")[0]
        state["users"] = plan_identities(p["users"], read_identities(p["users"]), host)
        problems = refusals(state["users"], host, p["users_manage"], p["users_extra"])
        if p["users_refuse"] and problems:
            # Before site.yml changes anything on any node (the play is
            # any_errors_fatal). The state holds no doctor's reading (no credential).
            module.fail_json(msg=" | ".join(problems), problems=problems, state=state)
    state["trusted"] = trusted
    state["shared_dirs"] = {
        str(spec["path"]): dir_state(p["shared_root"], spec) for spec in p["shared_dirs"]
    }
    state["shared_reads"] = {
        path: read_trusted_files(p["shared_root"], path) for path in p["shared_reads"]
    }
    state["shared_list"] = (
        list_trusted(p["shared_root"], p["shared_list"]) if p["shared_list"] else []
    )
    state["shared_reads"].update(
        {path: read_trusted_files(p["shared_root"], path, True) for path in p["shared_hashes"]}
    )
    # As slurm_node_info sets it (cached with the other facts).
    facts = {"slurm_node": state["slurm_node"]} if state["slurm_node"] else {}
    # The doctor's reading beside the state, not in it: the roles copy the
    # state (cluster_node_state), and the reading holds a credential.
    extra = {}
    if probe is not None:
        facts.update(doctor_local.node_facts(probe, doctor))
        extra["doctor"] = probe
    module.exit_json(changed=False, state=state, ansible_facts=facts, **extra)


if __name__ == "__main__":
    main()
