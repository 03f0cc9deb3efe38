"""Sandboxed container (SCN): the CN image on CN's engine under gVisor's runsc, whose user-space
kernel (the Sentry) serves every system call of the app, as GKE Sandbox runs untrusted pods.

Everything else is CN's (``dlvirt.platforms.cn``): the same image and dockerd, ``--network none``,
the unprivileged user with no capabilities, ``no-new-privileges``, a read-only root file system, the
pids limit, the labels and the cleanup. ``SCN/N/VNL`` = ``--cpus=N`` (a CFS quota on the sandbox's
host cgroup), ``SCN/N/PIN`` = ``--cpuset-cpus`` on N host cores: the Sentry gives the app as many
CPUs as its own affinity holds, numbered from 0. runsc's platform (how it intercepts system calls:
``platforms.SCN.runsc_platform``, ptrace by default) is an option of the runtime dlvirt's dockerd
registers as ``runsc-<platform>``; the sandbox's state and logs live under that dockerd's exec-root
(``/run/dlvirt/dockerd*/exec``, private to root).

Verified from inside every repetition: the kernel the harness sees is gVisor's (its release, and no
host boot id: the Sentry has none), the CPUs (all of the host's under VNL; N under PIN), the memory
limit and the least privileges as in CN. The quota and cpuset the engine put on the sandbox are read
from the container's host cgroup after the launch. GPU scenarios need runsc's nvproxy (runsc from
2023 on) and are left out, with that reason, by a runsc without it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dlvirt.core.kinds import CONTAINER_IMAGE, PlatformKind
from dlvirt.core.records import HarnessJob, HarnessOutput
from dlvirt.core.scenario import Scenario
from dlvirt.platforms.base import Expected, VerificationError
from dlvirt.platforms.cn import PRIVILEGES, Container, runtime_binary
from dlvirt.system import cgroups
from dlvirt.system.hostinfo import Capabilities
from dlvirt.system.topology import parse_cpulist

RUNSC = "runsc"
DEFAULT_MODE = "ptrace"
# the Linux release gVisor's kernel reports (uname, /proc/version) in every runsc to date
GVISOR_RELEASE = "4.4.0"


@functools.cache
def runsc_flags(path: str) -> str:
    """``runsc flags``: the options this runsc knows (its platforms, nvproxy)."""
    done = subprocess.run([path, "flags"], capture_output=True, text=True, check=False, timeout=30)
    return done.stdout + done.stderr


@functools.cache
def runsc_version(path: str) -> str:
    done = subprocess.run([path, "--version"], capture_output=True, text=True, check=False, timeout=30)
    return done.stdout.splitlines()[0].removeprefix("runsc version ").strip() if done.stdout else "unknown"


def stale_sandboxes(live: Callable[[], set[str]], exec_root: Path) -> Iterator[str]:
    """Delete the runsc sandboxes under a dockerd's ``exec_root`` whose container the engine no longer
    has (a runsc whose start failed leaves its sandbox and gofer running). Listed before ``live`` is
    asked: a container is in the engine before its sandbox exists, so no starting one is touched."""
    path = runtime_binary(RUNSC)
    roots = sorted(exec_root.glob("runtime-*/moby")) if path is not None else []
    listed = {root: subprocess.run([str(path), f"--root={root}", "list", "-quiet"], capture_output=True, text=True,
                                   check=False, timeout=60).stdout.split() for root in roots}
    if not any(listed.values()):
        return
    alive = live()
    for root, ids in listed.items():
        for cid in (c for c in ids if c not in alive):
            subprocess.run([str(path), f"--root={root}", "delete", "--force", cid], capture_output=True, check=False,
                           timeout=60)
            yield f"removed stale gVisor sandbox {cid[:12]} (runsc --root={root})"


def kvm_usable() -> bool:
    return os.access("/dev/kvm", os.R_OK | os.W_OK)


class SandboxedContainer(Container):
    kind = PlatformKind(name="SCN", title="sandboxed container: gVisor's runsc on the host's Docker engine",
                        order=5, colour=5, virtualised=True, image=CONTAINER_IMAGE)
    default_runtime = RUNSC

    @classmethod
    def runtime(cls, settings: dict[str, Any]) -> str:
        return RUNSC

    @classmethod
    def leftovers(cls, live: Callable[[], set[str]], exec_root: Path) -> Iterator[str]:
        yield from stale_sandboxes(live, exec_root)

    @classmethod
    def mode(cls, settings: dict[str, Any]) -> str:
        """runsc's platform: how its kernel intercepts the app's system calls."""
        return str(settings.get("runsc_platform") or DEFAULT_MODE)

    @classmethod
    def runtime_name(cls, settings: dict[str, Any]) -> str:
        return f"{RUNSC}-{cls.mode(settings)}"

    @classmethod
    def runtime_args(cls, settings: dict[str, Any]) -> list[str]:
        # the container has no network (docker --network none): nor has gVisor's own network stack
        return [f"--platform={cls.mode(settings)}", "--network=none"]

    @classmethod
    def exit_hint(cls, status: int) -> str:
        # 128 + SIGFPE: seen on a 2-core AMD EPYC guest, where TensorFlow's oneDNN kernels of a
        # ResNet50 forward pass die under runsc (ptrace) while PyTorch's and a single TF conv run
        if status == 128 + signal.SIGFPE:
            return (" (SIGFPE inside gVisor: on some CPUs TensorFlow's oneDNN kernels die under runsc; "
                    "apps on PyTorch run there: an app's framework setting may choose it)")
        return ""

    @classmethod
    def unavailable_reason(cls, scenario: Scenario, caps: Capabilities, config: dict[str, Any]) -> str | None:
        path = runtime_binary(RUNSC)
        if path is not None and scenario.processor == "GPU" and caps.gpus and "-nvproxy" not in runsc_flags(path):
            return f"runsc {runsc_version(path)} has no nvproxy (GPU support in gVisor came with runsc 2023)"
        why = super().unavailable_reason(scenario, caps, config)
        if why is not None or path is None:
            return why
        mode = cls.mode(config.get("platforms", {}).get(cls.name, {}))
        known = runsc_flags(path).split("-platform string", 1)[-1].split("\n  -", 1)[0]
        if mode not in known:
            return f"runsc {runsc_version(path)} has no {mode} platform (platforms.SCN.runsc_platform)"
        if mode == "kvm" and not kvm_usable():
            return "runsc's kvm platform needs a usable /dev/kvm (platforms.SCN.runsc_platform: ptrace)"
        return None

    def started(self) -> None:
        self.host_cgroup = self._host_cgroup_limits()

    def run(self, job: HarnessJob, timeout_s: float) -> HarnessOutput:
        harness = super().run(job, timeout_s)
        problems = self.host_problems()
        if problems:
            raise VerificationError(f"{self.scenario.name}: the sandbox did not get what was asked: "
                                    f"{'; '.join(problems)}")
        return harness

    def _host_cgroup_limits(self) -> dict[str, Any]:
        """The quota and cpuset the engine put on the sandbox's host cgroup (cgroup v1, cgroupfs
        driver: ``/docker/<id>``; None where this host keeps them elsewhere)."""
        found: dict[str, str] = {}
        for controller, name in (("cpu", "cpu.cfs_quota_us"), ("cpuset", "cpuset.cpus")):
            with contextlib.suppress(OSError):
                found[name] = (cgroups.ROOT / controller / "docker" / self.container.id / name).read_text().strip()
        if not found:
            return {"quota_cores": None, "cpus": None, "read": False}
        quota = int(found.get("cpu.cfs_quota_us", "-1"))
        return {"quota_cores": None if quota < 0 else quota / cgroups.CFS_PERIOD_US, "read": True,
                "cpus": list(parse_cpulist(found["cpuset.cpus"])) if "cpuset.cpus" in found else None}

    def expected(self) -> Expected:
        """gVisor's view: its own kernel, as many CPUs as the sandbox may use numbered from 0, its
        memory limit as its RAM (MemTotal), no cgroup files (the host's are checked from the host)."""
        cn = super().expected()
        cpus = len(self.cpus)
        return Expected(affinity=tuple(range(cpus)), nproc=cpus, cpu_count=cpus, check_quota=False,
                        kernel=GVISOR_RELEASE, container=cn.container, vm=None, memory_at_least_bytes=self.memory,
                        mem_total_at_most_bytes=self.memory, image=cn.image, privileges=PRIVILEGES)

    def host_problems(self) -> list[str]:
        """What the sandbox's host cgroup got against what was asked (empty: as asked, or not read)."""
        seen = getattr(self, "host_cgroup", None)
        if not seen or not seen["read"]:
            return []
        problems = []
        want, got = self.quota_cores, seen["quota_cores"]
        if (got is None) != (want is None) or (got is not None and want is not None and abs(got - want) > 1e-3):
            problems.append(f"sandbox cgroup CFS quota {got} cores != requested {want}")
        if self.placement is not None and tuple(seen["cpus"] or ()) != tuple(self.cpus):
            problems.append(f"sandbox cgroup cpuset {seen['cpus']} != requested {list(self.cpus)}")
        return problems

    def describe(self) -> dict[str, Any]:
        path = str(runtime_binary(RUNSC))
        return {**super().describe(), "runsc_platform": self.mode(self.config), "runsc_version": runsc_version(path),
                "sandbox_cgroup": getattr(self, "host_cgroup", None)}
