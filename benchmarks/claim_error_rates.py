#!/usr/bin/env python
"""Error rates and power of the claim verdicts for the shipped study designs, by simulation.

For each config given, its design (``study.replicates`` launches per scenario, ``study.repetitions``
counted repetitions per launch; an adaptive count is taken at its minimum) is simulated with the
variance components of docs/statistics.md (within a launch 7 %, between launches 8.6 %, round drift 3 %; log
scale) on the pinning claim's matrix (BM and CN × IC and NLP × {VNL, PIN}), through the real
summary, model and claim code (``dlvirt.analysis.claims.simulate``). Prints a Markdown table: the share
of studies whose verdict is wrong at no gain and at a gain as large as the margin, the power at
10 % and 20 % gains, and the median 90 % half-widths of one comparison and of a claim part. A second
table checks ``plan --design``'s projection (``dlvirt.plan.design.project``) against the same
simulation: at no gain, for the first config's design with ``--alike-launches`` launches, the share
of studies whose claim part comes out alike within the margin (TOST) beside the projected chance.

    python benchmarks/claim_error_rates.py [config/config.yaml config/paper.yaml] [--studies 200]
        [--alike-launches 10 20 30 40]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import yaml

from dlvirt.analysis.claims.simulate import Design, per_case_half_width, projected_alike, rates
from dlvirt.analysis.claims.verdicts import DEFAULT_MARGIN, FAILS, HOLDS
from dlvirt.core.records import JobResult

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = REPO / "tests" / "fixtures" / "runs" / "mlperf-ic-BM-1-VNL-CPU.json"  # a record's structure only


def design_of(config: Path) -> Design:
    study = yaml.safe_load(config.read_text())["study"]
    repetitions = study.get("repetitions", 1)
    if isinstance(repetitions, dict):
        repetitions = repetitions["min"]
    return Design(launches=int(study.get("replicates", 1)), repetitions=int(repetitions))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", type=Path,
                        default=[REPO / "config" / "config.yaml", REPO / "config" / "paper.yaml"])
    parser.add_argument("--studies", type=int, default=200)
    parser.add_argument("--alike-launches", type=int, nargs="*", default=[10, 20, 30, 40])
    args = parser.parse_args()
    template = JobResult.read(TEMPLATE)
    margin = math.log1p(DEFAULT_MARGIN)
    print("| config | launches × repetitions | false holds (no gain) | false does not hold (gain = margin) "
          "| power at 10 % | power at 20 % | median half-width, one comparison | median half-width, claim part |")
    print("|---|---|---|---|---|---|---|---|")
    for config in args.configs:
        design = design_of(config)
        null = rates(template, design, 0.0, args.studies, seed=1)
        edge = rates(template, design, -margin, args.studies, seed=2)
        ten = rates(template, design, math.log(0.9), args.studies, seed=3)
        twenty = rates(template, design, math.log(0.8), args.studies, seed=4)
        case = per_case_half_width(template, design, args.studies, seed=5)
        print(f"| {config.name} | {design.launches} × {design.repetitions} | {null.share(HOLDS):.1%} "
              f"| {edge.share(FAILS):.1%} | {ten.share(HOLDS):.1%} | {twenty.share(HOLDS):.1%} "
              f"| ±{case:.1%} | ±{null.median_half_width():.1%} |")
    repetitions = design_of(args.configs[0]).repetitions
    print(f"\n| launches × repetitions | alike within ±{DEFAULT_MARGIN:.0%} at no gain: simulated "
          "| projected by plan --design |")
    print("|---|---|---|")
    for launches in args.alike_launches:
        design = Design(launches=launches, repetitions=repetitions)
        null = rates(template, design, 0.0, args.studies, seed=6)
        print(f"| {launches} × {repetitions} | {null.alike_share():.1%} | {projected_alike(design):.1%} |")


if __name__ == "__main__":
    main()
