"""A host where someone else got there first: places dlvirt writes to as root that another user made
or swapped for a symbolic link, and cgroups and processes named like dlvirt's that are not. Each is
refused or left alone with a message naming it, and nothing outside dlvirt's own places is touched.

Fast: no engine, no guest, no model. Root is needed to create what another user would own."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dlvirt.core.errors import UnsafePlace
from dlvirt.core.owner import new_run_id, process_start_time, process_tag
from dlvirt.core.scenario import Scenario
from dlvirt.platforms import guest
from dlvirt.platforms.base import PlatformError
from dlvirt.platforms.mvm import SANDBOX, MicroVM, fd_sets, open_for_vmm, qemu_microvm_command, qemu_value
from dlvirt.platforms.vm import open_to_vmm, qemu_ids
from dlvirt.run import cleanup
from dlvirt.system import cgroups, private, vmm_ids

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="making what another user owns needs root")
NOBODY = 65534
DEAD_TAG = f"{2 ** 22 + 1}-1234"  # above the default pid_max: no such process


def _mvm(tmp_path: Path, work_dir: Path) -> MicroVM:
    return MicroVM(Scenario("MVM", 1, "VNL", "CPU"), {"work_dir": str(work_dir), "memory_mib": 512},
                   tmp_path / "job", new_run_id())


def test_a_runtime_root_another_user_made_first_is_refused(tmp_path):
    shared = tmp_path / "var-tmp"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # like /var/tmp: sticky, everyone may create
    root = shared / "dlvirt-guests"
    root.mkdir()
    os.chown(root, NOBODY, NOBODY)
    with pytest.raises(UnsafePlace, match=rf"{root} is owned by .*uid {NOBODY}.*dlvirt refuses to use it"):
        _mvm(tmp_path, root).provision()
    assert list(root.iterdir()) == [] and os.stat(root).st_uid == NOBODY  # not taken over, nothing made


def test_a_runtime_root_others_may_write_or_a_symbolic_link_is_refused(tmp_path):
    writable = tmp_path / "writable"
    writable.mkdir()
    os.chmod(writable, 0o777)
    with pytest.raises(UnsafePlace, match=r"writable by group and others \(mode 0777\)"):
        private.private_dir(writable, "the test's root")
    assert os.stat(writable).st_mode & 0o777 == 0o777
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    with pytest.raises(UnsafePlace, match=r"link is a symbolic link"):
        _mvm(tmp_path, link).provision()
    assert list(elsewhere.iterdir()) == []
    # a parent others may write (and not sticky) lets them rename what is below it
    below = writable / "root"
    with pytest.raises(UnsafePlace, match=rf"its parent {writable} is writable"):
        private.private_dir(below, "the test's root")


def test_the_runtime_root_is_made_0700_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        made = private.private_dir(tmp_path / "a" / "b", "the test's root")
    finally:
        os.umask(old)
    for directory in (made, made.parent):
        info = os.lstat(directory)
        assert info.st_uid == os.geteuid() and info.st_mode & 0o777 == 0o700
    folder = private.job_dir(made, "dlvirt-x-", "the test's root")
    assert folder.parent == made and os.lstat(folder).st_mode & 0o777 == 0o700


def test_a_job_folder_swapped_for_a_symbolic_link_is_refused(tmp_path):
    root = tmp_path / "guests"
    mvm = _mvm(tmp_path, root)
    mvm._disk_dir = private.job_dir(root, f"{mvm.domain_name}-", guest.WORK_DIR_WHAT)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder = mvm._disk_dir
    folder.rmdir()
    folder.symlink_to(elsewhere)
    with pytest.raises(UnsafePlace, match=rf"{folder} is a symbolic link"):
        mvm.execute("true\n", timeout_s=10)
    with pytest.raises(FileExistsError):  # a file is never opened through a link
        private.create_file(folder)
    assert list(elsewhere.iterdir()) == []
    # cleanup: a link named like a stale folder is left alone, the folder it points to untouched
    stale = root / f"dlvirt-{DEAD_TAG}-0123abcd-zz9_zz9_"
    stale.symlink_to(elsewhere)
    dead = root / f"dlvirt-{DEAD_TAG}-0123abcd-a1b2c3d4"
    dead.mkdir()
    messages = list(cleanup.remove_stale_guests({"MVM": {"work_dir": str(root)}}))
    assert f"removed stale guest work folder {dead}" in messages
    assert not dead.exists() and stale.is_symlink() and elsewhere.is_dir() and folder.is_symlink()


def test_cleanup_leaves_a_runtime_root_that_is_not_private_alone(tmp_path):
    root = tmp_path / "guests"
    root.mkdir()
    os.chown(root, NOBODY, NOBODY)
    dead = root / f"dlvirt-{DEAD_TAG}-0123abcd-a1b2c3d4"
    dead.mkdir()
    messages = list(cleanup.remove_stale_guests({"VM": {"work_dir": str(root)}}))
    assert any(m.startswith(f"left alone: {guest.WORK_DIR_WHAT} {root} is owned by") for m in messages)
    assert dead.is_dir()


@pytest.fixture
def cpu_hierarchy() -> Path:
    base = cgroups.v1_dir("cpu") or cgroups.v2_root()
    if base is None:
        pytest.skip("no cgroup CPU hierarchy")
    return base


def test_a_dlvirt_named_cgroup_of_a_live_stranger_survives_cleanup(cpu_hierarchy):
    """``dlvirt-study`` (say, a ``systemd-run --unit dlvirt-study`` scope) holding a live process that
    is not dlvirt's, and a group named exactly like dlvirt's whose PID lives but with another start
    time (a reused PID): the first is left alone, the second is dlvirt's and stale."""
    study = cpu_hierarchy / "dlvirt-study"
    stranger = subprocess.Popen(["sleep", "300"])
    reused = cpu_hierarchy / f"dlvirt-{stranger.pid}-{(process_start_time(stranger.pid) or 0) + 1}-0123abcd"
    ours = cpu_hierarchy / f"dlvirt-{new_run_id()}"
    try:
        for directory in (study, reused, ours):
            directory.mkdir()
        (study / "cgroup.procs").write_text(f"{stranger.pid}\n")
        messages = list(cleanup.remove_stale_cgroups())
        assert f"removed stale cgroup {reused}" in messages
        assert not any(str(study) in m or str(ours) in m for m in messages)
        assert study.is_dir() and ours.is_dir() and not reused.exists()
        assert stranger.poll() is None, "the stranger's process was killed"
    finally:
        stranger.kill()
        stranger.wait()
        for directory in (study, reused, ours):
            cgroups.Cgroup(dirs=[directory]).remove()


def test_a_qemu_that_dlvirt_did_not_start_survives_cleanup(tmp_path):
    qemu = subprocess.Popen(["qemu-system-x86_64", "-name", "guest=dlvirt-study", "-machine", "none", "-S",
                             "-display", "none", "-monitor", "none", "-serial", "none", "-nodefaults"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        assert qemu.poll() is None, "qemu did not start"
        messages = list(cleanup.remove_stale_guests({"VM": {"work_dir": str(tmp_path / "guests")}}))
        assert not any(str(qemu.pid) in m for m in messages)
        assert qemu.poll() is None, "cleanup killed a QEMU that is not dlvirt's"
    finally:
        qemu.send_signal(signal.SIGKILL)
        qemu.wait()


def test_cleanup_of_the_workflow_trees_removes_only_dead_makers_things(tmp_path):
    results = tmp_path / "results"
    build_dead = tmp_path / "resources" / "guest" / f".build-full-{DEAD_TAG}-a1b2c3d4"
    build_live = tmp_path / "resources" / "guest" / f".build-full-{process_tag()}-a1b2c3d4"
    fetch_dead = results / "sites" / f".fetch-{DEAD_TAG}-abcd_123"
    work_link = results / "runs" / f".work-{DEAD_TAG}-0123abcd-a1b2c3d4"
    temp_dead = results / f".summary.csv.{DEAD_TAG}.a1b2c3d4"
    temp_live = results / f".summary.csv.{process_tag()}.a1b2c3d4"
    strangers = [results / ".summary.csv.tmp", results / "runs" / ".work-notours", tmp_path / "outside"]
    for directory in (build_dead / "rootfs" / "proc", build_live, fetch_dead, work_link.parent, strangers[1],
                      strangers[2]):
        directory.mkdir(parents=True)
    work_link.symlink_to(strangers[2])
    inside_live = build_live / f".x.{DEAD_TAG}.a1b2c3d4"  # a running build's tree is never walked
    for path in (temp_dead, temp_live, strangers[0], inside_live):
        path.write_text("x")
    proc = build_dead / "rootfs" / "proc"
    subprocess.run(["mount", "-t", "tmpfs", "dlvirt-test", str(proc)], check=True)
    try:
        messages = list(cleanup.remove_stale_work_dirs([results, tmp_path / "resources"]))
    finally:
        subprocess.run(["umount", "-l", str(proc)], check=False, capture_output=True)
    assert sorted(messages) == sorted([
        f"removed stale image build tree {build_dead}", f"removed stale fetched archive {fetch_dead}",
        f"removed stale temporary file {temp_dead}",
        f"left alone: {work_link} is named like a stale job work directory but is a symbolic link"])
    assert not build_dead.exists() and not fetch_dead.exists() and not temp_dead.exists()
    assert build_live.is_dir() and temp_live.exists() and inside_live.exists() and work_link.is_symlink()
    assert all(p.exists() for p in strangers)


def test_a_reused_pid_is_not_the_maker(tmp_path):
    """Liveness is PID *and* start time: this process's PID with another start time is stale."""
    pid, start = process_tag().split("-")
    assert not cleanup.is_stale(f"dlvirt-{pid}-{start}-0123abcd", cleanup.RUN_NAME)
    assert cleanup.is_stale(f"dlvirt-{pid}-{int(start) + 1}-0123abcd", cleanup.RUN_NAME)
    assert not cleanup.is_stale("dlvirt-study", cleanup.RUN_NAME)  # not a name dlvirt gives
    assert not cleanup.is_stale(f"dlvirt-{pid}-0123abcd", cleanup.RUN_NAME)  # the old form: not matched


def test_a_v2_group_goes_in_the_nearest_ancestor_that_may_hold_it(tmp_path):
    """cgroup v2's no-internal-process rule: the runner's own group holds processes, so the job's
    group goes in the nearest group above it with no process of its own and the controllers (a
    directory tree laid out as the kernel's; what the kernel itself does is tested on v2 hosts)."""
    root = tmp_path / "cg"
    own = root / "job_1" / "step_0" / "task_0"
    own.mkdir(parents=True)
    for directory, procs in ((root, "1\n"), (root / "job_1", ""), (root / "job_1" / "step_0", ""), (own, "42\n")):
        (directory / "cgroup.controllers").write_text("cpuset cpu memory\n")
        (directory / "cgroup.subtree_control").write_text("")
        (directory / "cgroup.procs").write_text(procs)
    assert cgroups.v2_parent(root, "/job_1/step_0/task_0", ["cpu", "memory"]) == root / "job_1" / "step_0"
    assert (root / "job_1" / "step_0" / "cgroup.subtree_control").read_text() == "+memory\n"  # the last write
    (root / "job_1" / "step_0" / "cgroup.controllers").write_text("memory\n")  # cpu not handed down
    assert cgroups.v2_parent(root, "/job_1/step_0/task_0", ["cpu"]) == root / "job_1"


@pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="needs qemu-system-x86_64")
def test_a_work_dir_with_a_comma_or_quote_stays_one_qemu_option_value(tmp_path):
    """A work_dir like ``/x,file=/etc/shadow"`` cannot add options to QEMU's -drive or -chardev:
    QEMU itself opens exactly the files named (it runs paused, and is killed)."""
    folder = tmp_path / 'w,if=none,file=elsewhere"x'
    folder.mkdir()
    disk, console = folder / "job.img", folder / "console.log"
    disk.write_bytes(bytes(1 << 20))
    command = qemu_microvm_command(name="dlvirt-x", accel="tcg", vcpus=1, memory_mib=64, kernel=disk, initrd=disk,
                                   cmdline="", root_disk=disk, job_disk=disk, console=console)
    assert f"id=job,file={str(disk).replace(',', ',,')},format=raw" in " ".join(command)
    qemu = subprocess.Popen(["qemu-system-x86_64", "-machine", "none", "-nodefaults", "-display", "none",
                             "-monitor", "none", "-S",
                             "-drive", f"id=job,file={qemu_value(disk)},format=raw,if=none,readonly=on",
                             "-chardev", f"file,id=console,path={qemu_value(console)}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while not console.exists() and qemu.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert qemu.poll() is None, qemu.communicate()[1].decode()
        assert console.exists() and sorted(p.name for p in folder.iterdir()) == ["console.log", "job.img"]
    finally:
        qemu.kill()
        qemu.communicate()
    with pytest.raises(PlatformError, match="control character"):
        qemu_value(tmp_path / "a\nb")


def linux_boot_header(path: Path) -> Path:
    """A file QEMU loads as a Linux kernel (boot protocol 2.15 header, nothing behind it): enough
    for a machine that is built and never run (-S)."""
    kernel = bytearray(256 << 10)
    kernel[0x1F1] = 4  # setup sectors
    kernel[0x202:0x208] = b"HdrS" + (0x20F).to_bytes(2, "little")
    kernel[0x211] = 1  # LOADED_HIGH
    kernel[0x22C:0x230] = (0x37FFFFFF).to_bytes(4, "little")  # initrd_addr_max
    path.write_bytes(kernel)
    return path


@pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="needs qemu-system-x86_64")
def test_qemu_gets_its_disks_and_console_as_descriptors_with_no_path_on_its_command_line(tmp_path):
    """MVM's QEMU command as the platform builds it, its files handed over open (-add-fd,
    /dev/fdset/N), under its sandbox: the microvm machine is built (-S: it never runs) with both
    disks' devices attached read-write through the sets, and its command line, readable by every
    local user, names none of the job folder's files."""
    folder = tmp_path / "vm-secretname"
    folder.mkdir()
    root, job, console = folder / "root.img", folder / "job.img", folder / "console.log"
    for disk in (root, job):
        disk.write_bytes(bytes(1 << 20))
    console.touch()
    fds: list[int] = []
    both = (os.O_RDONLY, os.O_RDWR)
    options, (root_set, job_set, console_set) = fd_sets([
        open_for_vmm(root, both, fds), open_for_vmm(job, both, fds), open_for_vmm(console, (os.O_WRONLY,), fds)])
    command = qemu_microvm_command(name="dlvirt-x", accel="tcg", vcpus=1, memory_mib=64,
                                   kernel=linux_boot_header(tmp_path / "vmlinuz"), initrd=tmp_path / "vmlinuz",
                                   cmdline="", root_disk=root_set, job_disk=job_set, console=console_set)
    command = [arg.replace("format=qcow2", "format=raw") for arg in command]  # a raw stand-in root disk
    try:
        qemu = subprocess.Popen([*command, *options, "-sandbox", SANDBOX, "-S", "-monitor", "none"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, pass_fds=fds)
    finally:
        for fd in fds:
            os.close(fd)
    try:
        def read_write() -> list[str]:  # the job folder's files QEMU holds open read-write
            found = []
            for fd in os.listdir(f"/proc/{qemu.pid}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(f"/proc/{qemu.pid}/fd/{fd}")
                    flags = int(Path(f"/proc/{qemu.pid}/fdinfo/{fd}").read_text().split()[3], 8)
                    if link.startswith(str(folder)) and flags & os.O_ACCMODE == os.O_RDWR:
                        found.append(link)
            return sorted(found)

        # the descriptors handed over (kept in their sets) and one read-write dup per attached disk
        want, deadline = sorted(2 * [str(root), str(job)]), time.monotonic() + 30
        while read_write() != want and time.monotonic() < deadline:
            assert qemu.poll() is None, qemu.communicate()[1].decode()
            time.sleep(0.2)
        assert read_write() == want
        assert b"secretname" not in Path(f"/proc/{qemu.pid}/cmdline").read_bytes()
    finally:
        qemu.kill()
        qemu.communicate()


@pytest.fixture
def fresh_host() -> Iterator[Path]:
    """A root file system as on a fresh host: root's, 0755, nothing of dlvirt's in it, and a file
    system of its own (a tmpfs) beside the checkout's."""
    base = Path(tempfile.mkdtemp(prefix="dlvirt-test-fresh-", dir="/run"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=64m", "dlvirt-test", str(base)], check=True)
    try:
        yield base
    finally:
        subprocess.run(["umount", "-l", str(base)], check=False)
        base.rmdir()


def test_on_a_fresh_host_the_vmm_reaches_its_job_folder_and_outputs_cross_file_systems(fresh_host, tmp_path):
    """dlvirt makes /var/lib/dlvirt/guests and its parents itself; libvirt's QEMU user (really
    switched to, with no groups but the one libvirt gives it) writes its console in its job folder;
    the guest's outputs move from there (a tmpfs) into the checkout (another file system)."""
    try:
        uid, gid = qemu_ids()
    except PlatformError:
        pytest.skip(f"no user {guest.VMM_USER}")
    work_dir = fresh_host / "var" / "lib" / "dlvirt" / "guests"
    folder = private.job_dir(work_dir, "dlvirt-x-", guest.WORK_DIR_WHAT, guest.WORK_DIR_MODE)
    for made in (fresh_host / "var", fresh_host / "var" / "lib", work_dir.parent, work_dir):
        assert os.lstat(made).st_mode & 0o777 == 0o711, made  # searchable, not listable
    open_to_vmm(folder, (uid, gid), "platforms.VM.work_dir")
    console = private.create_file(folder / "console.log")
    os.chown(console, uid, gid)
    as_qemu = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]
    assert subprocess.run([*as_qemu, "sh", "-c", f"echo booted >> {console}"], check=False).returncode == 0
    assert console.read_text() == "booted\n"
    assert subprocess.run([*as_qemu, "ls", str(work_dir)], capture_output=True, check=False).returncode != 0
    out = folder / "guest" / "out"
    (out / "rep-0001").mkdir(parents=True)
    (out / "rep-0001" / "log.txt").write_text("x")
    assert os.stat(out).st_dev != os.stat(tmp_path).st_dev
    target = guest.move_out(out, tmp_path / "job" / "out")
    assert (target / "rep-0001" / "log.txt").read_text() == "x" and not out.exists()


def test_each_vm_job_leases_a_uid_of_its_own_and_cannot_open_anothers_files(fresh_host, tmp_path):
    """Two jobs' leases: different uids, held while their runner lives (another process cannot take
    one), free again once released; QEMU running as one of them (really switched to, in the kvm group
    only, as libvirt's static label gives it) opens its own disk and not the other job's."""
    leases = [vmm_ids.lease(f"job-{i}", tmp_path / "leases") for i in range(2)]
    try:
        first, second = (lease.uid for lease in leases)
        assert first != second and all(vmm_ids.UID_BASE <= uid < vmm_ids.UID_BASE + vmm_ids.UID_COUNT
                                       for uid in (first, second))
        taken = subprocess.run(["flock", "--nonblock", str(tmp_path / "leases" / str(first)), "true"], check=False)
        assert taken.returncode != 0  # held by this process
        kvm = qemu_ids()[1]
        folder = private.job_dir(fresh_host / "guests", "dlvirt-x-", guest.WORK_DIR_WHAT, guest.WORK_DIR_MODE)
        open_to_vmm(folder, (first, kvm), "platforms.VM.work_dir")
        disks = {}
        for uid in (first, second):
            disks[uid] = private.create_file(folder / f"job-{uid}.img", b"disk")
            os.chown(disks[uid], uid, kvm)
        as_first = ["setpriv", f"--reuid={first}", f"--regid={kvm}", "--clear-groups", "--", "cat"]
        assert subprocess.run([*as_first, str(disks[first])], capture_output=True, check=False).stdout == b"disk"
        refused = subprocess.run([*as_first, str(disks[second])], capture_output=True, text=True, check=False)
        assert refused.returncode != 0 and "Permission denied" in refused.stderr
    finally:
        for lease in leases:
            lease.release()
    assert list((tmp_path / "leases").iterdir()) == []  # released: nothing left behind


def test_cleanup_removes_only_the_uid_leases_no_live_job_holds(tmp_path):
    held = vmm_ids.lease("live-job", tmp_path / "leases")
    stale = tmp_path / "leases" / str(vmm_ids.UID_BASE + vmm_ids.UID_COUNT)  # a killed runner's: unlocked
    stale.write_text("dead-job\n")
    try:
        assert list(vmm_ids.remove_stale(tmp_path / "leases")) == [f"removed stale VMM uid lease {stale}"]
        assert held.path.exists() and not stale.exists()
    finally:
        held.release()
