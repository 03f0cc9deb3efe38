#!/usr/bin/env python
"""What a container costs for IC at N pinned cores: CN/N/PIN next to BM/N/PIN in one run.

Prints the container's start-to-harness time (``container.start()`` on the host until the harness
inside is up: interpreter and dlvirt imported; both clocks are the host's) and the CN/BM ratio of
the mean E2E time. BM and CN jobs alternate, round after round, so drift of a shared machine
reaches both alike. Uses the workflow's own pieces: dlvirt's dockerd when no engine answers (started
and stopped here), the image of this checkout (built only if the engine lacks its tag), the runner.

    python benchmarks/cn_overhead.py [--cores 2] [--images 128] [--batch 32] [--reps 3] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from dlvirt.apps.ic import ImageClassification
from dlvirt.core.records import JobResult
from dlvirt.platforms import container_image
from dlvirt.platforms.cn import Container
from dlvirt.run.runner import run_job
from dlvirt.system import engines

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs import job_spec, settings  # noqa: E402 - the same IC settings as the other benchmarks

REPO = Path(__file__).resolve().parents[1]
CN_SETTINGS = {"gpus": "all", "debian_mirror": None, "image": None,
               "engine": {"host": None, "data_root": "/var/lib/dlvirt/docker"}}


def run(platform: str, cores: int, cfg: dict, dataset: Path, work: Path, reps: int, image: str) -> JobResult:
    spec = job_spec("ic", cfg, dataset, f"{platform}/{cores}/PIN/CPU", reps,
                    platform_settings={**CN_SETTINGS, "image": image} if platform == "CN" else {})
    return run_job(spec, work / f"{platform}.json", work / f"loadgen-{platform}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--images", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    cfg = settings(args.images, args.batch)
    daemons = Container.daemons({Container.name: CN_SETTINGS})
    e2e: dict[str, list[float]] = {"BM": [], "CN": []}
    start_to_harness: list[float] = []
    try:
        for daemon in daemons:
            engines.acquire(daemon, os.getpid())
        with tempfile.TemporaryDirectory(prefix="dlvirt-bench-") as tmp:
            image = str(container_image.ensure(REPO, CN_SETTINGS, Path(tmp) / "cn.json")["image"])
            dataset = Path(tmp) / "ic"
            ImageClassification.prepare_dataset(dataset, cfg)
            for _ in range(args.rounds):
                for platform in ("BM", "CN"):
                    result = run(platform, args.cores, cfg, dataset, Path(tmp), args.reps, image)
                    e2e[platform] += [r.e2e_s for r in result.runs]
                    if platform == "CN":
                        start_to_harness.append(result.platform["start_to_harness_s"])
    finally:
        for daemon in daemons:
            engines.release(daemon.name, os.getpid())
    bm, cn = statistics.mean(e2e["BM"]), statistics.mean(e2e["CN"])
    print(f"IC ResNet50, {args.images} images, batch {args.batch}, {args.cores} pinned cores, "
          f"{args.rounds} rounds x {args.reps} reps, image {image}")
    print(f"{'container start-to-harness':30s} {statistics.mean(start_to_harness):8.3f} s    "
          f"per container: {[round(x, 3) for x in start_to_harness]}")
    print(f"{f'BM/{args.cores}/PIN/CPU E2E':30s} {bm:8.3f} s    per rep: {[round(x, 3) for x in e2e['BM']]}")
    print(f"{f'CN/{args.cores}/PIN/CPU E2E':30s} {cn:8.3f} s    per rep: {[round(x, 3) for x in e2e['CN']]}")
    print(f"{'ratio CN / BM (E2E)':30s} {cn / bm:8.3f}")


if __name__ == "__main__":
    main()
