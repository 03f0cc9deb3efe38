"""Micro-VM (MVM): Firecracker where it can run, else QEMU's ``-M microvm`` machine.

Firecracker is used when ``platforms.MVM.firecracker`` names a binary or one is on PATH *and* KVM
works (Firecracker has no emulator). Otherwise QEMU's microvm machine — QEMU's Firecracker-style
minimal machine: no PCI, no firmware, virtio-mmio devices — boots the same kernel and disks. The
result records which VMM ran and how it was confined: QEMU drops root for a uid of the job's own
once its files are open and runs under its seccomp sandbox (checked from the host in /proc at every
boot); it gets its disks and console as open file descriptors (``-add-fd``, ``/dev/fdset/N``), so
its command line, which every local user may read, names no job folder. Firecracker runs as root,
without its jailer, in this version. MVM is VNL/CPU only (no pinning, no passthrough; matrix.py
refuses anything else), as in the paper.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

from dlvirt.core.kinds import PlatformKind
from dlvirt.platforms.base import PlatformError
from dlvirt.platforms.guest import FIRECRACKER_VCPU_THREAD, VCPU_THREAD, GuestPlatform, kernel_cmdline
from dlvirt.system.engine_versions import binary_version

QEMU = "qemu-system-x86_64"
# QEMU drops to this job's own uid (-runas uid:gid) once it has opened its disks, console and /dev/kvm as root.
# QEMU's seccomp filter: no obsolete system calls, no fork/exec, no scheduler or affinity changes.
# set*uid stays allowed: QEMU 7.2 installs the filter before -runas drops root (with "deny" it dies
# of SIGSYS); after the drop every uid is the job's and no capability is left to raise them.
SANDBOX = "on,obsolete=deny,elevateprivileges=allow,spawn=deny,resourcecontrol=deny"


def qemu_value(path: Path) -> str:
    """``path`` as the value of a QEMU option string (``key=value,...``): its commas doubled, QEMU's
    escape, so a work_dir holding ``,`` cannot add options; a path with a control character is refused."""
    text = str(path)
    if any(ord(char) < 32 or ord(char) == 127 for char in text):
        raise PlatformError(f"{text!r}: a path with a control character cannot be handed to QEMU")
    return text.replace(",", ",,")


def qemu_microvm_command(*, name: str, accel: str, vcpus: int, memory_mib: int, kernel: Path, initrd: Path,
                         cmdline: str, root_disk: Path, job_disk: Path, console: Path) -> list[str]:
    cpu = "host" if accel == "kvm" else "max"
    return [
        QEMU, "-M", "microvm", "-accel", accel, "-cpu", cpu, "-smp", str(vcpus), "-m", str(memory_mib),
        "-name", f"guest={name},debug-threads=on",  # named vCPU threads; cleanup finds it by name
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-nic", "none",
        "-kernel", str(kernel), "-initrd", str(initrd), "-append", cmdline,
        "-drive", f"id=root,file={qemu_value(root_disk)},format=qcow2,if=none,cache=none",
        "-device", "virtio-blk-device,drive=root",
        "-drive", f"id=job,file={qemu_value(job_disk)},format=raw,if=none,cache=none",
        "-device", "virtio-blk-device,drive=job",
        "-chardev", f"file,id=console,path={qemu_value(console)}", "-serial", "chardev:console",
    ]


def fd_sets(sets: list[list[int]]) -> tuple[list[str], list[Path]]:
    """QEMU options handing it ``sets`` of open file descriptors (which it inherits) as fd sets 1,
    2, ..., and the paths that name them in its other options (``/dev/fdset/N``): QEMU dups the
    descriptor of the set whose access mode it asks for, so no path needs to be on its command line.
    A disk's set holds it open read-only and read-write: QEMU opens a drive read-only first, then
    read-write once its device attaches."""
    options = [arg for n, fds in enumerate(sets, 1) for fd in fds for arg in ("-add-fd", f"fd={fd},set={n}")]
    return options, [Path(f"/dev/fdset/{n}") for n in range(1, len(sets) + 1)]


def open_for_vmm(path: Path, modes: tuple[int, ...], fds: list[int]) -> list[int]:
    """``path`` opened (by root, no symbolic link followed) once in each of ``modes``; the
    descriptors are appended to ``fds`` too (which the caller closes), and returned."""
    opened = [os.open(path, mode | os.O_NOFOLLOW | os.O_CLOEXEC) for mode in modes]
    fds += opened
    return opened


def host_tsc_khz() -> int | None:
    """The host's TSC rate, which a TCG guest's TSC runs at (QEMU reads the host's TSC)."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("cpu MHz"):
            return int(float(line.split(":", 1)[1]) * 1000)
    return None


def firecracker_config(*, vcpus: int, memory_mib: int, kernel: Path, initrd: Path, cmdline: str,
                       root_disk: Path, job_disk: Path) -> dict[str, Any]:
    """Firecracker's --config-file document (boot source, two virtio-mmio drives, no network)."""
    return {
        "boot-source": {"kernel_image_path": str(kernel), "initrd_path": str(initrd), "boot_args": cmdline},
        "drives": [
            {"drive_id": "root", "path_on_host": str(root_disk), "is_root_device": False, "is_read_only": False},
            {"drive_id": "job", "path_on_host": str(job_disk), "is_root_device": False, "is_read_only": False},
        ],
        "machine-config": {"vcpu_count": vcpus, "mem_size_mib": memory_mib},
    }


class MicroVM(GuestPlatform):
    pci_bus = False
    kind = PlatformKind(name="MVM", title="micro-VM: Firecracker or QEMU's microvm machine", order=4, colour=4,
                        virtualised=True, image="full",
                        # paper §III: MVM is evaluated VNL/CPU only
                        why_no_pin="Firecracker (and QEMU's microvm machine) offer no vCPU pinning",
                        why_no_gpu="Firecracker (and QEMU's microvm machine) have no PCI passthrough")
    path_settings = {**GuestPlatform.path_settings, "firecracker": "file"}

    def provision(self) -> None:
        super().provision()
        configured = self.config.get("firecracker")
        if configured and not Path(configured).is_file():
            raise PlatformError(f"platforms.MVM.firecracker: {configured} does not exist")
        binary = configured or shutil.which("firecracker")
        # Firecracker needs KVM and an uncompressed ELF kernel (platforms.MVM.kernel; Debian ships
        # a bzImage): otherwise QEMU's microvm machine is the micro-VM, and describe() says why.
        with open(self.boot_files.kernel, "rb") as kernel:
            elf = kernel.read(4) == b"\x7fELF"
        self.firecracker = str(binary) if binary and self.accel == "kvm" and elf else None
        self.vmm = "firecracker" if self.firecracker else "qemu-microvm"
        self.vmm_note = None if self.firecracker or not binary else (
            "firecracker found but not used: " + ("no KVM" if self.accel != "kvm" else
                                                   "the kernel is not an uncompressed ELF vmlinux"))
        self.proc: subprocess.Popen[bytes] | None = None

    def _root_disk(self, boot: Any, dest: Path) -> Path:
        if self.vmm == "qemu-microvm":
            return super()._root_disk(boot, dest)
        disk = dest / "root.img"  # Firecracker takes raw images only: a private sparse copy
        subprocess.run(["cp", "--sparse=always", str(boot.rootfs), str(disk)], check=True)
        return disk

    def _start_vmm(self, accel: str, root_disk: Path, job_disk: Path, console: Path) -> None:
        memory = self.ram_mib
        cmdline = kernel_cmdline(str(self.config.get("cmdline_extra") or ""))
        tsc_khz = host_tsc_khz()
        if accel == "tcg" and tsc_khz:
            # microvm has no HPET/PM timer to calibrate the TSC against, and calibrating against
            # the PIT fails on a busy host under TCG: the kernel then hangs in early boot.
            cmdline += f" tsc_early_khz={tsc_khz}"
        fds: list[int] = []  # handed to the VMM, closed here once it has them
        try:
            if self.firecracker and accel == "kvm":
                self.vmm = "firecracker"
                config = self.disk_dir / "firecracker.json"
                config.write_text(json.dumps(firecracker_config(
                    vcpus=self.vcpus, memory_mib=memory, kernel=self.boot_files.kernel, initrd=self.boot_files.initrd,
                    cmdline=f"{cmdline} reboot=k pci=off", root_disk=root_disk, job_disk=job_disk)))
                cmd = [self.firecracker, "--no-api", "--config-file", str(config), "--id", self.domain_name]
                out = open(console, "ab")  # noqa: SIM115 - closed by the with below; Firecracker's stdout is the console
            else:
                self.vmm = "qemu-microvm"
                # opened here, as root, without following links: QEMU gets descriptors, no paths
                disk = (os.O_RDONLY, os.O_RDWR)
                options, (root_set, job_set, console_set) = fd_sets([
                    open_for_vmm(root_disk, disk, fds), open_for_vmm(job_disk, disk, fds),
                    open_for_vmm(console, (os.O_WRONLY | os.O_APPEND,), fds)])
                cmd = [*self.qemu_command(accel=accel, memory_mib=memory, cmdline=cmdline, root_disk=root_set,
                                          job_disk=job_set, console=console_set),
                       *options, "-sandbox", SANDBOX, "-runas", self.runas()]
                out = open(self.disk_dir / "vmm.log", "ab")  # noqa: SIM115 - closed by the with below
            with out:
                self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,  # noqa: S603
                                             stderr=subprocess.STDOUT, pass_fds=fds)
        finally:
            for fd in fds:
                os.close(fd)

    def runas(self) -> str:
        """QEMU's -runas: this job's own uid, and as its only group a gid of the same number (no group
        has it): /dev/kvm and every file are open before the drop."""
        uid = self.own_vmm_uid()
        return f"{uid}:{uid}"

    def qemu_command(self, *, accel: str, memory_mib: int, cmdline: str, root_disk: Path, job_disk: Path,
                     console: Path) -> list[str]:
        """The QEMU command line of this guest (a subclass may boot another machine type)."""
        return qemu_microvm_command(name=self.domain_name, accel=accel, vcpus=self.vcpus, memory_mib=memory_mib,
                                    kernel=self.boot_files.kernel, initrd=self.boot_files.initrd,
                                    cmdline=cmdline, root_disk=root_disk, job_disk=job_disk, console=console)

    def _vmm_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _vmm_pid(self) -> int | None:
        return self.proc.pid if self._vmm_running() and self.proc is not None else None

    def _stop_vmm(self) -> None:
        proc = getattr(self, "proc", None)
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.proc = None

    def _vmm_output(self) -> str:
        try:
            return "\nVMM output:\n" + (self.disk_dir / "vmm.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def _on_guest_started(self) -> dict[str, Any]:
        pattern = FIRECRACKER_VCPU_THREAD if self.vmm == "firecracker" else VCPU_THREAD
        pid = self._vmm_pid()
        return {**self.check_vcpu_pinning(pid, pattern), **self.check_vmm_process(pid)}

    def vmm_confinement(self) -> dict[str, Any]:
        if self.vmm == "firecracker":  # its jailer is not used yet
            return {"how": "none: Firecracker runs as root (no jailer)", "expected": {"uid": 0}}
        uid = self.own_vmm_uid()
        return {"how": f"QEMU -runas {self.runas()} (uid and gid this job's own) after opening its files, "
                       f"-sandbox {SANDBOX}",
                "expected": {"uid": uid, "euid": uid, "cap_eff": "0000000000000000", "no_new_privs": 1,
                             "seccomp": 2}}

    def describe(self) -> dict[str, Any]:
        facts = super().describe()
        # the version of the binary that ran the guest
        binary = self.firecracker if self.vmm == "firecracker" else shutil.which(QEMU)
        facts.update({"engine": self.vmm, "vmm": self.vmm, "cpu_mechanism": "unpinned vCPUs",
                      "firecracker": self.firecracker, "vmm_note": self.vmm_note,
                      f"{'firecracker' if self.vmm == 'firecracker' else 'qemu'}_version": binary_version(binary),
                      "vmm_binary": binary})
        return facts
