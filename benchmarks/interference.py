#!/usr/bin/env python
"""The default study on a quiet host against the same study beside a background load, side by side.

Runs ``snakemake --cores 1 all`` (the default study, config/config.yaml, isolation as configured)
twice in this checkout: first alone, then beside one process that keeps ``--load`` of one core busy
(a duty cycle of 100 ms periods, unpinned, started and stopped here). After each, its run records,
summary and claims are moved to ``--keep``/<arm>. Then prints per arm: the variance components
within and between launches (``dlvirt.plan.design.from_records``, the numbers ``plan --design``
starts from), the share of disturbed repetitions and the reruns (``study.interference``), the
study's wall time and every claim's verdict. The rerun rule should keep the loaded arm's
components near the quiet arm's (issue 42: within 1.5x) with the same decided claims.

Takes two default studies: on a 2-core AMD EPYC guest the quiet one about 28 min, the loaded one
about 1.6x that (its reruns; 111 of them at --load 0.2). It leaves ``results/`` to the second arm's
study (its runs moved out). Not a test.

    python benchmarks/interference.py [--load 0.2] [--keep results/benchmarks/interference] [-- SNAKEMAKE ARGS]
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from pathlib import Path

import pandas as pd

from dlvirt.core.records import read_run_records
from dlvirt.plan.design import from_records
from dlvirt.run.tools import primary

from jobs import REPO, run_study

PERIOD_S = 0.1


def duty_cycle(share: float) -> None:
    """Keep ``share`` of one core busy, forever (the caller terminates the process): in every period,
    spin until it used that much CPU time (on a contended core that takes longer), then sleep the rest."""
    while True:
        wall, cpu = time.perf_counter(), time.process_time()
        while time.process_time() - cpu < share * PERIOD_S:
            pass
        time.sleep(max(0.0, PERIOD_S - (time.perf_counter() - wall)))


def run_arm(name: str, load: float | None, keep: Path, extra: list[str]) -> dict[str, object]:
    """One default study (beside ``load`` of a core when given); its results moved to ``keep/name``."""
    neighbour = None
    if load is not None:
        neighbour = multiprocessing.Process(target=duty_cycle, args=(load,), daemon=True)
        neighbour.start()
    target = keep / name
    try:
        status, minutes = run_study(target, extra)
    finally:
        if neighbour is not None:
            neighbour.terminate()
            neighbour.join()
    records = read_run_records(sorted((target / "runs").rglob("*.json"))) if (target / "runs").exists() else []
    inputs = from_records(records, primary())
    summary = pd.read_csv(target / "summary.csv") if (target / "summary.csv").exists() else pd.DataFrame()
    marked = summary.dropna(subset=["disturbed_share"]) if "disturbed_share" in summary else summary.iloc[0:0]
    claims = pd.read_csv(target / "claims.csv") if (target / "claims.csv").exists() else pd.DataFrame()
    return {"arm": name, "exit": status, "minutes": round(minutes, 1), "launches": len(records),
            "sigma_w": f"{inputs.within ** 0.5:.1%}" if inputs else "n/a",
            "sigma_b": f"{inputs.between ** 0.5:.1%}" if inputs else "n/a",
            "disturbed": f"{(marked['disturbed_share'] * marked['reps']).sum() / max(1, marked['reps'].sum()):.1%}",
            "reruns": int(summary["reruns"].sum()) if "reruns" in summary else 0,
            **({f"claim {row.id}": row.verdict for row in claims.itertuples()} if not claims.empty else {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", type=float, default=0.2, help="the neighbour's share of one core (0-1)")
    parser.add_argument("--keep", type=Path, default=REPO / "results" / "benchmarks" / "interference")
    parser.add_argument("snakemake", nargs="*", help="more arguments for both snakemake runs")
    args = parser.parse_args()
    rows = [run_arm("quiet", None, args.keep, args.snakemake),
            run_arm(f"beside {args.load:.0%} of a core", args.load, args.keep, args.snakemake)]
    print(pd.DataFrame(rows).set_index("arm").T.to_markdown())


if __name__ == "__main__":
    main()
