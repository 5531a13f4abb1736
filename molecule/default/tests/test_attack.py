"""An ordinary user plants links and folders wherever root touched, or touches, the
shared filesystem; site.yml, doctor.yml and smoke_train.yml never follow them.

/shared is made world-writable with the sticky bit for the test (as many labs
have it). The link targets are root's own folders on every node with known
checksums; after each run they, and the user's planted folders, are unchanged.
"""

from __future__ import annotations

import pytest
from conftest import host

NODES = ("ctl", "node1", "node2")
VICTIM = "/etc/victim"
SRUN_ONLY = '{"smoke_train_modes": ["srun"]}'
# Paths root used (old) or uses (new) on the shared filesystem.
OLD_LINKS = (".cluster-doctor", ".shared-fs-check", "examples")
OLD_DIRS = ("smoke", "venvs")


def as_bob(node: str, cmd: str) -> str:
    return host(node).check_output(f"runuser -u bob -- sh -c {cmd!r}")


def fingerprint() -> dict[str, str]:
    """Every victim file's checksum, owner and mode, and the user's folders, per node."""
    out = {}
    for node in NODES:
        out[node] = host(node).check_output(
            f"cd {VICTIM} && find . -printf '%p %u %m %s\\n' | sort && sha256sum $(find . -type f"
            " | sort); cd /shared && for d in smoke venvs; do find $d -printf '%p %u %m %T@\\n';"
            " done | sort"
        )
    return out


@pytest.fixture
def planted():
    ctl = host("ctl")
    for node in NODES:
        host(node).check_output(
            f"rm -rf {VICTIM} && mkdir -p {VICTIM}/sub && echo secret > {VICTIM}/secret "
            f"&& echo keep > {VICTIM}/sub/file && chmod 0700 {VICTIM}"
        )
    ctl.check_output("chmod 1777 /shared")
    # Old paths root used to follow: as links to root's folder, or folders bob owns.
    ctl.check_output("cd /shared && rm -rf .cluster-doctor .shared-fs-check examples smoke venvs")
    for name in OLD_LINKS:
        as_bob("ctl", f"ln -s {VICTIM} /shared/{name}")
    for name in OLD_DIRS:
        as_bob("ctl", f"mkdir /shared/{name} && echo bob > /shared/{name}/bob.txt")
    before = fingerprint()
    try:
        yield before
    finally:
        ctl.run("cd /shared && rm -rf .cluster-doctor .shared-fs-check examples smoke venvs")
        for name in (".cluster", "home"):
            saved = f"/shared/{name}.saved"
            ctl.run(f"[ -d {saved} ] && rm -rf /shared/{name} && mv {saved} /shared/{name}")
        ctl.run("chmod 0755 /shared")
        for node in NODES:
            host(node).run(f"rm -rf {VICTIM}")
            # The node health program may have drained the node while root's
            # folder was a link (shared.fs): one run resumes it, now mended.
            host(node).run("test ! -x /usr/local/sbin/cluster-health || cluster-health")


def test_links_and_folders_at_old_paths_are_never_followed(run_playbook, planted) -> None:
    runs = (("site.yml", ()), ("doctor.yml", ()), ("smoke_train.yml", ("-e", SRUN_ONLY)))
    for playbook, extra in runs:
        result = run_playbook(playbook, *extra)
        assert result.returncode == 0, playbook + result.stdout[-3000:] + result.stderr
        assert fingerprint() == planted, f"{playbook} touched a planted path"


def test_a_link_in_place_of_roots_folder_is_refused(run_playbook, planted) -> None:
    ctl = host("ctl")
    ctl.check_output("mv /shared/.cluster /shared/.cluster.saved")
    as_bob("ctl", f"ln -s {VICTIM} /shared/.cluster")
    site = run_playbook("site.yml")
    out = " ".join((site.stdout + site.stderr).split())
    assert site.returncode != 0, out[-3000:]
    assert f"/shared/.cluster is a symbolic link (to {VICTIM}) owned by bob (uid 2002)" in out
    for playbook, extra in (("doctor.yml", ()), ("smoke_train.yml", ("-e", SRUN_ONLY))):
        result = run_playbook(playbook, *extra)
        assert result.returncode != 0, playbook + result.stdout[-3000:]
    assert fingerprint() == planted
    # A folder bob made first where root keeps the users' folders.
    ctl.check_output("rm /shared/.cluster && mv /shared/.cluster.saved /shared/.cluster")
    ctl.check_output("mv /shared/home /shared/home.saved")
    as_bob("ctl", "mkdir /shared/home && chmod 0755 /shared/home")
    site = run_playbook("site.yml")
    out = " ".join((site.stdout + site.stderr).split())
    assert site.returncode != 0, out[-3000:]
    assert "/shared/home is owned by bob (uid 2002)" in out, out[-3000:]
    assert fingerprint() == planted


def test_root_runs_no_venv_python_from_a_users_folder(run_playbook) -> None:
    """cluster_venv in bob's folder on the shared filesystem: site.yml refuses before root
    runs anything from it, naming the path and its owner (issue 38)."""
    result = run_playbook("site.yml", "-e", "cluster_venv=/shared/home/bob/venv")
    out = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0, out[-3000:]
    assert (
        "cluster_venv=/shared/home/bob/venv: root would run /shared/home/bob/venv/bin/python, "
        "but /shared/home/bob belongs to bob (uid 2002), not root" in out
    ), out[-3000:]
    assert not host("node1").file("/shared/home/bob/venv").exists
