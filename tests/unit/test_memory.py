"""study.memory: one memory size for every platform. Its notation, the config check against this
host, what each platform asks its engine for (BM's cgroup, docker's --memory, a guest's RAM in the
domain XML, the microvm command line and Firecracker's config, VMCN's container), and verification
against what the harness saw (fake observations). Real runs: test_platform_bm.py, test_platform_cn.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import REPO, interleaved_two_socket, spec_document
from dlvirt.cli import EXIT_INPUT, main
from dlvirt.core.errors import ConfigError
from dlvirt.core.memory import parse_mib
from dlvirt.core.records import HarnessJob, JobSpec
from dlvirt.core.scenario import Scenario
from dlvirt.platforms import CLASSES
from dlvirt.platforms.base import Expected, PlatformError, verify
from dlvirt.platforms.bm import BareMetal
from dlvirt.platforms.cn import Container
from dlvirt.platforms.guest import BootFiles, guest_ram_mib
from dlvirt.platforms.mvm import MicroVM
from dlvirt.platforms.vm import VirtualMachine
from dlvirt.platforms.vmcn import SPEC, ContainerInVM
from dlvirt.run import runner
from dlvirt.system import cgroups, observe, topology

MIB = 1 << 20


def test_study_memory_is_mib_or_gib_with_its_unit():
    assert parse_mib("8g") == parse_mib("8G") == parse_mib("8192m") == 8192
    assert parse_mib("512m") == 512
    for bad in ("8", "8k", "8gb", "0g", "", "-1g", "1.5g"):
        with pytest.raises(ConfigError, match=r"^study\.memory: "):
            parse_mib(bad)


def test_a_guest_gets_study_memory_plus_a_stated_overhead():
    assert guest_ram_mib(8192) == 8192 + 256 + 256
    assert guest_ram_mib(384) == 384 + 256 + 12
    # what each platform takes from the host for it: the limit itself, a guest its RAM
    assert {name: cls.host_memory_mib(8192) for name, cls in CLASSES.items()} == {
        "BM": 8192, "CN": 8192, "VM": 8704, "MVM": 8704, "VMCN": 8704, "SCN": 8192}


def _check(tmp_path: Path, monkeypatch, yaml_text: str, host_mib: int) -> int:
    """dlvirt check-config of config/config.yaml + ``yaml_text`` on a host of ``host_mib`` MiB."""
    monkeypatch.chdir(REPO)
    monkeypatch.setattr("dlvirt.system.hostinfo.memory_bytes", lambda: host_mib * MIB)
    case = tmp_path / "case.yaml"
    case.write_text(yaml_text)
    return main(["check-config", "config/config.yaml", str(case), "--checksum-cache", str(tmp_path / "c.json")])


def test_config_check_fits_the_largest_planned_platform_into_the_host(tmp_path, monkeypatch, capsys):
    # 8 GiB fits a 8500 MiB host as a limit, but not as a guest's 8704 MiB of RAM
    guests = "study: {memory: 8g}\n"
    code = _check(tmp_path, monkeypatch, guests, 8500)
    err = capsys.readouterr().err
    assert code == EXIT_INPUT
    assert ("study.memory: 8192 MiB + 512 MiB guest overhead (MVM's RAM) is more than this host's memory "
            "(8500 MiB)") in err
    bare = "study:\n  memory: 8g\n  matrix: [{platforms: [BM, CN], cores: [1], pinning: [PIN], processors: [CPU]}]\n"
    code = _check(tmp_path, monkeypatch, bare, 8500)
    assert code == 0, capsys.readouterr().err
    code = _check(tmp_path, monkeypatch, bare, 8000)
    assert code == EXIT_INPUT
    assert "study.memory: 8192 MiB is more than this host's memory (8000 MiB)" in capsys.readouterr().err


def _platform(cls, scenario: str, tmp_path: Path, **settings):
    return cls(Scenario.parse(scenario), {"memory_mib": 8192, **settings}, tmp_path / "w", "1-abc")


def _booted(guest, tmp_path: Path):
    """A guest platform as provision() leaves it, without the host's capabilities or an image."""
    guest.boot_files = BootFiles(tmp_path / "vmlinuz", tmp_path / "initrd.img", tmp_path / "rootfs.img", {})
    guest.vcpus, guest.accel, guest.placement, guest.host_cpus = guest.scenario.cores, "tcg", None, None
    return guest


def test_vm_domain_has_study_memory_plus_the_overhead(tmp_path):
    vm = _booted(_platform(VirtualMachine, "VM/1/VNL/CPU", tmp_path), tmp_path)
    vm.gpu_pci, vm.qemu_user = None, (999, 994)  # libvirt-qemu's uid, kvm's gid (provision looks them up)
    dom = ET.fromstring(vm.domain_definition("tcg", tmp_path / "r.qcow2", tmp_path / "j.img", tmp_path / "c"))
    assert (dom.find("memory").get("unit"), dom.findtext("memory")) == ("MiB", "8704")
    # pinned over two host nodes: the guest's NUMA cells share out the same RAM
    vm.placement = topology.place(topology.read(interleaved_two_socket(tmp_path)), 8)
    dom = ET.fromstring(vm.domain_definition("tcg", tmp_path / "r.qcow2", tmp_path / "j.img", tmp_path / "c"))
    assert sum(int(c.get("memory")) for c in dom.findall("cpu/numa/cell")) == 8704


class _Started(Exception):
    pass


def test_mvm_command_line_and_firecracker_config_give_the_guest_its_ram(tmp_path, monkeypatch):
    mvm = _booted(_platform(MicroVM, "MVM/1/VNL/CPU", tmp_path), tmp_path)
    mvm._disk_dir = tmp_path
    started: list[list[str]] = []

    def popen(cmd, **_kwargs):
        started.append(cmd)
        raise _Started

    monkeypatch.setattr("dlvirt.platforms.mvm.subprocess.Popen", popen)
    mvm.firecracker = None
    for name in ("r.qcow2", "j.img", "console"):  # QEMU is handed them open
        (tmp_path / name).touch()
    with pytest.raises(_Started):
        mvm._start_vmm("tcg", tmp_path / "r.qcow2", tmp_path / "j.img", tmp_path / "console")
    qemu = started[-1]
    assert qemu[qemu.index("-m") + 1] == "8704"
    assert qemu[qemu.index("-runas") + 1] == f"{mvm.own_vmm_uid()}:{mvm.own_vmm_uid()}"  # this job's own uid
    assert mvm.vmm_uid is not None
    mvm.vmm_uid.release()  # as teardown does
    mvm.firecracker = "/usr/bin/firecracker"
    with pytest.raises(_Started):
        mvm._start_vmm("kvm", tmp_path / "r.img", tmp_path / "j.img", tmp_path / "console")
    config = json.loads((tmp_path / "firecracker.json").read_text())
    assert config["machine-config"]["mem_size_mib"] == 8704


def test_a_guest_without_study_memory_is_refused(tmp_path):
    vm = VirtualMachine(Scenario("VM", 1, "VNL", "CPU"), {}, tmp_path, "1-abc")
    with pytest.raises(PlatformError, match=r"memory_mib \(study.memory\)"):
        _ = vm.ram_mib


def test_vmcn_container_limit_is_study_memory_inside_a_guest_of_memory_plus_overhead(tmp_path, monkeypatch):
    vmcn = _booted(_platform(ContainerInVM, "VMCN/1/VNL/CPU", tmp_path), tmp_path)
    vmcn._disk_dir, vmcn.image = tmp_path, "dlvirt-cn:0123"
    sent: dict = {}

    def execute(_script, _timeout, *, files, job):
        sent.update(json.loads(files[SPEC].read_text()))
        raise _Started

    monkeypatch.setattr(vmcn, "execute", execute)
    job = HarnessJob.of(JobSpec.from_dict(_spec(tmp_path)), dataset_dir=str(tmp_path), run_id="1-abc")
    with pytest.raises(_Started):
        vmcn.run(job, 60)
    assert sent["container"]["memory_mib"] == 8192
    expected = vmcn.expected()
    assert expected.memory_limit_bytes == expected.memory_at_least_bytes == 8192 * MIB
    assert expected.mem_total_at_most_bytes == 8704 * MIB
    # inside the guest, the CN platform gives the container exactly that (--memory = --memory-swap)
    container = Container(Scenario("CN", 1, "VNL", "CPU"), sent["container"], tmp_path / "c", "1-abc")
    container.memory, container.placement, container.cpus = 8192 * MIB, None, (0,)
    host_config = container._host_config(tmp_path / "job.json", tmp_path / "out", job)
    assert host_config["mem_limit"] == host_config["memswap_limit"] == 8192 * MIB


def _spec(tmp_path: Path, **platform_settings) -> dict:
    return spec_document("ic", tmp_path, repetitions=1, warmup_repetitions=0, timeout_s=60,
                         platform_settings=platform_settings)


def test_a_node_with_less_memory_than_study_memory_refuses_the_job(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "memory_bytes", lambda: 4096 * MIB)
    with pytest.raises(PlatformError, match=r"study.memory of 8192 MiB \(8192 MiB for BM\) is more than this "
                                            r"machine's 4096 MiB"):
        runner.check_node(BareMetal, JobSpec.from_dict(_spec(tmp_path, memory_mib=8192)))
    runner.check_node(BareMetal, JobSpec.from_dict(_spec(tmp_path, memory_mib=2048)))


BM_OBSERVED = {"virtualization": {"container": "none", "vm": "none"}, "quota_cores": None,
               "memory_limit_bytes": 8192 * MIB, "mem_total_bytes": 24000 * MIB}


def test_verification_compares_the_memory_the_harness_saw_with_study_memory():
    bm = Expected(check_quota=False, memory_limit_bytes=8192 * MIB, memory_at_least_bytes=8192 * MIB)
    assert verify(bm, BM_OBSERVED) == []
    # no limit (the cgroup did not take), or an enclosing one tighter than study.memory
    assert verify(bm, {**BM_OBSERVED, "memory_limit_bytes": None}) == [
        f"memory limit None bytes != requested {8192 * MIB} (study.memory)"]
    assert verify(bm, {**BM_OBSERVED, "memory_limit_bytes": 2048 * MIB}) == [
        f"memory limit {2048 * MIB} bytes != requested {8192 * MIB} (study.memory)",
        "the harness lives under a memory limit of 2048 MiB, less than the 8192 MiB of study.memory "
        "(an enclosing cgroup limits the runner)"]
    # a host with less RAM than the limit would page before the limit is reached
    assert verify(bm, {**BM_OBSERVED, "mem_total_bytes": 6000 * MIB}) == [
        "its kernel has 6000 MiB of RAM (MemTotal), less than the 8192 MiB of study.memory"]
    guest = Expected(check_quota=False, memory_at_least_bytes=8192 * MIB, mem_total_at_most_bytes=8704 * MIB)
    inside = {**BM_OBSERVED, "memory_limit_bytes": None, "mem_total_bytes": 8450 * MIB}
    assert verify(guest, inside) == []
    assert verify(guest, {**inside, "mem_total_bytes": 8000 * MIB}) == [
        "its kernel has 8000 MiB of RAM (MemTotal), less than the 8192 MiB of study.memory"]
    assert verify(guest, {**inside, "mem_total_bytes": 16000 * MIB}) == [
        "its kernel has 16000 MiB of RAM (MemTotal), more than the 8704 MiB the guest was given"]


def test_bm_expects_the_limit_and_describes_it(tmp_path):
    bm = _platform(BareMetal, "BM/1/PIN/CPU", tmp_path)
    bm.cpus, bm.host_quota, bm.placement, bm.mems = (0,), None, None, None
    bm.host_virt = {"container": "none", "vm": "none"}
    expected = bm.expected()
    assert expected.memory_limit_bytes == expected.memory_at_least_bytes == 8192 * MIB
    unlimited = BareMetal(Scenario("BM", 1, "PIN", "CPU"), {}, tmp_path, "1-abc")
    unlimited.cpus, unlimited.host_quota, unlimited.placement, unlimited.mems = (0,), None, None, None
    unlimited.host_virt = bm.host_virt
    assert unlimited.expected().memory_limit_bytes is None  # a hand-made spec that asks for no limit


def test_observe_records_the_kernel_ram_and_the_cgroup_limit():
    seen = observe.observe()
    assert seen["mem_total_bytes"] > 0
    assert seen["memory_limit_bytes"] == cgroups.effective_memory_limit_bytes()


@pytest.mark.skipif(os.geteuid() != 0, reason="creating a cgroup needs root")
def test_a_memory_cgroup_is_seen_from_inside_and_removed():
    """cgroups.create(memory_bytes=...) on this host's hierarchy (v1 memory controller or v2
    memory.max), read back by a process in it, then removed."""
    name = f"dlvirt-{os.getpid()}-memtest"
    try:
        group = cgroups.create(name, memory_bytes=768 * MIB)
    except cgroups.CgroupError as exc:
        pytest.skip(f"no memory controller to use here: {exc}")
    try:
        probe = ("from dlvirt.system import cgroups; import json; "
                 "print(json.dumps(cgroups.effective_memory_limit_bytes()))")
        proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONPATH": str(REPO / "src")},
                              preexec_fn=lambda: group.attach(os.getpid()))
        assert json.loads(proc.stdout) == 768 * MIB
    finally:
        group.remove()
    assert not any(d.name == name for base in cgroups.v1_hierarchies() + [cgroups.ROOT] for d in base.iterdir())
