"""The real smoke study end to end: summary, host facts and Figure 4a; then incremental behaviour."""

import json
import stat
from pathlib import Path

import pandas as pd
import pytest

from conftest import copy_study, jobs_that_would_run, smoke_config, snakemake, write_config

pytestmark = pytest.mark.slow


def test_smoke_study_end_to_end_then_incremental(smoke_study):
    """The smoke study (conftest.smoke_study: ``all`` of smoke.yaml, guests aside) end to end."""
    workflow_dir, config = smoke_study, smoke_study / "smoke.yaml"
    summary = pd.read_csv(workflow_dir / "results" / "summary.csv")
    bm = summary[(summary.platform == "BM") & (summary.app == "ic") & (summary.tool == "mlperf")]
    assert sorted(bm.scenario) == ["BM/1/PIN/CPU", "BM/1/VNL/CPU", "BM/2/PIN/CPU", "BM/2/VNL/CPU"]
    assert (bm.reps == 2).all() and (bm.mean_s > 0).all() and bm.loadgen_valid.all()
    assert (bm.dataset_source == "synthetic").all() and (bm.weights == "random").all()
    assert (workflow_dir / "results" / "figures" / "fig4a.png").stat().st_size > 10_000
    assert (workflow_dir / "results" / "notebooks" / "fig4a.ipynb").exists()
    host = json.loads((workflow_dir / "results" / "host.json").read_text())
    assert host["capabilities"]["cores"] >= 1 and "packages" in host

    run = json.loads((workflow_dir / "results/runs/mlperf/ic/BM/1/VNL/CPU/1.json").read_text())
    assert run["verified"] and len(run["runs"]) == 2
    assert run["runs"][0]["observed"]["quota_cores"] == pytest.approx(1.0)
    assert run["runs"][0]["threads"]["intra_op"] == 1

    # What the kernel and the frameworks did, in every row and run file (dlvirt.system.observe)
    vnl = summary[summary.pinning == "VNL"]
    assert len(vnl) and vnl.throttled_pct.notna().all() and vnl.throttled_s.notna().all()
    for column in ("throttled_pct", "throttled_s", "pre_cpu_s", "infer_cpu_s", "post_cpu_s", "stall_s",
                   "ctx_switches", "major_faults"):
        assert pd.api.types.is_numeric_dtype(summary[column]), column
    for column in ("pre_cpu_s", "infer_cpu_s", "post_cpu_s", "stall_s", "ctx_switches", "major_faults"):
        assert summary[column].notna().all(), column
    assert (summary.code_version != "not recorded").all()
    # study.memory (smoke.yaml: 4g) is every row's, and each repetition's limit as seen inside
    assert (summary.memory_mib == 4096).all()
    for path in (workflow_dir / "results" / "runs").rglob("*.json"):
        result = json.loads(path.read_text())
        assert result["code"]["source"] and result["code"]["source"] == result["runner_code"]["source"], path
        assert all(r["threads"]["framework"].get("intra_op") for r in result["runs"]), path
        assert all(r["observed"]["memory_limit_bytes"] == 4096 << 20 for r in result["runs"]), path

    # Cheap launches: one weights resource per app (both tools, every scenario load it), its checksum
    # beside it; each launch records the one it loaded and splits its machine time, which the summary
    # and the report show
    checksums = {p.parent.parent.name: p.read_text().strip()
                 for p in (workflow_dir / "resources" / "weights").rglob("*.sha256")}
    assert sorted(checksums) == sorted(smoke_config()["study"]["apps"])
    for path in (workflow_dir / "results" / "runs").rglob("*.json"):
        result = json.loads(path.read_text())
        assert result["model"]["weights"] == "random", path  # still random weights, and says so
        assert result["model"]["weights_sha256"] == checksums[result["app"]], path
        assert result["spec"]["weights_file"].startswith(f"resources/weights/{result['app']}/"), path
        prefetch = result["model"]["load"]["weights_prefetch"]  # asked for inside the platform
        assert prefetch["bytes"] == (workflow_dir / result["spec"]["weights_file"]).stat().st_size, path
        launch = result["launch_s"]
        parts = [launch[k] for k in ("startup_s", "model_load_s", "warmup_s", "counted_s", "other_s")]
        assert min(parts[:4]) > 0 and sum(parts) == pytest.approx(launch["total_s"], abs=1e-3), path
        # the parts fit inside the total: nothing counted twice (rounding aside)
        assert launch["other_s"] >= -1e-3 and launch["startup_overlap_s"] <= 1e-3, path
        assert launch["model_load_s"] == pytest.approx(result["model_load_s"], abs=1e-3), path
    assert summary.counted_share.between(0, 1).all() and (summary.launch_counted_s > 0).all()
    report = (workflow_dir / "results" / "report.html").read_text()
    assert "Where the launches' machine time went" in report and "% counted repetitions" in report

    # Nothing of dlvirt's is left in the world-writable /var/tmp, and its runtime root is root's alone
    from dlvirt.system.engines import RUN_ROOT

    assert not list(Path("/var/tmp").glob("dlvirt*"))
    info = RUN_ROOT.lstat()
    assert info.st_uid == 0 and stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700

    # A second run has nothing to do.
    assert jobs_that_would_run(workflow_dir, "all", "--configfile", str(config)) == {}

    # Changing one app setting reruns that app's benchmark jobs and what depends on them, not the dataset.
    changed = smoke_config()
    changed["apps"]["ic"]["batch_size"] = 4
    changed_path = write_config(workflow_dir / "changed.yaml", changed)  # a dry run: the shared study stays
    counts = jobs_that_would_run(workflow_dir, "all", "--configfile", str(changed_path))
    assert counts.get("benchmark") == len(summary[summary.app == "ic"])  # every ic scenario (BM, CN)
    assert "dataset" not in counts and "host_facts" not in counts and "cn_image" not in counts
    assert "weights" not in counts  # the batch size is not part of the initialisation


def test_latency_smoke_study_runs_every_app_in_every_loadgen_scenario(smoke_study, tmp_path):
    """study.scenarios [Offline, SingleStream, Server] on BM and CN (1 core, VNL): every app through real
    LoadGen in each scenario; latency rows carry LoadGen's percentiles and verdict; the latency
    figures are in the report, the extension's claim in the claims. Run in a copy of the smoke study:
    its Offline launches, datasets, weights and image are this study's too."""
    config = smoke_config()
    config["study"].update(scenarios=["Offline", "SingleStream", "Server"], matrix=[
        {"platforms": ["BM", "CN"], "cores": [1], "pinning": ["VNL"], "processors": ["CPU"]}])
    config["study"]["tools"] = ["mlperf"]
    workflow_dir = copy_study(smoke_study, tmp_path / "wf")
    path = write_config(workflow_dir / "latency.yaml", config)
    # Offline keeps its paths and its specs: the smoke study's Offline launches are this study's,
    # only the latency runs (2 scenarios x 2 LoadGen scenarios x every app) are new
    counts = jobs_that_would_run(workflow_dir, "all", "--configfile", str(path))
    assert counts.get("benchmark") == 2 * 2 * len(config["study"]["apps"]), counts
    assert not {"dataset", "weights", "cn_image", "host_facts"} & set(counts), counts
    snakemake(workflow_dir, "all", "--configfile", str(path))

    summary = pd.read_csv(workflow_dir / "results" / "summary.csv")
    apps = sorted(config["study"]["apps"])
    for tool in ("mlperf", "mlperf-SingleStream", "mlperf-Server"):
        rows = summary[summary.tool == tool]
        assert sorted(set(rows.app)) == apps, tool
        assert sorted(set(rows.scenario)) == ["BM/1/VNL/CPU", "CN/1/VNL/CPU"], tool
    latency = summary[summary.tool != "mlperf"]
    for column in ("p50_s", "p90_s", "p99_s", "achieved_qps"):
        assert (latency[column] > 0).all(), column
    assert (latency.p99_s >= latency.p50_s).all() and latency.loadgen_valid.notna().all()
    assert set(latency.loadgen_scenario) == {"SingleStream", "Server"}
    assert (latency[latency.loadgen_scenario == "Server"].target_qps > 0).all()
    assert summary[summary.tool == "mlperf"].p50_s.isna().all()  # Offline rows: no latency columns
    # Offline keeps its paths; a latency run is its own run tool, its Server rate from an Offline warm-up
    assert (workflow_dir / "results/runs/mlperf/ic/BM/1/VNL/CPU/1.json").exists()
    server = json.loads((workflow_dir / "results/runs/mlperf-Server/ic/CN/1/VNL/CPU/1.json").read_text())
    assert server["warmups"][0]["loadgen"].get("scenario") is None  # the Offline calibration
    assert "Offline warm-up throughput" in server["runs"][0]["loadgen"]["settings"]["target_qps_from"]
    assert server["runs"][0]["observed"]["quota_cores"] == pytest.approx(1.0)
    for name in ("latency_singlestream", "latency_server"):
        assert (workflow_dir / "results" / "figures" / f"{name}.png").stat().st_size > 10_000
    report = (workflow_dir / "results" / "report.html").read_text()
    assert "Extension: tail latency" in report and 'id="latency_server"' in report
    claims = pd.read_csv(workflow_dir / "results" / "claims.csv").set_index("id")
    assert claims.loc["latency_tail_quota", "source"].startswith("extension")


def test_one_figure_builds_only_what_it_needs(workflow_dir):
    config = write_config(workflow_dir / "smoke.yaml", smoke_config())
    counts = jobs_that_would_run(workflow_dir, "results/figures/fig4a.png", "--configfile", str(config))
    assert counts["figure"] == 1 and "summary" not in counts and "all" not in counts


def test_sigint_to_snakemake_alone_stops_the_running_job_within_seconds(smoke_study, tmp_path):
    """``kill -INT <snakemake>`` (a supervisor's interrupt, not Ctrl-C's process group) stops the
    running benchmark job and its teardown runs: no runner, result, work directory or cgroup stays."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from conftest import tool_env
    from dlvirt.run.cleanup import dlvirt_cgroups
    from dlvirt.run.interrupt import job_runners

    config = smoke_config(study={"apps": ["ic"], "tools": ["mlperf"], "repetitions": 50, "warmup_repetitions": 0,
                                 "matrix": [{"platforms": ["BM"], "cores": [1], "pinning": ["PIN"]}]})
    # the smoke study's IC dataset and weights (the batch size is not part of the initialisation)
    config["apps"] = {"ic": {**smoke_config()["apps"]["ic"], "batch_size": 4}}
    workflow_dir = copy_study(smoke_study, tmp_path / "wf", runs=False)
    path = write_config(workflow_dir / "long.yaml", config)
    run = workflow_dir / "results/runs/mlperf/ic/BM/1/PIN/CPU/1.json"
    snake = subprocess.Popen([sys.executable, "-m", "snakemake", "--cores", "1", str(run.relative_to(workflow_dir)),
                              "--configfile", str(path)], cwd=workflow_dir, env=tool_env(), start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline, runners = time.monotonic() + 300, []
        while time.monotonic() < deadline and snake.poll() is None:
            runners = [pid for pid in job_runners(snake.pid)
                       if b"bench" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
            if runners and any(run.parent.glob(".work-*/attempt-*/job.json")):
                break
            time.sleep(0.5)
        assert runners, f"the benchmark job never started: {snake.stderr.read() if snake.poll() is not None else ''}"
        time.sleep(5)  # the harness is running
        os.kill(snake.pid, signal.SIGINT)
        start = time.monotonic()
        while any(Path(f"/proc/{pid}").exists() for pid in runners) and time.monotonic() - start < 60:
            time.sleep(0.2)
        stopped_s = time.monotonic() - start
        snake.wait(timeout=120)
    finally:
        if snake.poll() is None:
            os.killpg(snake.pid, signal.SIGKILL)
    print(f"job runner gone {stopped_s:.1f} s after SIGINT to snakemake")
    assert stopped_s < 30
    assert not run.exists() and not list(run.parent.glob(".work-*"))
    assert not [p for p in dlvirt_cgroups() if any(p.name.startswith(f"dlvirt-{pid}-") for pid in runners)]


def test_replicates_run_in_interleaved_rounds(smoke_study, tmp_path):
    workflow_dir = copy_study(smoke_study, tmp_path / "wf", runs=False)  # its IC dataset and weights
    config = smoke_config(replicates=2)
    config["study"].update(apps=["ic"], tools=["mlperf"], matrix=[
        {"platforms": ["BM"], "cores": [1, 2], "pinning": ["PIN"], "processors": ["CPU"]}])
    path = write_config(workflow_dir / "replicates.yaml", config)
    snakemake(workflow_dir, "results/summary.csv", "results/plan.json", "--configfile", str(path))

    runs = [json.loads(p.read_text()) for p in sorted((workflow_dir / "results" / "runs").rglob("*.json"))]
    assert sorted((r["scenario_name"], r["replicate"]) for r in runs) == [
        ("BM/1/PIN/CPU", 1), ("BM/1/PIN/CPU", 2), ("BM/2/PIN/CPU", 1), ("BM/2/PIN/CPU", 2)]
    # every launch of round 1 ended before any launch of round 2 started, as the plan ordered
    started = {(r["scenario_name"], r["replicate"]): min(x["started_utc"] for x in r["warmups"] + r["runs"])
               for r in runs}
    finished = {(r["scenario_name"], r["replicate"]): max(x["finished_utc"] for x in r["warmups"] + r["runs"])
                for r in runs}
    first_round_end = max(t for (_, rep), t in finished.items() if rep == 1)
    assert first_round_end < min(t for (_, rep), t in started.items() if rep == 2)
    plan = json.loads((workflow_dir / "results" / "plan.json").read_text())
    assert [job["replicate"] for job in plan["jobs"]] == ["1", "1", "2", "2"] and plan["replicates"] == 2
    assert [job["order"] for job in plan["jobs"]] == [0, 1, 2, 3]

    summary = pd.read_csv(workflow_dir / "results" / "summary.csv")
    assert (summary.replicates == 2).all() and (summary.ci_n == 2).all()
    assert (summary.reps == 4).all() and (summary.median_s > 0).all() and (summary.iqr_s >= 0).all()
    assert (summary.model == "ResNet50").all() and "vmm" in summary
    assert summary.round_means_s.str.count(";").eq(1).all() and summary.launch_rounds.eq("1;2").all()
    assert summary.model_df.notna().all()  # the study's model gives every row its interval too


def test_a_noop_study_through_the_workflow_builds_its_rows_tables_and_weights(workflow_dir):
    """The plumbing through Snakemake with the noop app (no framework, no engine): rules dataset,
    weights, benchmark (two rounds on BM), summarise_app, summary, study_plan and tables."""
    config = smoke_config()
    config["study"].update(apps=["noop"], tools=["mlperf"], replicates=2, matrix=[
        {"platforms": ["BM"], "cores": [1], "pinning": ["PIN"], "processors": ["CPU"]}])
    # min_duration_ms 0: a noop repetition takes milliseconds, and one twice as fast as the last (timer
    # jitter) would miss the derived minimum duration and be LoadGen-INVALID (CI, 2026-12-02)
    config["apps"] = {"noop": {"dataset": {"count": 32, "features": 16},
                               "loadgen": {"min_query_count": 32, "min_duration_ms": 0}}}
    path = write_config(workflow_dir / "noop.yaml", config)
    snakemake(workflow_dir, "results/summary.csv", "results/tables/table1.csv", "--configfile", str(path))
    summary = pd.read_csv(workflow_dir / "results" / "summary.csv")
    assert list(summary.app) == ["noop"] and summary.loc[0, "replicates"] == 2 and summary.loc[0, "loadgen_valid"]
    weights = sorted((workflow_dir / "resources" / "weights" / "noop").rglob("model.npz"))
    assert len(weights) == 1 and weights[0].with_name("model.npz.sha256").is_file()
    table1 = pd.read_csv(workflow_dir / "results" / "tables" / "table1.csv").set_index("app")
    assert table1.loc["NOOP", "jobs"] == 2 and "IC" in table1.index  # the paper's apps keep their rows
