"""The CLI's error boundary: a known error is one line ``dlvirt <command>: <what>`` naming the
option, key or file, exit 2 for bad input and 1 for a failed run; no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dlvirt.cli import EXIT_INPUT, EXIT_RUN, main

BENCH = ["bench", "--output", "/nonexistent/r.json", "--loadgen-dir", "/nonexistent/lg", "--spec"]


@pytest.mark.parametrize("argv,message", [
    (BENCH + ["{"], "dlvirt bench: --spec: not valid JSON (Expecting property name"),
    (BENCH + ["{}"], "dlvirt bench: --spec: lacks tool, app, scenario"),
    (BENCH + ["[1, 2]"], "dlvirt bench: --spec: a JSON object is needed, not a JSON list"),
    (BENCH + ['"x"'], "dlvirt bench: --spec: a JSON object is needed, not a JSON str"),
    (["site-bench", "--site", "e", "--ssh", "{}", "--spec", "{}", "--output", "o", "--loadgen-dir", "l"],
     "dlvirt site-bench: --ssh: lacks ssh, workdir, python"),
    (["site-facts", "--site", "e", "--ssh", "nope", "--output", "o"], "dlvirt site-facts: --ssh: not valid JSON"),
    (["dataset", "--app", "ic", "--settings", "{}", "--output-dir", "o"], "dlvirt dataset: --settings: lacks dataset"),
    (["dataset", "--app", "xx", "--settings", '{"dataset": {}}', "--output-dir", "o"],
     "dlvirt dataset: app 'xx' is not implemented"),
    # the settings are checked as apps.<app> of a config file would be: no traceback, nothing written
    (["dataset", "--app", "ic", "--settings", '{"dataset": {"count": 1.5, "seed": 0}}', "--output-dir", "o"],
     "dlvirt dataset: apps.ic.dataset.count: 1.5 is not of type 'integer'"),
    (["dataset", "--app", "ic", "--settings", '{"dataset": {"count": "many", "seed": 0}}', "--output-dir", "o"],
     "dlvirt dataset: apps.ic.dataset.count: 'many' is not of type 'integer'"),
    (["image", "--settings", "1", "--output", "o"], "dlvirt image: --settings: a JSON object is needed"),
    (["guest-image", "--variant", "full", "--output-dir", "o", "--cn-settings", "{"],
     "dlvirt guest-image: --cn-settings: not valid JSON"),
    (["cleanup", "--settings", "[]"], "dlvirt cleanup: --settings: a JSON object is needed"),
    (["aggregate", "--output", "o.csv", "/nonexistent/run.json"],
     "dlvirt aggregate: /nonexistent/run.json: No such file"),
    (["check-config", "/nonexistent/c.yaml"], "dlvirt check-config: config file /nonexistent/c.yaml: cannot be read"),
])
def test_bad_input_is_one_line_naming_the_option_or_file(argv, message, capsys):
    assert main(argv) == EXIT_INPUT
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err


def test_a_failed_run_exits_1_with_its_message(tmp_path, capsys):
    settings = '{"dataset": {"path": "/nonexistent/imagenet", "count": 1, "seed": 0}}'
    assert main(["dataset", "--app", "ic", "--settings", settings, "--output-dir", str(tmp_path)]) == EXIT_RUN
    assert capsys.readouterr().err == "dlvirt dataset: apps.ic.dataset.path /nonexistent/imagenet: does not exist\n"


def test_a_dataset_file_in_another_format_is_refused_naming_the_key(tmp_path, capsys):
    settings = '{"dataset": {"path": "LICENSE", "count": 1, "seed": 0}}'
    assert main(["dataset", "--app", "nlp", "--settings", settings, "--output-dir", str(tmp_path / "d")]) == EXIT_RUN
    err = capsys.readouterr().err
    assert err.startswith("dlvirt dataset: apps.nlp.dataset.path ") and "not a SQuAD v1.1 JSON file" in err
    assert not (tmp_path / "d").exists()


def test_the_process_prints_no_traceback():
    proc = subprocess.run([sys.executable, "-m", "dlvirt", *BENCH, "{"], capture_output=True, text=True, check=False)
    assert proc.returncode == EXIT_INPUT and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("dlvirt bench: --spec: not valid JSON") and proc.stderr.count("\n") == 1


def test_the_version_is_one_line(capsys):
    from dlvirt import __version__

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out == f"dlvirt {__version__}\n"


def test_a_spec_read_from_stdin_is_checked_as_one_on_the_command_line():
    """``--spec -``: how an edge host's runner gets its spec (off every command line)."""
    proc = subprocess.run([sys.executable, "-m", "dlvirt", *BENCH, "-"], input='{"tool": "mlperf"}',
                          capture_output=True, text=True, check=False)
    assert proc.returncode == EXIT_INPUT and proc.stderr.startswith("dlvirt bench: --spec: lacks app, scenario,")
