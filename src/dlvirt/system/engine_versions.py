"""The versions of the engines that really run the platforms, asked of the engines themselves.

Not of whichever CLI comes first on PATH: a host may have a Docker CLI of one version in
/usr/local/bin and a dockerd of another running the containers. Docker's server version comes
from the daemon through the Docker SDK; libvirtd's from libvirt's API (``getLibVersion``, which
a connection answers with the daemon's version), QEMU's from the emulator binary a domain uses (the
``<emulator>`` libvirt's capabilities name, or the one in the domain's XML), Firecracker's from its
binary. A daemon that is not running is described by its binary, saying so.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from typing import Any

from dlvirt.core.credentials import redact

LIBVIRT_URI = "qemu:///system"
_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?[^\s,)]*")


def binary_version(binary: str | None) -> str | None:
    """The version ``binary --version`` states (its first dotted number), None if it cannot say."""
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin", "/usr/local/bin"])
    path = shutil.which(binary, path=search) if binary else None
    if path is None:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (out.stdout or out.stderr).strip().splitlines()
    match = _VERSION.search(lines[0]) if lines else None
    return match.group(0) if match else None


def docker_server(url: str) -> dict[str, Any] | None:
    """The Docker daemon at ``url``, as it reports itself (``GET /version`` through the SDK); None
    when none answers there."""
    import docker
    from docker.errors import DockerException
    from requests.exceptions import RequestException

    try:
        with contextlib.closing(docker.DockerClient(base_url=url, timeout=10)) as client:
            return docker_version(client.version(), url)
    except (DockerException, RequestException, OSError):
        return None


def docker_version(reply: dict[str, Any], url: str) -> dict[str, Any]:
    """The facts of a Docker ``/version`` reply: the daemon's version, its API and runtime components."""
    components = {c["Name"]: c["Version"] for c in reply.get("Components") or [] if c.get("Name") != "Engine"}
    return {"version": reply.get("Version"), "api_version": reply.get("ApiVersion"), "components": components,
            "source": f"the dockerd answering at {redact(url)} (Docker SDK)"}


def _dotted(number: int) -> str:
    """libvirt's version integers: major * 1,000,000 + minor * 1,000 + release."""
    return f"{number // 1_000_000}.{number // 1_000 % 1_000}.{number % 1_000}"


def libvirt_versions(conn: Any, emulator: str) -> dict[str, Any]:
    """What the libvirt connection ``conn`` says of its daemon and hypervisor, and the version of
    ``emulator``, the QEMU binary a domain runs."""
    return {"libvirtd_version": _dotted(conn.getLibVersion()), "hypervisor_version": _dotted(conn.getVersion()),
            "qemu_version": binary_version(emulator), "qemu_emulator": emulator}


def libvirt_emulator(conn: Any, arch: str) -> str | None:
    """The QEMU binary libvirt's capabilities name for ``arch`` guests (the one its domains run)."""
    import xml.etree.ElementTree as ET

    caps = ET.fromstring(conn.getCapabilities())
    for guest in caps.findall("guest"):
        arch_el = guest.find("arch")
        if arch_el is not None and arch_el.get("name") == arch and arch_el.findtext("emulator"):
            return arch_el.findtext("emulator")
    return None


def host_libvirt(arch: str) -> dict[str, Any] | None:
    """libvirtd at ``LIBVIRT_URI`` and its ``arch`` emulator, when the daemon answers (read-only)."""
    try:
        import libvirt
    except ImportError:
        return None
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)  # errors arrive as exceptions
    try:
        conn = libvirt.openReadOnly(LIBVIRT_URI)
    except libvirt.libvirtError:
        return None
    try:
        emulator = libvirt_emulator(conn, arch) or f"qemu-system-{arch}"
        return {**libvirt_versions(conn, emulator), "source": f"libvirtd answering at {LIBVIRT_URI} (libvirt API)"}
    finally:
        conn.close()


def host_engines(docker_url: str, arch: str) -> dict[str, dict[str, Any]]:
    """Every engine's version on this host, from the running daemon where one answers, else from the
    binary dlvirt would start or run (said in ``source``; ``version`` None: not installed)."""
    engines: dict[str, dict[str, Any]] = {}
    docker = docker_server(docker_url)
    engines["docker"] = docker or {"version": binary_version("dockerd"),
                                   "source": f"the dockerd binary (no daemon answers at {redact(docker_url)})"}
    libvirt = host_libvirt(arch)
    if libvirt is not None:
        engines["libvirtd"] = {"version": libvirt["libvirtd_version"], "source": libvirt["source"]}
        engines["qemu"] = {"version": libvirt["qemu_version"], "hypervisor_version": libvirt["hypervisor_version"],
                           "source": f"{libvirt['qemu_emulator']}, the emulator libvirt's capabilities name"}
    else:
        engines["libvirtd"] = {"version": binary_version("libvirtd"), "source": "the libvirtd binary (not running)"}
        engines["qemu"] = {"version": binary_version(f"qemu-system-{arch}"), "source": f"qemu-system-{arch} binary"}
    engines["firecracker"] = {"version": binary_version("firecracker"), "source": "the firecracker binary on PATH"}
    return engines
