"""A real libvirtd (started when none answers) and its emulator report their versions."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from dlvirt.system import engine_versions
from dlvirt.system.hostinfo import capabilities

# The shape of dockerd 20.10's GET /version reply (trimmed).


@pytest.mark.slow
@pytest.mark.skipif(not capabilities().libvirt or os.geteuid() != 0, reason="needs libvirtd and root")
def test_libvirtd_and_its_emulator_report_their_versions(libvirt_daemons):
    """libvirtd through libvirt's API (conftest.libvirt_daemons: started through dlvirt.system.engines
    when none answers), and QEMU's version from the emulator binary libvirt's capabilities name."""
    facts = engine_versions.host_libvirt("x86_64")
    assert facts is not None and "libvirt API" in facts["source"]
    daemon_binary = subprocess.run(["libvirtd", "--version"], capture_output=True, text=True, check=True).stdout
    assert facts["libvirtd_version"] in daemon_binary
    assert re.fullmatch(r"\d+\.\d+\.\d+", facts["hypervisor_version"])
    assert facts["qemu_emulator"].startswith("/") and facts["qemu_version"] == engine_versions.binary_version(
        facts["qemu_emulator"])
