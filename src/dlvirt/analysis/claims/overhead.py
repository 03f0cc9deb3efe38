"""How the virtualisation overhead over bare metal depends on idle host cores: CN's overhead as the
container-to-host core ratio falls (§V-A), the overhead without idle host cores (§V-C, Fig. 9),
and CN as the cheapest virtualised platform at CHR = 1 (§V-H, Fig. 11)."""

from __future__ import annotations

from collections.abc import Hashable

import pandas as pd

from dlvirt.analysis.claims.study import Study, pairs
from dlvirt.analysis.claims.verdicts import Part, Verdict, decide, higher, lower, untestable
from dlvirt.core.scenario import LOCAL_SITE

VIRTUALISED = ("CN", "VM", "VMCN", "MVM")
Weights = dict[Hashable, float]


def _add(total: Weights, weights: Weights, scale: float) -> None:
    for label, weight in weights.items():
        total[label] = total.get(label, 0.0) + scale * weight


def _overhead_change(full: tuple[Hashable, Hashable], idle: tuple[Hashable, Hashable]) -> Weights:
    """log(P/BM at ``full``) − log(P/BM at ``idle``): > 0 when the overhead grows from idle to full."""
    return {full[0]: 1.0, full[1]: -1.0, idle[0]: -1.0, idle[1]: 1.0}


def cn_overhead_grows_as_chr_falls(study: Study) -> Verdict:
    if study.host_cores is None:
        return untestable(["the host's core count is unknown (no host.json)"])
    vanilla = study.e2e[(study.e2e["pinning"] == "VNL") & study.e2e["platform"].isin(["CN", "BM"])]
    found = pairs(vanilla, "platform", "CN", "BM", ["app", "cores", "processor"])
    total: Weights = {}
    cases = []
    lines: dict[tuple[str, str], list[tuple[int, Hashable, Hashable]]] = {}
    for a, b, j in found:
        lines.setdefault((j["app"], j["processor"]), []).append((int(j["cores"]), a, b))
    tested = [(key, sorted(levels)) for key, levels in lines.items() if len({c for c, _, _ in levels}) >= 2]
    for (app, processor), levels in tested:
        (low_cores, *low), (high_cores, *high) = levels[0], levels[-1]
        # CN/BM at the lowest CHR over CN/BM at the highest: > 1 when the overhead grows as CHR falls
        weights = _overhead_change((low[0], low[1]), (high[0], high[1]))
        _add(total, weights, 1.0 / len(tested))
        cases.append(f"{app.upper()}/{processor} CN/BM at {low_cores / study.host_cores:.2f} CHR over "
                     f"{high_cores / study.host_cores:.2f} CHR {study.contrast(weights).relative()}")
    if not tested:
        return untestable(["no vanilla CN and BM rows at two or more core counts",
                           *study.why_missing(platforms=("CN",))])
    part = Part(f"CN/BM at the lowest over the highest CHR, over {len(tested)} app(s)", study.contrast(total),
                higher("overhead grows as CHR falls", study.margin), cases)
    return decide([part], notes=study.notes)


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
    total: Weights = {}
    found = []
    for platform in ("CN", "VM", "VMCN"):
        for pinning in ("VNL", "PIN"):
            at = {}
            for level in (idle_level, cores):
                here = rows[(rows["cores"] == level) & (rows["pinning"] == pinning)]
                labels = {p: here.index[here["platform"] == p] for p in (platform, "BM")}
                if all(len(v) == 1 for v in labels.values()):
                    at[level] = (labels[platform][0], labels["BM"][0])
            if len(at) == 2:
                found.append((f"{platform} {pinning}", _overhead_change(at[cores], at[idle_level])))
    if not found:
        return untestable([f"no CN, VM or VMCN IC rows with BM at both {idle_level} and {cores} cores",
                           *study.why_missing(app="ic", processor="CPU", platforms=("CN", "VM", "VMCN"))])
    cases = []
    for name, weights in found:
        _add(total, weights, 1.0 / len(found))
        cases.append(f"{name}: overhead at {cores} over at {idle_level} cores {study.contrast(weights).relative()}")
    part = Part(f"overhead over BM at {cores} (no idle core) over at {idle_level} cores, over {len(found)} case(s)",
                study.contrast(total), higher("overhead grows without idle host cores", study.margin), cases)
    return decide([part], notes=study.notes)


def _chr1_rows(study: Study) -> list[tuple[str, pd.DataFrame]]:
    """Per host, app and processor: the vanilla rows at CHR = 1 (an edge device at its largest level)."""
    groups = []
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
    return groups


def cn_cheapest_at_chr1(study: Study) -> Verdict:
    against: dict[str, list[tuple[str, Hashable, Hashable]]] = {}
    for where, group in _chr1_rows(study):
        virt = group[group["platform"].str.split("(").str[0].isin(VIRTUALISED)]
        cn = virt.index[virt["platform"] == "CN"]
        if len(cn) != 1:
            continue
        for label, other in virt[virt["platform"] != "CN"]["platform"].items():
            against.setdefault(str(other), []).append((where, cn[0], label))
    parts = []
    for other, found in sorted(against.items()):
        cases = [f"{where}: CN/{other} {study.difference(cn, o).relative()}" for where, cn, o in found]
        parts.append(Part(f"CN/{other} at CHR = 1 over {len(found)} app(s) and host(s)",
                          study.average((cn, o) for _, cn, o in found), lower(f"CN cheaper than {other}", study.margin),
                          cases))
    if not parts:
        return untestable(["no CN and another virtualised platform, vanilla, at CHR = 1",
                           *study.why_missing(platforms=VIRTUALISED)])
    return decide(parts, notes=study.notes)
