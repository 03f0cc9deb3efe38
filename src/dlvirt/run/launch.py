"""A launch inside the platform: ``python -m dlvirt.run.launch JOB.json OUT_DIR``.

Loads the job's app once, then runs warm-up and counted repetitions, each timed by the job's tool
(``dlvirt.run.tools``: ``mlperf`` through the LoadGen harness, ``dlbs`` model-only), until the
stopping rule says enough; writes ``harness.json`` (``HarnessOutput``) with the launch's timeline.
Only numpy and the app's framework are imported here (a TCG guest pays for every import).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

from dlvirt.apps import app_class, job_packages
from dlvirt.core.codeversion import code_version
from dlvirt.core.records import HarnessJob, HarnessOutput, Repetition
from dlvirt.run.harness import check_framework_threads, plan_threads
from dlvirt.run.repetitions import precision, steady, stop_reason
from dlvirt.run.tools import tool_class
from dlvirt.run.turns import Turns
from dlvirt.system import gpu, observe
from dlvirt.system.hostinfo import STACK_PACKAGES, package_versions, python_stack
from dlvirt.system.pagecache import Prefetch


def main(argv: list[str] | None = None) -> int:
    # Wall-clock time the harness is up (interpreter and imports done): a platform subtracts the
    # moment it launched it to get its start-up overhead (containers share the host's clock).
    entered_unix = time.time()
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m dlvirt.run.launch JOB.json OUT_DIR", file=sys.stderr)
        return 2
    job = HarnessJob.read(Path(argv[0]))
    out_dir = Path(argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    # the disk reads the weights while the framework is imported (a guest's page cache never holds them)
    prefetch = None if job.weights is None else Prefetch(Path(job.weights["path"]))
    observed = observe.observe()
    plan = plan_threads(job.threads, observed, job.pipeline,
                        getattr(app_class(job.app), "preprocess_on_framework_threads", False))
    # before anything loads the framework's OpenMP runtime, which reads it once (ThreadPlan), and
    # before the large allocations the thresholds are for: the app's constructor may already import
    # its framework (SR's features build on torch); every repetition records what was set
    allocator_set = plan.apply()
    app = app_class(job.app)(job.app_settings, Path(job.dataset_dir), job.scenario.processor, plan,
                             initial_weights=job.weights)
    tool = tool_class(job.tool)
    # who holds the model: the app, or the tool's own process (a DLBS checkout runs its own)
    host = tool.model_host(app, job)
    # The launch's timeline (JobResult.launch_s): start-up ends once the framework is imported;
    # then the model load, the warm-ups and the counted repetitions, each its loop's wall time.
    import_start = time.perf_counter()
    host.import_framework()
    timeline: dict[str, float] = {"framework_import_s": time.perf_counter() - import_start,
                                  "ready_unix": time.time(), "ready_uptime_s": observe.uptime_s()}
    print(f"[harness] {job.app} {job.scenario_name}: loading the model", flush=True)
    load_start, usage_before = time.perf_counter(), observe.counters()
    host.load_model()
    # inside the load's window: what the load waited for the prefetch to be asked counts as load
    prefetched = None if prefetch is None else prefetch.finish()
    load_s = time.perf_counter() - load_start
    # how the load went in this process (a model held in another process: nothing to say here)
    load = observe.process_usage(usage_before, observe.counters()) if host.in_process else {}
    if prefetched is not None:
        load["weights_prefetch"] = prefetched
    first_start = time.perf_counter()
    host.first_call()
    timeline["first_call_s"] = time.perf_counter() - first_start
    # Warm-up repetitions (page cache, lazy framework initialisation) are run and kept apart,
    # never counted in the statistics: warmup_repetitions, a count fixed before the launch (the
    # first over warmup_share of the workload, the rest whole); every counted one counts
    # (run.repetitions).
    warmups: list[Repetition] = []
    runs: list[Repetition] = []
    estimate_qps: float | None = None
    timer = tool.timer(app, job)
    rep, stopped = 0, None
    spent: dict[int, float] = {}  # each repetition's wall time, all the harness did for it
    # another process's turns on these CPUs before each repetition and after the last (dlvirt.run.turns);
    # leaving early closes the socket, which ends the other side's turns too
    turns = None if job.turns is None else Turns(Path(job.turns))
    while stopped is None:
        if turns is not None:
            turns.take(rep)
        # the tool's own warm-up (a Server launch calibrating its rate) counts as a warm-up too
        warming = rep < job.warmup_repetitions or timer.calibrating()
        rep_start = time.perf_counter()
        before = observe.counters()
        # GPU scenarios: the GPUs are sampled while the repetition runs (dlvirt.system.gpu)
        with gpu.sampled(job.scenario.processor == "GPU") as sampler, observe.ThreadSampler() as threads:
            share = job.warmup_share if warming and rep == 0 else 1.0
            record = timer.time(rep, out_dir, estimate_qps, warmups, share)
            # the kernel's counters end with the repetition, before the GPU sampler may read on after it
            after = observe.counters()
        telemetry = observe.telemetry(before, after, threads)
        # a model held in another process (the tool's own) has nothing to ask: {}
        used = None if sampler is None else gpu.repetition_record(sampler, host.gpu_state())
        reported = host.framework_threads()
        if plan.policy == "granted" and host.in_process:
            check_framework_threads(plan, reported)
        record = dataclasses.replace(
            record, warmup=warming, gpu=used, telemetry=telemetry,
            threads={**plan.to_dict(), "compute_threads": plan.compute_threads(), "framework": reported,
                     "allocator": allocator_set})
        # the next repetition's LoadGen settings start from this one's rate; a partial warm-up's
        # spreads a repetition's fixed costs over fewer samples and would understate it, so that
        # a normal repetition missed the minimum duration derived from it (INVALID): no estimate
        estimate_qps = record.samples_per_s if share == 1.0 else None
        latency = (record.loadgen or {}).get("latency_ns") or {}
        tail = f", p50 {latency['p50'] / 1e6:.2f} ms, p99 {latency['p99'] / 1e6:.2f} ms" \
            if latency.get("p50") and latency.get("p99") else ""
        print(f"[harness] {job.app} {job.scenario_name} {job.tool} {'warm-up' if warming else 'rep'} {rep}: "
              f"{tool.kind.measure} {record.e2e_s:.3f} s, "
              f"{record.samples} samples{tail}", flush=True)
        (warmups if warming else runs).append(record)
        spent[record.repetition] = time.perf_counter() - rep_start
        rep += 1
        if not warming:
            stopped = stop_reason(job.repetitions, [r.e2e_s for r in runs])
    if turns is not None:
        turns.take(None)
        turns.close()
    # the framework's first call (first_call_s) is warm-up time too
    timeline.update(warmup_s=timeline["first_call_s"] + sum(spent[r.repetition] for r in warmups),
                    counted_s=sum(spent[r.repetition] for r in runs))
    HarnessOutput(
        app=job.app, entered_unix=entered_unix, runs=runs, warmups=warmups,
        repetitions={"asked": job.repetitions, "ran": len(runs), "stop": stopped,
                     "rel_ci95": precision([r.e2e_s for r in runs]), "warmups": len(warmups),
                     "steady": steady([r.e2e_s for r in runs], job.warmup_tolerance)},
        model_load_s=load_s, timeline=timeline, dataset=app.dataset_info,
        model={**host.model_provenance(), "load": load},
        versions={"python": sys.version.split()[0], **package_versions((*job_packages(), *STACK_PACKAGES)),
                  **app.framework_versions()},
        stack=python_stack(job_packages()), code=code_version(),
    ).write(out_dir / "harness.json")
    return 0


if __name__ == "__main__":
    status = main()
    # Every output is written and closed by now: leave without the interpreter's teardown, whose
    # framework exit handlers (TensorFlow ~1 s, PyTorch ~0.5 s here) would cost every launch.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
