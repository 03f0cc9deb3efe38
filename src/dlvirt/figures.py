"""Plotting shared by the figure notebooks: one look for every figure of the study."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

PLATFORM_ORDER = ["BM", "CN", "VM", "VMCN", "MVM"]
PLATFORM_COLOURS = dict(zip(PLATFORM_ORDER, sns.color_palette("colorblind", len(PLATFORM_ORDER)), strict=True))
PINNING_STYLE = {"VNL": "-", "PIN": "--"}
PINNING_MARKER = {"VNL": "o", "PIN": "s"}


def apply_style() -> None:
    sns.set_theme(style="whitegrid", context="paper", font_scale=1.1)


def load_summary(path: str | Path) -> pd.DataFrame:
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return pd.DataFrame()
    return pd.read_csv(path)


def host_label(host_json: str | Path | None) -> str:
    if not host_json or not Path(host_json).exists():
        return ""
    facts: dict[str, Any] = json.loads(Path(host_json).read_text())
    caps = facts.get("capabilities", {})
    return f"host: {facts.get('cpu_model', '?')}, {caps.get('cores', '?')} cores"


def not_measured(ax: plt.Axes, reason: str) -> None:
    ax.text(0.5, 0.5, f"not measured on this host:\n{reason}", ha="center", va="center",
            transform=ax.transAxes, fontsize=11, wrap=True,
            bbox={"boxstyle": "round", "facecolor": "#f3f3f3", "edgecolor": "#999999"})
    ax.set_xticks([])
    ax.set_yticks([])


def e2e_vs_cores(ax: plt.Axes, frame: pd.DataFrame, *, tool: str, app: str, processor: str,
                 value: str = "mean_s", ci: str = "ci95_s", ylabel: str = "E2E inference time (s)") -> bool:
    """Lines of ``value`` against cores, one per platform × pinning, with 95 % CI bars.

    Emulated (TCG) points are drawn hollow and say so in the legend. Returns False (and draws a
    'not measured' note) when there is nothing to plot."""
    rows = frame
    if not rows.empty:
        rows = rows[(rows["tool"] == tool) & (rows["app"] == app) & (rows["processor"] == processor)]
    if rows.empty:
        not_measured(ax, f"no {tool} {app.upper()} runs on {processor}")
        return False
    levels = sorted(rows["cores"].unique())
    position = {c: i for i, c in enumerate(levels)}
    for platform in [p for p in PLATFORM_ORDER if p in set(rows["platform"])]:
        for pinning in ("VNL", "PIN"):
            line = rows[(rows["platform"] == platform) & (rows["pinning"] == pinning)].sort_values("cores")
            if line.empty:
                continue
            emulated = bool((line.get("accel", pd.Series(dtype=str)) == "tcg").any())
            label = f"{platform} {pinning}" + (" (emulated, TCG)" if emulated else "")
            ax.errorbar([position[c] for c in line["cores"]], line[value], yerr=line[ci].fillna(0),
                        color=PLATFORM_COLOURS[platform], linestyle=PINNING_STYLE[pinning],
                        marker=PINNING_MARKER[pinning], markerfacecolor="none" if emulated else None,
                        capsize=3, label=label)
    ax.set_xticks(range(len(levels)), [str(c) for c in levels])
    ax.set_xlabel("scale-up level (cores)")
    ax.set_ylabel(ylabel)
    ax.legend(title="platform, CPU mode", fontsize=8)
    return True


def e2e_vs_cores_figure(summary: str | Path, *, tool: str, app: str, processor: str, title: str,
                        host: str | Path | None = None) -> plt.Figure:
    apply_style()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    e2e_vs_cores(ax, load_summary(summary), tool=tool, app=app, processor=processor)
    ax.set_title(title)
    label = host_label(host)
    if label:
        fig.text(0.01, 0.005, label, fontsize=7, color="#555555")
    fig.tight_layout()
    return fig


def save(fig: plt.Figure, png: str | Path, pdf: str | Path | None = None) -> None:
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=150)
    if pdf:
        fig.savefig(pdf)
    plt.close(fig)
