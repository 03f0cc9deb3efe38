"""Command line used by the workflow's rules: each rule is one ``python -m dlvirt <command>`` call.

Known errors end in one line, ``dlvirt <command>: <what>``, naming the option, key or file, and
exit 2 (bad input) or 1 (the run failed); an unexpected exception keeps its traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlvirt import __version__

if TYPE_CHECKING:
    from dlvirt.core.records import JobResult, JobSpec

EXIT_INPUT = 2  # bad arguments, config or input files (as argparse's own usage errors)
EXIT_RUN = 1    # the run itself failed


class UsageError(Exception):
    """A command-line argument that cannot be used; the message names the option."""


def _json_arg(args: argparse.Namespace, name: str, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """The JSON object given as option ``--<name>``, with the keys ``required``."""
    option = "--" + name.replace("_", "-")
    text = getattr(args, name)
    try:
        value = json.loads(sys.stdin.read() if text == "-" else text)
    except json.JSONDecodeError as err:
        raise UsageError(f"{option}: not valid JSON ({err.msg} at line {err.lineno} column {err.colno})") from None
    if not isinstance(value, dict):
        raise UsageError(f"{option}: a JSON object is needed, not a JSON {type(value).__name__}")
    missing = [key for key in required if key not in value]
    if missing:
        raise UsageError(f"{option}: lacks {', '.join(missing)}")
    return value


def _spec_arg(args: argparse.Namespace) -> JobSpec:
    from dlvirt.core.records import JobSpec, RecordError

    try:
        return JobSpec.from_dict(_json_arg(args, "spec"), "--spec")
    except RecordError as err:
        raise UsageError(str(err)) from None


_SSH_KEYS = ("ssh", "workdir", "python")


def _exit_code(err: Exception) -> int | None:
    """The exit status of a known error, None for an unexpected one (which keeps its traceback)."""
    from dlvirt.analysis.columns import SummaryError
    from dlvirt.analysis.compare import CompareError
    from dlvirt.apps.base import AppError
    from dlvirt.core.calibration import CalibrationError
    from dlvirt.core.errors import ConfigError
    from dlvirt.core.formats import FormatError
    from dlvirt.core.records import RecordError
    from dlvirt.platforms.base import PlatformError
    from dlvirt.platforms.guestimage import ImageError
    from dlvirt.run.remote import RemoteError
    from dlvirt.run.tools.base import ToolError
    from dlvirt.system.cgroups import CgroupError
    from dlvirt.system.engines import EngineError

    if isinstance(err, (UsageError, ConfigError, RecordError, CompareError, FormatError, SummaryError,
                        CalibrationError, FileNotFoundError, IsADirectoryError, NotADirectoryError)):
        return EXIT_INPUT
    if isinstance(err, (AppError, PlatformError, ImageError, ToolError, RemoteError, CgroupError, EngineError)):
        return EXIT_RUN
    return None


def _message(err: Exception) -> str:
    if isinstance(err, OSError) and err.filename is not None:
        return f"{err.filename}: {err.strerror}"
    return str(err)


def _cmd_host(args: argparse.Namespace) -> int:
    from dlvirt.apps import job_packages
    from dlvirt.system.hostinfo import write_facts

    write_facts(Path(args.output), job_packages())
    return 0


def _cmd_dataset(args: argparse.Namespace) -> int:
    from dlvirt.apps import app_class
    from dlvirt.plan.configcheck import check_app_settings

    cls = app_class(args.app)
    settings = _json_arg(args, "settings", ("dataset",))
    check_app_settings(args.app, settings, Path(args.schema))  # as a config file's apps.<app> would be
    cls.prepare_dataset(Path(args.output_dir), settings)
    return 0


def _cmd_weights(args: argparse.Namespace) -> int:
    from dlvirt.apps import app_class
    from dlvirt.system import benchlock

    output = Path(args.output)
    # it loads the machine as a launch does: no launch of any study runs beside it
    with benchlock.held(f"building the {args.app} weights", Path.cwd(), lambda line: print(f"dlvirt: {line}")):
        digest = app_class(args.app).build_weights(_json_arg(args, "settings", ("dataset",)),
                                                   Path(args.dataset_dir), output)
    print(f"{output}: sha256 {digest}")
    return 0


def _cmd_download(args: argparse.Namespace) -> int:
    from dlvirt.apps import app_class

    for path in app_class(args.app).download_dataset(Path(args.output_dir)):
        print(f"{path}: checksum verified")
    return 0


def _print_times(result: JobResult) -> None:
    times = ", ".join(f"{r.e2e_s:.3f}" for r in result.runs)
    from dlvirt.run.tools import tool_class

    measure = tool_class(result.tool).kind.measure
    print(f"{result.scenario_name} {result.tool} {result.app}: {measure} seconds per repetition: {times}")


def _cmd_bench(args: argparse.Namespace) -> int:
    from dlvirt.run.runner import run_job

    _print_times(run_job(_spec_arg(args), Path(args.output), Path(args.loadgen_dir)))
    return 0


def _cmd_site_facts(args: argparse.Namespace) -> int:
    from dlvirt.run.remote import SshHost, write_remote_facts

    write_remote_facts(SshHost.from_settings(args.site, _json_arg(args, "ssh", _SSH_KEYS)), Path(args.output))
    return 0


def _cmd_site_bench(args: argparse.Namespace) -> int:
    from dlvirt.run.remote import SshHost, run_job_remote

    host = SshHost.from_settings(args.site, _json_arg(args, "ssh", _SSH_KEYS))
    _print_times(run_job_remote(host, _spec_arg(args), Path(args.output), Path(args.loadgen_dir)))
    return 0


def _cmd_aggregate(args: argparse.Namespace) -> int:
    from dlvirt.analysis.aggregate import write_summary

    write_summary([Path(p) for p in args.inputs], Path(args.output), allow_mixed_code=args.allow_mixed_code)
    return 0


def _cmd_concat(args: argparse.Namespace) -> int:
    from dlvirt.analysis.aggregate import concat_summaries

    concat_summaries([Path(p) for p in args.inputs], Path(args.output))
    return 0


def _cmd_cleanup(args: argparse.Namespace) -> int:
    from dlvirt.run.cleanup import remove_stale

    for line in remove_stale(_json_arg(args, "settings"), [Path(p) for p in args.work_roots]):
        print(line)
    return 0


def _cmd_background_load(args: argparse.Namespace) -> int:
    from dlvirt.plan.estimate import background_line
    from dlvirt.system.observe import background_load

    print(background_line(background_load(args.sample_s), _json_arg(args, "settings")), flush=True)
    return 0


def _cmd_engines(args: argparse.Namespace) -> int:
    from dlvirt.platforms import platform_class
    from dlvirt.system import engines

    if args.action == "down":
        for line in engines.release_recorded(Path(args.state_dir), args.holder):
            print(f"dlvirt: {line}")
        return 0
    settings = _json_arg(args, "settings")
    started: set[str] = set()
    for platform in args.platforms:
        for daemon in platform_class(platform).daemons(settings):
            if daemon.name in started:
                continue
            started.add(daemon.name)
            lease = engines.acquire(daemon, args.holder)
            if lease is None:
                print(f"dlvirt: using the {daemon.name} that already answers "
                      "(not started by dlvirt, never stopped by it)")
                continue
            engines.record(Path(args.state_dir), lease)
            print(f"dlvirt: {daemon.name} pid {lease.pid} {'started' if lease.started_now else 'already running'} "
                  f"for {platform}")
    return 0


def _cmd_image(args: argparse.Namespace) -> int:
    from dlvirt.platforms.container_image import ensure

    ensure(Path.cwd(), _json_arg(args, "settings"), Path(args.output))
    return 0


def _cmd_guest_image(args: argparse.Namespace) -> int:
    from dlvirt.core.signals import stop_on_signals
    from dlvirt.platforms.guestimage import build_for_workflow

    stop_on_signals()  # Snakemake stops jobs with SIGTERM: remove the half-built image and its mounts

    print(build_for_workflow(args.variant, Path(args.output_dir), Path.cwd(), _json_arg(args, "cn_settings"),
                             args.cn_image or None))
    return 0


def _estimate_config(args: argparse.Namespace) -> dict[str, Any]:
    """config/config.yaml, then the files given, then ``--config KEY=VALUE`` (as Snakemake merges
    them), validated against the schema (which fills the defaults)."""
    import yaml
    from snakemake.utils import update_config, validate

    from dlvirt.core.errors import ConfigError
    from dlvirt.plan.configcheck import SchemaError, check_schema, load_config_file, origin

    config: dict[str, Any] = {}
    for file in [args.default_config, *args.files]:
        update_config(config, load_config_file(Path(file)))
    for item in args.config or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--config: {item!r} is not KEY=VALUE")
        config[key] = yaml.safe_load(value)
    # the key and what is wrong with it in one line (as the workflow says it), not the whole schema;
    # no input checks: the config may be planned for another machine's paths
    try:
        check_schema(config, Path(args.schema))
    except SchemaError as err:
        where = origin([args.default_config, *args.files], err.path)
        if where is None:
            raise
        raise ConfigError(f"{where}: {err}") from None
    validate(config, str(args.schema))
    return config


def _design_inputs(args: argparse.Namespace, records: list[Any]) -> Any:
    """The variance components and costs from the run records, each replaced where given."""
    import dataclasses

    from dlvirt.plan import design

    given = {"within": args.within_cv, "between": args.between_cv, "launch_s": args.launch_s,
             "repetition_s": args.repetition_s}
    from dlvirt.run.tools import primary

    found = design.from_records(records, primary()) or design.from_records(records)
    if found is None and None in given.values():
        raise UsageError("plan --design: no run records with two launches of a scenario under "
                         f"{args.runs}: give --within-cv, --between-cv, --launch-s and --repetition-s")
    if found is None:
        found = design.Inputs(0.0, 0.0, 0.0, 0.0, "given")
    replaced = {k: (v * v if k in ("within", "between") else v) for k, v in given.items() if v is not None}
    basis = found.basis + (f"; given: {', '.join(sorted(replaced))}" if replaced and found.basis != "given" else "")
    return dataclasses.replace(found, **replaced, basis=basis)


def _design_calibration(args: argparse.Namespace, config: dict[str, Any], records: list[Any]) -> Any:
    """plan --design's calibration (--calibration, else claims.calibration), refused unless it is of
    the run records' hardware (none recorded: this host's), with its plain words printed first."""
    from dlvirt.analysis.calibrate import plain_words
    from dlvirt.core.calibration import read_calibration, require
    from dlvirt.system.hostinfo import hardware_label, node_identity

    path = args.calibration or config["claims"]["calibration"]
    if not path:
        return None
    calibration = read_calibration(path)
    kinds = {hardware_label(r.node) for r in records if r.node is not None}
    require(calibration, kinds or {hardware_label(node_identity())},
            f"the run records under {args.runs}" if kinds else "this host")
    for line in plain_words(calibration):
        print(line)
    return calibration


def _cmd_plan(args: argparse.Namespace) -> int:
    from dlvirt.plan import design
    from dlvirt.plan.estimate import adaptive_count, background_line, estimate, read_records, report
    from dlvirt.plan.planner import expand
    from dlvirt.run.tools import primary
    from dlvirt.system.hostinfo import capabilities
    from dlvirt.system.observe import background_load

    if not (args.estimate or args.design):  # results/plan.json is the workflow's own plan (rule study_plan)
        raise UsageError("plan: --estimate or --design [FILE ...] is needed (the workflow writes results/plan.json "
                         "itself)")
    config = _estimate_config(args)
    plan = expand(config, capabilities() if config["host_check"] else None)
    records = read_records(Path(args.runs))
    if args.estimate:
        print(background_line(background_load(), config["study"]["interference"]))
        print(report(config, estimate(config, plan, records), len(records)))
    if args.design:
        inputs = _design_inputs(args, records)
        setting = config["study"]["repetitions"]
        n = setting if isinstance(setting, int) else adaptive_count(setting, math.sqrt(inputs.within))
        tool = primary(config["study"]["tools"])
        scenarios = sorted({(j.app, j.scenario) for j in plan.jobs_of(tool)}, key=lambda p: (p[0], p[1].name))
        calibration = _design_calibration(args, config, records)
        print(design.report(inputs, config, scenarios, n, args.target_case, args.target_claim, args.margin,
                            calibration))
    return 0


def _cmd_check_config(args: argparse.Namespace) -> int:
    from snakemake.utils import update_config, validate

    from dlvirt.plan.configcheck import check_config, load_config_file
    from dlvirt.plan.planner import expand
    from dlvirt.system.hostinfo import capabilities

    config: dict[str, Any] = {}
    for file in args.files:
        update_config(config, load_config_file(Path(file)))  # in Snakemake's order: later files win
    schema = Path(args.schema)
    check_config(config, args.files, schema, lambda c: validate(c, str(schema)), Path(args.checksum_cache))
    plan = expand(config, capabilities() if config["host_check"] else None)
    print(f"{' + '.join(args.files)}: valid, {len(plan.jobs)} job(s) planned, {len(plan.left_out)} left out")
    return 0


def _cmd_tables(args: argparse.Namespace) -> int:
    from dlvirt.analysis.tables import write_tables

    write_tables([Path(p) for p in args.runs], Path(args.host), Path(args.plan), Path(args.table1), Path(args.table2))
    return 0


def _cmd_claims(args: argparse.Namespace) -> int:
    from dlvirt.analysis.claims import write_claims

    table = write_claims(Path(args.summary), Path(args.host), Path(args.plan), Path(args.output), args.margin,
                         Path(args.calibration) if args.calibration else None)
    for row in table.itertuples():
        print(f"{row.id}: {row.verdict}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from dlvirt.analysis.report import write_report

    write_report(Path(args.output), figures={Path(p).stem: Path(p) for p in args.figures},
                 summary=Path(args.summary), host=Path(args.host), plan=Path(args.plan), claims=Path(args.claims),
                 table1=Path(args.table1), table2=Path(args.table2), runs=[Path(p) for p in args.runs],
                 calibration=Path(args.calibration) if args.calibration else None)
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from dlvirt.analysis.compare import EXIT_SLOWER, SLOWER, calibration_line, run
    from dlvirt.core.calibration import read_calibration

    calibration = read_calibration(args.calibration) if args.calibration else None
    table = run(Path(args.a), Path(args.b), Path(args.out), args.margin, calibration)
    print(calibration_line(table, calibration))
    for row in table.itertuples():
        ratio = "" if row.ratio != row.ratio else f" B/A {row.ratio:.3g}"
        interval = "" if row.low90 != row.low90 else f" [90 % CI {row.low90:.3g}, {row.high90:.3g}]"
        why = f" ({row.why})" if row.why else ""
        on = " (p99 latency)" if row.measure != "E2E" else ""
        print(f"{row.tool} {row.app} {row.scenario}{on}: {row.verdict}{ratio}{interval}{why}")
    print(f"written: {Path(args.out) / 'compare.csv'}, {Path(args.out) / 'compare.html'}")
    return EXIT_SLOWER if (table["verdict"] == SLOWER).any() else 0


def _cmd_warmup(args: argparse.Namespace) -> int:
    from dlvirt.analysis.warmup import report, suggest
    from dlvirt.plan.estimate import read_records

    records = [r for runs in args.runs for r in read_records(Path(runs))]
    print(report(suggest(records, args.margin), args.margin))
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from dlvirt.analysis.calibrate import calibrate, plain_words

    calibration = calibrate([Path(f) for f in args.blocks], args.margin)
    calibration.write(Path(args.out))
    for line in plain_words(calibration):
        print(line)
    print(f"written: {args.out}")
    return 0


def _cmd_cpus(args: argparse.Namespace) -> int:
    import os

    from dlvirt.system import topology

    try:
        topo = topology.read(args.sysfs or "/")
        # on this host only the CPUs this process may use; a fixture tree has no such limit
        allowed = None if args.sysfs else os.sched_getaffinity(0)
        placed = topology.place(topo, args.cores, args.placement, allowed)
    except topology.TopologyError as exc:
        raise UsageError(f"--cores {args.cores}{f' on --sysfs {args.sysfs}' if args.sysfs else ''}: {exc}") from None
    print(json.dumps({"cpus": list(placed.cpus), "mems": list(placed.mems), "sockets": placed.sockets,
                      "nodes": placed.nodes, "policy": placed.policy}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dlvirt", description=__doc__)
    parser.add_argument("--version", action="version", version=f"dlvirt {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("host", help="write the host facts JSON")
    p.add_argument("--output", required=True)
    p.set_defaults(func=_cmd_host)

    p = sub.add_parser("cpus", help="show, as JSON, the CPUs and memory nodes a PIN scenario of N cores gets")
    p.add_argument("--cores", type=int, required=True)
    p.add_argument("--placement", default="compact", choices=["compact", "spread", "smt"],
                   help="the platforms.placement policy")
    p.add_argument("--sysfs", default=None, metavar="ROOT",
                   help="a directory holding sys/devices/system (a fixture of another host); default: this host")
    p.set_defaults(func=_cmd_cpus)

    p = sub.add_parser("dataset", help="generate or register an app's dataset")
    p.add_argument("--app", required=True)
    p.add_argument("--settings", required=True, help="the app's settings as JSON")
    p.add_argument("--output-dir", required=True)
    p.add_argument("--schema", default="workflow/schemas/config.schema.yaml",
                   help="the config schema the settings are checked against (as apps.<app>)")
    p.set_defaults(func=_cmd_dataset)

    p = sub.add_parser("weights", help="build an app's seeded random initialisation once, in the framework's "
                                       "own format, with its SHA-256 beside it (the launches load it)")
    p.add_argument("--app", required=True)
    p.add_argument("--settings", required=True, help="the app's settings as JSON")
    p.add_argument("--dataset-dir", required=True)
    p.add_argument("--output", required=True, help="the weights file; OUTPUT.sha256 is written beside it")
    p.set_defaults(func=_cmd_weights)

    # the commands that download: the workflow reruns them after a failure (rule retries:), waiting first
    retry = argparse.ArgumentParser(add_help=False)
    retry.add_argument("--retry-wait-s", type=float, default=0,
                       help="wait this long first (a rerun after a failed attempt), saying so")

    p = sub.add_parser("download", parents=[retry],
                       help="fetch an app's real dataset and verify its checksums (needs network)")
    p.add_argument("--app", required=True)
    p.add_argument("--output-dir", required=True)
    p.set_defaults(func=_cmd_download)

    p = sub.add_parser("bench", help="run one benchmark job (all repetitions of one scenario)")
    p.add_argument("--spec", required=True, help="job spec as JSON; - reads it from stdin (off the command line)")
    p.add_argument("--output", required=True)
    p.add_argument("--loadgen-dir", required=True)
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser("site-facts", help="write an edge host's facts, measured there over SSH")
    p.add_argument("--site", required=True, help="its name under hosts:")
    p.add_argument("--ssh", required=True, help="its hosts.<site> settings as JSON")
    p.add_argument("--output", required=True)
    p.set_defaults(func=_cmd_site_facts)

    p = sub.add_parser("site-bench", help="run one benchmark job on an edge host over SSH")
    p.add_argument("--site", required=True, help="its name under hosts:")
    p.add_argument("--ssh", required=True, help="its hosts.<site> settings as JSON")
    p.add_argument("--spec", required=True, help="job spec as JSON; - reads it from stdin (off the command line)")
    p.add_argument("--output", required=True)
    p.add_argument("--loadgen-dir", required=True)
    p.set_defaults(func=_cmd_site_bench)

    p = sub.add_parser("aggregate", help="summarise run files into a CSV")
    p.add_argument("--output", required=True)
    p.add_argument("--allow-mixed-code", action="store_true",
                   help="summarise a result whose harness and runner code differ (the row says so)")
    p.add_argument("inputs", nargs="*")
    p.set_defaults(func=_cmd_aggregate)

    p = sub.add_parser("concat", help="concatenate summary CSVs")
    p.add_argument("--output", required=True)
    p.add_argument("inputs", nargs="*")
    p.set_defaults(func=_cmd_concat)

    p = sub.add_parser("cleanup", help="remove cgroups/containers/VMs left by a killed run")
    p.add_argument("--settings", default="{}", help="the config's platforms section as JSON")
    p.add_argument("--work-roots", nargs="*", default=[],
                   help="folders whose stale job work directories (.work-<run id>-*) to remove")
    p.set_defaults(func=_cmd_cleanup)

    p = sub.add_parser("background-load", help="print the host's background load: the cores other processes kept "
                                               "busy over a short sample (the workflow's start prints it)")
    p.add_argument("--settings", required=True, help="the config's study.interference section as JSON")
    p.add_argument("--sample-s", type=float, default=1.0, help="how long to sample (s)")
    p.set_defaults(func=_cmd_background_load)

    p = sub.add_parser("engines", help="start (up) the engines the platforms need, or release (down) "
                                       "those recorded, stopping what dlvirt started once nobody uses it")
    p.add_argument("action", choices=["up", "down"])
    p.add_argument("--holder", type=int, required=True, help="PID whose lifetime the leases follow (the workflow's)")
    p.add_argument("--state-dir", required=True, help="where the workflow records what it acquired")
    p.add_argument("--platforms", nargs="*", default=[])
    p.add_argument("--settings", default="{}", help="the config's platforms section as JSON")
    p.set_defaults(func=_cmd_engines)

    p = sub.add_parser("image", parents=[retry],
                       help="build (or pull) the container image unless the engine has it; write its marker")
    p.add_argument("--settings", required=True, help="the container platform's config section as JSON")
    p.add_argument("--output", required=True)
    p.set_defaults(func=_cmd_image)

    p = sub.add_parser("guest-image", parents=[retry],
                       help="build a guest disk image offline (for the platforms that boot one)")
    p.add_argument("--variant", required=True, choices=["probe", "full", "gpu", "docker"])
    p.add_argument("--output-dir", required=True)
    p.add_argument("--cn-settings", default="{}", help="the container platform's config section as JSON "
                   "(and the gpu_driver of the platform booting variant gpu)")
    p.add_argument("--cn-image", default="", help="the container image to preload (variant docker)")
    p.set_defaults(func=_cmd_guest_image)

    p = sub.add_parser("plan", help="with --estimate, project the study's machine time from the run records so far "
                                    "(results/plan.json itself is written by the workflow)")
    p.add_argument("--config", nargs="+", help="KEY=VALUE overrides")
    p.add_argument("--estimate", action="store_true",
                   help="print the projected machine time per scenario and in total (fixed and adaptive repetitions)")
    p.add_argument("files", nargs="*", help="config files merged over --default-config")
    p.add_argument("--default-config", default="config/config.yaml")
    p.add_argument("--schema", default="workflow/schemas/config.schema.yaml")
    p.add_argument("--runs", default="results/runs", help="the run records to measure from")
    p.add_argument("--design", action="store_true",
                   help="print the design sizing (Kalibera & Jones): variance components, optimal repetitions per "
                        "launch, each claim's projected half-width and power, and the launches the targets need")
    p.add_argument("--within-cv", type=float, help="--design: the within-launch SD (log scale) instead of the records'")
    p.add_argument("--between-cv", type=float, help="--design: the between-launch SD (log scale) instead")
    p.add_argument("--launch-s", type=float, help="--design: the cost of a launch in seconds instead")
    p.add_argument("--repetition-s", type=float, help="--design: the cost of a repetition in seconds instead")
    p.add_argument("--target-case", type=float, default=0.12, help="--design: per-case 90 %% half-width to reach")
    p.add_argument("--target-claim", type=float, default=0.07, help="--design: claim-level 90 %% half-width to reach")
    p.add_argument("--margin", type=float, default=0.05, help="--design: the equivalence margin")
    p.add_argument("--calibration", default=None, help="--design: this hardware's calibration (dlvirt calibrate's "
                   "JSON; default: the config's claims.calibration): each contrast carries its day variance")
    p.set_defaults(func=_cmd_plan)

    p = sub.add_parser("check-config", help="check config files as the workflow does, naming the file and line "
                                            "or the key of the first problem (Snakemake names neither for YAML errors)")
    p.add_argument("files", nargs="+", help="config files in Snakemake's order (config/config.yaml first, as the "
                                           "Snakefile reads it before any --configfile)")
    p.add_argument("--schema", default="workflow/schemas/config.schema.yaml")
    p.add_argument("--checksum-cache", default="resources/checksums.json")
    p.set_defaults(func=_cmd_check_config)

    p = sub.add_parser("tables", help="write the paper's Tables I and II from run records")
    p.add_argument("--host", required=True)
    p.add_argument("--plan", required=True)
    p.add_argument("--table1", required=True)
    p.add_argument("--table2", required=True)
    p.add_argument("runs", nargs="*")
    p.set_defaults(func=_cmd_tables)

    p = sub.add_parser("claims", help="check the paper's claims against the summary")
    p.add_argument("--summary", required=True)
    p.add_argument("--host", required=True)
    p.add_argument("--plan", required=True)
    p.add_argument("--margin", type=float, default=None,
                   help="relative equivalence margin of the tests (config claims.equivalence_margin; default 0.05)")
    p.add_argument("--calibration", default=None, help="this hardware's calibration (dlvirt calibrate's JSON; "
                   "config claims.calibration; none or \"\": verdicts speak of this study's day only)")
    p.add_argument("--output", required=True)
    p.set_defaults(func=_cmd_claims)

    p = sub.add_parser("report", help="write the self-contained HTML report")
    p.add_argument("--summary", required=True)
    p.add_argument("--host", required=True)
    p.add_argument("--plan", required=True)
    p.add_argument("--claims", required=True)
    p.add_argument("--table1", required=True)
    p.add_argument("--table2", required=True)
    p.add_argument("--runs", nargs="*", default=[], help="the run records (results/runs/...): their machine time")
    p.add_argument("--calibration", default=None, help="this hardware's calibration (config claims.calibration): "
                   "its plain words in the host section")
    p.add_argument("--output", required=True)
    p.add_argument("figures", nargs="*", help="figure PNGs, named <figure id>.png")
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser("compare", help="compare two finished studies' results folders, B against A (exit 1 when "
                                       "some scenario is significantly slower in B beyond the margin)")
    p.add_argument("a", help="results folder of study A (summary.csv, host.json, runs/)")
    p.add_argument("b", help="results folder of study B")
    p.add_argument("--out", default="compare", help="folder for compare.csv and compare.html (default: compare)")
    p.add_argument("--margin", type=float, default=0.05, help="relative margin for alike / minimum effect (0.05)")
    p.add_argument("--calibration", default=None,
                   help="this hardware's calibration (dlvirt calibrate's JSON): its day variance enters the contrasts")
    p.set_defaults(func=_cmd_compare)

    p = sub.add_parser("warmup", help="suggest each app's and tool's warm-up count (study.warmup_repetitions) "
                                      "from a pilot's run records")
    p.add_argument("runs", nargs="+", help="run record folders (results/runs)")
    p.add_argument("--margin", type=float, default=0.01,
                   help="a repetition slower than its launch's later half by at most this share has warmed (0.01)")
    p.set_defaults(func=_cmd_warmup)

    p = sub.add_parser("calibrate", help="this hardware's day-to-day variance from A/A blocks (two or more results "
                                         "folders of one config run at different times), for compare")
    p.add_argument("blocks", nargs="+", help="results folders of the blocks (summary.csv, host.json, runs/)")
    p.add_argument("--out", default="calibration.json", help="the calibration document (default: calibration.json)")
    p.add_argument("--margin", type=float, default=0.05, help="compare's margin for the blocks' false alarms (0.05)")
    p.set_defaults(func=_cmd_calibrate)

    args = parser.parse_args(argv)
    if getattr(args, "retry_wait_s", 0) > 0:
        print(f"dlvirt {args.command}: an earlier attempt failed (its log is replaced by this one); "
              f"retrying in {args.retry_wait_s:.0f} s", flush=True)
        time.sleep(args.retry_wait_s)
    try:
        return int(args.func(args))
    except Exception as err:
        code = _exit_code(err)
        if code is None:
            raise
        print(f"dlvirt {args.command}: {_message(err)}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
