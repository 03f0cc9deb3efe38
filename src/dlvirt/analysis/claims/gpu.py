"""A GPU speeds NLP up by more than 3×, but IC and RS much less (§IV-C, §IV-D; Figs. 7b, 8b): one
part per app, the average CPU/GPU time ratio over the platforms, cores and CPU modes both ran."""

from __future__ import annotations

from dlvirt.analysis.claims.study import Study, pairs
from dlvirt.analysis.claims.verdicts import Part, Verdict, above, below, decide
from dlvirt.analysis.model import Contrast

GPU_NLP_SPEEDUP = 3.0  # "more than 3× speedup"


def gpu_speeds_nlp_not_ic_rs(study: Study) -> Verdict:
    parts, missing = [], []
    for app in ("nlp", "ic", "rs"):
        found = pairs(study.e2e[study.e2e["app"] == app], "processor", "CPU", "GPU", ["platform", "cores", "pinning"])
        if not found:
            missing.append(f"{app.upper()}: no CPU and GPU pair"
                           + "".join(f" ({w})" for w in study.why_missing(app=app, processor="GPU")[:1]))
            continue
        cases = [f"{j['platform']}/{j['cores']}/{j['pinning']} {study.difference(a, b).times()}" for a, b, j in found]
        hypothesis = (above if app == "nlp" else below)(
            f"GPU speed-up {'above' if app == 'nlp' else 'below'} {GPU_NLP_SPEEDUP:g}×", GPU_NLP_SPEEDUP)
        parts.append(Part(f"{app.upper()} CPU/GPU over {len(found)} pair(s)",
                          study.average((a, b) for a, b, _ in found), hypothesis, cases, Contrast.times))
    return decide(parts, missing, study.notes)
