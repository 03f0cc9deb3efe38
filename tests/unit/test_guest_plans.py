"""Guests without a guest: the plan leaves emulated guests out with a reason unless allowed, and the
VM domain XML carries GPU passthrough and pinning (real QEMU and libvirt:
tests/integration/test_platform_guests.py)."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import contiguous_two_socket
from dlvirt.plan.planner import expand
from dlvirt.platforms.base import PlatformError
from dlvirt.platforms.vm import domain_xml, parse_pci_address
from dlvirt.system import topology
from dlvirt.system.hostinfo import Capabilities
from dlvirt.system.topology import place


def test_default_config_leaves_emulated_guests_out_with_a_reason():
    caps = Capabilities(cpus=(0, 1), gpus=(), kvm_device=True, hw_virt=False, qemu=True,
                        libvirt=True, cgroup_version=1)
    config = {"allow_emulation": False, "platforms": {"VM": {}, "MVM": {}, "CN": {}},
              "study": {"apps": ["ic"], "tools": ["mlperf"], "repetitions": 1,
                        "matrix": [{"platforms": ["VM", "MVM"], "cores": [1], "pinning": ["VNL"],
                                    "processors": ["CPU"]}]},
              "apps": {"ic": {}}}
    plan = expand(config, caps)
    assert plan.jobs == []
    reasons = {gap.what: gap.why for gap in plan.left_out}
    assert set(reasons) == {"VM/1/VNL/CPU", "MVM/1/VNL/CPU"}
    assert all("no vmx/svm" in why and "allow_emulation: true" in why for why in reasons.values())
    plan = expand({**config, "allow_emulation": True}, caps)
    assert sorted(j.scenario.name for j in plan.jobs) == ["MVM/1/VNL/CPU", "VM/1/VNL/CPU"]


def test_gpu_passthrough_and_pinning_in_the_domain_xml(tmp_path):
    pci = parse_pci_address("0000:3b:00.1", "platforms.VM.gpu_pci_address")
    xml = domain_xml(name="dlvirt-1-abc", accel="kvm", vcpus=2, memory_mib=1024, kernel=tmp_path / "k",
                     initrd=tmp_path / "i", cmdline="console=ttyS0", root_disk=tmp_path / "r.qcow2",
                     job_disk=tmp_path / "j.img", console=tmp_path / "c.log", gpu_pci=pci, qemu_user=(999, 994),
                     placement=place(topology.read(contiguous_two_socket(tmp_path)), 2, allowed={4, 5, 6}))
    dom = ET.fromstring(xml)
    assert dom.get("type") == "kvm" and dom.findtext("name") == "dlvirt-1-abc"
    hostdev = dom.find("devices/hostdev")
    assert hostdev is not None and hostdev.get("type") == "pci" and hostdev.get("managed") == "yes"
    assert hostdev.find("source/address").attrib == {"domain": "0x0000", "bus": "0x3b", "slot": "0x00",
                                                     "function": "0x1"}
    assert [(p.get("vcpu"), p.get("cpuset")) for p in dom.findall("cputune/vcpupin")] == [("0", "4"), ("1", "5")]
    assert dom.find("cputune/emulatorpin").get("cpuset") == "6"  # a spare core of the vCPUs' node
    assert dom.find("devices/interface") is None  # no network at all
    assert {e: dom.findtext(e) for e in ("on_poweroff", "on_reboot", "on_crash")} == dict.fromkeys(
        ("on_poweroff", "on_reboot", "on_crash"), "destroy")
    with pytest.raises(PlatformError, match="platforms.VM.gpu_pci_address"):
        parse_pci_address("3b:00", "platforms.VM.gpu_pci_address")
    # QEMU runs as the given user and group from its start, and libvirt relabels nothing (no shared
    # base image chowned back and forth): one static DAC label, never root's
    labels = dom.findall("seclabel")
    assert [(e.get("type"), e.get("model"), e.get("relabel"), e.findtext("label")) for e in labels] == [
        ("static", "dac", "no", "+999:+994")]


def test_qemus_user_may_reach_only_what_its_modes_allow():
    """vm.closed_to: the first directory on the way QEMU's user may not search, or the file's mode
    (by owner, else group, else others; a static label has no supplementary groups)."""
    import tempfile

    from dlvirt.platforms.vm import READ, SEARCH, WRITE, closed_to

    parents = [p for p in Path("/var/tmp").resolve().parents if not os.stat(p).st_mode & 0o001]
    if parents:
        pytest.skip(f"{parents[0]} is closed to others here")
    with tempfile.TemporaryDirectory(dir="/var/tmp") as top:  # pytest's own temp dirs are 0700
        base = Path(top)
        base.chmod(0o755)
        (base / "shut").mkdir(mode=0o700)
        (base / "open").mkdir(mode=0o711)
        for folder in ("shut", "open"):
            (base / folder / "f").write_bytes(b"")
            (base / folder / "f").chmod(0o644)
        assert "its directory" in closed_to(base / "shut" / "f", 12345, 12345, READ)
        assert closed_to(base / "open" / "f", 12345, 12345, READ) is None
        assert "mode 0644" in closed_to(base / "open" / "f", 12345, 12345, READ | WRITE)
        os.chown(base / "open" / "f", 12345, 0)
        os.chmod(base / "open" / "f", 0o600)
        assert closed_to(base / "open" / "f", 12345, 777, READ | WRITE) is None  # its owner
        os.chown(base / "shut", 0, 777)
        os.chmod(base / "shut", 0o710)
        assert closed_to(base / "shut", 12345, 777, SEARCH) is None  # through its group
        assert closed_to(base / "shut", 12345, 778, SEARCH) is not None
