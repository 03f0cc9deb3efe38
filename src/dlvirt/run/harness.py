"""The LoadGen harness: runs *inside* a platform and measures end-to-end inference.

``python -m dlvirt.run.harness JOB.json OUT_DIR`` loads the app once, then runs each repetition as one
MLPerf LoadGen Offline test (PerformanceOnly). LoadGen issues the whole workload as one query; the
pipeline reads and pre-processes samples on a worker pool sized to the cores the platform grants,
overlapping inference, and post-processes each batch on its own thread before completing its samples
with LoadGen. E2E is the wall time from the query's issue to the last completion; each phase's time
is the sum of the time spent in that phase's calls (phases overlap, so they add up to more than E2E).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
import sys
import threading
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from dlvirt.apps import app_class
from dlvirt.apps.base import App, ThreadPlan
from dlvirt.core.interval import relative_half_width
from dlvirt.core.records import HarnessJob, HarnessOutput, Repetition
from dlvirt.run import dlbs
from dlvirt.run.repetitions import stop_reason
from dlvirt.system import gpu, observe
from dlvirt.system.hostinfo import package_versions, python_stack


def plan_threads(policy: str, observed: dict[str, Any]) -> ThreadPlan:
    """Size thread pools from what the platform grants (affinity, CFS quota), or naively from
    ``os.cpu_count()`` as many applications do (which oversubscribes under a CFS quota)."""
    if policy == "naive":
        cores = os.cpu_count() or 1
    else:
        cores = int(observed["nproc"])
        quota = observed["quota_cores"]
        if quota is not None:
            cores = max(1, min(cores, math.ceil(quota - 1e-9)))
    return ThreadPlan(policy=policy, cores=cores, intra_op=cores, inter_op=1 if cores < 4 else 2,
                      pre_workers=cores)


def parse_loadgen_detail(path: Path) -> dict[str, Any]:
    """The ``:::MLLOG {json}`` lines of mlperf_log_detail.txt as key -> value."""
    values: dict[str, Any] = {}
    for line in path.read_text(errors="replace").splitlines():
        if not line.startswith(":::MLLOG "):
            continue
        try:
            entry = json.loads(line[len(":::MLLOG "):])
        except json.JSONDecodeError:
            continue
        values[entry.get("key", "")] = entry.get("value")
    return values


class OfflinePipeline:
    """SUT callbacks plus the pre-process → infer → post-process pipeline for one repetition."""

    def __init__(self, app: App, batch_size: int, lg: Any) -> None:
        self.app = app
        self.batch_size = batch_size
        self.lg = lg
        self.lock = threading.Lock()
        self.pre_s = 0.0
        self.infer_s = 0.0
        self.post_s = 0.0
        self.samples = 0
        self.batches = 0
        self.process_threads = 0
        self.issued_at: float | None = None
        self.completed_at: float | None = None
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        self.completed_ids: set[int] = set()

    # LoadGen callbacks ---------------------------------------------------------------------------
    def issue_queries(self, query_samples: list[Any]) -> None:
        self.issued_at = time.perf_counter()
        samples = [(q.id, q.index) for q in query_samples]
        self.thread = threading.Thread(target=self._run, args=(samples,), name="dlvirt-pipeline")
        self.thread.start()

    def flush_queries(self) -> None:
        pass

    # pipeline ------------------------------------------------------------------------------------
    def _preprocess(self, index: int) -> Any:
        start = time.perf_counter()
        item = self.app.preprocess(index)
        spent = time.perf_counter() - start
        with self.lock:
            self.pre_s += spent
        return item

    def _complete(self, ids: list[int], answers: list[bytes]) -> None:
        buffers = [np.frombuffer(a, dtype=np.uint8) if a else np.zeros(0, np.uint8) for a in answers]
        responses = [self.lg.QuerySampleResponse(i, b.ctypes.data if b.size else 0, b.size)
                     for i, b in zip(ids, buffers, strict=True)]
        self.lg.QuerySamplesComplete(responses)
        self.completed_ids.update(ids)
        self.completed_at = time.perf_counter()

    def _postprocess(self, ids: list[int], indices: list[int], outputs: Any) -> None:
        start = time.perf_counter()
        answers = self.app.postprocess(indices, outputs)
        self.post_s += time.perf_counter() - start  # one post thread: no lock needed
        self._complete(ids, answers)

    def _run(self, samples: list[tuple[int, int]]) -> None:
        try:
            workers = self.app.threads.pre_workers
            prefetch = max(2 * self.batch_size, 4 * workers)
            with ThreadPoolExecutor(workers, thread_name_prefix="pre") as pre_pool, \
                    ThreadPoolExecutor(1, thread_name_prefix="post") as post_pool:
                pending: collections.deque[tuple[int, int, Future[Any]]] = collections.deque()
                queue = iter(samples)
                posts: list[Future[None]] = []

                def top_up() -> None:
                    while len(pending) < prefetch:
                        nxt = next(queue, None)
                        if nxt is None:
                            return
                        pending.append((nxt[0], nxt[1], pre_pool.submit(self._preprocess, nxt[1])))

                top_up()
                while pending:
                    batch = [pending.popleft() for _ in range(min(self.batch_size, len(pending)))]
                    items = [future.result() for _, _, future in batch]
                    top_up()
                    start = time.perf_counter()
                    outputs = self.app.infer(items)
                    self.infer_s += time.perf_counter() - start
                    self.batches += 1
                    ids = [sid for sid, _, _ in batch]
                    posts.append(post_pool.submit(self._postprocess, ids, [idx for _, idx, _ in batch], outputs))
                    self.process_threads = max(self.process_threads, observe.process_threads())
                for post in posts:
                    post.result()
                self.samples = len(samples)
        except BaseException as exc:  # LoadGen must still see every sample complete, or it waits forever
            self.error = exc
            traceback.print_exc()
            remaining = [sid for sid, _ in samples if sid not in self.completed_ids]
            self._complete(remaining, [b""] * len(remaining))

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()


def run_repetition(app: App, job: HarnessJob, rep: int, out_dir: Path) -> Repetition:
    import mlperf_loadgen as lg

    settings_cfg = job.loadgen
    rep_dir = out_dir / f"rep-{rep:04d}"
    rep_dir.mkdir(parents=True, exist_ok=True)
    observed = observe.observe()
    total = app.sample_count()
    perf_count = min(settings_cfg.get("performance_sample_count") or total, total)

    settings = lg.TestSettings()
    settings.scenario = lg.TestScenario.Offline
    settings.mode = lg.TestMode.PerformanceOnly
    settings.min_duration_ms = int(settings_cfg["min_duration_ms"])
    settings.min_query_count = int(settings_cfg.get("min_query_count") or total)
    settings.offline_expected_qps = float(settings_cfg["expected_qps"])
    settings.performance_sample_count_override = perf_count
    log_out = lg.LogOutputSettings()
    log_out.outdir = str(rep_dir)
    log_out.copy_summary_to_stdout = False
    log_settings = lg.LogSettings()
    log_settings.log_output = log_out
    log_settings.enable_trace = False

    pipeline = OfflinePipeline(app, job.batch_size, lg)
    app.begin_repetition(rep_dir)
    sut = lg.ConstructSUT(pipeline.issue_queries, pipeline.flush_queries)
    # QSL load/unload are no-ops on purpose: E2E includes reading samples from storage.
    qsl = lg.ConstructQSL(total, perf_count, lambda _: None, lambda _: None)
    started = datetime.now(UTC)
    try:
        lg.StartTestWithLogSettings(sut, qsl, settings, log_settings)
        pipeline.join()
    finally:
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    finished = datetime.now(UTC)
    observe.resample_ran_on(observed)
    quality = app.end_repetition()
    if pipeline.error is not None:
        raise RuntimeError(f"repetition {rep} failed: {pipeline.error!r}") from pipeline.error
    if pipeline.issued_at is None or pipeline.completed_at is None:
        raise RuntimeError(f"repetition {rep}: LoadGen issued no query")
    detail = parse_loadgen_detail(rep_dir / "mlperf_log_detail.txt")
    e2e = pipeline.completed_at - pipeline.issued_at
    return Repetition.measured(
        repetition=rep, e2e_s=e2e,
        phases={"pre_s": pipeline.pre_s, "infer_s": pipeline.infer_s, "post_s": pipeline.post_s},
        samples=pipeline.samples, batches=pipeline.batches, observed=observed,
        threads={**app.threads.to_dict(), "post_workers": 1, "process_threads_peak": pipeline.process_threads},
        quality=quality, started=started, finished=finished,
        loadgen={
            "samples_per_s": detail.get("result_samples_per_second"),
            "validity": detail.get("result_validity"),
            "min_duration_met": detail.get("result_min_duration_met"),
            "min_queries_met": detail.get("result_min_queries_met"),
            "performance_sample_count": perf_count,
            "settings": {k: settings_cfg[k] for k in sorted(settings_cfg)},
        })


def main(argv: list[str] | None = None) -> int:
    # Wall-clock time the harness is up (interpreter and imports done): a platform subtracts the
    # moment it launched it to get its start-up overhead (containers share the host's clock).
    entered_unix = time.time()
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m dlvirt.run.harness JOB.json OUT_DIR", file=sys.stderr)
        return 2
    job = HarnessJob.read(Path(argv[0]))
    out_dir = Path(argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    observed = observe.observe()
    plan = plan_threads(job.threads, observed)
    app = app_class(job.app)(job.app_settings, Path(job.dataset_dir), job.scenario.processor, plan)
    # tool dlbs: model-only batches (dlvirt.run.dlbs); a DLBS checkout's experimenter brings its own model
    experimenter = job.tool == "dlbs" and dlbs.experimenter_model(job) is not None
    measure = dlbs.run_repetition if job.tool == "dlbs" else run_repetition
    load_start = time.perf_counter()
    if not experimenter:
        app.load_model()
    load_s = time.perf_counter() - load_start
    # Warm-up repetitions (page cache, lazy framework initialisation) are run and kept apart,
    # never counted in the statistics.
    warmups: list[Repetition] = []
    runs: list[Repetition] = []
    rep, stopped = 0, None
    while stopped is None:
        is_warmup = rep < job.warmup_repetitions
        # GPU scenarios: the GPUs are sampled while the repetition runs (dlvirt.system.gpu)
        with gpu.sampled(job.scenario.processor == "GPU") as sampler:
            record = measure(app, job, rep, out_dir)
        # a DLBS checkout's experimenter holds the model in its own process: nothing to ask
        used = None if sampler is None else gpu.repetition_record(sampler, {} if experimenter else app.gpu_state())
        record = dataclasses.replace(record, warmup=is_warmup, gpu=used)
        print(f"[harness] {job.app} {job.scenario_name} {'warm-up' if is_warmup else 'rep'} {rep}: "
              f"{'model-only' if job.tool == 'dlbs' else 'E2E'} {record.e2e_s:.3f} s, "
              f"{record.samples} samples", flush=True)
        (warmups if is_warmup else runs).append(record)
        rep += 1
        if rep >= job.warmup_repetitions:
            stopped = stop_reason(job.repetitions, [r.e2e_s for r in runs])
    HarnessOutput(
        app=job.app, entered_unix=entered_unix, runs=runs, warmups=warmups,
        repetitions={"asked": job.repetitions, "ran": len(runs), "stop": stopped,
                     "rel_ci95": relative_half_width([r.e2e_s for r in runs])},
        model_load_s=load_s, dataset=app.dataset_info,
        model=dlbs.experimenter_provenance(job, app.framework) if experimenter else app.model_provenance(),
        versions={"python": sys.version.split()[0], **package_versions(), **app.framework_versions()},
        stack=python_stack(),
    ).write(out_dir / "harness.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
