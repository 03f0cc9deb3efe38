"""Config validation through the real workflow (snakemake -n): good configs build, bad ones are
refused with the offending key named."""

import time

import pytest

from conftest import smoke_config, snakemake, write_config


def test_default_and_smoke_configs_build(workflow_dir):
    proc = snakemake(workflow_dir, "-n")
    assert "benchmark" in proc.stdout
    proc = snakemake(workflow_dir, "-n", "--configfile", "config/smoke.yaml")
    assert "benchmark" in proc.stdout


def test_paper_config_builds_fast_and_says_what_it_leaves_out(workflow_dir):
    start = time.monotonic()
    proc = snakemake(workflow_dir, "-n", "--configfile", "config/paper.yaml")
    assert time.monotonic() - start < 10
    assert "left out BM/64/PIN/CPU: 64 cores requested" in proc.stderr


def test_paper_config_without_host_check_is_the_whole_matrix(workflow_dir):
    start = time.monotonic()
    proc = snakemake(workflow_dir, "-n", "--configfile", "config/paper.yaml", "--config", "host_check=false")
    assert time.monotonic() - start < 10
    assert "left out BM/" not in proc.stderr
    assert "BM/64/PIN/GPU" in proc.stdout or "cores=64" in proc.stdout


@pytest.mark.parametrize("mutate,message", [
    (lambda c: c.update(colour="blue"), "Additional properties are not allowed ('colour'"),
    (lambda c: c["apps"]["ic"].update(batchsize=3), "'batchsize' was unexpected"),
    (lambda c: c["study"].update(repetitions=0), "0 is less than the minimum of 1"),
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
