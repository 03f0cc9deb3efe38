"""Claim checks on hand-made summaries whose answer is known, and the plan's left-out reasons."""

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from dlvirt.analysis.claims import FAILS, HOLDS, UNTESTABLE, evaluate, write_claims
from dlvirt.plan.leftout import Gap, reasons, study_gaps
from dlvirt.system.hostinfo import Capabilities
from dlvirt.plan.planner import expand

FIXTURES = Path(__file__).parent / "fixtures"
NO_GPU = [["BM/2/VNL/GPU", "no GPU on this host (nvidia-smi lists none)"]]


def row(platform, cores, pinning="VNL", processor="CPU", app="ic", mean=10.0, ci=0.2, tool="mlperf",
        accel=None, site="local", boot=math.nan):
    return {"tool": tool, "app": app, "platform": platform, "cores": cores, "pinning": pinning,
            "processor": processor, "scenario": f"{platform}/{cores}/{pinning}/{processor}", "mean_s": mean,
            "ci95_s": ci, "accel": accel or ("kvm" if platform in ("VM", "VMCN", "MVM") else "none"),
            "site": site, "boot_s": boot}


def verdict(rows, claim, host_cores=4, gaps=()):
    table = evaluate(pd.DataFrame(rows), host_cores, list(gaps)).set_index("id")
    return table.loc[claim, "verdict"], table.loc[claim, "evidence"]


# -- pinning ------------------------------------------------------------------------------------------

def test_pinning_holds_when_pin_is_faster_on_every_platform():
    rows = [row(p, c, "VNL", mean=10) for p in ("BM", "CN") for c in (1, 2)]
    rows += [row(p, c, "PIN", mean=9) for p in ("BM", "CN") for c in (1, 2)]
    got, evidence = verdict(rows, "pinning")
    assert got == HOLDS
    assert "BM: PIN significantly faster in 2 of 2 pairs" in evidence and "CN:" in evidence


def test_pinning_does_not_hold_when_one_platform_shows_no_gain_beyond_the_ci():
    rows = [row("BM", 1, "VNL", mean=10), row("BM", 1, "PIN", mean=9),
            row("CN", 1, "VNL", mean=10, ci=1.0), row("CN", 1, "PIN", mean=9.5, ci=1.0)]
    got, evidence = verdict(rows, "pinning")
    assert got == FAILS and "CN: PIN significantly faster in 0 of 1 pairs" in evidence


def test_pinning_ignores_full_host_pairs_and_emulated_rows():
    rows = [row("BM", 4, "VNL", mean=10), row("BM", 4, "PIN", mean=9),            # pinned to every core
            row("VM", 1, "VNL", mean=50, accel="tcg"), row("VM", 1, "PIN", mean=40, accel="tcg")]
    got, evidence = verdict(rows, "pinning")
    assert got == UNTESTABLE
    assert "below the host's 4 cores" in evidence and "VM rows are emulated (TCG)" in evidence


def test_rows_without_ci_cannot_decide():
    rows = [row("BM", 1, "VNL", mean=10, ci=math.nan), row("BM", 1, "PIN", mean=5, ci=math.nan)]
    assert verdict(rows, "pinning")[0] == UNTESTABLE


# -- CN overhead and CHR ------------------------------------------------------------------------------

def test_cn_overhead_grows_as_chr_falls():
    rows = [row("BM", 1, mean=20), row("CN", 1, mean=30), row("BM", 4, mean=8), row("CN", 4, mean=8.2)]
    got, evidence = verdict(rows, "cn_overhead_chr")
    assert got == HOLDS and "CHR" in evidence


def test_cn_overhead_flat_does_not_hold():
    rows = [row("BM", 1, mean=20), row("CN", 1, mean=21), row("BM", 4, mean=8), row("CN", 4, mean=8.4)]
    assert verdict(rows, "cn_overhead_chr")[0] == FAILS


# -- scale-up -----------------------------------------------------------------------------------------

def test_scale_up_stops_paying_when_the_last_step_gains_nothing():
    rows = [row("BM", 1, mean=20), row("BM", 2, mean=12), row("BM", 4, mean=11.9)]
    got, evidence = verdict(rows, "scale_up_limit")
    assert got == HOLDS and "1 of 1 lines" in evidence


def test_scale_up_still_paying_does_not_hold():
    rows = [row("BM", 1, mean=20), row("BM", 2, mean=12), row("BM", 4, mean=7)]
    assert verdict(rows, "scale_up_limit")[0] == FAILS


# -- GPU ----------------------------------------------------------------------------------------------

def gpu_rows(nlp_gpu):
    rows = []
    for app, cpu, gpu in (("nlp", 100, nlp_gpu), ("ic", 30, 20), ("rs", 12, 10)):
        rows += [row("BM", 2, app=app, mean=cpu), row("BM", 2, app=app, processor="GPU", mean=gpu)]
    return rows


def test_gpu_speeds_nlp_more_than_3x_but_not_ic_rs():
    assert verdict(gpu_rows(nlp_gpu=20), "gpu_speedup")[0] == HOLDS


def test_gpu_speedup_under_3x_for_nlp_does_not_hold():
    assert verdict(gpu_rows(nlp_gpu=50), "gpu_speedup")[0] == FAILS


def test_gpu_claim_without_gpu_says_why():
    rows = [r for r in gpu_rows(nlp_gpu=20) if r["processor"] == "CPU"]
    got, evidence = verdict(rows, "gpu_speedup", gaps=NO_GPU)
    assert got == UNTESTABLE and "no GPU on this host" in evidence


# -- MVM ----------------------------------------------------------------------------------------------

def mvm_rows(mvm_boot=1.0, nlp_mvm=14.0):
    rows = []
    for app, mvm in (("ic", 10.2), ("sr", 20.1), ("nlp", nlp_mvm)):
        vm = {"ic": 10.0, "sr": 20.0, "nlp": 12.0}[app]
        rows += [row("VM", 2, app=app, mean=vm, boot=8.0 + len(app) * 0.1),
                 row("MVM", 2, app=app, mean=mvm, boot=mvm_boot + len(app) * 0.05)]
    return rows


def test_mvm_like_vm_except_nlp_and_boots_faster():
    got, evidence = verdict(mvm_rows(), "mvm_like_vm")
    assert got == HOLDS, evidence


def test_mvm_booting_slower_does_not_hold():
    assert verdict(mvm_rows(mvm_boot=12.0), "mvm_like_vm")[0] == FAILS


def test_mvm_without_boot_times_is_not_testable():
    rows = [{**r, "boot_s": math.nan} for r in mvm_rows()]
    got, evidence = verdict(rows, "mvm_like_vm")
    assert got == UNTESTABLE and "boot times" in evidence


# -- no idle cores (Fig. 9) and CHR = 1 ---------------------------------------------------------------

def idle_rows(vm_full):
    return [row("BM", 2, mean=10), row("VM", 2, mean=11), row("BM", 4, mean=6), row("VM", 4, mean=vm_full)]


def test_overhead_grows_without_idle_host_cores():
    assert verdict(idle_rows(vm_full=9.0), "no_idle_cores")[0] == HOLDS
    assert verdict(idle_rows(vm_full=6.6), "no_idle_cores")[0] == FAILS


def test_cn_cheapest_at_chr1_on_the_main_host_and_an_edge_host():
    rows = [row("BM", 4, mean=6), row("CN", 4, mean=6.2), row("VM", 4, mean=8),
            row("BM", 4, mean=60, site="rpi4"), row("CN", 4, mean=61, site="rpi4"), row("VMCN", 4, mean=70, site="rpi4")]
    got, evidence = verdict(rows, "cn_cheapest_chr1")
    assert got == HOLDS and "edge rpi4" in evidence and "main host" in evidence
    rows[2]["mean_s"] = 5.0  # VM cheaper than CN on the main host
    assert verdict(rows, "cn_cheapest_chr1")[0] == FAILS


# -- the whole table ----------------------------------------------------------------------------------

def test_every_claim_gets_a_row_on_an_empty_summary():
    table = evaluate(pd.DataFrame(), 2, [])
    assert len(table) == 7 and set(table["verdict"]) == {UNTESTABLE}
    assert table["evidence"].str.len().min() > 10


def test_write_claims_from_fixture_summary(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"left_out": []}))
    out = tmp_path / "claims.csv"
    write_claims(FIXTURES / "summaries" / "full.csv", FIXTURES / "host_full.json", plan, out)
    table = pd.read_csv(out).set_index("id")
    assert list(table.columns) == ["claim", "source", "verdict", "evidence", "test", "figures"]
    # the fixture was designed so: pinning, CN/CHR, GPU and CHR = 1 hold; scale-up still pays at 4 cores
    assert table.loc["pinning", "verdict"] == HOLDS
    assert table.loc["gpu_speedup", "verdict"] == HOLDS
    assert table.loc["scale_up_limit", "verdict"] == FAILS
    assert table.loc["cn_cheapest_chr1", "figures"] == "fig11"


# -- left-out reasons ---------------------------------------------------------------------------------

def test_reasons_understand_what_the_real_planner_writes():
    caps = Capabilities(cpus=(0, 1), gpus=(), kvm_device=False, hw_virt=False, docker=False, qemu=False,
                        libvirt=False, firecracker=False, cgroup_version=1)
    config = {"strict": False, "host_check": True, "allow_emulation": False, "platforms": {},
              "study": {"apps": ["ic"], "tools": ["mlperf"], "repetitions": 1,
                        "matrix": [{"platforms": ["BM"], "cores": [1, 8], "pinning": ["VNL"],
                                    "processors": ["CPU", "GPU"]}]},
              "apps": {"ic": {}}}
    plan = expand(config, caps)
    gaps = study_gaps(plan.left_out, config["study"])
    for what, why in gaps:
        Gap.parse(what, why)  # every entry is in a known form
    assert any("no GPU" in r for r in reasons(gaps, tool="mlperf", app="ic", processor="GPU"))
    assert any("8 cores requested" in r for r in reasons(gaps, tool="mlperf", app="ic", processor="CPU"))
    # a whole app left out is the reason, not its scenarios
    assert reasons(gaps, tool="mlperf", app="nlp") == ["app nlp: not in study.apps of this config"]
    assert reasons(gaps, tool="dlbs", app="ic") == ["tool dlbs: not in study.tools of this config"]


@pytest.mark.parametrize("what", ["VM 2 cores", "a b c d"])
def test_unknown_left_out_forms_are_refused(what):
    with pytest.raises(ValueError):
        Gap.parse(what, "why")


def test_what_the_config_does_not_ask_for_is_a_reason_too():
    study = {"apps": ["ic"], "tools": ["mlperf"], "matrix": [{"platforms": ["BM"], "processors": ["CPU"]}]}
    gaps = study_gaps([], study)
    assert reasons(gaps, tool="mlperf", app="ic", processor="GPU")[0] == "processor GPU: not in study.matrix of this config"
    assert "platform MVM: not in study.matrix of this config" in reasons(gaps, tool="mlperf", app="ic",
                                                                         processor="CPU", platforms=("MVM",))
