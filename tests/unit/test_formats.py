"""Every document dlvirt writes carries ``format_version`` (``dlvirt.core.formats``), and its readers
refuse a version they do not read with a message naming the file; a document written before versions
were recorded still reads where its format has not changed since."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import FIXTURES
from dlvirt.analysis import columns
from dlvirt.analysis.aggregate import write_summary
from dlvirt.analysis.columns import read_summary, read_table
from dlvirt.analysis.plandoc import PlanDocument
from dlvirt.analysis.rows import host_cores
from dlvirt.core import formats
from dlvirt.core.formats import FormatError
from dlvirt.core.records import HarnessJob, HarnessOutput, JobResult, RecordError
from dlvirt.plan.planner import kinds

RUNS = sorted((FIXTURES / "runs").glob("*.json"))


def test_every_document_kind_has_a_version():
    assert set(formats.VERSIONS) == set(formats.Document.__args__)  # type: ignore[attr-defined]
    assert all(f.version >= 1 for f in formats.VERSIONS.values())


def test_run_records_carry_their_version_and_refuse_another(tmp_path):
    result = JobResult.read(RUNS[0])  # written before versions were recorded: version 1
    path = tmp_path / "r.json"
    result.write(path)
    document = json.loads(path.read_text())
    assert document[formats.KEY] == formats.version("run record")
    assert JobResult.read(path) == result
    document[formats.KEY] = 99
    path.write_text(json.dumps(document))
    with pytest.raises(RecordError, match=rf"{path}: a run record with format_version 99; this dlvirt reads"):
        JobResult.read(path)
    job = HarnessJob.of(result.spec, dataset_dir="/d", run_id="1-x")
    assert job.to_dict()[formats.KEY] == formats.version("harness job")
    assert HarnessOutput.document == "harness output"
    assert "format_version" not in job.to_dict()["scenario"]  # nested records carry none of their own


def test_plan_and_host_facts_refuse_another_version(tmp_path):
    plan = tmp_path / "plan.json"
    document = formats.stamped("plan", {"left_out": [], "kinds": kinds().document()})
    plan.write_text(json.dumps(document))
    assert PlanDocument.load(plan).left_out == []
    for older in (1, None):  # version 1 held prose [what, why] pairs, which are no longer parsed
        plan.write_text(json.dumps({**document, formats.KEY: older}))
        with pytest.raises(FormatError, match=rf"{plan}: a plan with (format_version 1|no format_version)"):
            PlanDocument.load(plan)
    host = tmp_path / "host.json"
    host.write_text(json.dumps(formats.stamped("host facts", {"capabilities": {"cores": 4}})))
    assert host_cores(host) == 4
    host.write_text(json.dumps({formats.KEY: "2", "capabilities": {"cores": 4}}))
    with pytest.raises(FormatError, match=rf"{host}: a host facts with format_version '2'"):
        host_cores(host)


def test_csv_documents_carry_a_version_column_and_refuse_another(tmp_path):
    summary = tmp_path / "summary.csv"
    write_summary(RUNS, summary)
    frame = read_summary(summary)
    assert set(frame[formats.KEY]) == {formats.version("summary")}
    assert formats.KEY in columns.COLUMNS
    frame[formats.KEY] = 7
    frame.to_csv(summary, index=False)
    with pytest.raises(FormatError, match=rf"{summary}: a summary with format_version 7"):
        read_summary(summary)
    claims = tmp_path / "claims.csv"
    pd.DataFrame({"id": ["a"], formats.KEY: [formats.version("claims")]}).to_csv(claims, index=False)
    assert list(read_table(claims, "claims").columns) == ["id"]
    pd.DataFrame({"id": ["a"], formats.KEY: [formats.version("claims") + 1]}).to_csv(claims, index=False)
    with pytest.raises(FormatError, match=f"a claims with format_version {formats.version('claims') + 1}"):
        read_table(claims, "claims")


def test_a_prepared_dataset_says_its_version_and_the_app_refuses_another(tmp_path):
    from conftest import NOOP_SETTINGS, one_thread
    from dlvirt.apps.noop import NoopApp

    NoopApp.prepare_dataset(tmp_path, NOOP_SETTINGS)
    info = json.loads((tmp_path / "dataset.json").read_text())
    assert info[formats.KEY] == formats.version("dataset info")
    app = NoopApp(NOOP_SETTINGS, tmp_path, "CPU", one_thread())
    assert formats.KEY not in app.dataset_info and app.dataset_info["source"] == "synthetic"
    (tmp_path / "dataset.json").write_text(json.dumps({**info, formats.KEY: 9}))
    with pytest.raises(FormatError, match=rf"{tmp_path / 'dataset.json'}: a dataset info with format_version 9"):
        NoopApp(NOOP_SETTINGS, tmp_path, "CPU", one_thread())
