"""Claim checks on hand-made summaries whose answer is known, and the plan's left-out reasons."""

import json
import math
import zlib
from typing import Any

import pandas as pd
import pytest

from conftest import FIXTURES
from dlvirt.analysis.claims import FAILS, HOLDS, INCONCLUSIVE, NEGLIGIBLE, UNTESTABLE, evaluate, write_claims
from dlvirt.analysis.claims.verdicts import ALPHA, Outcome, Verdict, family
from dlvirt.analysis.columns import read_table
from dlvirt.core import formats
from dlvirt.core.scenario import Scenario
from dlvirt.plan.leftout import Gap, reasons
from dlvirt.plan.planner import expand, study_gaps
from dlvirt.system.hostinfo import Capabilities

NO_GPU = [Gap("host", "no GPU on this host (nvidia-smi lists none)", scenario=Scenario.parse("BM/2/VNL/GPU"))]


PATTERNS = [(-1, 0, 1), (0, 1, -1), (1, -1, 0), (1, 0, -1), (0, -1, 1), (-1, 1, 0)]


def launch_means(key, mean, ci, launches):
    """``launches`` launch means around ``mean`` with a spread of about ``ci`` (a relative SD of
    ci / mean), in an order that depends on the row, so the rounds do not explain them away."""
    if launches == 1:
        return f"{mean:.6g}"
    pattern = PATTERNS[zlib.crc32(key.encode()) % len(PATTERNS)]
    offsets = [pattern[i % 3] * (1 + i // 3) for i in range(launches)]
    return ";".join(f"{mean * math.exp(ci / mean * o):.6g}" for o in offsets)


def row(platform, cores, pinning="VNL", processor="CPU", app="ic", mean=10.0, ci=0.2, tool="mlperf",
        accel=None, site="local", boot=math.nan, reps=5, gpu_util=50.0, launches=3):
    gpu = processor == "GPU"
    scenario = f"{platform}/{cores}/{pinning}/{processor}"
    means = math.nan if math.isnan(ci) else launch_means(f"{site} {app} {scenario}", mean, ci, launches)
    boots = math.nan if math.isnan(boot) else launch_means(f"boot {site} {app} {scenario}", boot, 0.02 * boot,
                                                           launches)
    return {"reps": reps, "min_reps": reps, "replicates": launches,
            "tool": tool, "app": app, "platform": platform, "cores": cores, "pinning": pinning,
            "processor": processor, "scenario": scenario, "mean_s": mean,
            "ci95_s": ci, "round_means_s": means, "launch_rounds": ";".join(str(i + 1) for i in range(launches)),
            "launch_boot_s": boots,
            "accel": accel or ("kvm" if platform in ("VM", "VMCN", "MVM") else "none"),
            "site": site, "boot_s": boot, "gpu": "Fixture GPU" if gpu else None,
            "gpu_util_pct": gpu_util if gpu else math.nan, "gpu_mem_mib": 2048.0 if gpu else math.nan}


def verdict(rows, claim, host_cores=4, gaps=()):
    table = evaluate(pd.DataFrame(rows), host_cores, list(gaps)).set_index("id")
    return table.loc[claim, "verdict"], table.loc[claim, "evidence"]


# -- pinning ------------------------------------------------------------------------------------------

def pin_rows(cn_pin=9.0, ci=0.2, launches=3):
    rows = [row(p, c, "VNL", mean=10, ci=ci, launches=launches) for p in ("BM", "CN") for c in (1, 2)]
    rows += [row("BM", c, "PIN", mean=9, ci=ci, launches=launches) for c in (1, 2)]
    return rows + [row("CN", c, "PIN", mean=cn_pin, ci=ci, launches=launches) for c in (1, 2)]


def test_pinning_holds_when_pin_is_faster_on_every_platform():
    got, evidence = verdict(pin_rows(), "pinning")
    assert got == HOLDS
    assert "BM PIN/VNL over 2 pair(s): -10.0% [90 % CI" in evidence and "CN PIN/VNL" in evidence
    assert "PIN faster: yes (one-sided t-test against −5%" in evidence and "Holm over 2 parts" in evidence
    assert "[cases: IC 1 cores CPU -10.0%" in evidence


def test_pinning_is_negligible_when_one_platform_shows_no_gain():
    got, evidence = verdict(pin_rows(cn_pin=10.05), "pinning")
    assert got == NEGLIGIBLE and "PIN faster: no, negligible (within ±5% by TOST" in evidence


def test_a_gain_smaller_than_the_margin_never_holds():
    # CN's 2 % gain is real and tightly measured, but smaller than the 5 % margin
    got, evidence = verdict(pin_rows(cn_pin=9.8, ci=0.05), "pinning")
    assert got == NEGLIGIBLE, evidence
    assert "CN PIN/VNL over 2 pair(s): -2.0%" in evidence and "margin −5%" in evidence


def test_pinning_slower_by_more_than_the_margin_does_not_hold():
    got, evidence = verdict(pin_rows(cn_pin=11.0), "pinning")
    assert got == FAILS and "PIN faster: no (one-sided t-test against −5%" in evidence


def test_claims_csv_shows_each_parts_margin_estimate_interval_df_and_launches():
    table = evaluate(pd.DataFrame(pin_rows()), 4, []).set_index("id")
    row = table.loc["pinning"]
    assert row["part"].split(";") == ["BM PIN/VNL over 2 pair(s)", "CN PIN/VNL over 2 pair(s)"]
    assert row["margin"] == "−5%;−5%" and row["outcome"] == "yes;yes" and row["launches"] == "12;12"
    ratios, lows, highs = ([float(v) for v in row[c].split(";")] for c in ("ratio", "ratio_low", "ratio_high"))
    assert ratios[0] == pytest.approx(0.9, abs=1e-3) and lows[0] < ratios[0] < highs[0] < 0.95
    assert all(float(df) > 0 for df in row["df"].split(";")) and row["p_holds"] < ALPHA


def test_the_claims_are_one_family_holm_across_them():
    def tested(p_holds, p_fails=1.0):
        return Verdict(HOLDS if p_holds < ALPHA else INCONCLUSIVE, "e", p_holds, p_fails, parts=(
            Outcome("p", "−5%", 0.9, 0.8, 1.0, 10.0, 10, "yes"),))
    found = family([tested(0.01), tested(0.03), tested(0.04), Verdict(UNTESTABLE, "nothing")])
    # Holm over the three tested claims: 0.03, 0.06, 0.06
    assert [v.verdict for v in found] == [HOLDS, INCONCLUSIVE, INCONCLUSIVE, UNTESTABLE]
    assert "across the study's 3 tested claims (Holm)" in found[1].evidence
    assert "holds before that correction" in found[1].evidence
    assert family([tested(0.03)])[0].verdict == HOLDS  # a family of one: nothing to correct


def test_pinning_is_inconclusive_when_the_intervals_are_wide():
    assert verdict(pin_rows(ci=2.0), "pinning")[0] == INCONCLUSIVE


def test_pinning_ignores_full_host_pairs_and_emulated_rows():
    rows = [row("BM", 4, "VNL", mean=10), row("BM", 4, "PIN", mean=9),            # pinned to every core
            row("VM", 1, "VNL", mean=50, accel="tcg"), row("VM", 1, "PIN", mean=40, accel="tcg")]
    got, evidence = verdict(rows, "pinning")
    assert got == UNTESTABLE
    assert "below the host's 4 cores" in evidence and "VM rows are emulated (TCG)" in evidence


def test_rows_without_launch_means_cannot_decide():
    rows = [row("BM", 1, "VNL", mean=10, ci=math.nan), row("BM", 1, "PIN", mean=5, ci=math.nan)]
    got, evidence = verdict(rows, "pinning")
    assert got == INCONCLUSIVE and "no launch means recorded" in evidence


# -- CN overhead and CHR ------------------------------------------------------------------------------

def chr_rows(cn_low=30.0, ci=0.2):
    return [row("BM", 1, mean=20, ci=ci), row("CN", 1, mean=cn_low, ci=ci), row("BM", 4, mean=8, ci=ci),
            row("CN", 4, mean=8.2, ci=ci)]


def test_cn_overhead_grows_as_chr_falls():
    got, evidence = verdict(chr_rows(), "cn_overhead_chr")
    assert got == HOLDS and "CHR" in evidence


def test_cn_overhead_flat_is_negligible():
    # decided across two claims (this and no_idle_cores, both testable here): Holm over both
    assert verdict(chr_rows(cn_low=20.5, ci=0.1), "cn_overhead_chr")[0] == NEGLIGIBLE


def test_cn_overhead_wide_intervals_are_inconclusive():
    assert verdict(chr_rows(cn_low=22, ci=3.0), "cn_overhead_chr")[0] == INCONCLUSIVE


def test_cn_overhead_needs_two_core_levels():
    assert verdict(chr_rows()[:2], "cn_overhead_chr")[0] == UNTESTABLE


# -- scale-up -----------------------------------------------------------------------------------------

def scale_rows(last=11.9, ci=0.2, launches=3):
    return [row("BM", 4, mean=20, ci=ci, launches=launches), row("BM", 8, mean=12, ci=ci, launches=launches),
            row("BM", 16, mean=last, ci=ci, launches=launches)]


def scale(rows, claim="scale_up_limit"):
    return verdict(rows, claim, host_cores=16)


def test_scale_up_stops_paying_when_the_last_step_gains_less_than_the_margin():
    got, evidence = scale(scale_rows())
    assert got == HOLDS and "last step (last/previous level) over 1 line(s)" in evidence
    assert "IC BM/VNL/CPU 8→16 cores -0.8%" in evidence


def test_scale_up_still_paying_does_not_hold():
    assert scale(scale_rows(last=7))[0] == FAILS


def test_scale_up_with_wide_intervals_is_inconclusive_not_holds():
    # no significant gain, but no evidence that the gain is small either: absence of evidence
    got, evidence = scale(scale_rows(last=11.0, ci=3.0))
    assert got == INCONCLUSIVE and "the smallest effect it could detect: ±" in evidence


def test_scale_up_needs_two_levels_from_8_cores_on():
    assert scale(scale_rows()[:2])[0] == UNTESTABLE
    # a small host's steps (1 -> 2 -> 4 cores) say nothing about scaling beyond 8 cores
    small = [row("BM", 1, mean=20), row("BM", 2, mean=12), row("BM", 4, mean=11.9)]
    got, evidence = verdict(small, "scale_up_limit", host_cores=4)
    assert got == UNTESTABLE and "from 8 cores on" in evidence and "this host has 4 cores" in evidence


# -- GPU ----------------------------------------------------------------------------------------------

def gpu_rows(nlp_gpu, ci=0.2):
    rows = []
    for app, cpu, gpu in (("nlp", 100, nlp_gpu), ("ic", 30, 20), ("rs", 12, 10)):
        rows += [row("BM", 2, app=app, mean=cpu, ci=ci),
                 row("BM", 2, app=app, processor="GPU", mean=gpu, ci=ci * gpu / cpu)]
    return rows


def test_gpu_speeds_nlp_more_than_3x_but_not_ic_rs():
    assert verdict(gpu_rows(nlp_gpu=20), "gpu_speedup")[0] == HOLDS


def test_gpu_speedup_under_3x_for_nlp_does_not_hold():
    assert verdict(gpu_rows(nlp_gpu=50), "gpu_speedup")[0] == FAILS


def test_gpu_speedup_near_3x_with_wide_intervals_is_inconclusive():
    assert verdict(gpu_rows(nlp_gpu=31, ci=20), "gpu_speedup")[0] == INCONCLUSIVE


def test_gpu_claim_uses_only_rows_that_show_gpu_work():
    rows = gpu_rows(nlp_gpu=20)
    for r in rows:
        if r["processor"] == "GPU" and r["app"] == "nlp":
            r["gpu_util_pct"] = 0.0            # the GPU stayed idle: not a GPU row
    got, evidence = verdict(rows, "gpu_speedup", gaps=NO_GPU)
    assert got == UNTESTABLE and "NLP: no CPU and GPU pair" in evidence
    for r in rows:
        r.pop("gpu"), r.pop("gpu_util_pct")   # a summary from before GPU use was verified
    assert "IC: no CPU and GPU pair" in verdict(rows, "gpu_speedup")[1]


def test_gpu_claim_without_gpu_says_why():
    rows = [r for r in gpu_rows(nlp_gpu=20) if r["processor"] == "CPU"]
    got, evidence = verdict(rows, "gpu_speedup", gaps=NO_GPU)
    assert got == UNTESTABLE and "no GPU on this host" in evidence


# -- MVM ----------------------------------------------------------------------------------------------

def mvm_rows(mvm_boot=1.0, nlp_mvm=14.0, ic_mvm=10.2, ci=0.2, launches=3, vmm=None):
    rows = []
    for app, mvm in (("ic", ic_mvm), ("sr", 20.1), ("nlp", nlp_mvm)):
        vm = {"ic": 10.0, "sr": 20.0, "nlp": 12.0}[app]
        rows += [row("VM", 2, app=app, mean=vm, boot=8.0 + len(app) * 0.1, ci=ci, launches=launches),
                 {**row("MVM", 2, app=app, mean=mvm, boot=mvm_boot + len(app) * 0.05, ci=ci, launches=launches),
                  "vmm": vmm}]
    return rows


def test_mvm_like_vm_within_2_percent_with_tight_intervals_holds():
    got, evidence = verdict(mvm_rows(), "mvm_like_vm")   # IC +2 %, SR +0.5 %: inside the 5 % margin
    assert got == HOLDS, evidence
    assert "TOST" in evidence and "±5%" in evidence


def test_mvm_10_percent_off_vm_does_not_hold():
    got, evidence = verdict(mvm_rows(ic_mvm=11.0), "mvm_like_vm")
    assert got == FAILS and "IC MVM/VM over 1 pair(s): +10.0%" in evidence
    assert "MVM like VM: no (minimum-effect test beyond ±5%" in evidence


def test_mvm_booting_slower_does_not_hold():
    assert verdict(mvm_rows(mvm_boot=12.0), "mvm_like_vm")[0] == FAILS


def test_mvm_like_vm_with_wide_intervals_is_inconclusive():
    assert verdict(mvm_rows(ci=1.0), "mvm_like_vm")[0] == INCONCLUSIVE


def test_mvm_without_boot_times_is_not_testable():
    rows = [{**r, "boot_s": math.nan, "launch_boot_s": math.nan} for r in mvm_rows()]
    got, evidence = verdict(rows, "mvm_like_vm")
    assert got == UNTESTABLE and "boot times" in evidence


def test_mvm_rows_are_split_by_vmm():
    rows = mvm_rows(vmm="qemu-microvm") + [
        {**r, "vmm": "firecracker", "mean_s": r["mean_s"] * 1.2,
         "round_means_s": ";".join(str(float(v) * 1.2) for v in r["round_means_s"].split(";"))}
        for r in mvm_rows() if r["platform"] == "MVM"]
    got, evidence = verdict(rows, "mvm_like_vm")
    assert got == FAILS
    assert "MVM(qemu-microvm) like VM: yes" in evidence and "MVM(firecracker) like VM: no" in evidence


# -- no idle cores (Fig. 9) and CHR = 1 ---------------------------------------------------------------

def idle_rows(vm_full, ci=0.2, launches=3):
    return [row("BM", 2, mean=10, ci=ci, launches=launches), row("VM", 2, mean=11, ci=ci, launches=launches),
            row("BM", 4, mean=6, ci=ci, launches=launches), row("VM", 4, mean=vm_full, ci=ci, launches=launches)]


def test_overhead_grows_without_idle_host_cores():
    assert verdict(idle_rows(vm_full=9.0), "no_idle_cores")[0] == HOLDS
    # the same overhead (10 %) with and without idle cores: a ratio of ratios needs tighter launches
    assert verdict(idle_rows(vm_full=6.6, ci=0.1), "no_idle_cores")[0] == NEGLIGIBLE
    assert verdict(idle_rows(vm_full=5.4, ci=0.1), "no_idle_cores")[0] == FAILS  # the overhead shrinks
    assert verdict(idle_rows(vm_full=7.0, ci=2.0), "no_idle_cores")[0] == INCONCLUSIVE
    assert verdict(idle_rows(vm_full=9.0)[:2], "no_idle_cores")[0] == UNTESTABLE


def chr1_rows(vm=8.0, ci=0.2):
    return [row("BM", 4, mean=6, ci=ci), row("CN", 4, mean=6.2, ci=ci), row("VM", 4, mean=vm, ci=ci),
            row("BM", 4, mean=60, site="rpi4"), row("CN", 4, mean=61, site="rpi4"),
            row("VMCN", 4, mean=70, site="rpi4")]


def test_cn_cheapest_at_chr1_on_the_main_host_and_an_edge_host():
    got, evidence = verdict(chr1_rows(), "cn_cheapest_chr1")
    assert got == HOLDS and "edge rpi4" in evidence and "main host" in evidence
    assert verdict(chr1_rows(vm=5.0), "cn_cheapest_chr1")[0] == FAILS  # VM cheaper than CN on the main host
    assert verdict(chr1_rows(vm=6.3, ci=1.0), "cn_cheapest_chr1")[0] == INCONCLUSIVE
    assert verdict(chr1_rows()[:2], "cn_cheapest_chr1", host_cores=4)[0] == UNTESTABLE


# -- what counts as evidence --------------------------------------------------------------------------

@pytest.mark.parametrize("claim, rows, cores", [
    ("scale_up_limit", scale_rows(last=7, launches=1), 16),
    ("mvm_like_vm", mvm_rows(launches=1), 4),
    ("no_idle_cores", idle_rows(vm_full=9.0, launches=1), 4),
    ("pinning", pin_rows(launches=1), 4),
])
def test_rows_of_one_launch_are_never_evidence_however_tight(claim, rows, cores):
    # a single launch per row: its repetitions share one placement, page cache and boot
    got, evidence = verdict(rows, claim, host_cores=cores)
    assert got == INCONCLUSIVE, evidence
    assert "a single launch (the launch is the unit" in evidence


def test_a_small_model_or_an_invalid_run_is_not_evidence():
    small = [{**r, "model": "BERT-tiny", "reference_model": False} for r in scale_rows()]
    got, evidence = scale(small)
    assert got == INCONCLUSIVE and "BERT-tiny is not the reference size" in evidence
    invalid = [{**r, "loadgen_valid": False} for r in scale_rows()]
    got, evidence = scale(invalid)
    assert got == INCONCLUSIVE and "LoadGen INVALID" in evidence


def test_the_margin_is_a_setting():
    rows = mvm_rows(ic_mvm=10.7, ci=0.1)  # +7 %
    assert evaluate(pd.DataFrame(rows), 4, [], margin=0.05).set_index("id").loc["mvm_like_vm", "verdict"] == FAILS
    table = evaluate(pd.DataFrame(rows), 4, [], margin=0.10).set_index("id")
    assert table.loc["mvm_like_vm", "verdict"] == HOLDS and "±10%" in table.loc["mvm_like_vm", "test"]


# -- the whole table ----------------------------------------------------------------------------------

def test_every_claim_gets_a_row_on_an_empty_summary():
    table = evaluate(pd.DataFrame(), 2, [])
    assert len(table) == 10 and set(table["verdict"]) == {UNTESTABLE}  # the paper's 7 and three extensions
    assert table["evidence"].str.len().min() > 10


def test_write_claims_from_fixture_summary(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(formats.stamped("plan", {"left_out": []})))
    out = tmp_path / "claims.csv"
    write_claims(FIXTURES / "summaries" / "full.csv", FIXTURES / "host_full.json", plan, out)
    assert pd.read_csv(out)["format_version"].eq(3).all()
    table = read_table(out, "claims").set_index("id")
    assert list(table.columns) == ["claim", "source", "verdict", "reading", "evidence", "test", "figures", "part",
                                   "margin",
                                   "ratio", "ratio_low", "ratio_high", "df", "launches", "outcome", "p_holds",
                                   "p_fails", "calibration"]
    # the fixture was designed so: pinning, CN/CHR, GPU and CHR = 1 hold; MVM is 10-20 % off VM at 4
    # cores; its 4-core host has no scale-up step from 8 cores on
    assert table.loc["pinning", "verdict"] == HOLDS
    assert table.loc["gpu_speedup", "verdict"] == HOLDS
    assert table.loc["cn_cheapest_chr1", "verdict"] == HOLDS
    assert table.loc["mvm_like_vm", "verdict"] == FAILS
    assert table.loc["scale_up_limit", "verdict"] == UNTESTABLE
    assert table.loc["cn_cheapest_chr1", "figures"] == "fig11"
    # each verdict in one plain sentence, its numbers beside it
    assert table.loc["pinning", "reading"].startswith("“Pinning lowers E2E time on each platform” holds here: ")
    assert "beyond the −5% margin" in table.loc["pinning", "reading"]
    assert table.loc["mvm_like_vm", "reading"].startswith("“MVM performs like VM")
    assert table.loc["scale_up_limit", "reading"].startswith("Not testable on this host: ")


def test_an_undecided_part_reads_as_what_the_study_could_resolve():
    from dlvirt.analysis.claims.verdicts import reading

    part = Outcome("BM", "−5%", 1.002, 0.904, 1.111, 92.0, 10, "undecided")
    text = reading("PIN is faster", Verdict(INCONCLUSIVE, "…", parts=(part,)))
    assert text == ("Not decided: BM +0.2% (90 % interval -9.6% to +11.1%): this study resolves only about ±10.9%, "
                    "not enough to tell it from the margin. More launches narrow it.")
    times = Outcome("NLP", "3×", 20.9, 18.0, 24.0, 12.0, 5, "yes")
    assert "NLP 20.9× (90 % interval 18× to 24×), beyond the 3× margin" in reading("GPU", Verdict(HOLDS, "",
                                                                                                 parts=(times,)))


# -- left-out reasons ---------------------------------------------------------------------------------

def test_reasons_understand_what_the_real_planner_writes():
    caps = Capabilities(cpus=(0, 1), gpus=(), kvm_device=False, hw_virt=False, qemu=False,
                        libvirt=False, cgroup_version=1)
    config: dict[str, Any] = {"strict": False, "host_check": True, "allow_emulation": False, "platforms": {},
              "study": {"apps": ["ic"], "tools": ["mlperf"], "repetitions": 1,
                        "matrix": [{"platforms": ["BM"], "cores": [1, 8], "pinning": ["VNL"],
                                    "processors": ["CPU", "GPU"]}]},
              "apps": {"ic": {}}}
    plan = expand(config, caps)
    gaps = study_gaps(plan.left_out, config["study"])
    for gap in gaps:  # every entry is structured, and plan.json's document of it reads back the same
        assert Gap.from_document(json.loads(json.dumps(gap.document()))) == gap
    assert any("no GPU" in r for r in reasons(gaps, tool="mlperf", app="ic", processor="GPU"))
    assert any("8 cores requested" in r for r in reasons(gaps, tool="mlperf", app="ic", processor="CPU"))
    # a whole app left out is the reason, not its scenarios
    assert reasons(gaps, tool="mlperf", app="nlp") == ["app nlp: not in study.apps of this config"]
    assert reasons(gaps, tool="dlbs", app="ic") == ["tool dlbs: not in study.tools of this config"]


@pytest.mark.parametrize("change", [{"reason": "because"}, {"app": "ic"}, {"scenario": None}, {"extra": 1},
                                    {"scenario": "VM 2 cores"}])
def test_malformed_left_out_entries_are_refused_naming_them(change):
    good = Gap("unsupported", "why", tool="mlperf", app="ic", scenario=Scenario.parse("VM/2/VNL/CPU")).document()
    assert Gap.from_document(good).what == "mlperf ic VM/2/VNL/CPU"
    bad = {**good, **change} if "app" not in change else {**good, "tool": None}
    with pytest.raises(ValueError, match=r"plan.json: left_out\[3\]"):
        Gap.from_document(bad, "plan.json: left_out[3]")


def test_what_the_config_does_not_ask_for_is_a_reason_too():
    study = {"apps": ["ic"], "tools": ["mlperf"], "matrix": [{"platforms": ["BM"], "processors": ["CPU"]}]}
    gaps = study_gaps([], study)
    assert reasons(gaps, tool="mlperf", app="ic", processor="GPU")[0] == \
        "processor GPU: not in study.matrix of this config"
    assert "platform MVM: not in study.matrix of this config" in reasons(gaps, tool="mlperf", app="ic",
                                                                         processor="CPU", platforms=("MVM",))
