"""Measurement tools are plug-ins (``dlvirt.run.tools``): each module declares its ``ToolKind`` and
answers what the rest asks (how a repetition is timed, who holds the model, its config section,
samples per repetition). The schema's tool enum is the registry, and no module outside the tool
modules (and the figure catalog, which names the tool each figure draws) names a tool; which LoadGen
scenarios a tool runs in is its kind's declaration."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from conftest import REPO, StubModel, source_strings
from dlvirt.core.errors import ConfigError
from dlvirt.core.records import HarnessJob, JobSpec, Repetition
from dlvirt.core.scenario import Scenario
from dlvirt.plan.estimate import samples_per_repetition
from dlvirt.plan.planner import TOOLS, Job
from dlvirt.run.tools import CLASSES, KINDS, primary, tool_class
from dlvirt.run.tools import dlbs as dlbs_module

SCHEMA = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
# Only these may name a tool: the tool modules and the figure catalog (each figure draws one tool).
MAY_NAME = ("src/dlvirt/run/tools/", "src/dlvirt/analysis/catalog.py")


def test_the_registry_is_the_schema_and_the_plan():
    assert sorted(SCHEMA["properties"]["study"]["properties"]["tools"]["items"]["enum"]) == sorted(CLASSES)
    assert tuple(CLASSES) == TOOLS
    for name, cls in CLASSES.items():
        assert cls.kind.name == name and KINDS[name] is cls.kind
        assert set(cls.kind.phases) <= {"pre_s", "infer_s", "post_s"} and "infer_s" in cls.kind.phases
        if cls.kind.section is not None:  # a tool with its own section: the schema has it, per app any app
            apps = SCHEMA["properties"][cls.kind.section]["properties"]["apps"]
            assert "properties" not in apps and apps["additionalProperties"]
    orders = [k.order for k in KINDS.values()]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)
    assert primary() == next(iter(CLASSES)) and KINDS[primary()].measure == "E2E"
    with pytest.raises(ConfigError, match="tool 'nope' is not implemented"):
        tool_class("nope")


def test_no_other_module_or_rule_names_a_tool():
    files = [*sorted((REPO / "src").rglob("*.py")), *sorted((REPO / "workflow").rglob("*.smk")), REPO / "Snakefile"]
    # the records' old field names (Record.renamed), read from documents written before: history, not a tool named
    old_fields = {(REPO / "src/dlvirt/core/records.py", old) for cls in (JobSpec, HarnessJob, Repetition)
                  for old in cls.renamed}
    wrong = [f"{path.relative_to(REPO)}:{line}: {text!r}"
             for path in files if not path.relative_to(REPO).as_posix().startswith(MAY_NAME)
             for line, text in source_strings(path)
             if set(CLASSES) & set(re.findall(r"\w+", text)) and (path, text) not in old_fields]
    assert not wrong, "\n".join(wrong)
    # no branch on a tool's name or on a DLBS experimenter: the tool answers
    comparisons = [f"{path.relative_to(REPO)}:{n}: {line.strip()}" for path in files
                   if not path.relative_to(REPO).as_posix().startswith(MAY_NAME)
                   for n, line in enumerate(path.read_text().splitlines(), 1)
                   if re.search(r"tool\"?\]? *[!=]= *[\"']", line.split("#")[0])]
    comparisons += [f"{path.relative_to(REPO)}:{node.lineno}: {name}" for path in files
                    if path.suffix == ".py" and not path.relative_to(REPO).as_posix().startswith(MAY_NAME)
                    for node in ast.walk(ast.parse(path.read_text()))
                    for name in [getattr(node, "id", None) or getattr(node, "attr", None) or ""]
                    if isinstance(node, (ast.Name, ast.Attribute)) and "experimenter" in name]
    assert not comparisons, "\n".join(comparisons)


def _config(tmp_path: Path) -> dict:
    return {"apps": {"ic": {"batch_size": 8, "loadgen": {"min_query_count": None}, "dataset": {"count": 40}}},
            "dlbs": {"path": None, "exp.phase": "inference", "exp.replica_batch": None, "exp.num_warmup_batches": 1,
                     "exp.num_batches": 5, "apps": {"ic": {"exp.num_batches": 3}}}}


def test_each_tool_says_how_many_samples_a_repetition_takes(tmp_path):
    config = _config(tmp_path)
    scenario = Scenario.parse("BM/1/VNL/CPU")
    assert samples_per_repetition(config, Job("mlperf", "ic", scenario)) == 40
    config["apps"]["ic"]["loadgen"]["min_query_count"] = 16
    assert samples_per_repetition(config, Job("mlperf", "ic", scenario)) == 16
    assert samples_per_repetition(config, Job("dlbs", "ic", scenario)) == 3 * 8


def test_a_job_carries_its_tools_section_and_who_holds_the_model(tmp_path):
    config = _config(tmp_path)
    mlperf, dlbs = tool_class("mlperf"), tool_class("dlbs")
    assert mlperf.kind.section is None and mlperf.job_settings(config, "ic") is None
    assert not mlperf.brings_own_model(None, "ic")
    settings = dlbs.job_settings(config, "ic")
    assert dlbs.kind.section == "dlbs" and settings is not None and settings["exp.num_batches"] == 3
    assert not dlbs.brings_own_model(settings, "ic")
    assert dlbs.brings_own_model({**settings, "path": str(tmp_path)}, "ic")  # DLBS implements ResNet50
    assert not dlbs.brings_own_model({**settings, "path": str(tmp_path)}, "nlp")

    job = HarnessJob(tool="dlbs", app="ic", scenario=Scenario.parse("BM/1/VNL/CPU"), scenario_name="BM/1/VNL/CPU",
                     repetitions=1, warmup_repetitions=0, threads="granted", batch_size=8, loadgen={},
                     app_settings={}, dataset_dir="ic", run_id="1-test", tool_settings=settings)
    app = object()
    assert mlperf.model_host(app, job) is app  # type: ignore[arg-type]
    assert dlbs.model_host(app, job) is app  # type: ignore[arg-type]
    checkout = {**settings, "path": str(tmp_path)}
    dlbs_module.experimenter_script(tmp_path).parent.mkdir(parents=True)
    dlbs_module.experimenter_script(tmp_path).touch()

    class FakeApp:
        framework = "tensorflow"

    host = dlbs.model_host(FakeApp(), dataclasses.replace(job, tool_settings=checkout))  # type: ignore[arg-type]
    assert not host.in_process and host.gpu_state() == {} and host.framework_threads() == {}
    assert host.model_provenance()["model"] == "resnet50"


def test_the_config_check_asks_each_used_tool(tmp_path):
    checked = []
    config = {**_config(tmp_path), "study": {"tools": ["mlperf", "dlbs"]}}
    for tool in config["study"]["tools"]:
        tool_class(tool).check_config(config, lambda value, key, kind: checked.append((value, key, kind)))
    assert checked == [(None, "dlbs.path", "dir")]
    # per-app overrides for any app, but only for apps
    config["dlbs"]["apps"] = {"ic": {"exp.num_batches": 2}, "nope": {"exp.num_batches": 2}}
    with pytest.raises(ConfigError, match=r"dlbs.apps.nope: no such app \(apps: ic, "):
        tool_class("dlbs").check_config(config, lambda value, key, kind: None)


class _FakeApp(StubModel):
    """Just what the launch loop asks of an app (no framework, no dataset); records the model calls."""

    model_name = "fake"

    def __init__(self, settings, dataset_dir, processor, threads, initial_weights=None):
        self.threads, self.calls = threads, []

    def import_framework(self):
        self.calls.append("import")

    def load_model(self):
        self.calls.append("load")

    def first_call(self):
        self.calls.append("first")


def _fake_tool(own_model: bool, e2e_s: dict[int, float] | None = None):
    """A tool whose repetitions take ``e2e_s[rep]`` (default 1 s)."""
    from datetime import UTC, datetime

    from dlvirt.core.kinds import ToolKind
    from dlvirt.core.records import Repetition
    from dlvirt.run.tools.base import OutsideModel, Tool

    class Outside(OutsideModel):
        def model_provenance(self):
            return {"model": "its own", "weights": "random"}

    class FakeTool(Tool):
        kind = ToolKind(name="fake", title="a fake tool", measure="model-only", order=9, phases=("infer_s",))
        timed: list[tuple[int, float, float | None]] = []  # (repetition, share of the workload, estimate)

        @classmethod
        def samples_per_repetition(cls, config, app):
            return 4

        @classmethod
        def model_host(cls, app, job):
            return Outside() if own_model else app

        @classmethod
        def run_repetition(cls, app, job, rep, out_dir, estimate_qps, share=1.0):
            cls.timed.append((rep, share, estimate_qps))
            now = datetime.now(UTC)
            took = (e2e_s or {}).get(rep, 1.0)
            return Repetition.measured(repetition=rep, e2e_s=took, phases={"infer_s": took}, samples=4, batches=1,
                                       observed={}, threads=app.threads.to_dict(), quality={}, started=now,
                                       finished=now)

    return FakeTool


@pytest.mark.parametrize("own_model", [False, True])
def test_the_launch_loop_asks_the_tool(tmp_path, monkeypatch, own_model):
    from dlvirt.core.records import HarnessOutput
    from dlvirt.run import launch

    tool = _fake_tool(own_model)
    apps: list[_FakeApp] = []
    monkeypatch.setattr(launch, "tool_class", lambda name: tool)

    def make_app(*args, **kwargs):
        apps.append(_FakeApp(*args, **kwargs))
        return apps[-1]

    monkeypatch.setattr(launch, "app_class", lambda name: make_app)
    job = HarnessJob(tool="fake", app="ic", scenario=Scenario.parse("BM/1/VNL/CPU"), scenario_name="BM/1/VNL/CPU",
                     repetitions=2, warmup_repetitions=1, threads="granted", batch_size=4, loadgen={},
                     app_settings={}, dataset_dir=str(tmp_path), run_id="1-test", warmup_share=0.25)
    job.write(tmp_path / "job.json")
    assert launch.main([str(tmp_path / "job.json"), str(tmp_path / "out")]) == 0
    out = HarnessOutput.read(tmp_path / "out" / "harness.json")
    # the warm-up processes study.warmup_share of the workload, the counted ones all of it; a partial
    # warm-up's rate is no estimate for the next repetition's LoadGen settings, a whole one's is
    assert tool.timed == [(0, 0.25, None), (1, 1.0, None), (2, 1.0, 4.0)]
    assert len(out.warmups) == 1 and len(out.runs) == 2
    assert apps[0].calls == ([] if own_model else ["import", "load", "first"])
    assert out.model["model"] == ("its own" if own_model else "fake")


def test_a_launch_runs_its_fixed_warm_ups_and_counts_every_repetition_after_them(tmp_path, monkeypatch):
    """Two warm-ups (the first over warmup_share of the workload, the second whole), then a slow
    first counted repetition stays counted: steadiness is recorded, never acted on."""
    from dlvirt.core.records import HarnessOutput
    from dlvirt.run import launch

    tool = _fake_tool(False, {2: 1.5})  # the first counted repetition 50 % slower than the rest
    monkeypatch.setattr(launch, "tool_class", lambda name: tool)
    monkeypatch.setattr(launch, "app_class", lambda name: _FakeApp)
    job = HarnessJob(tool="fake", app="ic", scenario=Scenario.parse("BM/1/VNL/CPU"), scenario_name="BM/1/VNL/CPU",
                     repetitions=3, warmup_repetitions=2, threads="granted", batch_size=4, loadgen={},
                     app_settings={}, dataset_dir=str(tmp_path), run_id="1-test", warmup_share=0.25,
                     warmup_tolerance=0.1)
    job.write(tmp_path / "job.json")
    assert launch.main([str(tmp_path / "job.json"), str(tmp_path / "out")]) == 0
    out = HarnessOutput.read(tmp_path / "out" / "harness.json")
    assert [share for _, share, _ in tool.timed] == [0.25, 1.0, 1.0, 1.0, 1.0]
    assert [r.repetition for r in out.warmups] == [0, 1] and [r.e2e_s for r in out.runs] == [1.5, 1.0, 1.0]
    assert out.repetitions["warmups"] == 2 and out.repetitions["steady"] is False


def test_a_server_launch_calibrates_its_rate_on_one_offline_warm_up(tmp_path, monkeypatch):
    """Without server_target_qps, the first repetition is an Offline warm-up and the rate a share of
    its throughput; the Server tests that follow use that rate (and the loop ends)."""
    from datetime import UTC, datetime

    from dlvirt.core.records import Repetition
    from dlvirt.run import harness

    calls = []

    def fake(app, job, rep, out_dir, estimate_qps=None, scenario="Offline", target_qps=None, share=1.0):
        calls.append((scenario, target_qps, share))
        now = datetime.now(UTC)
        loadgen = {"validity": "VALID"} if scenario == "Offline" else {"scenario": scenario}
        return Repetition.measured(repetition=rep, e2e_s=1.0, phases={}, samples=40, batches=1, observed={},
                                   threads={}, quality={}, started=now, finished=now, loadgen=loadgen)

    monkeypatch.setattr(harness, "run_repetition", fake)
    job = HarnessJob(tool="mlperf-Server", app="ic", scenario=Scenario.parse("BM/1/VNL/CPU"),
                     scenario_name="BM/1/VNL/CPU", repetitions=2, warmup_repetitions=0, threads="granted",
                     batch_size=4, loadgen={"server_qps_fraction": 0.5}, app_settings={}, dataset_dir="ic",
                     run_id="1-test")
    timer = tool_class(job.tool).timer(object(), job)  # type: ignore[arg-type]
    assert timer.calibrating()
    warm = timer.time(0, tmp_path, None, [], share=0.2)
    assert not timer.calibrating() and calls[0][2] == 1.0  # the calibration runs the whole workload
    timer.time(1, tmp_path, 40.0, [warm])
    timer.time(2, tmp_path, 40.0, [warm])
    assert [c[0] for c in calls] == ["Offline", "Server", "Server"]
    assert calls[1][1][0] == calls[2][1][0] == 20.0
    given = dataclasses.replace(job, loadgen={"server_target_qps": 7})
    assert not tool_class(given.tool).timer(object(), given).calibrating()  # type: ignore[arg-type]
