"""Every figure notebook runs on the fixture summaries: a full study, one missing platforms/GPU/edge
(a 2-core host without GPU or KVM, and no boot_s/site columns), and an empty one; and papermill runs
a notebook as the workflow does, in a Jupyter kernel. (Each notebook once, in-process, in the
report: tests/integration/test_report_rendered.py; the figure code without notebooks: tests/unit/test_figures.py.)"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CASES, REPO, assert_rendered, parameters, run_notebook_in_process, tool_env
from dlvirt.analysis.catalog import FIGURES


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("spec", FIGURES, ids=[s.id for s in FIGURES])
def test_every_notebook_runs_on_every_fixture(spec, case, tmp_path):
    params = parameters(spec, case, tmp_path)
    run_notebook_in_process(REPO / "notebooks" / f"{spec.notebook_name}.ipynb", params)
    assert_rendered(Path(params["png"]), Path(params["pdf"]))


@pytest.mark.parametrize(("fig", "case"), [("fig4a", "full"), ("phases_nlp", "partial"), ("fig10", "partial")])
def test_papermill_runs_a_notebook_as_the_workflow_does(fig, case, tmp_path):
    spec = next(s for s in FIGURES if s.id == fig)
    params = parameters(spec, case, tmp_path)
    executed = tmp_path / "executed.ipynb"
    cmd = [str(Path(sys.executable).parent / "papermill"), str(REPO / "notebooks" / f"{spec.notebook_name}.ipynb"),
           str(executed), "-y", json.dumps(params)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=tool_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_rendered(Path(params["png"]), Path(params["pdf"]))
    assert "injected-parameters" in executed.read_text()
