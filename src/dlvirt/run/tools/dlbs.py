"""The DLBS tool (``tool: dlbs``): model-only inference time, as the Deep Learning Benchmarking Suite
measures it.

Each repetition builds one batch of random inputs of the real shapes (``App.synthetic_batch``), runs
``exp.num_warmup_batches`` untimed batches, then times ``exp.num_batches`` batches one by one; no
reading, pre- or post-processing. It runs inside the platform like the LoadGen harness (the launch
loop, ``dlvirt.run.launch``, asks the job's tool), so every platform gets it and the same
observation/verification.

Each repetition also writes ``dlbs.log`` in DLBS's log format, one ``__key__=json`` per line
(``__exp.framework__="pytorch"``, ``__results.time__`` = mean ms per batch, ``__results.time_std__``,
``__results.throughput__`` = samples/s, ``__results.time_data__`` = every batch in ms, ...), so
DLBS's own log parser and reporter read our logs; ``parse_log`` reads that format back.

DLBS itself is not on PyPI. If ``dlbs.path`` names a DLBS checkout, apps whose model DLBS's own
benchmarks implement (``EXPERIMENTER_MODELS``, by ``AppKind.model``) are timed by its experimenter
instead, with the same ``exp.*`` parameters, and its log is parsed; the other apps use ours.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from dlvirt.apps import KINDS as APP_KINDS
from dlvirt.apps import app_class
from dlvirt.apps.base import App
from dlvirt.core.errors import ConfigError
from dlvirt.core.kinds import ToolKind
from dlvirt.core.records import HarnessJob, Repetition
from dlvirt.run.repetitions import warmup_workload
from dlvirt.run.tools.base import ModelHost, OutsideModel, PathCheck, Tool, ToolError
from dlvirt.system import observe

LOG_NAME = "dlbs.log"
# DLBS's key-value line: leading blanks, __key__, optional blanks, '=', a JSON value.
LOG_LINE = re.compile(r"[ \t]*__(.+?)__[ \t]*=(.+)")
# The models DLBS's own benchmark scripts implement, by the model an app declares (AppKind.model): their
# exp.model id, which a DLBS checkout's experimenter times (dlbs.path)
EXPERIMENTER_MODELS = {"ResNet50": "resnet50"}


class DlbsError(ToolError):
    pass


# -- the log format ----------------------------------------------------------------------------

def format_log(params: dict[str, Any]) -> str:
    """``params`` as DLBS log lines: ``__name__=<json>``, one per line."""
    return "".join(f"__{key}__={json.dumps(value)}\n" for key, value in params.items())


def parse_log(text: str, source: str = "log") -> dict[str, Any]:
    """The ``__key__=json`` lines of a DLBS log (other lines are ignored; a repeated key keeps its
    last value, as in DLBS's ``LogParser``). A value that is not JSON is an error naming the line."""
    params: dict[str, Any] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        match = LOG_LINE.match(line)
        if match is None:
            continue
        try:
            params[match.group(1)] = json.loads(match.group(2))
        except json.JSONDecodeError as err:
            raise DlbsError(f"{source}:{number}: value of __{match.group(1)}__ is not JSON: {err}") from err
    return params


def parse_log_file(path: Path) -> dict[str, Any]:
    return parse_log(Path(path).read_text(errors="replace"), str(path))


# -- parameters --------------------------------------------------------------------------------

def model_id(title: str) -> str:
    """DLBS-style model id of a model title: ResNet50 -> resnet50, BERT-large -> bert_large."""
    return re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_")


def settings_for(section: dict[str, Any], app: str) -> dict[str, Any]:
    """The ``dlbs`` config section as it applies to ``app`` (its ``apps.<app>`` overrides merged)."""
    merged = {key: value for key, value in section.items() if key != "apps"}
    merged.update(section.get("apps", {}).get(app) or {})
    return merged


def experiment(job: HarnessJob, framework: str, model: str) -> dict[str, Any]:
    """The DLBS ``exp.*`` parameters of one job."""
    settings = dlbs_section(job)
    batch = settings["exp.replica_batch"] or job.batch_size
    gpu = job.scenario.processor == "GPU"
    return {
        "exp.framework": framework,
        "exp.model": model,
        "exp.phase": settings["exp.phase"],
        "exp.replica_batch": batch,
        "exp.effective_batch": batch,
        "exp.num_warmup_batches": int(settings["exp.num_warmup_batches"]),
        "exp.num_batches": int(settings["exp.num_batches"]),
        "exp.device_type": "gpu" if gpu else "cpu",
        "exp.gpus": "0" if gpu else "",
        "exp.dtype": "float32",
        "exp.data": "synthetic",
        "exp.docker": False,  # DLBS must not start its own container: we are inside the platform already
    }


def experimenter_script(checkout: Path) -> Path:
    return checkout / "python" / "dlbs" / "experimenter.py"


def dlbs_section(job: HarnessJob) -> dict[str, Any]:
    if job.tool_settings is None:
        raise DlbsError(f"job {job.run_id} ({job.tool} {job.app}) has no dlbs settings")
    return job.tool_settings


def brings_own_model(settings: dict[str, Any] | None, app: str) -> bool:
    """Whether a DLBS checkout's experimenter times ``app`` (``dlbs.path`` set, and DLBS implements
    the app's model), building its model itself: the job loads none."""
    return bool((settings or {}).get("path")) and app_class(app).kind.model in EXPERIMENTER_MODELS


def experimenter_model(job: HarnessJob) -> str | None:
    """DLBS's model id when this job is timed by a DLBS checkout's experimenter, else None."""
    if not brings_own_model(dlbs_section(job), job.app):
        return None
    checkout = Path(dlbs_section(job)["path"])
    if not experimenter_script(checkout).is_file():
        raise DlbsError(f"dlbs.path {checkout}: no python/dlbs/experimenter.py (not a DLBS checkout, "
                        f"or not visible inside the platform)")
    return EXPERIMENTER_MODELS[app_class(job.app).kind.model]


def experimenter_provenance(job: HarnessJob, framework: str) -> dict[str, Any]:
    return {"model": experimenter_model(job), "framework": framework, "weights": "random",
            "implementation": f"DLBS experimenter at {dlbs_section(job)['path']}"}


def results(params: dict[str, Any], times_ms: np.ndarray) -> dict[str, Any]:
    """DLBS's result keys for the timed batches (``results.throughput`` in samples/s)."""
    mean = float(np.mean(times_ms))
    return {
        "results.time": mean,
        "results.time_std": float(np.std(times_ms)),
        "results.throughput": params["exp.effective_batch"] / (mean / 1000.0) if mean > 0 else 0.0,
        "results.time_data": [float(t) for t in times_ms],
        "exp.status": "ok",
    }


# -- one repetition ----------------------------------------------------------------------------

def _time_ours(app: App, params: dict[str, Any]) -> tuple[np.ndarray, float]:
    """The timed batches' times (ms) and the process's CPU seconds over them (building the batch
    and the warm-up batches left out, as they are of the time)."""
    batch = app.synthetic_batch(params["exp.replica_batch"])
    for _ in range(params["exp.num_warmup_batches"]):
        app.infer(batch)
    times = np.zeros(params["exp.num_batches"])
    cpu_start = time.process_time()
    for i in range(params["exp.num_batches"]):
        start = time.perf_counter()
        app.infer(batch)
        times[i] = time.perf_counter() - start
    return 1000.0 * times, time.process_time() - cpu_start


def experimenter_command(checkout: Path, params: dict[str, Any], log_file: Path) -> list[str]:
    args = {**params, "exp.log_file": str(log_file), "exp.rerun": True}
    return [sys.executable, str(experimenter_script(checkout)), "run",
            *(f"-P{key}={json.dumps(value)}" for key, value in args.items())]


def _time_experimenter(job: HarnessJob, params: dict[str, Any], log_file: Path) -> np.ndarray:
    checkout = Path(dlbs_section(job)["path"])
    env = dict(os.environ, DLBS_ROOT=str(checkout),
               PYTHONPATH=os.pathsep.join(filter(None, [str(checkout / "python"), os.environ.get("PYTHONPATH")])))
    # Its own session, so that a failure or Ctrl-C here also stops the benchmark processes it launched.
    proc = subprocess.Popen(experimenter_command(checkout, params, log_file), env=env, start_new_session=True)
    try:
        returncode = proc.wait()
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    logged = parse_log_file(log_file) if log_file.is_file() else {}
    if returncode != 0 or not logged.get("results.time"):
        raise DlbsError(f"DLBS experimenter (exit {returncode}) left no results.time in {log_file}; "
                        f"status {logged.get('exp.status')!r} {logged.get('exp.status_msg', '')}")
    data = logged.get("results.time_data") or [logged["results.time"]] * params["exp.num_batches"]
    return np.asarray(data, dtype=float)


def run_repetition(app: App, job: HarnessJob, rep: int, out_dir: Path, share: float = 1.0) -> Repetition:
    """Time one repetition's batches (``share`` of them, whole ones, for a partial warm-up) and write
    its DLBS log; the record the harness keeps."""
    rep_dir = out_dir / f"rep-{rep:04d}"
    rep_dir.mkdir(parents=True, exist_ok=True)
    log_file = rep_dir / LOG_NAME
    observed = observe.observe()
    dlbs_model = experimenter_model(job)
    title = str(app.model_provenance()["model"]) if dlbs_model is None else dlbs_model
    params = experiment(job, app.framework, dlbs_model or model_id(title))
    params["exp.num_batches"] = warmup_workload(params["exp.num_batches"], share)
    started = datetime.now(UTC)
    infer_cpu_s: float | None = None  # the experimenter runs in another process: its CPU is not ours to read
    if dlbs_model is None:
        times_ms, infer_cpu_s = _time_ours(app, params)
        backend = "dlvirt"
        params["exp.model_title"] = title
        log_file.write_text(format_log({**params, **results(params, times_ms),
                                        "exp.id": f"{job.run_id}-{rep}", "exp.proj": "dlvirt"}))
    else:
        times_ms = _time_experimenter(job, params, log_file)
        backend = "DLBS experimenter"
    finished = datetime.now(UTC)
    observe.resample_ran_on(observed)
    infer_s = float(times_ms.sum()) / 1000.0
    samples = params["exp.effective_batch"] * len(times_ms)
    summary = results(params, times_ms)
    return Repetition.measured(
        repetition=rep, e2e_s=infer_s,  # model-only: the timed batches, nothing else
        # model-only: no pre- or post-processing ran; the CPU of the timed batches only
        phases={"infer_s": infer_s, "pre_cpu_s": 0.0, "post_cpu_s": 0.0, "stall_s": 0.0,
                "infer_cpu_s": infer_cpu_s},
        samples=samples, batches=len(times_ms), observed=observed,
        threads=app.threads.to_dict(),  # the harness adds what the framework reports
        quality={}, started=started, finished=finished,
        tool_output={"backend": backend, "log": f"{rep_dir.name}/{LOG_NAME}", **params,
              **{k: summary[k] for k in ("results.time", "results.time_std", "results.throughput")}})


# -- the tool ----------------------------------------------------------------------------------

class ExperimenterModel(OutsideModel):
    """The model a DLBS checkout's experimenter builds in its own process: nothing to import, load or
    ask in the harness's (``ModelHost``)."""

    def __init__(self, job: HarnessJob, framework: str) -> None:
        self.job, self.framework = job, framework

    def model_provenance(self) -> dict[str, Any]:
        return experimenter_provenance(self.job, self.framework)


class Dlbs(Tool):
    kind = ToolKind(name="dlbs", title="DLBS-style model-only inference time", measure="model-only", order=1,
                    phases=("infer_s",), section="dlbs")

    @classmethod
    def job_settings(cls, config: dict[str, Any], app: str) -> dict[str, Any] | None:
        return settings_for(config["dlbs"], app)

    @classmethod
    def brings_own_model(cls, settings: dict[str, Any] | None, app: str) -> bool:
        return brings_own_model(settings, app)

    @classmethod
    def samples_per_repetition(cls, config: dict[str, Any], app: str) -> int:
        settings = settings_for(config["dlbs"], app)
        batch = settings.get("exp.replica_batch") or config["apps"][app]["batch_size"]
        return int(settings["exp.num_batches"]) * int(batch)

    @classmethod
    def check_config(cls, config: dict[str, Any], check_path: PathCheck) -> None:
        section = config.get("dlbs") or {}
        check_path(section.get("path"), "dlbs.path", "dir")
        unknown = sorted(set(section.get("apps") or {}) - set(APP_KINDS))
        if unknown:
            raise ConfigError(f"dlbs.apps.{unknown[0]}: no such app (apps: {', '.join(APP_KINDS)})")

    @classmethod
    def model_host(cls, app: App, job: HarnessJob) -> ModelHost:
        return app if experimenter_model(job) is None else ExperimenterModel(job, app.framework)

    @classmethod
    def run_repetition(cls, app: App, job: HarnessJob, rep: int, out_dir: Path,
                       estimate_qps: float | None, share: float = 1.0) -> Repetition:
        return run_repetition(app, job, rep, out_dir, share)
