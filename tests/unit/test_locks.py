"""The locks setup.sh installs from: every pin hashed, and the peers' lock (./setup.sh peers, beside
the study's stack) holding every package it shares with the study's lock at the study's version."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO

ENVS = REPO / "envs"


def pins(lock: Path) -> dict[str, str]:
    """name (lower case) -> version, each pin checked to carry at least one sha256."""
    found = {}
    for entry in lock.read_text().replace("\\\n", " ").splitlines():
        if entry.strip() and not entry.startswith("#"):
            pin, *options = entry.split()
            assert options and all(o.startswith("--hash=sha256:") for o in options), entry
            name, version = pin.split("==")
            found[name.lower()] = version
    return found


@pytest.mark.parametrize("lock", ["requirements.txt", "requirements-gpu.txt", "requirements-peers.txt"])
def test_every_pin_carries_its_archives_sha256(lock):
    assert pins(ENVS / lock)


def test_the_peers_lock_leaves_the_study_stack_where_it_is():
    study, peers = pins(ENVS / "requirements.txt"), pins(ENVS / "requirements-peers.txt")
    shared = set(study) & set(peers)
    assert "numpy" in shared and {name: peers[name] for name in shared} == {name: study[name] for name in shared}
    assert {"librosa", "opencv-python-headless", "pycocotools"} <= set(peers) and "torch" not in peers
