"""Virtual machine (VM): a transient libvirt/QEMU domain per job, named ``dlvirt-<run id>``.

``VM/N/VNL``: N vCPUs, left to the host scheduler. ``VM/N/PIN``: the placement's host cores
(``platforms.placement``), vCPU i on the i-th of them (``<cputune><vcpupin>``); the guest gets the
host's split: ``<cpu><topology>`` with one guest socket per host socket used and a guest NUMA
``<cell>`` per host node used, each cell's memory bound to its host node (``<numatune>``). The
emulator threads (QEMU's main loop, its I/O) go to a spare CPU of the first node when there is one,
else onto the vCPUs' cores (recorded). The host checks the vCPU threads' affinity while the guest
runs; the guest checks its sockets, nodes and memory nodes from inside. ``VM/N/*/GPU``: a
``<hostdev>`` PCI passthrough of ``platforms.VM.gpu_pci_address``. KVM when it really works, else
TCG (``allow_emulation``).

libvirtd and virtlogd are used when they answer; otherwise dlvirt starts them itself through
``dlvirt.system.engines`` and stops them when its last user is done.

Confinement: libvirt runs QEMU as a uid of the job's own (``dlvirt.system.vmm_ids``: leased, no user
account) from its start, by a static DAC label ``+uid:+gid`` (gid: the ``kvm`` group, which
``/dev/kvm`` belongs to; a static label gets no supplementary groups) with no relabelling: dlvirt
itself hands QEMU exactly what it writes — its job's copy-on-write overlay, job disk and console,
chowned to it, in a job folder (0710, group gid) it may only traverse. The shared base image, kernel
and initrd stay root's and read-only to it (never chowned, so concurrent jobs never fight over
them); where their own path is closed to that user (a 0700 home or temp directory above them), the
job folder gets a hard link to them (a copy on another file system). The host checks QEMU's uid,
euid, capabilities, no_new_privs and seccomp mode (libvirt's sandbox) in /proc while the guest runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import grp
import os
import pwd
import re
import shutil
import socket
import stat
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlvirt.core.kinds import PlatformKind
from dlvirt.core.scenario import Scenario
from dlvirt.platforms.base import Expected, PlatformError
from dlvirt.platforms.guest import VMM_USER, GuestPlatform, kernel_cmdline
from dlvirt.system import engine_versions, engines
from dlvirt.system.hostinfo import Capabilities
from dlvirt.system.topology import Placement, format_cpulist

URI = engine_versions.LIBVIRT_URI
EMULATOR = "/usr/bin/qemu-system-x86_64"  # the <emulator> of every domain dlvirt defines
VIRTLOGD_SOCKET = Path("/run/libvirt/virtlogd-sock")
QEMU_PIDFILES = Path("/run/libvirt/qemu")
PCI_ADDRESS = re.compile(r"^(?:([0-9a-fA-F]{4}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
KVM_GROUP = "kvm"
JOB_FOLDER_MODE = 0o710  # the job folder: root's; QEMU (its group) may only traverse it
READ, WRITE, SEARCH = 4, 2, 1


def qemu_ids() -> tuple[int, int]:
    """VMM_USER's uid (a job's QEMU runs as its own instead) and the gid libvirt runs QEMU with: the kvm
    group (VMM_USER's own without one)."""
    try:
        user = pwd.getpwnam(VMM_USER)
    except KeyError:
        raise PlatformError(f"no user {VMM_USER} for libvirt to run QEMU as (setup.sh install creates it)") from None
    try:
        return user.pw_uid, grp.getgrnam(KVM_GROUP).gr_gid
    except KeyError:
        return user.pw_uid, user.pw_gid


def _may(info: os.stat_result, uid: int, gid: int, access: int) -> bool:
    """Whether ``uid``:``gid`` (no supplementary groups) has ``access`` (READ|WRITE|SEARCH bits)."""
    shift = 6 if info.st_uid == uid else 3 if info.st_gid == gid else 0
    return (info.st_mode >> shift) & access == access


def closed_to(path: Path, uid: int, gid: int, access: int) -> str | None:
    """Why ``uid``:``gid`` cannot open ``path`` for ``access`` (None when it can): the first directory
    on the way it may not search, or the file's own mode."""
    path = Path(os.path.realpath(path))
    for directory in (*reversed(path.parents), path.parent):
        if not _may(os.stat(directory), uid, gid, SEARCH):
            return f"its directory {directory} is closed to it (mode {stat.S_IMODE(os.stat(directory).st_mode):04o})"
    info = os.stat(path)
    if not _may(info, uid, gid, access):
        return f"its mode {stat.S_IMODE(info.st_mode):04o} (owner uid {info.st_uid}, gid {info.st_gid}) denies it"
    return None


def open_to_vmm(folder: Path, qemu_user: tuple[int, int], key: str) -> None:
    """Make the job folder ``folder`` root's, group ``qemu_user``'s gid, 0710 (QEMU may pass through,
    not list or write it), and check that QEMU's user can reach it from /; PlatformError naming the
    closed directory and the config ``key`` otherwise."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fchown(fd, 0, qemu_user[1])
        os.fchmod(fd, JOB_FOLDER_MODE)
    finally:
        os.close(fd)
    why = closed_to(folder, *qemu_user, SEARCH)
    if why is not None:
        raise PlatformError(f"QEMU runs as uid {qemu_user[0]} and cannot reach its job folder {folder}: {why} "
                            f"({key} must lie below directories others may search)")


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


@dataclass(frozen=True)
class GuestLayout:
    """The guest's CPU topology and NUMA cells for a pinned VM, mirroring the host placement."""

    sockets: int
    cores: int
    threads: int
    cells: tuple[tuple[int, tuple[int, ...]], ...]   # (host node, the vCPUs of that guest cell)
    emulator_cpus: tuple[int, ...]
    note: str | None                                 # why the guest does not mirror the host exactly

    def to_dict(self) -> dict[str, object]:
        return {"sockets": self.sockets, "cores": self.cores, "threads": self.threads,
                "cells": [{"host_node": n, "vcpus": list(v)} for n, v in self.cells],
                "emulator_cpus": list(self.emulator_cpus), "note": self.note}


def guest_layout(placement: Placement) -> GuestLayout:
    order = placement.vcpu_order
    vcpus = len(order)
    nodes = list(dict.fromkeys(placement.node_of[c] for c in order))
    cells = tuple((n, tuple(i for i, c in enumerate(order) if placement.node_of[c] == n)) for n in nodes)
    per_socket: dict[int, int] = {}
    for cpu in order:
        per_socket[placement.socket_of[cpu]] = per_socket.get(placement.socket_of[cpu], 0) + 1
    threads, sockets, notes = placement.threads_per_core, len(per_socket), []
    if len(set(per_socket.values())) != 1 or vcpus % (sockets * threads):
        notes.append(f"vCPUs split unevenly over host sockets {per_socket}: the guest has one socket")
        sockets, threads = 1, 1 if vcpus % threads else threads
    if placement.spare_cpu is not None:
        emulator: tuple[int, ...] = (placement.spare_cpu,)
    else:
        emulator = tuple(sorted(order))
        notes.append("no spare CPU on the placement's node: the emulator threads share the vCPUs' cores")
    return GuestLayout(sockets=sockets, cores=vcpus // (sockets * threads), threads=threads, cells=cells,
                       emulator_cpus=emulator, note="; ".join(notes) or None)


def domain_xml(*, name: str, accel: str, vcpus: int, memory_mib: int, kernel: Path, initrd: Path,
               cmdline: str, root_disk: Path, job_disk: Path, console: Path, qemu_user: tuple[int, int],
               placement: Placement | None = None, gpu_pci: dict[str, str] | None = None,
               emulator: str = EMULATOR) -> str:
    """The libvirt domain for one job: no network, serial console to a file, destroyed on
    power-off, reboot or crash, QEMU run as ``qemu_user`` (uid, gid). ``placement``: a pinned VM
    (see the module docstring)."""
    dom = ET.Element("domain", type="kvm" if accel == "kvm" else "qemu")
    ET.SubElement(dom, "name").text = name
    ET.SubElement(dom, "memory", unit="MiB").text = str(memory_mib)
    ET.SubElement(dom, "vcpu", placement="static").text = str(vcpus)
    layout = guest_layout(placement) if placement is not None else None
    if placement is not None and layout is not None:
        tune = ET.SubElement(dom, "cputune")
        for vcpu, cpu in enumerate(placement.vcpu_order):
            ET.SubElement(tune, "vcpupin", vcpu=str(vcpu), cpuset=str(cpu))
        ET.SubElement(tune, "emulatorpin", cpuset=format_cpulist(layout.emulator_cpus))
        numatune = ET.SubElement(dom, "numatune")
        ET.SubElement(numatune, "memory", mode="strict", nodeset=format_cpulist(placement.mems))
        for cell, (node, _) in enumerate(layout.cells):
            ET.SubElement(numatune, "memnode", cellid=str(cell), mode="strict", nodeset=str(node))
    os_el = ET.SubElement(dom, "os")
    ET.SubElement(os_el, "type", arch="x86_64", machine="pc").text = "hvm"
    ET.SubElement(os_el, "kernel").text = str(kernel)
    ET.SubElement(os_el, "initrd").text = str(initrd)
    ET.SubElement(os_el, "cmdline").text = cmdline
    ET.SubElement(ET.SubElement(dom, "features"), "acpi")
    cpu_el = ET.SubElement(dom, "cpu", mode="host-passthrough" if accel == "kvm" else "maximum")
    if layout is not None:
        ET.SubElement(cpu_el, "topology", sockets=str(layout.sockets), dies="1", cores=str(layout.cores),
                      threads=str(layout.threads))
        numa = ET.SubElement(cpu_el, "numa")
        shares = [memory_mib * len(v) // vcpus for _, v in layout.cells]
        shares[-1] += memory_mib - sum(shares)
        for cell, ((_, cell_vcpus), mib) in enumerate(zip(layout.cells, shares, strict=True)):
            ET.SubElement(numa, "cell", id=str(cell), cpus=format_cpulist(cell_vcpus), memory=str(mib), unit="MiB")
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
        ET.SubElement(ET.SubElement(hostdev, "source"), "address", attrib=gpu_pci)
    # QEMU runs as qemu_user without relabelling: dlvirt chowns the job's own files to it, and the
    # shared base image behind every job's copy-on-write root disk is never chowned back and forth.
    label = ET.SubElement(dom, "seclabel", type="static", model="dac", relabel="no")
    ET.SubElement(label, "label").text = f"+{qemu_user[0]}:+{qemu_user[1]}"
    return ET.tostring(dom, encoding="unicode")


def passthrough_unavailable(settings: dict[str, Any], section: str) -> str | None:
    """Why this host cannot pass ``section.gpu_pci_address`` through to a guest with its driver (None
    when it can): the address, the device, an IOMMU (VFIO needs one), the configured driver files."""
    address = settings.get("gpu_pci_address")
    if not address:
        return f"{section}.gpu_pci_address is not set (the GPU to pass through)"
    full = address if address.count(":") == 2 else f"0000:{address}"
    if not Path(f"/sys/bus/pci/devices/{full.lower()}").exists():
        return f"{section}.gpu_pci_address {address}: no such PCI device on this host"
    if not any(Path("/sys/kernel/iommu_groups").glob("*")):
        return ("no IOMMU groups on this host (enable VT-d/AMD-Vi and boot with intel_iommu=on or amd_iommu=on): "
                "PCI passthrough needs VFIO")
    debs = (settings.get("gpu_driver") or {}).get("debs") or []
    missing = [d for d in debs if not Path(d).is_file()]
    if missing:
        return (f"{section}.gpu_driver.debs: {', '.join(missing)} not found (the guest's NVIDIA driver "
                "packages; empty = Debian's nvidia-driver from non-free)")
    return None


class VirtualMachine(GuestPlatform):
    kind = PlatformKind(name="VM", title="virtual machine: QEMU through libvirt", order=2, colour=2,
                        virtualised=True, image="full", gpu_image="gpu")
    launch_in_runner_cgroup = False  # libvirtd starts QEMU in a cgroup of its own

    @classmethod
    def unavailable_reason(cls, scenario: Scenario, caps: Capabilities, config: dict[str, Any]) -> str | None:
        why = super().unavailable_reason(scenario, caps, config)
        if why is None and not caps.libvirt:
            why = "libvirtd is not installed (apt-get install libvirt-daemon libvirt-daemon-driver-qemu)"
        if why is None:
            try:
                pwd.getpwnam(VMM_USER)
            except KeyError:
                why = f"no user {VMM_USER} for libvirt to run QEMU as (setup.sh install creates it)"
        settings = config.get("platforms", {}).get(cls.name, {})
        if why is None and scenario.processor == "GPU":
            why = passthrough_unavailable(settings, f"platforms.{cls.name}")
        return why

    def variant(self) -> str:
        # a passed-through GPU needs the NVIDIA driver in the guest: the gpu image has it
        return str(self.kind.gpu_image if self.scenario.processor == "GPU" else self.kind.guest_variant)

    @classmethod
    def daemons(cls, platforms: dict[str, Any]) -> list[engines.Daemon]:
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
        for daemon in VirtualMachine.daemons({}):
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
        # libvirtd's version as the daemon reports it, QEMU's from the emulator the domain names
        self.engine_versions = engine_versions.libvirt_versions(self.conn, EMULATOR)
        # QEMU runs as a uid of this job's own (no other job's QEMU may open its files), in the kvm
        # group, which may only traverse the job folder
        self.qemu_user = (self.own_vmm_uid(), qemu_ids()[1])
        self.vmm_inputs: dict[str, str] = {}
        open_to_vmm(self.disk_dir, self.qemu_user, f"platforms.{self.name}.work_dir")

    def vmm_input(self, path: Path) -> Path:
        """``path`` (a shared input, never chowned) where QEMU's user may read it: as it is, else
        through a hard link in the job folder (a copy on another file system); recorded."""
        uid, gid = self.qemu_user
        if closed_to(path, uid, gid, READ) is None:
            self.vmm_inputs[path.name] = "as is"
            return path
        link = self.disk_dir / f"vmm-input-{path.name}"
        if not link.exists():
            try:
                os.link(path, link)
                self.vmm_inputs[path.name] = "hard link in the job folder (its own path is closed to QEMU's user)"
            except OSError:  # another file system
                shutil.copyfile(path, link)
                os.chmod(link, 0o644)
                self.vmm_inputs[path.name] = "copy in the job folder (its own path is closed to QEMU's user)"
        why = closed_to(link, uid, gid, READ)
        if why is not None:
            raise PlatformError(f"{path}: QEMU runs as uid {uid} and may not read it ({why}); dlvirt does not "
                                "change a shared image: make it readable by others (chmod o+r)")
        return link

    def domain_definition(self, accel: str, root_disk: Path, job_disk: Path, console: Path,
                          boot: tuple[Path, Path] | None = None) -> str:
        """The domain XML; ``boot``: the kernel and initrd as QEMU opens them (default: the image's)."""
        kernel, initrd = boot or (self.boot_files.kernel, self.boot_files.initrd)
        return domain_xml(
            name=self.domain_name, accel=accel, vcpus=self.vcpus, memory_mib=self.ram_mib, kernel=kernel,
            initrd=initrd, cmdline=kernel_cmdline(str(self.config.get("cmdline_extra") or "")),
            root_disk=root_disk, job_disk=job_disk, console=console,
            qemu_user=getattr(self, "qemu_user", None) or qemu_ids(), placement=self.placement, gpu_pci=self.gpu_pci)

    def guest_span(self) -> dict[str, Any]:
        """What a pinned guest must see inside: the sockets and NUMA cells its domain gives it,
        all their memory nodes allowed (nothing to check for VNL)."""
        if self.placement is None:
            return {}
        layout = guest_layout(self.placement)
        return {"mems": tuple(range(len(layout.cells))), "sockets": layout.sockets, "nodes": len(layout.cells)}

    def expected(self) -> Expected:
        return dataclasses.replace(super().expected(), **self.guest_span())

    def _start_vmm(self, accel: str, root_disk: Path, job_disk: Path, console: Path) -> None:
        libvirt = quiet_libvirt()
        uid, gid = self.qemu_user
        for own in (root_disk, job_disk, console):  # what QEMU writes, and nothing else, is its user's
            os.chown(own, uid, gid, follow_symlinks=False)
        if accel == "kvm" and (why := closed_to(Path("/dev/kvm"), uid, gid, READ | WRITE)) is not None:
            raise PlatformError(f"QEMU runs as uid {uid} (group {KVM_GROUP}) and cannot open /dev/kvm: {why} "
                                f"(as udev sets it up: chgrp {KVM_GROUP} /dev/kvm && chmod 0660 /dev/kvm)")
        boot = (self.vmm_input(self.boot_files.kernel), self.vmm_input(self.boot_files.initrd))
        xml = self.domain_definition(accel, root_disk, job_disk, console, boot)
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
        pid = self._vmm_pid()
        return {**self.check_vcpu_pinning(pid), **self.check_vmm_process(pid)}

    def vmm_confinement(self) -> dict[str, Any]:
        uid, gid = getattr(self, "qemu_user", None) or qemu_ids()
        return {"how": f"libvirt runs QEMU as uid {uid}, this job's own, gid {gid} (static DAC label, no "
                       "relabelling) under libvirt's seccomp sandbox (qemu.conf seccomp_sandbox) with no_new_privs; "
                       "it owns only its job's overlay, job disk and console; the shared base image, kernel and "
                       "initrd stay root's, read-only to it",
                "expected": {"uid": uid, "euid": uid, "cap_eff": "0000000000000000", "no_new_privs": 1,
                             "seccomp": 2}}

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
                      **getattr(self, "engine_versions", {}),
                      "cpu_mechanism": ("libvirt <vcpupin> + <numatune> + guest NUMA cells" if self.placement
                                        else "unpinned vCPUs"),
                      "guest_layout": guest_layout(self.placement).to_dict() if self.placement else None,
                      "gpu_pci": self.gpu_pci, "vmm_inputs": dict(getattr(self, "vmm_inputs", {}))})
        return facts
