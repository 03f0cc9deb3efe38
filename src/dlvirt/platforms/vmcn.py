"""Container in a VM (VMCN): the VM platform boots the Docker guest image, and inside the guest
dlvirt's CN platform runs the harness container exactly as it does on a host.

``VMCN/N/VNL`` = a VM with N unpinned vCPUs, container ``--cpus=N``; the container's ``--memory`` is
``study.memory``, the guest's RAM that plus the guest overhead. ``VMCN/N/PIN`` = vCPUs pinned to
N host cores (checked from the host) and container ``--cpuset-cpus`` on the guest's N CPUs. The
guest image carries the CN image preloaded (``guestimage`` variant ``docker``), so the container is
the very image CN runs. Inside, the CN platform verifies what the container saw (cgroup, quota,
cpuset, memory limit, image, the unprivileged user) and the job fails on any difference; the host
verifies it again.

Run inside the guest as ``python -m dlvirt.platforms.vmcn SPEC.json`` (written by the host).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from dlvirt.core.atomic import read_json, write_json_atomic
from dlvirt.core.kinds import PlatformKind
from dlvirt.core.records import HarnessJob, HarnessOutput
from dlvirt.core.scenario import Scenario
from dlvirt.platforms.base import Expected, PlatformError, mismatches
from dlvirt.platforms.guest import GUEST_JOB_DIR, guest_inputs
from dlvirt.platforms.vm import VirtualMachine
from dlvirt.system.engines import Daemon
from dlvirt.system.hostinfo import Capabilities

SPEC = "vmcn.json"
CONTAINER_FACTS = "container.json"
GUEST_DOCKER_URL = "unix:///var/run/docker.sock"
DOCKERD_READY_S = 600  # dockerd's first start under TCG takes a while


class ContainerInVM(VirtualMachine):
    kind = PlatformKind(name="VMCN", title="container in a VM: Docker inside the VM platform's guest", order=3,
                        colour=3, virtualised=True, image="docker")

    @classmethod
    def unavailable_reason(cls, scenario: Scenario, caps: Capabilities, config: dict[str, Any]) -> str | None:
        from dlvirt.platforms.cn import Container

        why = super().unavailable_reason(scenario, caps, config)
        if why is None and scenario.processor == "GPU":
            why = ("VMCN with a GPU needs the NVIDIA driver and Container Toolkit in the guest image, "
                   "which this version of dlvirt does not build")
        # the CN image (built or pulled on the host's engine) is preloaded into the guest image
        return why or Container.unavailable_reason(scenario, caps, config)

    @classmethod
    def daemons(cls, platforms: dict[str, Any]) -> list[Daemon]:
        from dlvirt.platforms.cn import Container

        # the host's engine (platforms.CN.engine) holds the CN image that the guest image preloads
        return [*super().daemons(platforms), *Container.daemons(platforms)]

    def provision(self) -> None:
        super().provision()
        self.image = self.boot_files.image.get("docker_image")
        if not self.image:
            raise PlatformError(f"the guest image {self.boot_files.rootfs.parent} has no preloaded CN image")
        self.container_facts: dict[str, Any] = {}

    def guest_script(self, job: HarnessJob) -> str:
        return (f"export DOCKER_HOST={GUEST_DOCKER_URL}\n"
                f"dockerd --host {GUEST_DOCKER_URL} --iptables=false --ip-forward=false --bridge=none "
                f"> /tmp/dockerd.log 2>&1 &\n"
                f"i=0; until docker info > /dev/null 2>&1; do i=$((i+1)); "
                f"[ $i -gt {DOCKERD_READY_S} ] && {{ tail /tmp/dockerd.log; exit 70; }}; sleep 1; done\n"
                f"PYTHONPATH={GUEST_JOB_DIR}/src {self.guest_python} -m dlvirt.platforms.vmcn "
                f"{GUEST_JOB_DIR}/{SPEC}\n")

    def run(self, job: HarnessJob, timeout_s: float) -> HarnessOutput:
        guest_job, files = guest_inputs(job)
        spec = self.disk_dir / SPEC
        write_json_atomic(spec, {
            "scenario": self.scenario.to_dict(), "run_id": self.run_id, "timeout_s": timeout_s,
            "container": {"image": self.image, "memory_mib": self.memory_mib,
                          # the guest mirrors the host nodes its vCPUs use: place the cpuset there
                          "placement": self.config.get("placement")}})
        out = self.execute(self.guest_script(guest_job), timeout_s, files={**files, SPEC: spec}, job=guest_job)
        spec.unlink()
        self.container_facts = read_json(out / CONTAINER_FACTS)
        return HarnessOutput.read(out / "harness.json")

    def expected(self) -> Expected:
        from dlvirt.platforms.cn import PRIVILEGES

        cpus = tuple(range(self.vcpus))
        floor, ceiling = self.memory_bounds()
        return Expected(affinity=cpus, nproc=self.vcpus, cpu_count=self.vcpus,
                        quota_cores=None if self.scenario.pinned else float(self.scenario.cores),
                        # the container cannot name its hypervisor, but sees that it is in the guest
                        container="docker", vm=None, in_vm=True, pci_bus=True, kernel=self.guest_kernel(),
                        memory_limit_bytes=floor, memory_at_least_bytes=floor, mem_total_at_most_bytes=ceiling,
                        privileges=PRIVILEGES, **self.guest_span())

    def describe(self) -> dict[str, Any]:
        facts = super().describe()
        container = self.container_facts.get("describe") or {}
        facts.update({"engine": "libvirt + docker in the guest", "container": container or None,
                      "guest_docker_version": container.get("docker_version"),
                      "container_image": self.image,
                      "cpu_mechanism": ("libvirt <vcpupin> + docker --cpuset-cpus" if self.scenario.pinned
                                        else "unpinned vCPUs + docker --cpus (CFS quota)")})
        return facts


def guest_main(spec_path: Path) -> int:
    """Inside the guest: run the job through dlvirt's CN platform against the guest's dockerd."""
    from dlvirt.platforms.cn import Container

    spec = read_json(spec_path)
    job = HarnessJob.read(Path(GUEST_JOB_DIR) / "job.json")
    scenario = Scenario.from_dict(spec["scenario"])
    with Container(scenario, spec["container"], Path(GUEST_JOB_DIR), spec["run_id"]) as container:
        harness = container.run(job, float(spec["timeout_s"]))
        expected = container.expected()
        described = container.describe()
    problems = mismatches(expected, harness)
    write_json_atomic(Path(GUEST_JOB_DIR) / "out" / CONTAINER_FACTS,
                      {"describe": described, "expected": vars(expected), "problems": problems})
    if problems:
        print(f"dlvirt: the container in the guest did not get what was asked: {problems}", flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(guest_main(Path(sys.argv[1])))
