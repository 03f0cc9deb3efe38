"""The rows claims are decided on, the rows set aside and why, and the study's fitted models.

- Evidence is the MLPerf (E2E) rows of the main host; only the CHR = 1 claim adds edge hosts.
- A row is evidence only if it has at least ``MIN_LAUNCHES`` launches (the launch is the unit: the
  repetitions of one launch share its placement, page cache and boot, so one launch, however tight
  its repetitions, says nothing of what differs between launches), is LoadGen-valid, is not
  emulated (TCG: a guest 10× slower than the host says nothing about the hardware-virtualised
  platforms the paper measured) and ran the app's reference model size (``reference_model``:
  BERT-tiny never stands in for BERT-large). MVM rows are split by VMM.
- Every comparison is a contrast of the model fitted to all MLPerf launches of the row's pooling
  group (``dlvirt.analysis.model``; a residual variance per platform where the spreads differ);
  contrasts across groups (e.g. another site) are combined with Welch–Satterthwaite degrees of freedom.
- With a calibration of the study's hardware (``claims.calibration``), every E2E contrast also carries
  the day: Σ w² σ²_day of its cells' platforms (``model.day_contrast``, ``model.with_day``), so a
  verdict speaks of the host on other days too. A cell the calibration does not cover (another
  hardware kind, a platform it lacks) and boot times keep this study's day; ``beyond_day`` counts
  the contrasts that did and ``day_missing`` says why some did not.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

import pandas as pd

from dlvirt.analysis.catalog import E2E_TOOL
from dlvirt.analysis.claims.verdicts import DEFAULT_MARGIN
from dlvirt.analysis.model import (
    LAUNCH_BOOTS,
    LAUNCH_MEANS,
    Contrast,
    Model,
    combine,
    day_contrast,
    fit_groups,
    group_keys,
    launches,
    split,
    with_day,
)
from dlvirt.analysis.rows import emulated, verified_gpu_rows, with_site
from dlvirt.core.calibration import Calibration, Components, require
from dlvirt.core.loadgen import is_latency
from dlvirt.core.scenario import LOCAL_SITE
from dlvirt.plan.leftout import Gap, reasons

MIN_LAUNCHES = 2  # fewer launches in a row: not evidence
ONE_LAUNCH = "a single launch (the launch is the unit; its repetitions are not independent)"


def launch_count(rows: pd.DataFrame) -> pd.Series:
    if LAUNCH_MEANS in rows:
        return rows[LAUNCH_MEANS].map(lambda cell: len(split(cell)))
    return pd.Series(0, index=rows.index)


def weak_reasons(rows: pd.DataFrame) -> pd.Series:
    """Why each row is not evidence beyond being emulated ("" = it is evidence)."""
    why = pd.Series("", index=rows.index, dtype=object)
    count = launch_count(rows)
    why[count == 0] = "no launch means recorded (a summary from before launches were the unit)"
    why[(count > 0) & (count < MIN_LAUNCHES)] = ONE_LAUNCH
    if "loadgen_valid" in rows:
        invalid = rows["loadgen_valid"].astype(str).str.lower().isin(["false", "0"])
        why[invalid & (why == "")] = "LoadGen INVALID"
    if "reference_model" in rows:
        small = rows["reference_model"].astype(str).str.lower().isin(["false", "0"])
        models = rows["model"].astype(str) if "model" in rows else pd.Series("", index=rows.index)
        why[small & (why == "")] = "model " + models[small] + " is not the reference size"
    return why


class Study:
    """The evidence rows, their models, and the reasons behind missing rows."""

    def __init__(self, summary: pd.DataFrame, host_cores: int | None, gaps: list[Gap],
                 margin: float = DEFAULT_MARGIN, weak_as_evidence: bool = False,
                 calibration: Calibration | None = None) -> None:
        if summary.empty:
            summary = pd.DataFrame(columns=["tool", "app", "platform", "cores", "pinning", "processor",
                                            "mean_s", "ci95_s", "reps", "accel"])
        frame = verified_gpu_rows(with_site(summary)).reset_index(drop=True)
        frame["emulated"] = emulated(frame)
        if "vmm" in frame:  # MVM rows are told apart by their VMM (QEMU's microvm vs Firecracker)
            vmm = frame["vmm"].where(frame["vmm"].notna() & (frame["platform"] == "MVM"), "")
            frame["platform"] = frame["platform"].where(vmm == "", frame["platform"] + "(" + vmm.astype(str) + ")")
        mlperf = frame[frame["tool"] == E2E_TOOL]
        # the extensions' latency rows (SingleStream, Server), measured ones only (claims.latency)
        self.latency = frame[frame["tool"].astype(str).map(is_latency).astype(bool) & ~frame["emulated"]]
        self.emulated_platforms = sorted(set(mlperf.loc[mlperf["emulated"], "platform"]))
        measured = mlperf[~mlperf["emulated"]]
        why = weak_reasons(measured)
        self.weak_reasons = sorted(set(why[why != ""]))
        self.usable = measured if weak_as_evidence else measured[why == ""]
        self.e2e = self.usable[self.usable["site"] == LOCAL_SITE]
        self.frame = frame
        self.host_cores = host_cores
        self.gaps = gaps
        self.margin = margin
        # one model per pooling group, over every measured launch (weak rows too: their launches
        # are measurements of the same machine), for the E2E times and for the boot times
        self.groups = group_keys(measured)
        self.models = {key: Model(launches(measured[self.groups == key])) for key in self.groups.unique()}
        self.boot_models = {key: Model(launches(measured[self.groups == key], LAUNCH_BOOTS))
                            for key in self.groups.unique()} if LAUNCH_BOOTS in measured else {}
        # where the platforms' spreads differ, the evidence says which variance each group got
        self.notes = [f"note: group {key}: {model.describe()}" for key, model in self.models.items() if model.split]
        hardware = measured["hardware"].astype(str) if "hardware" in measured else pd.Series("", index=measured.index)
        if calibration is not None:
            require(calibration, set(hardware[measured["site"] == LOCAL_SITE]) - {"", "nan", "not recorded"},
                    "this study's main-host rows")
        self.calibration = calibration
        self.hardware = hardware
        self.beyond_day = 0  # contrasts that carry the calibration's day
        self.day_missing: set[str] = set()  # why others do not

    def _day(self, label: Hashable) -> Components | None:
        """The calibrated components of row ``label``'s platform, or None (noting why)."""
        assert self.calibration is not None
        platform = str(self.frame.at[label, "platform"]).split("(")[0]  # MVM(qemu): MVM
        if not self.calibration.covers(str(self.hardware.get(label, ""))):
            self.day_missing.add(f"rows on {self.hardware.get(label, 'unrecorded hardware')}")
            return None
        found = self.calibration.platforms.get(platform)
        if found is None:
            self.day_missing.add(f"{platform} (not in the calibration)")
        return found

    def contrast(self, weights: Mapping[Hashable, float], boot: bool = False) -> Contrast:
        """``Σ w · log(row)`` from the rows' models (several groups: combined, Welch df)."""
        models = self.boot_models if boot else self.models
        by_group: dict[str, dict[Hashable, float]] = {}
        for label, weight in weights.items():
            by_group.setdefault(str(self.groups[label]), {})[label] = weight
        parts = [(1.0, models[key].contrast(w)) for key, w in by_group.items() if key in models]
        if len(parts) != len(by_group):
            return Contrast(math.nan, math.nan, math.nan)
        found = parts[0][1] if len(parts) == 1 else combine(parts)
        if self.calibration is None or not found.testable:
            return found
        if boot:
            self.day_missing.add("boot times (the calibration is of E2E)")
            return found
        days = [(w, self._day(label)) for label, w in weights.items() if w != 0]
        if any(c is None for _, c in days):
            return found
        self.beyond_day += 1
        return with_day(found, day_contrast([(w, c) for w, c in days if c is not None]))

    def difference(self, a: Hashable, b: Hashable, boot: bool = False) -> Contrast:
        return self.contrast({a: 1.0, b: -1.0}, boot)

    def average(self, pairs: Iterable[tuple[Hashable, Hashable]], boot: bool = False, sign: float = 1.0) -> Contrast:
        """The mean of ``log a − log b`` over ``pairs`` (times ``sign``): a claim part's contrast."""
        pairs = list(pairs)
        weights: dict[Hashable, float] = {}
        for a, b in pairs:
            weights[a] = weights.get(a, 0.0) + sign / len(pairs)
            weights[b] = weights.get(b, 0.0) - sign / len(pairs)
        return self.contrast(weights, boot) if pairs else Contrast(math.nan, math.nan, math.nan)

    def mvm_platforms(self) -> list[str]:
        return sorted(p for p in set(self.e2e["platform"]) if p.startswith("MVM"))

    def why_missing(self, **where: Any) -> list[str]:
        found = reasons(self.gaps, tool=E2E_TOOL, detail=True, **where)
        if self.emulated_platforms:
            found.append(f"{', '.join(self.emulated_platforms)} rows are emulated (TCG) and not used as evidence")
        return found


def pairs(rows: pd.DataFrame, column: str, a: str, b: str, on: list[str]) -> list[tuple[Hashable, Hashable, pd.Series]]:
    """The (row of ``column`` == a, row of ``column`` == b) label pairs that agree on ``on``, with the
    agreed values."""
    left = rows[rows[column] == a].reset_index(names="_a")
    right = rows[rows[column] == b].reset_index(names="_b")
    joined = left[["_a", *on]].merge(right[["_b", *on]], on=on)
    return [(j["_a"], j["_b"], j) for _, j in joined.iterrows()]


def averaged_pairs(rows: pd.DataFrame, found: list[tuple[Hashable, Hashable, pd.Series]],
                   column: str) -> tuple[Contrast, list[Contrast]]:
    """The mean over the ``found`` pairs of ``a − b`` in the launch-level models of ``column``
    (``fit_groups``; pairs in several variance groups: combined, Welch df), and each pair's own
    contrast (NaN where its two rows are in different groups)."""
    keys, models = group_keys(rows), fit_groups(rows, column)
    by_group: dict[str, dict[Hashable, float]] = {}
    cases = []
    for a, b, _ in found:
        for label, weight in ((a, 1.0 / len(found)), (b, -1.0 / len(found))):
            group = by_group.setdefault(str(keys[label]), {})
            group[label] = group.get(label, 0.0) + weight
        cases.append(models[str(keys[a])].contrast({a: 1.0, b: -1.0}) if keys[a] == keys[b]
                     else Contrast(math.nan, math.nan, math.nan))
    parts = [(1.0, models[key].contrast(weights)) for key, weights in by_group.items()]
    return (parts[0][1] if len(parts) == 1 else combine(parts)), cases
