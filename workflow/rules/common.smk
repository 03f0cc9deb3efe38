# Helpers shared by the rules: config validation, the study plan, paths and job specs.
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from dlvirt.apps import KINDS as APP_KINDS, app_class, weights_file_names  # noqa: E402
from dlvirt.analysis.catalog import FIGURES as FIGURE_SPECS  # noqa: E402
from dlvirt.platforms.container_image import (
    content_tag as cn_content_tag,
    host_lock,
    image_inputs as cn_image_inputs,
)  # noqa: E402
from dlvirt.core.atomic import write_json_atomic  # noqa: E402
from dlvirt.core.kinds import CONTAINER_IMAGE  # noqa: E402
from dlvirt.platforms import KINDS as PLATFORM_KINDS, container_platform  # noqa: E402
from dlvirt.system.hostinfo import capabilities  # noqa: E402
from dlvirt.core.errors import ConfigError  # noqa: E402
from dlvirt.plan.configcheck import check_config  # noqa: E402
from dlvirt.platforms.guestimage import (  # noqa: E402
    IMAGE_FILES as GUEST_IMAGE_FILES,
    debian_packages as guest_debian_packages,
)
from dlvirt.plan.planner import (  # noqa: E402
    RUN_TOOLS,
    expand as expand_plan,
    node_constraint as study_node_constraint,
    nothing_to_run,
    plan_document,
    study_run_tools,
    warmups_for,
)
from dlvirt.plan.jobspec import (  # noqa: E402
    WEIGHTS_FILE,
    job_spec as benchmark_spec,
    spec_param,
    weights_file,
)
from dlvirt.plan.estimate import (
    estimate as estimate_jobs,
    read_records,
    totals as estimate_totals,
)  # noqa: E402
from dlvirt.core.machinetime import totals_line  # noqa: E402
from dlvirt.run.interrupt import stop_jobs_on_interrupt  # noqa: E402

# Checksums of configured weights and vocab files, by size and mtime (dlvirt.plan.configcheck).
CHECKSUM_CACHE = Path("resources/checksums.json")

# --config key=false arrives as a string; the schema wants booleans.
for _key in ("strict", "host_check", "allow_emulation"):
    if isinstance(config.get(_key), str) and config[_key].lower() in ("true", "false"):
        config[_key] = config[_key].lower() == "true"

# Refused before any job is built, naming the file and line or the key (not the whole schema):
# Snakemake parsed the config files already, but keeps the last of two equal keys; the schema
# check is strict (16.0 is no integer, .nan no number); validate() fills the defaults; then what
# the schema cannot see (paths, checksums, memory sizes). `python -m dlvirt check-config` does the same.
SCHEMA_FILE = Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml"
try:
    check_config(config, workflow.configfiles, SCHEMA_FILE, lambda c: validate(c, str(SCHEMA_FILE)), CHECKSUM_CACHE)
except ConfigError as err:
    raise WorkflowError(f"invalid config: {err}") from None

# On a cluster every job re-plans the study on the node it landed on: a host check there would
# give each job a different plan. Clusters plan the matrix as declared; each job then checks its
# own node before it starts (runner.check_node).
if config["host_check"] and not workflow.local_exec:
    raise WorkflowError(
        "host_check: true plans the study for the machine Snakemake runs on, but this executor runs "
        "jobs on other nodes: set host_check: false (profiles/slurm does; a --config option replaces "
        "the profile's, so add host_check=false to it)"
    )

HOST_CAPS = capabilities() if config["host_check"] else None
try:
    PLAN = expand_plan(config, HOST_CAPS)
except ConfigError as err:
    raise WorkflowError(f"invalid config: {err}") from None
# results/plan.json is this very plan, written by the study_plan rule. Being that rule's param, a
# change of config or of the host facts that changes the plan reruns it, and with it what reads it.
PLAN_DOCUMENT = plan_document(config, PLAN, HOST_CAPS.cores if HOST_CAPS else None)


def write_plan(path, log, document):
    """results/plan.json from the plan this workflow runs, not from a second planning, with the
    machine time it will take projected from the run records present now (not a param: new runs
    must not make the plan stale)."""
    records = read_records(Path(RUNS_DIR))
    totals = estimate_totals(config, estimate_jobs(config, PLAN, records), len(records))
    write_json_atomic(path, {**document, "estimate": totals})
    Path(log).write_text(
        f"{len(document['jobs'])} jobs, {len(document['left_out'])} left out\n" f"estimate: {totals_line(totals)}\n"
    )


if workflow.is_main_process:
    for what, why in PLAN.left_out:
        print(f"dlvirt: left out {what}: {why}", file=sys.stderr)

# Benchmark jobs never run concurrently: each takes the one unit of this resource.
if "bench" not in workflow.global_resources:
    workflow.register_resource("bench", 1)
# Guest image builds share one Debian package cache (resources/guest/debs), which two debootstraps
# at once corrupt: each build takes the one unit of this resource.
if "debian_cache" not in workflow.global_resources:
    workflow.register_resource("debian_cache", 1)

# Rules that download (debootstrap from a Debian mirror, a dataset) are rerun after a failure, up
# to DOWNLOAD_RETRIES times, each after a longer wait, which the command states in its log.
DOWNLOAD_RETRIES = 2


def retry_wait_s(wildcards, attempt):
    return 0 if attempt == 1 else 30 * 2 ** (attempt - 2)


# One file per launch: replicate r of a scenario is results/runs/<tool>/<app>/<scenario>/<r>.json.
RUNS_DIR = "results/runs"
RUN_FILE = f"{RUNS_DIR}/{{tool}}/{{app}}/{{platform}}/{{cores}}/{{pinning}}/{{processor}}/{{replicate}}.json"
LOADGEN_DIR = "results/loadgen/{tool}/{app}/{platform}/{cores}/{pinning}/{processor}/{replicate}"
SUMMARY_FILE = "results/summary/{tool}/{app}.csv"
# The weights resource (the weights rule's output) is WEIGHTS_FILE, from dlvirt.plan.jobspec.

# The container image: rule cn_image writes the marker once the engine has it; jobs of the container
# platform (CN) run CN_IMAGE (its section's image, else dlvirt's own build, named by the hash of its
# inputs). That section also selects the Docker engine.
CN = container_platform()
CN_IMAGE_MARKER = "resources/images/cn.json"
CN_IMAGE = config["platforms"][CN]["image"] or cn_content_tag(Path("."))
# What each workflow acquired from dlvirt.system.engines (the daemons it started or shares).
ENGINE_STATE_DIR = "resources/engines"

# Figure id -> its notebook, the per-app summaries it reads (only those: one figure builds only
# what it needs) and extra papermill parameters; the plan's reasons for rows it may lack and the
# platforms' order and colours it reads from results/plan.json.
# What each figure shows is in src/dlvirt/analysis/catalog.py.
FIGURES = {
    spec.id: {
        "notebook": f"notebooks/{spec.notebook_name}.ipynb",
        # only the summaries of rows the plan measures (or an edge host may; an edge figure only those): a
        # figure nothing here measures builds no benchmark and draws "not measured" from the plan's reasons
        "summaries": [
            SUMMARY_FILE.format(tool=spec.tool, app=app)
            for app in spec.apps
            if config.get("hosts") or (not spec.edge and PLAN.measures(spec.tool, app, spec.processors))
        ],
        "parameters": spec.parameters,
    }
    for spec in FIGURE_SPECS
}
FIGURE_TITLES = {spec.id: spec.title for spec in FIGURE_SPECS}


wildcard_constraints:
    tool="|".join(sorted(RUN_TOOLS, key=len, reverse=True)),
    app="|".join(APP_KINDS),
    weights_name="|".join(re.escape(name) for name in weights_file_names()),
    tag=r"[^/]+",
    platform="|".join(PLATFORM_KINDS),
    cores=r"\d+",
    pinning="VNL|PIN",
    processor="CPU|GPU",
    replicate=r"[1-9]\d*",
    fig="|".join(FIGURES),


def quoted_json(data):
    """A JSON document as one shell word."""
    return shlex.quote(json.dumps(data, sort_keys=True))


def run_files(tool, app):
    return sorted(RUN_FILE.format(**job.wildcards) for job in PLAN.jobs_of(tool, app))


def summary_files():
    """Per run tool (mlperf in each LoadGen scenario, dlbs) and app."""
    return [
        SUMMARY_FILE.format(tool=tool, app=app)
        for tool in study_run_tools(config["study"])
        for app in config["study"]["apps"]
    ]


# The planned jobs by their wildcards, with their place in the planned order.
JOB_WILDCARDS = ("tool", "app", "platform", "cores", "pinning", "processor", "replicate")
PLANNED = {tuple(job.wildcards[k] for k in JOB_WILDCARDS): (i, job) for i, job in enumerate(PLAN.jobs)}
# Written once every launch of round r (replicate r) is done; round r + 1 waits for it.
ROUND_FILE = "results/rounds/{replicate}.done"


def planned(wildcards):
    found = PLANNED.get(tuple(wildcards[k] for k in JOB_WILDCARDS))
    if found is None:
        raise WorkflowError(
            "{tool} {app} {platform}/{cores}/{pinning}/{processor} replicate {replicate} is not in this study's "
            "plan (see the 'left out' lines, study.matrix and study.replicates)".format(**wildcards)
        )
    return found


def planned_job(wildcards):
    return planned(wildcards)[1]


def previous_round(wildcards):
    """Replicate r + 1 of any scenario waits for replicate r of every scenario (interleaved
    rounds). ancient(): only the order counts, so a rerun of round r does not rerun round r + 1."""
    replicate = int(wildcards.replicate)
    return [ancient(ROUND_FILE.format(replicate=replicate - 1))] if replicate > 1 else []


def round_runs(wildcards):
    return [RUN_FILE.format(**job.wildcards) for job in PLAN.round(int(wildcards.replicate))]


def node_constraint(wildcards):
    return study_node_constraint(config, wildcards.platform)


def job_priority(wildcards):
    """Within a round, Snakemake starts ready jobs in the plan's shuffled order."""
    return len(PLAN.jobs) - planned(wildcards)[0]


def job_spec(wildcards):
    """Everything a benchmark job needs, as one JSON shell word. Being a param, a change to any
    of it (app settings, repetitions, harness options) reruns exactly the jobs it concerns."""
    return quoted_json(spec_param(benchmark_spec(config, planned_job(wildcards), CN_IMAGE)))


def weights_input(wildcards):
    """A benchmark job's weights resource, if it loads one."""
    path = weights_file(config, planned_job(wildcards))
    return [path] if path else []


def weights_settings(wildcards):
    """Only what the initialisation depends on (and the dataset it reads), so that other app
    settings do not rebuild it."""
    app = config["apps"][wildcards.app]
    return quoted_json({"dataset": app["dataset"], **app_class(wildcards.app).weights_settings(app)})


def platform_images(wildcards):
    kind = PLATFORM_KINDS[wildcards.platform]
    # its GPU scenarios boot the gpu variant (the NVIDIA driver for the passed-through card)
    if wildcards.processor == "GPU" and kind.gpu_image and not config["platforms"][kind.name].get("image_dir"):
        return [f"{GUEST_IMAGE_DIR}/{kind.gpu_image}/image.json"]
    return PLATFORM_IMAGES.get(wildcards.platform, [])


def dlvirt_command(*args):
    """``python -m dlvirt ARGS`` from a workflow handler; no shell, so JSON arguments stay intact."""
    subprocess.run(["python", "-m", "dlvirt", *args], check=True)


def workflow_engines(action):
    """Start (up) or release (down) the engines the planned platforms need; the leases follow this
    Snakemake process, so a killed workflow's engines are stopped by the next cleanup."""
    platforms = sorted({job.scenario.platform for job in PLAN.jobs})
    dlvirt_command(
        "engines",
        action,
        "--holder",
        str(os.getpid()),
        "--state-dir",
        ENGINE_STATE_DIR,
        "--platforms",
        *platforms,
        "--settings",
        json.dumps(config["platforms"]),
    )


def dataset_settings(wildcards):
    """Only the dataset section: other app settings must not regenerate the inputs."""
    return quoted_json({"dataset": config["apps"][wildcards.app]["dataset"]})


def framework_env(wildcards):
    """The conda env of the app's framework, for users who deploy with --sdm conda."""
    return f"../../envs/{app_class(wildcards.app).framework}.yaml"


def figure_parameters(wildcards, input, output):
    """The notebook's papermill parameters as one YAML (JSON) shell word."""
    figure = FIGURES[wildcards.fig]
    return quoted_json(
        {
            "summaries": list(input.summaries),
            "host": input.host,
            "plan": input.plan,
            "png": output.png,
            "pdf": output.pdf,
            **figure["parameters"],
        }
    )


def figure_labels(wildcards):
    """The figure's id and title as columns of Snakemake's report (`snakemake --report`)."""
    return {"figure": wildcards.fig, "title": FIGURE_TITLES[wildcards.fig]}


# The extensions' latency figures are built only for the LoadGen scenarios the study runs.
LATENCY_FIGURES = [
    spec.id for spec in FIGURE_SPECS if spec.tool in study_run_tools(config["study"]) and spec.id.startswith("latency_")
]


def figure_files():
    return [
        f"results/figures/{spec.id}.png"
        for spec in FIGURE_SPECS
        if not spec.id.startswith("latency_") or spec.id in LATENCY_FIGURES
    ]


def calibration_files():
    """claims.calibration as an input of the claims and report rules (none: no input)."""
    found = config["claims"]["calibration"]
    return [found] if found else []


def all_targets():
    return [
        "results/host.json",
        "results/summary.csv",
        *figure_files(),
        "results/tables/table1.csv",
        "results/tables/table2.csv",
        "results/claims.csv",
        "results/report.html",
    ]


# Guest images of the platforms that boot one (rule guest_image, workflow/rules/guests.smk).
GUEST_IMAGE_DIR = "resources/guest"


def images_of(kind):
    """The image markers a platform's benchmark jobs wait for: the container image's, or its guest
    image variant's unless the config names an image of its own (image_dir)."""
    if kind.image == CONTAINER_IMAGE:
        return [CN_IMAGE_MARKER]
    if kind.guest_variant and not config["platforms"][kind.name].get("image_dir"):
        return [f"{GUEST_IMAGE_DIR}/{kind.guest_variant}/image.json"]
    return []


# Platform -> the image markers its benchmark jobs need: only those jobs wait for an image.
PLATFORM_IMAGES = {name: images_of(kind) for name, kind in PLATFORM_KINDS.items()}


def guest_image_inputs(wildcards):
    """The recipe; the lock (variants with a Python stack); the CN image marker (docker)."""
    inputs = ["src/dlvirt/platforms/guestimage.py"]
    if wildcards.variant != "probe":
        inputs.append(host_lock())
    if wildcards.variant == "docker":
        inputs.append(CN_IMAGE_MARKER)
    return inputs


def guest_image_settings(wildcards):
    """CN settings: the Debian mirror for every variant, the engine and image for "docker" only."""
    cn = config["platforms"][CN]
    if wildcards.variant == "gpu":
        booted_by = next(kind.name for kind in PLATFORM_KINDS.values() if kind.gpu_image == wildcards.variant)
        gpu_driver = config["platforms"][booted_by]["gpu_driver"]
        return quoted_json({"debian_mirror": cn.get("debian_mirror"), "gpu_driver": gpu_driver})
    if wildcards.variant != "docker":
        return quoted_json({"debian_mirror": cn.get("debian_mirror")})
    return quoted_json(cn)


def no_such_target(wildcards):
    """A target nothing makes (a typo such as fig7c): say so with the targets there are, instead of
    Snakemake's MissingRuleException."""
    import difflib

    targets = sorted(r.name for r in workflow.rules if not r.wildcard_names)
    close = difflib.get_close_matches(wildcards.target, targets, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise WorkflowError(
        f"{wildcards.target}: nothing in this workflow makes this target or file{hint} (short targets: {', '.join(targets)}; "
        "put targets before --configfile, which takes every following word as a file)"
    )
