"""Pinning lowers E2E time on each platform (§V-B): one part per platform, the average PIN/VNL
contrast over the apps, core counts (below the host's) and processors both ran."""

from __future__ import annotations

from dlvirt.analysis.claims.study import Study, pairs
from dlvirt.analysis.claims.verdicts import Part, Verdict, decide, lower, untestable


def pinning_lowers_e2e(study: Study) -> Verdict:
    rows = study.e2e
    if study.host_cores is not None:
        rows = rows[rows["cores"] < study.host_cores]  # pinned to every host core restricts nothing
    parts = []
    for platform in [p for p in ("BM", "CN", "VM", "VMCN") if p in set(rows["platform"])]:
        found = pairs(rows[rows["platform"] == platform], "pinning", "PIN", "VNL", ["app", "cores", "processor"])
        if not found:
            continue
        cases = [f"{j['app'].upper()} {j['cores']} cores {j['processor']} {study.difference(a, b).relative()}"
                 for a, b, j in found]
        parts.append(Part(f"{platform} PIN/VNL over {len(found)} pair(s)", study.average((a, b) for a, b, _ in found),
                          lower("PIN faster", study.margin), cases))
    if not parts:
        cores = f" below the host's {study.host_cores} cores" if study.host_cores else ""
        return untestable([f"no platform measured both VNL and PIN{cores}", *study.why_missing()])
    return decide(parts, notes=study.notes)
