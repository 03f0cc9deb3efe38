"""Expand a validated config into the scenarios this host will run, and those it leaves out and why.

Two kinds of problems are told apart:
- a config that can never make sense (MVM with PIN or GPU, an unknown app) is a ``ConfigError``
  naming the key;
- a scenario this host cannot run (no GPU, too few cores, no KVM) is *left out* with a reason, or
  is an error under ``strict: true``. With ``host_check: false`` the matrix is taken as declared
  (planning for another machine, e.g. a cluster's compute nodes).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field, replace
from typing import Any

from dlvirt.apps import KINDS as APP_KINDS
from dlvirt.apps import app_class
from dlvirt.core import formats
from dlvirt.core.errors import ConfigError
from dlvirt.core.kinds import Kinds
from dlvirt.core.loadgen import OFFLINE, SCENARIOS, run_tools, split_tool
from dlvirt.core.scenario import LOCAL_SITE, PROCESSORS, Scenario
from dlvirt.plan.leftout import Gap, Reason
from dlvirt.platforms import KINDS as PLATFORM_KINDS
from dlvirt.platforms import platform_class
from dlvirt.run.tools import CLASSES as TOOL_CLASSES
from dlvirt.run.tools import KINDS as TOOL_KINDS
from dlvirt.run.tools import tool_class
from dlvirt.system.hostinfo import Capabilities

# Measurement tools, from their registry (dlvirt.run.tools): mlperf (E2E through MLPerf LoadGen), dlbs (model-only).
TOOLS = tuple(TOOL_CLASSES)
# A job's tool is its run tool (dlvirt.core.loadgen): a tool in another LoadGen scenario than Offline
# (mlperf-SingleStream, mlperf-Server). Every run tool there can be: the workflow's wildcard.
RUN_TOOLS = tuple(run_tools(TOOL_KINDS.values(), SCENARIOS))


def study_run_tools(study: dict[str, Any]) -> list[str]:
    """The run tools of a (validated) study section: its tools in its LoadGen scenarios."""
    return run_tools([TOOL_KINDS[tool] for tool in study["tools"]], study.get("scenarios") or [OFFLINE])


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
    left_out: list[Gap] = field(default_factory=list)  # each iterates as (what, why)
    order_seed: int = 0

    def round(self, replicate: int) -> list[Job]:
        return [job for job in self.jobs if job.replicate == replicate]

    def measures(self, tool: str, app: str, processors: tuple[str, ...]) -> bool:
        """Does the plan have a job of ``tool`` and ``app`` on one of ``processors``?"""
        return any(job.tool == tool and job.app == app and job.scenario.processor in processors for job in self.jobs)

    def jobs_of(self, tool: str, app: str | None = None) -> list[Job]:
        """The jobs of ``tool`` (and ``app``, where given), in planned order."""
        return [job for job in self.jobs if (job.tool, job.app if app else None) == (tool, app)]


def interleave(launches: list[Job], replicates: int, seed: int) -> list[Job]:
    """Every job of ``launches`` (replicate 1) as ``replicates`` rounds, each in its own shuffled
    order; a round's order depends only on the seed, the round and the jobs (str seeds are stable)."""
    jobs: list[Job] = []
    for replicate in range(1, replicates + 1):
        round_jobs = [replace(job, replicate=replicate) for job in launches]
        random.Random(f"{seed}:{replicate}").shuffle(round_jobs)
        jobs += round_jobs
    return jobs


def _cores_levels(block: dict[str, Any], where: str, caps: Capabilities | None,
                  node_cores: int | None = None) -> list[int]:
    """The block's core levels; ``all`` is the host's cores, or without the host check a cluster's
    ``node_cores`` (the benchmark nodes' CPUs, cluster.node_cores)."""
    levels: list[int] = []
    for i, level in enumerate(block["cores"]):
        if level == "all":
            if caps is None and node_cores is None:
                raise ConfigError(f"{where}.cores[{i}]: 'all' needs the host check (host_check: true) or, planning "
                                  "for a cluster's nodes, cluster.node_cores (profiles/slurm sets it); else give "
                                  "core counts as numbers, as config/paper.yaml does")
            levels.append(caps.cores if caps is not None else int(node_cores or 0))
        else:
            levels.append(int(level))
    return sorted(set(levels))


def warmups_for(study: dict[str, Any], app: str, tool: str) -> int:
    """The warm-ups every launch of ``app`` under ``tool`` (a run tool counts as its tool) runs:
    ``study.warmup_repetitions``, one count for all, or ``{default: n, <app>: n or {<tool>: n}}``."""
    setting = study.get("warmup_repetitions", 1)
    if isinstance(setting, int):
        return setting
    per_app = setting.get(app, setting["default"])
    if isinstance(per_app, int):
        return int(per_app)
    return int(per_app.get(split_tool(tool)[0], setting["default"]))


def _check_warmups(setting: int | dict[str, Any]) -> None:
    """A per-app warm-up mapping names only apps, and within an app only tools."""
    if isinstance(setting, int):
        return
    for app, per_app in setting.items():
        if app != "default" and app not in APP_KINDS:
            raise ConfigError(f"study.warmup_repetitions.{app}: not an app (apps: {', '.join(APP_KINDS)}; "
                              "default: the count for the rest)")
        for tool in per_app if isinstance(per_app, dict) else ():
            if tool not in TOOL_KINDS:
                raise ConfigError(f"study.warmup_repetitions.{app}.{tool}: not a tool (tools: {', '.join(TOOL_KINDS)})")


def _check_block(block: dict[str, Any], where: str) -> None:
    for platform in block["platforms"]:
        kind = platform_class(platform).kind
        if kind.why_no_pin and "PIN" in block["pinning"]:
            raise ConfigError(
                f"{where}.pinning: {platform} cannot be pinned ({kind.why_no_pin}); "
                f"give {platform} its own matrix block with pinning: [VNL]")
        if kind.why_no_gpu and "GPU" in block["processors"]:
            raise ConfigError(
                f"{where}.processors: {platform} cannot use a GPU ({kind.why_no_gpu}); "
                f"give {platform} its own matrix block with processors: [CPU]")


def expand(config: dict[str, Any], caps: Capabilities | None, site: str = LOCAL_SITE) -> Plan:
    """All jobs of the study on ``site``: the local host runs ``study.matrix``, an edge host its own
    ``hosts.<site>.matrix``. ``caps`` (the site's) None means no host check: take the matrix as declared."""
    study = config["study"]
    plan = Plan()
    apps, tools = study["apps"], study_run_tools(study)
    for app in apps:
        app_class(app)  # an app the schema knows but this version lacks is a ConfigError naming it
        if app not in config["apps"]:
            raise ConfigError(f"study.apps: no settings for app {app!r} under apps:")
    if site == LOCAL_SITE:
        # the edge hosts' blocks too: what needs no host facts is refused before any SSH connection
        for name, host in config.get("hosts", {}).items():
            for b, block in enumerate(host["matrix"]):
                _check_block(block, f"hosts.{name}.matrix[{b}]")
    repetitions = study["repetitions"]
    if isinstance(repetitions, dict) and repetitions["min"] > repetitions["max"]:
        raise ConfigError(f"study.repetitions: min ({repetitions['min']}) is above max ({repetitions['max']})")
    _check_warmups(study.get("warmup_repetitions", 1))
    seen: set[Scenario] = set()
    blocks, prefix = study["matrix"], "study.matrix"
    if site != LOCAL_SITE:
        blocks, prefix = config["hosts"][site]["matrix"], f"hosts.{site}.matrix"
    # what 'all' means for a cluster's benchmark nodes (planned without a host check)
    node_cores = config.get("cluster", {}).get("node_cores") if site == LOCAL_SITE else None
    node_cores = None if node_cores is None else int(node_cores)  # a profile's config passes it as digits
    for b, block in enumerate(blocks):
        where = f"{prefix}[{b}]"
        _check_block(block, where)
        block_apps = block.get("apps", apps)
        if unknown := [app for app in block_apps if app not in apps]:
            raise ConfigError(f"{where}.apps: {', '.join(map(repr, unknown))} not in study.apps ({', '.join(apps)})")
        for platform in block["platforms"]:
            for cores in _cores_levels(block, where, caps, node_cores):
                for pinning in block["pinning"]:
                    for processor in block["processors"]:
                        scenario = Scenario(platform, cores, pinning, processor)
                        if scenario in seen:
                            continue
                        seen.add(scenario)
                        why: str | None = None
                        reason: Reason = "host"
                        # The remote runs the same runner, so any platform would run there on the
                        # host's own engines; but CN and guest images are built by rules on the main
                        # host and not staged to edge hosts yet.
                        if site != LOCAL_SITE and not platform_class(platform).kind.runs_on_edge:
                            why = f"platform {platform} does not run on edge hosts yet (its image is built here)"
                            reason = "edge"
                        elif caps is not None:
                            why = platform_class(platform).unavailable_reason(scenario, caps, config)
                        if why:
                            plan.left_out.append(Gap(reason, why, scenario=scenario))
                            continue
                        for tool in tools:
                            for app in apps:
                                if app not in block_apps:
                                    plan.left_out.append(Gap("not_configured", f"not in {where}.apps of this config",
                                                             tool=tool, app=app, scenario=scenario))
                                    continue
                                app_why = (tool_class(tool).unsupported_reason(app)
                                           or app_class(app).unsupported_reason(scenario, split_tool(tool)[0]))
                                if app_why:
                                    plan.left_out.append(Gap("unsupported", app_why, tool=tool, app=app,
                                                             scenario=scenario))
                                    continue
                                plan.jobs.append(Job(tool, app, scenario, site))
    plan.order_seed = int(study.get("order_seed", 0))
    plan.jobs = interleave(plan.jobs, int(study.get("replicates", 1)), plan.order_seed)
    cannot = [gap for gap in plan.left_out if gap.reason != "not_configured"]  # a block's apps: asked for
    if config.get("strict") and cannot:
        lines = "\n".join(f"  {what}: {why}" for what, why in cannot)
        where = "this host" if site == LOCAL_SITE else f"host {site}"
        raise ConfigError(f"strict: true and {len(cannot)} scenario(s) cannot run on {where}:\n{lines}")
    return plan


def study_gaps(left_out: list[Gap], study: dict[str, Any],
               tools: tuple[str, ...] = RUN_TOOLS, apps: tuple[str, ...] = tuple(APP_KINDS)) -> list[Gap]:
    """The left-out entries that concern ``tools`` × ``apps``, plus those the config does not ask for."""
    ran = study_run_tools(study)
    gaps = [Gap("not_configured", "not in study.tools of this config", tool=tool)
            for tool in tools if split_tool(tool)[0] not in study["tools"]]
    gaps += [Gap("not_configured", "not in study.scenarios of this config", tool=tool)
             for tool in tools if split_tool(tool)[0] in study["tools"] and tool not in ran]
    gaps += [Gap("not_configured", "not in study.apps of this config", app=app)
             for app in apps if app not in study["apps"] and not (app in APP_KINDS and APP_KINDS[app].check)]
    processors = {processor for block in study["matrix"] for processor in block["processors"]}
    gaps += [Gap("not_configured", "not in study.matrix of this config", processor=processor)
             for processor in PROCESSORS if processor not in processors]
    platforms = {platform for block in study["matrix"] for platform in block["platforms"]}
    gaps += [Gap("not_configured", "not in study.matrix of this config", platform=platform)
             for platform in PLATFORM_KINDS if platform not in platforms]
    gaps += [gap for gap in left_out
             if (gap.tool is None or gap.tool in tools) and (gap.app is None or gap.app in apps)]
    return gaps


def nothing_to_run(config: dict[str, Any], plan: Plan) -> str | None:
    """Why a study would run no benchmark at all (None: it runs some), in one line with the fix: a
    study of zero launches would still write empty figures and claims and exit 0."""
    if plan.jobs or config.get("hosts"):
        return None
    reasons = list(dict.fromkeys(gap.why for gap in plan.left_out))
    why = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} more" if len(reasons) > 3 else "")
    return (f"nothing to run on this host: all {len(plan.left_out)} planned scenario(s) were left out "
            f"({why or 'none planned'}). Change study.matrix (cores: [all] fits any host), or plan for "
            "another machine with --config host_check=false; `snakemake -n` shows the plan")


def kinds() -> Kinds:
    """The registered platforms' and apps' display facts, for analysis (which never imports them)."""
    return Kinds(tuple(k.display() for k in PLATFORM_KINDS.values()), tuple(k.display() for k in APP_KINDS.values()))


def config_hash(config: dict[str, Any]) -> str:
    """A short, stable fingerprint of a (validated) config, for provenance."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def node_constraint(config: dict[str, Any], platform: str) -> str:
    """The SLURM ``--constraint`` of a benchmark job on ``platform``: KVM for a guest, and the
    study's node kind (``cluster.node_kind``) for every job; "" for none."""
    boots = PLATFORM_KINDS[platform].guest_variant is not None  # a guest: needs a node with KVM
    features = (["kvm"] if boots else []) + \
        ([config["cluster"]["node_kind"]] if config["cluster"]["node_kind"] else [])
    return "&".join(features)


def plan_document(config: dict[str, Any], plan: Plan, host_cores: int | None) -> dict[str, Any]:
    """``results/plan.json``: the matrix that runs, what was left out and why, and the display facts
    of the platforms and apps (``kinds``) that analysis reads."""
    return formats.stamped("plan", {
        "study": config["study"]["name"],
        "config_sha256": config_hash(config),
        "host_check": config["host_check"],
        "host_cores": host_cores,
        # the node feature every benchmark job asked for on a cluster (null: any node, any hardware)
        "node_kind": config["cluster"]["node_kind"],
        "repetitions": config["study"]["repetitions"],
        "warmup_repetitions": config["study"]["warmup_repetitions"],
        "warmup_tolerance": config["study"].get("warmup_tolerance"),
        "warmup_share": config["study"].get("warmup_share", 1.0),
        # jobs in their planned order: round r (replicate r) of every scenario before round r + 1
        "replicates": config["study"].get("replicates", 1),
        "order_seed": config["study"].get("order_seed", 0),
        "jobs": [{**job.wildcards, "scenario": job.scenario.name, "order": i} for i, job in enumerate(plan.jobs)],
        "left_out": [gap.document() for gap in study_gaps(plan.left_out, config["study"])],
        "kinds": kinds().document(),
    })
