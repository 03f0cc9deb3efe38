"""Config validation through the real workflow (snakemake -n): good configs build, bad ones are
refused with the offending key named."""

import pytest

from conftest import smoke_config, snakemake, write_config


def test_default_and_smoke_configs_build(workflow_dir):
    proc = snakemake(workflow_dir, "-n")
    assert "benchmark" in proc.stdout
    proc = snakemake(workflow_dir, "-n", "--configfile", "config/smoke.yaml")
    assert "benchmark" in proc.stdout


def test_paper_config_builds_and_says_what_it_leaves_out(workflow_dir):
    proc = snakemake(workflow_dir, "-n", "--configfile", "config/paper.yaml")
    assert "left out BM/64/PIN/CPU: 64 cores requested" in proc.stderr


def test_a_study_this_host_cannot_run_stops_in_one_line(workflow_dir):
    """Every scenario left out (64 cores on a small host): the dry run shows the plan, a real run
    stops before any job with one line naming why and the fix, exit 2, nothing written."""
    path = write_config(workflow_dir / "nothing.yaml", smoke_config(study={**smoke_config()["study"], "matrix": [
        {"platforms": ["BM"], "cores": [4096], "pinning": ["VNL"], "processors": ["CPU"]}]}))
    assert "left out BM/4096/VNL/CPU" in snakemake(workflow_dir, "-n", "all", "--configfile", str(path)).stderr
    proc = snakemake(workflow_dir, "all", "--configfile", str(path), check=False)
    assert proc.returncode != 0
    assert "dlvirt: nothing to run on this host: all 1 planned scenario(s) were left out (4096 cores" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout and not (workflow_dir / "results" / "summary.csv").exists()


def test_a_figure_this_host_cannot_measure_plans_no_benchmark(workflow_dir):
    """fig4b (IC on a GPU) on a host without one, fig11 without edge hosts: the figure and the plan only."""
    from dlvirt.system.hostinfo import capabilities

    if capabilities().gpus:
        pytest.skip("this host has a GPU: fig4b measures")
    for figure in ("fig4b", "fig11"):
        proc = snakemake(workflow_dir, "-n", figure)
        assert "benchmark" not in proc.stdout and "figure" in proc.stdout, proc.stdout


def test_a_mistyped_target_names_the_targets_there_are(workflow_dir):
    proc = snakemake(workflow_dir, "-n", "fig7c", check=False)
    out = proc.stdout + proc.stderr  # a dry run prints its errors to stdout
    assert proc.returncode != 0
    assert "fig7c: nothing in this workflow makes this target or file; did you mean fig7" in out
    assert "short targets: all, claims" in out and "MissingRuleException" not in out


def test_paper_config_without_host_check_is_the_whole_matrix(workflow_dir):
    proc = snakemake(workflow_dir, "-n", "--configfile", "config/paper.yaml", "--config", "host_check=false")
    assert "left out BM/" not in proc.stderr
    assert "BM/64/PIN/GPU" in proc.stdout or "cores=64" in proc.stdout


@pytest.mark.parametrize("mutate,message", [
    (lambda c: c.update(colour="blue"), "Additional properties are not allowed ('colour'"),
    (lambda c: c["apps"]["ic"].update(batchsize=3), "'batchsize' was unexpected"),
    (lambda c: c["study"].update(repetitions=0), "study.repetitions: 0 is less than the minimum of 1"),
    (lambda c: c["study"].update(repetitions={"min": 3, "max": 50, "rel_ci95": 0}),
     "study.repetitions.rel_ci95: 0 is less than or equal to the minimum of 0"),
    (lambda c: c["study"].update(repetitions={"min": 9, "max": 5, "rel_ci95": 0.05}),
     "study.repetitions: min (9) is above max (5)"),
    (lambda c: c["study"].update(warmup_repetitions={"default": 1, "ic": {"mlperff": 2}}),
     "study.warmup_repetitions.ic.mlperff: not a tool"),
    (lambda c: c["study"]["matrix"][0].update(pinning=["PINNED"]), "'PINNED' is not one of"),
    (lambda c: c["study"].update(matrix=[{"platforms": ["MVM"], "cores": [1], "pinning": ["PIN"]}]),
     r"study.matrix[0].pinning: MVM cannot be pinned"),
    (lambda c: c["study"].update(matrix=[{"platforms": ["MVM"], "cores": [1], "pinning": ["VNL"],
                                          "processors": ["GPU"]}]),
     r"study.matrix[0].processors: MVM cannot use a GPU"),
])
def test_bad_configs_are_refused_naming_the_key(workflow_dir, mutate, message):
    config = smoke_config()
    mutate(config)
    path = write_config(workflow_dir / "bad.yaml", config)
    proc = snakemake(workflow_dir, "-n", "--configfile", str(path), check=False)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr


def test_host_lacks_gpu_left_out_or_error_when_strict(workflow_dir):
    config = smoke_config()
    config["study"]["matrix"][0]["processors"] = ["CPU", "GPU"]
    path = write_config(workflow_dir / "gpu.yaml", config)
    proc = snakemake(workflow_dir, "-n", "--configfile", str(path))
    if "no GPU on this host" not in proc.stderr:
        pytest.skip("this host has a GPU: nothing is left out")
    assert "left out BM/1/VNL/GPU: no GPU on this host" in proc.stderr
    config["strict"] = True
    write_config(path, config)
    proc = snakemake(workflow_dir, "-n", "--configfile", str(path), check=False)
    assert proc.returncode != 0 and "strict: true" in proc.stdout + proc.stderr


def _shell_commands(output: str) -> dict[str, list[str]]:
    """``dlvirt <command>`` -> its argument words, as the shell will split them (dry-run -p)."""
    import shlex

    commands = {}
    for line in output.splitlines():
        if line.startswith("Shell command: python -m dlvirt "):
            words = shlex.split(line.removeprefix("Shell command: ").split(" > ")[0])
            commands[words[3]] = words[4:]
    return commands


def test_hostile_values_reach_the_image_rules_quoted(workflow_dir):
    import json

    hostile = "/tmp/dlvirt data'$(touch /tmp/owned)'\"; `id` $HOME"
    image = "registry.example:5000/team/img:v1@sha256:" + "0" * 64
    config = {"host_check": False, "study": {"apps": ["ic"], "matrix": [
        {"platforms": ["CN", "VMCN"], "cores": [1], "pinning": ["VNL"]}]},
        "platforms": {"CN": {"image": image, "engine": {"data_root": hostile}}}}
    path = write_config(workflow_dir / "hostile.yaml", config)
    proc = snakemake(workflow_dir, "-n", "-p", "resources/guest/docker/image.json", "resources/images/cn.json",
                     "--configfile", str(path))
    commands = _shell_commands(proc.stdout)
    image_args, guest_args = commands["image"], commands["guest-image"]
    settings = json.loads(image_args[image_args.index("--settings") + 1])
    assert settings["engine"]["data_root"] == hostile and settings["image"] == image
    cn_settings = json.loads(guest_args[guest_args.index("--cn-settings") + 1])
    assert cn_settings["engine"]["data_root"] == hostile
    assert f"--cn-image={image}" in guest_args


@pytest.mark.parametrize("case,message", [
    ("image-injection",
     "invalid config: {dir}/image-injection.yaml:2: platforms.CN.image: \"x'$(touch /tmp/owned)'\" does not match"),
    ("dup-top-key", "invalid config: {dir}/dup-top-key.yaml:3: key 'study' given twice"),
    ("timeout-nan",
     "invalid config: {dir}/timeout-nan.yaml:2: harness.timeout_s: nan is not of type 'number'"),
    ("edge-mvm-pinned", "invalid config: hosts.edge.matrix[0].pinning: MVM cannot be pinned"),
    ("dataset-path-missing", "invalid config: apps.ic.dataset.path /nonexistent/imagenet: does not exist"),
    ("unknown-top-key", "invalid config: {dir}/unknown-top-key.yaml:2: colour: unknown key"),
])
def test_the_workflow_refuses_bad_configs_in_one_line(workflow_dir, case, message):
    import shutil

    from conftest import REPO

    path = shutil.copy(REPO / "tests" / "bad_configs" / f"{case}.yaml", workflow_dir / f"{case}.yaml")
    proc = snakemake(workflow_dir, "-n", "--configfile", str(path), check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert message.format(dir=workflow_dir) in out, out[-3000:]
    assert "$schema" not in out and "Traceback" not in out  # the key, not the whole schema
