"""MVM performs like VM except for I/O-heavy NLP, and MVM boots faster (§V-G; Fig. 10): per VMM,
on vanilla CPU rows at equal cores, one part per app (the average over its core counts): MVM/VM
within the margin for IC, SR and RS (TOST: the claim names each app, and an average over apps
would let a 10 % gap on one hide behind another); MVM slower for NLP; and MVM's boot time lower,
compared like with like (the same app and cores, from each launch's recorded boot time)."""

from __future__ import annotations

from dlvirt.analysis.claims.study import Study, pairs
from dlvirt.analysis.claims.verdicts import Part, Verdict, alike, decide, higher, lower
from dlvirt.analysis.model import LAUNCH_BOOTS


def mvm_like_vm_but_nlp_and_boots_faster(study: Study) -> Verdict:
    rows = study.e2e[(study.e2e["pinning"] == "VNL") & (study.e2e["processor"] == "CPU")]
    why = "".join(f" ({w})" for w in study.why_missing(platforms=("MVM", "VM"), processor="CPU")[:1])
    parts, missing = [], []
    for mvm in study.mvm_platforms() or ["MVM"]:
        found = pairs(rows, "platform", mvm, "VM", ["app", "cores"])
        by_app = {app: [(a, b, j) for a, b, j in found if j["app"] == app] for app in ("ic", "sr", "rs", "nlp")}
        if not any(by_app[app] for app in ("ic", "sr", "rs")):
            missing.append(f"no {mvm} and VM pair (vanilla, CPU, same cores) for IC, SR or RS{why}")
        if not by_app["nlp"]:
            missing.append(f"no NLP {mvm} and VM pair{why}")
        for app, chosen in by_app.items():
            if not chosen:
                continue
            name = f"{app.upper()} {mvm}/VM"
            hypothesis = (higher(f"{mvm} slower than VM for I/O-heavy NLP", study.margin) if app == "nlp"
                          else alike(f"{mvm} like VM", study.margin))
            cases = [f"{j['app'].upper()} {j['cores']} cores {study.difference(a, b).relative()}" for a, b, j in chosen]
            parts.append(Part(f"{name} over {len(chosen)} pair(s)", study.average((a, b) for a, b, _ in chosen),
                              hypothesis, cases))
        booted = [(a, b, j) for a, b, j in found if study.boot_models and _boots(study, a) and _boots(study, b)]
        if booted:
            cases = [f"{j['app'].upper()} {j['cores']} cores {study.difference(a, b, boot=True).relative()}"
                     for a, b, j in booted]
            parts.append(Part(f"{mvm}/VM boot time over {len(booted)} pair(s) of the same app and cores",
                              study.average(((a, b) for a, b, _ in booted), boot=True),
                              lower(f"{mvm} boots faster", study.margin), cases))
        else:
            missing.append(f"boot times of {mvm} and VM at the same app and cores ({LAUNCH_BOOTS})")
    return decide(parts, missing, study.notes)


def _boots(study: Study, label: object) -> bool:
    return any(model.launches_of(label) >= 1 for model in study.boot_models.values())
