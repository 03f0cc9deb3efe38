"""The dlbs tool: the documented ``__key__=json`` log format round-trips through its parser, settings
merge per app (the real IC model-only smoke run on BM: tests/integration/test_dlbs_job.py)."""

import dataclasses

import numpy as np
import pytest

from dlvirt.core.records import HarnessJob
from dlvirt.core.scenario import Scenario
from dlvirt.run.tools import dlbs


def test_log_round_trips_through_the_parser():
    params = {
        "exp.framework": "pytorch",
        "exp.model": "bert_large",
        "exp.replica_batch": 4,
        "exp.gpus": "",
        "exp.docker": False,
        "results.time": 12.5,
        "results.time_std": 0.25,
        "results.throughput": 320.0,
        "results.time_data": [12.25, 12.75],
        "exp.model_opts": {"a": [1, None]},
        "exp.title": "quotes \" and = signs __inside__",
    }
    text = dlbs.format_log(params)
    assert text.splitlines()[0] == '__exp.framework__="pytorch"'
    assert all(line.startswith("__") and "__=" in line for line in text.splitlines())
    assert dlbs.parse_log(text) == params


def test_parser_reads_logs_as_dlbs_does():
    lines = [
        "[PyTorch benchmarks] torch.version.__version__=2.13.0",   # not a key-value line: no leading __
        "some output",
        "   __exp.model__ = \"resnet50\"",                          # blanks around, as DLBS's regex allows
        "__results.time__=10.0",
        "__results.time__=11.0",                                    # repeated: the last value wins
        "__exp.a__b__=1",                                           # the key runs to the last '__' before '='
    ]
    text = "\n".join(lines)
    assert dlbs.parse_log(text) == {"exp.model": "resnet50", "results.time": 11.0, "exp.a__b": 1}
    with pytest.raises(dlbs.DlbsError, match="x.log:2: value of __results.time__"):
        dlbs.parse_log("ok\n__results.time__=not-json\n", "x.log")


def test_results_are_dlbs_units():
    params = {"exp.effective_batch": 8}
    out = dlbs.results(params, np.array([100.0, 300.0]))
    assert out["results.time"] == 200.0 and out["results.time_std"] == 100.0
    assert out["results.throughput"] == pytest.approx(40.0)  # 8 samples per 0.2 s
    assert out["results.time_data"] == [100.0, 300.0]


def test_settings_merge_per_app_and_experimenter_only_for_dlbs_models(tmp_path):
    section = {"path": None, "exp.phase": "inference", "exp.replica_batch": None,
               "exp.num_warmup_batches": 1, "exp.num_batches": 5, "apps": {"nlp": {"exp.num_batches": 2}}}
    assert dlbs.settings_for(section, "nlp")["exp.num_batches"] == 2
    assert dlbs.settings_for(section, "ic")["exp.num_batches"] == 5
    assert "apps" not in dlbs.settings_for(section, "ic")
    job = HarnessJob(tool="dlbs", app="ic", scenario=Scenario.parse("BM/1/VNL/CPU"), scenario_name="BM/1/VNL/CPU",
                     repetitions=1, warmup_repetitions=0, threads="granted", batch_size=32, loadgen={},
                     app_settings={}, dataset_dir="ic", run_id="1-test", tool_settings=dlbs.settings_for(section, "ic"))
    params = dlbs.experiment(job, "tensorflow", "resnet50")
    assert params["exp.replica_batch"] == 32 and params["exp.device_type"] == "cpu" and params["exp.gpus"] == ""
    assert dlbs.experimenter_model(job) is None
    job.tool_settings["path"] = str(tmp_path)  # type: ignore[index]
    with pytest.raises(dlbs.DlbsError, match="dlbs.path .*not a DLBS checkout"):
        dlbs.experimenter_model(job)
    # Only where the experimenter script is: running it needs a real DLBS checkout (not on PyPI).
    dlbs.experimenter_script(tmp_path).parent.mkdir(parents=True)
    dlbs.experimenter_script(tmp_path).touch()
    assert dlbs.experimenter_model(job) == "resnet50"
    assert dlbs.experimenter_model(dataclasses.replace(job, app="nlp")) is None  # DLBS has no BERT: ours times it
    command = dlbs.experimenter_command(tmp_path, params, tmp_path / "x.log")
    assert command[2] == "run" and '-Pexp.model="resnet50"' in command and "-Pexp.docker=false" in command
