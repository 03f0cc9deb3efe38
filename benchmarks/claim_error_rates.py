#!/usr/bin/env python
"""The claim verdicts' error rates and power, by simulation through the real summary, model and
claim code (``dlvirt.analysis.claims.simulate``), with the interference rule's row
(``dlvirt.analysis.interference_simulate``) and ``dlvirt compare``'s rows across studies and days
(``dlvirt.analysis.compare_simulate``): one Markdown table, a row per simulated question
(what is simulated, the false-verdict rate, its Monte Carlo SE, α, and whether the rate is within
α + 2 SE). ``--check`` exits 1 when a row is not. Each row's truth puts the verdict it counts on
the claim's bound (the least favourable point), and its studies are seeded (``--seed``), so the
table is the same on any machine.

``--projection`` adds the check of ``plan --design``'s projection (``dlvirt.plan.design.project``):
at no gain, with ``--alike-launches`` launches, the share of studies whose claim part (BM, 2 pairs;
7 % / 8.6 % within / between launches) comes out alike within the margin, beside the projected chance.

    python benchmarks/claim_error_rates.py [--studies 1000] [--seed 1] [--check] [--rows 0 3 ...]
        [--projection [--alike-launches 10 20 30 40]]

``--rows`` runs only those rows (their places in the full table, from 0), each with the seed it has
there: several processes of disjoint rows print, together, the full table's rows.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

from dlvirt.analysis import compare_simulate, interference_simulate
from dlvirt.analysis.claims.simulate import Design, ErrorRow, claim_rows, markdown, projected_alike, rates
from dlvirt.analysis.claims.verdicts import DEFAULT_MARGIN
from dlvirt.core.records import JobResult

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = REPO / "tests" / "fixtures" / "runs" / "mlperf-ic-BM-1-VNL-CPU.json"  # a record's structure only


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=1000, help="simulated studies per row")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--check", action="store_true", help="exit 1 when a row's rate exceeds α + 2 SE")
    parser.add_argument("--rows", type=int, nargs="*", help="only these rows (places in the full table, from 0)")
    parser.add_argument("--projection", action="store_true")
    parser.add_argument("--alike-launches", type=int, nargs="*", default=[10, 20, 30, 40])
    args = parser.parse_args()
    template = JobResult.read(TEMPLATE)
    claims = claim_rows(template)
    # rows of other layers' rules, each (studies, seed) → (name, what, false verdicts, studies, α)
    others = [interference_simulate.interference, *compare_simulate.ROWS]
    rows = [*claims, *(functools.partial(lambda r, n, seed: ErrorRow(*r(n, seed)), r) for r in others)]
    chosen = range(len(rows)) if args.rows is None else args.rows
    found = [rows[i](args.studies, args.seed + i) for i in chosen]
    print(markdown(found))
    if args.projection:
        print(f"\n| launches × repetitions | alike within ±{DEFAULT_MARGIN:.0%} at no gain: simulated "
              "| projected by plan --design |")
        print("|---|---|---|")
        for launches in args.alike_launches:
            design = Design(launches=launches, repetitions=2)
            null = rates(template, design, 0.0, args.studies, seed=args.seed)
            print(f"| {launches} × 2 | {null.alike_share():.1%} | {projected_alike(design):.1%} |")
    return 1 if args.check and not all(r.passed for r in found) else 0


if __name__ == "__main__":
    sys.exit(main())
