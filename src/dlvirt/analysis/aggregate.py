"""Turn per-job result files into summary tables (one row per tool × app × scenario × site).

A row's launches (replicates) all come from one site, each from one job on one machine. Rows of
one site measured on different hardware (a cluster's mixed nodes) are compared, never pooled, so
every row names its hardware (launches on several kinds: all of them), and summarising warns when
one site's rows span several kinds of hardware.

LoadGen-INVALID repetitions stay out of every statistic of a row; ``invalid`` counts them (SingleStream
and Server: those LoadGen did not issue as asked, ``dlvirt.core.loadgen.counts``). Outliers
(the modified z-score rule, within each launch) stay in: ``outliers`` counts them and
``outlier_reps`` lists them per launch, each launch's median beside its mean. A row's
launches must all have been measured by one version of dlvirt's code (the harness's, which the
runner's must match): otherwise summarising is refused unless allowed, and the row says "mixed".
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dlvirt.analysis.columns import COLUMNS, KEY_COLUMNS, read_summary
from dlvirt.analysis.model import model_columns
from dlvirt.analysis.stats import Estimate, estimate, trend
from dlvirt.core import codeversion, formats, variance
from dlvirt.core.atomic import write_text_atomic
from dlvirt.core.interval import outliers
from dlvirt.core.loadgen import PERCENTILES, counts
from dlvirt.core.machinetime import LAUNCH_PARTS, split_totals
from dlvirt.core.records import JobResult, Repetition, read_run_records
from dlvirt.core.scenario import LOCAL_SITE
from dlvirt.system.hostinfo import hardware_label

PERCENTILE_COLUMNS = {name: f"{name.replace('.', '')}_s" for name in PERCENTILES}  # p99.9 -> p999_s
NO_ESTIMATE = Estimate(0, 0, math.nan, math.nan, math.nan, math.nan, math.nan)


class MixedCodeError(ValueError):
    """A summary row would pool measurements made by different versions of dlvirt's code."""


def valid_runs(result: JobResult) -> list[Repetition]:
    """The launch's repetitions LoadGen did not mark INVALID (DLBS runs have no LoadGen verdict)."""
    return [r for r in result.runs if counts(r.loadgen)]


def latency_columns(per_launch: list[list[Repetition]]) -> dict[str, Any]:
    """A SingleStream or Server row's latency columns from its launches' counted repetitions (empty
    for Offline and DLBS rows)."""
    records = [[r.loadgen or {} for r in valid] for valid in per_launch if valid]
    flat = [lg for launch in records for lg in launch]
    if not flat or not all(lg.get("latency_ns") for lg in flat):
        return {}

    def launch_means(name: str) -> list[float]:
        return [float(np.mean([lg["latency_ns"][name] / 1e9 for lg in launch])) for launch in records]

    out: dict[str, Any] = {column: float(np.mean(launch_means(name))) for name, column in PERCENTILE_COLUMNS.items()}
    out.update({
        "round_p50_s": ";".join(f"{v:.6g}" for v in launch_means("p50")),
        "round_p99_s": ";".join(f"{v:.6g}" for v in launch_means("p99")),
        "latency_queries": min((int(lg["queries"]) for lg in flat if lg.get("queries") is not None), default=None),
        "achieved_qps": mean_of([lg.get("achieved_qps") for lg in flat]),
        "target_qps": mean_of([lg.get("settings", {}).get("target_qps") for lg in flat]),
        "early_stopping_met": all(lg.get("early_stopping_met") is True for lg in flat),
        "loadgen_scenario": flat[0].get("scenario"),
    })
    return out


def token_columns(per_launch: list[list[Repetition]]) -> dict[str, Any]:
    """A token app's row (LLM): per launch, the mean time to first token (prefill per request) and
    per output token (decode per token after the first) from the app's own clocks, which every
    scenario has, Offline included; LoadGen's tokens/s; and in SingleStream and Server LoadGen's
    percentiles of both (empty for other apps)."""
    launches = [[r for r in valid if r.phases.get("decode_s") is not None and (r.quality or {}).get("requests")]
                for valid in per_launch]
    launches = [valid for valid in launches if valid]
    if not launches:
        return {}

    def ttft(r: Repetition) -> float:
        return float(r.phases["prefill_s"] or 0.0) / int(r.quality["requests"])

    def tpot(r: Repetition) -> float:
        decoded = int(r.quality["output_tokens"]) - int(r.quality["requests"])
        return float(r.phases["decode_s"] or 0.0) / decoded if decoded > 0 else math.nan

    per_ttft = [float(np.mean([ttft(r) for r in valid])) for valid in launches]
    per_tpot = [float(np.mean([tpot(r) for r in valid])) for valid in launches]
    tokens = [(r.loadgen or {}).get("tokens") or {} for valid in launches for r in valid]
    out: dict[str, Any] = {
        "ttft_s": float(np.mean(per_ttft)), "tpot_s": float(np.mean(per_tpot)),
        "round_ttft_s": ";".join(f"{v:.6g}" for v in per_ttft),
        "round_tpot_s": ";".join(f"{v:.6g}" for v in per_tpot),
        "tokens_per_s": mean_of([t.get("tokens_per_s") for t in tokens]),
    }
    for name in ("p50", "p90", "p99"):
        out[f"ttft_{name}_s"] = mean_of([(t.get("first_token_ns") or {}).get(name) for t in tokens]) / 1e9
        out[f"tpot_{name}_s"] = mean_of([(t.get("time_per_output_token_ns") or {}).get(name) for t in tokens]) / 1e9
    return out


def outlier_list(launches: list[tuple[int, list[Repetition]]]) -> str:
    """The flagged repetitions of each launch that has any: ``round 2: rep 3; round 5: rep 1, 4``."""
    parts = []
    for replicate, runs in launches:
        flagged = outliers([r.e2e_s for r in runs])
        if flagged:
            parts.append(f"round {replicate}: rep {', '.join(str(runs[i].repetition) for i in flagged)}")
    return "; ".join(parts)


def code_column(results: list[JobResult], allow_mixed_code: bool = False) -> str:
    """The code version of a row's launches; the harness's and runner's of each must all agree."""
    versions: dict[str, str] = {}
    for result in results:
        for version in (result.code, result.runner_code):
            if version:
                versions.setdefault(version["source"], codeversion.label(version))
    if len(versions) <= 1:
        return next(iter(versions.values()), "not recorded")
    names = " vs ".join(sorted(versions.values()))
    if not allow_mixed_code:
        first = results[0]
        raise MixedCodeError(f"{first.tool} {first.app} {first.scenario_name}: its runs were made by "
                             f"different dlvirt code ({names}); rerun them, or set allow_mixed_code: true "
                             "to summarise them in one row marked mixed")
    return f"mixed: {names}"


def execution(model: dict[str, Any]) -> str | None:
    """How the model ran, from the run record's model: its optimisation and, where the app records
    one, its padding (None for results that record neither)."""
    parts = [model.get("optimisation"), model.get("padding") and f"padding {model['padding']}"]
    return "; ".join(str(part) for part in parts if part) or None


def throttled_pct(runs: list[Repetition]) -> float:
    """Throttled CFS periods per 100 periods over the runs: NaN without a quota or without cpu.stat;
    0 under a quota when no period ended during them (repetitions of a few milliseconds): a
    throttled group waits for its period's end, which the kernel counts, so none was throttled."""
    measured = [r.telemetry for r in runs if r.telemetry and r.telemetry.get("nr_periods") is not None
                and (r.observed or {}).get("quota_cores") is not None]
    if not measured:
        return math.nan
    periods = sum(t["nr_periods"] for t in measured)
    throttled = sum(t.get("nr_throttled") or 0 for t in measured)
    return 100.0 * throttled / periods if periods else 0.0


def mean_of(values: list[Any]) -> float:
    """Mean of the recorded values (NaN where none was recorded: an older result, a DLBS phase)."""
    numbers = [float(v) for v in values if v is not None]
    return float(np.mean(numbers)) if numbers else math.nan


def summarise_launches(results: list[JobResult], allow_mixed_code: bool = False) -> dict[str, Any]:
    """One summary row from the launches (replicates) of one tool × app × scenario × site × VMM.

    The statistical unit is the launch: ``mean_s`` and ``ci95_s`` are the mean and 95 % Student-t
    half-width of the launch means (n = ``ci_n`` launches), so the interval covers what differs
    between launches (boot, placement, machine drift), not only the noise within one. One launch
    has no such interval (NaN): its repetitions share its placement, page cache and boot and are
    never taken as independent units; ``std_s`` then keeps its within-launch spread. Each launch's
    mean, round, node and boot time are kept (``round_means_s``, ``launch_rounds``,
    ``launch_nodes``, ``launch_boot_s``) for the study's model (``dlvirt.analysis.model``).
    INVALID repetitions are left out of every column (a launch left with none counts no more);
    outliers are flagged, not dropped. ``within_sd_s`` and ``between_sd_s`` are the variance
    components (``core.variance``, log scale, times the mean: the SD in seconds), ``between_sd_s``
    without the within-launch noise the launch means carry."""
    results = sorted(results, key=lambda r: r.replicate)
    first = results[0]
    code = code_column(results, allow_mixed_code)
    counted = [(result, valid) for result in results if (valid := valid_runs(result))]
    launches = [(result.replicate, valid) for result, valid in counted]
    per_launch = [valid for _, valid in launches]
    runs = [r for valid in per_launch for r in valid]
    e2e = [r.e2e_s for r in runs]
    launch_means = [float(np.mean([r.e2e_s for r in valid])) for valid in per_launch]
    components = variance.of_launches([[r.e2e_s for r in valid] for valid in per_launch])
    est = estimate(launch_means) if launch_means else NO_ESTIMATE
    pooled = estimate(e2e) if e2e else NO_ESTIMATE
    scenario = first.scenario

    def phase(name: str) -> float:
        # a DLBS (model-only) run has the inference phase only: NaN for the others
        return mean_of([r.phases.get(name) for r in runs])

    def telemetry(name: str) -> float:
        return mean_of([(r.telemetry or {}).get(name) for r in runs])

    def launch_phase(name: str) -> str:
        """Each launch's mean busy time in phase ``name`` (empty where a launch did not time it)."""
        means = [mean_of([r.phases.get(name) for r in valid]) for valid in per_launch]
        return ";".join(f"{m:.6g}" for m in means) if means and all(math.isfinite(m) for m in means) else ""

    every_run = [r for result in results for r in result.runs]
    sample = (runs or every_run)[0]
    validity = {(r.loadgen or {}).get("validity") for r in every_run}  # every run must be valid
    boots = [result.platform["boot_s"] for result in results if result.platform.get("boot_s") is not None]
    # GPU rows: the GPU model, its mean sampled utilisation and the process's peak memory, from
    # the records the job verified (dlvirt.system.gpu); empty for CPU rows and older results
    gpus = [r.gpu for r in runs if r.gpu]
    utils = [g["util_mean_pct"] for g in gpus if g.get("util_mean_pct") is not None]
    peaks = [g["peak_mib"] for g in gpus if g.get("peak_mib") is not None]
    # PIN scenarios' recorded placement (VNL has none): the most sockets / nodes any launch spanned
    placements = [result.placement for result in results if result.placement and "sockets" in result.placement]
    rss = [r.telemetry["max_rss_mib"] for r in every_run if r.telemetry and r.telemetry.get("max_rss_mib")]
    split = split_totals(results)
    return {
        "tool": first.tool,
        "app": first.app,
        "platform": scenario.platform,
        "cores": scenario.cores,
        "pinning": scenario.pinning,
        "processor": scenario.processor,
        "scenario": first.scenario_name,
        "vmm": first.platform.get("vmm"),
        "replicates": len(results),
        "reps": len(runs),
        "min_reps": min((len(valid) for valid in per_launch), default=0),
        "outliers": sum(len(outliers([r.e2e_s for r in valid])) for valid in per_launch),
        "outlier_reps": outlier_list(launches),
        # a launch far from its siblings (the same rule over the launch means): flagged, kept
        "outlier_launches": "; ".join(f"round {launches[i][0]}" for i in outliers(launch_means)),
        "unsteady_launches": sum((result.repetitions or {}).get("steady") is False for result in results),
        "mean_s": est.mean,
        "ci95_s": est.ci95,
        "ci_n": est.n,
        # the spread between launches; with one launch, the spread within it (never an interval)
        "std_s": est.std if len(per_launch) >= 2 else pooled.std,
        "within_sd_s": est.mean * components.within_sd,
        "between_sd_s": est.mean * components.between_sd,
        # drift over the study: the launch means (and medians) in round order, and the p-value of their trend
        "round_means_s": ";".join(f"{m:.6g}" for m in launch_means),
        "round_medians_s": ";".join(f"{float(np.median([r.e2e_s for r in valid])):.6g}" for valid in per_launch),
        # what the study's model needs of each launch beside its mean: its round, node and boot time
        "launch_rounds": ";".join(str(result.replicate) for result, _ in counted),
        "launch_nodes": ";".join(str((result.node or {}).get("hostname", "")) for result, _ in counted),
        "launch_boot_s": ";".join(f"{result.platform['boot_s']:.6g}" for result, _ in counted
                                  if result.platform.get("boot_s") is not None),
        # ... and its phases' busy times, for the per-phase models (claims.sandbox)
        "round_pre_s": launch_phase("pre_s"),
        "round_infer_s": launch_phase("infer_s"),
        "drift_p": trend(launch_means)[1],
        "median_s": pooled.median,
        "iqr_s": pooled.iqr,
        "invalid": sum(len(result.runs) - len(valid_runs(result)) for result in results),
        **{name: phase(name) for name in ("pre_s", "infer_s", "post_s", "pre_cpu_s", "infer_cpu_s", "post_cpu_s",
                                          "stall_s")},
        "throttled_pct": throttled_pct(runs),
        "throttled_s": telemetry("throttled_s"),
        "steal_pct": telemetry("steal_pct"),
        "others_on_cpus_cores": mean_of([r.telemetry["others_on_cpus_s"] / r.telemetry["window_s"] for r in runs
                                         if r.telemetry and r.telemetry.get("others_on_cpus_s") is not None
                                         and r.telemetry.get("window_s")]),
        "platform_on_cpus_cores": mean_of([r.telemetry["platform_on_cpus_s"] / r.telemetry["window_s"] for r in runs
                                           if r.telemetry and r.telemetry.get("accounted_from") == "host"
                                           and r.telemetry.get("window_s")]),
        # the marks the runner set by the threshold (run.interference); unmarked results: NaN
        "disturbed_share": mean_of([float(r.telemetry["disturbed"]) for r in runs
                                    if r.telemetry and r.telemetry.get("disturbed") is not None]),
        "reruns": sum(len(result.interference["attempts"]) - 1 for result in results if result.interference),
        "ctx_switches": mean_of([r.telemetry["voluntary_ctx"] + r.telemetry["involuntary_ctx"]
                                 for r in runs if r.telemetry]),
        "major_faults": telemetry("major_faults"),
        "samples": int(mean_of([r.samples for r in runs])) if runs else 0,
        "samples_per_s": mean_of([r.samples_per_s for r in runs]),
        "loadgen_valid": validity == {"VALID"} if sample.loadgen is not None else None,
        "accel": first.platform.get("accel", "none"),
        # what the guest took to boot (VM, MVM, VMCN record it; empty for platforms that do not boot)
        "boot_s": float(np.mean(boots)) if boots else None,
        "threads_policy": sample.threads["policy"],
        # what the framework reported using (older results: what the plan set)
        "threads": (sample.threads.get("framework") or sample.threads)["intra_op"],
        # how the LoadGen pipeline ran (DLBS rows time the model alone: none)
        "pipeline": ("overlapped" if sample.threads.get("overlap", True) else "sequential")
        if sample.loadgen is not None else None,
        "dataset_source": first.dataset["source"],
        "model": first.model.get("model"),
        # a smaller stand-in (BERT-tiny for BERT-large) says so; it is never evidence for a claim
        "reference_model": bool(first.model.get("mlperf_reference_size", True)),
        "weights": first.model["weights"],
        "execution": execution(first.model),
        "host": first.host,
        "site": first.site or LOCAL_SITE,
        # results written before nodes were recorded say so rather than guess
        "hardware": " + ".join(sorted({hardware_label(r.node) if r.node is not None else "not recorded"
                                       for r in results})),
        "gpu": gpus[0].get("model") if gpus and len(gpus) == len(runs) else None,
        "gpu_util_pct": float(np.mean(utils)) if utils else None,
        "gpu_mem_mib": float(max(peaks)) if peaks else None,
        # figures mark the first level whose pinned cores span more than one socket / NUMA node
        "sockets": max(p["sockets"] for p in placements) if placements else None,
        "numa_nodes": max(p["nodes"] for p in placements) if placements else None,
        # study.memory as the platform applied and verified it (empty in results from before it existed)
        "memory_mib": first.platform.get("memory_mib"),
        # the harness's peak resident memory in any of its runs: how close it came to that
        "max_rss_mib": max(rss) if rss else None,
        "code_version": code,
        # rows of a platform that is not virtualised (bare metal): what that "bare metal" itself is, as
        # the harness saw it (vm/container, "none" on bare metal); None for results that lack the fact
        "host_virtualization": ", ".join(f"{k} {v}" for k, v in sorted(sample.observed["virtualization"].items())
                                         if v != "none") or "none"
        if first.platform.get("virtualised") is False and "virtualization" in sample.observed else None,
        **{f"launch_{part}": split[part] / split["launches"] if split else None for part in (*LAUNCH_PARTS, "total_s")},
        "counted_share": split["counted_s"] / split["total_s"] if split and split["total_s"] > 0 else None,
        **latency_columns(per_launch),
        **token_columns(per_launch),
        # a deliberately slowed platform (platforms.<P>.slowdown_cpu_quota): never a normal study's row
        "slowed": "; ".join(sorted({f"deliberately slowed: CFS quota {r.platform['slowed']['quota_cores']:g} of "
                                    f"{r.scenario.cores} core(s)" for r in results if r.platform.get("slowed")}))
        or None,
        formats.KEY: formats.version("summary"),
    }


def launch_key(result: JobResult) -> tuple[Any, ...]:
    """What makes launches replicates of one row (MVM's VMM too: QEMU's microvm is not Firecracker)."""
    s = result.scenario
    return (result.tool, result.app, s.platform, s.cores, s.pinning, s.processor,
            result.site or LOCAL_SITE, result.platform.get("vmm"))


def mixed_hardware(frame: pd.DataFrame) -> list[str]:
    """One line per site whose rows were measured on more than one kind of hardware."""
    lines = []
    for site, rows in frame.groupby("site"):
        kinds = rows.groupby("hardware")["scenario"].apply(lambda s: ", ".join(sorted(s)))
        if len(kinds) > 1:
            detail = "; ".join(f"{hw}: {scenarios}" for hw, scenarios in kinds.items())
            lines.append(f"site {site}: rows come from {len(kinds)} kinds of hardware ({detail})")
    return lines


def summarise(paths: list[Path], allow_mixed_code: bool = False) -> pd.DataFrame:
    launches: dict[tuple[Any, ...], list[JobResult]] = {}
    for result in read_run_records(paths):
        launches.setdefault(launch_key(result), []).append(result)
    rows = [summarise_launches(group, allow_mixed_code) for group in launches.values()]
    frame = pd.DataFrame(rows, columns=COLUMNS)
    for line in mixed_hardware(frame):
        print(f"dlvirt: warning: {line}; compare these rows with care", file=sys.stderr)
    return frame.sort_values(KEY_COLUMNS, ignore_index=True) if rows else frame


def write_summary(paths: list[Path], output: Path, allow_mixed_code: bool = False) -> None:
    write_text_atomic(output, summarise(paths, allow_mixed_code).to_csv(index=False))


def concat_summaries(paths: list[Path], output: Path) -> None:
    frames = [read_summary(p) for p in paths]
    frames = [f for f in frames if not f.empty]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)
    # every row's interval from the study's model too, beside its own launch-only one
    write_text_atomic(output, model_columns(frame).to_csv(index=False))
