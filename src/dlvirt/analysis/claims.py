"""Machine-checked verdicts on the paper's findings, computed from the summary and its 95 % CIs.

Rules every claim follows:
- Evidence is the MLPerf (E2E) rows of the main host; only the CHR = 1 claim adds edge hosts.
- Emulated (TCG) rows are never evidence: a guest 10× slower than the host says nothing about the
  hardware-virtualised platforms the paper measured. The evidence says when rows were set aside.
- Two means differ when ``|a − b|`` exceeds the combined half-width ``sqrt(ci_a² + ci_b²)``; a
  ratio's half-width follows from the relative ones. Rows without a CI (one repetition) cannot be
  compared and are counted as skipped.
- Verdicts: ``holds`` / ``does not hold`` / ``not testable here`` (with why: what this host or
  config did not measure). A claim made of parts holds only if every part was tested and held.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from dlvirt.core.atomic import read_json, write_text_atomic
from dlvirt.analysis.catalog import FIGURES
from dlvirt.plan.leftout import LOCAL_SITE, reasons
from dlvirt.analysis.rows import emulated, with_site
from dlvirt.analysis.stats import estimate

HOLDS, FAILS, UNTESTABLE = "holds", "does not hold", "not testable here"
VIRTUALISED = ("CN", "VM", "VMCN", "MVM")
ALIKE_WITHIN = 0.10       # "practically insignificant": MVM within 10 % of VM (or within the CI)
GPU_NLP_SPEEDUP = 3.0     # "more than 3× speedup"
COLUMNS = ["id", "claim", "source", "verdict", "evidence", "test", "figures"]


@dataclass(frozen=True)
class Value:
    """A mean with its 95 % CI half-width, and what it is (for the evidence text)."""

    label: str
    mean: float
    ci: float

    @property
    def has_ci(self) -> bool:
        return not math.isnan(self.ci)

    def __str__(self) -> str:
        ci = f" ± {self.ci:.3g}" if self.has_ci else ""
        return f"{self.label} {self.mean:.3g}{ci}"


def difference(a: Value, b: Value) -> int:
    """-1 if ``a`` is significantly below ``b``, +1 if above, 0 if within the combined CI."""
    half = math.hypot(a.ci, b.ci)
    if a.mean - b.mean > half:
        return 1
    if b.mean - a.mean > half:
        return -1
    return 0


def ratio(a: Value, b: Value, label: str) -> Value:
    r = a.mean / b.mean
    return Value(label, r, r * math.hypot(a.ci / a.mean, b.ci / b.mean))


def pct(a: Value, b: Value) -> str:
    return f"{(a.mean / b.mean - 1) * 100:+.1f} %"


@dataclass(frozen=True)
class Verdict:
    verdict: str
    evidence: str


def untestable(why: Iterable[str]) -> Verdict:
    return Verdict(UNTESTABLE, "; ".join(dict.fromkeys(why)))


class Study:
    """The rows claims are decided on, and the reasons behind rows that are missing."""

    def __init__(self, summary: pd.DataFrame, host_cores: int | None, gaps: list[Any]) -> None:
        if summary.empty:
            summary = pd.DataFrame(columns=["tool", "app", "platform", "cores", "pinning", "processor",
                                            "mean_s", "ci95_s", "accel"])
        frame = with_site(summary)
        frame["emulated"] = emulated(frame)
        mlperf = frame[frame["tool"] == "mlperf"]
        self.emulated_platforms = sorted(set(mlperf.loc[mlperf["emulated"], "platform"]))
        self.usable = mlperf[~mlperf["emulated"]]
        self.e2e = self.usable[self.usable["site"] == LOCAL_SITE]
        self.host_cores = host_cores
        self.gaps = gaps

    def value(self, row: pd.Series, label: str | None = None) -> Value:
        return Value(label or f"{row['app'].upper()} {row['scenario']}", float(row["mean_s"]), float(row["ci95_s"]))

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


def _pair_values(pair: pd.Series, label_a: str, label_b: str) -> tuple[Value, Value]:
    return (Value(label_a, float(pair["mean_s_a"]), float(pair["ci95_s_a"])),
            Value(label_b, float(pair["mean_s_b"]), float(pair["ci95_s_b"])))


def _every(verdicts: list[bool], parts: list[str], untested: list[str]) -> Verdict:
    """Holds if every tested case held; not testable (saying why) when none could be tested."""
    if not verdicts:
        return untestable(untested)
    return Verdict(HOLDS if all(verdicts) else FAILS, "; ".join(parts))


def _skipped(n: int) -> str:
    return f"; {n} comparison(s) skipped: a row without CI (one repetition)" if n else ""


# -- the claims ---------------------------------------------------------------------------------------

def pinning_lowers_e2e(study: Study) -> Verdict:
    rows = study.e2e
    if study.host_cores is not None:
        rows = rows[rows["cores"] < study.host_cores]  # pinned to every host core restricts nothing
    parts, verdicts = [], []
    for platform in [p for p in ("BM", "CN", "VM", "VMCN") if p in set(rows["platform"])]:
        pairs = _pairs(rows[rows["platform"] == platform], "pinning", "PIN", "VNL", ["app", "cores", "processor"])
        tested, wins, changes, skipped = 0, 0, [], 0
        example = ""
        for _, pair in pairs.iterrows():
            pin, vnl = _pair_values(pair, "PIN", "VNL")
            if not (pin.has_ci and vnl.has_ci):
                skipped += 1
                continue
            tested += 1
            wins += difference(pin, vnl) < 0
            changes.append(pin.mean / vnl.mean - 1)
            example = example or f"e.g. {pair['app'].upper()} {pair['cores']} cores {pair['processor']}: {pin} s vs {vnl} s"
        if not tested:
            continue
        holds = wins > tested / 2
        verdicts.append(holds)
        median = float(pd.Series(changes).median()) * 100
        parts.append(f"{platform}: PIN significantly faster in {wins} of {tested} pairs "
                     f"(median {median:+.1f} %; {example}){_skipped(skipped)}")
    cores = f" below the host's {study.host_cores} cores" if study.host_cores else ""
    return _every(verdicts, parts, [f"no platform measured both VNL and PIN{cores} with a CI", *study.why_missing()])


def cn_overhead_grows_as_chr_falls(study: Study) -> Verdict:
    if study.host_cores is None:
        return untestable(["the host's core count is unknown (no host.json)"])
    vanilla = study.e2e[(study.e2e["pinning"] == "VNL") & study.e2e["platform"].isin(["CN", "BM"])]
    pairs = _pairs(vanilla, "platform", "CN", "BM", ["app", "cores", "processor"])
    parts, verdicts = [], []
    for (app, processor), group in pairs.groupby(["app", "processor"]):
        group = group.dropna(subset=["ci95_s_a", "ci95_s_b"]).sort_values("cores")
        if group["cores"].nunique() < 2:
            continue
        over = [ratio(*_pair_values(row, "CN", "BM"), f"CN/BM {row['cores'] / study.host_cores:.2f} CHR")
                for _, row in group.iloc[[0, -1]].iterrows()]
        low_chr, high_chr = over
        holds = difference(low_chr, high_chr) > 0
        verdicts.append(holds)
        parts.append(f"{app.upper()}/{processor}: overhead ratio {low_chr} at the lowest CHR vs {high_chr} "
                     f"at the highest ({'grows' if holds else 'does not grow'} as CHR falls)")
    return _every(verdicts, parts, ["no vanilla CN and BM rows at two or more core counts with a CI",
                                    *study.why_missing(platforms=("CN",))])


def scale_up_stops_paying(study: Study) -> Verdict:
    plateaus, tested, skipped = 0, 0, 0
    best: dict[int, int] = {}
    examples = []
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
        tested += 1
        stops = difference(last, prev) >= 0
        plateaus += stops
        if len(examples) < 2:
            app, platform, pinning, processor = keys
            examples.append(f"{app.upper()} {platform}/{pinning}/{processor}: {last} s vs {prev} s "
                            f"({'stops paying' if stops else 'still pays'})")
    if not tested:
        return untestable(["no platform line measured at two or more core counts with a CI",
                           *study.why_missing()])
    levels = ", ".join(f"{level} cores in {n}" for level, n in sorted(best.items()))
    return Verdict(HOLDS if plateaus >= tested / 2 else FAILS,
                   f"the last scale-up step gains nothing significant in {plateaus} of {tested} lines; "
                   f"fastest level: {levels} lines; {'; '.join(examples)}{_skipped(skipped)}")


def gpu_speeds_nlp_not_ic_rs(study: Study) -> Verdict:
    pairs = _pairs(study.e2e, "processor", "CPU", "GPU", ["app", "platform", "cores", "pinning"])
    parts, outcomes, missing = [], [], []
    for app in ("nlp", "ic", "rs"):
        speedups = [ratio(*_pair_values(row, "CPU", "GPU"), f"{row['platform']}/{row['cores']}/{row['pinning']}")
                    for _, row in pairs[pairs["app"] == app].iterrows()]
        speedups = [s for s in speedups if s.has_ci]
        if not speedups:
            missing.append(f"{app.upper()}: no CPU and GPU pair with a CI"
                           + "".join(f" ({w})" for w in study.why_missing(app=app, processor="GPU")[:1]))
            continue
        lowest = min(speedups, key=lambda s: s.mean - s.ci)
        highest = max(speedups, key=lambda s: s.mean + s.ci)
        if app == "nlp":
            holds = all(s.mean - s.ci > GPU_NLP_SPEEDUP for s in speedups)
            parts.append(f"NLP: GPU speed-up above {GPU_NLP_SPEEDUP:g}× in every pair: {'yes' if holds else 'no'} "
                         f"(lowest {lowest}×, {len(speedups)} pairs)")
        else:
            holds = all(s.mean + s.ci < GPU_NLP_SPEEDUP for s in speedups)
            parts.append(f"{app.upper()}: GPU speed-up below {GPU_NLP_SPEEDUP:g}× in every pair: "
                         f"{'yes' if holds else 'no'} (highest {highest}×, {len(speedups)} pairs)")
        outcomes.append(holds)
    return _conjunction(outcomes, parts, missing)


def _conjunction(outcomes: list[bool], parts: list[str], missing: list[str]) -> Verdict:
    """Holds only if every part was tested and held; any tested part failing decides 'does not hold'."""
    evidence = "; ".join(parts + [f"untested: {m}" for m in missing])
    if outcomes and not all(outcomes):
        return Verdict(FAILS, evidence)
    if missing or not outcomes:
        return Verdict(UNTESTABLE, evidence)
    return Verdict(HOLDS, evidence)


def mvm_like_vm_but_nlp_and_boots_faster(study: Study) -> Verdict:
    rows = study.e2e[(study.e2e["pinning"] == "VNL") & (study.e2e["processor"] == "CPU")]
    pairs = _pairs(rows, "platform", "MVM", "VM", ["app", "cores"])
    parts, outcomes, missing = [], [], []
    alike, unlike, nlp = [], [], []
    for _, pair in pairs.iterrows():
        mvm, vm = _pair_values(pair, f"MVM/{pair['cores']}", f"VM/{pair['cores']}")
        if not (mvm.has_ci and vm.has_ci):
            continue
        if pair["app"] == "nlp":
            nlp.append((difference(mvm, vm) > 0, f"{mvm} s vs {vm} s ({pct(mvm, vm)})"))
        elif difference(mvm, vm) == 0 or abs(mvm.mean / vm.mean - 1) <= ALIKE_WITHIN:
            alike.append(f"{pair['app'].upper()} {pair['cores']} cores {pct(mvm, vm)}")
        else:
            unlike.append(f"{pair['app'].upper()} {pair['cores']} cores {pct(mvm, vm)}")
    no_pairs = study.why_missing(platforms=("MVM", "VM"), processor="CPU")
    if alike or unlike:
        outcomes.append(not unlike)
        parts.append(f"MVM within the CI or {ALIKE_WITHIN:.0%} of VM except NLP: "
                     f"alike {', '.join(alike) or 'none'}; unlike {', '.join(unlike) or 'none'}")
    else:
        missing.append("no MVM and VM pair (vanilla, CPU, same cores) for IC, SR or RS"
                       + "".join(f" ({w})" for w in no_pairs[:1]))
    if nlp:
        slower = all(s for s, _ in nlp)
        outcomes.append(slower)
        parts.append(f"MVM significantly slower than VM for I/O-heavy NLP: {'yes' if slower else 'no'} "
                     f"({'; '.join(text for _, text in nlp)})")
    else:
        missing.append("no NLP MVM and VM pair" + "".join(f" ({w})" for w in no_pairs[:1]))
    boots = _boot_times(study.e2e)
    if "MVM" in boots and "VM" in boots:
        faster = difference(boots["MVM"], boots["VM"]) < 0
        outcomes.append(faster)
        parts.append(f"MVM boots faster: {'yes' if faster else 'no'} ({boots['MVM']} s vs {boots['VM']} s)")
    else:
        missing.append("boot times of MVM and VM (column boot_s, two or more rows each)")
    return _conjunction(outcomes, parts, missing)


def _boot_times(rows: pd.DataFrame) -> dict[str, Value]:
    if "boot_s" not in rows:
        return {}
    out = {}
    for platform, group in rows.dropna(subset=["boot_s"]).groupby("platform"):
        values = [float(v) for v in group["boot_s"]]
        if len(values) >= 2:
            est = estimate(values)
            out[str(platform)] = Value(f"{platform} boot", est.mean, est.ci95)
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
    parts, grows, tested = [], 0, 0
    for platform in ("CN", "VM", "VMCN"):
        for pinning in ("VNL", "PIN"):
            over = {}
            for level in (idle_level, cores):
                at = rows[(rows["cores"] == level) & (rows["pinning"] == pinning)].set_index("platform")
                if platform in at.index and "BM" in at.index:
                    over[level] = ratio(study.value(at.loc[platform]), study.value(at.loc["BM"]),
                                        f"{platform}/BM at {level} cores")
            if len(over) < 2 or not all(v.has_ci for v in over.values()):
                continue
            tested += 1
            more = difference(over[cores], over[idle_level]) > 0
            grows += more
            parts.append(f"{platform} {pinning}: {over[cores]} vs {over[idle_level]} ({'grows' if more else 'does not grow'})")
    if not tested:
        return untestable([f"no CN, VM or VMCN IC rows with BM at both {idle_level} and {cores} cores",
                           *study.why_missing(app="ic", processor="CPU", platforms=("CN", "VM", "VMCN"))])
    return Verdict(HOLDS if grows >= tested / 2 else FAILS,
                   f"overhead over BM grows without idle host cores in {grows} of {tested} cases: " + "; ".join(parts))


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
    parts, verdicts = [], []
    for where, group in groups:
        virt = group[group["platform"].isin(VIRTUALISED)].set_index("platform")
        if "CN" not in virt.index or len(virt) < 2:
            continue
        cn = Value("CN", float(virt.loc["CN", "mean_s"]), float(virt.loc["CN", "ci95_s"]))
        others = [Value(p, float(r["mean_s"]), float(r["ci95_s"])) for p, r in virt.iterrows() if p != "CN"]
        if not cn.has_ci or not all(o.has_ci for o in others):
            continue
        cheapest = all(difference(cn, o) < 0 for o in others)
        verdicts.append(cheapest)
        parts.append(f"{where}: {cn} s vs {', '.join(f'{o} s' for o in others)} "
                     f"({'CN cheapest' if cheapest else 'CN not cheapest'})")
    return _every(verdicts, parts, ["no CN and another virtualised platform, vanilla, at CHR = 1 with a CI",
                                    *study.why_missing(platforms=VIRTUALISED)])


@dataclass(frozen=True)
class Claim:
    id: str
    text: str
    source: str
    test: str
    check: Callable[[Study], Verdict]


CLAIMS: tuple[Claim, ...] = (
    Claim("pinning", "Pinning lowers E2E time on each platform", "§V-B; Figs. 4a, 6, 7a, 8a",
          "per platform, PIN vs VNL at equal app, cores (below the host's) and processor: PIN significantly "
          "faster in most pairs; holds if so on every platform measured", pinning_lowers_e2e),
    Claim("cn_overhead_chr", "Vanilla CN overhead over BM grows as the container-to-host core ratio (CHR) falls",
          "§V-A", "per app and processor, CN/BM (vanilla) at the lowest vs the highest CHR measured: "
          "significantly larger at the lowest; holds if so for every app", cn_overhead_grows_as_chr_falls),
    Claim("scale_up_limit", "Scale-up stops paying beyond a level", "§V-D; Figs. 4b, 6, 7a",
          "per app × platform × CPU mode × processor line: the largest level is not significantly faster "
          "than the one before it; holds if so in at least half of the lines", scale_up_stops_paying),
    Claim("gpu_speedup", "A GPU speeds NLP up by more than 3×, but IC and RS much less", "§IV-C, §IV-D; Figs. 7b, 8b",
          "CPU/GPU time ratio per platform, cores and CPU mode: above 3× (lower CI bound) in every NLP pair, "
          "below 3× (upper CI bound) in every IC and RS pair", gpu_speeds_nlp_not_ic_rs),
    Claim("mvm_like_vm", "MVM performs like VM except for I/O-heavy NLP, and MVM boots faster", "§V-G; Fig. 10",
          f"vanilla CPU, same cores: MVM within the CI or {ALIKE_WITHIN:.0%} of VM for IC, SR and RS; "
          "significantly slower for NLP; mean boot time (boot_s) significantly lower", mvm_like_vm_but_nlp_and_boots_faster),
    Claim("no_idle_cores", "Without idle host cores the virtualisation overhead grows", "§V-C; Fig. 9",
          "IC on CPU: CN, VM, VMCN over BM (same CPU mode) at instance = host cores vs at the largest smaller "
          "level: significantly larger; holds if so in at least half of the cases", overhead_grows_without_idle_cores),
    Claim("cn_cheapest_chr1", "CN is the cheapest virtualised platform at CHR = 1", "§V-H; Fig. 11",
          "vanilla, at instance = host cores (main host) or an edge host's largest level: CN significantly "
          "faster than every other virtualised platform; holds if so in every app measured", cn_cheapest_at_chr1),
)


def evaluate(summary: pd.DataFrame, host_cores: int | None, gaps: list[Any]) -> pd.DataFrame:
    study = Study(summary, host_cores, gaps)
    rows = []
    for claim in CLAIMS:
        verdict = claim.check(study)
        figures = " ".join(f.id for f in FIGURES if claim.id in f.claims)
        rows.append({"id": claim.id, "claim": claim.text, "source": claim.source, "verdict": verdict.verdict,
                     "evidence": verdict.evidence, "test": claim.test, "figures": figures})
    return pd.DataFrame(rows, columns=COLUMNS)


def write_claims(summary: Path, host: Path, plan: Path, output: Path) -> pd.DataFrame:
    frame = pd.read_csv(summary) if Path(summary).stat().st_size else pd.DataFrame()
    cores = int(read_json(host)["capabilities"]["cores"])
    table = evaluate(frame, cores, read_json(plan)["left_out"])
    write_text_atomic(output, table.to_csv(index=False))
    return table
