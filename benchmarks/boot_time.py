#!/usr/bin/env python
"""Boot-to-job time of a VM (libvirt/QEMU, pc machine) and an MVM (Firecracker or QEMU microvm),
side by side, measured as in every benchmark run: from starting the VMM to the guest's job-start
marker on its serial console.

Each guest boots the same image (kernel, initrd, root disk) with the same vCPUs and memory and runs
an empty job. The accelerator (KVM, or TCG where KVM cannot boot an ordinary kernel) is printed
with the numbers: TCG times are not what a KVM host gives.

    python benchmarks/boot_time.py [--image resources/guest/probe] [--boots 3] [--vcpus 1]

Without --image a probe image (python3 only) is built into a temporary folder first (~1 min).
Run as root (libvirt's system instance; virtlogd/libvirtd are started when none answers).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import tempfile
from pathlib import Path

from dlvirt.core.scenario import Scenario
from dlvirt.platforms import guestimage
from dlvirt.platforms.mvm import MicroVM
from dlvirt.platforms.vm import VirtualMachine
from dlvirt.run.runner import new_run_id


def boot_times(cls: type[VirtualMachine] | type[MicroVM], image: Path, vcpus: int, boots: int,
               work: Path) -> tuple[list[float], str, str]:
    times = []
    accel = vmm = ""
    for _ in range(boots):
        settings = {"image_dir": str(image), "memory_mib": 512, "boot_timeout_s": 600, "allow_emulation": True}
        with cls(Scenario(cls.name, vcpus, "VNL", "CPU"), settings, work / cls.name, new_run_id()) as platform, \
                contextlib.redirect_stdout(io.StringIO()):  # the guest's console, streamed for job logs
            platform.execute("true\n", timeout_s=120)
            facts = platform.describe()
        times.append(float(facts["boot_s"]))
        accel, vmm = facts["accel"], facts["vmm"]
    return times, accel, vmm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", type=Path, help="a guest image directory (default: build a probe image)")
    parser.add_argument("--boots", type=int, default=3)
    parser.add_argument("--vcpus", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dlvirt-boot-") as tmp:
        work = Path(tmp)
        image = args.image
        if image is None:
            image = work / "probe"
            guestimage.build("probe", image)
        rows = [(cls.name, *boot_times(cls, image, args.vcpus, args.boots, work)) for cls in (VirtualMachine, MicroVM)]
    load = os.getloadavg()[0]
    print(f"boot-to-job time, {args.boots} boots each, {args.vcpus} vCPU(s), host {os.uname().nodename}, "
          f"load average {load:.1f}")
    print(f"{'platform':<9}{'vmm':<14}{'accel':<7}{'mean s':>8}{'min s':>8}{'max s':>8}")
    for name, times, accel, vmm in rows:
        print(f"{name:<9}{vmm:<14}{accel:<7}{statistics.mean(times):>8.2f}{min(times):>8.2f}{max(times):>8.2f}")


if __name__ == "__main__":
    main()
