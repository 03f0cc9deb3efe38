"""The closed vocabularies are Literal types (``dlvirt.core.vocabulary``, ``core.scenario``, the verdicts):
the schema's enums are them, and a run record with a word outside one is refused naming the field."""

from __future__ import annotations

import copy
import json
import typing

import pytest
import yaml

from conftest import FIXTURES, REPO
from dlvirt.analysis import compare
from dlvirt.analysis.claims import verdicts
from dlvirt.core import vocabulary
from dlvirt.core.records import JobResult, RecordError
from dlvirt.core.scenario import PINNINGS, PROCESSORS
from dlvirt.plan.leftout import REASONS

SCHEMA = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())


def _enum(node: dict) -> list:
    return node.get("enum") or node["items"]["enum"]


def test_the_schema_enums_are_the_vocabularies():
    harness = SCHEMA["properties"]["harness"]["properties"]
    assert sorted(_enum(harness["threads"])) == sorted(typing.get_args(vocabulary.ThreadSetting))
    assert sorted(v for v in _enum(harness["pipeline"]) if v is not None) == sorted(vocabulary.PIPELINES)
    block = SCHEMA["$defs"]["matrix_block"]["properties"]
    assert sorted(_enum(block["pinning"])) == sorted(PINNINGS)
    assert sorted(_enum(block["processors"])) == sorted(PROCESSORS)


def test_verdicts_and_reasons_are_closed():
    assert typing.get_args(verdicts.ClaimVerdict) == (verdicts.HOLDS, verdicts.FAILS, verdicts.NEGLIGIBLE,
                                                      verdicts.INCONCLUSIVE, verdicts.UNTESTABLE)
    assert set(typing.get_args(compare.CompareVerdict)) == {compare.SLOWER, compare.FASTER, compare.ALIKE,
                                                          compare.INCONCLUSIVE, compare.REFUSED}
    assert set(REASONS) == {"host", "edge", "unsupported", "not_configured"}


@pytest.mark.parametrize(("field", "word"), [("threads", "some"), ("pipeline", "parallel")])
def test_a_run_record_outside_a_vocabulary_is_refused(field, word):
    document = json.loads(sorted((FIXTURES / "runs").glob("*.json"))[0].read_text())
    bad = copy.deepcopy(document)
    bad["spec"][field] = word
    with pytest.raises(RecordError, match=rf"r\.json\.spec\.{field}: expected one of .*got '{word}'"):
        JobResult.from_dict(bad, "r.json")
