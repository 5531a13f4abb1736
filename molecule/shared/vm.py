#!/usr/bin/env python3
"""Small Debian VMs under qemu (TCG) for scenarios that need a real kernel.

The host kernel has no NFS and /dev/kvm cannot boot stock kernels, so the
`nfs` scenario runs its nodes as qemu VMs with software emulation. One base
disk is built from an mmdebstrap tree (no cloud image, no registry) and each
VM boots Debian's kernel directly (-kernel/-initrd) from a qcow2 overlay.

Sub-commands:

  host              install qemu, qemu-img, mmdebstrap, mkfs.ext4, ssh when missing (root)
  image             build the base disk, kernel and initrd when the recipe changed
  up NAME:INDEX...  boot VMs (index 1..9) at once and wait until each answers SSH;
                    --config FILE writes molecule's instance config
  kill NAME...      power VMs off at once (disks stay, `up` boots them again)
  destroy NAME...   power off and delete the VMs' disks and run folders
  ssh INDEX -- CMD  run a command in VM INDEX as root

Networking: NIC 1 is qemu's user network with SSH forwarded from
127.0.0.1:(2200+INDEX); NIC 2 joins a private L2 segment shared by all VMs
(a multicast socket) where VM INDEX has the static address 10.77.0.(10+INDEX).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import rootfs

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "nfs-vm"
SUITE = "bookworm"
# Installed in the base image. NFS packages are NOT: the roles install them.
PACKAGES = [
    "linux-image-amd64",
    "initramfs-tools",
    "systemd",
    "systemd-sysv",
    "udev",
    "dbus",
    "kmod",
    "iproute2",
    "openssh-server",
    "python3",
    "python3-apt",
]
# Downloaded into the image's apt cache (with fresh package lists) so that the
# roles' apt tasks install them without reaching the archive: saves minutes
# of emulated apt work, and the roles still do the installing.
SEED_PACKAGES = ["nfs-kernel-server", "nfs-common", "netbase"]
# The initrd only has to find the root disk: a short list keeps it small
# (a `most` initrd takes seconds longer to unpack under emulation).
INITRD_MODULES = ["virtio_pci", "virtio_blk", "virtio_net", "ext4", "crc32c_generic"]
LAN_PREFIX = "10.77.0"
LAN_MCAST = "230.77.0.1:47701"
SSH_PORT_BASE = 2200
MAX_INDEX = 9
QEMU = "qemu-system-x86_64"
HOST_PACKAGES = {
    QEMU: "qemu-system-x86",
    "qemu-img": "qemu-utils",
    "mmdebstrap": "mmdebstrap",
    "mkfs.ext4": "e2fsprogs",
    "ssh": "openssh-client",
}
SSH_OPTS = [
    "-o",
    "BatchMode=yes",
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "LogLevel=ERROR",
    "-o",
    "ConnectTimeout=5",
]


def log(msg: str) -> None:
    print(f"vm: {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, **kw)


# --- pure parts (unit-tested in tests/test_nfs_vm.py) ---------------------------


def lan_ip(index: int) -> str:
    """Static address of VM INDEX on the private segment."""
    if not 1 <= index <= MAX_INDEX:
        raise ValueError(f"VM index must be 1..{MAX_INDEX}, not {index}")
    return f"{LAN_PREFIX}.{10 + index}"


def mac(index: int, nic: int) -> str:
    """Fixed MAC of NIC `nic` (1: user network, 2: private segment) of VM INDEX."""
    lan_ip(index)  # validates the index
    return f"52:54:00:77:{nic:02x}:{index:02x}"


def ssh_port(index: int) -> int:
    lan_ip(index)
    return SSH_PORT_BASE + index


def network_units() -> dict[str, str]:
    """systemd-networkd files of the base image: one per possible VM index on
    the private segment (matched by MAC), DHCP on the user network."""
    units = {}
    for index in range(1, MAX_INDEX + 1):
        units[f"10-lan-{index}.network"] = (
            f"[Match]\nMACAddress={mac(index, 2)}\n\n[Network]\nAddress={lan_ip(index)}/24\n"
        )
    units["20-nat.network"] = "[Match]\nName=en*\n\n[Network]\nDHCP=ipv4\n"
    return units


def recipe_hash() -> str:
    """Everything that goes into the base image (rootfs.py included); a change rebuilds it."""
    return rootfs.recipe_hash(
        SUITE,
        PACKAGES,
        SEED_PACKAGES,
        INITRD_MODULES,
        network_units(),
        functions=[customise, seed_apt],
    )


@dataclass(frozen=True)
class VmSpec:
    name: str
    index: int
    disk: Path
    kernel: Path
    initrd: Path
    serial_log: Path
    pidfile: Path
    memory_mb: int = 768


def qemu_command(spec: VmSpec) -> list[str]:
    """The qemu command line that boots one VM in the background."""
    append = " ".join(
        [
            "root=/dev/vda",
            "rw",
            "console=ttyS0",
            f"systemd.hostname={spec.name}",
            "net.ifnames=1",
            "quiet",
            "tsc=reliable",
        ]
    )
    return [
        QEMU,
        "-name",
        spec.name,
        "-machine",
        "q35",
        "-accel",
        "tcg",
        "-smp",
        "1",
        "-m",
        str(spec.memory_mb),
        "-kernel",
        str(spec.kernel),
        "-initrd",
        str(spec.initrd),
        "-append",
        append,
        "-drive",
        f"file={spec.disk},if=virtio,format=qcow2,cache=unsafe,discard=unmap",
        "-netdev",
        f"user,id=nat,hostfwd=tcp:127.0.0.1:{ssh_port(spec.index)}-:22",
        "-device",
        f"virtio-net-pci,netdev=nat,mac={mac(spec.index, 1)},addr=0x3",
        "-netdev",
        f"socket,id=lan,mcast={LAN_MCAST},localaddr=127.0.0.1",
        "-device",
        f"virtio-net-pci,netdev=lan,mac={mac(spec.index, 2)},addr=0x4",
        "-device",
        "virtio-rng-pci",
        "-display",
        "none",
        "-serial",
        f"file:{spec.serial_log}",
        "-pidfile",
        str(spec.pidfile),
        "-daemonize",
    ]


# --- host and image ------------------------------------------------------------


def ensure_host() -> None:
    missing = sorted({pkg for tool, pkg in HOST_PACKAGES.items() if not shutil.which(tool)})
    if not missing:
        log("qemu, qemu-img, mmdebstrap, mkfs.ext4 and ssh are installed")
        return
    if os.geteuid() != 0:
        sys.exit(f"vm: missing {' '.join(missing)}; run as root or install them")
    log(f"installing {' '.join(missing)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-qq"], env=env)
    run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env=env)


def image_paths(digest: str) -> dict[str, Path]:
    return {
        "disk": CACHE / f"base-{digest}.img",
        "kernel": CACHE / f"vmlinuz-{digest}",
        "initrd": CACHE / f"initrd-{digest}",
        "key": CACHE / "id_ed25519",
    }


def staged(path: Path) -> Path:
    """Where a file is written before it is renamed into place."""
    return path.with_name(path.name + ".partial")


def ssh_key() -> Path:
    key = CACHE / "id_ed25519"
    if not key.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "nfs-vm", "-f", str(key)])
    return key


def customise(tree: Path, pubkey: str) -> None:
    """Root login by key, static networking, small initrd, quiet boot, seeded apt."""
    etc = tree / "etc"
    ssh_dir = tree / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    (ssh_dir / "authorized_keys").write_text(pubkey)
    (ssh_dir / "authorized_keys").chmod(0o600)
    (etc / "ssh/sshd_config.d/10-vm.conf").write_text(
        "PermitRootLogin prohibit-password\nUseDNS no\n"
    )
    (etc / "fstab").write_text("/dev/vda / ext4 defaults,noatime 0 0\n")
    (etc / "hostname").write_text("vm\n")
    (etc / "hosts").write_text("127.0.0.1 localhost\n")
    for name, text in network_units().items():
        (etc / "systemd/network" / name).write_text(text)
    wants = etc / "systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    link = wants / "systemd-networkd.service"
    link.unlink(missing_ok=True)
    link.symlink_to("/lib/systemd/system/systemd-networkd.service")
    # qemu's user network answers DNS here; nothing else writes resolv.conf.
    (etc / "resolv.conf").unlink(missing_ok=True)
    (etc / "resolv.conf").write_text("nameserver 10.0.2.3\n")
    # Timers and units that only cost boot time in a throw-away VM.
    rootfs.mask_units(
        tree,
        (
            "apt-daily.timer",
            "apt-daily-upgrade.timer",
            "e2scrub_all.timer",
            "e2scrub_reap.service",
            "fstrim.timer",
            "systemd-networkd-wait-online.service",
            "getty@tty1.service",
        ),
    )
    rootfs.quiet_apt(tree, "90vm", keep_debs=True)
    (etc / "initramfs-tools/conf.d/vm").write_text("MODULES=list\nCOMPRESS=gzip\n")
    (etc / "initramfs-tools/modules").write_text("\n".join(INITRD_MODULES) + "\n")
    rootfs.chroot(tree, "update-initramfs", "-u", "-k", "all")
    # The VMs boot the initrd extracted here; rebuilding the unused one inside
    # a VM (nfs-common's hook triggers it) costs a minute of emulation.
    conf = etc / "initramfs-tools/update-initramfs.conf"
    conf.write_text(conf.read_text().replace("update_initramfs=yes", "update_initramfs=no"))
    rootfs.forget_identity(tree)


def seed_apt(tree: Path) -> None:
    """Fresh package lists and the NFS packages' .debs in the image's apt cache."""
    resolv = tree / "etc/resolv.conf"
    resolv.unlink(missing_ok=True)
    shutil.copy2("/etc/resolv.conf", resolv)
    (tree / "etc/apt/apt.conf.d/80languages").write_text('Acquire::Languages "none";\n')
    rootfs.chroot(tree, "apt-get", "clean")
    rootfs.chroot(tree, "apt-get", "update", "-qq")
    rootfs.chroot(tree, "apt-get", "install", "-y", "-qq", "--download-only", *SEED_PACKAGES)
    # apt's binary caches, so the first apt run in a VM does not build them.
    rootfs.chroot(tree, "apt-cache", "gencaches")


def ensure_image() -> dict[str, Path]:
    digest = recipe_hash()
    paths = image_paths(digest)
    if all(paths[k].exists() for k in ("disk", "kernel", "initrd")):
        log(f"base image {paths['disk'].name} is current")
        return paths
    ensure_host()
    key = ssh_key()
    started = time.monotonic()
    log(f"mmdebstrap {SUITE} with a kernel (a few minutes)")
    with rootfs.bootstrap(SUITE, PACKAGES, CACHE) as tree:
        seed_apt(tree)
        customise(tree, (key.with_suffix(".pub")).read_text())
        boot = tree / "boot"
        shutil.copy2(next(boot.glob("vmlinuz-*")), staged(paths["kernel"]))
        shutil.copy2(next(boot.glob("initrd.img-*")), staged(paths["initrd"]))
        used_mb = int(subprocess.check_output(["du", "-sm", str(tree)]).split()[0])
        tmp_disk = staged(paths["disk"])
        tmp_disk.unlink(missing_ok=True)
        log(f"mkfs.ext4 -d ({used_mb} MiB of files)")
        run(
            [
                *("mkfs.ext4", "-q", "-F", "-L", "root", "-d", str(tree)),
                *(str(tmp_disk), f"{used_mb + 1536}M"),
            ],
        )
    for k in ("kernel", "initrd", "disk"):
        staged(paths[k]).rename(paths[k])
    current = {paths[k] for k in ("kernel", "initrd", "disk")}
    for old in CACHE.glob("*-*"):
        if old.name.split("-", 1)[0] in ("base", "vmlinuz", "initrd") and old not in current:
            old.unlink()
    log(f"base image {paths['disk'].name} built in {time.monotonic() - started:.0f} s")
    return paths


# --- VMs -----------------------------------------------------------------------


def run_dir(name: str) -> Path:
    return CACHE / "run" / name


def spec_for(name: str, index: int, memory_mb: int) -> VmSpec:
    paths = image_paths(recipe_hash())
    d = run_dir(name)
    return VmSpec(
        name=name,
        index=index,
        disk=d / "disk.qcow2",
        kernel=paths["kernel"],
        initrd=paths["initrd"],
        serial_log=d / "serial.log",
        pidfile=d / "qemu.pid",
        memory_mb=memory_mb,
    )


def running_pid(name: str) -> int | None:
    pidfile = run_dir(name) / "qemu.pid"
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def ssh_command(index: int, *cmd: str) -> list[str]:
    return [
        "ssh",
        *SSH_OPTS,
        "-i",
        str(CACHE / "id_ed25519"),
        "-p",
        str(ssh_port(index)),
        "root@127.0.0.1",
        *cmd,
    ]


def wait_ssh(name: str, index: int, timeout: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if running_pid(name) is None:
            sys.exit(f"vm: {name} stopped while booting; see {run_dir(name) / 'serial.log'}")
        probe = subprocess.run(ssh_command(index, "true"), capture_output=True)
        if probe.returncode == 0:
            return time.monotonic() - started
        time.sleep(2)
    sys.exit(
        f"vm: {name} did not answer SSH on port {ssh_port(index)} within {timeout:.0f} s; "
        f"see {run_dir(name) / 'serial.log'}"
    )


def parse_vm(arg: str) -> tuple[str, int]:
    """'server:1' -> ('server', 1)."""
    name, sep, index = arg.partition(":")
    if not sep or not name or not index.isdigit():
        raise argparse.ArgumentTypeError(f"expected NAME:INDEX, not {arg!r}")
    try:
        lan_ip(int(index))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err
    return name, int(index)


def boot(name: str, index: int, memory_mb: int) -> None:
    paths = ensure_image()
    spec = spec_for(name, index, memory_mb)
    run_dir(name).mkdir(parents=True, exist_ok=True)
    if running_pid(name) is not None:
        return
    if not spec.disk.exists():
        run(
            [
                *("qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw"),
                *("-b", str(paths["disk"]), str(spec.disk)),
            ]
        )
    spec.serial_log.unlink(missing_ok=True)
    run(qemu_command(spec))
    log(f"{name}: booting (index {index}, {lan_ip(index)}, ssh port {ssh_port(index)})")


def instance_config(name: str, index: int) -> dict:
    """One entry of molecule's instance_config.yml (delegated driver)."""
    return {
        "instance": name,
        "address": "127.0.0.1",
        "user": "root",
        "port": ssh_port(index),
        "identity_file": str(CACHE / "id_ed25519"),
    }


def up(vms: list[tuple[str, int]], memory_mb: int, timeout: float) -> list[dict]:
    """Boot all VMs at once, then wait for each one's SSH."""
    started = time.monotonic()
    for name, index in vms:
        boot(name, index, memory_mb)
    for name, index in vms:
        left = timeout - (time.monotonic() - started)
        wait_ssh(name, index, max(left, 1))
        log(f"{name}: SSH answers {time.monotonic() - started:.0f} s after the first boot")
    return [instance_config(name, index) for name, index in vms]


def kill(name: str) -> None:
    pid = running_pid(name)
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    for _ in range(50):
        if running_pid(name) is None:
            log(f"{name}: powered off")
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    log(f"{name}: killed")


def destroy(name: str) -> None:
    kill(name)
    shutil.rmtree(run_dir(name), ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("host")
    sub.add_parser("image")
    p_up = sub.add_parser("up")
    p_up.add_argument("vms", nargs="+", type=parse_vm, metavar="NAME:INDEX")
    p_up.add_argument("--memory", type=int, default=768, help="MiB per VM")
    p_up.add_argument("--timeout", type=float, default=300, help="seconds to wait for SSH")
    p_up.add_argument("--config", type=Path, help="write molecule's instance config here")
    for what in ("kill", "destroy"):
        sub.add_parser(what).add_argument("names", nargs="+")
    p_ssh = sub.add_parser("ssh")
    p_ssh.add_argument("index", type=int)
    p_ssh.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    CACHE.mkdir(parents=True, exist_ok=True)
    if args.what == "host":
        ensure_host()
    elif args.what == "image":
        ensure_image()
    elif args.what == "up":
        config = json.dumps(up(args.vms, args.memory, args.timeout), indent=1)
        if args.config:
            args.config.write_text(config + "\n")
        print(config)
    elif args.what == "kill":
        for name in args.names:
            kill(name)
    elif args.what == "destroy":
        for name in args.names:
            destroy(name)
    elif args.what == "ssh":
        cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        sys.exit(subprocess.run(ssh_command(args.index, *cmd)).returncode)


if __name__ == "__main__":
    main()
