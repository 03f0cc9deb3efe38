#!/usr/bin/env python
"""``dlvirt calibrate`` and ``dlvirt compare`` on this host, end to end: A/A blocks, then two studies
an hour apart and a deliberately slowed one.

Every study is the default study's BM and CN scenarios with IC and NLP (an overlay on
config/config.yaml written to ``--keep``), run by ``snakemake --cores 1 all`` in this checkout; each
study's results are moved to ``--keep``/<name> (``jobs.run_study``):

1. ``--blocks`` A/A blocks, one after another, then ``dlvirt calibrate`` on them
   (``KEEP/calibration.json``; its plain words are printed);
2. study A, then study C: the same with ``platforms.CN.slowdown_cpu_quota: 0.5`` (every CN launch
   gets half its CPU quota: a true slow-down of CN that compare must call "slower");
3. study B, once ``--gap-min`` minutes have passed since A finished and ``--gap-command`` (when
   given: a shell command run in this checkout after C, e.g. another benchmark, so that the hour
   is not idle) has ended (no change: compare must call nothing "slower" or "faster");
4. ``dlvirt compare`` of A-B with and without the calibration and of A-C with it, printing per pair
   how many scenarios came out slower, faster, alike, inconclusive, with each study's wall time and
   the host's CPU.

Takes (blocks + 3) such studies and the gap: about 15 min a study on a 2-core Intel Xeon or AMD EPYC guest, so
about 2 h 15 min with the defaults. Measure on a quiet host (nothing else running): that is the host
the calibration speaks for. Not a test.

    python benchmarks/day_to_day.py [--blocks 3] [--gap-min 60] [--gap-command CMD] \
        [--keep results/benchmarks/day-to-day]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from dlvirt.system.hostinfo import hardware_label, node_identity

from jobs import REPO, run_study, study_config

APPS = ["ic", "nlp"]
PLATFORMS = {"BM", "CN"}
SLOWDOWN = 0.5


def overlay(slowdown: float | None = None) -> dict[str, Any]:
    """The default study's BM and CN blocks with IC and NLP (CN's quota times ``slowdown`` when given)."""
    study = study_config()["study"]
    matrix = [{**block, "platforms": [p for p in block["platforms"] if p in PLATFORMS]}
              for block in study["matrix"] if PLATFORMS & set(block["platforms"])]
    config: dict[str, Any] = {"study": {"apps": APPS, "matrix": [{k: v for k, v in b.items() if k != "apps"}
                                                                  for b in matrix]}}
    if slowdown is not None:
        config["platforms"] = {"CN": {"slowdown_cpu_quota": slowdown}}
    return config


def configfile(keep: Path, name: str, config: dict[str, Any]) -> list[str]:
    path = keep / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return ["--configfile", str(REPO / "config" / "config.yaml"), str(path)]


def dlvirt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dlvirt", *args], cwd=REPO, capture_output=True, text=True,
                          check=False)


def compared(keep: Path, a: str, b: str, calibration: Path | None) -> dict[str, Any]:
    """``dlvirt compare`` of two kept studies: its verdicts counted."""
    out = keep / f"compare-{a}-{b}{'-calibrated' if calibration else ''}"
    done = dlvirt("compare", str(keep / a), str(keep / b), "--out", str(out),
                  *(["--calibration", str(calibration)] if calibration else []))
    table = out / "compare.csv"
    if not table.exists():
        return {"pair": f"{a} vs {b}", "calibrated": bool(calibration), "error": done.stderr.strip()[-300:]}
    counts = pd.read_csv(table)["verdict"].value_counts().to_dict()
    return {"pair": f"{a} vs {b}", "calibrated": bool(calibration),
            **{v: counts.get(v, 0) for v in ("slower", "faster", "alike", "inconclusive")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=3, help="A/A blocks (2 at least; 3+ for compare)")
    parser.add_argument("--gap-min", type=float, default=60.0, help="minutes between the ends of A and B")
    parser.add_argument("--gap-command", help="a shell command to run in the gap (B waits for it)")
    parser.add_argument("--keep", type=Path, default=REPO / "results" / "benchmarks" / "day-to-day")
    args = parser.parse_args()
    if args.blocks < 2:
        parser.error("--blocks: calibrate needs at least 2")
    args.keep.mkdir(parents=True, exist_ok=True)
    plain, slowed = configfile(args.keep, "study", overlay()), configfile(args.keep, "slowed", overlay(SLOWDOWN))
    minutes: dict[str, float] = {}

    def study(name: str, config: list[str]) -> None:
        status, minutes[name] = run_study(args.keep / name, config)
        if status:
            sys.exit(f"day_to_day: study {name} failed (exit {status}); its log is in .snakemake/log/")

    blocks = [f"block-{n + 1}" for n in range(args.blocks)]
    for name in blocks:
        study(name, plain)
    calibration = args.keep / "calibration.json"
    done = dlvirt("calibrate", *(str(args.keep / b) for b in blocks), "--out", str(calibration))
    print(done.stdout.strip() or done.stderr.strip())
    study("A", plain)
    a_done = time.monotonic()
    study("C", slowed)
    if args.gap_command:
        print(f"day_to_day: in the gap: {args.gap_command} (exit "
              f"{subprocess.run(args.gap_command, shell=True, cwd=REPO, check=False).returncode})", flush=True)
    time.sleep(max(0.0, args.gap_min * 60 - (time.monotonic() - a_done)))
    study("B", plain)
    print(f"\nhost: {hardware_label(node_identity())}; minutes per study: "
          + ", ".join(f"{name} {m:.1f}" for name, m in minutes.items()))
    rows = [compared(args.keep, "A", "B", None), compared(args.keep, "A", "B", calibration),
            compared(args.keep, "A", "C", calibration)]
    print(pd.DataFrame(rows).fillna("").to_markdown(index=False))


if __name__ == "__main__":
    main()
