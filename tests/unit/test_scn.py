"""The container platforms' axis: the OCI runtime as a setting, what dlvirt's dockerd registers,
SCN's availability, gVisor's expected view and the sandbox's host cgroup check (the real runs are
tests/integration/test_platform_scn.py)."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Literal

import pandas as pd
import pytest

from dlvirt.core.scenario import Scenario
from dlvirt.platforms import CLASSES, KINDS, container_platform, container_platforms
from dlvirt.platforms import cn as cn_module
from dlvirt.platforms import scn as scn_module
from dlvirt.platforms.base import verify
from dlvirt.platforms.cn import Container, container_runtimes
from dlvirt.platforms.scn import GVISOR_RELEASE, SandboxedContainer
from dlvirt.system import docker_engine, observe
from dlvirt.system.hostinfo import Capabilities
from dlvirt.system.topology import Placement


@pytest.fixture
def installed(monkeypatch):
    """Every runtime but ``kata-runtime`` installed, under /usr/bin."""
    def which(name: str) -> str | None:
        return None if name == "kata-runtime" else f"/usr/bin/{name}"

    monkeypatch.setattr(cn_module, "runtime_binary", which)
    monkeypatch.setattr(scn_module, "runtime_binary", which)


def test_every_platform_of_the_container_image_is_a_container_platform_on_cns_engine():
    assert container_platforms() == ["CN", "SCN"] and container_platform() == "CN"
    assert all(issubclass(CLASSES[name], Container) for name in container_platforms())
    assert KINDS["SCN"].image == KINDS["CN"].image and KINDS["SCN"].virtualised


def test_dlvirts_dockerd_registers_each_container_platforms_installed_runtime(installed):
    assert container_runtimes({"CN": {}, "SCN": {}}) == {
        "runsc-ptrace": {"path": "/usr/bin/runsc", "runtimeArgs": ["--platform=ptrace", "--network=none"]}}
    found = container_runtimes({"CN": {"runtime": "crun"}, "SCN": {"runsc_platform": "kvm"}})
    assert found == {"crun": {"path": "/usr/bin/crun"},
                     "runsc-kvm": {"path": "/usr/bin/runsc", "runtimeArgs": ["--platform=kvm", "--network=none"]}}
    # a runtime not installed is not registered (its scenarios are left out with the reason)
    assert "kata-runtime" not in container_runtimes({"CN": {"runtime": "kata-runtime"}})
    assert json.loads(docker_engine.daemon_config(found)) == {"runtimes": found}
    assert json.loads(docker_engine.daemon_config({})) == {}


def test_the_runtime_is_a_config_line_and_runc_by_default():
    assert Container.runtime_name({}) == "runc" and Container.runtime_name({"runtime": "crun"}) == "crun"
    assert Container.registered_runtime({}) is None  # Docker's own: nothing to register
    assert SandboxedContainer.runtime_name({"runsc_platform": "systrap"}) == "runsc-systrap"


def capabilities(gpus: tuple[str, ...] = ()) -> Capabilities:
    return Capabilities(cpus=(0, 1), gpus=gpus, kvm_device=False, hw_virt=False, qemu=False, libvirt=False,
                        cgroup_version=1)


def config(platforms: dict | None = None) -> dict:
    return {"platforms": {"CN": {"image": "dlvirt-cn:x", "engine": {"host": "unix:///x.sock"}}, **(platforms or {})}}


def test_a_runtime_that_is_not_installed_leaves_its_scenarios_out_with_the_reason(installed):
    caps = capabilities()
    why = Container.unavailable_reason(Scenario("CN", 1, "VNL", "CPU"), caps, config({"CN": {
        "image": "dlvirt-cn:x", "engine": {"host": "unix:///x.sock"}, "runtime": "kata-runtime"}}))
    assert why is not None and "'kata-runtime' (platforms.CN.runtime) is not installed" in why


def test_scn_needs_a_runsc_with_the_platform_asked_and_nvproxy_for_a_gpu(installed, monkeypatch):
    flags = ("  -platform string\n    \tspecifies which platform to use: ptrace (default), kvm. (default \"ptrace\")\n"
             "  -profile\n")
    monkeypatch.setattr(scn_module, "runsc_flags", lambda path: flags)
    monkeypatch.setattr(scn_module, "runsc_version", lambda path: "0.0~20221219.0")
    monkeypatch.setattr(scn_module, "kvm_usable", lambda: False)
    caps = capabilities(gpus=("GPU 0",))
    assert SandboxedContainer.unavailable_reason(Scenario("SCN", 1, "PIN", "CPU"), caps, config()) is None
    why = SandboxedContainer.unavailable_reason(Scenario("SCN", 1, "VNL", "CPU"), caps,
                                                config({"SCN": {"runsc_platform": "systrap"}}))
    assert why == "runsc 0.0~20221219.0 has no systrap platform (platforms.SCN.runsc_platform)"
    why = SandboxedContainer.unavailable_reason(Scenario("SCN", 1, "VNL", "CPU"), caps,
                                                config({"SCN": {"runsc_platform": "kvm"}}))
    assert why is not None and "/dev/kvm" in why
    why = SandboxedContainer.unavailable_reason(Scenario("SCN", 1, "VNL", "GPU"), caps, config())
    assert why is not None and "no nvproxy" in why


def sandbox(tmp_path: Path, pinning: Literal["VNL", "PIN"], cpus: tuple[int, ...]) -> SandboxedContainer:
    platform = SandboxedContainer(Scenario("SCN", len(cpus), pinning, "CPU"), {"memory_mib": 4096}, tmp_path, "1-abc")
    platform.cpus, platform.memory = cpus, 4 << 30
    platform.placement = Placement(cpus=cpus, mems=(0,), sockets=1, nodes=1, policy="compact", vcpu_order=cpus,
                                   node_of={}, socket_of={}, threads_per_core=1, spare_cpu=None) \
        if pinning == "PIN" else None
    platform.engine, platform.image_label = {"NCPU": 4}, "dlvirt-cn:x"
    platform.container = type("C", (), {"id": "f" * 64})()
    return platform


GVISOR_VIEW = {"affinity": [0], "nproc": 1, "cpu_count": 1, "quota_cores": None, "kernel": GVISOR_RELEASE,
               "virtualization": {"container": "docker", "vm": "none"}, "cgroup": {}, "image": "dlvirt-cn:x",
               "memory_limit_bytes": None, "mem_total_bytes": 4 << 30,
               "privileges": {"uid": 65534, "euid": 65534, "cap_eff": "0000000000000000", "no_new_privs": 1,
                              "seccomp": 0}}


def test_gvisors_view_is_verified_its_kernel_cpus_from_zero_and_ram(tmp_path):
    expected = sandbox(tmp_path, "PIN", (3,)).expected()
    assert verify(expected, GVISOR_VIEW) == []
    host_kernel = {**GVISOR_VIEW, "kernel": "6.1.0-28-amd64"}  # a runc container: the host's kernel
    assert verify(expected, host_kernel) == ["kernel '6.1.0-28-amd64' != the guest's '4.4.0'"]
    assert verify(expected, {**GVISOR_VIEW, "mem_total_bytes": 24 << 30})  # more RAM than its limit
    assert verify(expected, {**GVISOR_VIEW, "affinity": [0, 1], "nproc": 2})  # more CPUs than pinned


def test_the_sandboxs_host_cgroup_must_hold_the_quota_or_cpuset_asked(tmp_path):
    vanilla = sandbox(tmp_path, "VNL", (0, 1, 2, 3))
    vanilla.scenario = Scenario("SCN", 1, "VNL", "CPU")
    vanilla.host_cgroup = {"quota_cores": 1.0, "cpus": [0, 1, 2, 3], "read": True}
    assert vanilla.host_problems() == []
    vanilla.host_cgroup = {"quota_cores": None, "cpus": [0, 1, 2, 3], "read": True}
    assert vanilla.host_problems() == ["sandbox cgroup CFS quota None cores != requested 1.0"]
    pinned = sandbox(tmp_path, "PIN", (3,))
    pinned.host_cgroup = {"quota_cores": None, "cpus": [2], "read": True}
    assert pinned.host_problems() == ["sandbox cgroup cpuset [2] != requested [3]"]
    pinned.host_cgroup = {"quota_cores": None, "cpus": None, "read": False}  # cgroup v2 / systemd: not read
    assert pinned.host_problems() == []


def test_no_new_privs_is_asked_of_the_kernel_where_the_status_file_lacks_it(tmp_path):
    status = tmp_path / "status"
    status.write_text("Uid:\t65534\t65534\t65534\t65534\nCapEff:\t0000000000000000\nSeccomp:\t0\n")  # gVisor's
    assert observe.privileges(status)["no_new_privs"] == observe.no_new_privs_flag() in (0, 1)
    status.write_text(status.read_text() + "NoNewPrivs:\t1\n")
    assert observe.privileges(status)["no_new_privs"] == 1


# -- the extension claim: the sandbox's cost falls on pre-processing, not on inference -----------------

def sandbox_row(platform: str, pinning: str, pre: float, infer: float, spread: float = 0.01) -> dict:
    """A summary row of 4 launches whose phase means spread by about ``spread`` (relative), in a
    pattern that differs per row so that the rounds do not explain it away."""
    offsets = [-1.0, 1.0, 0.5, -0.5] if pinning == "VNL" else [1.0, -1.0, -0.5, 0.5]
    offsets = offsets if platform == "CN" else offsets[::-1]

    def launches(mean: float) -> str:
        return ";".join(f"{mean * (1 + spread * o):.6g}" for o in offsets)

    return {"tool": "mlperf", "app": "ic", "platform": platform, "cores": 1, "pinning": pinning, "processor": "CPU",
            "scenario": f"{platform}/1/{pinning}/CPU", "mean_s": pre + infer, "ci95_s": 0.1, "reps": 2,
            "min_reps": 2, "replicates": 4, "round_means_s": launches(pre + infer), "launch_rounds": "1;2;3;4",
            "round_pre_s": launches(pre), "round_infer_s": launches(infer), "accel": "none", "site": "local"}


def sandbox_verdict(rows: list[dict]) -> tuple[str, str]:
    from dlvirt.analysis.claims import evaluate

    table = evaluate(pd.DataFrame(rows), 2, []).set_index("id")
    return table.loc["sandbox_pre_not_infer", "verdict"], table.loc["sandbox_pre_not_infer", "evidence"]


def test_a_sandbox_that_slows_pre_processing_only_holds():
    from dlvirt.analysis.claims import HOLDS

    rows = [sandbox_row("CN", m, 2.0, 3.0) for m in ("VNL", "PIN")]
    rows += [sandbox_row("SCN", m, 3.0, 3.01) for m in ("VNL", "PIN")]
    got, evidence = sandbox_verdict(rows)
    assert got == HOLDS, evidence
    assert "pre-processing SCN/CN over 2 pair(s)" in evidence and "inference SCN/CN over 2 pair(s)" in evidence


def test_a_sandbox_that_slows_inference_as_much_does_not_hold():
    from dlvirt.analysis.claims import FAILS

    rows = [sandbox_row("CN", m, 2.0, 3.0) for m in ("VNL", "PIN")]
    rows += [sandbox_row("SCN", m, 3.0, 4.5) for m in ("VNL", "PIN")]
    assert sandbox_verdict(rows)[0] == FAILS


def test_without_scn_rows_the_sandbox_claim_is_not_testable():
    from dlvirt.analysis.claims import UNTESTABLE

    got, evidence = sandbox_verdict([sandbox_row("CN", "VNL", 2.0, 3.0)])
    assert got == UNTESTABLE and "no SCN and CN rows" in evidence


def test_a_harness_killed_by_sigfpe_in_gvisor_is_explained():
    """TensorFlow's oneDNN kernels died with SIGFPE under runsc on an AMD EPYC guest: SCN's error
    says so and what runs there; CN's error adds nothing to the status."""
    assert "SIGFPE inside gVisor" in SandboxedContainer.exit_hint(128 + signal.SIGFPE)
    assert SandboxedContainer.exit_hint(1) == "" and Container.exit_hint(128 + signal.SIGFPE) == ""


def test_crun_on_a_hybrid_host_whose_cgroup2_tree_has_controllers_gets_a_dockerd_without_it(tmp_path, monkeypatch):
    """crun (1.8) refuses to create containers where v1 controllers sit beside a cgroup2 tree that
    holds controllers (2-core EPYC and Xeon guests: hugetlb): dlvirt's own dockerd then runs where
    that tree is unmounted; through an engine not its own the plan leaves crun out, saying why."""
    from dlvirt.system import cgroups, docker_engine

    (tmp_path / "cgroup.controllers").write_text("hugetlb\n")
    monkeypatch.setattr(cgroups, "version", lambda: 1)
    assert cgroups.hybrid_v2_controllers(tmp_path) == ["hugetlb"]
    monkeypatch.setattr(cgroups, "version", lambda: 2)
    assert cgroups.hybrid_v2_controllers(tmp_path) == []
    monkeypatch.setattr(cgroups, "hybrid_v2_controllers", lambda: ["hugetlb"])
    crun = {"crun": {"path": "/usr/bin/crun"}}
    assert cn_module.refuses_hybrid(crun) and not cn_module.refuses_hybrid({"runsc": {"path": "/usr/bin/runsc"}})
    plain = docker_engine.dockerd("d", "/var/lib/d", "/usr/sbin/dockerd").command
    hidden = docker_engine.dockerd("d", "/var/lib/d", "/usr/sbin/dockerd", hide_cgroup2=True).command
    assert hidden[:5] == ("unshare", "--mount", "--propagation", "slave", "--")
    assert hidden[-len(plain) - 1:] == (str(cgroups.HYBRID_V2), *plain)  # the shell's $0, unmounted; then dockerd
    monkeypatch.setattr(docker_engine, "starts_own", lambda settings: True)
    assert cn_module.runtime_problem("crun", {}) is None
    monkeypatch.setattr(docker_engine, "starts_own", lambda settings: False)
    assert "hybrid cgroups" in (cn_module.runtime_problem("crun", {}) or "")
    assert cn_module.runtime_problem("runc", {}) is None and cn_module.runtime_problem("runsc", {}) is None
    monkeypatch.setattr(cgroups, "hybrid_v2_controllers", lambda: [])
    assert not cn_module.refuses_hybrid(crun)
