"""``dlvirt compare A B``: the same scenarios in two finished studies (two results folders), B against A.

Scenarios are matched by tool, app, scenario name, site and VMM. A pair is compared only if it ran
the same workload: tool, dataset source and size, model and its size, weights kind and how the model
ran (``execution``: its optimisation and padding, where both studies' summaries have it) must agree;
otherwise it is refused with the reason (so is a scenario that only one study has).

One model over both studies' launches of a pooling group (``Between``: log launch mean ~ 0 + cell,
a cell being a scenario in one study, with each study's round as a random intercept, fitted by REML
with statsmodels' MixedLM) gives a scenario's log B/A as B's cell minus A's, with the round drift of
both studies in its variance; its degrees of freedom are Welch–Satterthwaite's over the components
(``model.combine``). The studies ran at different times, so B/A also holds the host's shift between
them (its "day"), which two studies cannot separate from a real change: a calibration of this kind of
hardware (``dlvirt calibrate``, ``dlvirt.core.calibration``) measures that variance per platform and
adds it, twice (one day per study), to the contrast. Without one, a host-wide shift of up to
``UNCALIBRATED_DAY_SHIFT`` is taken as possible: slower and faster are tested against that bound
instead of against 1, and each row says so. The page lists the host, engine, kernel and code
differences beside the ratio ("could explain it"). Rows measured on different kinds of hardware
(the summary's ``hardware``) are not comparable unless the calibration covers both kinds.

Verdict, δ = log(B/A), margin m = log(1 + margin), Holm's correction over the compared scenarios
for each family of tests (``claims.verdicts.holm``), each test one-sided at ``ALPHA``:

- *slower*: B/A > 1 significantly (t-test against 0 with a calibration, else against
  log(1 + ``UNCALIBRATED_DAY_SHIFT``); Holm) and the estimated slow-down is larger than the margin
  (the minimum effect, as Firecracker's ``tools/ab_test.py`` requires both);
- *faster*: the mirror image;
- *alike*: TOST within ±margin (Holm);
- *inconclusive*: none of these, with the smallest effect the comparison could have detected, or
  why it could not test at all (a scenario of one launch in either study is never evidence); also
  a slower or faster scenario whose repetitions ran beside more than ``LOADED_CORES`` cores of other
  processes' work in either study (``others_cores_a`` / ``_b``): the load may explain it.

Latency rows (run tools mlperf-SingleStream, mlperf-Server; ``study.scenarios``) are compared on
their launches' p99 latency (``round_p99_s``), not on E2E (a Server repetition's E2E is its arrival
schedule's length); LoadGen's early stopping not met is no reason to set them aside (it rarely is
with a study's query counts), any other INVALID is. The ``measure`` column says which.

The exit status is ``EXIT_SLOWER`` when some scenario is slower, for CI.
"""

from __future__ import annotations

import datetime as dt
import io
import math
import warnings
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from dlvirt.analysis.claims.study import MIN_LAUNCHES, ONE_LAUNCH, launch_count
from dlvirt.analysis.claims.verdicts import ALPHA, DEFAULT_MARGIN, holm
from dlvirt.analysis.model import (
    LAUNCH_MEANS,
    NO_CONTRAST,
    Contrast,
    combine,
    day_contrast,
    group_keys,
    launches,
    with_day,
)
from dlvirt.analysis.rows import emulated, load_summary, with_site
from dlvirt.core import formats
from dlvirt.core.atomic import write_text_atomic
from dlvirt.core.calibration import Calibration
from dlvirt.core.formats import read_document
from dlvirt.core.records import JobResult, RecordError

FORMAT = formats.version("compare")  # the compare CSV's format version (its ``format_version`` column)
CompareVerdict = Literal["slower", "faster", "alike", "inconclusive", "not comparable"]
SLOWER: CompareVerdict = "slower"
FASTER: CompareVerdict = "faster"
ALIKE: CompareVerdict = "alike"
INCONCLUSIVE: CompareVerdict = "inconclusive"
REFUSED: CompareVerdict = "not comparable"
EXIT_SLOWER = 1
MATCH = ["tool", "app", "scenario", "site", "vmm"]  # what names one scenario in both studies
# what must agree for two rows to measure the same workload, and how a refusal names it
WORKLOAD = {"tool": "tool", "dataset_source": "dataset source", "samples": "dataset size (samples per run)",
            "model": "model", "reference_model": "model size (reference or stand-in)", "weights": "weights kind",
            "execution": "how the model ran"}
COLUMNS = [formats.KEY, *MATCH, "verdict", "ratio", "low90", "high90", "df", "p_slower", "p_faster", "p_alike",
           "launches_a", "launches_b", "mean_a_s", "mean_b_s", "why", "measure", "others_cores_a", "others_cores_b",
           "day_sd", "calibration"]
# A scenario during whose repetitions other processes kept more than this many cores busy in either
# study (the mean of others_cpu_s / E2E) is no evidence of a slow-down or a speed-up: its times depend
# on what else ran (the same config run twice beside other work, 1.44 and 1.56 cores of it, gave
# B/A 1.93). On a quiet machine dlvirt's own daemons and Snakemake take a few hundredths of a core:
# the default study alone on a 2-core AMD EPYC guest (2026-12-03) gave 0.05 per repetition (median,
# 0.17 at most of 240) and 0.07 at most as a scenario's mean, so 0.25 flags none of that.
LOADED_CORES = 0.25
# Without a calibration, the host-wide shift between two studies is not measured: slower and faster
# must then be significant beyond this relative shift, which a stated assumption, not a measurement,
# puts above the spread the project has seen (round means of one study 5.5 % apart, docs/statistics.md).
UNCALIBRATED_DAY_SHIFT = 0.10
# what a row's launches are compared on: E2E (launch means), or a latency row's p99 per launch
E2E, P99 = "E2E", "p99 latency"
TEMPLATE = Path(__file__).parent / "templates" / "compare.html.j2"
NOT_RECORDED = "not recorded"  # the summary's hardware of launches whose records name no node


class CompareError(ValueError):
    """A results folder that cannot be compared (missing or unreadable summary); names the file."""


@dataclass
class Results:
    """One finished study's results folder: its summary, host facts and run records."""

    path: Path
    summary: pd.DataFrame
    host: dict[str, Any]
    records: list[JobResult] = field(default_factory=list)


def load(folder: Path) -> Results:
    """The results folder ``folder`` (``summary.csv``, ``host.json``, ``runs/``)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CompareError(f"{folder}: not a results folder (no such directory)")
    summary_path = folder / "summary.csv"
    if not summary_path.is_file():
        raise CompareError(f"{summary_path}: missing; is {folder} the results folder of a finished study?")
    try:
        summary = load_summary(summary_path)
    except (pd.errors.ParserError, UnicodeDecodeError) as err:
        raise CompareError(f"{summary_path}: not a summary CSV ({err})") from None
    missing = [c for c in ("tool", "app", "scenario", "mean_s") if c not in summary] if not summary.empty else []
    if summary.empty or missing:
        raise CompareError(f"{summary_path}: no summary rows" + (f" (lacks {', '.join(missing)})" if missing else ""))
    host_path = folder / "host.json"
    host = read_document(host_path, "host facts") if host_path.is_file() else {}
    try:
        records = [JobResult.read(p) for p in sorted((folder / "runs").rglob("*.json"))]
    except (RecordError, ValueError) as err:
        raise CompareError(f"{folder / 'runs'}: {err}") from None
    return results(folder, summary, host, records)


def results(folder: Path, summary: pd.DataFrame, host: dict[str, Any], records: list[JobResult]) -> Results:
    """A study's ``summary`` (as ``aggregate`` writes it) made ready to compare."""
    frame = with_site(summary)
    if "vmm" not in frame:
        frame["vmm"] = None
    frame["vmm"] = frame["vmm"].where(frame["vmm"].notna(), "")
    frame["emulated"] = emulated(frame)
    if "hardware" not in frame:
        frame["hardware"] = NOT_RECORDED
    frame["hardware"] = frame["hardware"].where(frame["hardware"].notna(), NOT_RECORDED).astype(str)
    return Results(folder, frame.reset_index(drop=True), host, records)


def measure(row: pd.Series) -> str:
    """What a row is compared on: a latency row (it has per-launch p99s) on p99, the others on E2E."""
    p99 = row.get("round_p99_s")
    return P99 if isinstance(p99, str) and p99.strip() else E2E


def _column(rows: pd.DataFrame) -> str:
    """What a group's launches are modelled on: latency rows' groups (their run tool is in the group
    key) on the launches' p99, the others on the launch means."""
    return "round_p99_s" if any(measure(r) == P99 for _, r in rows.iterrows()) else LAUNCH_MEANS


class Between:
    """One model over the launches ``la`` (study A) and ``lb`` (study B) of a pooling group
    (``model.launches``' output): ``log(launch mean) ~ 0 + cell + (1 | study:round)``, a cell being
    one row in one study, fitted by REML (statsmodels' MixedLM). Where the round cannot be told from
    the residual (one launch per round and cell), the cells alone are fitted by OLS: each launch's
    variance then holds its round's, as it should for a contrast between studies."""

    def __init__(self, la: pd.DataFrame, lb: pd.DataFrame) -> None:
        import statsmodels.api as sm

        data = pd.concat([la.assign(study="A"), lb.assign(study="B")], ignore_index=True)
        self.cells: list[tuple[str, Hashable]] = list(dict.fromkeys(zip(data["study"], data["row"], strict=True)))
        cell = pd.Series(list(zip(data["study"], data["row"], strict=True)), index=data.index)
        self.counts = {c: int((cell == c).sum()) for c in self.cells}
        self.means = {c: float(data["y"][cell == c].mean()) for c in self.cells}
        rounds = data["study"] + ":" + data["round"].astype(str)
        studies = data["study"].nunique()
        self.round_df = float(rounds.nunique() - studies)
        self.residual_df = float(len(data) - len(self.cells) - self.round_df)
        x = np.column_stack([(cell == c).to_numpy(dtype=float) for c in self.cells]) if self.cells else None
        y = data["y"].to_numpy(dtype=float)
        self.params = np.zeros(0)
        self.cov = np.zeros((0, 0))
        self.scale = math.nan
        self.mixed = self.residual_df > 0 and self.round_df > 0
        if x is None or len(y) <= len(self.cells):
            return
        if self.mixed:
            try:
                with warnings.catch_warnings():
                    # a round variance estimated at its boundary (zero) is a result, not a failure
                    warnings.simplefilter("ignore")
                    fit = sm.MixedLM(y, x, groups=rounds.to_numpy()).fit(reml=True)
                k = len(self.cells)
                self.params, self.cov = np.asarray(fit.fe_params), np.asarray(fit.cov_params())[:k, :k]
                self.scale = float(fit.scale)
            except (np.linalg.LinAlgError, ValueError):  # e.g. no spread at all: the cells alone
                self.mixed = False
        if not self.mixed:
            ols = sm.OLS(y, x).fit()
            self.params, self.cov, self.scale = np.asarray(ols.params), np.asarray(ols.cov_params()), float(ols.scale)
            self.residual_df = float(ols.df_resid)

    def contrast(self, a: Hashable, b: Hashable) -> Contrast:
        """Row ``b`` of B minus row ``a`` of A (log scale): the residual and the round components of
        its variance with their own degrees of freedom, combined (Welch–Satterthwaite)."""
        ca, cb = ("A", a), ("B", b)
        if ca not in self.cells or cb not in self.cells:
            return NO_CONTRAST
        if not self.params.size:  # nothing to estimate a spread from: the point estimate, no test
            return Contrast(self.means[cb] - self.means[ca], math.nan, math.nan)
        ia, ib = self.cells.index(ca), self.cells.index(cb)
        estimate = float(self.params[ib] - self.params[ia])
        variance = float(self.cov[ia, ia] + self.cov[ib, ib] - 2 * self.cov[ia, ib])
        if not self.mixed:
            return Contrast(estimate, math.sqrt(max(variance, 0.0)), self.residual_df)
        residual = self.scale * (1 / self.counts[ca] + 1 / self.counts[cb])
        parts = [(1.0, Contrast(estimate, math.sqrt(residual), self.residual_df))]
        if variance > residual:
            parts.append((1.0, Contrast(0.0, math.sqrt(variance - residual), self.round_df)))
        return combine(parts)


def platform(row: pd.Series) -> str:
    return str(row["platform"]) if "platform" in row and isinstance(row["platform"], str) else \
        str(row["scenario"]).split("/")[0]


def day_part(ra: pd.Series, rb: pd.Series, calibration: Calibration | None) -> tuple[Contrast | None, str]:
    """The day component of a B − A contrast (one day per study) from ``calibration``, or None and
    why no calibration applies to this pair."""
    if calibration is None:
        return None, "no calibration"
    kinds = {ra["hardware"], rb["hardware"]}
    uncovered = sorted(k for k in kinds if not calibration.covers(k))
    if uncovered:
        return None, f"the calibration {calibration.path} is not of {' or '.join(uncovered)}"
    components = calibration.platforms.get(platform(ra))
    if components is None:
        return None, f"the calibration {calibration.path} has no {platform(ra)} scenario"
    return day_contrast([(1.0, components), (-1.0, components)]), ""  # one day per study


def _same(a: Any, b: Any) -> bool:
    if pd.isna(a) and pd.isna(b):
        return True
    return str(a) == str(b)


def refusal(a: pd.Series, b: pd.Series) -> str:
    """Why rows ``a`` and ``b`` do not measure the same workload ("" if they do)."""
    why = [f"{label}: A {a.get(col)}, B {b.get(col)}" for col, label in WORKLOAD.items()
           if col in a and col in b and not _same(a[col], b[col])]
    if bool(a["emulated"]) != bool(b["emulated"]):
        why.append(f"acceleration: A {a.get('accel')}, B {b.get('accel')} (emulated is never set beside hardware)")
    return "; ".join(why)


def _weak(row: pd.Series, count: int, study: str) -> str:
    if count == 0:
        return f"{study}: no launch means recorded"
    if count < MIN_LAUNCHES:
        return f"{study}: {ONE_LAUNCH}"
    # a latency row INVALID for early stopping alone is evidence here (its launches are the unit)
    early_only = measure(row) == P99 and str(row.get("early_stopping_met")).lower() in ("false", "0")
    if str(row.get("loadgen_valid")).lower() in ("false", "0") and not early_only:
        return f"{study}: LoadGen INVALID"
    return ""


@dataclass(frozen=True)
class Pair:
    key: tuple[Any, ...]
    a: Hashable | None
    b: Hashable | None
    contrast: Contrast = NO_CONTRAST
    why: str = ""  # why it is refused, or why it is no evidence
    refused: bool = False
    calibrated: bool = False  # a calibration's day variance is in the contrast
    day_sd: float = math.nan  # that day component's SD (log scale)


def pairs(a: Results, b: Results, calibration: Calibration | None = None) -> list[Pair]:
    """Every scenario of either study, matched by ``MATCH``, with its B − A contrast or why not."""
    index_a = {tuple(r[c] for c in MATCH): i for i, r in a.summary.iterrows()}
    index_b = {tuple(r[c] for c in MATCH): i for i, r in b.summary.iterrows()}
    groups_a, groups_b = group_keys(a.summary), group_keys(b.summary)
    count_a, count_b = launch_count(a.summary), launch_count(b.summary)
    models: dict[tuple[str, str], Between] = {}
    out = []
    for key in sorted(set(index_a) | set(index_b), key=lambda k: tuple(str(v) for v in k)):
        ia, ib = index_a.get(key), index_b.get(key)
        if ia is None or ib is None:
            out.append(Pair(key, ia, ib, why=f"only in {'B' if ia is None else 'A'}", refused=True))
            continue
        ra, rb = a.summary.loc[ia], b.summary.loc[ib]
        why = refusal(ra, rb)
        day, uncalibrated = day_part(ra, rb, calibration)
        kinds = {ra["hardware"], rb["hardware"]}
        if not why and len(kinds) > 1 and NOT_RECORDED not in kinds and day is None:
            why = (f"hardware: A {ra.get('hardware')}, B {rb.get('hardware')} (different kinds of hardware are "
                   f"compared only with a calibration of both: {uncalibrated})")
        if why:
            out.append(Pair(key, ia, ib, why=why, refused=True))
            continue
        weak = "; ".join(w for w in (_weak(ra, int(count_a[ia]), "A"), _weak(rb, int(count_b[ib]), "B")) if w)
        group = (str(groups_a[ia]), str(groups_b[ib]))
        if group not in models:
            rows_a, rows_b = a.summary[groups_a == group[0]], b.summary[groups_b == group[1]]
            models[group] = Between(launches(rows_a, _column(rows_a)), launches(rows_b, _column(rows_b)))
        contrast = models[group].contrast(ia, ib)
        if day is not None and contrast.testable:
            contrast = with_day(contrast, day)
        if not contrast.testable and not weak:
            weak = "no interval (no residual degrees of freedom or zero spread)"
        out.append(Pair(key, ia, ib, contrast, weak, calibrated=day is not None,
                        day_sd=day.se / math.sqrt(2) if day is not None else math.nan))
    return out


def _level(row: pd.Series | None) -> float:
    """The row's mean E2E, or a latency row's mean p99 (s)."""
    if row is None:
        return math.nan
    return float(row["p99_s"]) if measure(row) == P99 else float(row["mean_s"])


def compare(a: Results, b: Results, margin: float = DEFAULT_MARGIN,
            calibration: Calibration | None = None) -> pd.DataFrame:
    """One row per scenario of either study: its verdict, B/A ratio and 90 % interval, p-values."""
    found = pairs(a, b, calibration)
    m = math.log1p(margin)
    shift = math.log1p(UNCALIBRATED_DAY_SHIFT)
    # the family: the comparable scenarios with enough launches in both studies
    tested = [p for p in found if not p.refused and not p.why]
    p_slower = holm([p.contrast.p_above(0.0 if p.calibrated else shift) for p in tested])
    p_faster = holm([p.contrast.p_below(0.0 if p.calibrated else -shift) for p in tested])
    p_alike = holm([max(p.contrast.p_above(-m), p.contrast.p_below(m)) for p in tested])
    adjusted = {p.key: (s, f, e) for p, s, f, e in zip(tested, p_slower, p_faster, p_alike, strict=True)}
    count_a, count_b = launch_count(a.summary), launch_count(b.summary)
    others_a, others_b = others_cores(a.records), others_cores(b.records)
    rows = []
    for p in found:
        ra = a.summary.loc[p.a] if p.a is not None else None
        rb = b.summary.loc[p.b] if p.b is not None else None
        s, f, e = adjusted.get(p.key, (math.nan, math.nan, math.nan))
        verdict, why = (REFUSED if p.refused else INCONCLUSIVE), p.why
        if p.key in adjusted:
            ratio = p.contrast.ratio
            if s < ALPHA and ratio > 1 + margin:
                verdict = SLOWER
            elif f < ALPHA and ratio < 1 / (1 + margin):
                verdict = FASTER
            elif e < ALPHA:
                verdict = ALIKE
            elif not p.calibrated and abs(p.contrast.log) > m and min(p.contrast.p_above(0), p.contrast.p_below(0)) \
                    < ALPHA:
                why = (f"beyond the margin, but not beyond the ±{UNCALIBRATED_DAY_SHIFT:.0%} a host can shift "
                       "between two studies: no calibration of this hardware (dlvirt calibrate)")
            elif s < ALPHA or f < ALPHA:
                why = f"a significant difference, but smaller than the margin ±{margin:.0%} and not shown within it"
            else:
                why = f"undecided; the smallest effect it could detect: ±{p.contrast.half_width():.1%}"
        load_a, load_b = (others.get(p.key[:3]) for others in (others_a, others_b))
        loads = [load for load in (load_a, load_b) if load is not None]
        if verdict in (SLOWER, FASTER) and loads and max(loads) > LOADED_CORES:
            verdict, why = INCONCLUSIVE, (
                f"{verdict} beyond the margin, but other processes kept {_cores(load_a)} cores busy during "
                f"A's repetitions and {_cores(load_b)} during B's: the machine's load may explain it")
        low, high = p.contrast.bounds()
        rows.append({formats.KEY: FORMAT, **dict(zip(MATCH, p.key, strict=True)), "verdict": verdict,
                     "ratio": p.contrast.ratio, "low90": low, "high90": high, "df": p.contrast.df,
                     "p_slower": s, "p_faster": f, "p_alike": e,
                     "launches_a": int(count_a[p.a]) if p.a is not None else 0,
                     "launches_b": int(count_b[p.b]) if p.b is not None else 0,
                     "mean_a_s": _level(ra), "mean_b_s": _level(rb), "why": why,
                     "measure": measure(ra if ra is not None else rb),
                     "others_cores_a": load_a, "others_cores_b": load_b, "day_sd": p.day_sd,
                     "calibration": calibration.path if p.calibrated and calibration is not None else ""})
    return pd.DataFrame(rows, columns=COLUMNS)


def _cores(load: float | None) -> str:
    return "an unrecorded number of" if load is None else f"{load:.2f}"


def others_per_repetition(records: list[JobResult]) -> Iterator[tuple[tuple[str, str, str], float]]:
    """(run tool, app, scenario) and the cores other processes kept busy during each counted
    repetition (its ``others_cpu_s`` / E2E), where the telemetry has it."""
    for record in records:
        for run in record.runs:
            others = (run.telemetry or {}).get("others_cpu_s")
            if others is not None and run.e2e_s > 0:
                yield (record.tool, record.app, record.scenario_name), others / run.e2e_s


def others_cores(records: list[JobResult]) -> dict[tuple[str, str, str], float]:
    """Per (run tool, app, scenario): the mean cores other processes kept busy during its repetitions."""
    seen: dict[tuple[str, str, str], list[float]] = {}
    for key, cores in others_per_repetition(records):
        seen.setdefault(key, []).append(cores)
    return {key: sum(values) / len(values) for key, values in seen.items()}


def _engines(host: dict[str, Any]) -> dict[str, Any]:
    return {f"engine {name}": (facts or {}).get("version") for name, facts in (host.get("engines") or {}).items()}


def _versions(records: list[JobResult]) -> dict[str, str]:
    """The package versions the jobs recorded (several: all of them)."""
    seen: dict[str, set[str]] = {}
    for record in records:
        for name, version in (record.versions or {}).items():
            seen.setdefault(name, set()).add(str(version))
    return {f"package {name} (run records)": ", ".join(sorted(v)) for name, v in seen.items()}


def _load(records: list[JobResult]) -> dict[str, str | None]:
    """How busy the machine was around the repetitions, from their telemetry: the cores other
    processes used meanwhile (others_cpu_s / E2E) and the steal time; a shared or loaded machine
    explains a ratio that no version or setting does."""
    others = [cores for _, cores in others_per_repetition(records)]
    steal = [r.telemetry["steal_pct"] for record in records for r in record.runs
             if r.telemetry and r.telemetry.get("steal_pct") is not None]
    return {"cores other processes used during the repetitions (mean)": f"{sum(others) / len(others):.2f}"
            if others else None,
            "steal time during the repetitions (mean %)": f"{sum(steal) / len(steal):.1f}" if steal else None}


def facts(results: Results) -> dict[str, Any]:
    """What about a study's machine and code could change its times."""
    h = results.host
    caps = h.get("capabilities") or {}
    frame = results.summary
    return {
        "host": h.get("hostname"),
        "CPU model": h.get("cpu_model"),
        "usable cores": caps.get("cores"),
        "sockets": h.get("sockets"),
        "memory GiB": round(h["memory_bytes"] / 2**30, 1) if h.get("memory_bytes") else None,
        "OS": h.get("os"),
        "kernel": h.get("kernel"),
        "cgroup version": caps.get("cgroup_version"),
        "python": h.get("python"),
        "hardware (summary)": ", ".join(sorted(set(frame["hardware"].astype(str)))) if "hardware" in frame else None,
        "code version": ", ".join(sorted(set(frame["code_version"].astype(str)))) if "code_version" in frame else None,
        "threads policy": ", ".join(sorted(set(frame["threads_policy"].astype(str))))
        if "threads_policy" in frame else None,
        # a deliberately slowed platform (slowdown_cpu_quota) is the first thing to explain a slow-down
        "deliberately slowed rows": ", ".join(f"{r.tool} {r.app} {r.scenario} ({r.slowed})" for r in
                                              frame[frame["slowed"].notna()].itertuples()) or "none"
        if "slowed" in frame else "none",
        **_engines(h),
        **{f"package {k}": v for k, v in (h.get("packages") or {}).items()},
        **_versions(results.records),
        **_load(results.records),
    }


def differences(a: Results, b: Results) -> list[tuple[str, str, str]]:
    """(what, A's, B's) for each fact that differs between the two studies."""
    fa, fb = facts(a), facts(b)
    out = []
    for name in dict.fromkeys([*fa, *fb]):
        va, vb = fa.get(name), fb.get(name)
        if str(va) != str(vb):
            out.append((name, "not recorded" if va is None else str(va), "not recorded" if vb is None else str(vb)))
    return out


def figure_svg(table: pd.DataFrame, margin: float) -> str:
    """The B/A ratios with their 90 % intervals and the margin band, as inline SVG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FormatStrFormatter

    shown = table[table["ratio"].notna()].reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(8, 0.45 * max(len(shown), 2) + 1.2))
    colours = {SLOWER: "#c0392b", FASTER: "#2471a3", ALIKE: "#27ae60", INCONCLUSIVE: "#b9770e"}
    ax.axvspan(1 / (1 + margin), 1 + margin, color="#dddddd", label=f"alike within ±{margin:.0%}")
    ax.axvline(1.0, color="#555555", linewidth=0.8)
    for y, row in shown.iterrows():
        colour = colours.get(row["verdict"], "#777777")
        if math.isfinite(row["low90"]):
            ax.plot([row["low90"], row["high90"]], [y, y], color=colour, linewidth=2)
        ax.plot([row["ratio"]], [y], "o", color=colour)
    ax.set_yticks(range(len(shown)), [f"{r.tool} {str(r.app).upper()} {r.scenario}" for r in shown.itertuples()])
    ax.set_ylim(len(shown) - 0.5, -0.5)  # first scenario on top, none at the frame's edge
    ax.set_xscale("log")
    plain = FormatStrFormatter("%.3g")
    ax.xaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(plain)
    ax.tick_params(axis="x", which="minor", labelsize=7)
    ax.set_xlabel("B/A time ratio (log scale; > 1: B slower), 90 % interval")
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg")
    plt.close(fig)
    svg = buffer.getvalue()
    return svg[svg.index("<svg"):]


def calibration_line(table: pd.DataFrame, calibration: Calibration | None) -> str:
    """Which rows a calibration's day variance sized, in plain words."""
    calibrated = int(table["calibration"].astype(bool).sum()) if len(table) else 0
    if calibration is None or not calibrated:
        why = "no calibration given" if calibration is None else \
            f"the calibration {calibration.path} is not of this hardware ({', '.join(calibration.hardware)})"
        return (f"Not calibrated ({why}): the host's shift between the two studies is not measured, so "
                f"slower / faster need B/A significantly beyond ±{UNCALIBRATED_DAY_SHIFT:.0%} "
                "(dlvirt calibrate measures it).")
    return (f"Calibrated: {calibrated} of {len(table)} rows include the day variance that {calibration.path} "
            f"measured on {', '.join(calibration.hardware)} ({len(calibration.blocks)} blocks).")


def render(a: Results, b: Results, table: pd.DataFrame, margin: float, calibration: Calibration | None) -> str:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE.parent), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    shown = table.assign(ratio=table["ratio"].map(lambda v: "" if pd.isna(v) else f"{v:.3g}"),
                         interval=[("" if pd.isna(lo) else f"{lo:.3g} – {hi:.3g}")
                                   for lo, hi in zip(table["low90"], table["high90"], strict=True)])
    return env.get_template(TEMPLATE.name).render(
        a=a.path, b=b.path, margin=f"{margin:.0%}", alpha=ALPHA, day_shift=f"{UNCALIBRATED_DAY_SHIFT:.0%}",
        calibration=calibration_line(table, calibration), format=FORMAT, loaded_cores=LOADED_CORES,
        generated=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), version=metadata.version("dlvirt"),
        figure=markup(figure_svg(table, margin)) if table["ratio"].notna().any() else "",
        rows=shown.to_dict("records"), differences=differences(a, b),
        counts=table["verdict"].value_counts().to_dict())


def markup(svg: str) -> Any:
    import markupsafe

    return markupsafe.Markup(svg)


def run(folder_a: Path, folder_b: Path, out: Path, margin: float = DEFAULT_MARGIN,
        calibration: Calibration | None = None) -> pd.DataFrame:
    """Compare, write ``compare.csv`` and ``compare.html`` under ``out``; CompareError when nothing
    could be compared (the outputs are written first, with every refusal)."""
    if not margin > 0:
        raise CompareError(f"--margin {margin}: a positive relative margin is needed (0.05 is 5 %)")
    a, b = load(folder_a), load(folder_b)
    table = compare(a, b, margin, calibration)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "compare.csv", table.to_csv(index=False))
    write_text_atomic(out / "compare.html", render(a, b, table, margin, calibration))
    if (table["verdict"] == REFUSED).all():
        reasons = "; ".join(f"{r.app} {r.scenario}: {r.why}" for r in table.head(6).itertuples())
        raise CompareError(f"{folder_a} and {folder_b}: no scenario is comparable ({reasons})")
    return table
