"""Scale-up stops paying beyond a level (§V-D; Figs. 4b, 6, 7a). The paper's lines flatten beyond
8 cores, so the claim is tested only on steps that start at ``SCALE_UP_FROM`` cores or more: a host
without two such levels cannot test it (a 2-core host's 1→2 step says nothing about 8→16)."""

from __future__ import annotations

from dlvirt.analysis.claims.study import Study
from dlvirt.analysis.claims.verdicts import Part, Verdict, decide, gains_less, untestable

SCALE_UP_FROM = 8  # the smallest level a tested step may start from


def scale_up_stops_paying(study: Study) -> Verdict:
    steps = []
    best: dict[int, int] = {}
    for (app, platform, pinning, processor), line in study.e2e.groupby(["app", "platform", "pinning", "processor"]):
        levels = line[line["cores"] >= SCALE_UP_FROM].sort_values("cores")
        if levels["cores"].nunique() < 2:
            continue
        best_level = int(line.loc[line["mean_s"].idxmin(), "cores"])
        best[best_level] = best.get(best_level, 0) + 1
        last, prev = levels.index[-1], levels.index[-2]
        steps.append((f"{app.upper()} {platform}/{pinning}/{processor} {int(levels.loc[prev, 'cores'])}→"
                      f"{int(levels.loc[last, 'cores'])} cores", last, prev))
    if not steps:
        host = f"; this host has {study.host_cores} cores" if study.host_cores is not None else ""
        return untestable([f"the claim is about scale-up steps from {SCALE_UP_FROM} cores on: no platform line "
                           f"measured two levels of {SCALE_UP_FROM} cores or more{host}", *study.why_missing()])
    cases = [f"{name} {study.difference(last, prev).relative()}" for name, last, prev in steps]
    levels = ", ".join(f"{level} cores in {n}" for level, n in sorted(best.items()))
    part = Part(f"last step (last/previous level) over {len(steps)} line(s); fastest level: {levels}",
                study.average((last, prev) for _, last, prev in steps),
                gains_less(f"gains less than {study.margin:.0%}", study.margin), cases)
    return decide([part], notes=study.notes)
