"""Build the guest disk images that VM, MVM and VMCN boot, offline from the host's wheelhouse.

An image is a directory ``<dir>/<variant>/`` holding ``rootfs.img`` (raw ext4, label
``dlvirt-root``), the Debian kernel ``vmlinuz`` and a small ``initrd.img`` (virtio/ext4 modules
only), and ``image.json`` describing what is in it. Variants:

- ``probe``: python3 only. Enough for the platform tests: the dlvirt package comes on the job disk
  of every run, and ``observe`` needs nothing but the standard library.
- ``full``: what a job runs of the host's Python stack (``JOB_DISTRIBUTIONS``: the harness, the
  apps' frameworks, LoadGen) at the host lock's versions, installed from a wheelhouse resolved on
  the host (``pip wheel``), so the guest never needs the network; the workflow's, the analysis' and
  the lint tools stay on the host.
- ``gpu``: ``full`` plus the NVIDIA kernel driver for a passed-through GPU (``VM/*/GPU``): Debian's
  ``nvidia-driver`` and ``nvidia-smi`` from non-free (the module is built by DKMS against the
  guest kernel's headers), or the packages ``platforms.VM.gpu_driver`` names, from the mirror or as
  local ``.deb`` files (a newer driver than Debian's, e.g. for a GPU that Debian's does not know).
- ``docker``: ``docker.io`` with the CN image preloaded into the guest's Docker storage, and the
  Docker SDK: VMCN runs dlvirt's CN platform *inside* the guest, which runs the harness in that
  container exactly as CN does on the host (so the guest needs no DL stack of its own).

The guest boots ``/usr/local/sbin/dlvirt-init`` (``GUEST_INIT``) instead of systemd: it mounts the job
disk, runs its ``run.sh`` under a guest-side timeout, records the exit status and powers off.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dlvirt.apps import job_packages, job_system_packages
from dlvirt.core.atomic import write_json_atomic
from dlvirt.core.credentials import Login, redact
from dlvirt.core.owner import process_tag

VARIANTS = ("probe", "full", "gpu", "docker")
POLICY_RC_D = "usr/sbin/policy-rc.d"  # invoke-rc.d asks it; "exit 101": start nothing
IMAGE_FILES = ("image.json", "rootfs.img", "vmlinuz", "initrd.img")  # what an image directory holds
DEFAULT_DIR = "resources/guest"  # <DEFAULT_DIR>/<variant>/, relative to the workflow directory
SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
ROOT_LABEL = "dlvirt-root"
JOB_LABEL = "dlvirt-job"
INIT_PATH = "/usr/local/sbin/dlvirt-init"
GUEST_VENV = "/opt/dlvirt"
# Written to the console by the guest right before the job's command starts: the host takes the
# time it appears as the end of the boot (boot-to-harness time).
START_MARKER = "dlvirt-guest: job start"

# systemd is installed for systemd-detect-virt only (the guest boots GUEST_INIT, not systemd).
BASE_PACKAGES = ("linux-image-amd64", "initramfs-tools", "kmod", "udev", "python3", "systemd",
                 "procps", "e2fsprogs")
# the variants that run jobs also get what the apps' native code needs (AppKind.system_packages)
VARIANT_PACKAGES = {
    "probe": (),
    "full": ("python3-venv", "ca-certificates", *job_system_packages()),
    "gpu": ("python3-venv", "ca-certificates", *job_system_packages()),  # + the driver's (gpu_driver_packages)
    "docker": ("python3-venv", "ca-certificates", "docker.io", "iptables"),
}


def debian_packages(variant: str) -> tuple[str, ...]:
    """The Debian packages a variant's image installs (the gpu variant's driver besides)."""
    return (*BASE_PACKAGES, *VARIANT_PACKAGES[variant])


# The gpu variant's NVIDIA driver by default: Debian's, from non-free (DKMS builds the module for the
# guest kernel, hence its headers); the components it needs are enabled in that image only.
NVIDIA_DRIVER_PACKAGES = ("nvidia-driver", "nvidia-smi", "nvidia-modprobe", "linux-headers-amd64")
NON_FREE_COMPONENTS = "main,contrib,non-free,non-free-firmware"


def gpu_driver_packages(driver: dict[str, Any] | None) -> tuple[tuple[str, ...], tuple[Path, ...]]:
    """``platforms.VM.gpu_driver`` as (Debian package names, local .deb files): Debian's driver by
    default. A named .deb that does not exist is an error naming the key."""
    driver = driver or {}
    packages = tuple(driver.get("packages") or NVIDIA_DRIVER_PACKAGES)
    debs = tuple(Path(d) for d in driver.get("debs") or ())
    missing = [str(d) for d in debs if not d.is_file()]
    if missing:
        raise ImageError(f"platforms.VM.gpu_driver.debs: no such file: {', '.join(missing)}")
    return packages, debs


# Only what the guest needs to find its disks: a 6-7 MB initrd boots much faster under TCG than
# Debian's default MODULES=most one.
INITRD_MODULES = ("virtio_pci", "virtio_mmio", "virtio_blk", "virtio_console", "ext4", "crc32c_generic")

GUEST_INIT = f"""#!/bin/sh
# dlvirt guest init: mount the job disk, run its run.sh under the guest-side timeout, record the
# exit status on the disk, power off. The host reads the disk back with debugfs (no network).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# the initramfs has already moved /proc, /sys and /dev onto the root; a user's may not have
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sysfs /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup
hostname dlvirt-guest
# the gpu image's NVIDIA driver (no udev runs to load it): the module, then its device nodes
if modprobe -q nvidia 2>/dev/null; then
    modprobe -q nvidia_uvm 2>/dev/null
    command -v nvidia-modprobe >/dev/null && nvidia-modprobe -u -c=0
fi
mkdir -p /job
status=125
if mount LABEL={JOB_LABEL} /job; then
    limit=$(cat /job/timeout_s)
    echo "{START_MARKER}"
    timeout -k 10 "$limit" /bin/sh /job/run.sh
    status=$?
    echo "$status" > /job/exitcode
    [ "$status" -eq 124 ] && echo "dlvirt-guest: job exceeded the guest-side timeout of $limit s"
    sync
    umount /job
else
    echo "dlvirt-guest: no disk labelled {JOB_LABEL}"
fi
echo "dlvirt-guest: job exit status $status, powering off"
sync
echo o > /proc/sysrq-trigger
sleep 5
echo b > /proc/sysrq-trigger
"""


class ImageError(RuntimeError):
    pass


# What a job imports inside a guest, by distribution name: the harness (numpy, SciPy, LoadGen), the GPU
# stack's NVML bindings and the apps' frameworks and pre-processing, as each app declares them
# (dlvirt.apps.job_packages). Everything else of the lock (Snakemake, pandas, matplotlib, Jupyter,
# the Docker and libvirt SDKs, pytest, mypy, ruff ...) runs on the host only.
HARNESS_DISTRIBUTIONS = ("mlcommons-loadgen", "numpy", "scipy", "nvidia-ml-py")
JOB_DISTRIBUTIONS = (*HARNESS_DISTRIBUTIONS, *job_packages())
REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[A-Za-z0-9,._ -]+\])?")


def _distribution(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _top_level(source: Path) -> list[str]:
    """The requirement lines of ``source``, with those of the files it includes (``-r``)."""
    if not source.is_file():
        raise ImageError(f"{source}: missing (the top-level requirements a lock is resolved from)")
    lines: list[str] = []
    for line in source.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        lines += _top_level(source.parent / line[2:].strip()) if line.startswith("-r") else [line] if line else []
    return lines


def job_requirements(lock: Path) -> tuple[str, ...]:
    """The ``JOB_DISTRIBUTIONS`` among the top-level requirements ``lock`` was resolved from (its
    ``.in`` file), as name plus extras (the GPU TensorFlow's ``[and-cuda]`` brings its CUDA
    wheels): the lock pins the versions."""
    found = []
    for line in _top_level(Path(lock).with_suffix(".in")):
        match = REQUIREMENT.match(line)
        if match and _distribution(match.group(1)) in JOB_DISTRIBUTIONS:
            found.append(match.group(1) + (match.group(2) or ""))
    return tuple(found)


def _run(cmd: list[str], **kwargs: Any) -> None:
    """Run a build step in its own process group, so that stopping the build (SIGTERM turned
    into SystemExit by the CLI, Ctrl-C) stops debootstrap's or dpkg's children too."""
    print("+", redact(" ".join(cmd)), flush=True)
    proc = subprocess.Popen(cmd, stderr=subprocess.STDOUT, start_new_session=True, **kwargs)  # noqa: S603
    try:
        returncode = proc.wait()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    if returncode != 0:
        raise ImageError(f"{cmd[0]} failed with status {returncode}: {redact(' '.join(cmd))}")


@contextlib.contextmanager
def _proc_mounted(rootfs: Path) -> Iterator[None]:
    """/proc inside the chroot for package scripts. Only /proc: binding the host's /dev into a
    chroot lets package scripts change host device nodes (seen: /dev/kvm's group)."""
    proc = rootfs / "proc"
    proc.mkdir(exist_ok=True)
    _run(["mount", "-t", "proc", "proc", str(proc)])
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(proc)], check=False)


@contextlib.contextmanager
def _apt_login(rootfs: Path, login: Login | None) -> Iterator[None]:
    """apt in the chroot gets the mirror's credentials from an ``auth.conf.d`` file (root's, 0600),
    removed before the image is made: the image's sources.list names the mirror without them."""
    if login is None:
        yield
        return
    from dlvirt.system import private

    path = rootfs / "etc/apt/auth.conf.d/dlvirt-mirror.conf"
    path.parent.mkdir(parents=True, exist_ok=True)
    private.create_file(path, login.apt_auth().encode())
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def _chroot(rootfs: Path, *cmd: str) -> None:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C",
           "HOME": "/root"}
    _run(["chroot", str(rootfs), *cmd], env=env)


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _install_python_stack(rootfs: Path, wheelhouse: Path, requirements: Path, only: tuple[str, ...]) -> None:
    """A venv at GUEST_VENV with ``only`` and their dependencies at the versions of the lock
    ``requirements``, installed offline from the wheelhouse."""
    from dlvirt.platforms.container_image import pins_only

    if not wheelhouse.is_dir() or not any(wheelhouse.glob("*.whl")):
        raise ImageError(f"wheelhouse {wheelhouse} has no wheels")
    staged = rootfs / "tmp" / "wheelhouse"
    same_fs = wheelhouse.stat().st_dev == rootfs.stat().st_dev
    shutil.copytree(wheelhouse, staged, copy_function=os.link if same_fs else shutil.copy2)
    (staged / "requirements.txt").write_text(pins_only(requirements))  # its wheels were checked as fetched
    try:
        _chroot(rootfs, "python3", "-m", "venv", GUEST_VENV)
        _chroot(rootfs, f"{GUEST_VENV}/bin/pip", "install", "--no-index", "--no-cache-dir", "--find-links",
                "/tmp/wheelhouse", "-c", "/tmp/wheelhouse/requirements.txt", *only)
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def _install_gpu_driver(rootfs: Path, packages: tuple[str, ...], debs: tuple[Path, ...]) -> None:
    """The NVIDIA driver in the guest, built for its kernel; fails the build naming what is missing."""
    staged = []
    for deb in debs:
        shutil.copy2(deb, rootfs / "tmp" / deb.name)
        staged.append(f"/tmp/{deb.name}")
    try:
        _chroot(rootfs, "apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages, *staged)
    except ImageError as err:
        raise ImageError(f"the gpu guest image could not install the NVIDIA driver "
                         f"({', '.join(packages + tuple(staged))}; set platforms.VM.gpu_driver to packages the "
                         f"mirror has, or to local .deb files): {err}") from err
    finally:
        for name in staged:
            (rootfs / name.lstrip("/")).unlink(missing_ok=True)
    kernel = sorted((rootfs / "lib/modules").iterdir())[-1].name
    if not list((rootfs / "lib/modules" / kernel).rglob("nvidia.ko*")):
        raise ImageError(f"the gpu guest image has no nvidia kernel module for its kernel {kernel} after installing "
                         f"{', '.join(packages + tuple(staged))} (DKMS needs that kernel's headers)")


def _preload_docker_image(rootfs: Path, tag: str, engine_settings: dict[str, Any], work: Path) -> None:
    """Copy the CN image from the host's engine into the guest's /var/lib/docker, through a dockerd
    of our own whose data root is the guest's: VMCN then needs no `docker load` (minutes under
    TCG) at boot, and the guest runs the very image CN runs."""
    import docker

    from dlvirt.platforms import container_image
    from dlvirt.system import docker_engine, engines

    tar = work / "cn-image.tar"
    client = docker_engine.connect(engine_settings, container_image.SETTINGS)
    try:
        with open(tar, "wb") as handle:
            for chunk in client.images.get(tag).save(named=True):
                handle.write(chunk)
    finally:
        client.close()
    dockerd_path = docker_engine.dockerd_binary() or "dockerd"
    daemon = docker_engine.dockerd(f"dockerd-guestimage-{os.getpid()}", str(rootfs / "var/lib/docker"), dockerd_path)
    name, run_dir, url = daemon.name, daemon.run_dir, f"unix://{daemon.run_dir / 'docker.sock'}"
    try:
        engines.acquire(daemon, os.getpid())
        loader = docker.DockerClient(base_url=url, timeout=600)
        try:
            with open(tar, "rb") as handle:
                loader.images.load(handle)
            loader.images.get(tag)
        finally:
            loader.close()
    finally:
        engines.release(name, os.getpid())
        shutil.rmtree(run_dir, ignore_errors=True)
        tar.unlink(missing_ok=True)


def _sizes_mib(rootfs: Path) -> int:
    out = subprocess.run(["du", "-sxm", str(rootfs)], capture_output=True, text=True, check=True)
    used = int(out.stdout.split()[0])
    return int(used * 1.25) + 512  # room for the page cache's dirty data, logs and dockerd state


def build(variant: str, output_dir: Path, *, wheelhouse: Path | None = None, requirements: Path | None = None,
          docker_image: str | None = None, engine_settings: dict[str, Any] | None = None,
          mirror: str = DEFAULT_MIRROR, cache_dir: Path | None = None,
          gpu_driver: dict[str, Any] | None = None, stack: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build ``variant`` into ``output_dir`` (replaced atomically: a failed build leaves nothing)."""
    if variant not in VARIANTS:
        raise ImageError(f"unknown guest image variant {variant!r} (one of {', '.join(VARIANTS)})")
    for tool in ("debootstrap", "mkfs.ext4", "chroot"):
        if shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None:
            raise ImageError(f"{tool} not found (apt-get install debootstrap e2fsprogs)")
    driver_packages, driver_debs = gpu_driver_packages(gpu_driver) if variant == "gpu" else ((), ())
    started = time.monotonic()
    output_dir = Path(output_dir).resolve()  # daemons and chroots get absolute paths
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".build-{variant}-{process_tag()}-", dir=output_dir.parent))
    try:
        rootfs = work / "rootfs"
        cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(('python3', 'kmod'))}"]
        if cache_dir is not None:
            cache_dir.mkdir(parents=True, exist_ok=True)
            cmd.append(f"--cache-dir={cache_dir.resolve()}")
        if variant == "gpu":
            cmd.append(f"--components={NON_FREE_COMPONENTS}")
        from dlvirt.platforms.container_image import mirror_login

        with mirror_login(mirror) as (mirror_url, env, login):
            _run([*cmd, SUITE, str(rootfs), mirror_url], env=env)
        # The initrd is generated by the kernel package's postinst: configure it first.
        _write(rootfs / "etc/initramfs-tools/conf.d/dlvirt", "MODULES=list\nCOMPRESS=zstd\n")
        _write(rootfs / "usr/share/initramfs-tools/modules.d/dlvirt", "\n".join(INITRD_MODULES) + "\n")
        _write(rootfs / "etc/fstab", f"LABEL={ROOT_LABEL} / ext4 rw,relatime 0 1\n")
        _write(rootfs / "etc/hostname", "dlvirt-guest\n")
        # no package script may start a service (dockerd, udevd) in the chroot, i.e. on this host
        _write(rootfs / POLICY_RC_D, "#!/bin/sh\nexit 101\n", 0o755)
        with _proc_mounted(rootfs), _apt_login(rootfs, login):
            _chroot(rootfs, "apt-get", "update", "-qq")
            _chroot(rootfs, "apt-get", "install", "-y", "-qq", "--no-install-recommends", "zstd",
                    *debian_packages(variant))
            if variant == "gpu":
                _install_gpu_driver(rootfs, driver_packages, driver_debs)
            if variant != "probe":
                if wheelhouse is None or requirements is None:
                    raise ImageError(f"the {variant} guest image needs a wheelhouse and a requirements file")
                # docker: the guest only drives its dockerd (dlvirt's CN platform, Docker SDK)
                _install_python_stack(rootfs, Path(wheelhouse), Path(requirements),
                                      only=("docker",) if variant == "docker" else job_requirements(Path(requirements)))
                if stack is not None and variant != "docker":  # which lock (dlvirt.system.hostinfo.python_stack)
                    _write(rootfs / GUEST_VENV.lstrip("/") / "dlvirt-stack.json", json.dumps(stack) + "\n")
            _chroot(rootfs, "apt-get", "clean")
        (rootfs / POLICY_RC_D).unlink()
        if variant == "docker":
            if docker_image is None:
                raise ImageError("the docker guest image needs the CN image's tag")
            _preload_docker_image(rootfs, docker_image, engine_settings or {}, work)
        shutil.rmtree(rootfs / "var/lib/apt/lists", ignore_errors=True)
        _write(rootfs / INIT_PATH.lstrip("/"), GUEST_INIT, 0o755)
        staging = work / "out"
        staging.mkdir()
        kernels = sorted((rootfs / "boot").glob("vmlinuz-*"))
        initrds = sorted((rootfs / "boot").glob("initrd.img-*"))
        if not kernels or not initrds:
            raise ImageError(f"no kernel/initrd under {rootfs / 'boot'} after installing linux-image-amd64")
        shutil.copy2(kernels[-1], staging / "vmlinuz")
        shutil.copy2(initrds[-1], staging / "initrd.img")
        size_mib = _sizes_mib(rootfs)
        _run(["mkfs.ext4", "-q", "-F", "-L", ROOT_LABEL, "-E", "root_owner=0:0", "-d", str(rootfs),
              str(staging / "rootfs.img"), f"{size_mib}M"])
        description = {
            "variant": variant,
            "suite": SUITE,
            "mirror": redact(mirror),
            "kernel": kernels[-1].name.removeprefix("vmlinuz-"),
            "initrd_bytes": (staging / "initrd.img").stat().st_size,
            "rootfs_mib": size_mib,
            "python_venv": GUEST_VENV if variant in ("full", "gpu") else None,
            "packages": list(debian_packages(variant)),
            "gpu_driver": list(driver_packages) + [d.name for d in driver_debs] if variant == "gpu" else None,
            "docker_image": docker_image,
            "build_s": round(time.monotonic() - started, 1),
        }
        write_json_atomic(staging / "image.json", description)
        if output_dir.exists():
            shutil.rmtree(output_dir)
        staging.rename(output_dir)
        return description
    finally:
        with contextlib.suppress(OSError):
            subprocess.run(["umount", "-l", str(work / "rootfs" / "proc")], capture_output=True, check=False)
        shutil.rmtree(work, ignore_errors=True)


def read_description(image_dir: Path) -> dict[str, Any]:
    path = Path(image_dir) / "image.json"
    try:
        return dict(json.loads(path.read_text()))
    except FileNotFoundError:
        raise ImageError(f"no guest image at {image_dir} (image.json missing; the workflow builds it)") from None


def build_for_workflow(variant: str, output_dir: Path, root: Path, cn_settings: dict[str, Any],
                       cn_image: str | None) -> dict[str, Any]:
    """The workflow's build: the wheelhouse resolved from the lock as for the CN image (shared
    code, kept beside the guest images), Debian packages cached across variants, the host's mirror.
    ``cn_settings`` also carries ``platforms.VM.gpu_driver`` for the gpu variant (``gpu_driver``)."""
    from dlvirt.platforms import container_image
    from dlvirt.system import benchlock

    output_dir = Path(output_dir)
    context = output_dir.parent / "build-context"
    wheelhouse = requirements = None
    # it loads the machine for minutes: no launch of any study runs beside it
    with benchlock.held(f"building the {variant} guest image", Path(root).resolve(),
                        lambda line: print(f"dlvirt: {line}", flush=True)):
        if variant != "probe":
            container_image.resolve_wheelhouse(Path(root), context)
            wheelhouse, requirements = context / "wheelhouse", Path(root) / container_image.host_lock()
        return build(variant, output_dir, wheelhouse=wheelhouse, requirements=requirements,
                     docker_image=cn_image if variant == "docker" else None, engine_settings=cn_settings,
                     mirror=container_image.debian_mirror(cn_settings), cache_dir=output_dir.parent / "debs",
                     gpu_driver=cn_settings.get("gpu_driver"),
                     stack={"stack": container_image.host_stack(), "lock": container_image.host_lock(),
                            "reason": "the host stack, whose lock the image was built from",
                            "chosen_by": "dlvirt guest-image"})
