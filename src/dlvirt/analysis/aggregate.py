"""Turn per-job result files into summary tables (one row per tool × app × scenario × site).

A row's repetitions all come from one job, hence one machine. Rows of one site measured on
different hardware (a cluster's mixed nodes) are compared, never pooled, so every row names its
node and hardware, and summarising warns when one site's rows span several kinds of hardware.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dlvirt.core.atomic import read_json, write_text_atomic
from dlvirt.system.hostinfo import hardware_label
from dlvirt.plan.planner import LOCAL_SITE
from dlvirt.analysis.stats import estimate, inliers

KEY_COLUMNS = ["tool", "app", "platform", "cores", "pinning", "processor", "site"]
COLUMNS = KEY_COLUMNS + [
    "scenario", "reps", "outliers", "mean_s", "ci95_s", "std_s", "pre_s", "infer_s", "post_s",
    "samples", "samples_per_s", "loadgen_valid", "accel", "boot_s", "threads_policy", "threads",
    "dataset_source", "weights", "host", "hardware",
]


def summarise_result(result: dict[str, Any]) -> dict[str, Any]:
    e2e = [r["e2e_s"] for r in result["runs"]]
    est = estimate(e2e)
    # phases and rates come from the same repetitions as mean_s: outliers dropped from all of them
    runs = [r for r, keep in zip(result["runs"], inliers(e2e), strict=True) if keep]
    scenario = result["scenario"]

    def phase(name: str) -> float:
        # a DLBS (model-only) run has the inference phase only: NaN for the others
        return float(np.mean([r["phases"].get(name, np.nan) for r in runs]))

    validity = {r.get("loadgen", {}).get("validity") for r in result["runs"]}  # every run must be valid
    return {
        "tool": result["tool"],
        "app": result["app"],
        **{k: scenario[k] for k in ("platform", "cores", "pinning", "processor")},
        "scenario": result["scenario_name"],
        "reps": est.n,
        "outliers": est.outliers,
        "mean_s": est.mean,
        "ci95_s": est.ci95,
        "std_s": est.std,
        "pre_s": phase("pre_s"),
        "infer_s": phase("infer_s"),
        "post_s": phase("post_s"),
        "samples": int(np.mean([r["samples"] for r in runs])),
        "samples_per_s": float(np.mean([r["samples_per_s"] for r in runs])),
        "loadgen_valid": validity == {"VALID"} if "loadgen" in runs[0] else None,
        "accel": result["platform"].get("accel", "none"),
        # what the guest took to boot (VM, MVM, VMCN record it; empty for platforms that do not boot)
        "boot_s": result["platform"].get("boot_s"),
        "threads_policy": runs[0]["threads"]["policy"],
        "threads": runs[0]["threads"]["intra_op"],
        "dataset_source": result["dataset"]["source"],
        "weights": result["model"]["weights"],
        "host": result["host"],
        "site": result.get("site", LOCAL_SITE),
        # results written before nodes were recorded say so rather than guess
        "hardware": hardware_label(result["node"]) if "node" in result else "not recorded",
    }


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
    rows = [summarise_result(read_json(p)) for p in paths]
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
