"""Bare metal (BM): the harness as a plain host process.

``BM/N/PIN`` sets the harness's CPU affinity to the N host cores placement picks (sched_setaffinity,
what a cpuset does for one process) and, where the host has more NUMA nodes than those cores use, a
cpuset cgroup binds its memory to their nodes (``cpuset.mems``). ``BM/N/VNL`` leaves every host core
visible but puts the harness in a cgroup with a CFS quota of N cores: the mechanism behind Docker's
``--cpus``, so BM and CN are comparable. Either way the cgroup limits its memory to
``study.memory`` (the memory controller, no swap), as ``docker --memory`` limits a container's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from dlvirt.core.kinds import PlatformKind
from dlvirt.core.records import HarnessJob, HarnessOutput
from dlvirt.core.scenario import Scenario
from dlvirt.platforms.base import Expected, Platform, PlatformError
from dlvirt.system import cgroups, observe, topology
from dlvirt.system.hostinfo import Capabilities


def harness_command(job_path: Path, out_dir: Path) -> list[str]:
    return [sys.executable, "-m", "dlvirt.run.launch", str(job_path), str(out_dir)]


def run_harness_process(cmd: list[str], env: dict[str, str], timeout_s: float,
                        preexec: Any = None) -> None:
    """Run the harness to completion; kill it at the timeout. Output goes to our stdout/stderr (the job log)."""
    proc = subprocess.Popen(cmd, env=env, preexec_fn=preexec)  # noqa: S603 - our own interpreter
    try:
        returncode = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise PlatformError(f"harness exceeded the {timeout_s:.0f} s timeout and was killed") from None
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if returncode != 0:
        raise PlatformError(f"harness exited with status {returncode} (see the log above)")


class BareMetal(Platform):
    kind = PlatformKind(name="BM", title="bare metal: a cgroup on the host", order=0, colour=0,
                        virtualised=False, runs_on_edge=True)

    @classmethod
    def unavailable_reason(cls, scenario: Scenario, caps: Capabilities, config: dict[str, Any]) -> str | None:
        why = super().unavailable_reason(scenario, caps, config)
        if why is None and not scenario.pinned and caps.cgroup_version is None:
            return "no cgroup CPU controller to set a CFS quota for VNL"
        return why

    def provision(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.host_cpus = tuple(sorted(os.sched_getaffinity(0)))
        self.host_quota = cgroups.effective_quota_cores()
        self.host_virt = observe.virtualization()
        self.host_mems = topology.mems_allowed()
        self.cgroup: cgroups.Cgroup | None = None
        self.cpus: tuple[int, ...] = self.host_cpus
        self.placement: topology.Placement | None = None
        self.mems = self.host_mems
        limits: dict[str, Any] = {}
        if self.memory_mib is not None:
            limits["memory_bytes"] = self.memory_mib << 20
        if self.scenario.pinned:
            self.placement = self.place(self.host_cpus)
            self.cpus = self.placement.cpus
            if self.host_mems is not None and set(self.placement.mems) < set(self.host_mems):
                self.mems = self.placement.mems
                limits.update(cpus=self.cpus, mems=self.mems)
        else:
            limits["quota_cores"] = float(self.scenario.cores)
        if limits:
            self.cgroup = cgroups.create(f"dlvirt-{self.run_id}", **limits)

    def _preexec(self) -> None:
        if self.cgroup is not None:
            self.cgroup.attach(os.getpid())
        os.sched_setaffinity(0, self.cpus)

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.scenario.processor == "CPU":
            env["CUDA_VISIBLE_DEVICES"] = ""
        return env

    def run(self, job: HarnessJob, timeout_s: float) -> HarnessOutput:
        job_path = self.workdir / "job.json"
        out_dir = self.workdir / "out"
        job.write(job_path)
        run_harness_process(harness_command(job_path, out_dir), self.environment(), timeout_s, self._preexec)
        return HarnessOutput.read(out_dir / "harness.json")

    def expected(self) -> Expected:
        # PIN: the runner's own quota, if any, carries over; VNL: ours is the tightest. Either way
        # no quota above the harness may grant fewer cores than asked.
        cores = float(self.scenario.cores)
        placed = self.placement
        memory = None if self.memory_mib is None else self.memory_mib << 20
        return Expected(affinity=self.cpus, nproc=len(self.cpus),
                        quota_cores=self.host_quota if self.scenario.pinned else cores, quota_at_least=cores,
                        container=self.host_virt["container"], vm=self.host_virt["vm"], mems=self.mems,
                        sockets=placed.sockets if placed else None, nodes=placed.nodes if placed else None,
                        memory_limit_bytes=memory, memory_at_least_bytes=memory)

    def teardown(self) -> None:
        group = getattr(self, "cgroup", None)
        if group is not None:
            group.remove()
            self.cgroup = None

    def describe(self) -> dict[str, Any]:
        if self.scenario.pinned:
            mechanism = "sched_setaffinity" + (f" + cgroup v{cgroups.version()} cpuset.mems"
                                               if self.mems != self.host_mems else "")
        else:
            mechanism = f"cgroup v{cgroups.version()} CFS quota"
        return {"platform": self.name, "engine": "host process", "cpu_mechanism": mechanism,
                "memory_mib": self.memory_mib,
                "memory_mechanism": None if self.memory_mib is None else f"cgroup v{cgroups.version()} memory limit",
                "accel": "none", "cpus": list(self.cpus),
                "placement": self.placement.to_dict() if self.placement else None,
                "mems": list(self.mems) if self.mems is not None else None}
