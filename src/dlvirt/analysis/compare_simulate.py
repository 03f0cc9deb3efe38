"""``dlvirt compare``'s false "slower" / "faster" rate, by simulation through the real summary and
compare code: the rows ``drift``, ``day-shift`` (without and with a calibration) and
``cross-hardware`` of ``benchmarks/claim_error_rates.py --check``.

A simulated study is one host's default-shaped matrix: BM and CN × IC and NLP, one core, VNL; each
scenario ``LAUNCHES`` launches (one per interleaved round) of ``REPETITIONS`` repetitions. A
repetition's time is

    base · exp(hardware + day + round drift + between-launch + within-launch)

with normal log-scale terms: within a launch ``WITHIN``, between launches ``BETWEEN`` (inside the
ranges the project measured, docs/statistics.md), round drift of SD ``drift`` shared by a round's
scenarios, and a study-wide shift (its "day"). The launches become run records (a recorded one's
structure, its timings and node replaced), each scenario's summary row is built by
``aggregate.summarise_launches`` and two studies are compared by ``compare.compare``; a calibration,
where a row has one, by ``calibrate.calibration_of`` from ``BLOCKS`` A/A blocks simulated on the same
host. No scenario truly changes between the two studies, so any "slower" or "faster" is false; a
study pair counts once however many of its scenarios are flagged.

Each row function takes ``(studies, seed)`` and returns ``(name, what, false verdicts, studies, α)``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from dlvirt.analysis.aggregate import summarise_launches
from dlvirt.analysis.calibrate import calibration_of
from dlvirt.analysis.claims.verdicts import ALPHA
from dlvirt.analysis.compare import FASTER, SLOWER, Results, compare, results
from dlvirt.core.calibration import Calibration
from dlvirt.core.records import JobResult
from dlvirt.core.scenario import Scenario

# the recorded run records of a source checkout: one, for its structure only (every timing is replaced)
RECORDED = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "runs"
TEMPLATE_NAME = "*-ic-BM-1-VNL-CPU.json"  # any run tool (only its own module names a tool)
PLATFORMS, APPS = ("BM", "CN"), ("ic", "nlp")
LAUNCHES, REPETITIONS = 5, 2  # config/config.yaml's design
WITHIN, BETWEEN = 0.04, 0.05  # log-scale SDs within a launch and between launches
SHIFT = math.log(1.055)  # the round drift's SD, and the day's shift: round means 5.5 % apart (docs/statistics.md)
QUIET_DRIFT = 0.03  # the round drift of the rows about the day
BLOCKS = 3  # A/A blocks of a simulated calibration
NODES = {"X": {"hostname": "node-x", "cpu_model": "Simulated CPU X", "logical_cpus_online": 8, "sockets": 1,
               "arch": "x86_64"},
         "Y": {"hostname": "node-y", "cpu_model": "Simulated CPU Y", "logical_cpus_online": 8, "sockets": 1,
               "arch": "x86_64"}}
Row = tuple[str, str, int, int, float]


@functools.cache
def template() -> JobResult:
    found = sorted(RECORDED.glob(TEMPLATE_NAME))
    if not found:
        raise FileNotFoundError(f"{RECORDED / TEMPLATE_NAME}: no recorded run record to build on (a source "
                                "checkout's)")
    return JobResult.read(found[0])


def simulated(name: str, rng: np.random.Generator, drift: float, day: float = 0.0, node: str = "X",
              hardware: float = 0.0, slowed: dict[str, float] | None = None) -> Results:
    """One study: its log-scale ``day`` shift and ``hardware`` term on every time, round drift of SD
    ``drift``, the platforms in ``slowed`` that many times slower."""
    base = template()
    rounds = rng.normal(0.0, drift, LAUNCHES)
    rows = []
    for platform in PLATFORMS:
        scenario = Scenario(platform, 1, "VNL", "CPU")
        for app in APPS:
            level = math.log(2.0 if app == "ic" else 3.0) + hardware + day + math.log((slowed or {}).get(platform, 1))
            records = []
            for replicate, drifted in enumerate(rounds, start=1):
                launch = level + drifted + rng.normal(0.0, BETWEEN)
                runs = [dataclasses.replace(base.runs[0], repetition=i, e2e_s=float(math.exp(launch + e)),
                                            loadgen={"validity": "VALID"})
                        for i, e in enumerate(rng.normal(0.0, WITHIN, REPETITIONS))]
                records.append(dataclasses.replace(
                    base, app=app, scenario=scenario, scenario_name=scenario.name, replicate=replicate, runs=runs,
                    platform={"platform": platform, "accel": "none"}, node=NODES[node], code=None,
                    runner_code=None))
            rows.append(summarise_launches(records))
    return results(Path(name), pd.DataFrame(rows), {}, [])


def calibration(rng: np.random.Generator, drift: float, day: float) -> Calibration:
    """A calibration from ``BLOCKS`` A/A blocks on node kind X, each block's day drawn with SD ``day``."""
    return calibration_of([simulated(f"block-{i}", rng, drift, rng.normal(0.0, day)) for i in range(BLOCKS)])


def flagged(table: pd.DataFrame) -> bool:
    return bool(table["verdict"].isin([SLOWER, FASTER]).any())


def _count(studies: int, seed: int, pair: Callable[[np.random.Generator], pd.DataFrame]) -> int:
    rng = np.random.default_rng(seed)
    return sum(flagged(pair(rng)) for _ in range(studies))


def drift(studies: int, seed: int) -> Row:
    def pair(rng: np.random.Generator) -> pd.DataFrame:
        cal = calibration(rng, SHIFT, 0.0)
        return compare(simulated("A", rng, SHIFT), simulated("B", rng, SHIFT), calibration=cal)

    what = ("two studies, no change, round drift 5.5 %, calibrated on such a host (no day shift): any scenario "
            "slower or faster")
    return "drift", what, _count(studies, seed, pair), studies, ALPHA


def day_shift(studies: int, seed: int) -> Row:
    def pair(rng: np.random.Generator) -> pd.DataFrame:
        return compare(simulated("A", rng, QUIET_DRIFT), simulated("B", rng, QUIET_DRIFT, SHIFT))

    what = "B's day 5.5 % slower, no change, no calibration: any scenario slower or faster"
    return "day-shift", what, _count(studies, seed, pair), studies, ALPHA


def day_shift_calibrated(studies: int, seed: int) -> Row:
    def pair(rng: np.random.Generator) -> pd.DataFrame:
        cal = calibration(rng, QUIET_DRIFT, SHIFT)
        return compare(simulated("A", rng, QUIET_DRIFT), simulated("B", rng, QUIET_DRIFT, SHIFT), calibration=cal)

    what = (f"B's day 5.5 % slower, no change, calibrated ({BLOCKS} A/A blocks of a host whose day SD is 5.5 %): "
            "any scenario slower or faster")
    return "day-shift, calibrated", what, _count(studies, seed, pair), studies, ALPHA


def cross_hardware(studies: int, seed: int) -> Row:
    def pair(rng: np.random.Generator) -> pd.DataFrame:
        return compare(simulated("A", rng, QUIET_DRIFT),
                       simulated("B", rng, QUIET_DRIFT, node="Y", hardware=math.log(0.9)))

    what = ("A on node kind X, B on kind Y (10 % faster hardware), no change, no calibration of both: any "
            "scenario slower or faster")
    return "cross-hardware", what, _count(studies, seed, pair), studies, ALPHA


ROWS: tuple[Callable[[int, int], Row], ...] = (drift, day_shift, day_shift_calibrated, cross_hardware)
