"""Engine versions come from the engines that run the platforms (the daemon through its API, the
emulator binary a domain runs), not from the CLI first on PATH: recorded answers here; a real
libvirtd in tests/integration/test_engine_versions_libvirtd.py, Docker's real daemon in
tests/integration/test_platform_cn.py."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from dlvirt.analysis.report import _engines
from dlvirt.analysis.tables import _engine_version
from dlvirt.system import engine_versions

# The shape of dockerd 20.10's GET /version reply (trimmed).
DOCKER_REPLY = {"Version": "20.10.24+dfsg1", "ApiVersion": "1.41", "MinAPIVersion": "1.12",
                "Components": [{"Name": "Engine", "Version": "20.10.24+dfsg1"},
                               {"Name": "containerd", "Version": "1.6.20~ds1"},
                               {"Name": "runc", "Version": "1.1.5+ds1"}]}


def test_the_docker_daemons_reply_gives_its_own_version_and_components():
    facts = engine_versions.docker_version(DOCKER_REPLY, "unix:///run/dlvirt/dockerd/docker.sock")
    assert facts["version"] == "20.10.24+dfsg1" and facts["api_version"] == "1.41"
    assert facts["components"] == {"containerd": "1.6.20~ds1", "runc": "1.1.5+ds1"}
    assert "Docker SDK" in facts["source"] and "/run/dlvirt/dockerd/docker.sock" in facts["source"]


def test_libvirt_version_numbers_are_dotted():
    assert engine_versions._dotted(9_000_000) == "9.0.0"
    assert engine_versions._dotted(7_002_022) == "7.2.22"


def test_a_binary_states_its_version():
    qemu = shutil.which("qemu-system-x86_64")
    if qemu is None:
        pytest.skip("qemu-system-x86_64 is not installed")
    first = subprocess.run([qemu, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    assert engine_versions.binary_version(qemu) in first  # "QEMU emulator version 7.2.22 (Debian ...)"
    assert engine_versions.binary_version("no-such-binary-dlvirt") is None


def test_tables_and_report_show_what_the_daemons_said():
    recorded = [{"engine": "docker 20.10.24+dfsg1", "docker_version": "20.10.24+dfsg1",
                 "docker_server": {"version": "20.10.24+dfsg1"}}]
    assert _engine_version(recorded, {}) == "docker_version=20.10.24+dfsg1"
    # a result from before platforms recorded versions: the host's engine of that name
    host = {"engines": {"libvirtd": {"version": "9.0.0"}, "qemu": {"version": "7.2.22"},
                        "docker": {"version": "20.10.24+dfsg1"}, "firecracker": {"version": None}}}
    assert _engine_version([{"engine": "libvirt", "vmm": "qemu"}], host) == "libvirtd 9.0.0 (host); qemu 7.2.22 (host)"
    line = _engines({"docker": {"version": "20.10.24+dfsg1", "source": "the dockerd answering at unix:///x"},
                     "firecracker": {"version": None, "source": "the firecracker binary on PATH"}})
    assert line == "docker 20.10.24+dfsg1 (the dockerd answering at unix:///x)"
