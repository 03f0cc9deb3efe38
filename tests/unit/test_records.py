"""The typed records read the documents on disk back unchanged and name the field of a malformed one."""

import copy
import json

import pytest

from conftest import FIXTURES
from dlvirt.core.records import HarnessJob, JobResult, RecordError, Repetition

RECORDS = sorted((FIXTURES / "runs").glob("*.json"))


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.name)
def test_result_files_round_trip(path):
    document = json.loads(path.read_text())
    again = JobResult.read(path).to_dict()
    for rep in again["runs"] + again["warmups"]:  # written before warm-ups were marked: the default
        assert rep.pop("warmup") is False
    # written before replicates: one launch, the default
    assert again.pop("replicate") == 1 and again["spec"].pop("replicate") == 1
    assert again["spec"].pop("warmup_share") == 1.0  # written before partial warm-ups: whole ones
    assert again.pop("format_version") == 2  # written before format versions (1), written as this one
    assert again == document


def test_a_record_of_format_1_reads_its_dlbs_fields_as_the_generic_ones():
    """Format 1 named a job's tool settings and a repetition's tool output after the one tool with
    them (``dlbs``); format 2 reads them under their generic names and writes those."""
    document = json.loads(RECORDS[0].read_text())
    settings = {"exp.num_batches": 2, "path": None}
    output = {"backend": "ours", "log": "rep-0001/dlbs.log"}
    old = {**document, "format_version": 1, "tool": "dlbs",
           "spec": {**document["spec"], "tool": "dlbs", "dlbs": settings},
           "runs": [{**rep, "dlbs": output} for rep in document["runs"]]}
    result = JobResult.from_dict(old, "old.json")
    assert result.spec.tool_settings == settings and all(rep.tool_output == output for rep in result.runs)
    written = result.to_dict()
    assert written["format_version"] == 2 and "dlbs" not in written["spec"] and "dlbs" not in written["runs"][0]
    assert JobResult.from_dict(written) == result
    with pytest.raises(RecordError, match="a run record with format_version 3"):
        JobResult.from_dict({**old, "format_version": 3}, "new.json")


def test_a_malformed_document_names_the_field():
    document = json.loads(RECORDS[0].read_text())
    bad = copy.deepcopy(document)
    bad["runs"][1]["e2e_s"] = "fast"
    with pytest.raises(RecordError, match=r"r\.json\.runs\[1\]\.e2e_s: expected float, got 'fast'"):
        JobResult.from_dict(bad, "r.json")
    bad = copy.deepcopy(document)
    del bad["spec"]["repetitions"]
    with pytest.raises(RecordError, match=r"r\.json\.spec: lacks repetitions$"):
        JobResult.from_dict(bad, "r.json")
    bad = copy.deepcopy(document)
    bad["spec"]["repetition"] = 3
    with pytest.raises(RecordError, match=r"r\.json\.spec: unknown field\(s\) 'repetition'"):
        JobResult.from_dict(bad, "r.json")
    bad = copy.deepcopy(document)
    bad["scenario"]["pinning"] = "XX"  # platform names are the registry's, checked where a platform is loaded
    with pytest.raises(RecordError, match=r"r\.json\.scenario: not a scenario .*unknown pinning 'XX'"):
        JobResult.from_dict(bad, "r.json")


def test_the_harness_job_is_the_spec_with_the_run_id_and_unset_optionals_left_out():
    spec = JobResult.read(RECORDS[0]).spec
    job = HarnessJob.of(spec, dataset_dir="/data/ic", run_id="1-abc")
    assert job.scenario_name == spec.scenario.name and job.tool_settings is None
    document = job.to_dict()
    assert "tool_settings" not in document and document["scenario"] == spec.scenario.to_dict()
    assert HarnessJob.from_dict(document) == job


def test_a_repetition_rate_comes_from_its_samples_and_time():
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    rep = Repetition.measured(repetition=0, e2e_s=2.0, phases={"infer_s": 2.0}, samples=10, batches=1,
                              observed={}, threads={}, quality={}, started=now, finished=now)
    assert rep.samples_per_s == 5.0 and rep.started_utc == now.isoformat()
    assert "loadgen" not in rep.to_dict() and "tool_output" not in rep.to_dict()
