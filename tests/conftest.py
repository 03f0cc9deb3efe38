"""Fixtures and helpers shared by both tiers (tests/unit, tests/integration): the real workflow in a
private copy (so tests never touch the repository's own results/ and resources/ and can run side by
side), daemons a test starts by hand, sysfs trees of servers this machine is not, the figure and
report fixtures, job specs as the workflow builds them and the apps' small synthetic datasets.

Tests import the helpers from here (``from conftest import ...``); no test imports another test.
A stand-in that is a program of its own lives beside this file (fake_docker.py, a Docker engine)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dlvirt.run.tools.base import OutsideModel

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"  # recorded run records, summaries, host facts, plans
WORKFLOW_PARTS = ("Snakefile", "workflow", "config", "notebooks", "envs", "src", "profiles", "pyproject.toml")


def plan_document(left_out=(), **fields) -> dict:
    """A results/plan.json document as the workflow writes it, with the real registries' kinds; the
    left-out entries as Gaps or their documents."""
    from dlvirt.core import formats
    from dlvirt.plan.leftout import Gap
    from dlvirt.plan.planner import kinds

    entries = [e.document() if isinstance(e, Gap) else e for e in left_out]
    return formats.stamped("plan", {
        "study": "fixture", "config_sha256": "0123456789abcdef", "host_check": True, "host_cores": 4,
        "repetitions": 5, "warmup_repetitions": 1, "jobs": [], "left_out": entries, "kinds": kinds().document(),
        **fields})


def write_plan(path: Path, left_out=(), **fields) -> Path:
    path.write_text(json.dumps(plan_document(left_out, **fields)))
    return path


def copy_workflow(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for part in WORKFLOW_PARTS:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, dest / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        elif src.exists():
            shutil.copy2(src, dest / part)
    return dest


@pytest.fixture
def workflow_dir(tmp_path: Path) -> Path:
    return copy_workflow(tmp_path / "wf")


def tool_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def snakemake(workdir: Path, *args: str, check: bool = True, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    """Run the real snakemake CLI in ``workdir``; on failure show its output and the job logs.

    Put targets before ``--configfile``: that option takes every following word as a file."""
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", *args]
    # its own process group, so that a test that runs out of time stops the jobs too (their runners
    # tear their platform down on SIGTERM), not only Snakemake: a timed-out test leaves no guest behind
    with subprocess.Popen(cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=tool_env(), start_new_session=True) as child:
        try:
            stdout, stderr = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_group(child)
            raise
    proc = subprocess.CompletedProcess(cmd, child.returncode, stdout, stderr)
    if check and proc.returncode != 0:
        logs = ""
        for log in sorted((workdir / "results" / "logs").rglob("*.log")) if (workdir / "results").exists() else []:
            logs += f"\n--- {log}\n" + log.read_text()[-3000:]
        raise AssertionError(f"snakemake {' '.join(args)} failed ({proc.returncode}):\n"
                             f"{proc.stdout[-5000:]}\n{proc.stderr[-8000:]}{logs}")
    return proc


def stop_group(child: subprocess.Popen[str], grace_s: float = 60) -> None:
    """SIGTERM to ``child``'s process group, SIGKILL to what is left after ``grace_s``."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.communicate(timeout=wait_s)
            return


def write_config(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# smoke.yaml's guest scenarios take minutes each under TCG: tests/integration/test_platform_guests.py runs them
# within its own budget, so the other tests' smoke studies leave them out.
GUEST_PLATFORMS = ("VM", "MVM", "VMCN")
# ... and its sandboxed-container rows, tests/integration/test_platform_scn.py's
SANDBOX_PLATFORMS = ("SCN",)


def smoke_config(guests: bool = False, replicates: int = 1, sandboxed: bool = False, **overrides: object) -> dict:
    """smoke.yaml, by default with one launch per scenario (its replicates: 2 doubles every job;
    the tests of replicates and their interleaved order ask for them), without its guest and
    sandboxed-container rows unless asked."""
    config = yaml.safe_load((REPO / "config" / "smoke.yaml").read_text())
    left_out = (() if guests else GUEST_PLATFORMS) + (() if sandboxed else SANDBOX_PLATFORMS)
    matrix = [{**block, "platforms": [p for p in block["platforms"] if p not in left_out]}
              for block in config["study"]["matrix"]]
    config["study"]["matrix"] = [block for block in matrix if block["platforms"]]
    config.update(overrides)
    if "replicates" not in (overrides.get("study") or {}):  # type: ignore[operator]
        config["study"]["replicates"] = replicates
    return config


@pytest.fixture(scope="session")
def smoke_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The smoke study (``smoke_config()``: every app and run tool on BM and CN, one launch per
    scenario) through the real workflow's ``all``, once per session: the tests of the workflow end to
    end and of each app's and tool's smoke job read its results, and studies that differ from it
    start from a copy of it (``copy_study``), so that the jobs they share are not run again. Nothing
    writes into it: a test that changes its config or results works on a copy."""
    workdir = copy_workflow(tmp_path_factory.mktemp("smoke-study") / "wf")
    snakemake(workdir, "all", "--configfile", str(write_config(workdir / "smoke.yaml", smoke_config())))
    return workdir


def copy_study(study: Path, dest: Path, runs: bool = True) -> Path:
    """A copy of a study's working directory (its results, resources and Snakemake's records, times
    kept), in which Snakemake reruns only what another config changes. ``runs`` False: of its results
    only the host's facts (its datasets, weights and images stay), so that every launch is new."""
    results = study / "results"

    def left_out(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if n != "host.json"] if not runs and Path(folder) == results else []

    return Path(shutil.copytree(study, dest, symlinks=True, ignore=left_out))


def smoke_job(study: Path, app: str, scenario: str, tool: str = "mlperf") -> tuple[dict, dict]:
    """The config of ``smoke_study`` and the result file of its ``tool`` x ``app`` on ``scenario``
    ("BM/1/PIN/CPU", launch 1)."""
    return smoke_config(), json.loads((study / f"results/runs/{tool}/{app}/{scenario}/1.json").read_text())


# headless Chromium as the tests of the HTML pages run it (test_report, test_compare)
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--virtual-time-budget=20000"]


# -- tiers --------------------------------------------------------------------------------------

def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test under tests/integration carries the ``integration`` marker (its folder is its tier)."""
    integration = REPO / "tests" / "integration"
    for item in items:
        if item.path.is_relative_to(integration):
            item.add_marker(pytest.mark.integration)


# -- names in use in the code (tests of kinds and tools: no module names what it does not own)

def source_strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string literal in a Python or Snakemake file; docstrings and comments
    are prose, not names in use."""
    import ast
    import io
    import tokenize

    if path.suffix == ".py":
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        return [(node.lineno, node.value) for node in ast.walk(tree)
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]
    return [(token.start[0], token.string) for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
            # .smk: docstrings are triple-quoted
            if token.type == tokenize.STRING and not token.string.startswith('"""')]


# -- daemons a test starts by hand (this machine has no service manager): each runs in the
# foreground as our child, with its own config, state and log files, and is stopped by its PID when
# the test ends, passed or failed.
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def stop_daemon(proc: subprocess.Popen, grace_s: float = 20) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def daemon(argv: list[str], log: Path, ready: Callable[[], bool], timeout_s: float = 30,
           env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """Run ``argv`` (a foreground daemon) until the block ends; ``ready`` says when it serves."""
    with open(log, "ab") as out:
        # own session: a Ctrl-C at the terminal reaches pytest, whose teardown then stops it
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while not ready():
            if proc.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited ({proc.returncode}): {log.read_text(errors='replace')[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{argv[0]} not ready after {timeout_s} s: "
                                   f"{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
        yield proc
    finally:
        stop_daemon(proc)


@pytest.fixture(scope="session")
def libvirt_daemons() -> Iterator[None]:
    """virtlogd and libvirtd for the session (the guest tests', the libvirt version test's: started
    once, as QEMU's capabilities probe takes seconds), through dlvirt.system.engines when none
    answers, and released at its end."""
    from dlvirt.platforms.vm import VirtualMachine
    from dlvirt.system import engines
    from dlvirt.system.hostinfo import capabilities

    if not capabilities().libvirt:
        pytest.skip("libvirtd is not installed")
    acquired = []
    try:
        for daemon in VirtualMachine.daemons({}):
            if engines.acquire(daemon, os.getpid()) is not None:
                acquired.append(daemon.name)
        yield
    finally:
        for name in reversed(acquired):
            engines.release(name, os.getpid())


# -- server topologies this 2-CPU, one-node test machine does not have, as sysfs trees.
# Each builder writes ``ROOT/sys/devices/system/{cpu,node}`` the way the kernel lays them out
# (``cpu/online``, ``cpuN/topology/{physical_package_id,die_id,core_id,thread_siblings_list}``,
# ``node/online``, ``nodeN/cpulist``) and returns ROOT, for ``dlvirt.system.topology.read(ROOT)`` and
# ``python -m dlvirt cpus --sysfs ROOT``.
# (cpu, package, core, node) — die 0 everywhere, as on the Xeons of the paper
Layout = list[tuple[int, int, int, int]]


def write_sysfs(root: Path, layout: Layout) -> Path:
    from dlvirt.system.topology import format_cpulist

    base = root / "sys" / "devices" / "system"
    (base / "cpu").mkdir(parents=True, exist_ok=True)
    (base / "cpu" / "online").write_text(format_cpulist(c for c, *_ in layout) + "\n")
    for cpu, package, core, _ in layout:
        topo = base / "cpu" / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        siblings = [c for c, p, k, _ in layout if (p, k) == (package, core)]
        for name, value in (("physical_package_id", package), ("die_id", 0), ("core_id", core),
                            ("thread_siblings_list", format_cpulist(siblings))):
            (topo / name).write_text(f"{value}\n")
    nodes = sorted({n for *_, n in layout})
    (base / "node").mkdir(parents=True, exist_ok=True)
    (base / "node" / "online").write_text(format_cpulist(nodes) + "\n")
    for node in nodes:
        (base / "node" / f"node{node}").mkdir()
        (base / "node" / f"node{node}" / "cpulist").write_text(
            format_cpulist(c for c, _, _, n in layout if n == node) + "\n")
    return root


def interleaved_two_socket(root: Path) -> Path:
    """8 CPUs, no SMT; socket 0 = even CPUs (node 0), socket 1 = odd CPUs (node 1): Dell PowerEdge style."""
    return write_sysfs(root, [(c, c % 2, c // 2, c % 2) for c in range(8)])


def contiguous_two_socket(root: Path) -> Path:
    """8 CPUs, no SMT; socket 0 = CPUs 0-3 (node 0), socket 1 = CPUs 4-7 (node 1)."""
    return write_sysfs(root, [(c, c // 4, c % 4, c // 4) for c in range(8)])


def one_socket_smt(root: Path) -> Path:
    """16 CPUs on one socket and node: CPUs 0-7 are the cores, 8-15 their SMT siblings."""
    return write_sysfs(root, [(c, 0, c % 8, 0) for c in range(16)])


def interleaved_two_socket_smt(root: Path) -> Path:
    """The paper's server in small: 2 sockets x 4 cores x 2 threads, interleaved (socket 0 = even
    CPUs), siblings after all cores (CPU c and c + 8)."""
    return write_sysfs(root, [(c, c % 2, (c % 8) // 2, c % 2) for c in range(16)])


def four_nodes(root: Path) -> Path:
    """16 CPUs, no SMT, 2 sockets split into 2 NUMA nodes each (sub-NUMA clustering): node n = CPUs 4n-4n+3."""
    return write_sysfs(root, [(c, c // 8, c % 8, c // 4) for c in range(16)])


# -- figures and the report from fixture summaries (tests of figures, the report, the tables) ---

SUMMARIES = FIXTURES / "summaries"
CASES = {  # fixture -> (summary, host facts, the plan's left-out entries)
    "full": (SUMMARIES / "full.csv", FIXTURES / "host_full.json", []),
    "partial": (SUMMARIES / "partial.csv", FIXTURES / "host_partial.json",
                json.loads((FIXTURES / "gaps_partial.json").read_text())),
    "empty": (SUMMARIES / "empty.csv", FIXTURES / "host_partial.json", []),
}
RUNS = sorted((FIXTURES / "runs").glob("*.json"))


def parameters(spec, case, out: Path) -> dict:
    summary, host, gaps = CASES[case]
    plan = write_plan(out / f"plan-{case}.json", gaps)
    return {"summaries": [str(summary)], "host": str(host), "plan": str(plan), "png": str(out / f"{spec.id}.png"),
            "pdf": str(out / f"{spec.id}.pdf"), **spec.parameters}


def run_notebook_in_process(notebook: Path, params: dict) -> None:
    """The notebook's code cells, with the parameters injected after its parameters cell as
    papermill does (the kernel start-up is what this saves; papermill itself is tested in
    tests/integration/test_notebooks.py)."""
    import matplotlib.pyplot
    import nbformat

    namespace: dict = {}
    for cell in nbformat.read(notebook, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        exec(compile(cell.source, str(notebook), "exec"), namespace)  # noqa: S102 - our own notebooks
        if "parameters" in cell.metadata.get("tags", []):
            namespace.update(params)
    matplotlib.pyplot.close("all")


def assert_rendered(png: Path, pdf: Path) -> None:
    from PIL import Image

    with Image.open(png) as image:
        image.load()
        assert image.width >= 600 and image.height >= 300
    assert pdf.read_bytes().startswith(b"%PDF")


@pytest.fixture(scope="module")
def built_tables(tmp_path_factory) -> dict[str, Path]:
    """Tables and claims from the fixtures (no figures), built once per test module."""
    from dlvirt.analysis.claims import write_claims
    from dlvirt.analysis.tables import write_tables

    out = tmp_path_factory.mktemp("report")
    summary, host, gaps = CASES["full"]
    plan = write_plan(out / "plan.json", CASES["partial"][2],
                      estimate={"records": 3, "jobs": 4, "unknown_jobs": 1, "fixed_s": None, "adaptive_s": 5400.0})
    paths = {"summary": summary, "host": host, "plan": plan, "claims": out / "claims.csv",
             "table1": out / "table1.csv", "table2": out / "table2.csv"}
    write_tables(RUNS, host, plan, paths["table1"], paths["table2"])
    write_claims(summary, host, plan, paths["claims"])
    return {**paths, "dir": out}


@pytest.fixture(scope="module")
def built_report(built_tables) -> dict[str, Path]:
    """Every figure (each notebook on the full fixture, in-process), then the report with the tables
    and claims of ``built_tables``, built once per test module."""
    from dlvirt.analysis.catalog import FIGURES
    from dlvirt.analysis.report import write_report

    out = built_tables["dir"]
    for spec in FIGURES:
        run_notebook_in_process(REPO / "notebooks" / f"{spec.notebook_name}.ipynb", parameters(spec, "full", out))
    paths = {key: value for key, value in built_tables.items() if key != "dir"}
    write_report(out / "report.html", figures={s.id: out / f"{s.id}.png" for s in FIGURES}, runs=RUNS, **paths)
    return {**built_tables, "report": out / "report.html"}


def jobs_that_would_run(workdir, *args):
    """The workflow's dry run (``snakemake -n``): jobs per rule."""
    # targets come before --configfile, which takes every following word as a file
    proc = snakemake(workdir, *args, "-n", "--quiet", "rules")
    counts = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0] != "total":
            counts[parts[0]] = int(parts[1])
    return counts


# -- two results folders for ``dlvirt compare`` (tests of compare and its HTML page) -------------

COMPARE_LAUNCHES, COMPARE_REPS = 4, 3


def compare_scenarios() -> list:
    from dlvirt.core.scenario import Scenario

    return [Scenario("BM", 1, "VNL", "CPU"), Scenario("CN", 1, "VNL", "CPU")]


def compare_study(folder: Path, scale: dict[str, float] | None = None,
                  model: dict[str, dict[str, Any]] | None = None,
                  launches: int = COMPARE_LAUNCHES, seed: int = 0, tool: str = "mlperf",
                  repetition: Callable[..., Any] | None = None) -> Path:
    """A results folder built from the fixture run record through the real summary code: run
    records (launch means spread ~1.5 %, round by round), summary, host facts. ``scale`` multiplies
    a scenario's times; ``model`` replaces fields of a scenario's model record (its name, how it
    ran). Another run ``tool``'s study gives its repetitions with ``repetition(template, scenario, index, rng)``."""
    import numpy as np

    from dlvirt.analysis.aggregate import write_summary
    from dlvirt.core.records import JobResult

    template = JobResult.read(FIXTURES / "runs" / "mlperf-ic-BM-1-VNL-CPU.json")
    rng = np.random.default_rng(seed)
    paths = []
    for scenario in compare_scenarios():
        for replicate in range(1, launches + 1):
            level = 0.75 * (1.0 + 0.015 * rng.standard_normal()) * (scale or {}).get(scenario.name, 1.0)
            runs = [repetition(template.runs[0], scenario, i, rng) if repetition else
                    dataclasses.replace(template.runs[0], repetition=i,
                                        e2e_s=float(level * (1.0 + 0.01 * rng.standard_normal())))
                    for i in range(COMPARE_REPS)]
            record = dataclasses.replace(
                template, tool=tool, scenario=scenario, scenario_name=scenario.name, replicate=replicate, runs=runs,
                run_id=f"{tool}-{scenario.platform}-{replicate}-{seed}",
                platform={**template.platform, "platform": scenario.platform},
                model={**template.model, **(model or {}).get(scenario.name, {})})
            s = scenario
            path = folder / "runs" / tool / "ic" / s.platform / str(s.cores) / s.pinning / s.processor / \
                f"{replicate}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            record.write(path)
            paths.append(path)
    write_summary(paths, folder / "summary.csv")
    shutil.copy(FIXTURES / "host_full.json", folder / "host.json")
    return folder


# -- job specs as the workflow builds them (dlvirt.plan.jobspec.job_spec), for ``run_job`` and the CLI

def schema_config() -> dict:
    """A config of the schema's defaults, as the workflow fills them in."""
    from snakemake.utils import validate

    config: dict = {}
    validate(config, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    return config


def spec_document(app: str, dataset: Path, scenario: str = "BM/1/PIN/CPU", *, tool: str = "mlperf",
                  app_settings: dict | None = None, **fields: Any) -> dict:
    """The spec of a ``tool`` job of ``app`` on ``scenario`` as the workflow builds it from the schema's
    defaults (``app_settings``: the app's section instead of its defaults), as a JSON object: reading
    ``dataset``, loading no weights resource, never rerun for interference; ``fields`` replace its own."""
    from dlvirt.core.scenario import Scenario
    from dlvirt.plan.jobspec import job_spec
    from dlvirt.plan.planner import Job

    config = schema_config()
    if app_settings is not None:
        config["apps"][app] = app_settings
    document = job_spec(config, Job(tool, app, Scenario.parse(scenario))).to_dict()
    for key in ("weights_file", "interference"):
        document.pop(key, None)
    return {**document, "dataset_dir": str(dataset), **fields}


IC_SETTINGS: dict[str, Any] = {
    "batch_size": 4, "seed": 0, "dataset": {"path": None, "count": 4, "seed": 0},
    "weights": {"path": None, "sha256": None},
    "loadgen": {"min_query_count": 4, "min_duration_ms": 0, "expected_qps": 1, "performance_sample_count": None}}


def ic_job_spec(dataset: Path, cores: int, pinning: str, tool: str = "mlperf", **extra: Any):
    """An IC job on BM, one repetition (``platform_settings``/``scenario`` in ``extra`` change that)."""
    from dlvirt.core.records import JobSpec

    fields = {"repetitions": 1, "warmup_repetitions": 0, "timeout_s": 600, "platform_settings": {}, **extra}
    return JobSpec.from_dict({**spec_document("ic", dataset, f"BM/{cores}/{pinning}/CPU", tool=tool,
                                              app_settings=IC_SETTINGS), **fields})


# -- the apps' small synthetic datasets, shared by the tests of an app's data (unit) and of its
# model (integration)


def one_thread():
    """The thread plan of one granted core (what the app tests run with)."""
    from dlvirt.apps.base import ThreadPlan

    return ThreadPlan(policy="granted", cores=1, intra_op=1, inter_op=1, pre_workers=1)


def ic_app(dataset, framework, processor="CPU", **settings):
    from dlvirt.apps.ic import ImageClassification

    settings = {"seed": 0, "dataset": {"path": None, "count": 3, "seed": 0}, "weights": {"path": None},
                "framework": framework, **settings}
    return ImageClassification(settings, dataset, processor, one_thread())


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    from dlvirt.apps.ic import ImageClassification

    out = tmp_path_factory.mktemp("ic-jpegs")
    ImageClassification.prepare_dataset(out, {"dataset": {"path": None, "count": 3, "seed": 4}})
    return out


@pytest.fixture(scope="module")
def nlp_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from dlvirt.apps.nlp import QuestionAnswering

    out = tmp_path_factory.mktemp("nlp-dataset")
    QuestionAnswering.prepare_dataset(out, {"dataset": {"path": None, "count": 40, "seed": 3}})
    return out


RS_DATASET: dict[str, Any] = {"path": None, "count": 6, "seed": 5, "lines_per_sample": {"min": 3, "max": 9}}
RS_SETTINGS: dict[str, Any] = {"dataset": RS_DATASET, "seed": 0, "max_rows_per_table": 1000, "threshold": 0.5}


@pytest.fixture(scope="module")
def rs_dataset(tmp_path_factory):
    from dlvirt.apps.rs import Recommendation

    out = tmp_path_factory.mktemp("rs-dataset")
    Recommendation.prepare_dataset(out, {"dataset": RS_DATASET})
    return out


@pytest.fixture(scope="module")
def sr_dataset(tmp_path_factory):
    from dlvirt.apps.sr import SpeechRecognition

    out = tmp_path_factory.mktemp("sr-dataset")
    SpeechRecognition.prepare_dataset(out, {"dataset": {"path": None, "count": 2, "seconds": 2.0, "seed": 3}})
    return out


# -- a stand-in app's model side: what the launch loop asks of an app beside its stages ----------

class StubModel(OutsideModel):
    """No framework, no GPU, random weights: the launch loop's questions to an app's model, answered
    by stand-in apps (the harness, latency and tool tests) that set ``threads`` and ``model_name``."""

    framework = "none"
    in_process = True
    dataset_info = {"source": "synthetic"}
    model_name = "stub"
    threads: Any

    def framework_threads(self) -> dict[str, Any]:
        return {"intra_op": self.threads.intra_op, "inter_op": self.threads.inter_op}

    def model_provenance(self) -> dict[str, Any]:
        return {"model": self.model_name, "weights": "random"}

    def framework_versions(self) -> dict[str, Any]:
        return {}


# -- the noop app (dlvirt.apps.noop), the null app of the plumbing tests ------------------------

NOOP_SETTINGS: dict[str, Any] = {
    "batch_size": 8, "seed": 0, "dataset": {"path": None, "count": 32, "features": 16, "seed": 0},
    "weights": {"path": None, "sha256": None},
    "loadgen": {"min_query_count": 32, "min_duration_ms": 0, "expected_qps": None, "performance_sample_count": None}}


def noop_job_spec(dataset: Path, weights: Path | None, cores: int = 1, pinning: str = "PIN", **extra: Any) -> dict:
    """A BM launch of the noop app as the workflow's benchmark rule writes it (a JSON object)."""
    fields = {"repetitions": 3, "warmup_repetitions": 1, "timeout_s": 300,
              "weights_file": None if weights is None else str(weights), "platform_settings": {"placement": "compact"},
              **extra}
    return {**spec_document("noop", dataset, f"BM/{cores}/{pinning}/CPU", app_settings=NOOP_SETTINGS), **fields}


@pytest.fixture(scope="module")
def noop_dataset(tmp_path_factory) -> Path:
    from dlvirt.apps.noop import NoopApp

    out = tmp_path_factory.mktemp("noop-dataset")
    NoopApp.prepare_dataset(out, NOOP_SETTINGS)
    return out


# -- Ctrl-C at a point of a job's life (the runners' stop paths: CN, CN on a stand-in engine, guests)

@dataclasses.dataclass
class Interrupted:
    pid: int
    returncode: int
    took_s: float       # from the signals to the exit
    lines: list[str]    # everything it printed


def interrupt_at(argv: list[str], point: str, pattern: str, signals: tuple[int, ...], *, reach_s: float,
                 stop_s: float, env: dict[str, str] | None = None, dump_stacks: bool = True,
                 what: str = "the job") -> Interrupted:
    """Start ``argv`` with SIGINT ignored (as a non-interactive shell starts anything in the
    background: the suite once lost a Ctrl-C so), read its output to the end on a thread (a full pipe
    would stall it) and, once a line matches ``pattern`` (the ``point`` of its life), send ``signals``
    at once. Still running ``stop_s`` later, it gets SIGABRT first where ``dump_stacks`` (with
    PYTHONFAULTHANDLER set, every thread's stack lands in its output) and the test fails with its
    last output; killed at the end either way."""
    import re
    import threading

    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    reached = threading.Event()
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if re.search(pattern, line):
                reached.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert reached.wait(timeout=reach_s), f"{what} never got {point}:\n{''.join(lines[-20:])}"
        signalled = time.monotonic()
        for number in signals:
            proc.send_signal(number)
        try:
            returncode = proc.wait(timeout=stop_s)
        except subprocess.TimeoutExpired:
            if dump_stacks:
                proc.send_signal(signal.SIGABRT)
                proc.wait(timeout=30)
            reader.join(timeout=10)
            pytest.fail(f"{what} still running {stop_s:g} s after {point}; its last output:\n{''.join(lines[-80:])}")
        took = time.monotonic() - signalled
    finally:
        proc.kill()
        proc.wait()
        reader.join(timeout=10)
    return Interrupted(proc.pid, returncode, took, lines)


def resident_mappings(path: Path) -> list[tuple[int, int]]:
    """(size, resident) in KiB of each of this process's mappings of ``path`` (/proc/self/smaps)."""
    found: list[list[int]] = []
    current: list[int] | None = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's header line
            current = [] if fields[-1] == str(path.resolve()) else None
            if current is not None:
                found.append(current)
        elif current is not None and fields[0] in ("Size:", "Rss:"):
            current.append(int(fields[1]))
    return [(size, rss) for size, rss in found]


# a competing process for the interference tests (test_interference, test_platform_cn): its name
# (/proc/<pid>/comm)
BUSY = "dlvirt-busy"


class Detached:
    """A process group started outside this one's tree (its starter exits at once: init or the
    nearest subreaper adopts it), as a competing process is: never the runner's descendant, which
    the host's account (dlvirt.system.whose) would take for the launch's or the platform's. It stays
    in this session, so in the scheduler's autogroup of the launches it competes with: in a session
    of its own it would compete as one group against this session's, and what it gets would depend
    on how busy this session is (and on its autogroup's nice)."""

    def __init__(self, argv: list[str]) -> None:
        starter = ("import subprocess, sys\n"
                   "print(subprocess.Popen(sys.argv[1:], process_group=0, stdin=subprocess.DEVNULL,\n"
                   "                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)\n")
        self.pid = int(subprocess.run([sys.executable, "-c", starter, *argv], capture_output=True, text=True,
                                      check=True).stdout)

    def kill(self) -> None:
        """Every process of its group."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)

    def wait(self, timeout_s: float = 10.0) -> None:
        """Until its adopter reaped its first process (or it is a zombie no one reaps yet: then it
        holds no CPU)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if Path(f"/proc/{self.pid}/stat").read_text().split(") ")[1].startswith("Z"):
                    return
            except (OSError, IndexError):
                return
            time.sleep(0.05)


def busy_process(cpus: tuple[int, ...], processes: int | None = None) -> Detached:
    """``processes`` spinning processes on ``cpus`` (default two for each: a launch runs a few
    threads, and one spinning process would get a third of a CPU beside two of them), named BUSY,
    outside this process's tree, started and left to the caller to end. They spin only while this
    process holds the host's benchmark lock (its launch runs): never beside another session's."""
    from dlvirt.system.benchlock import HOLDER, LOCK_DIR

    code = ("import ctypes, json, os, time\n"
            f"for _ in range({(processes or 2 * len(cpus)) - 1}):\n"
            "    if os.fork() == 0:\n        break\n"
            f"ctypes.CDLL(None).prctl(15, {BUSY.encode()!r}, 0, 0, 0)  # PR_SET_NAME\n"
            f"os.sched_setaffinity(0, {set(cpus)!r})\n"
            "while True:\n"
            "    try:\n"
            f"        ours = json.loads(open({str(LOCK_DIR / HOLDER)!r}).read())['pid'] == {os.getpid()}\n"
            "    except (OSError, ValueError, KeyError):\n"
            "        ours = False\n"
            "    until = time.monotonic() + 0.05\n"
            "    while ours and time.monotonic() < until:\n"
            "        pass\n"
            "    if not ours:\n"
            "        time.sleep(0.05)\n")
    return Detached([sys.executable, "-c", code])
