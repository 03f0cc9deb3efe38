"""Turn per-job result files into summary tables (one row per tool × app × scenario × site).

A row's launches (replicates) all come from one site, each from one job on one machine. Rows of
one site measured on different hardware (a cluster's mixed nodes) are compared, never pooled, so
every row names its hardware (launches on several kinds: all of them), and summarising warns when
one site's rows span several kinds of hardware.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dlvirt.analysis.stats import estimate, inliers, trend
from dlvirt.core.atomic import write_text_atomic
from dlvirt.core.records import JobResult, Repetition
from dlvirt.core.scenario import LOCAL_SITE
from dlvirt.system.hostinfo import hardware_label

KEY_COLUMNS = ["tool", "app", "platform", "cores", "pinning", "processor", "site"]
COLUMNS = KEY_COLUMNS + [
    "scenario", "vmm", "replicates", "reps", "min_reps", "outliers", "mean_s", "ci95_s", "ci_n", "ci_unit",
    "std_s", "between_sd_s", "round_means_s", "drift_p", "median_s", "iqr_s", "pre_s", "infer_s", "post_s",
    "samples", "samples_per_s", "loadgen_valid", "accel", "boot_s", "threads_policy", "threads", "dataset_source",
    "model", "reference_model", "weights", "host", "hardware", "gpu", "gpu_util_pct", "gpu_mem_mib", "sockets",
    "numa_nodes",
]


def kept_runs(result: JobResult) -> list[Repetition]:
    """The launch's repetitions without its outliers (the rule of ``dlvirt.analysis.stats``)."""
    e2e = [r.e2e_s for r in result.runs]
    return [r for r, keep in zip(result.runs, inliers(e2e), strict=True) if keep]


def summarise_launches(results: list[JobResult]) -> dict[str, Any]:
    """One summary row from the launches (replicates) of one tool × app × scenario × site × VMM.

    The statistical unit is the launch: with two or more, ``mean_s`` and ``ci95_s`` are the mean and
    95 % Student-t half-width of the launch means (n = replicates), so the interval covers what
    differs between launches (boot, placement, machine drift), not only the noise within one. With
    one launch they fall back to its repetitions (``ci_unit`` says which). Outliers are dropped
    within each launch, from every column."""
    results = sorted(results, key=lambda r: r.replicate)
    first = results[0]
    per_launch = [kept_runs(result) for result in results]
    runs = [r for kept in per_launch for r in kept]
    e2e = [r.e2e_s for r in runs]
    launch_means = [float(np.mean([r.e2e_s for r in kept])) for kept in per_launch]
    if len(results) >= 2:
        est, unit = estimate(launch_means, drop=False), "replicate"
    else:
        est, unit = estimate(e2e, drop=False), "repetition"
    pooled = estimate(e2e, drop=False)
    scenario = first.scenario

    def phase(name: str) -> float:
        # a DLBS (model-only) run has the inference phase only: NaN for the others
        return float(np.mean([r.phases.get(name, np.nan) for r in runs]))

    every_run = [r for result in results for r in result.runs]
    validity = {(r.loadgen or {}).get("validity") for r in every_run}  # every run must be valid
    boots = [result.platform["boot_s"] for result in results if result.platform.get("boot_s") is not None]
    # GPU rows: the GPU model, its mean sampled utilisation and the process's peak memory, from
    # the records the job verified (dlvirt.system.gpu); empty for CPU rows and older results
    gpus = [r.gpu for r in runs if r.gpu]
    utils = [g["util_mean_pct"] for g in gpus if g.get("util_mean_pct") is not None]
    peaks = [g["peak_mib"] for g in gpus if g.get("peak_mib") is not None]
    # PIN scenarios' recorded placement (VNL has none): the most sockets / nodes any launch spanned
    placements = [result.placement for result in results if result.placement and "sockets" in result.placement]
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
        "min_reps": min(len(kept) for kept in per_launch),
        "outliers": len(every_run) - len(runs),
        "mean_s": est.mean,
        "ci95_s": est.ci95,
        "ci_n": est.n,
        "ci_unit": unit,
        "std_s": est.std,
        "between_sd_s": float(np.std(launch_means, ddof=1)) if len(results) >= 2 else np.nan,
        # drift over the study: the launch means in round order, and the p-value of their trend
        "round_means_s": ";".join(f"{m:.6g}" for m in launch_means),
        "drift_p": trend(launch_means)[1],
        "median_s": pooled.median,
        "iqr_s": pooled.iqr,
        "pre_s": phase("pre_s"),
        "infer_s": phase("infer_s"),
        "post_s": phase("post_s"),
        "samples": int(np.mean([r.samples for r in runs])),
        "samples_per_s": float(np.mean([r.samples_per_s for r in runs])),
        "loadgen_valid": validity == {"VALID"} if runs[0].loadgen is not None else None,
        "accel": first.platform.get("accel", "none"),
        # what the guest took to boot (VM, MVM, VMCN record it; empty for platforms that do not boot)
        "boot_s": float(np.mean(boots)) if boots else None,
        "threads_policy": runs[0].threads["policy"],
        "threads": runs[0].threads["intra_op"],
        "dataset_source": first.dataset["source"],
        "model": first.model.get("model"),
        # a smaller stand-in (BERT-tiny for BERT-large) says so; it is never evidence for a claim
        "reference_model": bool(first.model.get("mlperf_reference_size", True)),
        "weights": first.model["weights"],
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


def summarise(paths: list[Path]) -> pd.DataFrame:
    launches: dict[tuple[Any, ...], list[JobResult]] = {}
    for path in paths:
        result = JobResult.read(path)
        launches.setdefault(launch_key(result), []).append(result)
    rows = [summarise_launches(group) for group in launches.values()]
    frame = pd.DataFrame(rows, columns=COLUMNS)
    for line in mixed_hardware(frame):
        print(f"dlvirt: warning: {line}; compare these rows with care", file=sys.stderr)
    return frame.sort_values(KEY_COLUMNS, ignore_index=True) if rows else frame


def write_summary(paths: list[Path], output: Path) -> None:
    write_text_atomic(output, summarise(paths).to_csv(index=False))


def concat_summaries(paths: list[Path], output: Path) -> None:
    frames = [pd.read_csv(p) for p in paths]
    frames = [f for f in frames if not f.empty]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)
    write_text_atomic(output, frame.to_csv(index=False))
