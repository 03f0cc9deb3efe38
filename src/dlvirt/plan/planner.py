"""Expand a validated config into the scenarios this host will run, and those it leaves out and why.

Two kinds of problems are told apart:
- a config that can never make sense (MVM with PIN or GPU, an unknown app) is a ``ConfigError``
  naming the key;
- a scenario this host cannot run (no GPU, too few cores, no KVM) is *left out* with a reason, or
  is an error under ``strict: true``. With ``host_check: false`` the matrix is taken as declared
  (planning for another machine, e.g. a cluster's compute nodes).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

from dlvirt.core.errors import ConfigError
from dlvirt.core.scenario import CANNOT_PIN, CANNOT_USE_GPU, Scenario
from dlvirt.system.hostinfo import Capabilities

# Where a job runs: the host Snakemake runs on (or its cluster), else an edge host named under hosts:.
LOCAL_SITE = "local"
# Platforms an edge host runs. The remote runs the same runner, so any platform would run there on
# the host's own engines; but CN images and VM guest images are built by rules on the main host and
# not staged to edge hosts yet.
EDGE_PLATFORMS = ("BM",)

# Measurement tools: "mlperf" = E2E through MLPerf LoadGen; "dlbs" = DLBS-style model-only time.
TOOLS = ("mlperf", "dlbs")


@dataclass(frozen=True)
class Job:
    """One benchmark job: one launch (replicate) of one tool × app × scenario on one site, with
    every repetition of that launch. Replicate r is the study's round r."""

    tool: str
    app: str
    scenario: Scenario
    site: str = LOCAL_SITE
    replicate: int = 1

    @property
    def wildcards(self) -> dict[str, str]:
        s = self.scenario
        return {"tool": self.tool, "app": self.app, "platform": s.platform, "cores": str(s.cores),
                "pinning": s.pinning, "processor": s.processor, "replicate": str(self.replicate)}


@dataclass
class Plan:
    """The jobs in their planned order: round by round (replicate r of every scenario before
    replicate r + 1 of any), each round shuffled with ``study.order_seed``."""

    jobs: list[Job] = field(default_factory=list)
    left_out: list[tuple[str, str]] = field(default_factory=list)  # (what, why)
    order_seed: int = 0

    def scenarios(self) -> list[Scenario]:
        return sorted({job.scenario for job in self.jobs})

    def round(self, replicate: int) -> list[Job]:
        return [job for job in self.jobs if job.replicate == replicate]


def interleave(launches: list[Job], replicates: int, seed: int) -> list[Job]:
    """Every job of ``launches`` (replicate 1) as ``replicates`` rounds, each in its own shuffled
    order; a round's order depends only on the seed, the round and the jobs (str seeds are stable)."""
    jobs: list[Job] = []
    for replicate in range(1, replicates + 1):
        round_jobs = [replace(job, replicate=replicate) for job in launches]
        random.Random(f"{seed}:{replicate}").shuffle(round_jobs)
        jobs += round_jobs
    return jobs


def _cores_levels(block: dict[str, Any], where: str, caps: Capabilities | None) -> list[int]:
    levels: list[int] = []
    for i, level in enumerate(block["cores"]):
        if level == "all":
            if caps is None:
                raise ConfigError(f"{where}.cores[{i}]: 'all' needs the host check (host_check: true)")
            levels.append(caps.cores)
        else:
            levels.append(int(level))
    return sorted(set(levels))


def _check_block(block: dict[str, Any], where: str) -> None:
    for platform in block["platforms"]:
        if platform in CANNOT_PIN and "PIN" in block["pinning"]:
            raise ConfigError(
                f"{where}.pinning: {platform} cannot be pinned ({CANNOT_PIN[platform]}); "
                f"give {platform} its own matrix block with pinning: [VNL]")
        if platform in CANNOT_USE_GPU and "GPU" in block["processors"]:
            raise ConfigError(
                f"{where}.processors: {platform} cannot use a GPU ({CANNOT_USE_GPU[platform]}); "
                f"give {platform} its own matrix block with processors: [CPU]")


def expand(config: dict[str, Any], caps: Capabilities | None, site: str = LOCAL_SITE) -> Plan:
    """All jobs of the study on ``site``: the local host runs ``study.matrix``, an edge host its own
    ``hosts.<site>.matrix``. ``caps`` (the site's) None means no host check: take the matrix as declared."""
    from dlvirt.apps import app_class
    from dlvirt.platforms import platform_class

    study = config["study"]
    plan = Plan()
    apps, tools = study["apps"], study["tools"]
    for app in apps:
        app_class(app)  # an app the schema knows but this version lacks is a ConfigError naming it
        if app not in config["apps"]:
            raise ConfigError(f"study.apps: no settings for app {app!r} under apps:")
    for tool in tools:
        if tool not in TOOLS:
            raise ConfigError(f"study.tools: unknown tool {tool!r} (known: {', '.join(TOOLS)})")
    if site == LOCAL_SITE:
        # the edge hosts' blocks too: what needs no host facts is refused before any SSH connection
        for name, host in config.get("hosts", {}).items():
            for b, block in enumerate(host["matrix"]):
                _check_block(block, f"hosts.{name}.matrix[{b}]")
    repetitions = study["repetitions"]
    if isinstance(repetitions, dict) and repetitions["min"] > repetitions["max"]:
        raise ConfigError(f"study.repetitions: min ({repetitions['min']}) is above max ({repetitions['max']})")
    seen: set[Scenario] = set()
    blocks, prefix = study["matrix"], "study.matrix"
    if site != LOCAL_SITE:
        blocks, prefix = config["hosts"][site]["matrix"], f"hosts.{site}.matrix"
    for b, block in enumerate(blocks):
        where = f"{prefix}[{b}]"
        _check_block(block, where)
        for platform in block["platforms"]:
            for cores in _cores_levels(block, where, caps):
                for pinning in block["pinning"]:
                    for processor in block["processors"]:
                        scenario = Scenario(platform, cores, pinning, processor)
                        if scenario in seen:
                            continue
                        seen.add(scenario)
                        why = None
                        if site != LOCAL_SITE and platform not in EDGE_PLATFORMS:
                            why = f"platform {platform} does not run on edge hosts yet (its image is built here)"
                        elif caps is not None:
                            why = platform_class(platform).unavailable_reason(scenario, caps, config)
                        if why:
                            plan.left_out.append((scenario.name, why))
                            continue
                        for tool in tools:
                            for app in apps:
                                app_why = app_class(app).unsupported_reason(scenario, tool)
                                if app_why:
                                    plan.left_out.append((f"{tool} {app} {scenario.name}", app_why))
                                    continue
                                plan.jobs.append(Job(tool, app, scenario, site))
    plan.order_seed = int(study.get("order_seed", 0))
    plan.jobs = interleave(plan.jobs, int(study.get("replicates", 1)), plan.order_seed)
    if config.get("strict") and plan.left_out:
        lines = "\n".join(f"  {what}: {why}" for what, why in plan.left_out)
        where = "this host" if site == LOCAL_SITE else f"host {site}"
        raise ConfigError(f"strict: true and {len(plan.left_out)} scenario(s) cannot run on {where}:\n{lines}")
    return plan
