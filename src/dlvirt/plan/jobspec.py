"""The spec of one planned job (``JobSpec``): everything its launch needs, from the config and the plan.

One function builds it for every caller: the workflow's benchmark rule (its param, ``spec_param``),
the benchmark scripts and the tests. An app, a tool or a platform adds nothing here: a job carries its
app's config section, its tool's (``Tool.job_settings``, in ``tool_settings``) and its platform's.
"""

from __future__ import annotations

from typing import Any

from dlvirt.apps import app_class
from dlvirt.core.memory import parse_mib
from dlvirt.core.records import JobSpec
from dlvirt.plan.planner import Job, warmups_for
from dlvirt.platforms import container_platform, container_platforms
from dlvirt.run.tools import tool_class

# The weights resource, built by the weights rule: an app's seeded random initialisation, per model
# settings and seed (its weights_tag), in the framework's format (its weights_file_name), .sha256 beside it.
WEIGHTS_FILE = "resources/weights/{app}/{tag}/{weights_name}"
# Where the dataset rule writes an app's inputs.
DATASET_DIR = "resources/datasets/{app}"

# The spec is the benchmark rule's param: a key added to or dropped from every spec reruns every
# launch. These have always been written, null included; the other optional ones only when set.
_WRITTEN_WHEN_NULL = ("pipeline", "warmup_tolerance", "weights_file", "interference")


def weights_file(config: dict[str, Any], job: Job) -> str | None:
    """The weights resource ``job`` loads; None where the config names weights (apps.<app>.weights.path,
    loaded as configured) or the job's tool brings its own model."""
    app = config["apps"][job.app]
    if (app.get("weights") or {}).get("path"):
        return None
    tool = tool_class(job.tool)
    if tool.brings_own_model(tool.job_settings(config, job.app), job.app):
        return None
    cls = app_class(job.app)
    return WEIGHTS_FILE.format(app=job.app, tag=cls.weights_tag(app), weights_name=cls.weights_file_name(app))


def platform_settings(config: dict[str, Any], platform: str, container_image: str | None = None) -> dict[str, Any]:
    """The platform's config section with the placement policy of PIN scenarios and the study's
    one memory size (``memory_mib``: study.memory in MiB); for every container platform (CN, SCN)
    with ``image`` set to ``container_image``, the image its jobs run, on the engine CN's section names."""
    settings = {
        **config["platforms"].get(platform, {}),
        "placement": config["platforms"]["placement"],
        "memory_mib": parse_mib(config["study"]["memory"]),
    }
    if platform not in container_platforms():
        return settings
    engine = config["platforms"].get(container_platform(), {}).get("engine")
    return {**settings, **({} if engine is None else {"engine": engine}), "image": container_image}


def job_spec(config: dict[str, Any], job: Job, container_image: str | None = None) -> JobSpec:
    """The runner's spec of ``job`` under ``config`` (schema defaults filled in), wherever it runs (this
    host, a cluster node, an edge host); ``container_image``: the image the container platform runs."""
    app = config["apps"][job.app]
    study, harness = config["study"], config["harness"]
    away = config["keep_others_away"]
    return JobSpec(
        tool=job.tool,
        app=job.app,
        scenario=job.scenario,
        replicate=job.replicate,
        repetitions=study["repetitions"],
        warmup_repetitions=warmups_for(study, job.app, job.tool),
        warmup_tolerance=study["warmup_tolerance"],
        warmup_share=study["warmup_share"],
        interference=study["interference"],
        threads=harness["threads"],
        pipeline=harness["pipeline"],
        timeout_s=harness["timeout_s"],
        batch_size=app["batch_size"],
        loadgen=app["loadgen"],
        app_settings=app,
        dataset_dir=DATASET_DIR.format(app=job.app),
        weights_file=weights_file(config, job),
        platform_settings=platform_settings(config, job.scenario.platform, container_image),
        allow_emulation=config["allow_emulation"],
        # its tool's own section (merged for its app): changing it reruns only that tool's jobs
        tool_settings=tool_class(job.tool).job_settings(config, job.app),
        # only when asked: a new key in every spec would rerun every launch
        keep_others_away=away if away["enabled"] else None,
    )


def spec_param(spec: JobSpec) -> dict[str, Any]:
    """``spec`` as the benchmark rule's param: a change to any of it (app settings, repetitions, harness
    options) reruns exactly the jobs it concerns, and nothing else does."""
    return {**spec.to_dict(), **{key: getattr(spec, key) for key in _WRITTEN_WHEN_NULL}}
