"""Which Docker engine dlvirt talks to, and the dockerd it starts itself when none answers.

Order: ``platforms.CN.engine.host``, else ``DOCKER_HOST``, else the default socket if it answers,
else dlvirt's own dockerd (started through ``dlvirt.system.engines``). dlvirt's dockerd has its own
data-root, exec-root, socket and (empty) config file, and runs with ``--iptables=false
--bridge=none --ip-forward=false``: benchmark containers have no network, and the host's firewall,
bridges and sysctls stay as they were.

One dockerd per data root (``platforms.CN.engine.data_root``): studies with the same data root share
one (through the engines' leases), a study with another data root gets a dockerd of its own, with its
own run directory, socket, exec-root and pid file (``RUN_ROOT/dockerd-<hash of the data root>``; the
default data root's is ``RUN_ROOT/dockerd``), so that no study's images land in another's data root.

The OCI runtimes the container platforms name beside Docker's own runc (``platforms.<P>.runtime``:
runsc, crun, kata-runtime, ...) are registered in that config file, so they are known to dlvirt's
dockerd from its start (dockerd's ``runtimes``; the host's ``/etc/docker/daemon.json`` is never read
or changed). A dockerd that already runs keeps the runtimes it started with: a platform whose runtime
it lacks says so when it provisions.

On a hybrid host whose cgroup2 tree holds a controller, which crun 1.8 refuses ("cgroups in hybrid
mode not supported"), dlvirt's dockerd can run in a mount namespace of its own in which that tree
is unmounted (``hide_cgroup2``): it, containerd and the runtimes see the v1 controllers only, which
hold every limit dlvirt sets (CPU quota, cpuset, memory, pids); mounts of the host still reach it
(slave propagation), its own mounts (the containers' root file systems) stay out of the host's view
and go with it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from dlvirt.core.credentials import redact
from dlvirt.system.cgroups import HYBRID_V2
from dlvirt.system.engines import RUN_ROOT, Daemon, EngineError

DEFAULT_URL = "unix:///var/run/docker.sock"
DAEMON_NAME = "dockerd"
# Every container dlvirt creates carries these; cleanup touches nothing else.
LABEL_RUN = "dlvirt.run-id"
LABEL_HOST = "dlvirt.host"
API_TIMEOUT_S = 120
DEFAULT_DATA_ROOT = "/var/lib/dlvirt/docker"
CONFIG_FILE = "daemon-config.json"


if TYPE_CHECKING:
    import docker


def answers(url: str, timeout_s: float = 3.0) -> bool:
    """Whether an engine answers ``GET /_ping`` at ``url``. A unix socket is asked directly, so
    planning (which asks whether the default socket answers) never imports the Docker SDK."""
    if url.startswith("unix://"):
        return _unix_ping(url.removeprefix("unix://"), timeout_s)
    import docker
    from docker.errors import DockerException
    from requests.exceptions import RequestException

    try:
        with contextlib.closing(docker.DockerClient(base_url=url, timeout=timeout_s)) as client:
            return bool(client.ping())
    except (DockerException, RequestException, OSError):
        return False


def _unix_ping(path: str, timeout_s: float) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(path)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            reply = b""
            while chunk := sock.recv(4096):
                reply += chunk
    except OSError:
        return False
    status, _, rest = reply.partition(b"\r\n")
    return status.split(b" ")[1:2] == [b"200"] and rest.rstrip().endswith(b"OK")


def data_root(settings: dict[str, Any]) -> str:
    """The data root of the dockerd dlvirt starts for ``settings`` (platforms.CN)."""
    return os.path.normpath(settings.get("engine", {}).get("data_root") or DEFAULT_DATA_ROOT)


def daemon_name(settings: dict[str, Any]) -> str:
    """The name (and run directory) of dlvirt's dockerd for the data root ``settings`` name."""
    root = data_root(settings)
    if root == DEFAULT_DATA_ROOT:
        return DAEMON_NAME
    return f"{DAEMON_NAME}-{hashlib.sha256(root.encode()).hexdigest()[:12]}"


def own_url(settings: dict[str, Any]) -> str:
    """The socket of dlvirt's dockerd for the data root ``settings`` name."""
    return f"unix://{RUN_ROOT / daemon_name(settings) / 'docker.sock'}"


def configured_url(settings: dict[str, Any]) -> str | None:
    return settings.get("engine", {}).get("host") or os.environ.get("DOCKER_HOST") or None


def engine_url(settings: dict[str, Any]) -> str:
    """The engine the CN platform uses (see the module doc for the order)."""
    url = configured_url(settings)
    if url is not None:
        return url
    return DEFAULT_URL if answers(DEFAULT_URL) else own_url(settings)


def dockerd_binary() -> str | None:
    return shutil.which("dockerd", path=os.environ.get("PATH", "") + os.pathsep + "/usr/sbin:/sbin")


def why_no_engine(settings: dict[str, Any], section: str) -> str | None:
    """Why no engine can be had here (None: one is configured, answers, or dlvirt can start one).
    ``section``: the config section ``settings`` come from, named in the advice."""
    if configured_url(settings) is not None or answers(DEFAULT_URL):
        return None
    if dockerd_binary() is None:
        return ("no Docker engine answers and dockerd is not installed (Debian: docker.io); "
                f"or set {section}.engine.host / DOCKER_HOST")
    if os.geteuid() != 0:
        return f"no Docker engine answers and starting dockerd needs root; or set {section}.engine.host"
    return None


def daemon_config(runtimes: Mapping[str, Mapping[str, Any]]) -> bytes:
    """dlvirt's dockerd's config file: the OCI runtimes it knows beside runc (name -> dockerd's
    ``{"path": ..., "runtimeArgs": [...]}``), nothing else."""
    return (json.dumps({"runtimes": dict(sorted(runtimes.items()))} if runtimes else {}, indent=1) + "\n").encode()


def starts_own(settings: dict[str, Any]) -> bool:
    """Whether dlvirt talks to a dockerd of its own (no engine configured, none at the default socket)."""
    return configured_url(settings) is None and not answers(DEFAULT_URL)


def own_daemon(settings: dict[str, Any], section: str, runtimes: Mapping[str, Mapping[str, Any]] | None = None,
               hide_cgroup2: bool = False) -> Daemon | None:
    """dlvirt's dockerd, or None when an engine is configured or the default socket answers.
    ``runtimes``: the OCI runtimes to register in its config (``daemon_config``); ``hide_cgroup2``:
    run it where the hybrid host's cgroup2 tree is not mounted (the module doc)."""
    if not starts_own(settings):
        return None
    dockerd_path = dockerd_binary()
    if dockerd_path is None or os.geteuid() != 0:
        raise EngineError(str(why_no_engine(settings, section)))
    root = data_root(settings)
    return dockerd(daemon_name(settings), root, dockerd_path, serves=f"data root {root}",
                   config=daemon_config(runtimes or {}), hide_cgroup2=hide_cgroup2)


def dockerd(name: str, root: str, binary: str, serves: str | None = None, config: bytes = b"{}\n",
            hide_cgroup2: bool = False) -> Daemon:
    """dlvirt's dockerd ``name`` (run directory ``RUN_ROOT/name``, socket ``docker.sock`` there)
    keeping its data in ``root``. Its config file (``config``: never the host's
    /etc/docker/daemon.json) is written by ``engines`` under the run directory's lock when it starts.
    ``hide_cgroup2``: in a mount namespace of its own without ``HYBRID_V2`` (the module doc; the
    process is dockerd itself: unshare and the shell exec it, so its pid is the one started)."""
    run_dir = RUN_ROOT / name
    url = f"unix://{run_dir / 'docker.sock'}"
    command: tuple[str, ...] = (
        binary, "--host", url, "--data-root", root, "--exec-root", str(run_dir / "exec"),
        "--pidfile", str(run_dir / "dockerd.pid"), "--config-file", str(run_dir / CONFIG_FILE),
        "--iptables=false", "--ip-forward=false", "--bridge=none")
    if hide_cgroup2:
        command = ("unshare", "--mount", "--propagation", "slave", "--", "sh", "-c", 'umount "$0" && exec "$@"',
                   str(HYBRID_V2), *command)
    return Daemon(
        name=name,
        command=command,
        files=((CONFIG_FILE, config),),
        serves=serves,
        probe=lambda: answers(url, timeout_s=1.0),
        ready_timeout_s=60.0,
        stop_timeout_s=30.0,
    )


def connect(settings: dict[str, Any], section: str) -> docker.DockerClient:
    import docker
    from docker.errors import DockerException
    from requests.exceptions import RequestException

    url = engine_url(settings)
    client = docker.DockerClient(base_url=url, timeout=API_TIMEOUT_S)
    try:
        client.ping()
    except (DockerException, RequestException, OSError) as exc:
        client.close()
        raise EngineError(f"no Docker engine answers at {redact(url)} ({redact(str(exc))}); the workflow starts "
                          f"dlvirt's own at its start (python -m dlvirt engines up), or set {section}.engine.host"
                          ) from None
    return client


def labels(run_id: str) -> dict[str, str]:
    return {LABEL_RUN: run_id, LABEL_HOST: socket.gethostname()}


def labelled_containers(client: docker.DockerClient) -> Iterator[Any]:
    """dlvirt's containers created from this host."""
    for container in client.containers.list(all=True, filters={"label": LABEL_RUN}):
        if container.labels.get(LABEL_HOST) == socket.gethostname():
            yield container
