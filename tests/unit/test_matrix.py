"""Expanding the matrix against a described host (no host probing here: capabilities are given)."""

import copy
from typing import Any

import pytest
import yaml

from conftest import REPO
from dlvirt.core.errors import ConfigError
from dlvirt.plan.planner import expand
from dlvirt.system.hostinfo import Capabilities


def host(cores: int = 2, gpus: tuple[str, ...] = ()) -> Capabilities:
    return Capabilities(cpus=tuple(range(cores)), gpus=gpus, kvm_device=False, hw_virt=False, qemu=False,
                        libvirt=False, cgroup_version=1)


def config(matrix, apps=("ic",), tools=("mlperf",), strict=False):
    return {"strict": strict, "host_check": True, "allow_emulation": False,
            "study": {"apps": list(apps), "tools": list(tools), "repetitions": 1, "matrix": matrix},
            "apps": {"ic": {}}, "platforms": {}}


def names(plan):
    return sorted(job.scenario.name for job in plan.jobs)


def test_cross_product_with_all_cores():
    plan = expand(config([{"platforms": ["BM"], "cores": [1, "all"], "pinning": ["VNL", "PIN"],
                           "processors": ["CPU"]}]), host(2))
    assert names(plan) == ["BM/1/PIN/CPU", "BM/1/VNL/CPU", "BM/2/PIN/CPU", "BM/2/VNL/CPU"]
    assert plan.left_out == []


def test_host_lacks_left_out_with_reason_or_error_when_strict():
    matrix = [{"platforms": ["BM"], "cores": [2, 64], "pinning": ["PIN"], "processors": ["CPU", "GPU"]}]
    plan = expand(config(matrix), host(2))
    assert names(plan) == ["BM/2/PIN/CPU"]
    reasons = {gap.what: gap.why for gap in plan.left_out}
    assert "64 cores requested, host has 2" in reasons["BM/64/PIN/CPU"]
    assert "no GPU" in reasons["BM/2/PIN/GPU"]
    with pytest.raises(ConfigError, match="strict: true"):
        expand(config(matrix, strict=True), host(2))


def test_a_blocks_apps_keep_its_scenarios_to_them_and_say_why_the_rest_are_not_planned():
    matrix = [{"platforms": ["BM"], "cores": [1], "pinning": ["VNL"], "processors": ["CPU"]},
              {"platforms": ["CN"], "cores": [1], "pinning": ["VNL"], "processors": ["CPU"], "apps": ["nlp"]}]
    two = {**config(matrix, apps=("ic", "nlp"), strict=True), "apps": {"ic": {}, "nlp": {}}}
    plan = expand(two, host(2))
    assert sorted((job.app, job.scenario.name) for job in plan.jobs) == [
        ("ic", "BM/1/VNL/CPU"), ("nlp", "BM/1/VNL/CPU"), ("nlp", "CN/1/VNL/CPU")]
    # not planned because the config says so: a left-out entry a figure can show, never a strict error
    assert [(gap.reason, gap.what, gap.why) for gap in plan.left_out] == [
        ("not_configured", "mlperf ic CN/1/VNL/CPU", "not in study.matrix[1].apps of this config")]
    with pytest.raises(ConfigError, match=r"study.matrix\[1\].apps: 'rs' not in study.apps \(ic, nlp\)"):
        expand({**two, "study": {**two["study"], "matrix": [matrix[0], {**matrix[1], "apps": ["rs"]}]}}, host(2))


def test_gpu_kept_when_host_has_one():
    matrix = [{"platforms": ["BM"], "cores": [1], "pinning": ["VNL"], "processors": ["GPU"]}]
    assert names(expand(config(matrix), host(2, gpus=("GPU 0: X",)))) == ["BM/1/VNL/GPU"]


def test_no_host_check_takes_matrix_as_declared():
    matrix = [{"platforms": ["BM"], "cores": [64], "pinning": ["PIN"], "processors": ["GPU"]}]
    assert names(expand(config(matrix), None)) == ["BM/64/PIN/GPU"]
    with pytest.raises(ConfigError, match=r"study.matrix\[0\].cores\[0\]: 'all'"):
        expand(config([{"platforms": ["BM"], "cores": ["all"], "pinning": ["PIN"], "processors": ["CPU"]}]), None)


def test_all_cores_on_a_cluster_is_the_benchmark_nodes_cores():
    block = [{"platforms": ["BM"], "cores": [1, "all"], "pinning": ["VNL"], "processors": ["CPU"]}]
    with pytest.raises(ConfigError, match=r"matrix\[0\].cores\[1\]: 'all' needs the host check .* cluster.node_cores"):
        expand(config(block), None)
    # a profile's --config passes the number as digits
    assert names(expand({**config(block), "cluster": {"node_cores": "80"}}, None)) == ["BM/1/VNL/CPU", "BM/80/VNL/CPU"]


def test_paper_matrix_without_host_check_is_the_full_matrix():
    paper = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    cfg = copy.deepcopy(paper)
    cfg.setdefault("platforms", {})
    plan = expand(cfg, None)
    # Every implemented platform x 6 levels x 2 pinnings x 2 processors appears for IC, in every round.
    ic_bm = [j for j in plan.jobs if j.app == "ic" and j.scenario.platform == "BM" and j.tool == "mlperf"]
    assert paper["study"]["replicates"] >= 3 and len(ic_bm) == 6 * 2 * 2 * paper["study"]["replicates"]


@pytest.mark.parametrize("field,value,key", [("pinning", ["VNL", "PIN"], r"study.matrix\[0\].pinning"),
                                             ("processors", ["CPU", "GPU"], r"study.matrix\[0\].processors")])
def test_mvm_with_pin_or_gpu_is_a_config_error_naming_the_key(field, value, key):
    block = {"platforms": ["MVM"], "cores": [1], "pinning": ["VNL"], "processors": ["CPU"], field: value}
    with pytest.raises(ConfigError, match=key):
        expand(config([block]), host(2))


def test_replicates_are_interleaved_rounds_in_a_seeded_order():
    config: dict[str, Any] = {"strict": False, "host_check": False, "allow_emulation": False, "platforms": {},
              "study": {"apps": ["ic"], "tools": ["mlperf"], "repetitions": 3, "replicates": 3, "order_seed": 7,
                        "matrix": [{"platforms": ["BM", "CN"], "cores": [1, 2, 4], "pinning": ["VNL"],
                                    "processors": ["CPU"]}]},
              "apps": {"ic": {}}}
    plan = expand(config, None)
    assert [job.replicate for job in plan.jobs] == [1] * 6 + [2] * 6 + [3] * 6
    rounds = [[job.scenario.name for job in plan.round(r)] for r in (1, 2, 3)]
    assert all(sorted(r) == sorted(rounds[0]) for r in rounds) and len(set(map(tuple, rounds))) > 1
    assert expand(config, None).jobs == plan.jobs                       # the seed fixes the order
    config["study"]["order_seed"] = 8
    assert expand(config, None).jobs != plan.jobs
    assert plan.jobs[0].wildcards["replicate"] == "1"


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml"])
def test_shipped_study_configs_run_three_launches_or_more(name):
    """The launch is the unit: a study of fewer launches per scenario cannot decide a claim."""
    study = yaml.safe_load((REPO / "config" / name).read_text())["study"]
    assert study["replicates"] >= 3


def test_a_cluster_node_kind_constrains_every_benchmark_job_and_the_plan_records_it():
    """cluster.node_kind keeps a study on one kind of node (SLURM --constraint, with kvm for guests);
    results/plan.json says which kind it asked for (null: any)."""
    from snakemake.utils import validate

    from conftest import smoke_config
    from dlvirt.plan.planner import node_constraint, plan_document

    config = smoke_config(guests=True, host_check=False)
    validate(config, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))  # fills in the defaults
    assert config["cluster"]["node_kind"] is None
    assert (node_constraint(config, "VM"), node_constraint(config, "BM")) == ("kvm", "")
    assert plan_document(config, expand(config, None), None)["node_kind"] is None
    config["cluster"]["node_kind"] = "xeon6248"
    assert (node_constraint(config, "VMCN"), node_constraint(config, "CN")) == ("kvm&xeon6248", "xeon6248")
    assert plan_document(config, expand(config, None), None)["node_kind"] == "xeon6248"
