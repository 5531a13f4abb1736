"""The doctor's cluster-scope checks, part two: Slurm's daemons, ports, hardware, nodes, the
shared filesystem across nodes, torch; and the node checks the probe ran on each node.
"""

from __future__ import annotations

import re

from ansible_collections.gpulab.slurm_cluster.plugins.module_utils import cluster_checks as registry
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.doctor_steps import (
    DOWN_STATES,
    SLURM_DRAIN_REASONS,
    DoctorSteps,
    gres_gpu_count,
)
from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.torch_probe import from_report


class Doctor(DoctorSteps):
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
            # A login host's daemon (sackd, or slurmd in no partition) fetches
            # the configuration its users' commands read.
            daemon = "slurmd" if h in self.computes else self.logins.get(h, "")
            if daemon:
                state = svc.get(daemon, "absent")
                if state.startswith("active/running"):
                    fine.append(f"{daemon} {state}")
                else:
                    why = " (the login daemon: sinfo fails there)" if h in self.logins else ""
                    problems.append(f"{daemon}.service is {state}{why}")
            if problems:
                unit = "slurmctld" if h == self.ctl and ctl_problem else daemon or "slurmd"
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
                live = self.node_results(h)
                failing = any(
                    r["status"] == "FAIL" and "health" in registry.BY_ID[r["id"]].uses for r in live
                )
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

    def shared_cross(self) -> None:
        mounts = {h: self.local[h].get("shared", {}) for h in self.hosts}
        if not any(mounts.values()):
            for h in self.hosts:
                self.add(h, "shared.cross", "SKIP", "no shared filesystem configured")
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
                    "shared.cross",
                    "FAIL",
                    "; ".join(bad),
                    f"mount the shared filesystem at {m.get('path')} on {h} "
                    "(shared_fs_type=nfs: site.yml mounts it)",
                )
            else:
                self.add(
                    h,
                    "shared.cross",
                    "PASS",
                    f"{m.get('path')}: {m.get('mount')}, token seen across nodes",
                )

    def torch(self) -> None:
        # The pytorch role's answer earlier in this run, where the probe did
        # not ask (cluster_doctor_torch_checked: site.yml asks torch once).
        checked = self.ctx.get("torch_checked") or {}
        for h in self.hosts:
            info = self.local[h].get("torch")
            if info is None and h in checked:
                report = checked[h]
                info = from_report(report, {"python": report.get("python"), "quick": False})
            if info is None:
                self.add(h, "torch.venv", "SKIP", "no torch venv on this node")
                continue
            want = int(self.ctx.get("torch_gpus", {}).get(h, 0))
            if not info.get("ok"):
                self.add(
                    h,
                    "torch.venv",
                    "FAIL",
                    ("torch not found" if info.get("quick") else "import torch failed")
                    + f" in {info.get('python', 'the venv')}: {info.get('error')}",
                    f"run site.yml (role pytorch reinstalls the venv on {h})",
                )
            elif info.get("quick"):
                self.add(
                    h,
                    "torch.venv",
                    "PASS",
                    f"torch {info.get('version')} installed (found, not imported: the job "
                    "imports it)",
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
                    f"torch {info.get('version')}, {info.get('device_count')} CUDA devices"
                    + (
                        f" (torch's check of {info.get('verified_at')}: nothing it depends on "
                        "changed since)"
                        if info.get("cached")
                        else ""
                    ),
                )

    def reachability(self) -> None:
        for h in self.unreachable:
            doctor = [c.id for c in registry.REGISTRY if "doctor" in c.uses]
            for check in doctor:
                self.add(
                    h,
                    check,
                    "FAIL" if check == doctor[0] else "SKIP",
                    self.ctx.get("unreachable", {}).get(h, "Ansible could not reach the node"),
                    f"check that {h} is up and reachable over SSH",
                )

    # --- causes -----------------------------------------------------------------

    # --- the node checks (registry scope "node"), as the probe ran them ---------

    def node_results(self, h: str) -> list[dict]:
        checks = self.local[h].get("checks")
        return checks if isinstance(checks, list) else []

    def node_checks(self) -> None:
        """One result per node and node check: the reader's verdict on that node."""
        ids = [c.id for c in registry.REGISTRY if c.scope == "node" and "doctor" in c.uses]
        for h in self.hosts:
            checks = self.local[h].get("checks")
            if not isinstance(checks, list):
                why = (self.local[h].get("checks_error") or "the probe ran no node check").strip()
                for n, check in enumerate(ids):
                    self.add(
                        h,
                        check,
                        "FAIL" if n == 0 else "SKIP",
                        f"node checks not run: {why}",
                        "run site.yml: it writes the node's check settings",
                    )
                continue
            seen = {r["id"]: r for r in checks}
            for check in ids:
                r = seen.get(check)
                if r is None:
                    self.add(h, check, "SKIP", "does not apply to this node")
                    continue
                evidence = r["message"]
                if r.get("caused_by"):
                    evidence = f"not judged: {r['caused_by']} failed on {h}"
                fix = r.get("fix") or ""
                self.add(h, check, r["status"], evidence, fix)
                if r.get("data"):
                    self.results[-1]["data"] = r["data"]


# Each cluster-scope check of the doctor, judged by one method (a test holds
# this mapping and the registry one to one); node checks come from the probe.
STEPS = {
    "net.hostname": "hostname",
    "munge.key": "munge_key",
    "auth.key": "auth_key",
    "clock": "clock",
    "munge.cross": "munge_cross",
    "users.ids": "users",
    "users": "lab_users",
    "config.versions": "versions",
    "config.files": "files",
    "slurm.daemon": "daemons",
    "net.ports": "ports",
    "hw.match": "hardware",
    "slurm.node": "node_state",
    "shared.cross": "shared_cross",
    "torch.venv": "torch",
}
