"""Topology-aware placement on server topologies this machine lacks (sysfs fixture trees), the
`dlvirt cpus` command, and the pinned VM's domain XML (numatune, guest sockets and cells, emulator pin)."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import (
    FIXTURES,
    contiguous_two_socket,
    four_nodes,
    interleaved_two_socket,
    interleaved_two_socket_smt,
    one_socket_smt,
    tool_env,
)
from dlvirt.core.scenario import Scenario
from dlvirt.platforms.base import Expected, verify
from dlvirt.platforms.bm import BareMetal
from dlvirt.platforms.vm import domain_xml, guest_layout
from dlvirt.system import topology
from dlvirt.system.topology import format_cpulist, parse_cpulist, place


def cpus_command(root: Path, cores: int, *extra: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "dlvirt", "cpus", "--sysfs", str(root), "--cores", str(cores),
                           *extra], capture_output=True, text=True, env=tool_env(), check=True)
    return json.loads(proc.stdout)


def test_cpulists_round_trip():
    assert parse_cpulist("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)
    assert format_cpulist([11, 0, 1, 2, 3, 8, 10]) == "0-3,8,10-11"
    assert parse_cpulist("") == ()


def test_interleaved_two_socket_keeps_four_cores_on_one_socket_and_its_memory(tmp_path):
    root = interleaved_two_socket(tmp_path)
    assert cpus_command(root, 4) == {"cpus": [0, 2, 4, 6], "mems": [0], "sockets": 1, "nodes": 1,
                                     "policy": "compact"}
    # "the first N CPUs" would have been 0-3: both sockets
    assert cpus_command(root, 6)["sockets"] == 2 and cpus_command(root, 6)["mems"] == [0, 1]
    spread = cpus_command(root, 4, "--placement", "spread")
    assert spread["cpus"] == [0, 1, 2, 3] and spread["mems"] == [0, 1] and spread["nodes"] == 2


def test_contiguous_two_socket(tmp_path):
    topo = topology.read(contiguous_two_socket(tmp_path))
    assert topo.nodes == (0, 1) and topo.packages == (0, 1)
    assert place(topo, 4).cpus == (0, 1, 2, 3) and place(topo, 4).mems == (0,)
    assert place(topo, 5).cpus == (0, 1, 2, 3, 4) and place(topo, 5).sockets == 2
    # a node that holds every core alone is used even when the first one is partly unavailable
    assert place(topo, 3, allowed={1, 2, 4, 5, 6, 7}).cpus == (4, 5, 6)
    assert place(topo, 4, "spread").cpus == (0, 1, 4, 5)


def test_smt_siblings_come_last_unless_asked_for(tmp_path):
    root = one_socket_smt(tmp_path)
    placed = cpus_command(root, 4)
    assert placed["cpus"] == [0, 1, 2, 3]  # four different physical cores
    topo = topology.read(root)
    cores = {topo.by_cpu()[c].core_key for c in placed["cpus"]}
    assert len(cores) == 4
    assert place(topo, 10).cpus == (*range(8), 8, 9)  # all 8 cores, then 2 siblings
    smt = place(topo, 4, "smt")
    assert smt.cpus == (0, 1, 8, 9) and smt.threads_per_core == 2
    assert smt.vcpu_order == (0, 8, 1, 9)  # sibling pairs adjacent, as guest threads


def test_paper_like_server_interleaved_with_smt(tmp_path):
    topo = topology.read(interleaved_two_socket_smt(tmp_path))
    assert topo.threads_per_core() == 2 and topo.describe()["sockets"] == 2
    p16 = place(topo, 4)
    assert p16.cpus == (0, 2, 4, 6) and p16.mems == (0,)
    # one node's physical cores, then the other node's, before any sibling
    assert place(topo, 8).cpus == tuple(range(8)) and place(topo, 8).sockets == 2
    assert set(place(topo, 9).cpus) - set(range(8)) == {8}


def test_four_numa_nodes(tmp_path):
    topo = topology.read(four_nodes(tmp_path))
    assert topo.nodes == (0, 1, 2, 3) and topo.describe()["numa_nodes"]["node2"] == "8-11"
    assert place(topo, 4).mems == (0,) and place(topo, 4).spare_cpu is None
    six = place(topo, 6)
    assert six.mems == (0, 1) and six.sockets == 1 and six.nodes == 2
    spread = place(topo, 4, "spread")
    assert spread.cpus == (0, 4, 8, 12) and spread.nodes == 4 and spread.sockets == 2
    assert place(topo, 3).spare_cpu == 3


def test_bad_requests_name_the_key(tmp_path):
    topo = topology.read(contiguous_two_socket(tmp_path))
    with pytest.raises(topology.TopologyError, match="platforms.placement"):
        place(topo, 2, "random")
    with pytest.raises(topology.TopologyError, match="only 8 CPUs"):
        place(topo, 9)
    proc = subprocess.run([sys.executable, "-m", "dlvirt", "cpus", "--sysfs", str(tmp_path), "--cores", "9"],
                          capture_output=True, text=True, env=tool_env())
    assert proc.returncode == 2 and "only 8 CPUs" in proc.stderr


def test_this_host_topology_and_what_a_process_sees():
    topo = topology.read()
    assert topo.cpus and set(topo.nodes) >= {0}
    placed = topology.host_placement(1)
    assert len(placed.cpus) == 1 and placed.nodes == 1
    assert topology.mems_allowed() is not None
    assert topology.threads_ran_on()  # this thread, at least


def test_platform_places_by_its_settings(tmp_path):
    root = interleaved_two_socket(tmp_path)
    bm = BareMetal(Scenario("BM", 4, "PIN", "CPU"), {"placement": "spread"}, tmp_path / "w", "1-x")
    assert bm.place(tuple(range(8)), root).cpus == (0, 1, 2, 3)
    bm = BareMetal(Scenario("BM", 4, "PIN", "CPU"), {}, tmp_path / "w", "1-x")
    assert bm.place(tuple(range(8)), root).cpus == (0, 2, 4, 6)


def test_verify_checks_memory_nodes_and_span():
    observed = {"affinity": [0, 2], "nproc": 2, "cpu_count": 8, "quota_cores": None,
                "virtualization": {"container": "none", "vm": "none"}, "cgroup": {},
                "placement": {"mems": [0, 1], "sockets": 2, "nodes": 2, "ran_on_nodes": [0, 1]}}
    want = Expected(affinity=(0, 2), mems=(0,), sockets=1, nodes=1)
    problems = verify(want, observed)
    assert problems == ["memory nodes [0, 1] != requested [0]", "CPUs span 2 sockets != expected 1",
                        "CPUs span 2 nodes != expected 1"]
    assert verify(Expected(affinity=(0, 2), mems=(0, 1), sockets=2, nodes=2), observed) == []


def _pinned_domain(tmp_path: Path, placement: topology.Placement, memory_mib: int = 2048) -> ET.Element:
    xml = domain_xml(name="dlvirt-1-abc", accel="kvm", vcpus=len(placement.cpus), memory_mib=memory_mib,
                     kernel=tmp_path / "k", initrd=tmp_path / "i", cmdline="console=ttyS0",
                     root_disk=tmp_path / "r.qcow2", job_disk=tmp_path / "j.img", console=tmp_path / "c.log",
                     qemu_user=(999, 994), placement=placement)
    return ET.fromstring(xml)


def test_pinned_vm_domain_mirrors_the_host_nodes_it_uses(tmp_path):
    topo = topology.read(interleaved_two_socket(tmp_path))
    # VM/4/PIN fits one node: one guest socket and cell, memory bound to node 0, emulator on a spare core
    dom = _pinned_domain(tmp_path, place(topo, 3))
    assert [(p.get("vcpu"), p.get("cpuset")) for p in dom.findall("cputune/vcpupin")] == [
        ("0", "0"), ("1", "2"), ("2", "4")]
    assert dom.find("cputune/emulatorpin").get("cpuset") == "6"
    assert dom.find("numatune/memory").attrib == {"mode": "strict", "nodeset": "0"}
    assert dom.find("cpu/topology").attrib == {"sockets": "1", "dies": "1", "cores": "3", "threads": "1"}
    assert [c.attrib for c in dom.findall("cpu/numa/cell")] == [
        {"id": "0", "cpus": "0-2", "memory": "2048", "unit": "MiB"}]
    # VM/8/PIN spans both sockets: two guest sockets, two cells, each cell's memory on its host node
    placement = place(topo, 8)
    dom = _pinned_domain(tmp_path, placement)
    vcpupins = {int(p.get("vcpu")): int(p.get("cpuset")) for p in dom.findall("cputune/vcpupin")}
    assert vcpupins == {0: 0, 1: 2, 2: 4, 3: 6, 4: 1, 5: 3, 6: 5, 7: 7}
    assert dom.find("cpu/topology").attrib == {"sockets": "2", "dies": "1", "cores": "4", "threads": "1"}
    assert [(c.get("cpus"), c.get("memory")) for c in dom.findall("cpu/numa/cell")] == [("0-3", "1024"),
                                                                                         ("4-7", "1024")]
    assert dom.find("numatune/memory").get("nodeset") == "0-1"
    assert [(m.get("cellid"), m.get("nodeset"), m.get("mode")) for m in dom.findall("numatune/memnode")] == [
        ("0", "0", "strict"), ("1", "1", "strict")]
    # no spare CPU: the emulator shares the vCPUs' cores, and the layout says so
    assert dom.find("cputune/emulatorpin").get("cpuset") == "0-7"
    assert "no spare CPU" in (guest_layout(placement).note or "")


def test_emulator_pin_never_overlaps_the_vcpus_when_a_spare_exists(tmp_path):
    for build in (interleaved_two_socket, contiguous_two_socket, four_nodes,
                  interleaved_two_socket_smt):
        topo = topology.read(build(tmp_path / build.__name__))
        for cores in (1, 2, 3):
            dom = _pinned_domain(tmp_path, place(topo, cores))
            vcpus = {int(p.get("cpuset")) for p in dom.findall("cputune/vcpupin")}
            emulator = set(parse_cpulist(dom.find("cputune/emulatorpin").get("cpuset")))
            assert emulator and not emulator & vcpus
            node = {topo.by_cpu()[c].node for c in vcpus}
            assert {topo.by_cpu()[c].node for c in emulator} <= node  # on the vCPUs' own node


def test_smt_placement_gives_guest_threads(tmp_path):
    topo = topology.read(one_socket_smt(tmp_path))
    dom = _pinned_domain(tmp_path, place(topo, 4, "smt"))
    assert dom.find("cpu/topology").attrib == {"sockets": "1", "dies": "1", "cores": "2", "threads": "2"}
    assert [int(p.get("cpuset")) for p in dom.findall("cputune/vcpupin")] == [0, 8, 1, 9]


def test_uneven_split_over_sockets_gives_one_guest_socket_with_a_note(tmp_path):
    topo = topology.read(contiguous_two_socket(tmp_path))
    layout = guest_layout(place(topo, 5))
    assert (layout.sockets, layout.cores, layout.threads) == (1, 5, 1)
    assert [v for _, v in layout.cells] == [(0, 1, 2, 3), (4,)] and "unevenly" in (layout.note or "")


def test_summary_rows_carry_the_sockets_and_nodes_a_pinned_run_spanned():
    from dlvirt.analysis.aggregate import summarise_launches
    from dlvirt.core.records import JobResult

    fixtures = FIXTURES / "runs"
    vnl = json.loads((fixtures / "mlperf-ic-BM-1-VNL-CPU.json").read_text())
    pin = json.loads((fixtures / "mlperf-ic-VM-2-PIN-CPU.json").read_text())
    pin["placement"] = {"cpus": [0, 1], "mems": [0, 1], "sockets": 2, "nodes": 2, "policy": "spread"}
    vnl["placement"] = {"ran_on_nodes": [0]}
    row = summarise_launches([JobResult.from_dict(pin)])
    assert (row["sockets"], row["numa_nodes"]) == (2, 2)
    assert summarise_launches([JobResult.from_dict(vnl)])["sockets"] is None  # VNL: no placement
    del vnl["placement"]  # results written before placement was recorded
    assert summarise_launches([JobResult.from_dict(vnl)])["numa_nodes"] is None


def test_result_records_the_placement_or_the_nodes_vnl_ran_on():
    from dlvirt.core.records import Repetition
    from dlvirt.run.runner import placement_record

    fixtures = FIXTURES / "runs"
    run = json.loads((fixtures / "mlperf-ic-BM-1-VNL-CPU.json").read_text())["runs"][0]
    reps = []
    for nodes in ([0], [1, 0]):
        run["observed"]["placement"] = {"mems": [0, 1], "sockets": 2, "nodes": 2, "ran_on_nodes": nodes}
        reps.append(Repetition.from_dict(json.loads(json.dumps(run))))
    assert placement_record({"platform": "BM"}, reps) == {"ran_on_nodes": [0, 1]}
    placed = {"cpus": [0, 2], "mems": [0], "sockets": 1, "nodes": 1, "policy": "compact"}
    assert placement_record({"platform": "BM", "placement": placed}, reps) == placed
