"""A token app's rows (LLM): TTFT, TPOT and tokens/s in the summary, the tokens figure, and the
extension claim that virtualisation slows decode more than prefill."""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd
import pytest

from dlvirt.analysis.aggregate import token_columns
from dlvirt.core.records import Repetition


def repetition(prefill_s, decode_s, requests=4, output_tokens=36, tokens=None):
    now = datetime.now(UTC)
    return Repetition.measured(repetition=0, e2e_s=prefill_s + decode_s + 0.1,
                               phases={"prefill_s": prefill_s, "decode_s": decode_s, "infer_s": prefill_s + decode_s},
                               samples=requests, batches=requests, observed={}, threads={},
                               quality={"requests": requests, "output_tokens": output_tokens, "prompt_tokens": 100},
                               started=now, finished=now, loadgen={"tokens": tokens or {"tokens_per_s": 50.0}})


def test_a_token_row_has_ttft_and_tpot_per_launch_and_loadgens_tokens_per_s():
    launches = [[repetition(0.4, 1.6), repetition(0.4, 1.6)], [repetition(0.8, 3.2)]]
    row = token_columns(launches)
    assert row["round_ttft_s"] == "0.1;0.2" and row["round_tpot_s"] == "0.05;0.1"
    assert row["ttft_s"] == pytest.approx(0.15) and row["tpot_s"] == pytest.approx(0.075)
    assert row["tokens_per_s"] == 50.0 and pd.isna(row["ttft_p50_s"])
    latency = {"tokens_per_s": 9.0, "first_token_ns": {"p50": 2e8, "p90": 3e8, "p99": 4e8},
               "time_per_output_token_ns": {"p50": 5e7, "p90": 6e7, "p99": 7e7}}
    row = token_columns([[repetition(0.4, 1.6, tokens=latency)]])
    assert row["ttft_p99_s"] == pytest.approx(0.4) and row["tpot_p50_s"] == pytest.approx(0.05)
    assert token_columns([[Repetition.measured(repetition=0, e2e_s=1.0, phases={"infer_s": 1.0}, samples=1,
                                               batches=1, observed={}, threads={}, quality={},
                                               started=datetime.now(UTC), finished=datetime.now(UTC))]]) == {}


def token_row(platform, ttft, tpot, cores=1, launches=4, spread=0.02):
    wobble = [1 + spread * w for w in (-1, 1, 0.5, -0.5)[:launches]]
    return {"tool": "mlperf", "app": "llm", "platform": platform, "cores": cores, "pinning": "VNL",
            "processor": "CPU", "site": "local", "scenario": f"{platform}/{cores}/VNL/CPU", "reps": 2 * launches,
            "replicates": launches, "mean_s": 1.0, "ci95_s": 0.01, "accel": "none", "reference_model": True,
            "round_means_s": ";".join("1.0" for _ in wobble), "launch_rounds": ";".join(str(i + 1) for i in
                                                                                        range(launches)),
            "round_ttft_s": ";".join(f"{ttft * w:.6g}" for w in wobble),
            "round_tpot_s": ";".join(f"{tpot * w * (1 + spread * (k % 2)):.6g}" for k, w in enumerate(wobble)),
            "ttft_s": ttft, "tpot_s": tpot, "loadgen_valid": True}


def decode_claim(rows):
    from dlvirt.analysis.claims import evaluate

    table = evaluate(pd.DataFrame(rows), 4, []).set_index("id")
    return table.loc["llm_decode_cost", "verdict"], table.loc["llm_decode_cost", "evidence"], \
        table.loc["llm_decode_cost", "source"]


def test_the_decode_claim_holds_when_a_platform_slows_decode_more_than_prefill():
    verdict, evidence, source = decode_claim([token_row("BM", 0.10, 0.010), token_row("CN", 0.105, 0.014)])
    assert verdict == "holds", evidence
    assert source.startswith("extension") and "CN/1/VNL/CPU" in evidence


def test_the_decode_claim_is_negligible_when_both_slow_alike_and_needs_token_rows():
    assert decode_claim([token_row("BM", 0.10, 0.010, spread=0.002),
                         token_row("CN", 0.12, 0.012, spread=0.002)])[0] == "negligible"
    verdict, evidence, _ = decode_claim([token_row("BM", 0.1, 0.01)])
    assert verdict == "not testable here" and "BM twin" in evidence
    ic_only = {**token_row("BM", 0.1, 0.01), "app": "ic", "round_ttft_s": "", "round_tpot_s": ""}
    assert "study.apps" in decode_claim([ic_only])[1]


def test_the_tokens_figure_normalises_ttft_and_tpot_to_bare_metal(tmp_path):
    from conftest import write_plan
    from dlvirt.analysis import figures
    from dlvirt.analysis.plandoc import PlanDocument
    from dlvirt.analysis.rows import tokens_beside_baseline

    rows = [token_row("BM", 0.1, 0.01), token_row("CN", 0.11, 0.015), token_row("BM", 0.06, 0.006, cores=2),
            token_row("CN", 0.066, 0.009, cores=2)]
    summary = tmp_path / "llm.csv"
    pd.DataFrame(rows).to_csv(summary, index=False)
    plan = PlanDocument.load(write_plan(tmp_path / "plan.json"))
    table = tokens_beside_baseline(pd.DataFrame(rows), "BM").set_index(["platform", "cores"])
    assert table.loc[("CN", 1), "ttft_s/BM"] == pytest.approx(1.1)
    assert table.loc[("CN", 2), "tpot_s/BM"] == pytest.approx(1.5)
    fig = figures.tokens_figure([summary], app="llm", plan=plan)
    figures.save(fig, tmp_path / "tokens.png")
    assert (tmp_path / "tokens.png").stat().st_size > 10_000
    empty = figures.tokens_figure([summary], app="llm", plan=plan, tool="dlbs")
    assert "not measured" in " ".join(t.get_text() for t in empty.axes[0].texts)
