"""Edge hosts over a real SSH session: an OpenSSH server started here on loopback (own port, host
key, config; a throwaway client key). The "edge" is therefore this very machine, and its results
say so: its facts are measured over SSH (same hostname, same CPUs as results/host.json)."""

from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from conftest import copy_study, daemon, free_port, port_open, smoke_config, snakemake, spec_document, write_config
from dlvirt.apps.ic import ImageClassification
from dlvirt.core.records import JobSpec
from dlvirt.run.remote import COMPLETE, RemoteError, SshHost, run_job_remote

SSHD = "/usr/sbin/sshd"          # sshd re-executes itself: it must be started by absolute path
PRIVSEP_DIR = Path("/run/sshd")  # Debian's sshd refuses to start without it
IC_SETTINGS = {"batch_size": 4, "seed": 0, "dataset": {"path": None, "count": 4, "seed": 0},
               "weights": {"path": None, "sha256": None},
               "loadgen": {"min_query_count": 4, "min_duration_ms": 0, "expected_qps": 1,
                           "performance_sample_count": None}}


@dataclass
class Sshd:
    settings: dict            # a hosts.<site> section reaching it, without the matrix
    remote_workdir: Path      # the "remote" working directory, readable here (same machine)
    log: Path


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    missing = [tool for tool in (SSHD, "ssh", "ssh-keygen") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"OpenSSH not installed ({', '.join(missing)}; ./setup.sh installs openssh-server/client)")
    base = tmp_path_factory.mktemp("sshd")
    for key in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"dlvirt-test-{key}",
                        "-f", str(base / key)], check=True)
    (base / "authorized_keys").write_text((base / "client_key.pub").read_text())
    port = free_port()
    user = getpass.getuser()
    (base / "known_hosts").write_text(f"[127.0.0.1]:{port} {(base / 'host_key.pub').read_text()}")
    (base / "sshd_config").write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {base / 'host_key'}",
        f"PidFile {base / 'sshd.pid'}", f"AuthorizedKeysFile {base / 'authorized_keys'}",
        "AuthenticationMethods publickey", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password", f"AllowUsers {user}", "UsePAM no",
        "StrictModes no",  # the pytest temp dirs are not owned the way StrictModes wants
        "LogLevel VERBOSE", "",
    ]))
    made_privsep = not PRIVSEP_DIR.exists()
    if made_privsep:
        PRIVSEP_DIR.mkdir(mode=0o755)
    log = base / "sshd.log"
    try:
        with daemon([SSHD, "-D", "-e", "-f", str(base / "sshd_config")], log, ready=lambda: port_open(port)):
            yield Sshd(settings={"ssh": f"{user}@127.0.0.1", "port": port,
                                 "identity_file": str(base / "client_key"),
                                 "known_hosts_file": str(base / "known_hosts"), "ssh_options": [],
                                 "workdir": str(base / "remote" / "dlvirt-work"), "python": sys.executable},
                       remote_workdir=base / "remote" / "dlvirt-work", log=log)
    finally:
        if made_privsep:
            PRIVSEP_DIR.rmdir()


@pytest.fixture(scope="module")
def ic_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ic") / "ic"
    ImageClassification.prepare_dataset(out, IC_SETTINGS)
    return out


def bench_spec(dataset: Path, cores: int, repetitions: int = 1) -> dict:
    return spec_document("ic", dataset, f"BM/{cores}/PIN/CPU", app_settings=IC_SETTINGS, repetitions=repetitions,
                         warmup_repetitions=0, timeout_s=600, platform_settings={})


def test_trees_are_staged_once_and_verified(sshd: Sshd, ic_dataset: Path) -> None:
    host = SshHost.from_settings("edge", sshd.settings)
    code = host.stage_code()
    assert (sshd.remote_workdir / code / "dlvirt" / COMPLETE).exists()
    assert host.stage(ic_dataset, "datasets/probe") is True
    assert host.stage(ic_dataset, "datasets/probe") is False  # complete already: nothing sent again
    assert sorted(p.name for p in (sshd.remote_workdir / "datasets" / "probe").iterdir()) == \
        sorted([*(p.name for p in ic_dataset.iterdir()), COMPLETE])
    # a real SSH session with the throwaway key, as the server logged it
    fingerprint = subprocess.run(["ssh-keygen", "-lf", sshd.settings["identity_file"]], capture_output=True,
                                 text=True, check=True).stdout.split()[1]
    assert re.search(rf"Accepted publickey for \S+ from 127\.0\.0\.1 .*{re.escape(fingerprint)}", sshd.log.read_text())


def test_an_unknown_host_key_is_refused(sshd: Sshd, tmp_path: Path) -> None:
    (tmp_path / "known_hosts").write_text("")
    host = SshHost.from_settings("edge", {**sshd.settings, "known_hosts_file": str(tmp_path / "known_hosts")})
    with pytest.raises(RemoteError, match="Host key verification failed"):
        host.run("true")


def test_without_known_hosts_file_an_unknown_host_is_refused_not_learnt(sshd: Sshd, tmp_path: Path) -> None:
    learnt = tmp_path / "user_known_hosts"
    settings = {**sshd.settings, "known_hosts_file": None, "ssh_options": [f"UserKnownHostsFile={learnt}"]}
    with pytest.raises(RemoteError, match="Host key verification failed"):
        SshHost.from_settings("edge", settings).run("true")
    assert not learnt.exists() or learnt.read_text() == ""


def test_a_fetched_tree_comes_back_as_plain_files_and_a_link_refuses_it(sshd: Sshd, tmp_path: Path) -> None:
    """The edge host's real tar, through ssh: a sound job folder arrives whole; one holding a symbolic
    link is refused, naming it, and nothing it points to is touched."""
    host = SshHost.from_settings("edge", sshd.settings)
    job = sshd.remote_workdir / "jobs" / "fetch-test"
    (job / "loadgen" / "rep-0000").mkdir(parents=True)
    (job / "run.json").write_text("{}")
    (job / "loadgen" / "rep-0000" / "mlperf_log_summary.txt").write_text("VALID")
    try:
        host.fetch("jobs/fetch-test", tmp_path / "sound")
        assert (tmp_path / "sound" / "loadgen" / "rep-0000" / "mlperf_log_summary.txt").read_text() == "VALID"
        (job / "loadgen" / "passwd").symlink_to("/etc/passwd")
        with pytest.raises(RemoteError, match=r"refused: .*'./loadgen/passwd' is of tar type b'2'"):
            host.fetch("jobs/fetch-test", tmp_path / "linked")
        assert not (tmp_path / "linked" / "loadgen" / "passwd").exists()
    finally:
        shutil.rmtree(job)


def test_inputs_that_stay_on_this_host_are_refused_naming_the_key(sshd: Sshd, tmp_path: Path) -> None:
    dataset = tmp_path / "ic"
    dataset.mkdir()
    (dataset / "dataset.json").write_text(json.dumps({"source": "real", "root": "/data/imagenet"}))
    with pytest.raises(RemoteError, match=r"apps\.ic\.dataset\.path"):
        run_job_remote(SshHost.from_settings("edge", sshd.settings), JobSpec.from_dict(bench_spec(dataset, 1)),
                       tmp_path / "r.json", tmp_path / "lg")
    assert not (tmp_path / "r.json").exists()


@pytest.mark.slow
def test_a_job_stopped_here_stops_there_and_leaves_nothing(sshd: Sshd, ic_dataset: Path, tmp_path: Path) -> None:
    jobs = sshd.remote_workdir / "jobs"
    cmd = [sys.executable, "-m", "dlvirt", "site-bench", "--site", "edge", "--ssh", json.dumps(sshd.settings),
           "--spec", json.dumps(bench_spec(ic_dataset, 1, repetitions=50)), "--output", str(tmp_path / "r.json"),
           "--loadgen-dir", str(tmp_path / "lg")]
    with open(tmp_path / "job.log", "wb") as log:
        job = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not list(jobs.glob("*/pid")) or not (tmp_path / "job.log").read_text().count("[harness]"):
            assert job.poll() is None, (tmp_path / "job.log").read_text()
            assert time.monotonic() < deadline, "the remote job did not start"
            time.sleep(0.5)
        remote_pid = int(next(jobs.glob("*/pid")).read_text())
        job.send_signal(signal.SIGTERM)  # what Snakemake sends a job it stops
        assert job.wait(timeout=120) == 128 + signal.SIGTERM
    finally:
        if job.poll() is None:
            job.kill()
    assert not Path(f"/proc/{remote_pid}").exists(), "the remote runner outlived its job"
    assert list(jobs.iterdir()) == []
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "lg").exists()


@pytest.mark.slow
def test_smoke_study_with_an_edge_host(sshd: Sshd, smoke_study: Path, tmp_path: Path) -> None:
    workflow_dir = copy_study(smoke_study, tmp_path / "wf", runs=False)  # its IC dataset and weights
    config = smoke_config()
    one_core = [{"platforms": ["BM"], "cores": [1], "pinning": ["PIN"]}]
    config["study"].update(apps=["ic"], tools=["mlperf"], repetitions=1, warmup_repetitions=0, matrix=one_core)
    # "all" is the edge's cores as measured there; 64 cores are more than it has: left out.
    # Vanilla (a CFS quota), as Figure 11 draws the edge.
    config["hosts"] = {"edge": {**sshd.settings, "matrix": [{"platforms": ["BM"], "cores": ["all", 64],
                                                             "pinning": ["VNL"]}]}}
    write_config(workflow_dir / "edge.yaml", config)
    proc = snakemake(workflow_dir, "results/summary.csv", "results/figures/fig11.png", "--configfile", "edge.yaml",
                     timeout=480)
    cores = len(os.sched_getaffinity(0))
    assert f"left out on edge: BM/64/VNL/CPU: 64 cores requested, host has {cores}" in proc.stderr

    results = workflow_dir / "results"
    summary = pd.read_csv(results / "summary.csv")
    assert sorted(zip(summary.site, summary.scenario, strict=True)) == \
        [("edge", f"BM/{cores}/VNL/CPU"), ("local", "BM/1/PIN/CPU")]
    assert (summary.reps == 1).all() and (summary.mean_s > 0).all()
    assert (results / "figures" / "fig11.png").stat().st_size > 10_000  # the paper's edge figure

    local = json.loads((results / "runs/mlperf/ic/BM/1/PIN/CPU/1.json").read_text())
    assert "site" not in local
    edge = json.loads((results / f"sites/edge/runs/mlperf/ic/BM/{cores}/VNL/CPU/1.json").read_text())
    assert edge["site"] == "edge" and edge["verified"] and edge["transport"]["ssh"] == sshd.settings["ssh"]
    observed = edge["runs"][0]["observed"]
    assert observed["affinity"] == sorted(os.sched_getaffinity(0)) and observed["quota_cores"] == pytest.approx(cores)
    assert (results / f"sites/edge/loadgen/mlperf/ic/BM/{cores}/VNL/CPU/1/rep-0000/mlperf_log_summary.txt").exists()

    # The edge's facts, measured over SSH: this same machine, and they say so.
    facts = json.loads((results / "host-edge.json").read_text())
    assert facts["site"]["ssh"] == sshd.settings["ssh"] and facts["site"]["transport"] == "openssh"
    assert facts["hostname"] == socket.gethostname() and facts["capabilities"]["cores"] == cores

    # Code and inputs were staged once, content-addressed; no job folder is left on the remote.
    remote = sshd.remote_workdir
    assert (remote / "code" / edge["transport"]["code_sha256"] / "dlvirt" / COMPLETE).exists()
    assert (remote / "datasets" / f"ic-{edge['transport']['dataset_sha256']}" / COMPLETE).exists()
    # the weights resource too (addressed by its checksum), which the job there loaded
    staged = [p.name for p in (remote / "weights").iterdir()]
    assert staged == [f"ic-{edge['model']['weights_sha256']}"] and (remote / "weights" / staged[0] / COMPLETE).exists()
    assert list((remote / "jobs").iterdir()) == []
    rerun = snakemake(workflow_dir, "results/summary.csv", "results/figures/fig11.png", "--configfile", "edge.yaml",
                      "-n")
    assert "Nothing to be done" in rerun.stdout + rerun.stderr
