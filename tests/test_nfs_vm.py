"""Pure parts of molecule/shared/vm.py: addresses, networkd files, qemu command, recipe hash."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "molecule/shared"))
import vm


def test_addresses_and_ports() -> None:
    assert vm.lan_ip(1) == "10.77.0.11"
    assert vm.lan_ip(9) == "10.77.0.19"
    assert vm.mac(3, 2) == "52:54:00:77:02:03"
    assert vm.ssh_port(2) == 2202
    for bad in (0, 10):
        with pytest.raises(ValueError, match=r"1\.\.9"):
            vm.lan_ip(bad)


def test_network_units_match_the_qemu_macs() -> None:
    units = vm.network_units()
    assert units["10-lan-2.network"] == (
        "[Match]\nMACAddress=52:54:00:77:02:02\n\n[Network]\nAddress=10.77.0.12/24\n"
    )
    assert units["20-nat.network"] == "[Match]\nName=en*\n\n[Network]\nDHCP=ipv4\n"
    assert len(units) == 10


def spec(tmp_path: Path) -> vm.VmSpec:
    return vm.VmSpec(
        name="client",
        index=2,
        disk=tmp_path / "disk.qcow2",
        kernel=tmp_path / "vmlinuz",
        initrd=tmp_path / "initrd",
        serial_log=tmp_path / "serial.log",
        pidfile=tmp_path / "qemu.pid",
        memory_mb=512,
    )


def test_qemu_command(tmp_path: Path) -> None:
    cmd = vm.qemu_command(spec(tmp_path))

    def arg(flag: str) -> list[str]:
        return [cmd[i + 1] for i, a in enumerate(cmd) if a == flag]

    assert cmd[0] == "qemu-system-x86_64"
    assert arg("-accel") == ["tcg"]
    assert arg("-smp") == ["1"]
    assert arg("-m") == ["512"]
    assert arg("-kernel") == [str(tmp_path / "vmlinuz")]
    assert arg("-append")[0].startswith("root=/dev/vda rw console=ttyS0 systemd.hostname=client")
    assert arg("-netdev") == [
        "user,id=nat,hostfwd=tcp:127.0.0.1:2202-:22",
        "socket,id=lan,mcast=230.77.0.1:47701,localaddr=127.0.0.1",
    ]
    assert arg("-device")[:2] == [
        "virtio-net-pci,netdev=nat,mac=52:54:00:77:01:02,addr=0x3",
        "virtio-net-pci,netdev=lan,mac=52:54:00:77:02:02,addr=0x4",
    ]
    assert f"file={tmp_path / 'disk.qcow2'},if=virtio,format=qcow2" in arg("-drive")[0]
    assert "-daemonize" in cmd
    assert "-enable-kvm" not in cmd


def test_recipe_hash_is_stable_and_follows_the_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    first = vm.recipe_hash()
    assert first == vm.recipe_hash()
    assert len(first) == 16
    monkeypatch.setattr(vm, "SEED_PACKAGES", [*vm.SEED_PACKAGES, "htop"])
    assert vm.recipe_hash() != first
    monkeypatch.undo()
    monkeypatch.setattr(vm, "INITRD_MODULES", ["virtio_blk"])
    assert vm.recipe_hash() != first


def test_parse_vm() -> None:
    assert vm.parse_vm("server:1") == ("server", 1)
    for bad in ("server", "server:x", ":1", "server:12"):
        with pytest.raises(argparse.ArgumentTypeError):
            vm.parse_vm(bad)


def test_instance_config_is_what_molecule_reads() -> None:
    conf = vm.instance_config("server", 1)
    assert conf == {
        "instance": "server",
        "address": "127.0.0.1",
        "user": "root",
        "port": 2201,
        "identity_file": str(vm.CACHE / "id_ed25519"),
    }
