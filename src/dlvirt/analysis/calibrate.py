"""``dlvirt calibrate BLOCK BLOCK [...]``: this hardware's day-to-day variance, from A/A blocks.

A block is the results folder of one finished study; the blocks are the same config run again on
the same kind of hardware at other times (an hour or a day apart), each interleaved in rounds as
usual. Nothing changed between them, so every difference between blocks is the host's own drift.

Per platform, over the launches of its scenarios in every block, one model

    log(launch mean) ~ 0 + scenario + (scenario | block) + (round | block)

is fitted by REML (statsmodels' MixedLM): the scenario is fixed; the scenario's shift in a block
(the "day"), the round within a block and the residual are variance components. Their degrees of
freedom: the day's is the number of blocks − 1 (a block's shift is likely shared by its scenarios,
so they are not counted as independent), the round's the rounds beyond one per block, the residual's
what is left. Where one launch per round and scenario leaves the round inseparable from the
residual, the residual holds both (round 0, df 0).

From these: the smallest difference in one scenario between two studies of the blocks' design that
``compare`` resolves (one-sided at ``ALPHA`` over the blocks' scenarios, Holm's first step as
``compare`` applies it; power ``POWER``), and the false alarms of ``compare`` between
every pair of blocks, without and with the calibration (in-sample: the blocks fitted it).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from dlvirt.analysis.claims.verdicts import ALPHA, DEFAULT_MARGIN
from dlvirt.analysis.compare import (
    FASTER,
    MATCH,
    NOT_RECORDED,
    P99,
    REFUSED,
    SLOWER,
    CompareError,
    Results,
    compare,
    load,
    measure,
    platform,
)
from dlvirt.analysis.model import LAUNCH_MEANS, Contrast, combine, launches, with_day
from dlvirt.core.calibration import POWER, Calibration, Components, FalseAlarms, smallest_resolved

MIN_BLOCKS = 2
FEW_BLOCKS = 3  # below it the day's df (blocks - 1) leaves compare's t quantile huge


def block_launches(blocks: list[Results]) -> pd.DataFrame:
    """One line per launch of every block: platform, scenario (``MATCH``'s key), block, round, log value."""
    frames = []
    for index, block in enumerate(blocks):
        for label, row in block.summary.iterrows():
            column = "round_p99_s" if measure(row) == P99 else LAUNCH_MEANS
            found = launches(block.summary.loc[[label]], column)
            frames.append(found.assign(platform=platform(row), cell=" | ".join(str(row[c]) for c in MATCH),
                                       block=str(index), round=found["round"].astype(str)))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def components(data: pd.DataFrame) -> Components:
    """The variance components of one platform's launches (``block_launches``' lines)."""
    import statsmodels.formula.api as smf

    cells, blocks = data["cell"].nunique(), data["block"].nunique()
    rounds = data.groupby("block")["round"].nunique().sum()
    round_df = float(rounds - blocks)
    residual_df = float(len(data) - data.groupby(["cell", "block"]).ngroups - round_df)
    separable = residual_df > 0 and round_df > 0
    if not separable:  # the residual holds the round
        residual_df, round_df = float(len(data) - data.groupby(["cell", "block"]).ngroups), 0.0
    if residual_df <= 0:
        raise CompareError(f"platform {data['platform'].iloc[0]}: too few launches to calibrate "
                           "(each scenario needs two or more launches in a block)")
    vc = {"day": "0 + C(cell)", **({"round": "0 + C(round)"} if separable else {})}
    try:
        with warnings.catch_warnings():
            # a component estimated at its boundary (zero) is a result, not a failure
            warnings.simplefilter("ignore")
            fit = smf.mixedlm("y ~ 0 + C(cell)", data, groups="block", re_formula="0", vc_formula=vc).fit(reml=True)
    except (np.linalg.LinAlgError, ValueError) as err:
        raise CompareError(f"platform {data['platform'].iloc[0]}: its variance components cannot be fitted "
                           f"({err})") from None
    found = dict(zip(fit.model.exog_vc.names, (float(v) for v in fit.vcomp), strict=True))
    return Components(residual=float(fit.scale), residual_df=residual_df, round=found.get("round", 0.0),
                      round_df=round_df, day=found["day"], day_df=float(blocks - 1), scenarios=cells)


def resolvable(c: Components, launches_per_scenario: int, family: int = 1) -> float:
    """The smallest relative difference in one scenario between two studies of
    ``launches_per_scenario`` launches (one per round) that ``compare`` finds with probability
    ``POWER``: a one-sided test at ``ALPHA`` / ``family``, the level Holm's first step over
    ``family`` compared scenarios sets (a change in one scenario alone must pass it)."""
    parts = [(1.0, Contrast(0.0, math.sqrt(2 * variance / launches_per_scenario), df))
             for variance, df in ((c.residual, c.residual_df), (c.round, c.round_df)) if variance > 0 and df > 0]
    day = Contrast(0.0, math.sqrt(2 * c.day), c.day_df)
    total = with_day(combine(parts), day) if parts and day.df > 0 else combine(parts)
    return smallest_resolved(total.se, total.df, ALPHA / family, POWER) if total.testable else math.nan


def holm_family(platforms: dict[str, Components]) -> int:
    """The scenarios that ``compare``'s Holm runs over for two studies like the blocks."""
    return sum(c.scenarios for c in platforms.values())


def false_alarms(blocks: list[Results], calibration: Calibration | None, margin: float) -> tuple[int, int]:
    """(scenarios compared, of them slower or faster) over every pair of blocks."""
    compared = flagged = 0
    for a, b in itertools.combinations(blocks, 2):
        table = compare(a, b, margin, calibration)
        compared += int((table["verdict"] != REFUSED).sum())
        flagged += int(table["verdict"].isin([SLOWER, FASTER]).sum())
    return compared, flagged


def calibration_of(blocks: list[Results]) -> Calibration:
    """The variance components of ``blocks`` (``load``'s results folders), before its false alarms."""
    names = ", ".join(str(b.path) for b in blocks)
    if len(blocks) < MIN_BLOCKS or len({Path(b.path).resolve() for b in blocks}) < len(blocks):
        raise CompareError(f"{MIN_BLOCKS} or more different results folders are needed (A/A blocks "
                           f"of one config run at different times), got {names or 'none'}")
    hardware = sorted({h for block in blocks for h in block.summary["hardware"]})
    if NOT_RECORDED in hardware:
        raise CompareError(f"some rows of {names} do not record their hardware (run records written "
                           "before nodes were recorded): a calibration is only of a known kind of hardware")
    data = block_launches(blocks)
    if data.empty:
        raise CompareError(f"no launch means in {names}")
    per_platform = {str(name): components(rows) for name, rows in data.groupby("platform")}
    design = int(statistics.median(data.groupby(["cell", "block"]).size()))
    family = holm_family(per_platform)
    return Calibration(
        hardware=tuple(hardware), blocks=tuple(str(b.path) for b in blocks), launches=design,
        platforms=per_platform, false_alarms=FalseAlarms(0, 0, 0),
        resolvable={name: resolvable(c, design, family) for name, c in per_platform.items()})


def calibrate(folders: list[Path], margin: float = DEFAULT_MARGIN) -> Calibration:
    """``dlvirt calibrate``: the calibration of the results folders ``folders``, with the false
    alarms of ``compare`` between them (margin ``margin``), without and with it."""
    blocks = [load(Path(f)) for f in folders]
    calibration = calibration_of(blocks)
    compared, uncalibrated = false_alarms(blocks, None, margin)
    _, calibrated = false_alarms(blocks, calibration, margin)
    return dataclasses.replace(calibration, false_alarms=FalseAlarms(compared, uncalibrated, calibrated))


def _sd(variance: float) -> str:
    return f"{math.expm1(math.sqrt(variance)):.1%}"


def plain_words(c: Calibration) -> list[str]:
    """What this hardware can tell apart, in plain words."""
    family = holm_family(c.platforms)
    lines = [f"calibration of {', '.join(c.hardware)} from {len(c.blocks)} A/A blocks ({', '.join(c.blocks)})"]
    for name, p in sorted(c.platforms.items()):
        smallest = c.resolvable.get(name, math.nan)
        resolved = f"{smallest:.1%}" if math.isfinite(smallest) else "nothing (too few degrees of freedom)"
        lines.append(f"{name}: day-to-day SD {_sd(p.day)} (df {p.day_df:.0f}), round drift SD {_sd(p.round)}, "
                     f"launch SD {_sd(p.residual)}; two studies of {c.launches} launches per scenario tell apart "
                     f"{resolved} in one scenario (α = {ALPHA} / {family} scenarios by Holm, power {POWER})")
    if len(c.blocks) < FEW_BLOCKS:
        lines.append(f"with {len(c.blocks)} blocks the day's component has {len(c.blocks) - 1} degree(s) of freedom: "
                     f"compare can call little slower or faster; calibrate on {FEW_BLOCKS} or more blocks")
    f = c.false_alarms
    lines.append(f"compare between the blocks (no true change): {f.uncalibrated} of {f.compared} scenario "
                 f"comparisons slower or faster without this calibration, {f.calibrated} with it (in-sample)")
    return lines
