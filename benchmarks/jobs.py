"""What the benchmark scripts share: the IC settings they run, the default study's settings, and the
job spec the real runner takes."""

from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
import itertools
import multiprocessing
import os
import statistics
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import yaml

from dlvirt.apps import app_class
from dlvirt.core.memory import parse_mib
from dlvirt.core.records import JobSpec
from dlvirt.core.scenario import Scenario
from dlvirt.plan.jobspec import job_spec as build_job_spec
from dlvirt.plan.planner import Job
from dlvirt.run.tools import tool_class

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
STUDY_CONFIG = REPO / "config" / "config.yaml"
# study.memory's default, which the workflow gives every platform (memory_mib)
MEMORY_MIB = parse_mib(yaml.safe_load(SCHEMA.read_text())["properties"]["study"]["properties"]["memory"]["default"])


def settings(images: int, batch: int) -> dict[str, Any]:
    """IC settings for ``images`` generated JPEGs in batches of ``batch`` (random weights)."""
    return {"batch_size": batch, "seed": 0, "dataset": {"path": None, "count": images, "seed": 0},
            "weights": {"path": None, "sha256": None},
            "loadgen": {"min_query_count": images, "min_duration_ms": 0, "expected_qps": 1,
                        "performance_sample_count": None}}


def study_config(path: Path = STUDY_CONFIG) -> dict[str, Any]:
    """The default study's config (config/config.yaml) with the schema's defaults filled in, as the
    workflow fills them."""
    from snakemake.utils import validate

    config = yaml.safe_load(path.read_text())
    validate(config, str(SCHEMA))
    return copy.deepcopy(config)


def schema_config() -> dict[str, Any]:
    """A config of the schema's defaults, as the workflow fills them in."""
    from snakemake.utils import validate

    config: dict[str, Any] = {}
    validate(config, str(SCHEMA))
    return config


def job_spec(app: str, cfg: dict[str, Any], dataset: Path, scenario: str, reps: int | dict[str, Any], *,
             threads: str = "granted", pipeline: str | None = None, tool: str = "mlperf",
             tool_section: dict[str, Any] | None = None, platform_settings: dict[str, Any] | None = None) -> JobSpec:
    """One job of ``tool`` and ``app`` on ``scenario`` (``BM/2/PIN/CPU``) as the workflow builds it
    (``dlvirt.plan.jobspec``) from the schema's defaults with ``cfg`` as the app's section and
    ``tool_section`` as the tool's: one warm-up before ``reps``, the default study.memory, the dataset
    the script generated, no weights resource (the app initialises its own), no rerun rule."""
    config = schema_config()
    config["apps"][app] = cfg
    config["study"].update(repetitions=reps, warmup_repetitions=1)
    config["harness"].update(threads=threads, pipeline=pipeline)
    section = tool_class(tool).kind.section
    if section and tool_section is not None:
        config[section] = tool_section
    spec = build_job_spec(config, Job(tool, app, Scenario.parse(scenario)))
    return dataclasses.replace(spec, dataset_dir=str(dataset), weights_file=None, interference=None,
                               platform_settings={"memory_mib": MEMORY_MIB, **(platform_settings or {})})


class RawLoop:
    """The framework's own loop, built in the calling process: pinned to ``cpus`` before the
    framework starts, the model built with the framework's default threads, every sample
    pre-processed into memory. ``timed_pass(samples)`` runs ``infer`` over that many samples in the
    app's batches (the whole dataset by default, from its first batch round again)."""

    def __init__(self, app: str, settings: dict[str, Any], dataset: str, cpus: list[int]) -> None:
        os.sched_setaffinity(0, cpus)
        from dlvirt.run.harness import plan_threads
        from dlvirt.system import observe

        # the granted plan's OpenMP spin count and allocator too, so that the loop is as strong as the harness
        inline = getattr(app_class(app), "preprocess_on_framework_threads", False)
        plan_threads("granted", observe.observe(), None, inline).apply()
        plan = plan_threads("framework-default", observe.observe())
        self.model = app_class(app)(settings, Path(dataset), "CPU", plan)
        self.model.load_model()
        inputs = [self.model.preprocess(i) for i in range(self.model.sample_count())]
        size = settings["batch_size"]
        self.batches = [inputs[i:i + size] for i in range(0, len(inputs), size)]
        self.samples = len(inputs)
        self.intra_op = self.model.framework_threads().get("intra_op")

    def timed_pass(self, samples: int | None = None) -> tuple[float, float]:
        """(wall seconds, CPU seconds) of one pass over ``samples`` (None: the dataset once)."""
        left = self.samples if samples is None else samples
        cpu, start = time.process_time(), time.perf_counter()
        for batch in itertools.cycle(self.batches):
            if left <= 0:
                break
            self.model.infer(batch[:left])
            left -= len(batch[:left])
        return time.perf_counter() - start, time.process_time() - cpu


def raw_loop(app: str, settings: dict[str, Any], dataset: str, cpus: list[int], passes: int) -> dict[str, Any]:
    """(In a fresh process: ``fresh_raw_loop``.) ``RawLoop`` on ``cpus``: ``passes`` timed passes over
    the dataset after one untimed pass; samples/s per pass, their mean and the best, and a pass's mean seconds."""
    loop = RawLoop(app, settings, dataset, cpus)
    loop.timed_pass()  # warms up, as the harness's warm-up repetition does
    rates, cpu_s, wall_s = [], 0.0, 0.0
    for _ in range(passes):
        wall, cpu = loop.timed_pass()
        rates.append(loop.samples / wall)
        cpu_s += cpu
        wall_s += wall
    return {"rate": statistics.mean(rates), "best": max(rates), "rates": rates, "cpu_per_wall": cpu_s / wall_s,
            "pass_s": wall_s / passes, "intra_op": loop.intra_op}


def raw_turns(connection: Connection, app: str, settings: dict[str, Any], dataset: str, cpus: list[int],
              samples: int) -> None:
    """(A process's target.) ``RawLoop`` on ``cpus``, one untimed pass, then ``connection``'s
    sends: its framework's intra-op threads once, and for every request (anything but None) one
    timed pass over ``samples`` as samples/s; None ends it."""
    loop = RawLoop(app, settings, dataset, cpus)
    loop.timed_pass(samples)
    connection.send(loop.intra_op)
    while connection.recv() is not None:
        wall, _ = loop.timed_pass(samples)
        connection.send(samples / wall)


def fresh_raw_loop(app: str, settings: dict[str, Any], dataset: Path, cpus: list[int], passes: int) -> dict[str, Any]:
    """``raw_loop`` in a process of its own (a framework sizes its pools once per process)."""
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(raw_loop, app, settings, str(dataset), cpus, passes).result()


# what a finished study leaves in results/ that calibrate, compare and the benchmarks read
STUDY_OUTPUTS = ("runs", "summary.csv", "claims.csv", "host.json", "plan.json")


def run_study(keep_as: Path, snakemake: list[str]) -> tuple[int, float]:
    """``snakemake --cores 1 all`` in this checkout with ``snakemake`` added; then its results
    (``STUDY_OUTPUTS``) moved to ``keep_as`` (replaced), so that the next study measures afresh.
    Its exit status and minutes."""
    import shutil
    import subprocess

    started = time.monotonic()
    status = subprocess.run(["snakemake", "--cores", "1", "all", *snakemake], cwd=REPO, check=False).returncode
    took = (time.monotonic() - started) / 60
    if keep_as.exists():
        shutil.rmtree(keep_as)
    keep_as.mkdir(parents=True)
    for part in STUDY_OUTPUTS:
        if (REPO / "results" / part).exists():
            shutil.move(str(REPO / "results" / part), str(keep_as / part))
    return status, took
