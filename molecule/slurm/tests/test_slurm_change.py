"""Slurm that survives change: partitions, accounting, drift, reconfigure vs restart."""

from __future__ import annotations

import os
import re
import time

from conftest import host

CTL = host("ctl")
# The collection's roles show in task names as gpulab.slurm_cluster.<role>.
ROLES = "gpulab.slurm_cluster."


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(1)


def job_state(job_id: str) -> str:
    return CTL.check_output(f"squeue --noheader --jobs={job_id} --format=%T || true").strip()


def test_sinfo_exact_per_partition() -> None:
    out = CTL.check_output("sinfo --noheader --format='%P %a %l %D %t %N %G'")
    assert out.splitlines() == [
        "gpu* up 1-00:00:00 2 idle node[1-2] gpu:1",
        "debug up 30:00 1 idle node1 gpu:1",
    ]


def test_sacct_lists_a_completed_job() -> None:
    job_id = CTL.check_output(
        "timeout 60 srun --immediate=30 -N2 bash -c 'echo $SLURM_JOB_ID' | head -1"
    ).strip()
    assert job_id.isdigit()

    def state() -> str:
        return CTL.check_output(f"sacct --noheader --parsable2 -X -j {job_id} --format=State")

    assert wait_for(lambda: state().strip() == "COMPLETED", 30, f"job {job_id} in sacct")
    cluster = CTL.check_output("sacctmgr --noheader --parsable2 list cluster format=cluster")
    assert cluster.split() == ["local"]


def test_accounts_and_qos_from_inventory() -> None:
    qos = CTL.check_output(
        "sacctmgr --noheader --parsable2 show qos gpu-hours format=Name,GrpTRESMins"
    )
    assert qos.strip() == "gpu-hours|gres/gpu=6000"
    assoc = CTL.check_output(
        "sacctmgr --noheader --parsable2 show association where account=lab format=Account,User,QOS"
    )
    # The users come from cluster_users (inventory/local/group_vars/slurm_cluster/users.yml).
    assert sorted(assoc.splitlines()) == sorted(
        [
            "lab||gpu-hours,normal",
            "lab|alice|gpu-hours,normal",
            "lab|bob|gpu-hours,normal",
            "lab|carol|gpu-hours,normal",
        ]
    )


def test_slurmdbd_secrets_are_private() -> None:
    conf = CTL.file("/etc/slurm/slurmdbd.conf")
    assert (conf.user, conf.group, conf.mode) == ("slurm", "slurm", 0o600)
    secret = CTL.file("/etc/slurm/slurmdbd.dbpass")
    assert (secret.user, secret.group, secret.mode) == ("root", "root", 0o600)
    assert len(secret.content_string.strip()) == 40


def test_drift_is_reconfigured_and_a_running_job_survives(run_playbook) -> None:
    job_id = CTL.check_output(
        "sbatch --parsable --partition=debug --nodes=1 --wrap='sleep 600'"
    ).strip()
    try:
        wait_for(lambda: job_state(job_id) == "RUNNING", 60, f"job {job_id} to run")
        # A restart by systemd gives the unit a new InvocationID; a reconfigure
        # does not (Slurm >= 23.11 re-executes slurmctld in place: new PID).
        run_before = CTL.check_output("systemctl show --property=InvocationID --value slurmctld")
        slurmd_runs = {n: invocation(n, "slurmd") for n in ("node1", "node2")}
        CTL.check_output("sed -i 's/MaxTime=30:00/MaxTime=45:00/' /etc/slurm/slurm.conf")

        result = run_playbook("site.yml")
        out = result.stdout + result.stderr
        assert result.returncode == 0, out
        reconfigured = (
            r"TASK \[gpulab\.slurm_cluster\.slurm_daemons : Reconfigure Slurm[^\]]*\] \**\n"
            r"changed: \[ctl\]"
        )
        assert re.search(reconfigured, out), out[-3000:]

        # Every slurmd got the controller's file back through the reconfigure.
        want = CTL.check_output("sha256sum < /etc/slurm/slurm.conf")
        for n in ("node1", "node2"):
            assert host(n).check_output("sha256sum < /run/slurm/conf/slurm.conf") == want, n
            assert invocation(n, "slurmd") == slurmd_runs[n], f"slurmd restarted on {n}"
        assert CTL.check_output("systemctl show --property=InvocationID --value slurmctld") == (
            run_before
        )
        assert job_state(job_id) == "RUNNING"

        # StateSaveLocation keeps the job across a controller restart.
        CTL.check_output("systemctl restart slurmctld")
        wait_for(lambda: "is UP" in CTL.run("scontrol ping").stdout, 60, "slurmctld")
        assert job_state(job_id) == "RUNNING"
    finally:
        CTL.run(f"scancel {job_id}")


def invocation(name: str, unit: str) -> str:
    return host(name).check_output(f"systemctl show --property=InvocationID --value {unit}")


def main_pid(name: str, unit: str) -> str:
    return host(name).check_output(f"systemctl show --property=MainPID --value {unit}")


def test_no_change_run_restarts_nothing(run_playbook) -> None:
    # The login host's daemon: sackd on Slurm 24.11, a slurmd in no partition on 22.05.
    login = "sackd" if os.environ.get("CLUSTER_SUITE", "bookworm") == "trixie" else "slurmd"
    daemons = (("ctl", "slurmctld"), ("ctl", "slurmdbd"), ("node1", "slurmd"), ("node2", "slurmd"))
    daemons += (("login", login),)
    pids = {d: main_pid(*d) for d in daemons}
    result = run_playbook("site.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    recap = result.stdout[result.stdout.index("PLAY RECAP") :]
    # ctl, localhost, login, node1, node2
    assert re.findall(r"changed=(\d+)", recap) == ["0"] * 5, recap
    assert {d: main_pid(*d) for d in daemons} == pids


def test_a_slurm_conf_slurm_refuses_never_replaces_the_live_one(run_playbook) -> None:
    copies = {"ctl": "/etc/slurm/slurm.conf", "node1": "/run/slurm/conf/slurm.conf"}
    copies["node2"] = copies["node1"]
    before = {n: host(n).check_output(f"sha256sum {path}") for n, path in copies.items()}
    # Passes the inventory checks (a CamelCase key, one value), refused by Slurm's parser.
    bad = '{"slurm_common_extra_config": {"SlurmdTimeout": 30, "MaxJobCount": "lots"}}'
    done = run_playbook("site.yml", "-e", bad)
    assert done.returncode != 0
    assert "MaxJobCount value (lots) is not a valid number" in done.stdout
    assert re.search(r"slurm.conf line \d+:MaxJobCount=lots", done.stdout)
    assert {n: host(n).check_output(f"sha256sum {path}") for n, path in copies.items()} == before
    assert CTL.check_output("sinfo --noheader --format=%P").split() == ["gpu*", "debug"]


def test_a_slurm_release_jump_is_refused_before_any_package(run_playbook) -> None:
    # What the nodes would install if their distribution moved on (Debian 12's
    # 22.05 straight to Debian 13's 24.11), or back.
    suite = os.environ.get("CLUSTER_SUITE", "bookworm")
    target, expected = (
        ("24.11", r"ctl: slurmctld 22\.05\.\S+ to 24\.11 skips 23\.02, 23\.11, 24\.05")
        if suite == "bookworm"
        else ("22.05", r"ctl: slurmctld 24\.11\.\S+ is installed .* Slurm cannot be downgraded")
    )
    done = run_playbook("site.yml", "-e", f"__slurm_common_version={target}")
    out = " ".join(done.stdout.split())
    assert done.returncode != 0
    assert re.search(expected, out), out[-3000:]
    assert re.search(r"node1: slurmd \S+ ", out)
    assert "Install the Slurm packages" not in out  # stopped before apt
    assert CTL.check_output("sinfo --noheader --format=%P").split() == ["gpu*", "debug"]


def test_an_upgrade_dumps_the_database_first_then_goes_dbd_ctld_nodes(run_playbook) -> None:
    # The next release after the installed one (an upgrade Slurm supports). The
    # distribution has no newer package here, so apt changes nothing: what is
    # proven is the dump (written, restorable) and the order of the steps.
    installed = CTL.check_output("dpkg-query --showformat='${Version}' --show slurmdbd")
    nxt = {"22.05": "23.02", "24.11": "25.05"}[installed[:5]]
    done = run_playbook("site.yml", "-e", f"__slurm_common_version={nxt}")
    out = done.stdout
    assert done.returncode == 0, out[-4000:]
    steps = [
        f"TASK [{ROLES}slurm_dbd : Stop slurmdbd and dump the accounting database",
        f"TASK [{ROLES}slurm_dbd : Install MariaDB and slurmdbd]",
        f"TASK [{ROLES}slurm_daemons : Start slurmdbd",
        f"TASK [{ROLES}slurm_daemons : Upgrade slurmctld to its distribution's release]",
        f"TASK [{ROLES}slurm_daemons : Start slurmctld",
        f"TASK [{ROLES}slurm_daemons : Upgrade slurmd on this batch]",
    ]
    at = [out.index(s) for s in steps]
    assert at == sorted(at), list(zip(steps, at, strict=True))
    # One batch per node (25% of two nodes): the nodes go one after the other.
    assert out.count(f"TASK [{ROLES}slurm_daemons : Upgrade slurmd on this batch]") == 2

    dump = CTL.check_output("ls -t /var/backups/slurm/slurm_acct_db-*.sql.gz | head -n 1")
    assert re.search(rf"slurm_acct_db-\d{{8}}T\d{{6}}-slurm-{re.escape(installed)}\.sql\.gz$", dump)
    f = CTL.file(dump)
    assert (f.user, f.group, f.mode) == ("root", "root", 0o600)
    # Restorable: into an empty database, the same tables and rows.
    count = (
        'mariadb --batch --skip-column-names -e "SELECT table_name, table_rows FROM'
        " information_schema.tables WHERE table_schema='{}' ORDER BY table_name\""
    )
    try:
        CTL.check_output(
            "mariadb -e 'DROP DATABASE IF EXISTS restore_check; CREATE DATABASE restore_check'"
        )
        CTL.check_output(f"zcat {dump} | mariadb restore_check")
        CTL.check_output("mariadb -e 'ANALYZE TABLE restore_check.acct_table'")
        restored = CTL.check_output(count.format("restore_check"))
        assert "_job_table" in restored and "acct_table" in restored, restored
        jobs = "SELECT COUNT(*) FROM {}.{}_job_table"
        cluster = CTL.check_output("sacctmgr --noheader --parsable2 list cluster format=cluster")
        cluster = cluster.split()[0]
        assert CTL.check_output(
            f"mariadb --batch --skip-column-names -e '{jobs.format('restore_check', cluster)}'"
        ) == CTL.check_output(
            f"mariadb --batch --skip-column-names -e '{jobs.format('slurm_acct_db', cluster)}'"
        )
    finally:
        CTL.run("mariadb -e 'DROP DATABASE IF EXISTS restore_check'")
    # slurmdbd runs again, and accounting answers.
    assert CTL.service("slurmdbd").is_running
    assert cluster in CTL.check_output(
        "sacctmgr --noheader --parsable2 list cluster format=cluster"
    )
