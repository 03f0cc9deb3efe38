"""The study's model: one linear model of the log launch means, and every comparison a contrast of it.

The unit is the launch (one job: one start, one placement, one page cache, one boot): the
repetitions inside a launch share all of that and are never counted as independent. Each launch
contributes its mean over its kept repetitions, and over all launches of a group

    log(launch mean) = scenario + round [+ node] + error,   var(error) = σ²_g for variance group g

is fitted by least squares (statsmodels): the scenario (one summary row) is a cell, the round of
the study's interleaved order is a block (the machine's drift between rounds), and where the
launches ran on several nodes of one kind of hardware the node is a block too. Round and node are
sum-coded, so a cell's coefficient is its log mean averaged over the blocks. A model covers one
``GROUP`` (the launches of one site, tool and kind of hardware, emulated rows apart).

The residual variance: one per variance group (``VARIANCE_GROUP``: the platform), chosen by the
data. Brown–Forsythe on the ordinary least squares residuals (replicated cells, groups of three or
more) at ``VARIANCE_ALPHA``: below it, and with every group keeping at least ``MIN_GROUP_DF``
residual df, each group gets its own variance σ²_g = RSS_g / df_g with df_g = Σ_g (1 − h_ii) (the
leverages of the weighted fit, so the df sum to the model's n − rank), refitted by weighted least
squares with weights 1/σ²_g until the variances settle (feasible GLS); else one pooled variance
(plain OLS). A contrast's variance is then Σ_g v_g (v_g: the part group g's noise contributes), on
Satterthwaite's df (Σ v_g)² / Σ (v_g² / df_g); with one variance that is the OLS t-test.

A comparison is a linear contrast of the cells (``Model.contrast``): on the log scale, so a ratio
``exp(c)`` with the asymmetric interval ``exp(c ± t · se)``. Contrasts of two independent models
(two groups) are combined with Welch–Satterthwaite degrees of freedom (``combine``). A cell of one
launch has no replication of its own: the claims do not take it as evidence
(``dlvirt.analysis.claims``), though it is fitted.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from dlvirt.analysis.columns import MODEL_COLUMNS
from dlvirt.core.calibration import Components

LAUNCH_MEANS = "round_means_s"  # a summary row's launch means, in the order of launch_rounds
LAUNCH_ROUNDS = "launch_rounds"  # the round (replicate) of each launch
LAUNCH_NODES = "launch_nodes"  # the node (host name) each launch ran on
LAUNCH_BOOTS = "launch_boot_s"  # each launch's platform boot time (platforms that boot)
GROUP = ["site", "tool", "hardware", "emulated"]  # the rows whose launches one model covers
VARIANCE_GROUP = "platform"  # within a model, the rows that may get a residual variance of their own
DECISION_LEVEL = 0.90  # two one-sided tests at 5 % each
# a liberal level: a missed difference in spread costs the noisier group its error rate, a needless
# split only some df
VARIANCE_ALPHA = 0.20
MIN_GROUP_DF = 2.0  # a group with fewer residual df keeps the pooled variance (no split)
REFITS = 5  # feasible GLS: weighted refits until the group variances settle (they do in 2-3)


def split(cell: object) -> list[str]:
    """The items of a ``;``-joined summary cell ("" or NaN: none)."""
    if cell is None or (isinstance(cell, float) and math.isnan(cell)):
        return []
    return [part for part in str(cell).split(";") if part != ""]


@dataclass(frozen=True)
class Contrast:
    """A contrast on the log scale: its estimate, standard error and degrees of freedom."""

    log: float
    se: float
    df: float
    launches: int = 0  # the launches of the cells it weighs (n)

    @property
    def ratio(self) -> float:
        return math.exp(self.log)

    @property
    def testable(self) -> bool:
        """A finite, positive standard error on at least one degree of freedom: a zero spread is
        never certainty, and no spread at all is no test."""
        return math.isfinite(self.log) and math.isfinite(self.se) and self.se > 0 and self.df > 0

    def t(self, level: float = DECISION_LEVEL) -> float:
        return float(sps.t.ppf(0.5 + level / 2, self.df))

    def bounds(self, level: float = DECISION_LEVEL) -> tuple[float, float]:
        """The ratio's two-sided ``level`` interval, ``exp(log ± t · se)`` (NaN if not testable)."""
        if not self.testable:
            return math.nan, math.nan
        half = self.t(level) * self.se
        return math.exp(self.log - half), math.exp(self.log + half)

    def half_width(self, level: float = DECISION_LEVEL) -> float:
        """The interval's half-width as a relative effect, ``exp(t · se) − 1``: the smallest effect
        the comparison could have detected."""
        return math.expm1(self.t(level) * self.se) if self.testable else math.nan

    def p_below(self, bound: float) -> float:
        """One-sided p-value of H0: log ≥ bound (against H1: log < bound)."""
        return float(sps.t.cdf((self.log - bound) / self.se, self.df)) if self.testable else math.nan

    def p_above(self, bound: float) -> float:
        """One-sided p-value of H0: log ≤ bound (against H1: log > bound)."""
        return float(sps.t.sf((self.log - bound) / self.se, self.df)) if self.testable else math.nan

    def relative(self) -> str:
        """``+4.1% [90 % CI −1.0%, +9.5%; df 23]``: the ratio − 1 with its asymmetric interval."""
        if not self.testable:
            why = "zero spread" if self.se == 0 else "no interval"
            return f"{self.ratio - 1:+.1%} [{why}]"
        low, high = self.bounds()
        return f"{self.ratio - 1:+.1%} [90 % CI {low - 1:+.1%}, {high - 1:+.1%}; df {self.df:.3g}]"

    def times(self) -> str:
        """``3.52× [90 % CI 3.1×, 4.0×; df 23]``."""
        if not self.testable:
            return f"{self.ratio:.3g}× [no interval]"
        low, high = self.bounds()
        return f"{self.ratio:.3g}× [90 % CI {low:.3g}×, {high:.3g}×; df {self.df:.3g}]"


NO_CONTRAST = Contrast(math.nan, math.nan, math.nan)


def combine(parts: list[tuple[float, Contrast]]) -> Contrast:
    """``Σ wᵢ · cᵢ`` of contrasts from independent models, with Welch–Satterthwaite degrees of freedom."""
    if not parts or not all(c.testable for _, c in parts):
        return NO_CONTRAST
    variances = [(w * c.se) ** 2 for w, c in parts]
    total = sum(variances)
    df = total ** 2 / sum(v * v / c.df for v, (_, c) in zip(variances, parts, strict=True))
    return Contrast(sum(w * c.log for w, c in parts), math.sqrt(total), df, sum(c.launches for _, c in parts))


def with_day(contrast: Contrast, day: Contrast) -> Contrast:
    """``contrast`` with a calibration's ``day`` component added (Welch–Satterthwaite), on at most
    the day's degrees of freedom: the day's variance rests on few blocks, and where it comes out small
    Welch–Satterthwaite would lend the sum the residual's many degrees of freedom (simulated, three
    blocks: 6 of 20 compare pairs with a false slower instead of at most 5 %)."""
    total = combine([(1.0, contrast), (1.0, day)]) if day.se > 0 else contrast
    return Contrast(total.log, total.se, min(total.df, day.df), total.launches)


def day_contrast(parts: list[tuple[float, Components]]) -> Contrast:
    """The day part of a contrast ``Σ w_s · cell_s`` whose cells' platforms have the calibrated
    ``Components`` given: the cells shift independently from day to day (the calibration's day is a
    scenario's shift in a block), so its variance is Σ w_s² σ²_day(s); one estimate per platform, so
    the df are Satterthwaite's over the platforms' (Σ v_p)² / Σ v_p² / df_p."""
    per: dict[int, tuple[float, Components]] = {}
    for weight, c in parts:
        share, _ = per.get(id(c), (0.0, c))
        per[id(c)] = (share + weight * weight, c)
    variances = [(share * c.day, c.day_df) for share, c in per.values() if share > 0]
    total = sum(v for v, _ in variances)
    if not variances:
        return Contrast(0.0, 0.0, math.inf)  # no cell weighed: nothing of the day enters
    if total <= 0 or any(df <= 0 for _, df in variances):
        # measured: no day variance beyond the rounds (or on no df: nothing can be tested), on the fewest df
        return Contrast(0.0, 0.0, min(df for _, df in variances))
    spread = sum(v * v / df for v, df in variances if v > 0)
    return Contrast(0.0, math.sqrt(total), total * total / spread)


def launches(rows: pd.DataFrame, column: str = LAUNCH_MEANS) -> pd.DataFrame:
    """One line per launch of ``rows``: its row (the index label), log value, round, node and
    variance group (``VARIANCE_GROUP``'s value). Rows without launch values (older summaries)
    contribute none."""
    out = []
    for label, row in rows.iterrows():
        values = [float(v) for v in split(row.get(column))]
        rounds = split(row.get(LAUNCH_ROUNDS)) or [str(i + 1) for i in range(len(values))]
        nodes = split(row.get(LAUNCH_NODES)) or [""] * len(values)
        if len(rounds) != len(values):  # e.g. boot times recorded by some launches only
            rounds = [str(i + 1) for i in range(len(values))]
        if len(nodes) != len(values):
            nodes = [""] * len(values)
        variance = str(row.get(VARIANCE_GROUP, ""))
        for value, round_, node in zip(values, rounds, nodes, strict=True):
            if value > 0 and math.isfinite(value):
                out.append({"row": label, "y": math.log(value), "round": round_, "node": node, "variance": variance})
    return pd.DataFrame(out, columns=["row", "y", "round", "node", "variance"])


def _sum_coded(levels: pd.Series) -> pd.DataFrame:
    """Sum-to-zero coding of a block (k − 1 columns; none for a single level)."""
    names = sorted(set(levels))
    if len(names) < 2:
        return pd.DataFrame(index=levels.index)
    out = {}
    for name in names[:-1]:
        out[f"{levels.name}[{name}]"] = (levels == name).astype(float) - (levels == names[-1]).astype(float)
    return pd.DataFrame(out, index=levels.index)


@dataclass(frozen=True)
class Variance:
    """One variance group's residual variance (log scale) and its degrees of freedom."""

    variance: float
    df: float

    @property
    def sd(self) -> float:
        return math.sqrt(self.variance)


class Model:
    """``log(launch mean) ~ 0 + cell + round [+ node]`` over ``data`` (``launches``' output), with
    one residual variance per variance group where the data ask for it (see the module's doc)."""

    def __init__(self, data: pd.DataFrame) -> None:
        self.data = data.reset_index(drop=True)
        if "variance" not in self.data:
            self.data["variance"] = ""
        self.cells: list[Hashable] = list(dict.fromkeys(self.data["row"]))
        cells = pd.DataFrame({f"cell[{i}]": (self.data["row"] == c).astype(float)
                              for i, c in enumerate(self.cells)}, index=self.data.index)
        blocks = [_sum_coded(self.data["round"].rename("round"))]
        if self.data["node"].nunique() > 1:
            blocks.append(_sum_coded(self.data["node"].rename("node")))
        self.x = pd.concat([cells, *blocks], axis=1).to_numpy(dtype=float)
        self.y = self.data["y"].to_numpy(dtype=float)
        # the projection onto the design's row space: a contrast is estimable if it is left unchanged
        self.row_space = np.linalg.pinv(self.x) @ self.x if len(self.y) else np.zeros((0, 0))
        rank = int(round(float(np.trace(self.row_space)))) if len(self.y) else 0
        self.df = float(len(self.y) - rank)
        self.nodes = sorted(set(self.data["node"]) - {""})
        self._launches: dict[Hashable, int] = self.data["row"].value_counts().to_dict()
        self.homogeneity_p = math.nan  # Brown–Forsythe's p over the variance groups (NaN: not testable)
        self.variances: dict[str, Variance] = {}
        self.fit = None
        if not len(self.y) or self.df <= 0:
            return
        import statsmodels.api as sm

        self.fit = sm.OLS(self.y, self.x).fit()
        groups = self.data["variance"].to_numpy()
        self.homogeneity_p, weights = self._homogeneity(groups)
        if weights is not None:
            self.fit = sm.WLS(self.y, self.x, weights=weights).fit()
            self.params, self.cov = np.asarray(self.fit.params), np.asarray(self.fit.cov_params(scale=1.0))
            self._weights = weights
        else:
            self.params, self.cov = np.asarray(self.fit.params), np.asarray(self.fit.cov_params())
            scale = float(self.fit.scale)
            self._weights = np.full(len(self.y), 1.0 / scale) if scale > 0 else np.ones(len(self.y))
            self.variances = {"": Variance(scale, self.df)}
        # per variance group (pooled: one), the launches it covers: a contrast's variance splits by them
        self._members = {name: groups == name for name in self.variances} if self.split else \
            {"": np.ones(len(self.y), dtype=bool)}

    def _leverage_df(self, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The weighted fit's residuals and each launch's 1 − h_ii (its share of the residual df)."""
        wx = self.x * weights[:, None]
        inverse = np.linalg.pinv(self.x.T @ wx)
        residuals = self.y - self.x @ (inverse @ (wx.T @ self.y))
        leverage = np.einsum("ij,jk,ik->i", self.x, inverse, wx)
        return residuals, 1.0 - leverage

    def _homogeneity(self, groups: np.ndarray) -> tuple[float, np.ndarray | None]:
        """Brown–Forsythe's p over the variance groups, and the weights 1/σ²_g of the feasible GLS
        fit where the groups get variances of their own (None: one pooled variance)."""
        assert self.fit is not None
        residuals = np.asarray(self.fit.resid)
        # a cell of one launch has a zero residual by construction: it says nothing of the spread
        counts = self.data["row"].map(self.data["row"].value_counts()).to_numpy()
        kept = [residuals[(groups == name) & (counts > 1)] for name in sorted(set(groups))]
        kept = [r for r in kept if len(r) >= 3]
        if len(kept) < 2:
            return math.nan, None
        p = float(sps.levene(*kept, center="median").pvalue)
        if not p < VARIANCE_ALPHA:
            return p, None
        weights = np.ones(len(self.y))
        variances: dict[str, Variance] = {}
        for _ in range(REFITS):
            residuals, share = self._leverage_df(weights)
            variances = {}
            for name in sorted(set(groups)):
                member = groups == name
                df = float(share[member].sum())
                rss = float((residuals[member] ** 2).sum())
                variances[name] = Variance(rss / df if df > 0 else math.nan, df)
            if any(not v.df >= MIN_GROUP_DF or not v.variance > 0 for v in variances.values()):
                return p, None
            weights = 1.0 / np.array([variances[g].variance for g in groups])
        self.variances = variances
        return p, weights

    @property
    def split(self) -> bool:
        """Whether the variance groups have residual variances of their own."""
        return len(self.variances) > 1

    @property
    def residual_sd(self) -> float:
        """The pooled residual SD (log scale), or NaN without a fit."""
        return math.sqrt(float(self.fit.scale)) if self.fit is not None and not self.split else (
            math.sqrt(sum(v.variance * v.df for v in self.variances.values()) / self.df) if self.split else math.nan)

    def launches_of(self, cell: Hashable) -> int:
        return self._launches.get(cell, 0)

    def contrast(self, weights: Mapping[Hashable, float]) -> Contrast:
        """``Σ w · cell`` (log scale), NaN where not estimable or a cell is not in the model; its
        variance split by the variance groups' shares, on Satterthwaite's df."""
        if self.fit is None or any(c not in self.cells for c in weights):
            return NO_CONTRAST
        vector = np.zeros(self.x.shape[1])
        for cell, weight in weights.items():
            vector[self.cells.index(cell)] += weight
        # estimable: the vector lies in the row space of the design
        if not np.allclose(vector @ self.row_space, vector, atol=1e-8):
            return NO_CONTRAST
        n = sum(self.launches_of(cell) for cell, weight in weights.items() if weight != 0)
        # each launch's part of the contrast's variance: (x_i' Cov c)² / σ²_i; summed per group
        influence = (self.x @ (self.cov @ vector)) ** 2 * self._weights
        parts = {name: float(influence[member].sum()) for name, member in self._members.items()}
        total = sum(parts.values())
        spread = sum(v * v / self.variances[name].df for name, v in parts.items() if v > 0)
        df = total * total / spread if spread > 0 else float(self.df)
        return Contrast(float(vector @ self.params), math.sqrt(max(float(vector @ self.cov @ vector), 0.0)), df, n)

    def cell(self, cell: Hashable) -> Contrast:
        return self.contrast({cell: 1.0})

    def describe(self) -> str:
        """The residual variance(s) in words: pooled, or per group with each SD and df."""
        if self.fit is None:
            return "no fit"
        bf = f"Brown–Forsythe p = {self.homogeneity_p:.2g}" if math.isfinite(self.homogeneity_p) else \
            "spread not comparable between platforms"
        if not self.split:
            return f"one residual variance, σ {self.residual_sd:.1%} (df {self.df:.3g}; {bf})"
        each = ", ".join(f"{name} σ {v.sd:.1%} (df {v.df:.3g})" for name, v in self.variances.items())
        return f"a residual variance per platform ({bf} < {VARIANCE_ALPHA:g}): {each}"


def group_keys(rows: pd.DataFrame) -> pd.Series:
    """Each row's pooling group (``GROUP``'s columns that ``rows`` have)."""
    present = [c for c in GROUP if c in rows]
    if not present or rows.empty:
        return pd.Series("all", index=rows.index)
    return rows[present].astype(str).agg(" | ".join, axis=1)


def fit_groups(rows: pd.DataFrame, column: str = LAUNCH_MEANS) -> dict[str, Model]:
    """One model per pooling group of ``rows``."""
    keys = group_keys(rows)
    return {str(key): Model(launches(rows[keys == key], column)) for key in keys.unique()}


def model_columns(frame: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    """``frame`` (a summary) with each row's interval from its group's model beside its own:
    ``model_mean_s`` (the exp of its cell, a geometric mean adjusted for the rounds), its
    ``level`` interval ``model_low_s`` / ``model_high_s``, and ``model_df``."""
    if frame.empty or LAUNCH_MEANS not in frame:
        return frame
    rows = frame.assign(emulated=frame["accel"].astype(str).eq("tcg") if "accel" in frame else False)
    keys = group_keys(rows)
    out = frame.copy()
    for column in MODEL_COLUMNS:
        out[column] = math.nan
    for key in keys.unique():
        model = Model(launches(rows[keys == key]))
        for label in model.cells:
            c = model.cell(label)
            low, high = c.bounds(level)
            out.loc[label, MODEL_COLUMNS] = [
                math.exp(c.log) if math.isfinite(c.log) else math.nan, low, high, c.df]
    return out
