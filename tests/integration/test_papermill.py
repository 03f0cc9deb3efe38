"""papermill runs a figure notebook as the workflow does, in a Jupyter kernel (the notebooks
in-process on every fixture: tests/unit/test_figures.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, assert_rendered, parameters, tool_env
from dlvirt.analysis.catalog import FIGURES


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
