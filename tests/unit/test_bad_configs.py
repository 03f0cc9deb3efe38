"""The corpus of bad configs (tests/bad_configs/, one YAML each, its first line ``# expect: <text>``):
each is refused as the workflow refuses it, before any job, with one line naming the file (and
line) or the key. ``dlvirt check-config`` runs the Snakefile's own checks (config/config.yaml
first, then the case, as Snakemake merges them); test_config.py runs some through Snakemake."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO
from dlvirt.cli import EXIT_INPUT, main

CASES = sorted((REPO / "tests" / "bad_configs").glob("*.yaml"))


def expected(case: Path) -> str:
    first = case.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{case.name}: the first line must be '# expect: <text>'"
    return first.removeprefix("# expect: ")


def test_the_corpus_covers_every_class():
    assert len(CASES) >= 40


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_bad_config_is_refused_naming_the_key_or_file(case, monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(REPO)  # the cases name paths relative to the repository (tests, LICENSE)
    code = main(["check-config", "config/config.yaml", str(case.relative_to(REPO)),
                 "--checksum-cache", str(tmp_path / "checksums.json")])
    err = capsys.readouterr().err
    assert code == EXIT_INPUT, err
    assert err.startswith("dlvirt check-config: ") and err.count("\n") == 1, err
    assert expected(case) in err
    # a refused config writes nothing (weights-sha-mismatch: not even the checksum it computed)
    assert not (tmp_path / "checksums.json").exists()


def test_the_default_config_passes(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(REPO)
    assert main(["check-config", "config/config.yaml", "--checksum-cache", str(tmp_path / "c.json")]) == 0
    assert "valid" in capsys.readouterr().out


def test_weights_checksum_is_cached_while_the_file_is_the_same(tmp_path):
    import hashlib
    import os

    from dlvirt.core.errors import ConfigError
    from dlvirt.plan.configcheck import _check_file_with_checksum

    weights, cache = tmp_path / "w.bin", dict[str, Any]()
    weights.write_bytes(b"weights")
    good = hashlib.sha256(b"weights").hexdigest()
    _check_file_with_checksum({"path": str(weights), "sha256": good}, "apps.ic.weights", cache)
    assert cache[str(weights)]["sha256"] == good
    # the same file again: the cached checksum is believed (the file is not read again) ...
    cache[str(weights)]["sha256"] = "0" * 64
    with pytest.raises(ConfigError, match="does not match apps.ic.weights.sha256"):
        _check_file_with_checksum({"path": str(weights), "sha256": good}, "apps.ic.weights", cache)
    cache[str(weights)]["sha256"] = good
    # ... a rewrite of the same size with its old mtime put back still changes its ctime: read again
    stat = weights.stat()
    time.sleep(0.05)  # ctime comes from the kernel's coarse clock: a rewrite within its tick keeps it
    weights.write_bytes(b"WEIGHTS")
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(ConfigError, match="does not match apps.ic.weights.sha256"):
        _check_file_with_checksum({"path": str(weights), "sha256": good}, "apps.ic.weights", cache)
