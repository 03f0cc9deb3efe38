"""One function builds a planned job's spec (dlvirt.plan.jobspec), for the workflow, the benchmark scripts
and the tests; the benchmark rule's param is that spec, read back unchanged by the runner."""

from __future__ import annotations

import json

from snakemake.utils import validate

from conftest import REPO, smoke_config
from dlvirt.core.records import JobSpec
from dlvirt.plan.jobspec import WEIGHTS_FILE, job_spec, spec_param
from dlvirt.plan.planner import expand
from dlvirt.run.tools import tool_class


def _config() -> dict:
    config = smoke_config(guests=True)
    validate(config, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    return config


def test_every_planned_job_has_a_spec_the_runner_reads_back_unchanged():
    config = _config()
    jobs = expand(config, None).jobs
    assert {job.tool for job in jobs} == set(config["study"]["tools"])
    for job in jobs:
        spec = job_spec(config, job, container_image="dlvirt:test")
        assert (spec.tool, spec.app, spec.scenario, spec.replicate) == (job.tool, job.app, job.scenario, job.replicate)
        assert JobSpec.from_dict(json.loads(json.dumps(spec_param(spec)))) == spec
        # a tool's own section, merged for the app, in the one generic field
        assert spec.tool_settings == tool_class(job.tool).job_settings(config, job.app)
        assert spec.dataset_dir == f"resources/datasets/{job.app}"
        assert spec.weights_file is None or spec.weights_file.startswith(WEIGHTS_FILE.split("{")[0] + job.app)
        assert ("image" in spec.platform_settings) == (job.scenario.platform == "CN")


def test_the_param_writes_what_the_rule_always_wrote_and_optional_keys_only_when_set():
    config = _config()
    job = next(job for job in expand(config, None).jobs if job.tool == "mlperf")
    param = spec_param(job_spec(config, job))
    assert {"weights_file", "pipeline", "warmup_tolerance", "interference"} <= set(param)
    assert not {"tool_settings", "keep_others_away", "turns"} & set(param)
    config["keep_others_away"]["enabled"] = True
    assert spec_param(job_spec(config, job))["keep_others_away"]["enabled"] is True


def test_the_weights_wildcard_is_every_name_an_app_declares():
    from dlvirt.apps import CLASSES, weights_file_names

    names = weights_file_names()
    assert "model.pt" in names and len(names) == len(set(names))
    for cls in CLASSES.values():
        assert cls.weights_file_name({}) in names and set(cls.weights_file_names) <= set(names)
