"""``results/report.html``: one self-contained page (figures embedded) a reader can open anywhere.

Host, provenance (config hash, versions, synthetic vs real data, random vs real weights), the matrix
that ran and what was left out and why, every figure with a reading of what it shows on this host,
the phase breakdown per app, the paper's tables, and the verdict on each of the paper's claims.
"""

from __future__ import annotations

import base64
import datetime as dt
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

from dlvirt.analysis import interference
from dlvirt.analysis.calibrate import plain_words
from dlvirt.analysis.catalog import BY_ID, E2E_TOOL, FIGURES, FigureSpec
from dlvirt.analysis.claims import PART_COLUMNS
from dlvirt.analysis.claims.study import MIN_LAUNCHES
from dlvirt.analysis.claims.verdicts import ALPHA
from dlvirt.analysis.columns import read_table
from dlvirt.analysis.plandoc import PlanDocument
from dlvirt.analysis.rows import (
    PHASES,
    edge_sites,
    host_virtualization,
    latency_beside_throttling,
    load_summaries,
    main_site,
    overhead_beside_mechanism,
    phase_shares,
    present,
    scenario_order,
    select,
)
from dlvirt.core.atomic import write_text_atomic
from dlvirt.core.calibration import read_calibration, require
from dlvirt.core.formats import read_document
from dlvirt.core.machinetime import hours, launch_machine_s, split_line, split_totals, totals_line
from dlvirt.core.records import read_run_records
from dlvirt.plan.leftout import reasons

TEMPLATE = Path(__file__).parent / "templates" / "report.html.j2"


def _png_data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def _rows_for(spec: FigureSpec, frame: pd.DataFrame) -> pd.DataFrame:
    rows = edge_sites(frame) if spec.edge else main_site(frame)
    return select(rows, tool=spec.tool, app=spec.apps, processor=spec.processors)


def _value(row: pd.Series) -> str:
    ci = "" if pd.isna(row["ci95_s"]) else f" ± {row['ci95_s']:.3g}"
    return f"{row['app'].upper()} {row['scenario']} {row['mean_s']:.3g}{ci} s"


def on_this_host(spec: FigureSpec, frame: pd.DataFrame, plan: PlanDocument) -> str:
    """A data-driven sentence about the figure's rows on this host."""
    rows = _rows_for(spec, frame)
    if rows.empty:
        why = [r for app in spec.apps for r in reasons(plan.left_out, tool=spec.tool, app=app)]
        site = "on an edge host" if spec.edge else "on this host"
        return f"Not measured {site}: " + ("; ".join(dict.fromkeys(why)) or "no rows in the summary") + "."
    if spec.id.startswith("phases_"):
        shares = phase_shares(rows).mean()
        parts = ", ".join(f"{name} {shares[col]:.0%}" for col, name in PHASES.items() if pd.notna(shares[col]))
        return f"Averaged over its {len(rows)} scenario(s), {spec.apps[0].upper()} spends: {parts}."
    if spec.id.startswith("latency_"):
        return _latency_reading(rows, plan)
    platforms = present(plan.kinds.platform_order, rows)
    fastest = rows.loc[rows["mean_s"].idxmin()]
    slowest = rows.loc[rows["mean_s"].idxmax()]
    tcg = int((rows["accel"].astype(str) == "tcg").sum()) if "accel" in rows else 0
    text = (f"On this host: {len(rows)} scenario(s) on {', '.join(platforms)}; fastest {_value(fastest)}, "
            f"slowest {_value(slowest)}.")
    if tcg:
        text += f" {tcg} of them ran emulated (TCG) and are marked as such."
    return text


def _latency_reading(rows: pd.DataFrame, plan: PlanDocument) -> str:
    """The latency figure's rows on this host: where the tail moved most against the baseline."""
    baseline = plan.kinds.baseline
    table = latency_beside_throttling(rows, baseline)
    ratios = table.dropna(subset=[f"p99/{baseline}"]) if not table.empty else table
    ratios = ratios[ratios["platform"] != baseline] if not ratios.empty else ratios
    text = f"On this host: {len(table)} latency row(s)."
    if not ratios.empty:
        top = ratios.loc[ratios[f"p99/{baseline}"].idxmax()]
        throttled = "" if pd.isna(top["throttled share"]) else f", throttled {top['throttled share']:.0%}"
        text += (f" The largest p99 over {baseline}: {top['app']} {top['scenario']} p99 ×{top[f'p99/{baseline}']:.2f}, "
                 f"p50 ×{top[f'p50/{baseline}']:.2f}{throttled}.")
    queries = pd.to_numeric(table["queries"], errors="coerce") if not table.empty else pd.Series(dtype=float)
    if queries.notna().any() and queries.min() < 100:
        text += (f" The fewest queries in a repetition: {int(queries.min())}. Below 100 a repetition's p99 is its "
                 "largest latency or next to it: read it as the tail of that many queries, not as a "
                 "one-in-a-hundred latency.")
    early = int((table["early stopping"].astype(str).str.lower() != "true").sum()) if not table.empty else 0
    if early:
        text += (f" {early} row(s) did not meet LoadGen's early stopping (too few queries for its own p99 "
                 "confidence): LoadGen calls them INVALID; their launches still count here.")
    return text


def latency_table(frame: pd.DataFrame, plan: PlanDocument) -> pd.DataFrame:
    """The latency rows (SingleStream, Server) of the main host, normalised to the baseline."""
    if frame.empty or "p50_s" not in frame:
        return pd.DataFrame()
    rows = scenario_order(main_site(frame[frame["p50_s"].notna()]), plan.kinds)
    return latency_beside_throttling(rows, plan.kinds.baseline).drop(
        columns=["platform", "cores", "pinning", "processor"], errors="ignore")


def _figure_entries(figures: dict[str, Path], frame: pd.DataFrame, plan: PlanDocument,
                    claims: pd.DataFrame) -> list[dict[str, Any]]:
    verdicts = dict(zip(claims["id"], claims["verdict"], strict=True)) if not claims.empty else {}
    entries = []
    for fig_id, png in figures.items():
        spec = BY_ID[fig_id]
        entries.append({
            "id": fig_id, "title": spec.title, "src": _png_data_uri(png), "shows": spec.shows, "paper": spec.paper,
            "host": on_this_host(spec, frame, plan),
            "claims": [(c, verdicts.get(c, "?")) for c in spec.claims],
            "phases": fig_id.startswith("phases_"),
            "measured": not _rows_for(spec, frame).empty,
        })
    return entries


def claim_parts(claim: dict[str, Any]) -> list[dict[str, str]]:
    """A claims.csv row's tested parts, each with its margin, estimate and 90 % interval (ratio − 1),
    df, launches (n) and outcome, as the report shows them."""
    if pd.isna(claim.get("part")) or str(claim.get("part")) == "":
        return []
    columns = {c: str(claim[c]).split(";") for c in PART_COLUMNS}

    def relative(value: str) -> str:
        return f"{float(value) - 1:+.1%}" if value not in ("", "nan") else "–"

    return [{"part": columns["part"][i], "margin": columns["margin"][i],
             "estimate": relative(columns["ratio"][i]),
             "interval": f"[{relative(columns['ratio_low'][i])}, {relative(columns['ratio_high'][i])}]",
             "df": f"{float(columns['df'][i]):.3g}" if columns["df"][i] not in ("", "nan") else "–",
             "n": columns["launches"][i], "outcome": columns["outcome"][i]} for i in range(len(columns["part"]))]


def _claim_rows(claim_id: str, frame: pd.DataFrame) -> pd.DataFrame:
    """The rows the figures a claim bears on draw: what its verdict read."""
    parts = [_rows_for(spec, frame) for spec in FIGURES if claim_id in spec.claims]
    parts = [part for part in parts if not part.empty]
    return pd.concat(parts).drop_duplicates(subset=["tool", "app", "scenario", "site"]) if parts else frame.iloc[0:0]


def _claims(claims: pd.DataFrame, frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The claims table's rows, each with why interference may have decided an inconclusive one (or None)."""
    return [{**row, "parts": claim_parts(row),
             "interference": interference.claim_note(row["verdict"], _claim_rows(row["id"], frame))}
            for row in claims.to_dict("records")]


def _provenance(frame: pd.DataFrame) -> list[dict[str, str]]:
    if frame.empty:
        return []
    out = []
    for (tool, app), rows in frame.groupby(["tool", "app"]):
        out.append({"tool": tool, "app": app.upper(),
                    "dataset": ", ".join(sorted(set(rows["dataset_source"].astype(str)))),
                    "weights": ", ".join(sorted(set(rows["weights"].astype(str)))),
                    # which dlvirt code measured the rows (summary rows from older results lack it)
                    "code": ", ".join(sorted(set(rows["code_version"].astype(str)))) if "code_version" in rows
                    else "not recorded"})
    return out


def _platform_memory(frame: pd.DataFrame) -> str:
    """study.memory as the rows' platforms applied it (summaries from older results lack it)."""
    sizes = sorted({int(v) for v in frame.get("memory_mib", pd.Series(dtype=float)).dropna()})
    if not sizes:
        return "not recorded"
    return (" and ".join(f"{mib} MiB" for mib in sizes) + " (study.memory): the cgroup memory limit of bare metal "
            "and of every container; a guest's RAM is that plus its overhead (guest_ram_mib in the run files)")


def _engines(engines: dict[str, dict[str, Any]] | None) -> str:
    """Each engine's version as its daemon (or, not running, its binary) gave it to host facts."""
    found = [f"{name} {facts['version']} ({facts.get('source')})" for name, facts in (engines or {}).items()
             if facts.get("version")]
    return "; ".join(found) or "none recorded"


def _frequency(freq: dict[str, Any] | None) -> str:
    if not freq:
        return "not recorded"
    if freq.get("driver") is None:
        return "no cpufreq (the hypervisor or firmware sets the clock)"
    boost = {True: "on", False: "off", None: "unknown"}[freq.get("boost")]
    return f"driver {freq['driver']}, governor {freq.get('governor')}, boost/turbo {boost}"


def _phase_table(frame: pd.DataFrame, plan: PlanDocument) -> pd.DataFrame:
    rows = scenario_order(select(main_site(frame), tool=E2E_TOOL), plan.kinds) if not frame.empty else frame
    if rows.empty:
        return pd.DataFrame()
    shares = phase_shares(rows).rename(columns={c: f"{n} share" for c, n in PHASES.items()})
    table = pd.concat([rows[["app", "scenario", "mean_s", "ci95_s"]], shares], axis=1)
    table["app"] = table["app"].str.upper()
    return table


DRIFT_ALPHA = 0.05


def _text(cell: object) -> str:
    return "" if cell is None or pd.isna(cell) else str(cell)


def drift_table(frame: pd.DataFrame) -> pd.DataFrame:
    """E2E of each scenario by round (launch means in round order) and whether they trend: a least-
    squares slope over the rounds, flagged when its two-sided p-value is below 0.05 (three or more
    rounds; two rounds show the change only)."""
    if frame.empty or "round_means_s" not in frame:
        return pd.DataFrame()
    rows = []
    for _, row in frame.iterrows():
        means = [float(v) for v in str(row["round_means_s"]).split(";") if v not in ("", "nan")]
        if len(means) < 2:
            continue
        p = row.get("drift_p")
        flagged = bool(pd.notna(p) and float(p) < DRIFT_ALPHA)
        rows.append({"tool": row["tool"], "app": str(row["app"]).upper(), "scenario": row["scenario"],
                     "E2E by round (s)": " → ".join(f"{m:.4g}" for m in means),
                     "last vs first": f"{means[-1] / means[0] - 1:+.1%}",
                     "trend p": p if pd.notna(p) else None,
                     "drift": "TREND" if flagged else ("" if len(means) >= 3 else "needs ≥ 3 rounds"),
                     "outlier launch": _text(row.get("outlier_launches"))})
    return pd.DataFrame(rows)


def _html_table(frame: pd.DataFrame, classes: str = "data") -> str:
    if frame.empty:
        return "<p class='none'>(no rows)</p>"
    formatted = frame.copy()
    for column in formatted.columns:
        if column.endswith(" share"):
            formatted[column] = formatted[column].map(lambda v: "" if pd.isna(v) else f"{v:.0%}")
        elif formatted[column].dtype.kind == "f":
            formatted[column] = formatted[column].map(lambda v: "" if pd.isna(v) else f"{v:.4g}")
    return formatted.to_html(index=False, classes=classes, border=0, na_rep="", escape=True)


def machine_time(runs: list[Path], plan: dict[str, Any]) -> str:
    """What the study's launches took, beside what the plan projected before them."""
    measured = sum(launch_machine_s(record) for record in read_run_records(runs))
    projected = totals_line(plan["estimate"]) if plan.get("estimate") else "not recorded (an older plan.json)"
    return (f"{hours(measured)} measured over {len(runs)} launch(es) (from the weights check to the teardown; "
            f"image builds, datasets and weights resources not counted); when the plan was written: {projected}")


def launch_split_text(runs: list[Path]) -> str:
    """The study's launch machine time split into its parts (``JobResult.launch_s``)."""
    return split_line(split_totals(read_run_records(runs)))


def calibration_words(calibration: Path | None, frame: pd.DataFrame) -> tuple[str, str]:
    """The host section's calibration line (its plain words, or that none was given) and the claims'
    scope in a sentence; CalibrationError for a calibration of other hardware than the main host's."""
    if calibration is None:
        return ("none given (claims.calibration): no measure of how this host drifts from day to day",
                "No calibration was given (claims.calibration), so each verdict speaks of this host on this study's "
                "day only.")
    found = read_calibration(calibration)
    rows = main_site(frame) if not frame.empty else frame
    require(found, set(rows["hardware"].astype(str)) - {"not recorded"} if "hardware" in rows else set(),
            "this study's main-host rows")
    return ("; ".join(plain_words(found)),
            f"Calibration {found.path} (host section) was given: a claim whose calibration column names it carries "
            "the host's day-to-day variance in every contrast, so its verdict speaks beyond this study's day; the "
            "others' evidence says which rows it did not cover.")


def render(*, figures: dict[str, Path], summary: Path, host: Path, plan: Path, claims: Path,
           table1: Path, table2: Path, runs: list[Path], calibration: Path | None = None) -> str:
    import jinja2

    frame = load_summaries([summary])
    calibrated, claims_scope = calibration_words(calibration, frame)
    study = PlanDocument.load(plan)
    plan_doc = study.document
    claims_table = read_table(claims, "claims")
    facts = read_document(host, "host facts")
    caps = facts.get("capabilities", {})
    left_out: dict[str, list[str]] = {}
    for what, why in study.left_out:
        left_out.setdefault(why, []).append(what)
    ran = (frame.groupby(["tool", "app"])["scenario"].apply(lambda s: ", ".join(sorted(s))).reset_index()
           if not frame.empty else pd.DataFrame())
    entries = _figure_entries(figures, frame, study, claims_table)
    records = read_run_records(runs)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE.parent), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    return env.get_template(TEMPLATE.name).render(
        study=plan_doc["study"],
        generated=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        version=metadata.version("dlvirt"),
        plan=plan_doc,
        machine_time=machine_time(runs, plan_doc),
        launch_split=launch_split_text(runs),
        host_virtualization=host_virtualization(facts),
        host_facts=[
            ("CPU", f"{facts.get('cpu_model')} — {caps.get('cores')} usable cores, {facts.get('sockets')} socket(s), "
                    f"NUMA {facts.get('numa_nodes')}"),
            ("CPU frequency", _frequency(facts.get("cpu_frequency"))),
            ("memory", f"{facts.get('memory_bytes', 0) / 2**30:.1f} GiB"),
            ("memory of every platform", _platform_memory(frame)),
            ("OS, kernel", f"{facts.get('os')}, {facts.get('kernel')}"),
            ("cgroup", f"v{caps.get('cgroup_version')}"),
            ("KVM", "usable" if caps.get("kvm") else
                    ("device present, no hardware virtualisation (vmx/svm)" if caps.get("kvm_device") else "absent")),
            ("GPU", ", ".join(caps.get("gpus") or []) or "none"),
            ("engines", _engines(facts.get("engines"))),
            ("in a container", "yes" if facts.get("in_container") else "no"),
            ("itself virtualized", host_virtualization(facts) or "no (or not recorded)"),
            ("other processes on the benchmark's CPUs", interference.host_words(frame, records)),
            ("calibration (what this host can tell apart)", calibrated),
        ],
        packages=sorted((facts.get("packages") or {}).items()),
        python=facts.get("python"),
        provenance=_provenance(frame),
        synthetic=bool(not frame.empty and (frame["dataset_source"].astype(str) != "real").any()),
        random_weights=bool(not frame.empty and (frame["weights"].astype(str) == "random").any()),
        claims=_claims(claims_table, frame),
        claims_scope=claims_scope,
        alpha=ALPHA,
        min_launches=MIN_LAUNCHES,
        # a figure with no row measured here is one line of the list below the figures, not an empty frame
        figures=[e for e in entries if e["measured"] and not e["phases"] and not e["id"].startswith("latency_")],
        unmeasured=[e for e in entries if not e["measured"] and not e["id"].startswith("latency_")],
        latency_figures=[e for e in entries if e["id"].startswith("latency_")],
        latency_table=_html_table(latency_table(frame, study)),
        phase_figures=[e for e in entries if e["phases"] and e["measured"]],
        phase_table=_html_table(_phase_table(frame, study)),
        drift_table=_html_table(drift_table(frame)),
        mechanism_table=_html_table(overhead_beside_mechanism(main_site(frame), study.kinds.baseline) if not frame.empty
                                    else pd.DataFrame()),
        ran=ran.to_dict("records") if not ran.empty else [],
        left_out=sorted(left_out.items()),
        table1=_html_table(read_table(table1, "table")),
        table2=_html_table(read_table(table2, "table")),
        summary_table=_html_table(frame),
    )


def write_report(output: Path, **inputs: Any) -> None:
    write_text_atomic(output, render(**inputs))
