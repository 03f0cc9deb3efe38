"""Shared test helpers: run the real workflow in a private copy, so tests never touch the
repository's own results/ and resources/ and can run side by side."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
WORKFLOW_PARTS = ("Snakefile", "workflow", "config", "notebooks", "envs", "src", "profiles", "pyproject.toml")


def plan_document(left_out=(), **fields) -> dict:
    """A results/plan.json document as the workflow writes it, with the real registries' kinds."""
    from dlvirt.plan.planner import kinds

    return {"study": "fixture", "config_sha256": "0123456789abcdef", "host_check": True, "host_cores": 4,
            "repetitions": 5, "warmup_repetitions": 1, "jobs": [], "left_out": [list(e) for e in left_out],
            "kinds": kinds().document(), **fields}


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


# smoke.yaml's guest scenarios take minutes each under TCG: tests/test_platform_guests.py runs them
# within its own budget, so the other tests' smoke studies leave them out.
GUEST_PLATFORMS = ("VM", "MVM", "VMCN")


def smoke_config(guests: bool = False, replicates: int = 1, **overrides: object) -> dict:
    """smoke.yaml, by default with one launch per scenario (its replicates: 2 doubles every job;
    the tests of replicates and their interleaved order ask for them)."""
    config = yaml.safe_load((REPO / "config" / "smoke.yaml").read_text())
    if not guests:
        matrix = [{**block, "platforms": [p for p in block["platforms"] if p not in GUEST_PLATFORMS]}
                  for block in config["study"]["matrix"]]
        config["study"]["matrix"] = [block for block in matrix if block["platforms"]]
    config.update(overrides)
    if "replicates" not in (overrides.get("study") or {}):  # type: ignore[operator]
        config["study"]["replicates"] = replicates
    return config


def run_one_job(workdir: Path, app: str, scenario: str, tool: str = "mlperf") -> tuple[dict, dict]:
    """Run the smoke config's ``tool`` × ``app`` on one scenario ("BM/1/PIN/CPU") through the real
    workflow; return the config used and the job's result file."""
    platform, cores, pinning, processor = scenario.split("/")
    config = smoke_config()
    config["study"].update(apps=[app], tools=[tool], matrix=[
        {"platforms": [platform], "cores": [int(cores)], "pinning": [pinning], "processors": [processor]}])
    path = write_config(workdir / f"{tool}-{app}.yaml", config)
    target = f"results/runs/{tool}/{app}/{scenario}/1.json"
    snakemake(workdir, target, "--configfile", str(path))
    return config, json.loads((workdir / target).read_text())


# headless Chromium as the tests of the HTML pages run it (test_report, test_compare)
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--virtual-time-budget=20000"]
