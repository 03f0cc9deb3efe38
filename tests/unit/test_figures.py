"""Figures from fixture summaries without a notebook: what each panel draws or says is missing,
normalisation, row selection (every notebook rendered on every fixture:
tests/integration/test_notebooks.py; each once, in the report: tests/integration/test_report_rendered.py)."""

import subprocess
import sys

import matplotlib
import numpy as np
import pytest

from conftest import CASES, SUMMARIES, plan_document, tool_env
from dlvirt.analysis import figures, rows
from dlvirt.analysis.plandoc import PlanDocument


def plan_of(case: str) -> PlanDocument:
    return PlanDocument.from_document(plan_document(CASES[case][2]))


def texts(fig) -> str:
    """The figure's texts, their wrapping undone."""
    found = [t.get_text() for ax in fig.axes for t in ax.texts] + [t.get_text() for t in fig.texts]
    return " ".join(" ".join(found).split())


def test_missing_panels_say_why():
    summary, host, _ = CASES["partial"]
    plan = plan_of("partial")
    gpu = figures.e2e_vs_cores_figure(summary, tool="mlperf", app="ic", processors=["GPU"], title="t", host=host,
                                      plan=plan)
    assert "not measured on this host" in texts(gpu) and "no GPU on this host" in texts(gpu)
    cpu = figures.e2e_vs_cores_figure(summary, tool="mlperf", app="ic", processors=["CPU"], title="t", host=host,
                                      plan=plan)
    assert "CN, VM, VMCN, MVM" in texts(cpu) and "platform CN is not implemented" in texts(cpu)
    assert "app sr: not in study.apps" in texts(figures.phases_figure(summary, app="sr", plan=plan))
    assert "platform MVM is not implemented" in texts(figures.mvm_figure(summary, host=host, plan=plan, platform="MVM"))
    assert "no edge host was measured" in texts(figures.edge_figure(summary, plan=plan, apps=["ic", "sr"]))
    matplotlib.pyplot.close("all")


def test_edge_rows_only_in_the_edge_figure():
    frame = rows.load_summaries([SUMMARIES / "full.csv"])
    assert set(rows.edge_sites(frame)["site"]) == {"rpi4"}
    assert set(rows.main_site(frame)["site"]) == {"local"}
    partial = rows.load_summaries(SUMMARIES / "partial.csv")  # written before the site column existed
    assert set(partial["site"]) == {"local"}
    edge = figures.edge_figure(SUMMARIES / "full.csv", plan=plan_of("full"), apps=["ic", "sr"])
    assert [ax.get_title() for ax in edge.axes] == ["edge host rpi4: 4 cores, vanilla, CPU"]
    matplotlib.pyplot.close("all")


def test_normalised_to_bm_or_to_the_fastest():
    frame = rows.load_summaries(SUMMARIES / "full.csv")
    chosen = rows.select(rows.main_site(frame), tool="mlperf", cores=4, pinning="VNL", processor="CPU")
    norm, reference = rows.normalised(chosen, "app", plan_of("full").kinds.baseline)
    assert set(reference.values()) == {"BM"}
    assert norm[norm["platform"] == "BM"]["norm"].tolist() == pytest.approx([1.0] * 4)
    _, without_bm = rows.normalised(chosen[chosen["platform"] != "BM"], "app", "BM")
    assert set(without_bm.values()) == {"fastest"}


def test_row_selection_needs_no_plotting():
    """Claims and the report filter rows without matplotlib (plotting sits on top of ``rows``)."""
    code = ("import sys, dlvirt.analysis.claims, dlvirt.analysis.report, dlvirt.analysis.tables; "
            "print(sorted(m for m in ('matplotlib', 'seaborn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=tool_env())
    assert out.stdout.strip() == "[]"


def test_e2e_vs_cores_marks_the_first_level_spanning_two_sockets(tmp_path):
    """Rows of a 2-socket host with 2 cores per socket: PIN/4 spans both (its recorded placement)."""
    frame = rows.load_summaries(SUMMARIES / "full.csv")
    pinned = frame["pinning"] == "PIN"
    frame.loc[pinned, "sockets"] = (frame.loc[pinned, "cores"] > 2).astype(int) + 1
    frame.loc[pinned, "numa_nodes"] = frame.loc[pinned, "sockets"]
    assert rows.first_level_spanning_sockets(frame) == 4
    assert rows.first_level_spanning_sockets(frame[frame["cores"] < 4]) is None
    assert rows.first_level_spanning_sockets(rows.load_summaries(SUMMARIES / "partial.csv")) is None  # no columns
    summary = tmp_path / "two-socket.csv"
    frame.to_csv(summary, index=False)
    fig = figures.e2e_vs_cores_figure(summary, tool="mlperf", app="ic", title="t", plan=plan_of("full"))
    assert "span >1 socket/NUMA node" in texts(fig)
    levels = sorted(frame["cores"].unique())
    marks = [np.asarray(line.get_xdata())[0] for line in fig.axes[0].lines if line.get_linestyle() == ":"]
    assert marks == [levels.index(4) - 0.5]
    plain = figures.e2e_vs_cores_figure(SUMMARIES / "full.csv", tool="mlperf", app="ic", title="t",
                                        plan=plan_of("full"))
    assert "span >1 socket" not in texts(plain)
    matplotlib.pyplot.close("all")


def test_normalised_intervals_carry_the_baselines_uncertainty():
    import pandas as pd

    from dlvirt.analysis.rows import normalised

    frame = pd.DataFrame({"app": ["ic", "ic"], "platform": ["BM", "VM"], "mean_s": [10.0, 20.0],
                         "ci95_s": [0.3, 0.8]})
    norm, reference = normalised(frame, "app", "BM")
    assert reference == {"ic": "BM"}
    assert norm["norm"].tolist() == pytest.approx([1.0, 2.0])
    # BM keeps its own 3 %; VM: 2 × sqrt(4 %² + 3 %²) = 2 × 5 %
    assert norm["norm_ci"].tolist() == pytest.approx([0.03, 0.10])
