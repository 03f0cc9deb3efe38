"""Rows from different hardware are named per site (the real SLURM cluster:
tests/integration/test_slurm.py)."""

from __future__ import annotations

import pandas as pd

from dlvirt.analysis.aggregate import mixed_hardware


def test_rows_from_different_hardware_are_named_per_site() -> None:
    xeon, epyc = "Xeon 6248, 80 CPUs, 2 socket(s), x86_64", "EPYC 7742, 128 CPUs, 2 socket(s), x86_64"
    frame = pd.DataFrame({"site": ["local", "local", "local", "edge"],
                          "scenario": ["BM/2/PIN/CPU", "BM/4/PIN/CPU", "CN/2/PIN/CPU", "BM/4/VNL/CPU"],
                          "hardware": [xeon, xeon, epyc, "Cortex-A72, 4 CPUs, 1 socket(s), aarch64"]})
    assert mixed_hardware(frame) == [
        f"site local: rows come from 2 kinds of hardware ({epyc}: CN/2/PIN/CPU; {xeon}: BM/2/PIN/CPU, BM/4/PIN/CPU)"]
    assert mixed_hardware(frame[frame.scenario != "CN/2/PIN/CPU"]) == []
