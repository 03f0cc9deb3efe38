"""Closed vocabularies shared across layers, as ``Literal`` types (mypy checks every use; the tuples
are for messages and validation). Scenario axes are in ``dlvirt.core.scenario`` (``Pinning``,
``Processor``); claim and comparison verdicts in ``dlvirt.analysis.claims.verdicts`` and
``dlvirt.analysis.compare``; left-out reasons in ``dlvirt.plan.leftout``; tool measures in
``dlvirt.core.kinds``.
"""

from __future__ import annotations

from typing import Literal, get_args

# harness.threads: how many threads the harness and the framework use (ThreadPlan)
ThreadPolicy = Literal["granted", "framework-default"]
# as a config or an older run record may say it: naive is framework-default's older name
ThreadSetting = Literal["granted", "framework-default", "naive"]
# harness.pipeline: whether the stages overlap (None in a config: the thread plan's own choice)
Pipeline = Literal["overlapped", "sequential"]

THREAD_POLICIES: tuple[ThreadPolicy, ...] = get_args(ThreadPolicy)
PIPELINES: tuple[Pipeline, ...] = get_args(Pipeline)
