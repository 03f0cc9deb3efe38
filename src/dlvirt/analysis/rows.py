"""Which summary rows a figure, table, claim or report sentence is about: loading the summaries,
filtering them by site and columns, and the derived quantities (normalised times, phase shares)
that the plots and the texts share. Free of plotting: claims and the report import it without
matplotlib.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from dlvirt.analysis.columns import read_summary
from dlvirt.core.formats import read_document
from dlvirt.core.kinds import Kinds
from dlvirt.core.scenario import LOCAL_SITE

PHASES = {"pre_s": "pre-processing", "infer_s": "inference", "post_s": "post-processing"}
SITE = "site"        # which host measured a row: absent or "local" = the main host
BOOT = "boot_s"      # mean platform boot time of a row, where the platform boots (VM, MVM, VMCN)


def load_summary(path: str | Path) -> pd.DataFrame:
    return read_summary(path)


def load_summaries(paths: str | Path | Iterable[str | Path]) -> pd.DataFrame:
    """Rows of every summary, with ``site`` filled in ("local" where the column is absent or empty)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    frames = [f for f in (load_summary(p) for p in paths) if not f.empty]
    if not frames:
        return pd.DataFrame()
    return verified_gpu_rows(with_site(pd.concat(frames, ignore_index=True)))


def verified_gpu_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` without the GPU rows that do not show GPU work: a GPU row counts only with the GPU
    model and a non-zero sampled utilisation recorded (results from before GPU use was verified,
    or written by hand, have neither). CPU rows all stay."""
    if frame.empty or "processor" not in frame:
        return frame
    gpu = frame["processor"] == "GPU"
    if not gpu.any():
        return frame
    model = frame["gpu"] if "gpu" in frame else pd.Series(None, index=frame.index, dtype=object)
    util = frame["gpu_util_pct"] if "gpu_util_pct" in frame else pd.Series(float("nan"), index=frame.index)
    shown = model.notna() & model.astype(str).ne("") & pd.to_numeric(util, errors="coerce").gt(0)
    return frame[~gpu | shown]


def with_site(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with ``site`` filled in: "local" where the column is absent or empty."""
    site = frame[SITE] if SITE in frame else pd.Series(LOCAL_SITE, index=frame.index, dtype=object)
    return frame.assign(**{SITE: site.fillna(LOCAL_SITE).replace("", LOCAL_SITE).astype(str)})


def main_site(frame: pd.DataFrame) -> pd.DataFrame:
    return frame if frame.empty else frame[frame[SITE] == LOCAL_SITE]


def edge_sites(frame: pd.DataFrame) -> pd.DataFrame:
    return frame if frame.empty else frame[frame[SITE] != LOCAL_SITE]


def select(frame: pd.DataFrame, **where: Any) -> pd.DataFrame:
    """Rows whose columns equal the given values (a tuple/list value means any of them)."""
    if frame.empty:
        return frame
    keep = pd.Series(True, index=frame.index)
    for column, value in where.items():
        if isinstance(value, (tuple, list)):
            keep &= frame[column].isin(value)
        else:
            keep &= frame[column] == value
    return frame[keep]


def emulated(rows: pd.DataFrame) -> pd.Series:
    return rows["accel"].astype(str).eq("tcg") if "accel" in rows else pd.Series(False, index=rows.index)


def host_cores(host_json: str | Path | None) -> int | None:
    if not host_json or not Path(host_json).exists():
        return None
    return int(read_document(host_json, "host facts")["capabilities"]["cores"])


def host_label(host_json: str | Path | None) -> str:
    if not host_json or not Path(host_json).exists():
        return ""
    facts: dict[str, Any] = read_document(host_json, "host facts")
    caps = facts.get("capabilities", {})
    label = f"host: {facts.get('cpu_model', '?')}, {caps.get('cores', '?')} cores"
    own = host_virtualization(facts)
    return f"{label} ({own}: its bare-metal rows are not bare metal)" if own else label


def host_virtualization(facts: dict[str, Any]) -> str | None:
    """What the host running "BM" itself is, when it is a VM or a container (None on bare metal
    and for host facts recorded before this was)."""
    virt = facts.get("virtualization") or {}
    parts = [f"a {virt['vm']} virtual machine" if virt.get("vm", "none") != "none" else "",
             f"a {virt['container']} container" if virt.get("container", "none") != "none" else ""]
    found = " and ".join(p for p in parts if p)
    return f"itself {found}" if found else None


def normalised(rows: pd.DataFrame, by: str, baseline: str) -> tuple[pd.DataFrame, dict[str, str]]:
    """Mean and CI divided per ``by`` group by the ``baseline`` platform's mean (bare metal; the
    group's fastest when it is absent); also the reference used per group. A row's normalised CI
    carries the reference's uncertainty too (delta method for the ratio of two independent means:
    relative half-widths added in quadrature); the reference row itself keeps its own."""
    out = []
    reference = {}
    for key, group in rows.groupby(by, sort=False):
        bm = group[group["platform"] == baseline]
        ref = bm.index[0] if not bm.empty else group["mean_s"].idxmin()
        base = float(group.loc[ref, "mean_s"])
        base_rel = float(group.loc[ref, "ci95_s"]) / base
        reference[str(key)] = baseline if not bm.empty else "fastest"
        norm = group["mean_s"] / base
        own = group["ci95_s"] / group["mean_s"]
        rel = (own ** 2 + base_rel ** 2) ** 0.5
        rel[group.index == ref] = own[group.index == ref]
        out.append(group.assign(norm=norm, norm_ci=norm * rel))
    return (pd.concat(out) if out else rows.assign(norm=[], norm_ci=[])), reference


TOKEN_TIMES = ("ttft_s", "tpot_s")


def tokens_beside_baseline(rows: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """A token app's rows (LLM) with time to first token and per output token, each divided by the
    ``baseline`` platform's (bare metal) at the same tool, app, cores, CPU mode and processor; rows
    without a baseline twin or without token times are left out."""
    keys = ["tool", "app", "cores", "pinning", "processor"]
    if rows.empty or not set(TOKEN_TIMES) <= set(rows):
        return pd.DataFrame(columns=[*keys, "platform", "scenario", *TOKEN_TIMES,
                                     *(f"{t}/{baseline}" for t in TOKEN_TIMES)])
    out = []
    for _, group in rows.dropna(subset=list(TOKEN_TIMES)).groupby(keys, sort=False):
        base = group[group["platform"] == baseline]
        if base.empty:
            continue
        ratios = {f"{t}/{baseline}": group[t] / float(base.iloc[0][t]) for t in TOKEN_TIMES}
        out.append(group.assign(**ratios))
    return pd.concat(out) if out else tokens_beside_baseline(rows.iloc[0:0].drop(columns=list(TOKEN_TIMES)),
                                                              baseline)


MECHANISM = ["throttled_pct", "throttled_s", "steal_pct", "ctx_switches", "major_faults"]


def overhead_beside_mechanism(rows: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Each row's E2E overhead over the ``baseline`` platform (bare metal) at the same tool, app, cores,
    pinning and processor (in %), beside what the kernel recorded for it: CFS throttling and steal
    time (the paper's explanations of container and VM overhead), context switches and major page
    faults (pages read from disk mid-repetition). Rows without a
    baseline twin are left out."""
    keys = ["tool", "app", "cores", "pinning", "processor"]
    present = [c for c in MECHANISM if c in rows.columns]
    bm = rows[rows["platform"] == baseline].set_index(keys)
    out = []
    for _, row in rows[rows["platform"] != baseline].iterrows():
        key = tuple(row[k] for k in keys)
        if key not in bm.index:
            continue
        twin = bm.loc[[key]].iloc[0]
        out.append({"app": str(row["app"]).upper(), "tool": row["tool"], "scenario": row["scenario"],
                    "overhead_pct": 100.0 * (row["mean_s"] / twin["mean_s"] - 1.0),
                    **{c: row[c] for c in present}, **{f"{baseline} {c}": twin[c] for c in present}})
    return pd.DataFrame(out)


def phase_shares(rows: pd.DataFrame) -> pd.DataFrame:
    """Each phase's share of the time spent in the phases (they overlap in the pipeline, so shares
    of their sum, not of E2E)."""
    total = rows[list(PHASES)].sum(axis=1)
    return rows[list(PHASES)].div(total.where(total > 0), axis=0)


def present(order: list[str], rows: pd.DataFrame, column: str = "platform") -> list[str]:
    """The names in ``order`` (platforms or apps, in figure order) that ``rows`` hold."""
    held = set(rows[column]) if not rows.empty else set()
    return [name for name in order if name in held]


def scenario_order(rows: pd.DataFrame, kinds: Kinds) -> pd.DataFrame:
    if rows.empty:
        return rows
    rank = {p: i for i, p in enumerate(kinds.platform_order)}
    return rows.assign(_p=rows["platform"].map(rank), _m=rows["pinning"].map({"VNL": 0, "PIN": 1})) \
        .sort_values(["processor", "_p", "_m", "cores"]).drop(columns=["_p", "_m"])


def first_level_spanning_sockets(rows: pd.DataFrame) -> int | None:
    """The smallest scale-up level whose pinned cores span more than one socket or NUMA node on the
    host that measured it (from the recorded placement); None when no level does or none says."""
    if "sockets" not in rows or "numa_nodes" not in rows:
        return None
    spanning = rows[(rows["sockets"].fillna(0) > 1) | (rows["numa_nodes"].fillna(0) > 1)]
    return int(spanning["cores"].min()) if not spanning.empty else None


def _launch_values(cell: object) -> list[float]:
    if cell is None or (isinstance(cell, float) and cell != cell):
        return []
    return [float(v) for v in str(cell).split(";") if v not in ("", "nan")]


def latency_beside_throttling(rows: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Latency rows (SingleStream, Server) with their p50 and p99 normalised to the ``baseline``
    platform's (bare metal) at the same tool, app, cores, pinning and processor, each with a 95 %
    interval over the launches (relative half-widths of the row and the baseline added in
    quadrature; NaN with one launch), beside the row's CFS throttled share. Rows without a baseline
    twin keep their milliseconds and no ratio."""
    from dlvirt.analysis.stats import estimate

    keys = ["tool", "app", "cores", "pinning", "processor"]
    if rows.empty or "p50_s" not in rows:
        return pd.DataFrame()
    rows = rows[rows["p50_s"].notna()]
    twins = rows[rows["platform"] == baseline].set_index(keys)

    def rel_ci(cell: object, mean: float) -> float:
        values = _launch_values(cell)
        return estimate(values).ci95 / mean if len(values) >= 2 and mean > 0 else float("nan")

    out = []
    for _, row in rows.iterrows():
        key = tuple(row[k] for k in keys)
        entry: dict[str, Any] = {"tool": row["tool"], "app": str(row["app"]).upper(), "scenario": row["scenario"],
                                 "platform": row["platform"], "cores": row["cores"], "pinning": row["pinning"],
                                 "processor": row["processor"], "launches": len(_launch_values(row.get("round_p50_s"))),
                                 "p50 (ms)": 1e3 * row["p50_s"], "p99 (ms)": 1e3 * row["p99_s"]}
        for name in ("p50", "p99"):
            entry[f"{name}/{baseline}"] = entry[f"{name}/{baseline} ci"] = float("nan")
        if key in twins.index:
            twin = twins.loc[[key]].iloc[0]
            for name in ("p50", "p99"):
                mean, base = float(row[f"{name}_s"]), float(twin[f"{name}_s"])
                ratio = mean / base
                own = rel_ci(row.get(f"round_{name}_s"), mean)
                ref = rel_ci(twin.get(f"round_{name}_s"), base)
                entry[f"{name}/{baseline}"] = ratio
                entry[f"{name}/{baseline} ci"] = ratio * (own if row["platform"] == baseline
                                                          else (own ** 2 + ref ** 2) ** 0.5)
        entry["p99/p50"] = float(row["p99_s"]) / float(row["p50_s"]) if row["p50_s"] > 0 else float("nan")
        entry["throttled share"] = float(row["throttled_pct"]) / 100 if pd.notna(row.get("throttled_pct")) \
            else float("nan")
        entry["queries"] = row.get("latency_queries")  # per repetition: below 100, p99 is about the largest
        entry["early stopping"] = row.get("early_stopping_met")
        out.append(entry)
    return pd.DataFrame(out)
