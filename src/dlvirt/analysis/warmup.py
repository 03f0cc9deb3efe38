"""How many warm-ups each app and tool needs, read from a pilot's run records.

Kalibera & Jones (2013) fix a benchmark's warm-up count in advance, from a pilot that shows where
its repetitions settle; afterwards no repetition is dropped for what it measured (a rule that drops
whichever of two repetitions disagrees drops slow ones too, and biases the mean and the spread).
``suggest`` does the reading: per tool and app, over the pilot's launches, each early counted
repetition (position i) against the median of its own launch's later half, as a ratio; its
geometric mean over the launches with a 90 % t-interval. A position is still warming when that
ratio is above 1 at α = 0.05 (one-sided t-test over the launches) by more than ``margin``; the
suggested count is the pilot's warm-ups plus the leading positions still warming. A pilot is any
study whose launches count enough repetitions: with two, only the first is judged (against the
second); ``study.repetitions: 6`` judges the first three.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from scipy import stats as sps

from dlvirt.core.loadgen import split_tool
from dlvirt.core.records import JobResult

LEVEL = 0.90  # the interval printed: one-sided test at 5 % on its lower bound
DEFAULT_MARGIN = 0.01  # an excess below 1 % is not worth a warm-up's machine time


@dataclass(frozen=True)
class Position:
    """Counted repetition ``index`` (0: the first) against its launch's later half, over launches."""

    index: int
    launches: int
    log_ratio: float  # mean over launches of log(rep_i / median of the later half)
    low: float  # 90 % interval of the geometric-mean ratio (NaN: fewer than two launches)
    high: float
    p_slower: float  # one-sided t-test, H0: the mean log ratio ≤ log(1 + margin)

    def text(self) -> str:
        interval = "" if math.isnan(self.low) else f" [{self.low - 1:+.1%}, {self.high - 1:+.1%}]"
        return f"rep {self.index + 1} {math.expm1(self.log_ratio):+.1%}{interval}"


@dataclass(frozen=True)
class Suggestion:
    tool: str
    app: str
    launches: int
    pilot_warmups: int  # warm-ups every pilot launch ran (the most, where they differ)
    positions: list[Position]
    warming: int  # leading positions still warming
    steady_share: float  # launches whose record says steady (NaN: none judged)
    # the pilot's launches ran different warm-up counts: records of the old steady-state rule, which
    # moved slow first repetitions to the warm-ups, so their counted ones understate the warming
    mixed_warmups: bool = False

    @property
    def count(self) -> int:
        return self.pilot_warmups + self.warming


def _position(index: int, logs: list[float], margin: float) -> Position:
    n = len(logs)
    mean = statistics.fmean(logs)
    if n < 2:
        return Position(index, n, mean, math.nan, math.nan, math.nan)
    se = statistics.stdev(logs) / math.sqrt(n)
    if se == 0:
        return Position(index, n, mean, math.exp(mean), math.exp(mean), 0.0 if mean > math.log1p(margin) else 1.0)
    half = float(sps.t.ppf(0.5 + LEVEL / 2, n - 1)) * se
    p = float(sps.t.sf((mean - math.log1p(margin)) / se, n - 1))
    return Position(index, n, mean, math.exp(mean - half), math.exp(mean + half), p)


def suggest(records: list[JobResult], margin: float = DEFAULT_MARGIN, alpha: float = 0.05) -> list[Suggestion]:
    """One suggestion per tool and app of ``records`` (a pilot's run records)."""
    groups: dict[tuple[str, str], list[JobResult]] = {}
    for record in records:
        groups.setdefault((split_tool(record.tool)[0], record.app), []).append(record)
    out = []
    for (tool, app), launches in sorted(groups.items()):
        counted = [[r.e2e_s for r in launch.runs if r.e2e_s > 0] for launch in launches]
        judged = min((len(c) for c in counted), default=0) // 2  # the first half, against the later half
        positions = []
        for i in range(judged):
            logs = [math.log(c[i] / statistics.median(c[len(c) - (len(c) + 1) // 2:])) for c in counted]
            positions.append(_position(i, logs, margin))
        warming = next((p.index for p in positions if not p.p_slower < alpha), len(positions))
        steady = [launch.repetitions.get("steady") for launch in launches if launch.repetitions]
        judged_steady = [s for s in steady if isinstance(s, bool)]
        ran = {len(launch.warmups) for launch in launches}
        out.append(Suggestion(tool, app, len(launches), max(ran), positions, warming,
                              statistics.fmean(judged_steady) if judged_steady else math.nan, len(ran) > 1))
    return out


def report(suggestions: list[Suggestion], margin: float) -> str:
    """A table a person reads, then the config lines that fix the suggested counts."""
    if not suggestions:
        return "warmup: no run records"
    lines = [f"Counted repetitions against their launch's later half (geometric mean over launches, 90 % interval); "
             f"a position still warms when it is slower by more than {margin:.0%} (one-sided t-test, 5 %):"]
    for s in suggestions:
        shown = "; ".join(p.text() for p in s.positions) or "fewer than two counted repetitions: nothing to judge"
        steady = "" if math.isnan(s.steady_share) else f", steady {s.steady_share:.0%} of launches"
        mixed = (" (its launches ran different warm-up counts: records of the old rule, which set slow "
                 "repetitions aside, so read this count as a lower bound)") if s.mixed_warmups else ""
        lines.append(f"  {s.tool} {s.app}: {s.launches} launches, {s.pilot_warmups} warm-up(s){steady}: {shown} "
                     f"→ {s.count} warm-up(s){mixed}")
    per_app: dict[str, dict[str, int]] = {}
    for s in suggestions:
        per_app.setdefault(s.app, {})[s.tool] = s.count
    default = statistics.mode(s.count for s in suggestions)
    entries = [f"default: {default}"]
    for app, tools in per_app.items():
        if len(set(tools.values())) == 1:
            if next(iter(tools.values())) != default:
                entries.append(f"{app}: {next(iter(tools.values()))}")
        else:
            entries.append(f"{app}: {{{', '.join(f'{t}: {n}' for t, n in tools.items())}}}")
    lines += ["", "To fix these counts (config):", "study:", f"  warmup_repetitions: {{{', '.join(entries)}}}"]
    return "\n".join(lines)
