"""What VM, MVM and VMCN share: the guest image, the accelerator, the job disk and one guest's life.

A job travels on a second virtio disk (ext4, label ``dlvirt-job``) made on the host with
``mkfs.ext4 -d``: ``run.sh``, the guest-side timeout, the job document, the dataset and the dlvirt
package of this very run (so the guest runs exactly the host's code). The guest's init
(``guestimage.GUEST_INIT``) runs ``run.sh`` under ``timeout``, writes ``exitcode``, syncs and powers
off by sysrq; the host reads ``/out`` back with ``debugfs`` (regular files only, size-capped) — no
network, no mounts. The guest has no network device at all. ``-no-reboot`` and ``panic=-1`` make a
crashing guest end the VMM instead of looping, and the host kills a guest that outlives its own timeout.

Boot-to-harness time is measured on the host: from starting the VMM to the moment the guest's
start marker appears on its serial console (the console is a file the host polls).
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import math
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import dlvirt
from dlvirt.core.records import HarnessJob, HarnessOutput
from dlvirt.core.scenario import Scenario
from dlvirt.core.signals import held
from dlvirt.core.untrusted import MAX_BYTES, MAX_ENTRIES, Budget, OutputRefused, check_name, printable
from dlvirt.platforms import guestimage
from dlvirt.platforms.base import Expected, Platform, PlatformError, VerificationError, job_input_paths
from dlvirt.system import private, vmm_ids, whose
from dlvirt.system.hostinfo import Capabilities
from dlvirt.system.observe import privileges

GUEST_JOB_DIR = "/job"
# Each guest's disks (copy-on-write root, job disk) and console live in a folder
# <work_dir>/dlvirt-<run id>-<random> (mkdtemp, 0700): in one machine-wide private place (root's, checked
# on every use: dlvirt.system.private), so the next workflow's cleanup finds those of a killed runner.
# Not under /run: there it would be RAM on most hosts, and a job disk holds the dataset. The place is
# 0711 (nobody else may list or write it): libvirt's QEMU, which runs as the job's own uid, must reach
# its job's folder below it.
DEFAULT_WORK_DIR = Path("/var/lib/dlvirt/guests")
WORK_DIR_MODE = 0o711
# The user libvirtd's QEMU driver insists on (setup.sh install creates it); its kvm group is the group
# of libvirt's QEMU. Each job's VMM runs as a uid of its own (vmm_ids), not as this user.
VMM_USER = "libvirt-qemu"
WORK_DIR_WHAT = "the guests' work directory (platforms.<VM|MVM|VMCN>.work_dir)"
JOB_HEADROOM_MIB = 256          # outputs: harness.json and LoadGen logs
SCRIPT_UPTIME = "script_uptime_s"  # run.sh writes the guest's uptime here as it starts
POLL_S = 0.05
# The guest's console is bounded: the host keeps its last CONSOLE_TAIL_CHARS in memory (for error
# messages) and stops a guest that writes more than CONSOLE_CAP_BYTES to it (the console file, and
# the job log it is copied into, hold at most that plus one poll's worth).
CONSOLE_TAIL_CHARS = 64 << 10
CONSOLE_CAP_BYTES = 16 << 20
KILL_GRACE_S = 30.0             # host timeout = boot-to-job time + job timeout + this
VCPU_THREAD = re.compile(r"^CPU (\d+)/(KVM|TCG)$")       # QEMU's names with debug-threads=on
FIRECRACKER_VCPU_THREAD = re.compile(r"^fc_vcpu (\d+)$")
# What systemd-detect-virt --vm says inside the guest, by accelerator.
VM_TYPE = {"kvm": "kvm", "tcg": "qemu"}
# A guest's RAM is study.memory plus what runs beside the harness there but is not charged to it on
# bare metal: the guest kernel (its page structs alone take 1/64 of the RAM, its code and swiotlb
# buffer some tens of MiB), init and, in VMCN, dockerd and containerd. 8 GiB gets 8704 MiB.
GUEST_OVERHEAD_MIB = 256
GUEST_OVERHEAD_DIVISOR = 32     # + 1/32 of study.memory


def guest_ram_mib(memory_mib: int) -> int:
    """The RAM of a guest whose harness is to have ``memory_mib`` (study.memory)."""
    return memory_mib + GUEST_OVERHEAD_MIB + memory_mib // GUEST_OVERHEAD_DIVISOR


def work_root(settings: dict[str, Any]) -> Path:
    """The private directory guests' work folders go in (platforms.<guest platform>.work_dir)."""
    return Path(settings.get("work_dir") or DEFAULT_WORK_DIR)


def kvm_problem(caps: Capabilities) -> str | None:
    """Why KVM cannot run an ordinary guest kernel here (None when it can be tried)."""
    if not caps.kvm_device:
        return "no /dev/kvm"
    if not caps.hw_virt:
        return ("/dev/kvm exists but the CPU has no vmx/svm (a nested paging hypervisor such as kvm_pvm, "
                "which boots only specially built guest kernels)")
    return None


def emulation_reason(caps: Capabilities, config: dict[str, Any]) -> str | None:
    """Why a guest scenario is left out for want of an accelerator (None: KVM, or TCG allowed)."""
    problem = kvm_problem(caps)
    if problem is None or config.get("allow_emulation"):
        return None
    return (f"KVM not usable ({problem}); under QEMU's TCG emulator it would run 10x to several 100x "
            f"slower — allow_emulation: true includes it (its results say accel=tcg)")


def planned_accel(caps: Capabilities) -> str:
    return "tcg" if kvm_problem(caps) else "kvm"


def kernel_cmdline(extra: str = "") -> str:
    line = (f"console=ttyS0 root=LABEL={guestimage.ROOT_LABEL} rw init={guestimage.INIT_PATH} "
            f"panic=-1 quiet")
    return f"{line} {extra}".strip()


@dataclass(frozen=True)
class BootFiles:
    """Kernel, initrd and root disk a guest boots (the image's, or the user's kernel/initrd)."""

    kernel: Path
    initrd: Path
    rootfs: Path
    image: dict[str, Any]

    @classmethod
    def resolve(cls, settings: dict[str, Any], variant: str, section: str) -> BootFiles:
        image_dir = Path(settings.get("image_dir") or f"{guestimage.DEFAULT_DIR}/{variant}")
        image = guestimage.read_description(image_dir)
        kernel = Path(settings.get("kernel") or image_dir / "vmlinuz")
        initrd = Path(settings.get("initrd") or image_dir / "initrd.img")
        for key, path in (("kernel", kernel), ("initrd", initrd)):
            if not path.is_file():
                raise PlatformError(f"platforms.{section}.{key}: {path} does not exist")
        return cls(kernel.resolve(), initrd.resolve(), (image_dir / "rootfs.img").resolve(), image)


def vcpu_threads(pid: int, pattern: re.Pattern[str] = VCPU_THREAD) -> dict[int, tuple[int, ...]]:
    """vCPU index -> host CPU affinity of its thread in VMM process ``pid``."""
    threads: dict[int, tuple[int, ...]] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            match = pattern.match((task / "comm").read_text().strip())
            if match:
                threads[int(match.group(1))] = tuple(sorted(os.sched_getaffinity(int(task.name))))
    return threads


def _run_quiet(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def make_job_disk(disk: Path, staging: Path, headroom_mib: int = JOB_HEADROOM_MIB) -> None:
    used = int(_run_quiet(["du", "-sm", str(staging)]).stdout.split()[0])
    size = max(64, int(used * 1.2) + headroom_mib)
    proc = _run_quiet(["mkfs.ext4", "-q", "-F", "-L", guestimage.JOB_LABEL, "-E", "root_owner=0:0",
                       "-d", str(staging), str(disk), f"{size}M"])
    if proc.returncode != 0:
        raise PlatformError(f"mkfs.ext4 of the job disk failed: {proc.stderr.strip()}")


# debugfs ls -p: /inode/mode/uid/gid/name/size/ (a directory's size is empty)
LISTING_ENTRY = re.compile(r"/\d+/([0-7]+)/\d+/\d+/([^/]*)/(\d*)/")
ECHO = "debugfs: "


def _debugfs_script(disk: Path, commands: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """debugfs (read-only) running ``commands``, one per line, in one process."""
    return subprocess.run(["debugfs", "-f", "-", str(disk)], input="\n".join(commands) + "\n", cwd=cwd,
                          capture_output=True, text=True, errors="replace", check=False)


def _disk_listings(disk: Path, directories: list[str]) -> dict[str, list[tuple[str, int, int]]]:
    """(name, mode, size) of each entry of each of ``directories`` on the ext4 image, from one
    debugfs run. A line that is neither an echoed command nor a well-formed entry (a name holding a
    line break) and an echo that is not the next command sent (a name forging one) are refused."""
    commands = [f"ls -p {directory}" for directory in directories]
    listings: dict[str, list[tuple[str, int, int]]] = {directory: [] for directory in directories}
    current = -1
    for line in _debugfs_script(disk, commands).stdout.splitlines():
        if line.startswith(ECHO):
            current += 1
            if current >= len(commands) or line != ECHO + commands[current]:
                raise OutputRefused("the job disk's listing holds an entry that reads as a debugfs command")
            continue
        if not line:
            continue
        entry = LISTING_ENTRY.fullmatch(line)
        if entry is None or current < 0:
            raise OutputRefused(f"the job disk's {directories[max(current, 0)]} holds an entry dlvirt cannot read "
                                f"back ({line[:80]!r})")
        mode, name, size = entry.groups()
        if name not in (".", ".."):
            listings[directories[current]].append((name, int(mode, 8), int(size or 0)))
    return listings


def read_job_disk(disk: Path, dest: Path, max_bytes: int = MAX_BYTES, max_files: int = MAX_ENTRIES) -> int | None:
    """Copy the guest's /out to ``dest``/out; return its exit status (None: the job never ended).

    The image was written by the guest, so nothing of it is trusted: only directories and regular
    files come out (a guest's symlinks, devices and FIFOs are left behind, nothing keeps the guest's
    owner or mode), every name must be a plain file name, and /out may hold at most ``max_files``
    entries (files and directories) of ``max_bytes`` in all, ``untrusted.MAX_DEPTH`` directories deep
    (PlatformError otherwise). debugfs opens the image read-only and runs once per level of /out and
    once for the copy, never on more entries than the caps; no host path enters its scripts (the
    copy runs in ``dest``)."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        return _read_job_disk(disk, dest, Budget("the guest's /out", max_bytes=max_bytes, max_entries=max_files))
    except OutputRefused as refused:
        raise PlatformError(str(refused)) from None


def _read_job_disk(disk: Path, dest: Path, budget: Budget) -> int | None:
    top = {name: (mode, size) for name, mode, size in _disk_listings(disk, ["/"])["/"]}
    status = None
    if "exitcode" in top and stat.S_ISREG(top["exitcode"][0]) and top["exitcode"][1] <= 16:
        text = _run_quiet(["debugfs", "-R", "cat /exitcode", str(disk)]).stdout.strip()
        status = int(text) if text.isdigit() else None
    if "out" not in top or not stat.S_ISDIR(top["out"][0]):
        return status
    (dest / "out").mkdir()
    files: list[str] = []
    level, depth = ["out"], 0
    while level:  # breadth first: one debugfs run per level
        below = []
        for directory, entries in _disk_listings(disk, [f"/{d}" for d in level]).items():
            where = f"the guest's {directory}"
            for name, mode, size in entries:
                path = f"{directory[1:]}/{check_name(name, where)}"
                if stat.S_ISDIR(mode):
                    budget.take(depth)
                    (dest / path).mkdir()
                    below.append(path)
                elif stat.S_ISREG(mode):
                    budget.take(depth, size)
                    files.append(path)
        level, depth = below, depth + 1
    if files:  # plain names, relative targets: nothing in the script needs quoting
        proc = _debugfs_script(disk, [f'dump "/{path}" "{path}"' for path in files], cwd=dest)
        missing = [path for path in files if not (dest / path).is_file()]
        if proc.returncode != 0 or missing:
            raise PlatformError(f"debugfs could not copy the job disk's /out ({len(missing)} files not copied): "
                                f"{proc.stderr.strip()[-2000:]}")
    return status


def move_out(src: Path, target: Path) -> Path:
    """Move the guest's outputs read back to ``src`` (in the work directory, under /var by default)
    to ``target`` (the job's folder in the checkout), replacing what is there: a rename on one file
    system, a copy and delete across two (the checkout on another disk or a tmpfs)."""
    if target.exists():
        shutil.rmtree(target)
    shutil.move(str(src), str(target))
    return target


def _copy_tree(src: Path, dest: Path) -> None:
    """Hard links where possible (same file system): the dataset can be large."""
    def link_or_copy(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)
    shutil.copytree(src, dest, copy_function=link_or_copy)


def script_uptime(path: Path) -> float | None:
    """The guest's uptime that run.sh wrote as it started (the guest wrote it: None unless it is a
    plain number); the file is removed, so that it does not travel with the job's outputs."""
    try:
        text = path.read_text()[:64] if path.is_file() else ""
    finally:
        path.unlink(missing_ok=True)
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def guest_inputs(job: HarnessJob) -> tuple[HarnessJob, dict[str, Path]]:
    """The job as the guest sees it, and the host inputs to put on the job disk: every path the
    harness reads (``job_input_paths``) moves to ``/job/inputs/<i>/<name>``."""
    files: dict[str, Path] = {}
    moved: dict[str, str] = {}
    for i, path in enumerate(job_input_paths(job)):
        files[f"inputs/{i}/{path.name}"] = path
        moved[str(path)] = f"{GUEST_JOB_DIR}/inputs/{i}/{path.name}"

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: (moved.get(str(Path(v).resolve()), v) if k == "path" and isinstance(v, str) and v
                        else rewrite(v)) for k, v in node.items()}
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    weights = None if job.weights is None else \
        {**job.weights, "path": moved[str(Path(job.weights["path"]).resolve())]}
    guest_job = dataclasses.replace(job, app_settings=rewrite(job.app_settings),
                                    dataset_dir=moved[str(Path(job.dataset_dir).resolve())], weights=weights)
    return guest_job, files


@dataclass
class GuestRun:
    """What one guest boot gave: exit status, boot-to-start time, accelerator used, the console's tail."""

    exit_status: int | None
    boot_s: float | None
    accel: str
    total_s: float
    console: str
    host_observed: dict[str, Any]


class GuestPlatform(Platform):
    """A platform whose harness runs in a guest booted from a guestimage variant.

    Subclasses start and stop the VMM (libvirt, QEMU microvm, Firecracker); this class makes the
    disks, watches the console, enforces the timeouts and reads the results back."""

    path_settings = {"image_dir": "dir", "kernel": "file", "initrd": "file"}
    guest_python: ClassVar[str] = f"{guestimage.GUEST_VENV}/bin/python"
    # PC-type machines (libvirt's q35/pc) have a PCI bus; QEMU's microvm and Firecracker do not:
    # how a VM and an MVM are told apart from inside
    pci_bus: ClassVar[bool] = True

    def __init__(self, scenario: Scenario, config: dict[str, Any], workdir: Path, run_id: str) -> None:
        super().__init__(scenario, config, workdir, run_id)
        self.domain_name = f"dlvirt-{run_id}"
        self.work_root = work_root(config)
        self._disk_dir: Path | None = None
        self.vmm_uid: vmm_ids.Lease | None = None  # the VMM's own uid (kept, released, after teardown)
        self.last_run: GuestRun | None = None
        self.staged_unix = 0.0                    # when the job disk was ready (host wall clock)
        self.script_uptime_s: float | None = None  # the guest's uptime as run.sh started
        self.accel_note: str | None = None

    @property
    def disk_dir(self) -> Path:
        """This job's private folder under the work root, checked (with the root) on every use."""
        if self._disk_dir is None:
            raise PlatformError(f"{self.name}: the guest's work folder is made by provision()")
        return private.check(self._disk_dir, f"the work folder of guest {self.domain_name}")

    def variant(self) -> str:
        """The guest image variant this scenario boots."""
        return str(self.kind.guest_variant)

    # -- planning -----------------------------------------------------------------------------
    @classmethod
    def host_memory_mib(cls, memory_mib: int) -> int:
        return guest_ram_mib(memory_mib)

    @property
    def ram_mib(self) -> int:
        """The guest's RAM: study.memory (``memory_mib``, which a guest cannot do without) + the overhead."""
        if self.memory_mib is None:
            raise PlatformError(f"{self.name}: its settings lack memory_mib (study.memory), the guest's memory")
        return guest_ram_mib(self.memory_mib)

    @classmethod
    def unavailable_reason(cls, scenario: Scenario, caps: Capabilities, config: dict[str, Any]) -> str | None:
        why = super().unavailable_reason(scenario, caps, config)
        if why is None and not caps.qemu:
            why = "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)"
        return why or emulation_reason(caps, config)

    # -- subclass hooks -------------------------------------------------------------------------
    @abstractmethod
    def _start_vmm(self, accel: str, root_disk: Path, job_disk: Path, console: Path) -> None:
        """Start the guest; it runs until it powers off or is stopped."""

    @abstractmethod
    def _vmm_running(self) -> bool: ...

    @abstractmethod
    def _vmm_pid(self) -> int | None: ...

    @abstractmethod
    def _stop_vmm(self) -> None:
        """Stop the guest now (idempotent)."""

    def vmm_input(self, path: Path) -> Path:
        """The path the VMM opens the shared, read-only input ``path`` (the base image, kernel,
        initrd) by; a VMM that does not start as root gets one it can reach (VM)."""
        return path

    def _root_disk(self, boot: BootFiles, dest: Path) -> Path:
        """A private copy-on-write root disk, so concurrent guests never share a writable disk."""
        disk = private.create_file(dest / "root.qcow2")
        proc = _run_quiet(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b",
                           str(self.vmm_input(boot.rootfs)), str(disk)])
        if proc.returncode != 0:
            raise PlatformError(f"qemu-img create of the root disk failed: {proc.stderr.strip()}")
        return disk

    def _vmm_output(self) -> str:
        """What the VMM itself said (its errors), for failure messages."""
        return ""

    def _on_guest_started(self) -> dict[str, Any]:
        """Host-side checks while the guest runs; the returned facts go into describe()."""
        return {}

    def vmm_confinement(self) -> dict[str, Any]:
        """How the VMM process is confined (recorded in every result): ``how`` in words and
        ``expected``, what its /proc status must show (observe.privileges keys; None: unconfined)."""
        return {"how": "none: the VMM runs as root", "expected": None}

    def check_vmm_process(self, pid: int | None) -> dict[str, Any]:
        """The VMM's uid, capabilities, no_new_privs and seccomp as its kernel shows them, checked
        against ``vmm_confinement``; VerificationError when they are not as asked."""
        if pid is None:
            raise VerificationError("no VMM process to check the confinement of")
        seen = privileges(Path(f"/proc/{pid}/status"))
        want = self.vmm_confinement()["expected"] or {}
        problems = [f"{key} {seen.get(key)!r} != {value!r}" for key, value in want.items() if seen.get(key) != value]
        if problems:
            raise VerificationError(f"the VMM (pid {pid}) is not confined as asked: {', '.join(problems)}")
        return {"vmm_process": seen}

    def guest_script(self, job: HarnessJob) -> str:
        """The shell script that runs the harness inside the guest."""
        return (f'PY={self.guest_python}; [ -x "$PY" ] || PY=python3\n'
                f"PYTHONPATH={GUEST_JOB_DIR}/src exec \"$PY\" -m dlvirt.run.launch "
                f"{GUEST_JOB_DIR}/job.json {GUEST_JOB_DIR}/out\n")

    # -- Platform -----------------------------------------------------------------------------
    def provision(self) -> None:
        from dlvirt.system.hostinfo import capabilities

        self.workdir.mkdir(parents=True, exist_ok=True)
        self._disk_dir = private.job_dir(self.work_root, f"{self.domain_name}-", WORK_DIR_WHAT, WORK_DIR_MODE)
        self.caps = capabilities()
        self.boot_files = BootFiles.resolve(self.config, self.variant(), self.name)
        self.accel = planned_accel(self.caps)
        self.vcpus = self.scenario.cores
        self.placement = self.place(tuple(sorted(os.sched_getaffinity(0)))) if self.scenario.pinned else None
        # vCPU i runs on host_cpus[i]: node by node, core by core, so guest sockets match host nodes
        self.host_cpus = self.placement.vcpu_order if self.placement else None

    def run(self, job: HarnessJob, timeout_s: float) -> HarnessOutput:
        guest_job, files = guest_inputs(job)
        out = self.execute(self.guest_script(guest_job), timeout_s, files=files, job=guest_job)
        return HarnessOutput.read(out / "harness.json")

    def execute(self, script: str, timeout_s: float, *, files: dict[str, Path] | None = None,
                job: HarnessJob | None = None) -> Path:
        """Boot a guest that runs ``script`` (sh) with ``files`` under /job; return the host copy
        of the guest's /job/out. Raises PlatformError on timeout or a non-zero exit status."""
        staging = self.disk_dir / "jobdisk"
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir()
        # the guest kernel's uptime as the script starts: with the harness's at its ready point, the
        # guest's share of the start-up (init, a container in VMCN, the interpreter and imports)
        started = f"cut -d' ' -f1 /proc/uptime > {GUEST_JOB_DIR}/out/{SCRIPT_UPTIME}\n"
        private.create_file(staging / "run.sh", ("set -e\n" + started + script).encode())
        private.create_file(staging / "timeout_s", f"{int(timeout_s)}\n".encode())
        package = Path(dlvirt.__file__).parent
        shutil.copytree(package, staging / "src" / "dlvirt", ignore=shutil.ignore_patterns("__pycache__"))
        if job is not None:
            job.write(staging / "job.json")
        for name, src in (files or {}).items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            _copy_tree(src, staging / name) if src.is_dir() else shutil.copy2(src, staging / name)
        (staging / "out").mkdir()
        job_disk = private.create_file(self.disk_dir / "job.img")
        make_job_disk(job_disk, staging)
        shutil.rmtree(staging)
        self.staged_unix = time.time()
        run = self._boot(job_disk, timeout_s)
        out_parent = self.disk_dir / "guest"
        status = read_job_disk(job_disk, out_parent)
        job_disk.unlink(missing_ok=True)
        run.exit_status = status
        self.last_run = run
        tail = "\n".join(run.console.splitlines()[-40:])
        if status is None:
            raise PlatformError(f"the guest ended without finishing its job (no exit status on the job disk); "
                                f"console tail:\n{tail}")
        if status == 124:
            raise PlatformError(f"the job exceeded the guest-side timeout of {timeout_s:.0f} s and was killed")
        if status != 0:
            raise PlatformError(f"the job in the guest exited with status {status}; console tail:\n{tail}")
        target = move_out(out_parent / "out", self.workdir / "out")
        shutil.rmtree(out_parent, ignore_errors=True)
        self.script_uptime_s = script_uptime(target / SCRIPT_UPTIME)
        return target

    def _boot(self, job_disk: Path, timeout_s: float) -> GuestRun:
        boot_timeout = float(self.config.get("boot_timeout_s") or 600)
        attempts = [self.accel]
        if self.accel == "kvm" and self.config.get("allow_emulation"):
            attempts.append("tcg")  # the boot probe: KVM that cannot boot our kernel in time
        for accel in attempts:
            root_disk = self._root_disk(self.boot_files, self.disk_dir)
            console = self.disk_dir / "console.log"
            console.unlink(missing_ok=True)
            private.create_file(console)
            try:
                run = self._watch(accel, root_disk, job_disk, console, boot_timeout, timeout_s)
            finally:
                self._stop_vmm()
                root_disk.unlink(missing_ok=True)
            if run is not None:
                self.accel = accel
                return run
            self.accel_note = f"KVM did not boot the guest within {boot_timeout:.0f} s; fell back to TCG"
        raise PlatformError(f"the guest did not reach its job within boot_timeout_s={boot_timeout:.0f} s "
                            f"(accelerator {attempts[-1]}); console tail:\n{_tail(console)}")

    def _watch(self, accel: str, root_disk: Path, job_disk: Path, console: Path, boot_timeout: float,
               timeout_s: float) -> GuestRun | None:
        """Run one boot to its end. None when the guest did not reach its job within the boot
        timeout (the VMM is stopped by the caller)."""
        host_observed: dict[str, Any] = {}
        started = time.monotonic()
        with held():  # a VMM started is a VMM whose handle _stop_vmm has
            self._start_vmm(accel, root_disk, job_disk, console)
        print(f"[dlvirt] guest {self.domain_name} started ({accel})", flush=True)
        boot_s: float | None = None
        seen = ""  # the console's tail
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        with open(console, "rb") as stream:
            while True:
                chunk = _console_text(decoder, stream.read(CONSOLE_CAP_BYTES + 1 - stream.tell()))
                if chunk:  # the guest's console goes into the job's log as it comes
                    sys.stdout.write(chunk)
                    sys.stdout.flush()
                    seen = (seen + chunk)[-CONSOLE_TAIL_CHARS:]
                if stream.tell() > CONSOLE_CAP_BYTES:
                    self._stop_vmm()
                    raise PlatformError(f"the guest wrote more than {CONSOLE_CAP_BYTES >> 10} KiB to its console "
                                        f"and was stopped; console tail:\n{seen[-3000:]}")
                now = time.monotonic()
                if boot_s is None and guestimage.START_MARKER in seen:
                    boot_s = now - started
                    host_observed = self._on_guest_started()
                if not self._vmm_running():
                    chunk = _console_text(decoder, stream.read(CONSOLE_CAP_BYTES + 1 - stream.tell()))
                    sys.stdout.write(chunk)
                    seen = (seen + chunk)[-CONSOLE_TAIL_CHARS:]
                    break
                if boot_s is None and now - started > boot_timeout:
                    return None
                if boot_s is not None and now - started > boot_s + timeout_s + KILL_GRACE_S:
                    self._stop_vmm()
                    raise PlatformError(f"the guest outlived the host-side timeout of {timeout_s:.0f} s "
                                        f"(+{KILL_GRACE_S:.0f} s grace) and was killed")
                time.sleep(POLL_S)
        if boot_s is None:
            raise PlatformError(f"the guest stopped before reaching its job; console tail:\n{seen[-3000:]}"
                                f"{self._vmm_output()}")
        return GuestRun(None, round(boot_s, 3), accel, round(time.monotonic() - started, 3), seen, host_observed)

    def expected(self) -> Expected:
        cpus = tuple(range(self.vcpus))
        floor, ceiling = self.memory_bounds()
        return Expected(affinity=cpus, nproc=self.vcpus, cpu_count=self.vcpus, quota_cores=None,
                        container="none", vm=VM_TYPE[self.accel], in_vm=True, pci_bus=self.pci_bus,
                        kernel=self.guest_kernel(), memory_at_least_bytes=floor, mem_total_at_most_bytes=ceiling)

    def memory_bounds(self) -> tuple[int, int]:
        """What the guest's harness must see of its memory, in bytes: at least study.memory (its
        kernel's MemTotal, no cgroup limit below it), and a kernel with no more RAM than the guest got."""
        ram = self.ram_mib  # raises without study.memory
        return int(self.memory_mib or 0) << 20, ram << 20

    def guest_kernel(self) -> str | None:
        """The kernel release the guest boots: its image's, unknown (None) for a user's kernel."""
        if self.config.get("kernel"):
            return None
        release = self.boot_files.image.get("kernel")
        return str(release) if release else None

    def teardown(self) -> None:
        self._stop_vmm()
        if self._disk_dir is not None:
            shutil.rmtree(self.disk_dir, ignore_errors=True)
            self._disk_dir = None
        if self.vmm_uid is not None:  # its VMM stopped and its files gone: the uid may serve another job
            self.vmm_uid.release()

    def own_vmm_uid(self) -> int:
        """A uid of this job's own for its VMM (``dlvirt.system.vmm_ids``), leased on first use and
        released at teardown; no other job's VMM runs as it meanwhile."""
        if self.vmm_uid is None:
            try:
                self.vmm_uid = vmm_ids.lease(self.domain_name)
            except vmm_ids.LeaseError as err:
                raise PlatformError(str(err)) from None
        return self.vmm_uid.uid

    def startup_s(self, harness: HarnessOutput, run_started_unix: float) -> float | None:
        """The job disk made (host clock), the boot up to the start marker (host-measured), then
        from run.sh's start to the harness's ready point (the guest kernel's uptime)."""
        ready = (harness.timeline or {}).get("ready_uptime_s")
        run, script = self.last_run, self.script_uptime_s
        if ready is None or run is None or run.boot_s is None or script is None:
            return None
        return self.staged_unix - run_started_unix + run.boot_s + ready - script

    def launch_tasks(self) -> whose.Launch:
        """The VMM's vCPU threads (none before it starts); its other threads and the runner's helpers
        are the platform's."""
        return whose.Launch(runner_children=False, vmm=self._vmm_pid())

    def describe(self) -> dict[str, Any]:
        run = self.last_run
        facts: dict[str, Any] = {
            "platform": self.name,
            "accel": run.accel if run else self.accel,
            "boot_s": run.boot_s if run else None,
            "guest_total_s": run.total_s if run else None,
            "vcpus": self.vcpus,
            "memory_mib": self.memory_mib,
            "guest_ram_mib": self.ram_mib,
            "memory_mechanism": "guest RAM = study.memory + overhead",
            "pinned_host_cpus": list(self.host_cpus) if self.host_cpus else None,
            "placement": self.placement.to_dict() if self.placement else None,
            "kernel": str(self.boot_files.kernel),
            "image": self.boot_files.image,
            "host_observed": run.host_observed if run else {},
            "vmm_confinement": self.vmm_confinement()["how"],
        }
        if self.accel_note:
            facts["accel_note"] = self.accel_note
        return facts

    # -- shared host-side verification ------------------------------------------------------------
    def check_vcpu_pinning(self, pid: int | None, pattern: re.Pattern[str] = VCPU_THREAD) -> dict[str, Any]:
        """PIN: every vCPU thread of the VMM must be allowed on exactly its host core."""
        if pid is None:
            raise VerificationError("no VMM process to check the vCPU threads of")
        threads = vcpu_threads(pid, pattern)
        observed = {str(v): list(cpus) for v, cpus in sorted(threads.items())}
        if self.host_cpus is None:
            return {"vcpu_thread_affinity": observed}
        problems = []
        if sorted(threads) != list(range(self.vcpus)):
            problems.append(f"found vCPU threads {sorted(threads)}, expected {list(range(self.vcpus))}")
        for vcpu, cpus in threads.items():
            if vcpu < len(self.host_cpus) and cpus != (self.host_cpus[vcpu],):
                problems.append(f"vCPU {vcpu} thread may run on host CPUs {list(cpus)}, "
                                f"pinned to {self.host_cpus[vcpu]}")
        if problems:
            self._stop_vmm()
            raise VerificationError(f"{self.scenario.name}: " + "; ".join(problems))
        return {"vcpu_thread_affinity": observed}


def _console_text(decoder: codecs.IncrementalDecoder, data: bytes) -> str:
    """The guest's console as text for logs and messages: no control characters (ESC sequences)."""
    return printable(decoder.decode(data).replace("\r\n", "\n"))


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        with open(path, "rb") as stream:
            stream.seek(max(0, os.fstat(stream.fileno()).st_size - 4 * chars))
            return printable(stream.read().decode(errors="replace"))[-chars:]
    except OSError:
        return "(no console output)"
