"""Guests without a guest: the plan leaves emulated guests out with a reason unless allowed, and the
VM domain XML carries GPU passthrough and pinning (real QEMU and libvirt:
tests/integration/test_platform_guests.py)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

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
                     job_disk=tmp_path / "j.img", console=tmp_path / "c.log", gpu_pci=pci,
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
