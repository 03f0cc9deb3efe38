"""Virtual machine (VM): a transient libvirt/QEMU domain per job, named ``dlvirt-<run id>``.

``VM/N/VNL``: N vCPUs, left to the host scheduler. ``VM/N/PIN``: ``<cputune>`` pins vCPU i to the
i-th granted host core and the emulator threads to the same cores; the host checks the vCPU
threads' affinity while the guest runs. ``VM/N/*/GPU``: a ``<hostdev>`` PCI passthrough of
``platforms.VM.gpu_pci_address``. KVM when it really works, else TCG (``allow_emulation``).

libvirtd and virtlogd are used when they answer; otherwise dlvirt starts them itself through
``dlvirt.system.engines`` and stops them when its last user is done.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from dlvirt.system import engines
from dlvirt.platforms.guest import GuestPlatform, kernel_cmdline
from dlvirt.system.hostinfo import Capabilities
from dlvirt.platforms.base import PlatformError
from dlvirt.core.scenario import Scenario

URI = "qemu:///system"
VIRTLOGD_SOCKET = Path("/run/libvirt/virtlogd-sock")
QEMU_PIDFILES = Path("/run/libvirt/qemu")
PCI_ADDRESS = re.compile(r"^(?:([0-9a-fA-F]{4}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")


def quiet_libvirt() -> Any:
    import libvirt

    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)  # errors arrive as exceptions
    return libvirt


def virtlogd_answers() -> bool:
    with contextlib.closing(socket.socket(socket.AF_UNIX)) as sock:
        try:
            sock.connect(str(VIRTLOGD_SOCKET))
            return True
        except OSError:
            return False


def libvirtd_answers() -> bool:
    libvirt = quiet_libvirt()
    try:
        conn = libvirt.open(URI)
    except libvirt.libvirtError:
        return False
    conn.close()
    return True


def parse_pci_address(address: str, key: str) -> dict[str, str]:
    match = PCI_ADDRESS.match(address.strip())
    if match is None:
        raise PlatformError(f"{key}: {address!r} is not a PCI address like 0000:3b:00.0")
    domain, bus, slot, function = match.groups()
    return {"domain": f"0x{domain or '0000'}", "bus": f"0x{bus}", "slot": f"0x{slot}", "function": f"0x{function}"}


def domain_xml(*, name: str, accel: str, vcpus: int, memory_mib: int, kernel: Path, initrd: Path,
               cmdline: str, root_disk: Path, job_disk: Path, console: Path,
               pinned_cpus: tuple[int, ...] | None = None, gpu_pci: dict[str, str] | None = None,
               emulator: str = "/usr/bin/qemu-system-x86_64") -> str:
    """The libvirt domain for one job: no network, serial console to a file, destroyed on
    power-off, reboot or crash."""
    dom = ET.Element("domain", type="kvm" if accel == "kvm" else "qemu")
    ET.SubElement(dom, "name").text = name
    ET.SubElement(dom, "memory", unit="MiB").text = str(memory_mib)
    ET.SubElement(dom, "vcpu", placement="static").text = str(vcpus)
    if pinned_cpus is not None:
        tune = ET.SubElement(dom, "cputune")
        for vcpu, cpu in enumerate(pinned_cpus):
            ET.SubElement(tune, "vcpupin", vcpu=str(vcpu), cpuset=str(cpu))
        ET.SubElement(tune, "emulatorpin", cpuset=",".join(str(c) for c in pinned_cpus))
    os_el = ET.SubElement(dom, "os")
    ET.SubElement(os_el, "type", arch="x86_64", machine="pc").text = "hvm"
    ET.SubElement(os_el, "kernel").text = str(kernel)
    ET.SubElement(os_el, "initrd").text = str(initrd)
    ET.SubElement(os_el, "cmdline").text = cmdline
    ET.SubElement(ET.SubElement(dom, "features"), "acpi")
    ET.SubElement(dom, "cpu", mode="host-passthrough" if accel == "kvm" else "maximum")
    for event in ("on_poweroff", "on_reboot", "on_crash"):  # -no-reboot: the guest ends the domain
        ET.SubElement(dom, event).text = "destroy"
    devices = ET.SubElement(dom, "devices")
    ET.SubElement(devices, "emulator").text = emulator
    for disk, fmt, target in ((root_disk, "qcow2", "vda"), (job_disk, "raw", "vdb")):
        el = ET.SubElement(devices, "disk", type="file", device="disk")
        ET.SubElement(el, "driver", name="qemu", type=fmt, cache="none")
        ET.SubElement(el, "source", file=str(disk))
        ET.SubElement(el, "target", dev=target, bus="virtio")
    serial = ET.SubElement(devices, "serial", type="file")
    ET.SubElement(serial, "source", path=str(console))
    ET.SubElement(serial, "target", port="0")
    ET.SubElement(devices, "controller", type="usb", model="none")
    ET.SubElement(devices, "memballoon", model="none")
    if gpu_pci is not None:
        hostdev = ET.SubElement(devices, "hostdev", mode="subsystem", type="pci", managed="yes")
        ET.SubElement(ET.SubElement(hostdev, "source"), "address", **gpu_pci)
    # QEMU runs as root without relabelling: the shared base image behind every job's
    # copy-on-write root disk must not be chowned back and forth by concurrent jobs.
    label = ET.SubElement(dom, "seclabel", type="static", model="dac", relabel="no")
    ET.SubElement(label, "label").text = "+0:+0"
    return ET.tostring(dom, encoding="unicode")


class VirtualMachine(GuestPlatform):
    name = "VM"

    @classmethod
    def unavailable_reason(cls, scenario: Scenario, caps: Capabilities, config: dict[str, Any]) -> str | None:
        why = super().unavailable_reason(scenario, caps, config)
        if why is None and not caps.libvirt:
            why = "libvirtd is not installed (apt-get install libvirt-daemon libvirt-daemon-driver-qemu)"
        settings = config.get("platforms", {}).get(cls.name, {})
        if why is None and scenario.processor == "GPU" and not settings.get("gpu_pci_address"):
            why = f"platforms.{cls.name}.gpu_pci_address is not set (the GPU to pass through)"
        return why

    @classmethod
    def daemons(cls, settings: dict[str, Any]) -> list[engines.Daemon]:
        """virtlogd (QEMU's log handler) then libvirtd, in the foreground under dlvirt's control."""
        return [
            engines.Daemon(name="virtlogd", command=("virtlogd",), probe=virtlogd_answers, ready_timeout_s=30.0),
            # The first connection probes QEMU's capabilities (~12 s on a busy host).
            engines.Daemon(name="libvirtd", command=("libvirtd",), probe=libvirtd_answers, ready_timeout_s=120.0),
        ]

    def provision(self) -> None:
        super().provision()
        self.gpu_pci = None
        if self.scenario.processor == "GPU":
            self.gpu_pci = parse_pci_address(str(self.config.get("gpu_pci_address") or ""),
                                             f"platforms.{self.name}.gpu_pci_address")
        self.leases: list[str] = []
        for daemon in self.daemons(self.config):
            # a lease this process holds already (a test session's) is its holder's to release
            held = (daemon.run_dir / engines.LEASES / str(os.getpid())).exists()
            if engines.acquire(daemon, os.getpid()) is not None and not held:
                self.leases.append(daemon.name)
        libvirt = quiet_libvirt()
        try:
            self.conn = libvirt.open(URI)
        except libvirt.libvirtError as exc:
            raise PlatformError(f"cannot connect to libvirt at {URI}: {exc}") from None
        self.domain: Any = None

    def domain_definition(self, accel: str, root_disk: Path, job_disk: Path, console: Path) -> str:
        return domain_xml(
            name=self.domain_name, accel=accel, vcpus=self.vcpus, memory_mib=int(self.config.get("memory_mib", 4096)),
            kernel=self.boot_files.kernel, initrd=self.boot_files.initrd,
            cmdline=kernel_cmdline(str(self.config.get("cmdline_extra") or "")), root_disk=root_disk,
            job_disk=job_disk, console=console, pinned_cpus=self.host_cpus, gpu_pci=self.gpu_pci)

    def _start_vmm(self, accel: str, root_disk: Path, job_disk: Path, console: Path) -> None:
        libvirt = quiet_libvirt()
        xml = self.domain_definition(accel, root_disk, job_disk, console)
        try:
            self.domain = self.conn.createXML(xml, 0)  # transient: gone once it stops
        except libvirt.libvirtError as exc:
            raise PlatformError(f"libvirt refused domain {self.domain_name}: {exc}") from None

    def _vmm_running(self) -> bool:
        libvirt = quiet_libvirt()
        if self.domain is None:
            return False
        try:
            return bool(self.domain.isActive())
        except libvirt.libvirtError:  # a transient domain disappears when it powers off
            return False

    def _vmm_pid(self) -> int | None:
        try:
            return int((QEMU_PIDFILES / f"{self.domain_name}.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def _stop_vmm(self) -> None:
        domain = getattr(self, "domain", None)
        if domain is None:
            return
        libvirt = quiet_libvirt()
        with contextlib.suppress(libvirt.libvirtError):
            domain.destroy()
        self.domain = None

    def _on_guest_started(self) -> dict[str, Any]:
        return self.check_vcpu_pinning(self._vmm_pid())

    def teardown(self) -> None:
        super().teardown()
        conn = getattr(self, "conn", None)
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
            self.conn = None
        for name in getattr(self, "leases", []):
            engines.release(name, os.getpid())
        self.leases = []

    def describe(self) -> dict[str, Any]:
        facts = super().describe()
        facts.update({"engine": "libvirt", "vmm": "qemu", "domain": self.domain_name,
                      "cpu_mechanism": "libvirt <cputune><vcpupin>" if self.host_cpus else "unpinned vCPUs",
                      "gpu_pci": self.gpu_pci})
        return facts
