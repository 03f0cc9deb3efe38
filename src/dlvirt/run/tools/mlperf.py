"""The MLPerf tool (``tool: mlperf``, the paper's): end-to-end inference time through MLPerf LoadGen.

Each repetition is one LoadGen test over the app's dataset: reading, pre-processing, inference and
post-processing, timed from the query's issue to the last completion. The pipeline and LoadGen's
settings are the LoadGen harness's (``dlvirt.run.harness``); its settings are each app's ``loadgen``
section, so the tool has no config section of its own.

In a LoadGen scenario other than Offline (``study.scenarios``, ``dlvirt.core.loadgen``) the job's run
tool is ``mlperf-<Scenario>``; the registry resolves it to this tool, and its timer runs that scenario.
A Server launch without a configured rate first measures the Offline throughput over the whole
workload (whatever ``study.warmup_share``), as a warm-up, and sets its target rate from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlvirt.apps.base import App
from dlvirt.core.kinds import ToolKind
from dlvirt.core.loadgen import SCENARIOS, SERVER, split_tool
from dlvirt.core.records import HarnessJob, Repetition
from dlvirt.run import harness
from dlvirt.run.tools.base import Timer, Tool


class LoadGenTimer(Timer):
    """One launch's LoadGen tests in its scenario; Server's target rate, once known."""

    def __init__(self, tool: type[Tool], app: App, job: HarnessJob) -> None:
        super().__init__(tool, app, job)
        self.scenario = split_tool(job.tool)[1]
        self.target: tuple[float, str] | None = None
        self.calibrated = False  # the Offline warm-up that sets Server's rate ran

    def calibrating(self) -> bool:
        return (self.scenario == SERVER and self.target is None and not self.calibrated
                and not self.job.loadgen.get("server_target_qps"))

    def time(self, rep: int, out_dir: Path, estimate_qps: float | None, warmups: list[Repetition],
             share: float = 1.0) -> Repetition:
        if self.calibrating():  # Server's target rate is a share of the Offline throughput this measures
            self.calibrated = True
            # over the whole workload, whatever study.warmup_share: a partial warm-up spreads a
            # repetition's fixed costs over fewer samples and understates the throughput
            return harness.run_repetition(self.app, self.job, rep, out_dir, estimate_qps)
        if self.scenario == SERVER and self.target is None:
            offline = [r.samples_per_s for r in warmups if r.samples_per_s and r.loadgen
                       and "scenario" not in r.loadgen]
            self.target = harness.server_target_qps(self.job.loadgen, offline)
        return harness.run_repetition(self.app, self.job, rep, out_dir, estimate_qps, self.scenario, self.target,
                                      share)


class MLPerf(Tool):
    kind = ToolKind(name="mlperf", title="MLPerf LoadGen end-to-end inference time", measure="E2E", order=0,
                    phases=("pre_s", "infer_s", "post_s"), scenarios=SCENARIOS)

    @classmethod
    def samples_per_repetition(cls, config: dict[str, Any], app: str) -> int:
        settings = config["apps"][app]
        return int(settings["loadgen"].get("min_query_count") or settings["dataset"]["count"])

    @classmethod
    def timer(cls, app: App, job: HarnessJob) -> Timer:
        return LoadGenTimer(cls, app, job)

    @classmethod
    def run_repetition(cls, app: App, job: HarnessJob, rep: int, out_dir: Path,
                       estimate_qps: float | None, share: float = 1.0) -> Repetition:
        return harness.run_repetition(app, job, rep, out_dir, estimate_qps, split_tool(job.tool)[1], share=share)
