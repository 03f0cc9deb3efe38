"""Machine-checked verdicts on the paper's findings, decided by stated tests on the summary.

Rules every claim follows:
- Evidence is the MLPerf (E2E) rows of the main host; only the CHR = 1 claim adds edge hosts.
- A row is evidence only if it has at least ``MIN_REPETITIONS`` counted repetitions (in every
  replicate), is LoadGen-valid, is not emulated (TCG: a guest 10× slower than the host says nothing
  about the hardware-virtualised platforms the paper measured) and ran the app's reference model
  size (``reference_model``: BERT-tiny never stands in for BERT-large). MVM rows are split by VMM.
- Every comparison is a test on the relative difference of two means (Welch, delta method; see
  ``dlvirt.analysis.stats``) at α = 0.05 per one-sided test: "faster"/"slower" by a one-sided test,
  "alike" and "stops paying" by equivalence tests (TOST) with the margin ``claims.equivalence_margin``.
  Each case is decided yes, no, or *undecided* (its interval straddles the margin).
- Verdicts: ``holds`` / ``does not hold`` / ``inconclusive`` (the data cannot decide: intervals too
  wide, or only rows too weak to be evidence) / ``not testable here`` (with why: what this host or
  config did not measure). A claim over "every" case fails on one "no" and is inconclusive on one
  undecided case; a claim over "most" or "half" of the cases is decided only if the undecided cases
  could not change it. A claim made of parts fails if one part fails and holds only if all held.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from dlvirt.analysis.catalog import FIGURES
from dlvirt.analysis.rows import emulated, verified_gpu_rows, with_site
from dlvirt.analysis.stats import Interval, Mean, above, alike, estimate, lower, ratio, relative_difference
from dlvirt.core.atomic import read_json, write_text_atomic
from dlvirt.core.scenario import LOCAL_SITE
from dlvirt.plan.leftout import reasons

HOLDS, FAILS, INCONCLUSIVE, UNTESTABLE = "holds", "does not hold", "inconclusive", "not testable here"
VIRTUALISED = ("CN", "VM", "VMCN", "MVM")
GPU_NLP_SPEEDUP = 3.0     # "more than 3× speedup"
MIN_REPETITIONS = 3       # fewer counted repetitions per replicate: not evidence
DEFAULT_MARGIN = 0.05     # claims.equivalence_margin
COLUMNS = ["id", "claim", "source", "verdict", "evidence", "test", "figures"]

Outcome = bool | None  # a case: yes, no, or undecided


@dataclass(frozen=True)
class Value:
    """A mean with its standard error, and what it is (for the evidence text)."""

    label: str
    m: Mean
    n: int  # units behind the interval (replicates, else repetitions)
    unit: str = " s"

    @property
    def has_ci(self) -> bool:
        return not math.isnan(self.m.se)

    def __str__(self) -> str:
        ci = f" ± {self.m.ci95:.3g}" if self.has_ci else ""
        return f"{self.label} {self.m.mean:.3g}{ci}{self.unit} (n {self.n})"


def ratio_value(a: Value, b: Value, label: str) -> Value:
    return Value(label, ratio(a.m, b.m), min(a.n, b.n), "×")


def diff(a: Value, b: Value) -> Interval:
    return relative_difference(a.m, b.m)


def word(outcome: Outcome, yes: str, no: str) -> str:
    return {True: yes, False: no, None: "undecided"}[outcome]


@dataclass(frozen=True)
class Verdict:
    verdict: str
    evidence: str


def untestable(why: Iterable[str]) -> Verdict:
    return Verdict(UNTESTABLE, "; ".join(dict.fromkeys(why)))


def every(outcomes: list[Outcome]) -> str:
    """Verdict of "in every case": one no fails it, one undecided case leaves it open."""
    if any(o is False for o in outcomes):
        return FAILS
    return INCONCLUSIVE if any(o is None for o in outcomes) else HOLDS


def share(outcomes: list[Outcome], enough: Callable[[int, int], bool]) -> str:
    """Verdict of "in enough cases": decided only if the undecided cases cannot change it."""
    yes = sum(o is True for o in outcomes)
    undecided = sum(o is None for o in outcomes)
    if enough(yes, len(outcomes)):
        return HOLDS
    return INCONCLUSIVE if enough(yes + undecided, len(outcomes)) else FAILS


def most(k: int, n: int) -> bool:
    return k > n / 2


def half(k: int, n: int) -> bool:
    return k >= n / 2


def tally(outcomes: list[Outcome]) -> str:
    yes, no = sum(o is True for o in outcomes), sum(o is False for o in outcomes)
    return f"yes in {yes}, no in {no}, undecided in {len(outcomes) - yes - no} of {len(outcomes)}"


def conjunction(verdicts: list[str]) -> str:
    """A claim made of parts: any part failing decides; then any untestable, then any inconclusive."""
    for verdict in (FAILS, UNTESTABLE, INCONCLUSIVE):
        if verdict in verdicts:
            return verdict
    return HOLDS


def _weak_reasons(rows: pd.DataFrame) -> pd.Series:
    """Why each row is not evidence beyond being emulated ("" = it is evidence)."""
    why = pd.Series("", index=rows.index, dtype=object)
    reps = rows["min_reps"] if "min_reps" in rows else rows.get("reps", pd.Series(math.nan, index=rows.index))
    few = pd.to_numeric(reps, errors="coerce").fillna(0) < MIN_REPETITIONS
    why[few] = f"fewer than {MIN_REPETITIONS} repetitions"
    if "loadgen_valid" in rows:
        invalid = rows["loadgen_valid"].astype(str).str.lower().isin(["false", "0"])
        why[invalid & (why == "")] = "LoadGen INVALID"
    if "reference_model" in rows:
        small = rows["reference_model"].astype(str).str.lower().isin(["false", "0"])
        models = rows["model"].astype(str) if "model" in rows else pd.Series("", index=rows.index)
        why[small & (why == "")] = "model " + models[small] + " is not the reference size"
    return why


class Study:
    """The rows claims are decided on, the rows set aside, and the reasons behind missing rows."""

    def __init__(self, summary: pd.DataFrame, host_cores: int | None, gaps: list[Any],
                 margin: float = DEFAULT_MARGIN, weak_as_evidence: bool = False) -> None:
        if summary.empty:
            summary = pd.DataFrame(columns=["tool", "app", "platform", "cores", "pinning", "processor",
                                            "mean_s", "ci95_s", "reps", "accel"])
        frame = verified_gpu_rows(with_site(summary))
        frame["emulated"] = emulated(frame)
        if "vmm" in frame:  # MVM rows are told apart by their VMM (QEMU's microvm vs Firecracker)
            vmm = frame["vmm"].where(frame["vmm"].notna() & (frame["platform"] == "MVM"), "")
            frame["platform"] = frame["platform"].where(vmm == "", frame["platform"] + "(" + vmm.astype(str) + ")")
        mlperf = frame[frame["tool"] == "mlperf"]
        self.emulated_platforms = sorted(set(mlperf.loc[mlperf["emulated"], "platform"]))
        usable = mlperf[~mlperf["emulated"]]
        why = _weak_reasons(usable)
        self.weak_reasons = sorted(set(why[why != ""]))
        self.usable = usable if weak_as_evidence else usable[why == ""]
        self.e2e = self.usable[self.usable["site"] == LOCAL_SITE]
        self.host_cores = host_cores
        self.gaps = gaps
        self.margin = margin

    def value(self, row: pd.Series, label: str | None = None) -> Value:
        n_column = "ci_n" if "ci_n" in row and pd.notna(row["ci_n"]) else "reps"
        n = int(row[n_column]) if n_column in row and pd.notna(row[n_column]) else 1
        label = label or f"{row['app'].upper()} {row['scenario']}"
        return Value(label, Mean.from_ci95(float(row["mean_s"]), float(row["ci95_s"]), n), n)

    def mvm_platforms(self) -> list[str]:
        return sorted(p for p in set(self.e2e["platform"]) if p.startswith("MVM"))

    def why_missing(self, **where: Any) -> list[str]:
        found = reasons(self.gaps, tool="mlperf", detail=True, **where)
        if self.emulated_platforms:
            found.append(f"{', '.join(self.emulated_platforms)} rows are emulated (TCG) and not used as evidence")
        return found


def _pairs(rows: pd.DataFrame, column: str, a: str, b: str, on: list[str]) -> pd.DataFrame:
    """Rows with ``column`` == a joined to rows with ``column`` == b on ``on`` (suffixes _a, _b)."""
    left = rows[rows[column] == a]
    right = rows[rows[column] == b]
    return left.merge(right, on=on, suffixes=("_a", "_b"))


def _side(study: Study, pair: pd.Series, suffix: str, label: str) -> Value:
    row = pd.Series({k[: -len(suffix)]: v for k, v in pair.items() if str(k).endswith(suffix)})
    row["app"], row["scenario"] = pair.get("app", ""), ""
    return study.value(row, label)


def _pair_values(study: Study, pair: pd.Series, label_a: str, label_b: str) -> tuple[Value, Value]:
    return _side(study, pair, "_a", label_a), _side(study, pair, "_b", label_b)


def _skipped(n: int) -> str:
    return f"; {n} comparison(s) skipped: a row without CI (one unit)" if n else ""


# -- the claims ---------------------------------------------------------------------------------------

def pinning_lowers_e2e(study: Study) -> Verdict:
    rows = study.e2e
    if study.host_cores is not None:
        rows = rows[rows["cores"] < study.host_cores]  # pinned to every host core restricts nothing
    parts, verdicts = [], []
    for platform in [p for p in ("BM", "CN", "VM", "VMCN") if p in set(rows["platform"])]:
        pairs = _pairs(rows[rows["platform"] == platform], "pinning", "PIN", "VNL", ["app", "cores", "processor"])
        outcomes: list[Outcome] = []
        skipped, example = 0, ""
        for _, pair in pairs.iterrows():
            pin, vnl = _pair_values(study, pair, "PIN", "VNL")
            if not (pin.has_ci and vnl.has_ci):
                skipped += 1
                continue
            d = diff(pin, vnl)
            outcomes.append(lower(d, study.margin))
            example = example or (f"e.g. {pair['app'].upper()} {pair['cores']} cores {pair['processor']}: "
                                  f"{pin} vs {vnl}, {d}")
        if not outcomes:
            continue
        verdicts.append(share(outcomes, most))
        parts.append(f"{platform}: PIN faster {tally(outcomes)} pairs ({example}){_skipped(skipped)}")
    if not verdicts:
        cores = f" below the host's {study.host_cores} cores" if study.host_cores else ""
        return untestable([f"no platform measured both VNL and PIN{cores} with a CI", *study.why_missing()])
    return Verdict(conjunction(verdicts), "; ".join(parts))


def cn_overhead_grows_as_chr_falls(study: Study) -> Verdict:
    if study.host_cores is None:
        return untestable(["the host's core count is unknown (no host.json)"])
    vanilla = study.e2e[(study.e2e["pinning"] == "VNL") & study.e2e["platform"].isin(["CN", "BM"])]
    pairs = _pairs(vanilla, "platform", "CN", "BM", ["app", "cores", "processor"])
    parts, outcomes = [], []
    for (app, processor), group in pairs.groupby(["app", "processor"]):
        group = group.dropna(subset=["ci95_s_a", "ci95_s_b"]).sort_values("cores")
        if group["cores"].nunique() < 2:
            continue
        low_chr, high_chr = (ratio_value(*_pair_values(study, row, "CN", "BM"),
                                         f"CN/BM {row['cores'] / study.host_cores:.2f} CHR")
                             for _, row in group.iloc[[0, -1]].iterrows())
        d = diff(high_chr, low_chr)
        grows = lower(d, study.margin)
        outcomes.append(grows)
        parts.append(f"{app.upper()}/{processor}: overhead ratio {low_chr} at the lowest CHR vs {high_chr} at the "
                     f"highest, highest/lowest {d}: {word(grows, 'grows', 'does not grow')} as CHR falls")
    if not outcomes:
        return untestable(["no vanilla CN and BM rows at two or more core counts with a CI",
                           *study.why_missing(platforms=("CN",))])
    return Verdict(every(outcomes), "; ".join(parts))


def gains_more_than(d: Interval, margin: float) -> Outcome:
    """Is the step worth more than ``margin`` (``d`` = after / before − 1)? No = a TOST-style bound
    shows any gain is below the margin (or it is slower)."""
    if math.isnan(d.low):
        return None
    if d.high < -margin:
        return True
    if d.low > -margin:
        return False
    return None


def scale_up_stops_paying(study: Study) -> Verdict:
    outcomes: list[Outcome] = []
    skipped = 0
    best: dict[int, int] = {}
    examples: list[str] = []
    for keys, line in study.e2e.groupby(["app", "platform", "pinning", "processor"]):
        line = line.sort_values("cores")
        if line["cores"].nunique() < 2:
            continue
        best_level = int(line.loc[line["mean_s"].idxmin(), "cores"])
        best[best_level] = best.get(best_level, 0) + 1
        last, prev = (study.value(r, f"{int(r['cores'])} cores") for _, r in line.iloc[[-1, -2]].iterrows())
        if not (last.has_ci and prev.has_ci):
            skipped += 1
            continue
        d = diff(last, prev)
        pays = gains_more_than(d, study.margin)
        stops = None if pays is None else not pays
        outcomes.append(stops)
        if len(examples) < 3:
            app, platform, pinning, processor = keys
            examples.append(f"{app.upper()} {platform}/{pinning}/{processor}: {last} vs {prev}, {d} "
                            f"({word(stops, 'stops paying', 'still pays')})")
    if not outcomes:
        return untestable(["no platform line measured at two or more core counts with a CI",
                           *study.why_missing()])
    levels = ", ".join(f"{level} cores in {n}" for level, n in sorted(best.items()))
    return Verdict(share(outcomes, half),
                   f"the last scale-up step gains less than {study.margin:.0%}: {tally(outcomes)} lines; "
                   f"fastest level: {levels} lines; {'; '.join(examples)}{_skipped(skipped)}")


def gpu_speeds_nlp_not_ic_rs(study: Study) -> Verdict:
    pairs = _pairs(study.e2e, "processor", "CPU", "GPU", ["app", "platform", "cores", "pinning"])
    parts, verdicts, missing = [], [], []
    for app in ("nlp", "ic", "rs"):
        speedups = [ratio_value(*_pair_values(study, row, "CPU", "GPU"),
                                f"{row['platform']}/{row['cores']}/{row['pinning']}")
                    for _, row in pairs[pairs["app"] == app].iterrows()]
        speedups = [s for s in speedups if s.has_ci]
        if not speedups:
            missing.append(f"{app.upper()}: no CPU and GPU pair with a CI"
                           + "".join(f" ({w})" for w in study.why_missing(app=app, processor="GPU")[:1]))
            continue
        faster = [above(s.m, GPU_NLP_SPEEDUP) for s in speedups]
        shown = "; ".join(f"{s}" for s in speedups[:3])
        if app == "nlp":
            verdicts.append(every(faster))
            parts.append(f"NLP: GPU speed-up above {GPU_NLP_SPEEDUP:g}× {tally(faster)} pairs ({shown})")
        else:
            below: list[Outcome] = [None if f is None else not f for f in faster]
            verdicts.append(every(below))
            parts.append(f"{app.upper()}: GPU speed-up below {GPU_NLP_SPEEDUP:g}× {tally(below)} pairs ({shown})")
    return _parts(verdicts, parts, missing)


def _in_every_pair(found: list[tuple[Outcome, str]], claim: str, absent: str, verdicts: list[str], parts: list[str],
                   missing: list[str]) -> None:
    """One part of a claim that must hold in every pair found: its verdict and evidence, or why untested."""
    if not found:
        missing.append(absent)
        return
    outcomes = [o for o, _ in found]
    verdicts.append(every(outcomes))
    parts.append(f"{claim}: {tally(outcomes)} pairs ({'; '.join(t for _, t in found)})")


def _parts(verdicts: list[str], parts: list[str], missing: list[str]) -> Verdict:
    evidence = "; ".join(parts + [f"untested: {m}" for m in missing])
    if not verdicts:
        return Verdict(UNTESTABLE, evidence)
    return Verdict(conjunction(verdicts + [UNTESTABLE] * len(missing)), evidence)


def mvm_like_vm_but_nlp_and_boots_faster(study: Study) -> Verdict:
    rows = study.e2e[(study.e2e["pinning"] == "VNL") & (study.e2e["processor"] == "CPU")]
    no_pairs = study.why_missing(platforms=("MVM", "VM"), processor="CPU")
    parts: list[str] = []
    verdicts: list[str] = []
    missing: list[str] = []
    boots = _boot_times(study, study.e2e)
    for mvm_platform in study.mvm_platforms() or ["MVM"]:
        pairs = _pairs(rows, "platform", mvm_platform, "VM", ["app", "cores"])
        like, nlp = [], []
        for _, pair in pairs.iterrows():
            mvm, vm = _pair_values(study, pair, f"{mvm_platform}/{pair['cores']}", f"VM/{pair['cores']}")
            if not (mvm.has_ci and vm.has_ci):
                continue
            d = diff(mvm, vm)
            if pair["app"] == "nlp":
                slower = lower(diff(vm, mvm), study.margin)
                nlp.append((slower, f"{mvm} vs {vm}, {d}"))
            else:
                same = alike(d, study.margin)
                like.append((same, f"{pair['app'].upper()} {pair['cores']} cores {d}: {word(same, 'alike', 'differ')}"))
        why = "".join(f" ({w})" for w in no_pairs[:1])
        _in_every_pair(like, f"{mvm_platform} like VM (TOST, ±{study.margin:.0%}) except NLP",
                       f"no {mvm_platform} and VM pair (vanilla, CPU, same cores) for IC, SR or RS{why}",
                       verdicts, parts, missing)
        _in_every_pair(nlp, f"{mvm_platform} slower than VM for I/O-heavy NLP (one-sided Welch)",
                       f"no NLP {mvm_platform} and VM pair{why}", verdicts, parts, missing)
        if mvm_platform in boots and "VM" in boots:
            d = diff(boots[mvm_platform], boots["VM"])
            faster = lower(d, study.margin)
            verdicts.append(every([faster]))
            parts.append(f"{mvm_platform} boots faster (one-sided Welch): {word(faster, 'yes', 'no')} "
                         f"({boots[mvm_platform]} vs {boots['VM']}, {d})")
        else:
            missing.append(f"boot times of {mvm_platform} and VM (column boot_s, two or more rows each)")
    return _parts(verdicts, parts, missing)


def _boot_times(study: Study, rows: pd.DataFrame) -> dict[str, Value]:
    if "boot_s" not in rows:
        return {}
    out = {}
    for platform, group in rows.dropna(subset=["boot_s"]).groupby("platform"):
        values = [float(v) for v in group["boot_s"]]
        if len(values) >= 2:
            est = estimate(values)
            out[str(platform)] = Value(f"{platform} boot", Mean.from_ci95(est.mean, est.ci95, est.n), est.n)
    return out


def overhead_grows_without_idle_cores(study: Study) -> Verdict:
    cores = study.host_cores
    if cores is None:
        return untestable(["the host's core count is unknown (no host.json)"])
    rows = study.e2e[(study.e2e["app"] == "ic") & (study.e2e["processor"] == "CPU")]
    below = sorted(c for c in rows["cores"].unique() if c < cores)
    if not below:
        return untestable([f"no IC runs below the host's {cores} cores (instances with idle host cores)",
                           *study.why_missing(app="ic", processor="CPU")])
    idle_level = below[-1]
    parts, outcomes = [], []
    for platform in ("CN", "VM", "VMCN"):
        for pinning in ("VNL", "PIN"):
            over = {}
            for level in (idle_level, cores):
                at = rows[(rows["cores"] == level) & (rows["pinning"] == pinning)].set_index("platform")
                if platform in at.index and "BM" in at.index:
                    over[level] = ratio_value(study.value(at.loc[platform]), study.value(at.loc["BM"]),
                                              f"{platform}/BM at {level} cores")
            if len(over) < 2 or not all(v.has_ci for v in over.values()):
                continue
            d = diff(over[idle_level], over[cores])
            grows = lower(d, study.margin)
            outcomes.append(grows)
            parts.append(f"{platform} {pinning}: {over[cores]} vs {over[idle_level]}, idle/full {d} "
                         f"({word(grows, 'grows', 'does not grow')})")
    if not outcomes:
        return untestable([f"no CN, VM or VMCN IC rows with BM at both {idle_level} and {cores} cores",
                           *study.why_missing(app="ic", processor="CPU", platforms=("CN", "VM", "VMCN"))])
    return Verdict(share(outcomes, half),
                   f"overhead over BM grows without idle host cores: {tally(outcomes)} cases: " + "; ".join(parts))


def cn_cheapest_at_chr1(study: Study) -> Verdict:
    groups: list[tuple[str, pd.DataFrame]] = []
    vanilla = study.usable[study.usable["pinning"] == "VNL"]
    for site, rows in vanilla.groupby("site"):
        if site == LOCAL_SITE:
            if study.host_cores is None:
                continue
            at = rows[rows["cores"] == study.host_cores]
            where = f"main host, {study.host_cores} of {study.host_cores} cores"
        else:  # an edge device runs at its full size: its largest level measured is taken as CHR = 1
            at = rows[rows["cores"] == rows["cores"].max()]
            where = f"edge {site}, {int(rows['cores'].max())} cores (its largest level)"
        for (app, processor), group in at.groupby(["app", "processor"]):
            groups.append((f"{where}, {app.upper()}/{processor}", group))
    parts, outcomes = [], []
    for where, group in groups:
        virt = group[group["platform"].str.split("(").str[0].isin(VIRTUALISED)].set_index("platform")
        if "CN" not in virt.index or len(virt) < 2:
            continue
        cn = study.value(virt.loc["CN"], "CN")
        others = [study.value(r, str(p)) for p, r in virt.iterrows() if p != "CN"]
        if not cn.has_ci or not all(o.has_ci for o in others):
            continue
        cheaper = [lower(diff(cn, o), study.margin) for o in others]
        outcomes += cheaper
        parts.append(f"{where}: {cn} vs {', '.join(f'{o} {diff(cn, o)}' for o in others)} "
                     f"(CN cheaper: {tally(cheaper)})")
    if not outcomes:
        return untestable(["no CN and another virtualised platform, vanilla, at CHR = 1 with a CI",
                           *study.why_missing(platforms=VIRTUALISED)])
    return Verdict(every(outcomes), "; ".join(parts))


@dataclass(frozen=True)
class Claim:
    id: str
    text: str
    source: str
    test: str  # {margin} is filled in
    check: Callable[[Study], Verdict]


CLAIMS: tuple[Claim, ...] = (
    Claim("pinning", "Pinning lowers E2E time on each platform", "§V-B; Figs. 4a, 6, 7a, 8a",
          "per platform, PIN vs VNL at equal app, cores (below the host's) and processor: PIN faster by a "
          "one-sided Welch test (90 % CI of PIN/VNL − 1 below 0), no if it is not faster by more than {margin}; "
          "holds if yes in most pairs on every platform measured", pinning_lowers_e2e),
    Claim("cn_overhead_chr", "Vanilla CN overhead over BM grows as the container-to-host core ratio (CHR) falls",
          "§V-A", "per app and processor, CN/BM (vanilla) at the lowest vs the highest CHR measured: larger "
          "at the lowest by a one-sided Welch test on the ratio of ratios; holds if so for every app",
          cn_overhead_grows_as_chr_falls),
    Claim("scale_up_limit", "Scale-up stops paying beyond a level", "§V-D; Figs. 4b, 6, 7a",
          "per app × platform × CPU mode × processor line: the last step's gain is below {margin} (TOST "
          "bound: 90 % CI of last/previous − 1 above −{margin}); still pays if the CI lies below −{margin}; "
          "holds if it stops paying in at least half of the lines", scale_up_stops_paying),
    Claim("gpu_speedup", "A GPU speeds NLP up by more than 3×, but IC and RS much less", "§IV-C, §IV-D; Figs. 7b, 8b",
          "CPU/GPU time ratio per platform, cores and CPU mode, 90 % CI: above 3× in every NLP pair, "
          "below 3× in every IC and RS pair", gpu_speeds_nlp_not_ic_rs),
    Claim("mvm_like_vm", "MVM performs like VM except for I/O-heavy NLP, and MVM boots faster", "§V-G; Fig. 10",
          "per VMM, vanilla CPU, same cores: MVM equivalent to VM within ±{margin} (TOST, 90 % CI of MVM/VM − 1) "
          "for IC, SR and RS; slower for NLP and boot time (boot_s) lower by one-sided Welch tests",
          mvm_like_vm_but_nlp_and_boots_faster),
    Claim("no_idle_cores", "Without idle host cores the virtualisation overhead grows", "§V-C; Fig. 9",
          "IC on CPU: CN, VM, VMCN over BM (same CPU mode) at instance = host cores vs at the largest smaller "
          "level: larger by a one-sided Welch test; holds if so in at least half of the cases",
          overhead_grows_without_idle_cores),
    Claim("cn_cheapest_chr1", "CN is the cheapest virtualised platform at CHR = 1", "§V-H; Fig. 11",
          "vanilla, at instance = host cores (main host) or an edge host's largest level: CN faster than every "
          "other virtualised platform by one-sided Welch tests; holds if so in every app measured",
          cn_cheapest_at_chr1),
)


def decide(claim: Claim, study: Study, lenient: Study) -> Verdict:
    """The claim on the evidence rows; if those cannot test it but the rows set aside could, the
    data exist and are too weak: inconclusive, saying why."""
    verdict = claim.check(study)
    if verdict.verdict != UNTESTABLE or not study.weak_reasons:
        return verdict
    weak = claim.check(lenient)
    if weak.verdict == UNTESTABLE:
        return verdict
    return Verdict(INCONCLUSIVE, f"only rows that are not evidence ({', '.join(study.weak_reasons)}) "
                                 f"could test it: {weak.evidence}")


def evaluate(summary: pd.DataFrame, host_cores: int | None, gaps: list[Any],
             margin: float = DEFAULT_MARGIN) -> pd.DataFrame:
    study = Study(summary, host_cores, gaps, margin)
    lenient = Study(summary, host_cores, gaps, margin, weak_as_evidence=True)
    rows = []
    for claim in CLAIMS:
        verdict = decide(claim, study, lenient)
        figures = " ".join(f.id for f in FIGURES if claim.id in f.claims)
        rows.append({"id": claim.id, "claim": claim.text, "source": claim.source, "verdict": verdict.verdict,
                     "evidence": verdict.evidence, "test": claim.test.format(margin=f"{margin:.0%}"),
                     "figures": figures})
    return pd.DataFrame(rows, columns=COLUMNS)


def write_claims(summary: Path, host: Path, plan: Path, output: Path, margin: float | None = None) -> pd.DataFrame:
    frame = pd.read_csv(summary) if Path(summary).stat().st_size else pd.DataFrame()
    cores = int(read_json(host)["capabilities"]["cores"])
    table = evaluate(frame, cores, read_json(plan)["left_out"], DEFAULT_MARGIN if margin is None else margin)
    write_text_atomic(output, table.to_csv(index=False))
    return table
