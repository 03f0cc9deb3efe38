"""What a platform delivered against what was asked for: every mismatch is reported (the real BM
runs checked from inside: tests/integration/test_platform_bm.py)."""

from __future__ import annotations

from dlvirt.platforms.base import Expected, verify

OBSERVED = {"affinity": [0, 1], "nproc": 2, "cpu_count": 2, "quota_cores": 1.0,
            "virtualization": {"container": "none", "vm": "none"}}


def test_verify_reports_every_mismatch():
    assert verify(Expected(affinity=(0, 1), nproc=2, quota_cores=1.0, container="none", vm="none"), OBSERVED) == []
    problems = verify(Expected(affinity=(0,), nproc=1, quota_cores=None, container="docker", vm="kvm"), OBSERVED)
    assert len(problems) == 5
    assert any("affinity [0, 1] != requested [0]" in p for p in problems)
    assert any("CFS quota 1.0 cores != requested None" in p for p in problems)
