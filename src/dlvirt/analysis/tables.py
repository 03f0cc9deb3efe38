"""The paper's Tables I and II, built from the run records (what each platform and app really were).

Table 1 (apps): model, framework, dataset and whether it was synthetic, weights, requests per
workload, GPU support. Table 2 (platforms as measured): engine or hypervisor and its version,
accelerator, the kernel the harness saw inside, image, CPU modes, framework versions inside.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from dlvirt.analysis.catalog import E2E_TOOL
from dlvirt.analysis.plandoc import PlanDocument
from dlvirt.core import formats
from dlvirt.core.atomic import write_text_atomic
from dlvirt.core.formats import read_document
from dlvirt.core.scenario import LOCAL_SITE
from dlvirt.plan.leftout import reasons

TABLE2_COLUMNS = ["platform", "site", "engine", "hypervisor", "engine_version", "accelerator", "accelerator_note",
                  "guest_kernel", "kernel_inside", "image", "cpu_modes", "cpu_mechanisms", "processors", "cores",
                  "frameworks", "python", "jobs"]


def _joined(values: Iterable[Any]) -> str:
    items = sorted({str(v) for v in values if v not in (None, "")})
    return ", ".join(items) if items else "-"


def _site(record: dict[str, Any]) -> str:
    return str(record.get("site") or LOCAL_SITE)  # the edge runner sets it (dlvirt.run.remote)


def _gpu_support(app: dict[str, Any]) -> str:
    return "yes" if "GPU" in app["processors"] else f"no: {app['why_no_gpu']}"


def app_table(records: list[dict[str, Any]], plan: PlanDocument) -> pd.DataFrame:
    """One row per registered app (its declared facts from plan.json), filled from its run records."""
    rows = []
    for kind in plan.kinds.apps:
        app = kind["name"]
        mine = [r for r in records if r["app"] == app]
        if not mine and kind.get("check"):
            continue  # a plumbing check (the noop app): a row only where a study ran it
        if not mine:
            rows.append({"app": app.upper(), "application": kind["title"], "model": kind["model"],
                         "framework": kind["framework"], "dataset": kind["dataset"], "dataset_source": "-",
                         "weights": "-", "requests_per_workload": "-", "batch_size": "-",
                         "gpu_support": _gpu_support(kind), "gpu_measured": "no", "tools": "-", "jobs": 0,
                         "note": "no runs: " + ("; ".join(reasons(plan.left_out, tool=E2E_TOOL, app=app))
                                                or "none planned")})
            continue
        rows.append({
            "app": app.upper(),
            "application": kind["title"],
            "model": _joined(r["model"].get("model") for r in mine),
            "framework": _joined(r["model"].get("framework") for r in mine),
            "dataset": _joined(r["dataset"].get("dataset") for r in mine),
            "dataset_source": _joined(r["dataset"].get("source") for r in mine),
            "weights": _joined(r["model"].get("weights") for r in mine),
            "requests_per_workload": _joined(run["samples"] for r in mine for run in r["runs"]),
            "batch_size": _joined(r["spec"].get("batch_size") for r in mine),
            "gpu_support": _gpu_support(kind),
            "gpu_measured": "yes" if any(r["scenario"]["processor"] == "GPU" for r in mine) else "no",
            "tools": _joined(r["tool"] for r in mine),
            "jobs": len(mine),
            "note": "",
        })
    return pd.DataFrame(rows)


def _engine_version(described: list[dict[str, Any]], host: dict[str, Any]) -> str:
    """Versions the platform recorded itself, asked of its daemons and binaries; else (results
    from before they did) the host's engine that its engine or hypervisor names (libvirt →
    libvirtd, qemu → qemu), as results/host.json got it from the daemon."""
    own = {f"{k}={v}" for d in described for k, v in d.items() if k.endswith("_version") and v}
    if own:
        return ", ".join(sorted(own))
    words = {w.lower() for d in described for key in ("engine", "vmm") for w in str(d.get(key) or "").split()}
    found = [f"{name} {facts['version']} (host)" for name, facts in (host.get("engines") or {}).items()
             if facts.get("version") and any(name.startswith(w) or w.startswith(name) for w in words)]
    return "; ".join(found) if found else "-"


def platform_table(records: list[dict[str, Any]], host: dict[str, Any], plan: PlanDocument) -> pd.DataFrame:
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for record in records:
        key = (_site(record), record["scenario"]["platform"], str(record["platform"].get("accel", "none")))
        groups.setdefault(key, []).append(record)
    rank = {p: i for i, p in enumerate(plan.kinds.platform_order)}
    frameworks = plan.kinds.framework_packages  # as the apps declare them
    rows = []
    for (site, platform, accel), mine in sorted(groups.items(), key=lambda kv: (kv[0][0], rank[kv[0][1]], kv[0][2])):
        described = [r["platform"] for r in mine]
        rows.append({
            "platform": platform,
            "site": site,
            "engine": _joined(d.get("engine") for d in described),
            "hypervisor": _joined(d.get("vmm") for d in described),
            "engine_version": _engine_version(described, host),
            "accelerator": accel,
            "accelerator_note": _joined(d.get("accel_note") for d in described),
            "guest_kernel": _joined(Path(str(d["kernel"])).name for d in described if d.get("kernel")),
            "kernel_inside": _joined(run["observed"].get("kernel") for r in mine for run in r["runs"]),
            "image": _joined(Path(str(d["image"])).name for d in described if d.get("image")),
            "cpu_modes": _joined(r["scenario"]["pinning"] for r in mine),
            "cpu_mechanisms": _joined(d.get("cpu_mechanism") for d in described),
            "processors": _joined(r["scenario"]["processor"] for r in mine),
            "cores": ", ".join(str(c) for c in sorted({int(r["scenario"]["cores"]) for r in mine})),
            "frameworks": _joined(f"{name} {r['versions'][name]}" for r in mine for name in frameworks
                                  if name in r.get("versions", {})),
            "python": _joined(r.get("versions", {}).get("python") for r in mine),
            "jobs": len(mine),
        })
    return pd.DataFrame(rows, columns=TABLE2_COLUMNS)


def write_tables(runs: list[Path], host: Path, plan: Path, table1: Path, table2: Path) -> None:
    records = [read_document(p, "run record") for p in runs]
    study = PlanDocument.load(plan)
    write_text_atomic(table1, _stamped(app_table(records, study)).to_csv(index=False))
    write_text_atomic(table2, _stamped(platform_table(records, read_document(host, "host facts"), study))
                      .to_csv(index=False))


def _stamped(table: pd.DataFrame) -> pd.DataFrame:
    """The table with its format version as the last column (dlvirt.core.formats)."""
    return table.assign(**{formats.KEY: formats.version("table")})
