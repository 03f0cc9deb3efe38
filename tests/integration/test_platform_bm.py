"""Bare metal really constrains the harness: affinity and CFS quota checked from inside real runs."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from conftest import IC_SETTINGS, ic_job_spec
from dlvirt.apps.ic import ImageClassification
from dlvirt.platforms.base import Expected, PlatformError, VerificationError
from dlvirt.run.cleanup import dlvirt_cgroups
from dlvirt.run.runner import run_job
from dlvirt.run.turns import TurnListener
from dlvirt.system import allocator, cgroups

pytestmark = pytest.mark.slow  # every test runs real IC jobs (ResNet50)
CPUS = sorted(os.sched_getaffinity(0))


@pytest.fixture(scope="module")
def ic_dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ic")
    ImageClassification.prepare_dataset(out, IC_SETTINGS)
    return out


def our_cgroups() -> list[Path]:
    return [p for p in dlvirt_cgroups() if p.name.startswith(f"dlvirt-{os.getpid()}-")]


def test_vnl_one_core_is_a_quota_with_every_core_visible(ic_dataset, tmp_path):
    if cgroups.version() is None:
        pytest.skip("no cgroup CPU controller on this host")
    result = run_job(ic_job_spec(ic_dataset, 1, "VNL"), tmp_path / "r.json", tmp_path / "lg")
    observed = result.runs[0].observed
    assert observed["quota_cores"] == pytest.approx(1.0)
    assert observed["affinity"] == CPUS
    assert result.runs[0].threads["intra_op"] == 1  # sized from the quota, not the visible cores
    assert json.loads((tmp_path / "r.json").read_text())["verified"] is True
    assert our_cgroups() == []


def test_study_memory_is_the_cgroup_limit_the_harness_sees_inside(ic_dataset, tmp_path):
    """BM/1/PIN and BM/1/VNL under study.memory (memory_mib, as the workflow passes it): a cgroup
    memory limit (v1 memory.limit_in_bytes or v2 memory.max) read back inside, recorded, removed."""
    if cgroups.version() is None:
        pytest.skip("no cgroup CPU controller on this host")
    for pinning in ("PIN", "VNL"):
        job = ic_job_spec(ic_dataset, 1, pinning, platform_settings={"memory_mib": 3072})
        result = run_job(job, tmp_path / f"{pinning}.json", tmp_path / f"lg-{pinning}")
        for run in result.warmups + result.runs:
            assert run.observed["memory_limit_bytes"] == 3072 << 20
            assert run.observed["mem_total_bytes"] >= 3072 << 20
        assert result.expected["memory_limit_bytes"] == 3072 << 20
        assert result.platform["memory_mib"] == 3072 and "memory limit" in result.platform["memory_mechanism"]
        assert our_cgroups() == []


def test_a_launch_takes_turns_outside_its_timed_repetitions(ic_dataset, tmp_path):
    """JobSpec.turns (benchmarks/scaling.py): before each repetition, the warm-up's too, and after the
    last, the harness names what comes next and its CPUs, and waits; no repetition's window holds a turn."""
    path = tmp_path / "turns"
    turns: list[tuple[dict, float, float]] = []  # each turn, and when it began and ended (Unix time)
    launched = threading.Event()

    def other_process(listener: TurnListener) -> None:
        for turn in listener.turns(lambda: not launched.is_set()):
            began = time.time()
            time.sleep(0.3)
            turns.append((turn, began, time.time()))

    with TurnListener(path) as listener:
        thread = threading.Thread(target=other_process, args=(listener,))
        thread.start()
        try:
            result = run_job(ic_job_spec(ic_dataset, 1, "PIN", repetitions=2, warmup_repetitions=1, turns=str(path)),
                             tmp_path / "r.json", tmp_path / "lg")
        finally:
            launched.set()
            thread.join()
    assert [turn["next"] for turn, _, _ in turns] == [0, 1, 2, None]
    assert all(turn["cpus"] == result.runs[0].observed["affinity"] == CPUS[:1] for turn, _, _ in turns)
    assert result.spec.turns == str(path)  # the run record says the launch took turns
    for rep in result.warmups + result.runs:
        started, finished = (datetime.fromisoformat(t).timestamp() for t in (rep.started_utc, rep.finished_utc))
        assert turns[rep.repetition][2] <= started and finished <= turns[rep.repetition + 1][1]


def test_pin_one_core_sees_exactly_that_core(ic_dataset, tmp_path):
    result = run_job(ic_job_spec(ic_dataset, 1, "PIN"), tmp_path / "r.json", tmp_path / "lg")
    observed = result.runs[0].observed
    assert observed["affinity"] == CPUS[:1] and observed["nproc"] == 1
    assert observed["quota_cores"] == result.expected["quota_cores"]
    assert (tmp_path / "lg" / "rep-0000" / "mlperf_log_summary.txt").exists()


def test_framework_default_threads_follow_the_visible_cores_under_a_quota(ic_dataset, tmp_path):
    if len(CPUS) < 2 or cgroups.version() is None:
        pytest.skip("needs 2 cores and a cgroup CPU controller")
    result = run_job(ic_job_spec(ic_dataset, 1, "VNL", threads="framework-default"), tmp_path / "r.json",
                     tmp_path / "lg")
    threads = result.runs[0].threads
    assert threads["intra_op"] is None  # dlvirt set nothing
    assert threads["framework"]["intra_op"] == len(CPUS)  # TensorFlow chose one per visible core
    assert threads["allocator"] is None  # glibc's own thresholds, as a plain application's
    assert result.runs[0].telemetry["nr_periods"] > 0


def test_granted_one_pinned_core_runs_one_compute_thread_at_a_time(ic_dataset, tmp_path):
    """BM/1/PIN: the stages alternate on the one core, each with one thread, as the framework reports."""
    result = run_job(ic_job_spec(ic_dataset, 1, "PIN", repetitions=2), tmp_path / "r.json", tmp_path / "lg")
    for run in result.runs:
        threads = run.threads
        assert threads["compute_threads"] == 1 and not threads["overlap"] and not threads["post_thread"]
        assert (threads["intra_op"], threads["pre_workers"]) == (1, 1)
        assert threads["framework"]["intra_op"] == 1 and threads["framework"]["inter_op"] == 1
        assert threads["allocator"] == {"mmap_threshold": allocator.MMAP_THRESHOLD,
                                        "trim_threshold": allocator.TRIM_THRESHOLD}  # mallopt took both
        telemetry = run.telemetry
        assert telemetry["cpus_ran_on"] == CPUS[:1]
        assert telemetry["voluntary_ctx"] + telemetry["involuntary_ctx"] > 0
        phases = run.phases
        assert phases["infer_cpu_s"] > 0 and phases["pre_cpu_s"] > 0 and phases["stall_s"] > 0


def test_sequential_phases_add_up_to_e2e(tmp_path):
    """Stages one after another: their busy times add up to E2E (16 images in 4 batches, so that
    the pipeline's own hand-offs are small beside them)."""
    settings = {**IC_SETTINGS, "dataset": {"path": None, "count": 16, "seed": 0},
                "loadgen": {**IC_SETTINGS["loadgen"], "min_query_count": 16}}
    ImageClassification.prepare_dataset(tmp_path / "ic16", settings)
    cores = min(2, len(CPUS))
    job = ic_job_spec(tmp_path / "ic16", cores, "PIN", pipeline="sequential", repetitions=2, app_settings=settings,
               loadgen=settings["loadgen"])
    result = run_job(job, tmp_path / "r.json", tmp_path / "lg")
    for run in result.runs:
        phases = run.phases
        total = phases["pre_s"] + phases["infer_s"] + phases["post_s"]
        assert total == pytest.approx(run.e2e_s, rel=0.02)
        assert run.threads["sharing"] == "alternate"


def test_an_enclosing_quota_smaller_than_the_cores_fails_pin_verification(ic_dataset, tmp_path):
    """The runner itself sits in a cgroup of half a core: BM/1/PIN would get less than one core."""
    if cgroups.version() is None:
        pytest.skip("no cgroup CPU controller on this host")
    enclosing = cgroups.create(f"dlvirt-{os.getpid()}-enclosing", quota_cores=0.5)
    try:
        job = ic_job_spec(ic_dataset, 1, "PIN")
        proc = subprocess.run(
            [sys.executable, "-m", "dlvirt", "bench", "--spec", json.dumps(job.to_dict()),
             "--output", str(tmp_path / "r.json"),
             "--loadgen-dir", str(tmp_path / "lg")],
            capture_output=True, text=True, timeout=600, check=False,
            preexec_fn=lambda: enclosing.attach(os.getpid()))
    finally:
        enclosing.remove()
    assert proc.returncode != 0
    assert "CFS quota of 0.5 cores, fewer than the 1 asked" in proc.stderr
    assert not (tmp_path / "r.json").exists()


def test_failed_run_writes_no_result_and_removes_its_cgroup(ic_dataset, tmp_path):
    if cgroups.version() is None:
        pytest.skip("no cgroup CPU controller on this host")
    broken = dataclasses.replace(ic_job_spec(ic_dataset, 1, "VNL"), app_settings={
        **IC_SETTINGS, "weights": {"path": str(tmp_path / "missing.h5"), "sha256": None}})
    with pytest.raises(PlatformError):
        run_job(broken, tmp_path / "r.json", tmp_path / "lg")
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "lg").exists()
    assert our_cgroups() == []
    assert not list(tmp_path.glob(".work-*"))


def test_timeout_kills_the_harness_and_cleans_up(ic_dataset, tmp_path):
    if cgroups.version() is None:
        pytest.skip("no cgroup CPU controller on this host")
    with pytest.raises(PlatformError, match="timeout"):
        run_job(ic_job_spec(ic_dataset, 1, "VNL", timeout_s=1), tmp_path / "r.json", tmp_path / "lg")
    assert not (tmp_path / "r.json").exists()
    assert our_cgroups() == []


def test_observation_differing_from_the_request_fails_the_job(ic_dataset, tmp_path, monkeypatch):
    """If the platform did not deliver (here: the expectation is made impossible), no result counts."""
    from dlvirt.platforms.bm import BareMetal

    real_expected = BareMetal.expected

    def impossible(self):
        return Expected(**{**vars(real_expected(self)), "nproc": 999})

    monkeypatch.setattr(BareMetal, "expected", impossible)
    with pytest.raises(VerificationError, match="nproc 1 != requested 999"):
        run_job(ic_job_spec(ic_dataset, 1, "PIN"), tmp_path / "r.json", tmp_path / "lg")
    assert not (tmp_path / "r.json").exists()


def test_adaptive_repetitions_stop_once_the_interval_is_tight(ic_dataset, tmp_path):
    """Two warm-ups, a fixed count; then every counted repetition is judged (none set aside) until
    the interval is tight, and steadiness is recorded, not acted on."""
    adaptive = {"min": 3, "max": 50, "rel_ci95": 0.05}
    job = ic_job_spec(ic_dataset, 1, "PIN", repetitions=adaptive, warmup_repetitions=2, warmup_tolerance=0.1)
    result = run_job(job, tmp_path / "run.json", tmp_path / "lg")
    record = result.repetitions
    print(f"adaptive: {record}; warm-ups {[r.e2e_s for r in result.warmups]}")
    assert record["asked"] == adaptive and record["ran"] == len(result.runs)
    assert record["stop"] == "rel_ci95 reached" and 3 <= record["ran"] < 50
    assert record["rel_ci95"] <= 0.05
    assert record["warmups"] == len(result.warmups) == 2 and all(r.warmup for r in result.warmups)
    first, second = result.runs[0].e2e_s, result.runs[1].e2e_s
    assert record["steady"] is (abs(first - second) <= 0.1 * min(first, second))
    # the order they ran in: warm-ups first
    assert max(r.repetition for r in result.warmups) < min(r.repetition for r in result.runs)


def test_hard_killed_job_leaves_a_work_dir_that_cleanup_removes(ic_dataset, tmp_path):
    """SIGKILL of the job's whole process group (an OOM kill, a node crash) runs no teardown: the
    next start removes the work directory (and cgroup) whose runner is gone, and nothing live."""
    import signal
    import subprocess
    import sys
    import time

    from dlvirt.run.cleanup import remove_stale_work_dirs

    runs = tmp_path / "runs"
    from dlvirt.core.owner import new_run_id

    live = runs / "BM" / f".work-{new_run_id()}-live1234"  # this test's own: its runner is alive
    live.mkdir(parents=True)
    job = subprocess.Popen([sys.executable, "-m", "dlvirt", "bench", "--spec",
                            json.dumps(ic_job_spec(ic_dataset, 1, "PIN").to_dict()),
                            "--output", str(runs / "BM" / "r.json"), "--loadgen-dir", str(tmp_path / "lg")],
                           start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list((runs / "BM").glob(f".work-{job.pid}-*/attempt-*/job.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    stale = list((runs / "BM").glob(f".work-{job.pid}-*"))
    assert stale, "the job never started"
    assert list(remove_stale_work_dirs([runs])) == [f"removed stale job work directory {stale[0]}"]
    assert not stale[0].exists() and live.is_dir() and not (runs / "BM" / "r.json").exists()
    for directory in dlvirt_cgroups():
        if directory.name.startswith(f"dlvirt-{job.pid}-"):
            cgroups.Cgroup(dirs=[directory]).remove()


# Σ phase CPU of a repetition may exceed cores x E2E by this much: the clocks are read at the
# window's edges by a thread that may wait a scheduler tick to run, and the thread sampler's own
# reads of /proc fall inside the window.
CPU_TOLERANCE = 0.05
# A sample may catch one thread more than the granted cores runnable at a hand-off (a pool worker
# woken while the thread that woke it has not yet blocked): this share of a launch's samples at most.
# Run alone, the file sees 0-2 such samples of ~30; inside the full suite the 2-core runs saw 18-21 %
# (4/22, 6/30, 7/33) with other processes idle (others_cpu_s 0.01-0.03); the default study's
# records (2026-12-03, 120 launches) 12-19 % at 1 core and 7-16 % at 2, every app alike. Sampled
# every 2 ms from outside (RS, 2026-12-04): at 1 core the extra one is the harness's main thread,
# woken as each pre-processed sample's future completes while the worker goes on (8 % of samples);
# at 2 cores also, most likely, PyTorch's helper spinning beside the two workers (3+ runnable in
# 13.5 %; 4.6 % after the granted plan shortened OpenMP's spins, docs/measurement.md, "Idle
# helpers"). A plan that kept a third compute thread busy would show most samples over, so 25 %
# catches it.
RUNNABLE_OVER_SHARE = 0.25


@pytest.mark.parametrize("tool", ["mlperf", "dlbs"])
def test_phase_cpu_fits_the_timed_window_and_a_model_only_run_uses_every_core(ic_dataset, tmp_path, tool):
    """BM/1/PIN and BM/N/PIN, N = 2 where there are 2 cores, 16 images in batches of 8: in every
    repetition Σ phase CPU <= cores x E2E (+ CPU_TOLERANCE), i.e. the CPU is read over the timed
    window; the granted plan has no more runnable threads than cores (sampled from /proc) but at
    hand-offs; and model-only (dlbs) on every core of the host keeps them busy: >= 0.8 x cores x
    E2E, less what other processes of a shared machine took meanwhile (``others_cpu_s``)."""
    settings = {**IC_SETTINGS, "batch_size": 8, "dataset": {"path": None, "count": 16, "seed": 0},
                "loadgen": {**IC_SETTINGS["loadgen"], "min_query_count": 16}}
    ImageClassification.prepare_dataset(tmp_path / "ic16", settings)
    dlbs = {"exp.num_warmup_batches": 1, "exp.num_batches": 2, "exp.phase": "inference", "exp.replica_batch": None,
            "path": None}
    for cores in sorted({1, min(2, len(CPUS))}):
        job = ic_job_spec(tmp_path / "ic16", cores, "PIN", tool=tool, repetitions=2, warmup_repetitions=1, batch_size=8,
                   app_settings=settings, loadgen=settings["loadgen"], tool_settings=dlbs if tool == "dlbs" else None)
        result = run_job(job, tmp_path / f"{cores}.json", tmp_path / f"lg-{cores}")
        over = samples = 0
        for run in result.warmups + result.runs:
            cpu = sum(run.phases[key] for key in ("pre_cpu_s", "infer_cpu_s", "post_cpu_s"))
            assert cpu <= cores * run.e2e_s * (1 + CPU_TOLERANCE), (cores, run.repetition, cpu, run.e2e_s)
            assert run.threads["framework"]["intra_op"] == cores
            counts = run.telemetry["runnable_counts"]
            over, samples = over + sum(counts[cores + 1:]), samples + sum(counts)
        assert over <= RUNNABLE_OVER_SHARE * samples, (cores, [(r.telemetry["runnable_counts"],
                                                                r.telemetry.get("runnable_names"))
                                                               for r in result.warmups + result.runs])
        if tool == "dlbs" and cores == len(CPUS) > 1:
            for run in result.runs:
                free = cores * run.e2e_s - run.telemetry["others_cpu_s"]
                assert run.phases["infer_cpu_s"] >= 0.8 * free, (run.phases, run.e2e_s, run.telemetry)
