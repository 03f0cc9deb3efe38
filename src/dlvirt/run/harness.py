"""The LoadGen harness: runs *inside* a platform and measures end-to-end inference.

The ``mlperf`` tool (``dlvirt.run.tools.mlperf``) times each repetition of a launch
(``python -m dlvirt.run.launch JOB.json OUT_DIR``, which loads the app once) as one
MLPerf LoadGen test (PerformanceOnly) in the job's LoadGen scenario (``dlvirt.core.loadgen``).
Offline (the paper's): LoadGen issues the whole workload as one query; the pipeline reads and
pre-processes samples on a worker pool, infers batches and post-processes them before completing
their samples with LoadGen. E2E is the wall time from the query's issue to the last completion.
SingleStream and Server (``StreamPipeline``): LoadGen issues one-sample queries as its scenario asks
(the next once the last completed; Poisson arrivals at a target rate) and the same pipeline on the
same thread plan serves them as they come, batching what has arrived (at most ``batch_size``); the
repetition records LoadGen's latency percentiles, achieved rate, early-stopping verdict and
validity, and E2E is the wall time from the first issue to the last completion.

``harness.pipeline`` says whether the stages overlap: ``overlapped`` pre-processes ahead while
inference runs (the E2E an application would see); ``sequential`` pre-processes a turn of whole
batches (``TURN_SAMPLES_PER_WORKER``), then infers and post-processes them one batch at a time,
then the next turn, so the three stages' busy times add up to E2E (the decomposition the phase
figures show). Per stage a repetition records its *busy* wall time (the union of its
calls' intervals, not a sum over threads), its CPU time, and ``stall_s``, the time inference waited
for pre-processed samples; see ``ThreadPlan`` for how threads share the granted cores.

The stages are driven from the harness's main thread, the one that loaded the model, in every
repetition (LoadGen's test runs on a thread of its own and hands its queries over): as in a plain
loop, one thread drives the framework for the whole launch, so its intra-op pool is made once and
stays warm. A new driving thread per repetition would make a new OpenMP pool each time, and with
two pools alive OpenMP counts more of its threads than CPUs and stops keeping them spinning
between parallel regions (libgomp's throttled spin), so each of the many small regions of
PyTorch's SR and RS would wake its helper threads from sleep. See docs/measurement.md, "Scaling".
"""

from __future__ import annotations

import collections
import json
import math
import os
import queue
import threading
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import numpy as np

from dlvirt.apps.base import OMP_SPIN_COUNT, App, ThreadPlan
from dlvirt.core.loadgen import OFFLINE, PERCENTILES, SERVER, SINGLE_STREAM
from dlvirt.core.records import HarnessJob, Repetition
from dlvirt.core.vocabulary import PIPELINES, THREAD_POLICIES
from dlvirt.run.repetitions import warmup_workload
from dlvirt.system import observe

POLICIES = THREAD_POLICIES
# The stages alternating, each turn pre-processes whole batches holding at least this many samples
# per worker: a worker's last sample of a turn is idle time for the others, and each turn wakes the
# workers and then the framework's helpers again. RS at 2 cores (450 samples, batches of 8): the
# time outside inference per repetition was 0.092-0.098 s with a pool task per sample and one batch
# a turn, 0.072-0.086 s with drained turns of 16 samples, 0.063-0.071 s with turns of 64
# (docs/measurement.md, "RS's text handling"). MLPerf's own harnesses hold the whole performance
# set in memory; a turn holds less, or the same where the workload is smaller than a turn.
TURN_SAMPLES_PER_WORKER = 32


class ThreadPlanError(RuntimeError):
    """The framework runs other thread counts than the granted plan set."""


def granted_cores(observed: dict[str, Any]) -> int:
    """The cores the platform grants: the affinity, capped by the CFS quota."""
    cores = int(observed["nproc"])
    quota = observed["quota_cores"]
    if quota is not None:
        cores = max(1, min(cores, math.ceil(quota - 1e-9)))
    return cores


def plan_threads(policy: str, observed: dict[str, Any], pipeline: str | None = None,
                 pre_on_framework: bool = False) -> ThreadPlan:
    """The thread plan of ``policy`` ("naive" is the older name of framework-default) and
    ``pipeline`` (None: the plan's own choice: ``granted`` alternates the stages on all granted
    cores, ``framework-default`` overlaps them as a plain application would); ``pre_on_framework``:
    the app pre-processes with its framework's own ops (``App.preprocess_on_framework_threads``)."""
    if policy == "naive":
        policy = "framework-default"
    if policy not in POLICIES or (pipeline is not None and pipeline not in PIPELINES):
        raise ValueError(f"harness.threads {policy!r} / harness.pipeline {pipeline!r}: expected one of "
                         f"{POLICIES} / {PIPELINES} (or null)")
    cores = granted_cores(observed)
    if policy == "framework-default":
        overlap = pipeline != "sequential"
        # ThreadPoolExecutor's own default size, as a plain application's pool would be
        workers = min(32, (os.cpu_count() or 1) + 4)
        return ThreadPlan(policy=policy, cores=cores, intra_op=None, inter_op=None, pre_workers=workers,
                          overlap=overlap, post_thread=overlap, sharing="unmanaged")
    if pipeline == "overlapped" and cores >= 2:
        return ThreadPlan(policy=policy, cores=cores, intra_op=cores - 1, inter_op=1, pre_workers=1,
                          overlap=True, post_thread=False, sharing="split", retain_freed_memory=True)
    # the default (and one core, which cannot be split): the stages take turns, each on every
    # granted core; a pre-processing worker with nothing to do waits blocked, costing nothing, and
    # so do the framework's helpers while the workers run (OMP_SPIN_COUNT) unless the framework's
    # pool pre-processes too, on the same thread, where long spins carry it across the stages
    spins = None if pre_on_framework else OMP_SPIN_COUNT
    return ThreadPlan(policy=policy, cores=cores, intra_op=cores, inter_op=1, pre_workers=cores,
                      overlap=False, post_thread=False, sharing="alternate", omp_spin_count=spins,
                      retain_freed_memory=True)


def check_framework_threads(plan: ThreadPlan, reported: dict[str, Any]) -> None:
    """A granted plan holds only if the framework runs the counts it set."""
    wrong = [f"{key} {reported.get(key)} != planned {getattr(plan, key)}" for key in ("intra_op", "inter_op")
             if getattr(plan, key) is not None and reported.get(key) != getattr(plan, key)]
    # an OpenMP framework reports the spin count its libgomp read (others report none)
    spins = plan.environment().get("GOMP_SPINCOUNT")
    if spins is not None and "gomp_spincount_env" in reported and reported["gomp_spincount_env"] != spins:
        wrong.append(f"GOMP_SPINCOUNT {reported['gomp_spincount_env']} != planned {spins}")
    if wrong:
        raise ThreadPlanError("the framework does not run the granted thread plan: " + ", ".join(wrong))


class StageClock:
    """One pipeline stage's busy wall time (union of its calls' intervals) and CPU time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.intervals: list[tuple[float, float]] = []
        self.cpu_s = 0.0

    def record(self, start: float, end: float, cpu_s: float) -> None:
        with self.lock:
            self.intervals.append((start, end))
            self.cpu_s += cpu_s

    def busy_s(self) -> float:
        busy = 0.0
        reach = -math.inf
        for start, end in sorted(self.intervals):
            if end > reach:
                busy += end - max(start, reach)
                reach = end
        return busy


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
        self.plan = app.threads
        self.batch_size = batch_size
        self.lg = lg
        self.pre = StageClock()
        self.infer = StageClock()
        self.post = StageClock()
        self.stall_s = 0.0
        # the process's CPU clock at the query's issue and at the last completion: the CPU of the
        # timed window (E2E), whichever threads spent it
        self.issued_cpu: float | None = None
        self.completed_cpu: float | None = None
        self.samples = 0
        self.batches = 0
        self.issued_at: float | None = None
        self.completed_at: float | None = None
        self.error: BaseException | None = None
        self.completed_ids: set[int] = set()
        # issued queries, handed from LoadGen's thread to the serving one; None: the test ended
        self.queries: queue.SimpleQueue[list[tuple[int, int]] | None] = queue.SimpleQueue()
        # alternating stages: an app whose pre-processing is framework ops runs it on the serving thread
        self.inline_pre = not self.plan.overlap and getattr(app, "preprocess_on_framework_threads", False)
        # a token app's responses are token ids: LoadGen gets their count and each request's first token
        self.tokens = getattr(app, "token_latencies", False)

    # LoadGen callbacks ---------------------------------------------------------------------------
    def issue_queries(self, query_samples: list[Any]) -> None:
        if self.issued_at is None:
            self.issued_cpu, self.issued_at = time.process_time(), time.perf_counter()
        self.queries.put([(q.id, q.index) for q in query_samples])

    def flush_queries(self) -> None:
        pass

    # the serving thread ------------------------------------------------------------------------
    def serve(self) -> None:
        """Run the pipeline of each issued query on the calling thread until ``test_ended``. If this
        thread is stopped (an exception while it waits), later queries are completed unanswered so
        that LoadGen's test can end, and the exception goes on."""
        try:
            while (samples := self.queries.get()) is not None:
                self._run(samples)
        except BaseException:
            while (samples := self.queries.get()) is not None:
                self._complete([sid for sid, _ in samples], [b""] * len(samples))
            raise

    def test_ended(self) -> None:
        """LoadGen's test returned (or failed): ``serve`` returns once it has served what came."""
        self.queries.put(None)

    # pipeline ------------------------------------------------------------------------------------
    def _preprocess(self, index: int) -> Any:
        # a worker's own CPU; inline, the process's (the framework's pool helps; nothing else runs)
        clock = time.process_time if self.inline_pre else time.thread_time
        start, cpu = time.perf_counter(), clock()
        item = self.app.preprocess(index)
        self.pre.record(start, time.perf_counter(), clock() - cpu)
        return item

    def _preprocessed_turn(self, pool: ThreadPoolExecutor, samples: list[tuple[int, int]]
                           ) -> list[tuple[int, int, Future[Any]]]:
        """The stages alternating: ``samples`` (id, index) pre-processed before inference resumes,
        here where pre-processing is inline, else by every worker of ``pool``, each taking the next
        sample until none is left (one task per worker, not per sample: a pool's hand-off per task
        cost RS's two workers a quarter of their speed, docs/measurement.md, "RS's text handling");
        the wait for the workers counts as ``stall_s``."""
        items: list[Any] = [None] * len(samples)
        if self.inline_pre:
            for k, (_, index) in enumerate(samples):
                items[k] = self._preprocess(index)
        else:
            waited = time.perf_counter()
            order = iter(range(len(samples)))  # shared: each next() is atomic under the GIL

            def drain() -> None:
                for k in order:
                    items[k] = self._preprocess(samples[k][1])

            for task in [pool.submit(drain) for _ in range(min(self.plan.pre_workers, len(samples)))]:
                task.result()
            self.stall_s += time.perf_counter() - waited
        done: list[tuple[int, int, Future[Any]]] = []
        for (sid, index), item in zip(samples, items, strict=True):
            future: Future[Any] = Future()
            future.set_result(item)
            done.append((sid, index, future))
        return done

    def _first_token(self, sid: int, token: int) -> None:
        buffer = np.asarray([token], dtype=np.int32)
        self.lg.FirstTokenComplete([self.lg.QuerySampleResponse(sid, buffer.ctypes.data, buffer.nbytes)])

    def _complete(self, ids: list[int], answers: list[bytes]) -> None:
        buffers = [np.frombuffer(a, dtype=np.uint8) if a else np.zeros(0, np.uint8) for a in answers]
        count = (lambda b: (b.size // 4,)) if self.tokens else (lambda b: ())  # int32 token ids
        responses = [self.lg.QuerySampleResponse(i, b.ctypes.data if b.size else 0, b.size, *count(b))
                     for i, b in zip(ids, buffers, strict=True)]
        self.lg.QuerySamplesComplete(responses)
        self.completed_ids.update(ids)
        self.completed_cpu, self.completed_at = time.process_time(), time.perf_counter()

    def _postprocess(self, ids: list[int], indices: list[int], outputs: Any) -> None:
        start, cpu = time.perf_counter(), time.thread_time()
        answers = self.app.postprocess(indices, outputs)
        self._complete(ids, answers)  # reporting the answers to LoadGen is part of post-processing
        self.post.record(start, time.perf_counter(), time.thread_time() - cpu)

    def _infer_batch(self, batch: list[tuple[int, int, Future[Any]]], post_pool: ThreadPoolExecutor | None,
                     posts: list[Future[None]]) -> None:
        waited = time.perf_counter()
        items = [future.result() for _, _, future in batch]
        ids, indices = [sid for sid, _, _ in batch], [idx for _, idx, _ in batch]
        if self.tokens:
            self.app.first_token = lambda position, token: self._first_token(ids[position], token)
        start = time.perf_counter()
        self.stall_s += start - waited
        outputs = self.app.infer(items)
        # the CPU of inference is counted as the process's minus the pre and post threads' (its
        # framework pools are not our threads), so its clock records wall time only
        self.infer.record(start, time.perf_counter(), 0.0)
        self.batches += 1
        if post_pool is None:
            self._postprocess(ids, indices, outputs)
        else:
            posts.append(post_pool.submit(self._postprocess, ids, indices, outputs))

    def _run(self, samples: list[tuple[int, int]]) -> None:
        try:
            workers = self.plan.pre_workers
            with ThreadPoolExecutor(workers, thread_name_prefix="pre") as pre_pool, \
                    ThreadPoolExecutor(1, thread_name_prefix="post") as post_pool:
                posts: list[Future[None]] = []
                if self.plan.overlap:
                    self._run_overlapped(samples, pre_pool, post_pool, posts)
                else:
                    # whole batches, at least TURN_SAMPLES_PER_WORKER samples per worker
                    turn = self.batch_size * math.ceil(TURN_SAMPLES_PER_WORKER * workers / self.batch_size)
                    for first in range(0, len(samples), turn):
                        pending = self._preprocessed_turn(pre_pool, samples[first:first + turn])
                        for start in range(0, len(pending), self.batch_size):
                            self._infer_batch(pending[start:start + self.batch_size], None, posts)
                for post in posts:
                    post.result()
                self.samples += len(samples)
        except BaseException as exc:  # LoadGen must still see every sample complete, or it waits forever
            self.error = exc
            traceback.print_exc()
            remaining = [sid for sid, _ in samples if sid not in self.completed_ids]
            self._complete(remaining, [b""] * len(remaining))

    def _run_overlapped(self, samples: list[tuple[int, int]], pre_pool: ThreadPoolExecutor,
                        post_pool: ThreadPoolExecutor, posts: list[Future[None]]) -> None:
        """Pre-processing runs this far ahead of inference, a task per sample."""
        ahead = max(2 * self.batch_size, 4 * self.plan.pre_workers)
        pending: collections.deque[tuple[int, int, Future[Any]]] = collections.deque()
        issued = iter(samples)

        def top_up() -> None:
            while len(pending) < ahead and (nxt := next(issued, None)) is not None:
                pending.append((nxt[0], nxt[1], pre_pool.submit(self._preprocess, nxt[1])))

        top_up()
        while pending:
            batch = [pending.popleft() for _ in range(min(self.batch_size, len(pending)))]
            top_up()
            self._infer_batch(batch, post_pool if self.plan.post_thread else None, posts)

    def phases(self) -> dict[str, float | None]:
        window_cpu = (self.completed_cpu or 0.0) - (self.issued_cpu or 0.0)
        return {"pre_s": self.pre.busy_s(), "infer_s": self.infer.busy_s(), "post_s": self.post.busy_s(),
                "pre_cpu_s": self.pre.cpu_s, "post_cpu_s": self.post.cpu_s,
                "infer_cpu_s": max(0.0, window_cpu - self.pre.cpu_s - self.post.cpu_s),
                "stall_s": self.stall_s, **getattr(self.app, "infer_phases", dict)()}


class StreamPipeline(OfflinePipeline):
    """SingleStream and Server: LoadGen issues queries of one sample while the test runs; the serving
    thread (``serve``: the harness's main thread) takes what has arrived (at most ``batch_size``
    samples) through the same pre-process → infer → post-process stages on the same thread plan.
    ``overlap``: a sample's pre-processing
    starts when it arrives, beside inference of the batch before; otherwise the serving thread
    pre-processes a batch, infers it, post-processes it, then takes the next."""

    def __init__(self, app: App, batch_size: int, lg: Any) -> None:
        super().__init__(app, batch_size, lg)
        self.arrived: collections.deque[tuple[int, int, Future[Any] | None]] = collections.deque()
        self.wake = threading.Condition()
        self.stopping = False
        workers = self.plan.pre_workers
        self.pre_pool = ThreadPoolExecutor(workers, thread_name_prefix="pre")
        self.post_pool = ThreadPoolExecutor(1, thread_name_prefix="post")

    def issue_queries(self, query_samples: list[Any]) -> None:
        if self.issued_at is None:
            self.issued_cpu, self.issued_at = time.process_time(), time.perf_counter()
        with self.wake:
            if self.error is None:
                for q in query_samples:
                    pre = self.pre_pool.submit(self._preprocess, q.index) if self.plan.overlap else None
                    self.arrived.append((q.id, q.index, pre))
                self.wake.notify()
                return
        # a failed pipeline still completes every query, or LoadGen waits forever
        self._complete([q.id for q in query_samples], [b""] * len(query_samples))

    def _take(self) -> list[tuple[int, int, Future[Any] | None]] | None:
        with self.wake:
            while not self.arrived and not self.stopping:
                self.wake.wait()
            if not self.arrived:
                return None
            return [self.arrived.popleft() for _ in range(min(self.batch_size, len(self.arrived)))]

    def _serve(self) -> None:
        posts: list[Future[None]] = []
        taken: list[tuple[int, int, Future[Any] | None]] = []
        try:
            while (taken := self._take() or []):
                if self.plan.overlap:
                    batch = [(sid, idx, cast(Future[Any], pre)) for sid, idx, pre in taken]
                else:
                    batch = self._preprocessed_turn(self.pre_pool, [(sid, idx) for sid, idx, _ in taken])
                self._infer_batch(batch, self.post_pool if self.plan.post_thread else None, posts)
                self.samples += len(batch)
                taken = []
            for post in posts:
                post.result()
        except BaseException as exc:
            traceback.print_exc()
            with self.wake:
                self.error = exc
                left = taken + list(self.arrived)
                self.arrived.clear()
            remaining = [sid for sid, _, _ in left if sid not in self.completed_ids]
            self._complete(remaining, [b""] * len(remaining))

    def serve(self) -> None:
        try:
            self._serve()
        finally:
            self.pre_pool.shutdown()
            self.post_pool.shutdown()

    def test_ended(self) -> None:
        with self.wake:
            self.stopping = True
            self.wake.notify()


# A derived min_duration_ms asks for this share of the time the workload takes at the estimated
# rate divided by 1.1 (LoadGen's Offline slack on min_duration x expected_qps, so that it issues the
# workload and no more): a repetition is VALID unless its rate exceeds the estimate by more than
# 1.1 / share - 1 = 120 % (a warm-up may well be a third slower than the repetitions after it).
DERIVED_DURATION_SHARE = 0.5


def loadgen_settings(configured: dict[str, Any], workload: int, estimate_qps: float | None) -> dict[str, Any]:
    """``expected_qps`` and ``min_duration_ms`` as configured, or derived (configured null) from
    ``estimate_qps``, the rate of the job's previous repetition, so that LoadGen issues exactly the
    workload and a normal repetition is VALID: it meets a minimum duration that a repetition
    much faster than the previous one would miss. The first repetition of a job, and one after a
    partial warm-up (``study.warmup_share``), has no estimate: 1 sample/s and no minimum duration."""
    qps = configured.get("expected_qps")
    duration = configured.get("min_duration_ms")
    derived = qps is None or duration is None
    if qps is None:
        qps = estimate_qps if estimate_qps else 1.0
    if duration is None:
        duration = (math.floor(1000.0 * DERIVED_DURATION_SHARE * workload / (1.1 * qps))
                    if estimate_qps else 0)
    return {"expected_qps": float(qps), "min_duration_ms": int(duration), "derived": derived}


# Server without a configured target rate: this share of the launch's measured Offline throughput
SERVER_QPS_FRACTION = 0.5
# Server without a configured latency bound: LoadGen gets one this long (never binding), so its
# verdict rests on the query count, duration and early stopping
UNBOUNDED_LATENCY_NS = 3600 * 10**9


def latency_record(detail: dict[str, Any], scenario: str) -> dict[str, Any]:
    """What a SingleStream or Server repetition keeps of LoadGen's detail log: the latency percentiles
    (ns), the achieved rate, the early-stopping verdict and what LoadGen's validity rests on."""
    qps = detail.get("result_completed_samples_per_sec") if scenario == SERVER else \
        detail.get("result_qps_with_loadgen_overhead")
    return {
        "latency_ns": {name: detail.get(f"result_{key}_percentile_latency_ns") for name, key in PERCENTILES.items()},
        "mean_latency_ns": detail.get("result_mean_latency_ns"),
        "max_latency_ns": detail.get("result_max_latency_ns"),
        "queries": detail.get("result_query_count"),
        "achieved_qps": qps,
        "scheduled_qps": detail.get("result_scheduled_samples_per_sec"),
        "early_stopping_met": detail.get("early_stopping_met"),
        "early_stopping": " ".join(str(detail.get("early_stopping_result") or "").split()),
        "perf_constraints_met": detail.get("result_perf_constraints_met"),
        "invalid_reason": detail.get("result_invalid_reason") or None,
    }


def token_record(detail: dict[str, Any], scenario: str) -> dict[str, Any]:
    """What a token app's repetition keeps of LoadGen's token measurements: tokens/s, and in
    SingleStream and Server time to first token and time per output token percentiles (ns)."""
    if scenario == OFFLINE:
        return {"tokens_per_s": detail.get("result_tokens_per_second")}
    return {"tokens_per_s": detail.get("result_completed_tokens_per_second"),
            "first_token_ns": {name: detail.get(f"result_first_token_{key}_percentile_latency_ns")
                               for name, key in PERCENTILES.items()},
            "time_per_output_token_ns": {name: detail.get(f"result_time_per_output_token_{key}_percentile_ns")
                                         for name, key in PERCENTILES.items()}}


def server_target_qps(configured: dict[str, Any], offline_qps: list[float]) -> tuple[float, str]:
    """The Server scenario's target rate and where it came from: ``server_target_qps`` as configured,
    else ``server_qps_fraction`` of the launch's measured Offline throughput (its best warm-up)."""
    given = configured.get("server_target_qps")
    if given:
        return float(given), "configured (server_target_qps)"
    if not offline_qps:
        raise RuntimeError("Server needs server_target_qps or an Offline warm-up to measure the throughput")
    fraction = float(configured.get("server_qps_fraction") or SERVER_QPS_FRACTION)
    best = max(offline_qps)
    return fraction * best, f"{fraction:g} x the launch's Offline warm-up throughput {best:.4g}/s"


def run_repetition(app: App, job: HarnessJob, rep: int, out_dir: Path, estimate_qps: float | None = None,
                   scenario: str = OFFLINE, target_qps: tuple[float, str] | None = None,
                   share: float = 1.0) -> Repetition:
    import mlperf_loadgen as lg

    settings_cfg = job.loadgen
    rep_dir = out_dir / f"rep-{rep:04d}"
    rep_dir.mkdir(parents=True, exist_ok=True)
    observed = observe.observe()
    total = app.sample_count()
    perf_count = min(settings_cfg.get("performance_sample_count") or total, total)
    workload = int(settings_cfg.get("min_query_count") or total)
    if share < 1.0:  # a partial warm-up: whole batches of it
        workload = warmup_workload(workload, share, job.batch_size)

    settings = lg.TestSettings()
    settings.mode = lg.TestMode.PerformanceOnly
    settings.min_query_count = workload
    settings.performance_sample_count_override = perf_count
    tokens = getattr(app, "token_latencies", False)
    settings.use_token_latencies = tokens
    if scenario == OFFLINE:
        used = loadgen_settings(settings_cfg, workload, estimate_qps)
        settings.scenario = lg.TestScenario.Offline
        settings.min_duration_ms = used["min_duration_ms"]
        settings.offline_expected_qps = used["expected_qps"]
        pipeline: OfflinePipeline = OfflinePipeline(app, job.batch_size, lg)
    else:
        # latency scenarios: the workload's queries (min_query_count), no minimum duration unless configured
        used = {"min_duration_ms": int(settings_cfg.get("min_duration_ms") or 0)}
        settings.min_duration_ms = used["min_duration_ms"]
        settings.max_query_count = workload if not used["min_duration_ms"] else 0
        if scenario == SINGLE_STREAM:
            settings.scenario = lg.TestScenario.SingleStream
            expected = 1e9 / estimate_qps if estimate_qps else 1e9
            settings.single_stream_expected_latency_ns = max(1, int(expected))
            used["expected_latency_ns"] = int(expected)
        else:
            assert target_qps is not None
            bound = settings_cfg.get("server_target_latency_ms")
            settings.scenario = lg.TestScenario.Server
            settings.server_target_qps = target_qps[0]
            settings.server_target_latency_ns = int(bound * 1e6) if bound else UNBOUNDED_LATENCY_NS
            if tokens:  # MLPerf's LLM bounds, never binding here, as the latency bound
                settings.ttft_latency = settings.tpot_latency = UNBOUNDED_LATENCY_NS
            used.update(target_qps=target_qps[0], target_qps_from=target_qps[1],
                        target_latency_ns=settings.server_target_latency_ns)
        pipeline = StreamPipeline(app, job.batch_size, lg)
    log_out = lg.LogOutputSettings()
    log_out.outdir = str(rep_dir)
    log_out.copy_summary_to_stdout = False
    log_settings = lg.LogSettings()
    log_settings.log_output = log_out
    log_settings.enable_trace = False

    app.begin_repetition(rep_dir)
    sut = lg.ConstructSUT(pipeline.issue_queries, pipeline.flush_queries)
    # QSL load/unload are no-ops on purpose: E2E includes reading samples from storage.
    qsl = lg.ConstructQSL(total, perf_count, lambda _: None, lambda _: None)
    started = datetime.now(UTC)

    def loadgen_test() -> None:
        try:
            lg.StartTestWithLogSettings(sut, qsl, settings, log_settings)
        except BaseException as exc:
            pipeline.error = pipeline.error or exc
        finally:
            pipeline.test_ended()

    # LoadGen's test on a thread of its own; its queries are served here, on the thread that loaded
    # the model (see the module's docstring)
    test = threading.Thread(target=loadgen_test, name="loadgen-test")
    test.start()
    try:
        pipeline.serve()
    finally:
        test.join()
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
    loadgen = {
        "samples_per_s": detail.get("result_samples_per_second"),
        "validity": detail.get("result_validity"),
        "min_duration_met": detail.get("result_min_duration_met"),
        "min_queries_met": detail.get("result_min_queries_met"),
        "performance_sample_count": perf_count,
        "settings": {**{k: settings_cfg[k] for k in sorted(settings_cfg)}, **used},
    }
    if scenario != OFFLINE:
        loadgen.update(scenario=scenario, **latency_record(detail, scenario))
    if tokens:
        loadgen["tokens"] = token_record(detail, scenario)
    return Repetition.measured(
        repetition=rep, e2e_s=e2e, phases=pipeline.phases(), samples=pipeline.samples, batches=pipeline.batches,
        observed=observed, threads=app.threads.to_dict(),  # main() adds what the framework reports
        quality=quality, started=started, finished=finished, loadgen=loadgen)

