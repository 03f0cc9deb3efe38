"""Plotting shared by the figure notebooks: one look for every figure of the study (which rows a
figure is about is ``dlvirt.analysis.rows``).

Every figure draws whatever subset of rows the summaries hold. A panel with nothing to draw says
"not measured on this host" and why (the plan's left-out reasons, from plan.json), instead
of failing or vanishing. Rows measured on an edge host (``site`` other than local) appear only in
the edge figure.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from dlvirt.analysis.catalog import E2E_TOOL  # noqa: E402
from dlvirt.analysis.plandoc import PlanDocument  # noqa: E402
from dlvirt.analysis.rows import (  # noqa: E402
    BOOT,
    PHASES,
    SITE,
    TOKEN_TIMES,
    edge_sites,
    emulated,
    first_level_spanning_sockets,
    host_cores,
    host_label,
    latency_beside_throttling,
    load_summaries,
    main_site,
    normalised,
    phase_shares,
    present,
    scenario_order,
    select,
    tokens_beside_baseline,
)
from dlvirt.plan.leftout import reasons  # noqa: E402

PALETTE = sns.color_palette("colorblind", 10)  # a platform's colour is its PlatformKind.colour here
PINNING_STYLE = {"VNL": "-", "PIN": "--"}
PINNING_MARKER = {"VNL": "o", "PIN": "s"}
# VNL and PIN points of one level side by side: a platform's PIN point at a level where it has no line
# (PIN measured at one level only) would otherwise hide behind its VNL point of the same colour
PINNING_DODGE = {"VNL": -0.07, "PIN": 0.07}
PHASE_COLOURS = dict(zip(PHASES, sns.color_palette("Set2", 3), strict=True))
EMULATED_HATCH = "//"


def apply_style() -> None:
    sns.set_theme(style="whitegrid", context="paper", font_scale=1.1)


# -- panels -----------------------------------------------------------------------------------------

def not_measured(ax: plt.Axes, reason: str | list[str]) -> None:
    lines = [reason] if isinstance(reason, str) else list(reason)
    wrapped = "\n".join(textwrap.fill(line, 58) for line in lines[:3])
    if len(lines) > 3:
        wrapped += f"\n(and {len(lines) - 3} more reasons)"
    ax.text(0.5, 0.5, f"not measured on this host:\n{wrapped}", ha="center", va="center",
            transform=ax.transAxes, fontsize=9,
            bbox={"boxstyle": "round", "facecolor": "#f3f3f3", "edgecolor": "#999999"})
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)


def colour(plan: PlanDocument, platform: str) -> Any:
    return PALETTE[plan.kinds.colour(platform) % len(PALETTE)]


def why_missing(plan: PlanDocument, fallback: str, **where: Any) -> list[str]:
    """The plan's reasons for rows matching ``where`` being absent, or ``fallback`` if it gave none.
    Asked about platforms, their own reasons come before those of whole apps left out."""
    return reasons(plan.left_out, detail=where.get("platforms") is not None, **where) or [fallback]


def absent_note(ax: plt.Axes, rows: pd.DataFrame, platforms: Iterable[str], plan: PlanDocument,
                **where: Any) -> None:
    """Under the axes: which of ``platforms`` have no rows here, and the plan's reasons."""
    absent = tuple(p for p in platforms if rows.empty or p not in set(rows["platform"]))
    if not absent:
        return
    why = "; ".join(why_missing(plan, "not in the summary", platforms=absent, **where))
    figure = ax.get_figure(root=True)
    assert figure is not None  # axes being drawn on belong to a figure
    chars = int(ax.get_position().width * figure.get_figwidth() * 15)  # ~15 characters per inch at 7 pt
    ax.text(0.0, -0.2, textwrap.fill(f"not measured on this host: {', '.join(absent)} — {why}", chars),
            transform=ax.transAxes, fontsize=7, va="top", color="#555555")


def e2e_vs_cores(ax: plt.Axes, frame: pd.DataFrame, *, tool: str, app: str, processor: str,
                 plan: PlanDocument, value: str = "mean_s", ci: str = "ci95_s",
                 ylabel: str = "E2E inference time (s)") -> bool:
    """Lines of ``value`` against cores, one per platform × pinning, with 95 % CI bars.

    Emulated (TCG) points are drawn hollow and say so in the legend. Returns False (and draws a
    'not measured' note) when there is nothing to plot."""
    rows = select(main_site(frame), tool=tool, app=app, processor=processor)
    if rows.empty:
        not_measured(ax, why_missing(plan, f"no {tool} {app.upper()} runs on {processor} in the summary",
                                     tool=tool, app=app, processor=processor))
        return False
    levels = sorted(rows["cores"].unique())
    position = {c: i for i, c in enumerate(levels)}
    for platform in present(plan.kinds.platform_order, rows):
        for pinning in ("VNL", "PIN"):
            line = select(rows, platform=platform, pinning=pinning).sort_values("cores")
            if line.empty:
                continue
            tcg = bool(emulated(line).any())
            label = f"{platform} {pinning}" + (" (emulated, TCG)" if tcg else "")
            ax.errorbar([position[c] + PINNING_DODGE[pinning] for c in line["cores"]], line[value],
                        yerr=line[ci].fillna(0),
                        color=colour(plan, platform), linestyle=PINNING_STYLE[pinning],
                        marker=PINNING_MARKER[pinning], markerfacecolor="none" if tcg else None,
                        capsize=3, label=label)
    spanning = first_level_spanning_sockets(rows)
    if spanning is not None:  # the paper's explanation of its 64-core results: a second socket
        ax.axvline(position[spanning] - 0.5, color="#777777", linestyle=":", linewidth=1)
        ax.text(position[spanning] - 0.45, 0.98, "pinned cores span >1 socket/NUMA node →",
                transform=ax.get_xaxis_transform(), fontsize=7, color="#555555", va="top")
    ax.set_xticks(range(len(levels)), [str(c) for c in levels])
    ax.set_xlabel("scale-up level (cores)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.legend(title="platform, CPU mode", fontsize=8, title_fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    absent_note(ax, rows, plan.kinds.platform_order, plan, tool=tool, app=app, processor=processor)
    return True


def _footer(fig: plt.Figure, host: str | Path | None) -> None:
    label = host_label(host)
    if label:
        fig.text(0.01, 0.005, label, fontsize=7, color="#555555")


def e2e_vs_cores_figure(summaries: str | Path | Iterable[str | Path], *, tool: str, app: str,
                        processors: Iterable[str] = ("CPU",), title: str, host: str | Path | None = None,
                        plan: PlanDocument, ylabel: str = "E2E inference time (s)") -> plt.Figure:
    """One panel per processor (Figures 4–8)."""
    apply_style()
    processors = list(processors)
    frame = load_summaries(summaries)
    fig, axes = plt.subplots(1, len(processors), figsize=(8.0 * len(processors), 4.2), squeeze=False)
    for ax, processor in zip(axes[0], processors, strict=True):
        e2e_vs_cores(ax, frame, tool=tool, app=app, processor=processor, plan=plan, ylabel=ylabel)
        if len(processors) > 1:
            ax.set_title(processor)
    fig.suptitle(title)
    _footer(fig, host)
    fig.tight_layout()
    return fig


def _bars(ax: plt.Axes, groups: list[str], series: list[tuple[str, pd.Series, pd.Series, pd.Series, Any]],
          *, annotate: str = "{:.2f}") -> None:
    """Grouped bars: ``series`` = (label, heights, CI half-widths, emulated flags, colour) per bar kind,
    each indexed by the group names (missing groups leave a gap)."""
    width = 0.8 / max(1, len(series))
    for k, (label, heights, errors, tcg, colour) in enumerate(series):
        xs = [g + (k - (len(series) - 1) / 2) * width for g in range(len(groups))]
        for x, group in zip(xs, groups, strict=True):
            if group not in heights.index or pd.isna(heights[group]):
                continue
            is_tcg = bool(tcg.get(group, False))
            ax.bar(x, heights[group], width, yerr=np.nan_to_num(errors.get(group, np.nan)), capsize=3,
                   color=colour, edgecolor="black", linewidth=0.4, hatch=EMULATED_HATCH if is_tcg else None)
            top = heights[group] + np.nan_to_num(errors.get(group, 0.0))
            ax.annotate(annotate.format(heights[group]), (x, top), textcoords="offset points",
                        xytext=(0, 2), ha="center", va="bottom", fontsize=7)
        ax.bar(np.nan, np.nan, color=colour, label=label)
    ax.set_xticks(range(len(groups)), groups)
    ax.margins(y=0.18)


def _emulated_note(ax: plt.Axes, rows: pd.DataFrame) -> None:
    if bool(emulated(rows).any()):
        ax.bar(np.nan, np.nan, color="white", edgecolor="black", hatch=EMULATED_HATCH, label="emulated (TCG)")


def _level_bars(ax: plt.Axes, rows: pd.DataFrame, platforms: list[str], title: str) -> None:
    """Bars per platform, vanilla and pinned side by side, overhead over BM (same mode) annotated."""
    series = []
    for pinning, colour in (("VNL", "#8da0cb"), ("PIN", "#fc8d62")):
        mode = select(rows, pinning=pinning).set_index("platform")
        if mode.empty:
            continue
        series.append((pinning, mode["mean_s"], mode["ci95_s"], emulated(mode), colour))
    _bars(ax, platforms, series, annotate="{:.2f} s")
    _emulated_note(ax, rows)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel("E2E inference time (s)")
    ax.legend(title="CPU mode", fontsize=8)


def idle_cores_figure(summaries: str | Path | Iterable[str | Path], *, host: str | Path | None,
                      plan: PlanDocument, app: str, platforms: Iterable[str], processor: str = "CPU") -> plt.Figure:
    """Figure 9: instances as large as the host (no idle host cores) next to the largest smaller
    level (idle host cores left), ``platforms`` (in figure order), vanilla and pinned."""
    apply_style()
    wanted = set(platforms)
    platforms = [p for p in plan.kinds.platform_order if p in wanted]
    rows = select(main_site(load_summaries(summaries)), tool=E2E_TOOL, app=app, processor=processor,
                  platform=tuple(platforms))
    cores = host_cores(host)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    if cores is None:
        for ax in axes:
            not_measured(ax, "the host's core count is unknown (no host.json)")
    else:
        smaller = sorted(c for c in rows["cores"].unique() if c < cores) if not rows.empty else []
        panels = [(smaller[-1] if smaller else None, "idle host cores: {c} of {h} host cores"),
                  (cores, "no idle host cores: {c} of {h} host cores")]
        for ax, (level, title) in zip(axes, panels, strict=True):
            at_level = select(rows, cores=level) if level is not None else rows.iloc[0:0]
            if at_level.empty:
                fallback = (f"no {app.upper()} runs below the host's {cores} cores" if level is None
                            else f"no {app.upper()} runs with {level} cores")
                not_measured(ax, why_missing(plan, fallback, tool=E2E_TOOL, app=app, processor=processor,
                                             platforms=tuple(platforms), cores=level))
                ax.set_title(title.format(c=level if level else "fewer", h=cores), fontsize=10)
                continue
            present = [p for p in platforms if p in set(at_level["platform"])]
            _level_bars(ax, at_level, present, title.format(c=level, h=cores))
            absent_note(ax, at_level, platforms, plan, tool=E2E_TOOL, app=app, processor=processor, cores=level)
    axes[0].set_ylim(bottom=0)  # shared by both panels; set once both are drawn
    fig.suptitle(f"Fig. 9: {app.upper()} E2E time without idle host cores ({processor})")
    _footer(fig, host)
    fig.tight_layout()
    return fig


def _normalised_bars(ax: plt.Axes, rows: pd.DataFrame, apps: list[str], plan: PlanDocument) -> None:
    norm, reference = normalised(rows, "app", plan.kinds.baseline)
    groups = [f"{a.upper()}\n(÷ {reference[a]})" for a in apps if a in reference]
    label = {a: f"{a.upper()}\n(÷ {reference[a]})" for a in reference}
    series = []
    for platform in present(plan.kinds.platform_order, norm):
        mine = norm[norm["platform"] == platform].assign(group=lambda d: d["app"].map(label)).set_index("group")
        series.append((platform, mine["norm"], mine["norm_ci"], emulated(mine), colour(plan, platform)))
    _bars(ax, groups, series)
    _emulated_note(ax, rows)
    ax.axhline(1.0, color="#333333", linewidth=0.8, linestyle=":")
    ax.set_ylabel("E2E time, normalised per app")
    ax.set_ylim(0, 1.3 * float((norm["norm"] + norm["norm_ci"].fillna(0)).max()))
    ax.legend(fontsize=8, ncols=len(series) + 1, loc="upper left")


def mvm_figure(summaries: str | Path | Iterable[str | Path], *, plan: PlanDocument, platform: str,
               host: str | Path | None = None) -> plt.Figure:
    """Figure 10: at the largest level of ``platform`` (the micro-VM; VNL, CPU), every platform's E2E
    time normalised per app, and the platforms' boot times."""
    apply_style()
    frame = main_site(load_summaries(summaries))
    rows = select(frame, tool=E2E_TOOL, pinning="VNL", processor="CPU")
    mvm = select(rows, platform=platform)
    if mvm.empty:
        fig, ax = plt.subplots(figsize=(8, 4.2))
        not_measured(ax, why_missing(plan, f"no {platform} runs in the summary", tool=E2E_TOOL, processor="CPU",
                                     platforms=(platform,)))
    else:
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [2, 1]})
        level = int(mvm["cores"].max())
        at_level = select(rows, cores=level)
        _normalised_bars(left, at_level, present(plan.kinds.app_order, at_level, "app"), plan)
        left.set_title(f"E2E time, {level} cores, vanilla, CPU", fontsize=10)
        absent_note(left, at_level, plan.kinds.platform_order, plan, tool=E2E_TOOL, processor="CPU", cores=level)
        boots = at_level.dropna(subset=[BOOT]) if BOOT in at_level else at_level.iloc[0:0]
        if boots.empty:
            not_measured(right, f"no boot times in the summary (column {BOOT}, recorded by booting platforms)")
        else:
            per_platform = boots.groupby("platform")[BOOT].agg(["mean", "std"])
            order = [p for p in plan.kinds.platform_order if p in per_platform.index]
            tcg = boots.groupby("platform").apply(lambda d: bool(emulated(d).any()), include_groups=False)
            for i, booted in enumerate(order):
                mean, sd = per_platform.loc[booted, "mean"], np.nan_to_num(per_platform.loc[booted, "std"])
                right.bar(i, mean, yerr=sd, capsize=3, color=colour(plan, booted), edgecolor="black",
                          linewidth=0.4, hatch=EMULATED_HATCH if tcg.get(booted, False) else None)
                right.annotate(f"{mean:.1f} s", (i, mean + sd), textcoords="offset points", xytext=(0, 2),
                               ha="center", fontsize=7)
            right.set_xticks(range(len(order)), order)
            right.set_ylabel("boot time (s)")
            right.set_title("boot time (mean ± sd over runs)", fontsize=10)
            _emulated_note(right, boots)
            if bool(emulated(boots).any()):
                right.legend(fontsize=8)
    fig.suptitle(f"Fig. 10: {platform} against the other platforms")
    _footer(fig, host)
    fig.tight_layout()
    return fig


def edge_figure(summaries: str | Path | Iterable[str | Path], *, plan: PlanDocument,
                apps: Iterable[str]) -> plt.Figure:
    """Figure 11: per edge site, each platform's E2E time (vanilla, CPU, the site's largest level)
    normalised per app."""
    apply_style()
    apps = [a for a in plan.kinds.app_order if a in set(apps)]
    rows = select(edge_sites(load_summaries(summaries)), tool=E2E_TOOL, app=apps, processor="CPU", pinning="VNL")
    sites = sorted(rows[SITE].unique()) if not rows.empty else []
    fig, axes = plt.subplots(1, max(1, len(sites)), figsize=(6.4 * max(1, len(sites)), 4.2), squeeze=False)
    if not sites:
        not_measured(axes[0][0], "no edge host was measured (no summary rows with a site other than local)")
    for ax, site in zip(axes[0], sites, strict=False):
        at_site = rows[rows[SITE] == site]
        at_site = at_site[at_site["cores"] == at_site.groupby("app")["cores"].transform("max")]
        _normalised_bars(ax, at_site, present(apps, at_site, "app"), plan)
        levels = ", ".join(str(c) for c in sorted(at_site["cores"].unique()))
        ax.set_title(f"edge host {site}: {levels} cores, vanilla, CPU", fontsize=10)
    fig.suptitle("Fig. 11: execution platforms on the edge")
    fig.tight_layout()
    return fig


def phases_figure(summaries: str | Path | Iterable[str | Path], *, app: str, plan: PlanDocument,
                  host: str | Path | None = None, tool: str = E2E_TOOL) -> plt.Figure:
    """Stacked bars of phase shares, one per scenario, mean E2E time beside each."""
    apply_style()
    rows = scenario_order(select(main_site(load_summaries(summaries)), tool=tool, app=app), plan.kinds)
    height = max(2.6, 0.32 * len(rows) + 1.4)
    fig, ax = plt.subplots(figsize=(7.5, height))
    if rows.empty:
        not_measured(ax, why_missing(plan, f"no {tool} {app.upper()} runs in the summary", tool=tool, app=app))
    else:
        shares = phase_shares(rows)
        labels = [s + (" (TCG)" if t else "") for s, t in zip(rows["scenario"], emulated(rows), strict=True)]
        left = np.zeros(len(rows))
        for phase, name in PHASES.items():
            ax.barh(range(len(rows)), shares[phase].fillna(0), left=left, color=PHASE_COLOURS[phase], label=name)
            for y, (x0, w) in enumerate(zip(left, shares[phase].fillna(0), strict=True)):
                if w >= 0.08:
                    ax.text(x0 + w / 2, y, f"{w:.0%}", ha="center", va="center", fontsize=7)
            left += shares[phase].fillna(0).to_numpy()
        for y, (mean, ci) in enumerate(zip(rows["mean_s"], rows["ci95_s"], strict=True)):
            ci_text = "" if pd.isna(ci) else f" ± {ci:.2f}"
            ax.text(1.02, y, f"{mean:.2f}{ci_text} s", va="center", fontsize=7, transform=ax.get_yaxis_transform())
        ax.set_yticks(range(len(rows)), labels, fontsize=8)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlim(0, 1)
        ax.xaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
        ax.set_xlabel("share of the time spent in the phases (E2E mean ± 95 % CI on the right)")
        ax.legend(ncols=3, fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    ax.set_title(f"Phase breakdown: {app.upper()} ({tool})", pad=24 if not rows.empty else 6)
    _footer(fig, host)
    fig.tight_layout()
    return fig


def sandbox_figure(summaries: str | Path | Iterable[str | Path], *, plan: PlanDocument, sandbox: str, beside: str,
                   host: str | Path | None = None) -> plt.Figure:
    """Extension: per app and scenario (CPU), ``sandbox`` (SCN) over ``beside`` (CN) in each phase's
    mean busy time and in E2E time: where the sandbox's cost falls."""
    apply_style()
    rows = select(main_site(load_summaries(summaries)), tool=E2E_TOOL, processor="CPU", platform=[sandbox, beside])
    keys = ["app", "cores", "pinning"]
    joined = (rows[rows["platform"] == sandbox].merge(rows[rows["platform"] == beside], on=keys, suffixes=("", "_base"))
              if not rows.empty else rows)
    fig, ax = plt.subplots(figsize=(max(8.0, 1.1 * len(joined) + 2), 4.2))
    if joined.empty:
        not_measured(ax, why_missing(plan, f"no {sandbox} and {beside} rows of the same app and scenario",
                                     tool=E2E_TOOL, processor="CPU", platforms=(sandbox,)))
    else:
        order = {app: i for i, app in enumerate(plan.kinds.app_order)}
        joined = joined.sort_values(keys, key=lambda c: c.map(order) if c.name == "app" else c)
        groups = [f"{r.app.upper()}\n{r.cores} {r.pinning}" for r in joined.itertuples()]
        none = pd.Series(np.nan, index=groups)
        series = [(name, pd.Series((joined[column] / joined[f"{column}_base"]).to_numpy(), index=groups), none,
                   pd.Series(False, index=groups), colour_)
                  for name, column, colour_ in (("pre-processing", "pre_s", PHASE_COLOURS["pre_s"]),
                                                 ("inference", "infer_s", PHASE_COLOURS["infer_s"]),
                                                 ("E2E", "mean_s", "#bbbbbb"))]
        _bars(ax, groups, series)
        ax.axhline(1.0, color="#333333", linewidth=0.8, linestyle=":")
        ax.set_ylabel(f"{sandbox} / {beside} (mean busy time)")
        ax.legend(fontsize=8, ncols=3, loc="upper left")
    ax.set_title(f"Extension: where the sandbox costs, {sandbox} over {beside} per phase (CPU)", fontsize=10)
    _footer(fig, host)
    fig.tight_layout()
    return fig


LATENCY_COLOURS = {"p50": "#8da0cb", "p99": "#e78ac3"}


def latency_figure(summaries: str | Path | Iterable[str | Path], *, tool: str, plan: PlanDocument,
                   host: str | Path | None = None, title: str = "") -> plt.Figure:
    """Per app, p50 and p99 query latency of each scenario normalised to the baseline platform (bare
    metal) at the same cores, CPU mode and processor (95 % CI over the launches), with the
    milliseconds and the CFS throttled share beside each pair: where a quota's throttling bites, the
    tail (p99) should move more than the median (p50)."""
    apply_style()
    baseline = plan.kinds.baseline
    frame = scenario_order(select(main_site(load_summaries(summaries)), tool=tool), plan.kinds)
    table = latency_beside_throttling(frame, baseline)
    apps = present(plan.kinds.app_order, frame, "app") if not frame.empty else []
    heights = [max(1.6, 0.42 * len(table[table["app"] == app.upper()]) + 0.9) for app in apps] or [2.6]
    fig, axes = plt.subplots(len(heights), 1, figsize=(9.0, sum(heights) + 0.8), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    if table.empty:
        not_measured(axes[0][0], why_missing(plan, f"no {tool} rows in the summary (study.scenarios)", tool=tool))
    for ax, app in zip(axes[:, 0], apps, strict=False):
        rows = table[table["app"] == app.upper()].reset_index(drop=True)
        for k, name in enumerate(("p50", "p99")):
            ys = np.arange(len(rows)) + (k - 0.5) * 0.38
            ax.barh(ys, rows[f"{name}/{baseline}"], 0.38, xerr=np.nan_to_num(rows[f"{name}/{baseline} ci"]),
                    capsize=2, color=LATENCY_COLOURS[name], edgecolor="black", linewidth=0.4,
                    label=f"{name} / {baseline}")
        for y, row in rows.iterrows():
            throttled = "" if pd.isna(row["throttled share"]) else f", throttled {row['throttled share']:.0%}"
            ax.text(1.01, y, f"p50 {row['p50 (ms)']:.3g} ms, p99 {row['p99 (ms)']:.3g} ms{throttled}",
                    va="center", fontsize=7, transform=ax.get_yaxis_transform())
        ax.axvline(1.0, color="#555555", linewidth=0.8)
        ax.set_yticks(range(len(rows)), rows["scenario"], fontsize=8)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_title(app.upper(), fontsize=10, loc="left")
        ax.set_xlabel(f"latency normalised to {baseline} at the same cores, CPU mode and processor (95 % CI)",
                      fontsize=8)
        if ax is axes[0][0]:
            ax.legend(fontsize=7, ncols=2, loc="lower right", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.suptitle(title or f"Tail latency ({tool}): p50 and p99 per platform, throttled share beside")
    _footer(fig, host)
    fig.tight_layout()
    return fig


TOKEN_COLOURS = {"ttft_s": "#66c2a5", "tpot_s": "#fc8d62"}
TOKEN_NAMES = {"ttft_s": "time to first token (prefill)", "tpot_s": "time per output token (decode)"}


def tokens_figure(summaries: str | Path | Iterable[str | Path], *, app: str, plan: PlanDocument,
                  tool: str = E2E_TOOL, host: str | Path | None = None, title: str = "") -> plt.Figure:
    """A token app (LLM): left, each scenario's time to first token and per output token divided by
    bare metal's at the same cores, CPU mode and processor (ratios of the launch means); right, both
    against the scale-up level per platform and CPU mode. If virtualisation costs memory-bound
    decode more than compute-bound prefill, the TPOT bars stand further right than the TTFT bars."""
    apply_style()
    baseline = plan.kinds.baseline
    frame = scenario_order(select(main_site(load_summaries(summaries)), tool=tool, app=app), plan.kinds)
    table = tokens_beside_baseline(frame, baseline)
    table = table[table["platform"] != baseline] if not table.empty else table
    fig = plt.figure(figsize=(15.0, max(4.6, 0.35 * len(table) + 2.6)))
    grid = fig.add_gridspec(1, 3, width_ratios=[1.3, 1, 1])
    ax = fig.add_subplot(grid[0, 0])
    if table.empty:
        not_measured(ax, why_missing(plan, f"no {app.upper()} rows beside a {baseline} twin in the summary",
                                     tool=tool, app=app))
    else:
        rows = table.reset_index(drop=True)
        for k, name in enumerate(TOKEN_TIMES):
            ax.barh(np.arange(len(rows)) + (k - 0.5) * 0.38, rows[f"{name}/{baseline}"], 0.38,
                    color=TOKEN_COLOURS[name], edgecolor="black", linewidth=0.4, label=TOKEN_NAMES[name])
        ax.axvline(1.0, color="#555555", linewidth=0.8)
        ax.set_yticks(range(len(rows)), rows["scenario"], fontsize=8)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlabel(f"normalised to {baseline} at the same cores, CPU mode and processor", fontsize=8)
        ax.legend(fontsize=7, loc="lower right", bbox_to_anchor=(1.0, 1.0), frameon=False)
    in_ms = frame.assign(no_ci=np.nan, **{name: frame[name] * 1e3 for name in TOKEN_TIMES if name in frame})
    for k, name in enumerate(TOKEN_TIMES):
        side = fig.add_subplot(grid[0, k + 1])
        e2e_vs_cores(side, in_ms, tool=tool, app=app, processor="CPU", plan=plan,
                     value=name, ci="no_ci", ylabel=f"{TOKEN_NAMES[name]} (ms)")
        legend = side.get_legend()
        if legend is not None and k == 0:  # one legend, beside the last panel
            legend.remove()
    fig.suptitle(title or f"Extension: {app.upper()} time to first token and per output token ({tool})")
    _footer(fig, host)
    fig.tight_layout()
    return fig


def save(fig: plt.Figure, png: str | Path, pdf: str | Path | None = None) -> None:
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=150)
    if pdf:
        fig.savefig(pdf)
    plt.close(fig)
