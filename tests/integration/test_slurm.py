"""profiles/slurm on a real one-node SLURM cluster: munged, slurmctld and slurmd started here, the
smoke study submitted through the profile with sbatch, results shaped like a local run's."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import copy_workflow, daemon, free_port, smoke_config, snakemake, write_config

BINARIES = ("munged", "munge", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo")
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
# The slurm executor's job step runs `srun` with every SLURM_* variable removed, SLURM_CONF too, so
# srun inside a job finds only the compiled-in /etc/slurm/slurm.conf (as on a real cluster). The
# test writes that file for its cluster, marked with its PID, and removes it; it never touches one
# it did not write.
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")
MARK = "# written by dlvirt tests/test_slurm.py, pid "
PROFILE = "profiles/slurm/config.v9+.yaml"
# No slurmdbd here, hence no sacct: job states come from squeue (a real site keeps sacct and an
# account). The first status check after 2 s instead of 40 s keeps the test short.
NO_ACCOUNTING = ("--slurm-status-command", "squeue", "--slurm-no-account",
                 "--slurm-init-seconds-before-status-checks", "2")


@dataclass
class Cluster:
    node: str
    cpus: int
    ctld_log: Path


def _conf_owner_alive() -> bool:
    """Whether /etc/slurm/slurm.conf belongs to someone else (a real cluster, a running test)."""
    text = SYSTEM_CONF.read_text(errors="replace")
    found = re.search(re.escape(MARK) + r"(\d+)", text)
    if found is None:
        return True
    try:
        os.kill(int(found.group(1)), 0)
    except ProcessLookupError:
        return False
    return True


def _memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


def _succeeds(*cmd: str) -> bool:
    return subprocess.run(cmd, capture_output=True, timeout=20, check=False).returncode == 0


def _node_state(node: str) -> str:
    out = subprocess.run(["sinfo", "-h", "-n", node, "-o", "%T"], capture_output=True, text=True, timeout=20,
                         check=False)
    return out.stdout.strip()


def _cancel_all_and_wait(node: str) -> None:
    """No job outlives the cluster: cancel what is left and wait for the node to be empty."""
    subprocess.run(["scancel", "--full", "--user", str(os.getuid())], capture_output=True, timeout=20, check=False)
    for _ in range(100):
        out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, timeout=20, check=False)
        if not out.stdout.strip():
            return
        subprocess.run(["sleep", "0.3"], check=False)


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    missing = [b for b in BINARIES if shutil.which(b, path=SEARCH_PATH) is None]
    if missing:
        pytest.skip(f"SLURM/munge not installed ({', '.join(missing)} missing; ./setup.sh installs slurm-wlm munge)")
    if os.geteuid() != 0:
        pytest.skip("slurmd must run as root to start jobs")
    if SYSTEM_CONF.exists() and _conf_owner_alive():
        pytest.skip(f"{SYSTEM_CONF} exists and is not this test's: a cluster of this machine is left alone")
    base = tmp_path_factory.mktemp("slurm")
    for sub in ("munge", "state", "spool", "log", "run"):
        (base / sub).mkdir()
    (base / "munge").chmod(0o700)
    key = base / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    sock = base / "munge" / "munge.sock"
    node = socket.gethostname().split(".")[0]
    cpus = os.cpu_count() or 1
    conf = "\n".join([
        f"{MARK}{os.getpid()}; removed when it ends",
        "ClusterName=dlvirt-test",
        f"SlurmctldHost={node}(127.0.0.1)",
        "SlurmUser=root", "SlurmdUser=root",
        f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={sock}",
        f"StateSaveLocation={base / 'state'}", f"SlurmdSpoolDir={base / 'spool'}",
        f"SlurmctldPidFile={base / 'run' / 'slurmctld.pid'}", f"SlurmdPidFile={base / 'run' / 'slurmd.pid'}",
        f"SlurmctldLogFile={base / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={base / 'log' / 'slurmd.log'}",
        # no cgroup plugins: this host has no systemd; task/affinity binds job steps to their CPUs
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/affinity",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory",
        "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
        "JobAcctGatherType=jobacct_gather/none", "MpiDefault=none", "ReturnToService=2",
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={int(_memory_mb() * 0.8)} State=UNKNOWN",
        f"PartitionName=dlvirt Nodes={node} Default=YES MaxTime=INFINITE State=UP",
        "",
    ])
    (base / "slurm.conf").write_text(conf)
    log = base / "log"
    with contextlib.ExitStack() as stack:
        SYSTEM_CONF.parent.mkdir(parents=True, exist_ok=True)
        SYSTEM_CONF.write_text(conf)
        stack.callback(SYSTEM_CONF.unlink, missing_ok=True)
        stack.enter_context(daemon(
            ["munged", "--foreground", "--force", f"--socket={sock}", f"--key-file={key}",
             f"--pid-file={base / 'munge' / 'munged.pid'}", f"--log-file={log / 'munged.log'}",
             f"--seed-file={base / 'munge' / 'seed'}"],
            log / "munged.out", ready=sock.exists))
        stack.enter_context(daemon(["slurmctld", "-D", "-f", str(SYSTEM_CONF)], log / "slurmctld.out",
                                   ready=lambda: _succeeds("scontrol", "ping")))
        stack.enter_context(daemon(["slurmd", "-D", "-N", node, "-f", str(SYSTEM_CONF)], log / "slurmd.out",
                                   ready=lambda: _node_state(node) == "idle"))
        stack.callback(_cancel_all_and_wait, node)  # runs first at exit, while slurmd still runs
        yield Cluster(node=node, cpus=cpus, ctld_log=log / "slurmctld.log")


def adapt_profile(workdir: Path, cluster: Cluster) -> None:
    """What a site edits in profiles/slurm (docs/clusters-and-edge.md): here, benchmark nodes with this host's CPUs."""
    path = workdir / PROFILE
    profile = yaml.safe_load(path.read_text())
    profile["set-resources"]["benchmark"].update(cpus_per_task=cluster.cpus, mem_mb=4000)
    profile["config"]["cluster"] = {"node_cores": cluster.cpus}  # what cores: [all] means there
    path.write_text(yaml.safe_dump(profile, sort_keys=False))


def study() -> dict:
    config = smoke_config()
    config["study"].update(apps=["ic"], tools=["mlperf"], repetitions=1, warmup_repetitions=0,
                           matrix=[{"platforms": ["BM"], "cores": [1], "pinning": ["PIN"]},
                                   {"platforms": ["BM"], "cores": [2], "pinning": ["VNL"]}])
    return config


def slurm_logs(workdir: Path) -> str:
    return "".join(f"\n--- {p}\n{p.read_text(errors='replace')[-3000:]}"
                   for p in sorted((workdir / ".snakemake" / "slurm_logs").rglob("*.log")))


@pytest.mark.slow
def test_smoke_study_goes_through_sbatch_and_matches_a_local_run(slurm_cluster: Cluster, smoke_study: Path,
                                                                 tmp_path: Path) -> None:
    cluster_wf = copy_workflow(tmp_path / "cluster")
    write_config(cluster_wf / "study.yaml", study())
    adapt_profile(cluster_wf, slurm_cluster)

    proc = snakemake(cluster_wf, "--profile", "profiles/slurm", *NO_ACCOUNTING, "--slurm-keep-successful-logs",
                     "results/summary.csv", "results/figures/fig4a.png", "--configfile", "study.yaml",
                     check=False, timeout=480)
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}{slurm_logs(cluster_wf)}"

    # Every job went through sbatch: Snakemake names the SLURM job ids, slurmctld allocated them.
    submitted = set(re.findall(r"submitted with SLURM jobid (\d+)", proc.stdout + proc.stderr))
    node = re.escape(slurm_cluster.node)
    started = re.findall(rf"Allocate JobId=(\d+) NodeList={node}\b|Started JobId=(\d+) in \S+ on {node}\b",
                         slurm_cluster.ctld_log.read_text())  # the main scheduler's words, or backfill's
    allocated = {main or backfill for main, backfill in started}
    assert len(submitted) >= 6 and submitted <= allocated, (submitted, allocated)
    runs = sorted((cluster_wf / "results" / "runs").rglob("*.json"))
    assert len(runs) == 2
    for path in runs:
        result = json.loads(path.read_text())
        slurm = result["slurm"]
        assert slurm["job_id"] in submitted and slurm["node"] == slurm_cluster.node
        assert result["host"].split(".")[0] == slurm_cluster.node
        # --exclusive reached SLURM: the job owned the node, and its step saw every CPU of it
        shown = subprocess.run(["scontrol", "show", "job", slurm["job_id"]], capture_output=True, text=True,
                               check=True).stdout
        assert "OverSubscribe=NO" in shown, shown
        assert slurm["cpus_on_node"] == slurm_cluster.cpus
        assert result["runs"][0]["observed"]["cpu_count"] == slurm_cluster.cpus
    assert (cluster_wf / "results" / "figures" / "fig4a.png").stat().st_size > 10_000
    print(f"SLURM job ids submitted with sbatch: {sorted(submitted, key=int)}")

    # A local run of these jobs (the session's smoke study runs them too, conftest.smoke_study) gives a
    # summary of the same shape: same rows, same columns.
    on_cluster = pd.read_csv(cluster_wf / "results" / "summary.csv")
    local = pd.read_csv(smoke_study / "results" / "summary.csv")
    local = local[(local.tool == "mlperf") & (local.app == "ic") & local.scenario.isin(on_cluster.scenario)]
    assert list(on_cluster.columns) == list(local.columns)
    assert sorted(on_cluster.scenario) == sorted(local.scenario) == ["BM/1/PIN/CPU", "BM/2/VNL/CPU"]
    assert (on_cluster.site == "local").all() and on_cluster.hardware.nunique() == 1
    assert (on_cluster.reps == 1).all() and (on_cluster.mean_s > 0).all()
