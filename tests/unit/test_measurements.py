"""What a repetition measures besides E2E, and how the summary uses it: thread plans, stage clocks,
derived LoadGen settings, CFS counters, verification of what a platform gave, INVALID runs and
code versions in the summary. Real runs: tests/integration/test_platform_bm.py and test_platform_cn.py."""

from __future__ import annotations

import copy
import ctypes
import json
import mmap
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import FIXTURES as FIXTURE_DIR
from conftest import resident_mappings
from dlvirt.analysis.aggregate import MixedCodeError, summarise
from dlvirt.apps.base import OMP_SPIN_COUNT
from dlvirt.core import codeversion
from dlvirt.platforms.base import Expected, verify
from dlvirt.run.harness import StageClock, ThreadPlanError, check_framework_threads, loadgen_settings, plan_threads
from dlvirt.system import allocator, cgroups, hostinfo, observe, pagecache

FIXTURES = FIXTURE_DIR / "runs"


def observed(nproc: int, quota: float | None) -> dict:
    return {"nproc": nproc, "quota_cores": quota}


@pytest.mark.parametrize("pipeline", [None, "overlapped", "sequential"])
@pytest.mark.parametrize(("nproc", "quota"), [(1, None), (2, None), (8, None), (8, 1.0), (8, 2.5), (64, 16.0)])
def test_granted_plans_never_run_more_compute_threads_than_granted_cores(pipeline, nproc, quota):
    plan = plan_threads("granted", observed(nproc, quota), pipeline)
    cores = min(nproc, -(-quota // 1) if quota else nproc)
    assert plan.cores == cores
    assert plan.compute_threads() <= cores
    assert not plan.post_thread
    if pipeline == "overlapped" and cores > 1:  # asked for: pre-processing beside inference
        assert (plan.sharing, plan.intra_op, plan.pre_workers) == ("split", cores - 1, 1)
    else:  # the default: every granted core infers, then every one pre-processes
        assert (plan.sharing, plan.overlap, plan.intra_op, plan.pre_workers) == ("alternate", False, cores, cores)


def test_framework_default_sets_no_framework_threads():
    plan = plan_threads("framework-default", observed(1, 1.0))
    assert plan.intra_op is None and plan.inter_op is None and plan.compute_threads() is None
    assert plan.sharing == "unmanaged" and plan.post_thread and plan.overlap  # a plain application overlaps
    assert plan_threads("naive", observed(1, 1.0)) == plan  # the older name
    assert not plan_threads("framework-default", observed(1, 1.0), "sequential").overlap
    with pytest.raises(ValueError, match="harness.pipeline"):
        plan_threads("granted", observed(1, None), "parallel")


def test_a_framework_running_other_counts_than_the_granted_plan_fails():
    plan = plan_threads("granted", observed(2, None))
    check_framework_threads(plan, {"intra_op": 2, "inter_op": 1})
    with pytest.raises(ThreadPlanError, match="intra_op 1 != planned 2"):
        check_framework_threads(plan, {"intra_op": 1, "inter_op": 1})
    # an OpenMP framework must have loaded with the plan's spin count; one that reports none is not checked
    assert plan.environment()["GOMP_SPINCOUNT"] == str(OMP_SPIN_COUNT)
    check_framework_threads(plan, {"intra_op": 2, "inter_op": 1, "gomp_spincount_env": str(OMP_SPIN_COUNT)})
    with pytest.raises(ThreadPlanError, match=f"GOMP_SPINCOUNT None != planned {OMP_SPIN_COUNT}"):
        check_framework_threads(plan, {"intra_op": 2, "inter_op": 1, "gomp_spincount_env": None})
    assert plan_threads("framework-default", observed(2, None)).environment() == {}
    # an app pre-processing on the framework's own threads keeps OpenMP's spins, as does a split plan
    assert "GOMP_SPINCOUNT" not in plan_threads("granted", observed(2, None), None, pre_on_framework=True).environment()
    assert "GOMP_SPINCOUNT" not in plan_threads("granted", observed(2, None), "overlapped").environment()


def test_a_granted_plan_keeps_freed_memory_and_a_plain_application_does_not():
    for plan in (plan_threads("granted", observed(1, 1.0)), plan_threads("granted", observed(2, None), "overlapped")):
        assert plan.retain_freed_memory
        assert plan.environment()["MALLOC_TRIM_THRESHOLD_"] == str(allocator.TRIM_THRESHOLD)
    assert not plan_threads("framework-default", observed(2, None)).retain_freed_memory
    # glibc (every platform's image is Debian) takes both thresholds; the process keeps them
    assert allocator.retain_freed_memory() == {"mmap_threshold": 32 << 20, "trim_threshold": 256 << 20}


def resident_pages(path: Path) -> list[bool]:
    """Whether the page cache holds each page of ``path`` (mincore(2) of a mapping, which reads nothing)."""
    page = os.sysconf("SC_PAGE_SIZE")
    size = path.stat().st_size
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY) as mapped:
        start = ctypes.addressof(ctypes.c_char.from_buffer(mapped))
        vector = ctypes.create_string_buffer((size + page - 1) // page)
        assert libc.mincore(start, size, vector) == 0, os.strerror(ctypes.get_errno())
        return [bool(b & 1) for b in vector.raw]


def test_a_prefetch_asks_the_whole_file_into_the_page_cache(tmp_path):
    """Every piece of it, the last short one too: not just the first few MiB, which is all one
    WILLNEED call for a whole file reads here."""
    path = tmp_path / "weights.bin"
    tail = 1 << 20
    with path.open("wb") as out:
        out.write(os.urandom(5 * pagecache.CHUNK_BYTES + tail))
        out.flush()
        os.fsync(out.fileno())  # clean pages: the kernel may drop them
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    size = path.stat().st_size
    assert pagecache.Prefetch(path).finish()["bytes"] == size
    # Readahead is advice: the kernel reads in the background, and short of free memory it gives up
    # on pages (it allocates them without retrying reclaim) or drops them again before they are
    # counted (a CI run under the full suite found 127 of 10,241 pages missing). So each piece asked
    # for, the 1-MiB tail included, must be at least 90 % resident: a prefetch that skips any piece
    # fails, as one making a single call (8 MiB of these 41 here) does.
    per_piece = pagecache.CHUNK_BYTES // os.sysconf("SC_PAGE_SIZE")
    pieces: list[list[bool]] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        pages = resident_pages(path)
        pieces = [pages[k:k + per_piece] for k in range(0, len(pages), per_piece)]
        if all(pages):
            break
        time.sleep(0.05)
    assert len(pieces) == 6 and [sum(p) >= 0.9 * len(p) for p in pieces] == [True] * 6
    missing = pagecache.Prefetch(tmp_path / "absent").finish()
    assert "bytes" not in missing and "absent: No such file" in missing["error"]


def test_populating_a_mapped_file_maps_every_page_with_or_without_the_kernels_advice(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(os.urandom(64 * 4096))
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY):
        assert resident_mappings(path) == [(256, 0)]  # KiB: nothing read yet
        assert pagecache.populate(path) == 64 * 4096
        assert resident_mappings(path) == [(256, 256)]
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY) as mapped:
        start = ctypes.addressof(ctypes.c_char.from_buffer(mapped))
        pagecache.touch_pages(start, start + len(mapped))  # what a kernel before 5.14 gets
        assert resident_mappings(path) == [(256, 256)]


def test_stage_busy_time_is_the_union_of_its_intervals_not_their_sum():
    clock = StageClock()
    for start, end in [(0.0, 1.0), (0.5, 1.5), (3.0, 4.0), (3.2, 3.4)]:
        clock.record(start, end, 0.25)
    assert clock.busy_s() == pytest.approx(2.5)
    assert clock.cpu_s == pytest.approx(1.0)


def test_derived_loadgen_settings_issue_the_workload_and_mark_a_much_faster_run_invalid():
    configured = {"min_query_count": 100, "min_duration_ms": None, "expected_qps": None}
    first = loadgen_settings(configured, 100, None)
    assert first == {"expected_qps": 1.0, "min_duration_ms": 0, "derived": True}
    used = loadgen_settings(configured, 100, 10.0)  # the previous repetition: 10 samples/s
    assert used["expected_qps"] == 10.0
    # LoadGen issues max(workload, 1.1 x duration x qps): exactly the workload
    assert 1.1 * used["min_duration_ms"] / 1000 * used["expected_qps"] <= 100
    assert used["min_duration_ms"] <= 100 / 10.0 * 1000            # as fast as before: VALID
    assert used["min_duration_ms"] <= 100 / (10.0 * 1.5) * 1000    # 50 % faster (after a slow warm-up): VALID
    assert used["min_duration_ms"] > 100 / (10.0 * 2.3) * 1000     # 130 % faster: INVALID
    fixed = loadgen_settings({"min_duration_ms": 0, "expected_qps": 5}, 100, 10.0)
    assert fixed == {"expected_qps": 5.0, "min_duration_ms": 0, "derived": False}


@pytest.mark.parametrize(("text", "throttled_s"), [
    ("nr_periods 10\nnr_throttled 4\nthrottled_time 2500000000\n", 2.5),          # cgroup v1 (ns)
    ("usage_usec 9\nnr_periods 10\nnr_throttled 4\nthrottled_usec 2500000\n", 2.5),  # cgroup v2 (us)
])
def test_cpu_stat_reads_both_cgroup_versions(tmp_path, text, throttled_s):
    (tmp_path / "cpu.stat").write_text(text)
    assert cgroups.cpu_stat(tmp_path) == {"nr_periods": 10, "nr_throttled": 4, "throttled_s": throttled_s}
    (tmp_path / "cpu.stat").write_text("usage_usec 9\n")  # v2 without the cpu controller
    assert cgroups.cpu_stat(tmp_path) is None


def test_telemetry_is_the_difference_of_two_snapshots():
    before = {"cpu_stat": {"nr_periods": 5, "nr_throttled": 1, "throttled_s": 0.5},
              "proc_stat": [100, 0, 50, 800, 0, 0, 0, 50, 0, 0], "process_cpu_s": 1.0, "voluntary_ctx": 10,
              "involuntary_ctx": 2, "major_faults": 3, "minor_faults": 100,
              "max_rss_kib": 1024}
    after = {"cpu_stat": {"nr_periods": 15, "nr_throttled": 6, "throttled_s": 1.5},
             "proc_stat": [160, 0, 70, 880, 0, 0, 0, 90, 7, 0], "process_cpu_s": 1.5, "voluntary_ctx": 30,
             "involuntary_ctx": 5, "major_faults": 3, "minor_faults": 160,
             "max_rss_kib": 3072}
    found = observe.telemetry(before, after)
    assert (found["nr_periods"], found["nr_throttled"], found["throttled_s"]) == (10, 5, 1.0)
    assert found["steal_pct"] == pytest.approx(100 * 40 / 200)
    assert (found["voluntary_ctx"], found["involuntary_ctx"]) == (20, 3)
    assert (found["major_faults"], found["minor_faults"]) == (0, 60)
    assert found["max_rss_mib"] == 3.0  # the peak so far, not a difference
    # busy = all but idle and iowait: 120 ticks, of which this process used 0.5 s
    assert found["others_cpu_s"] == pytest.approx(120 / os.sysconf("SC_CLK_TCK") - 0.5)
    live = observe.telemetry(observe.counters(), observe.counters())
    assert live["voluntary_ctx"] >= 0


def test_thread_sampler_sees_this_process_run():
    with observe.ThreadSampler(interval_s=0.01) as sampler:
        sum(i * i for i in range(2_000_000))
    summary = sampler.summary()
    assert summary["thread_samples"] >= 1 and summary["threads_peak"] >= 1
    assert set(summary["cpus_ran_on"]) <= set(range(256)) and summary["cpus_ran_on"]


OBSERVED = {"affinity": [0], "nproc": 1, "cpu_count": 2, "quota_cores": 0.5, "pci_devices": 3,
            "kernel": "6.1.0-guest", "virtualization": {"container": "none", "vm": "kvm"}}


def test_an_enclosing_quota_below_the_cores_asked_fails_verification():
    problems = verify(Expected(quota_cores=0.5, quota_at_least=1.0), OBSERVED)
    assert problems == [("the harness lives under a CFS quota of 0.5 cores, fewer than the 1 asked "
                         "(an enclosing cgroup limits the runner)")]
    assert verify(Expected(quota_cores=0.5, quota_at_least=0.5), OBSERVED) == []


GUEST_OBSERVED = {**OBSERVED, "quota_cores": None}


def test_vm_and_microvm_are_told_apart_and_a_vm_is_required_where_asked():
    assert verify(Expected(in_vm=True, pci_bus=True, kernel="6.1.0-guest"), GUEST_OBSERVED) == []
    assert any("a microVM has no PCI bus" in p for p in verify(Expected(pci_bus=False), GUEST_OBSERVED))
    no_vm = {**GUEST_OBSERVED, "virtualization": {"container": "docker", "vm": "none"}}
    assert verify(Expected(in_vm=True), no_vm) == ["virtualization 'none': expected a VM"]
    assert verify(Expected(kernel="6.1.0-other"), GUEST_OBSERVED) == \
        ["kernel '6.1.0-guest' != the guest's '6.1.0-other'"]


def write_result(tmp_path: Path, name: str, result: dict) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(result))
    return path


def test_invalid_runs_stay_out_of_the_mean_and_are_counted(tmp_path):
    result = json.loads((FIXTURES / "mlperf-ic-BM-1-VNL-CPU.json").read_text())
    runs = result["runs"]
    runs[0]["loadgen"]["validity"] = "INVALID"
    valid_e2e = [r["e2e_s"] for r in runs[1:]]
    row = summarise([write_result(tmp_path, "r.json", result)]).iloc[0]
    assert row["invalid"] == 1 and not row["loadgen_valid"]
    assert row["reps"] == len(valid_e2e)
    assert row["mean_s"] == pytest.approx(sum(valid_e2e) / len(valid_e2e))


def test_runs_of_different_code_are_not_summarised_together_unless_allowed(tmp_path):
    result = json.loads((FIXTURES / "mlperf-ic-BM-1-VNL-CPU.json").read_text())
    result["code"] = {"source": "aaaa", "commit": "1" * 40, "dirty": False}
    other = copy.deepcopy(result)
    other["code"] = {"source": "bbbb", "commit": None, "dirty": None}
    other["run_id"] = "another-launch"
    paths = [write_result(tmp_path, "a.json", result), write_result(tmp_path, "b.json", other)]
    with pytest.raises(MixedCodeError, match=r"aaaa \(1111111111\) vs bbbb"):
        summarise(paths)
    row = summarise(paths, allow_mixed_code=True).iloc[0]
    assert row["code_version"].startswith("mixed: ") and row["replicates"] == 2
    assert summarise(paths[:1]).iloc[0]["code_version"] == "aaaa (1111111111)"


def test_code_version_names_the_package_source():
    version = codeversion.code_version()
    assert version["source"] == codeversion.source_hash() and len(version["source"]) == 16
    assert codeversion.label(None) == "not recorded"


def test_cpu_frequency_reads_driver_governor_and_boost(tmp_path):
    policy = tmp_path / "cpu0" / "cpufreq"
    policy.mkdir(parents=True)
    (policy / "scaling_driver").write_text("acpi-cpufreq\n")
    (policy / "scaling_governor").write_text("performance\n")
    (tmp_path / "cpufreq").mkdir()
    (tmp_path / "cpufreq" / "boost").write_text("1\n")
    assert hostinfo.cpu_frequency(tmp_path) == {"driver": "acpi-cpufreq", "governor": "performance",
                                                "boost": True, "max_khz": None}
    assert hostinfo.cpu_frequency(tmp_path / "absent") == {"driver": None, "governor": None, "boost": None,
                                                           "max_khz": None}


def test_overhead_is_shown_beside_throttling_and_steal():
    import pandas as pd

    from dlvirt.analysis.rows import overhead_beside_mechanism

    rows = pd.DataFrame([
        {"tool": "mlperf", "app": "ic", "platform": p, "cores": 1, "pinning": "VNL", "processor": "CPU",
         "scenario": f"{p}/1/VNL/CPU", "mean_s": m, "throttled_pct": t, "throttled_s": t and t / 10, "steal_pct": st,
         "ctx_switches": 100}
        for p, m, t, st in [("BM", 2.0, 1.0, 0.0), ("CN", 2.5, 40.0, 0.0), ("VM", 3.0, None, 12.0)]]
        + [{"tool": "mlperf", "app": "ic", "platform": "CN", "cores": 2, "pinning": "PIN", "processor": "CPU",
            "scenario": "CN/2/PIN/CPU", "mean_s": 1.0}])  # no BM twin: left out
    table = overhead_beside_mechanism(rows, "BM")
    assert list(table["scenario"]) == ["CN/1/VNL/CPU", "VM/1/VNL/CPU"]
    assert list(table["overhead_pct"]) == pytest.approx([25.0, 50.0])
    assert table["throttled_pct"].iloc[0] == 40.0 and table["steal_pct"].iloc[1] == 12.0
    assert list(table["BM throttled_pct"]) == [1.0, 1.0]


def test_a_host_that_is_itself_virtualized_says_so(tmp_path):
    from dlvirt.analysis.rows import host_label, host_virtualization

    facts = {"cpu_model": "EPYC", "capabilities": {"cores": 2},
             "virtualization": {"vm": "kvm", "container": "docker"}}
    assert host_virtualization(facts) == "itself a kvm virtual machine and a docker container"
    assert host_virtualization({"virtualization": {"vm": "none", "container": "none"}}) is None
    assert host_virtualization({}) is None
    path = tmp_path / "host.json"
    path.write_text(json.dumps(facts))
    assert host_label(path) == ("host: EPYC, 2 cores (itself a kvm virtual machine and a docker container: "
                                "its bare-metal rows are not bare metal)")


def test_bm_rows_name_what_the_bare_metal_is(tmp_path):
    result = json.loads((FIXTURES / "mlperf-ic-BM-1-VNL-CPU.json").read_text())
    result["platform"]["virtualised"] = False  # as the runner records it
    for run in result["runs"]:
        run["observed"]["virtualization"] = {"container": "none", "vm": "kvm"}
    row = summarise([write_result(tmp_path, "r.json", result)]).iloc[0]
    assert row["host_virtualization"] == "vm kvm"


def test_the_harness_imports_no_library_the_job_does_not_use_yet():
    """Inside a TCG guest an import costs 20-40 times what it costs here (scipy.stats: 0.9 s on the
    host, 38 s in the guest, before TensorFlow's 81 s): the harness module itself loads only numpy;
    each app imports its framework, and the CI math its SciPy, when it is needed. The launch loop
    imports the LoadGen harness and every tool module. (So the launch sets the thread plan's
    OpenMP environment before torch loads libgomp, which reads it then: what the runs record.)"""
    heavy = ("scipy", "pandas", "matplotlib", "tensorflow", "torch", "transformers", "PIL", "yaml", "jsonschema",
             "docker", "snakemake")
    code = f"import sys, dlvirt.run.launch; print(' '.join(m for m in {heavy!r} if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert loaded == []


class StandIn:
    """An app of trivial stages that notes the thread each stage ran on (no framework, no model)."""

    def __init__(self, plan, framework_pre: bool, samples: int = 7) -> None:
        self.threads = plan
        self.preprocess_on_framework_threads = framework_pre
        self.samples = samples
        self.ran_on: dict[str, set[int]] = {"pre": set(), "infer": set(), "post": set()}

    def sample_count(self) -> int:
        return self.samples

    def begin_repetition(self, out_dir: Path) -> None:
        pass

    def end_repetition(self) -> dict:
        return {}

    def preprocess(self, index: int) -> int:
        self.ran_on["pre"].add(threading.get_ident())
        return index

    def infer(self, batch: list[int]) -> list[int]:
        self.ran_on["infer"].add(threading.get_ident())
        return [2 * x for x in batch]

    def postprocess(self, indices: list[int], outputs: list[int]) -> list[bytes]:
        self.ran_on["post"].add(threading.get_ident())
        return [bytes([x % 256]) for x in outputs]


@pytest.mark.parametrize(("pipeline", "framework_pre"), [(None, False), (None, True), ("overlapped", True)])
def test_inference_runs_on_the_thread_that_loaded_the_model_in_every_repetition(tmp_path, pipeline, framework_pre):
    """One thread drives the framework for the whole launch (one warm intra-op pool, as in a plain
    loop); pre-processing made of framework ops runs there too where the stages alternate."""
    from types import SimpleNamespace

    from dlvirt.run.harness import run_repetition

    app = StandIn(plan_threads("granted", observed(2, None), pipeline), framework_pre)
    job = SimpleNamespace(batch_size=3, loadgen={"min_query_count": 7, "min_duration_ms": 0, "expected_qps": 1})
    for rep in range(2):
        record = run_repetition(app, job, rep, tmp_path)  # type: ignore[arg-type]  # a stand-in app and job
        assert record.samples == 7 and record.batches == 3 and record.e2e_s > 0
        assert record.phases["pre_cpu_s"] >= 0 and record.phases["infer_cpu_s"] >= 0
    assert app.ran_on["infer"] == {threading.get_ident()}
    inline = framework_pre and pipeline is None
    assert (app.ran_on["pre"] == {threading.get_ident()}) == inline
    assert threading.get_ident() not in app.ran_on["pre"] or inline


def test_throttled_share_is_nan_without_a_quota_and_zero_when_no_period_ended():
    """A repetition of a few milliseconds under a quota may end before any CFS period does: nothing
    could be throttled (a throttled group waits for its period's end, which the kernel counts)."""
    import dataclasses
    import math

    from dlvirt.analysis.aggregate import throttled_pct
    from dlvirt.core.records import JobResult

    template = JobResult.read(FIXTURE_DIR / "runs" / "mlperf-ic-BM-1-VNL-CPU.json").runs[0]

    def run(quota: float | None, periods: int, throttled: int):
        telemetry = {**(template.telemetry or {}), "nr_periods": periods, "nr_throttled": throttled}
        return dataclasses.replace(template, observed={**template.observed, "quota_cores": quota}, telemetry=telemetry)

    assert throttled_pct([run(1.0, 0, 0)]) == 0.0
    assert throttled_pct([run(1.0, 0, 0), run(1.0, 4, 1)]) == 25.0
    assert math.isnan(throttled_pct([run(None, 0, 0)]))  # PIN: no quota, no share
