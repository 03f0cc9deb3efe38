"""Container (CN): the harness inside a Docker container, driven through the Docker SDK.

``CN/N/VNL`` = ``--cpus=N``: a CFS quota of N cores, but the container still sees (and has in its
affinity) every host core, so frameworks that size their pools from the visible cores
oversubscribe. ``CN/N/PIN`` = ``--cpuset-cpus`` on N host cores. ``--memory`` = ``--memory-swap`` =
``study.memory`` (no swap). Always ``--network none``; the inputs (dataset, weights, the job) are
bind-mounted read-only at their host paths and one writable mount receives the results.
``CN/N/*/GPU`` adds ``--gpus`` (NVIDIA Container Toolkit). Every container is labelled with the
job's run id and removed on success, failure, timeout and Ctrl-C; ``dlvirt.run.cleanup`` removes
those of a killed workflow.

Least privilege (the harness needs none of root's powers): it runs as ``nobody`` (65534:65534),
with every capability dropped, ``no-new-privileges``, a pids limit (``platforms.CN.pids_limit``),
a read-only root file system and a 1 GiB tmpfs for ``/tmp`` (its HOME). The harness reads its uid, its
effective capabilities and NoNewPrivs from ``/proc/self/status``; they are recorded in every
repetition and the job fails if they are not as asked. Of what the container wrote, only
directories and regular files are copied out (no links, devices or setuid bits).

The OCI runtime is a setting (``platforms.<P>.runtime``): Docker's runc when absent, or any runtime
the host has (crun, runsc, kata-runtime, ...), which dlvirt's dockerd registers at its start
(``dlvirt.system.docker_engine``). Every container platform (``PlatformKind.image`` is the container
image) is this class or a subclass of it: it runs the same image on the same engine
(``platforms.CN``'s ``image`` and ``engine``), is cleaned up and checked for leaks the same way.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

from dlvirt.core.credentials import redact
from dlvirt.core.kinds import CONTAINER_IMAGE, PlatformKind
from dlvirt.core.records import HarnessJob, HarnessOutput
from dlvirt.core.scenario import Scenario
from dlvirt.core.signals import held, start_thread, wait_thread
from dlvirt.core.untrusted import printable_bytes
from dlvirt.platforms import container_image
from dlvirt.platforms.base import Expected, Platform, PlatformError, copy_regular_files, job_input_paths
from dlvirt.system import cgroups, docker_engine, engine_versions, whose
from dlvirt.system.engines import Daemon, EngineError
from dlvirt.system.hostinfo import Capabilities
from dlvirt.system.topology import Placement, format_cpulist, parse_cpulist

JOB_PATH = "/dlvirt/job.json"
OUT_DIR = "/dlvirt/out"
# Who the harness is in the container, and the powers it must observe it has (observe.privileges).
USER_ID = GROUP_ID = 65534  # nobody:nogroup (in every Debian base)
PRIVILEGES = {"uid": USER_ID, "euid": USER_ID, "cap_eff": "0000000000000000", "no_new_privs": 1}
PIDS_LIMIT = 8192           # processes and threads (a framework's pools count): platforms.CN.pids_limit
# /tmp (the harness's HOME) is RAM: capped, so a harness cannot fill the host's memory through it
TMP_SIZE = "1g"
CONFINEMENT = {"user": f"{USER_ID}:{GROUP_ID}", "cap_drop": ["ALL"], "security_opt": ["no-new-privileges"],
               "read_only": True, "tmpfs": {"/tmp": f"rw,nosuid,nodev,exec,mode=1777,size={TMP_SIZE}"}}


# Docker's own runtime, which every dockerd knows: nothing to register.
RUNC = "runc"


def runtime_binary(name: str) -> str | None:
    """Where the OCI runtime ``name`` is installed (None: it is not)."""
    return shutil.which(name, path=os.environ.get("PATH", "") + os.pathsep + "/usr/sbin:/usr/bin:/sbin:/bin")


def container_runtimes(platforms: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What dlvirt's dockerd registers (``platforms``: the config's platforms section): the runtime of
    every container platform beside runc that is installed, by the name its containers ask for."""
    from dlvirt.platforms import CLASSES  # the registry imports this module

    entries = (cls.registered_runtime(platforms.get(name, {})) for name, cls in CLASSES.items()
               if cls.kind.image == CONTAINER_IMAGE and issubclass(cls, Container))
    return dict(entry for entry in entries if entry is not None)


# OCI runtimes that refuse a hybrid host whose cgroup2 tree holds a controller (crun 1.8: "cgroups in
# hybrid mode not supported, drop all controllers from cgroupv2"); dlvirt's own dockerd, when it
# registers one there, runs where that tree is not mounted (docker_engine: hide_cgroup2)
REFUSE_HYBRID = frozenset({"crun"})


def refuses_hybrid(runtimes: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether this host is hybrid with controllers in its cgroup2 tree and a runtime of ``runtimes``
    (dockerd's entries: name -> {"path": ...}) refuses that."""
    return (any(Path(entry["path"]).name in REFUSE_HYBRID for entry in runtimes.values())
            and bool(cgroups.hybrid_v2_controllers()))


def runtime_problem(runtime: str, settings: dict[str, Any]) -> str | None:
    """Why the OCI runtime ``runtime`` cannot start containers on this host through the engine that
    ``settings`` (platforms.CN) name (None: nothing known)."""
    if runtime in REFUSE_HYBRID and (controllers := cgroups.hybrid_v2_controllers()) \
            and not docker_engine.starts_own(settings):
        return (f"{runtime} refuses this host's hybrid cgroups (v1 controllers beside a cgroup2 tree at "
                f"{cgroups.HYBRID_V2} with controllers: {', '.join(controllers)}), and the Docker engine dlvirt "
                "talks to is not its own, which would run without that tree; runc runs here")
    return None


def nvidia_toolkit() -> bool:
    """Whether the NVIDIA Container Toolkit, which ``docker --gpus`` needs, is installed."""
    path = os.environ.get("PATH", "") + os.pathsep + "/usr/bin:/usr/local/bin"
    return any(shutil.which(b, path=path) for b in ("nvidia-container-runtime-hook", "nvidia-ctk"))


def online_cpus() -> tuple[int, ...]:
    """The host's online CPUs (what a container without a cpuset gets)."""
    return parse_cpulist(Path("/sys/devices/system/cpu/online").read_text())


class Container(Platform):
    kind = PlatformKind(name="CN", title="container on the host's Docker engine", order=1, colour=1,
                        virtualised=True, image=CONTAINER_IMAGE)
    launch_in_runner_cgroup = False  # dockerd makes the container's
    # the OCI runtime when its section names none
    default_runtime: ClassVar[str] = RUNC

    @classmethod
    def runtime(cls, settings: dict[str, Any]) -> str:
        """The OCI runtime the platform's containers run on (``platforms.<P>.runtime``)."""
        return str(settings.get("runtime") or cls.default_runtime)

    @classmethod
    def runtime_name(cls, settings: dict[str, Any]) -> str:
        """The name the engine knows that runtime by (``docker run --runtime``)."""
        return cls.runtime(settings)

    @classmethod
    def runtime_args(cls, settings: dict[str, Any]) -> list[str]:
        """Options the engine passes the runtime on every call (dockerd's ``runtimeArgs``)."""
        return []

    @classmethod
    def exit_hint(cls, status: int) -> str:
        """What a harness's exit ``status`` says of its runtime, in parentheses ('' : nothing)."""
        return ""

    @classmethod
    def registered_runtime(cls, settings: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        """Its runtime's entry in dlvirt's dockerd's config (None: runc, or a runtime not installed)."""
        path = runtime_binary(cls.runtime(settings))
        if cls.runtime(settings) == RUNC or path is None:
            return None
        args = cls.runtime_args(settings)
        return cls.runtime_name(settings), {"path": path, **({"runtimeArgs": args} if args else {})}

    @classmethod
    def leftovers(cls, live: Callable[[], set[str]], exec_root: Path) -> Iterator[str]:
        """Remove what its runtime left under a dockerd's ``exec_root`` beyond the containers the
        engine has (``live``: their ids, asked after the runtime's own listing); say what went."""
        yield from ()

    @classmethod
    def unavailable_reason(cls, scenario: Scenario, caps: Capabilities, config: dict[str, Any]) -> str | None:
        why = super().unavailable_reason(scenario, caps, config)
        if why is not None:
            return why
        settings = config.get("platforms", {}).get(Container.name, {})
        why = docker_engine.why_no_engine(settings, container_image.SETTINGS)
        if why is not None:
            return why
        if not settings.get("image") and shutil.which("debootstrap", path="/usr/sbin:/sbin:/usr/bin") is None:
            return "building the CN image needs debootstrap (Debian: debootstrap); or set platforms.CN.image"
        if scenario.processor == "GPU" and not nvidia_toolkit():
            return "no NVIDIA Container Toolkit (nvidia-container-runtime-hook) for docker --gpus"
        own = config.get("platforms", {}).get(cls.name, {})
        if cls.runtime(own) != RUNC and runtime_binary(cls.runtime(own)) is None:
            return (f"the OCI runtime {cls.runtime(own)!r} (platforms.{cls.name}.runtime) is not installed "
                    "(./setup.sh install installs runsc; Debian: crun, runsc)")
        return runtime_problem(cls.runtime(own), settings)

    @classmethod
    def daemons(cls, platforms: dict[str, Any]) -> list[Daemon]:
        # one engine for every container platform: the image's section names it (platforms.CN.engine)
        runtimes = container_runtimes(platforms)
        daemon = docker_engine.own_daemon(platforms.get(Container.name, {}), container_image.SETTINGS, runtimes,
                                          hide_cgroup2=refuses_hybrid(runtimes))
        return [] if daemon is None else [daemon]

    @property
    def image(self) -> str:
        image = self.config.get("image")
        if not image:
            raise PlatformError("platforms.CN.image: no image (the workflow sets it to the built image's tag)")
        return str(image)

    def provision(self) -> None:
        from docker.errors import ImageNotFound  # the SDK only where a container runs: planning never imports it

        self.container: Any = None
        self.launched_unix: float | None = None
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self.client = docker_engine.connect(self.config, container_image.SETTINGS)
        except EngineError as exc:
            raise PlatformError(str(exc)) from None
        try:
            image = self.client.images.get(self.image)
        except ImageNotFound:
            raise PlatformError(f"image {self.image} is not in the Docker engine at "
                                f"{redact(docker_engine.engine_url(self.config))}: rebuild it "
                                "(snakemake --forcerun cn_image) or set platforms.CN.image") from None
        self.image_id = image.id
        # dlvirt's image carries its tag both as a label and in a file the harness reads inside
        self.image_label: str | None = image.labels.get(container_image.TAG_LABEL)
        self.engine = self.client.info()
        self.runtime_used = self.runtime_name(self.config)
        if self.runtime_used != RUNC and self.runtime_used not in (self.engine.get("Runtimes") or {}):
            raise PlatformError(
                f"the Docker engine at {docker_engine.engine_url(self.config)} has no OCI runtime "
                f"{self.runtime_used!r} (it has {', '.join(sorted(self.engine.get('Runtimes') or {}))}): dlvirt's "
                "dockerd registers the installed runtimes when it starts, and this one started before "
                f"{self.runtime(self.config)} was installed or named; stop the studies that use it (it stops with "
                "them) or give this study a dockerd of its own (platforms.CN.engine.data_root); another engine: "
                "register it there (dockerd --add-runtime)")
        # the daemon's own version (not the CLI's): what runs the containers
        self.server = engine_versions.docker_version(self.client.version(), docker_engine.engine_url(self.config))
        if int(self.engine["NCPU"]) != len(online_cpus()):
            raise PlatformError(f"the Docker engine at {redact(docker_engine.engine_url(self.config))} has "
                                f"{self.engine['NCPU']} CPUs, this host {len(online_cpus())}: "
                                "CN jobs need the engine of the host they run on")
        self.host_cpus = tuple(sorted(os.sched_getaffinity(0)))
        self.placement: Placement | None = None
        if self.scenario.pinned:  # the placement's CPUs and memory nodes: --cpuset-cpus, --cpuset-mems
            self.placement = self.place(self.host_cpus)
            self.cpus = self.placement.cpus
        else:  # no cpuset: the container gets every CPU of the engine's host
            self.cpus = online_cpus()
        # None (a hand-made spec without memory_mib): no limit
        self.memory = None if self.memory_mib is None else self.memory_mib << 20

    def _host_config(self, job_path: Path, out_dir: Path, job: HarnessJob) -> dict[str, Any]:
        from docker.types import DeviceRequest, Mount

        mounts = [Mount(str(p), str(p), type="bind", read_only=True) for p in job_input_paths(job)]
        mounts += [Mount(JOB_PATH, str(job_path), type="bind", read_only=True),
                   Mount(OUT_DIR, str(out_dir), type="bind", read_only=False)]
        cpu: dict[str, Any] = {"nano_cpus": int(self.scenario.cores * 1e9)}
        if self.placement is not None:
            cpu = {"cpuset_cpus": format_cpulist(self.cpus), "cpuset_mems": format_cpulist(self.placement.mems)}
        quota = self.quota_cores
        if self.slowdown is not None and quota is not None:  # deliberately slowed (not a normal study)
            cpu["nano_cpus"] = int(quota * 1e9)
        gpus: dict[str, Any] = {}
        if self.scenario.processor == "GPU":
            wanted = str(self.config.get("gpus", "all"))
            request = DeviceRequest(count=-1, capabilities=[["gpu"]]) if wanted == "all" else \
                DeviceRequest(device_ids=wanted.split(","), capabilities=[["gpu"]])
            gpus = {"device_requests": [request]}
        memory = {} if self.memory is None else {"mem_limit": self.memory, "memswap_limit": self.memory}
        return {**cpu, **gpus, **memory, "mounts": mounts, "network_mode": "none", "privileged": False,
                "cgroupns": "host", **CONFINEMENT, "pids_limit": self.pids_limit}

    @property
    def pids_limit(self) -> int:
        return int(self.config.get("pids_limit") or PIDS_LIMIT)

    def _check_readable(self, job: HarnessJob) -> None:
        """The container's user (not root) must be able to read every input it is given."""
        for path in job_input_paths(job):
            need = stat.S_IROTH | (stat.S_IXOTH if path.is_dir() else 0)
            if path.exists() and path.stat().st_mode & need != need:
                raise PlatformError(f"{path}: the container's user (uid {USER_ID}) cannot read it; the harness runs "
                                    f"unprivileged: make it readable by others (chmod o+r{'x' if need & 1 else ''})")

    def run(self, job: HarnessJob, timeout_s: float) -> HarnessOutput:
        from docker.errors import DockerException
        from requests.exceptions import RequestException

        job_path = self.workdir.resolve() / "job.json"  # bind mounts need absolute paths
        # the container's user writes here; the host copies out only what may be trusted (below)
        out_dir = self.workdir.resolve() / "container-out"
        out_dir.mkdir(mode=0o700)
        os.chown(out_dir, USER_ID, GROUP_ID)
        job.write(job_path)
        self._check_readable(job)
        environment = {"HOME": "/tmp", **({"CUDA_VISIBLE_DEVICES": ""} if self.scenario.processor == "CPU" else {})}
        try:
            with held():  # a container created is a container stored, so teardown removes it
                self.container = self.client.containers.create(
                    self.image, ["python", "-m", "dlvirt.run.launch", JOB_PATH, OUT_DIR],
                    name=self.container_name, labels={**docker_engine.labels(self.run_id),
                                                      "dlvirt.scenario": self.scenario.name},
                    # Relative paths in the job resolve as on the host: same working directory.
                    working_dir=os.getcwd(), environment=environment,
                    **({} if self.runtime_used == RUNC else {"runtime": self.runtime_used}),
                    **self._host_config(job_path, out_dir, job))
            print(f"[dlvirt] container {self.container_name} created", flush=True)
            self.launched_unix = time.time()
            self.container.start()
            self.started()
        except DockerException as exc:
            raise PlatformError(f"could not start the container: {exc}") from None
        logs = start_thread(self._copy_logs, "dlvirt-container-logs")
        # The engine's wait blocks until the container exits: in a thread of its own, while this (main)
        # thread waits in slices, where a stop signal always lands (dlvirt.core.signals).
        waited: dict[str, Any] = {}
        container = self.container

        def wait() -> None:
            try:
                waited["status"] = container.wait(timeout=timeout_s)
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                waited["error"] = exc

        wait_thread(start_thread(wait, "dlvirt-container-wait"))
        if isinstance(waited.get("error"), RequestException):
            with contextlib.suppress(DockerException):
                self.container.kill()
            raise PlatformError(f"harness exceeded the {timeout_s:.0f} s timeout; container killed") from None
        if "error" in waited:
            raise waited["error"]
        status = waited["status"]
        wait_thread(logs, timeout_s=10)
        self.container.reload()
        state = self.container.attrs["State"]
        if status["StatusCode"] != 0:
            why = " (out of memory: study.memory)" if state.get("OOMKilled") else self.exit_hint(status["StatusCode"])
            raise PlatformError(f"harness exited with status {status['StatusCode']} in container "
                                f"{self.container.short_id}{why} (see the log above)")
        out = self.workdir / "out"
        copy_regular_files(out_dir, out)
        shutil.rmtree(out_dir)
        harness = HarnessOutput.read(out / "harness.json")
        self.start_to_harness_s = harness.entered_unix - self.launched_unix
        return harness

    def started(self) -> None:
        """Once the container has started (and while it runs): what a subclass reads of it from the host."""

    def _copy_logs(self) -> None:
        """The container's output into this job's log as it comes."""
        from docker.errors import DockerException
        from requests.exceptions import RequestException

        with contextlib.suppress(DockerException, RequestException):
            for chunk in self.container.logs(stream=True, follow=True):
                sys.stdout.buffer.write(printable_bytes(chunk))  # no ESC sequences into the log
                sys.stdout.flush()

    @property
    def slowdown(self) -> float | None:
        """``slowdown_cpu_quota``: the fraction of the scenario's cores its quota grants when the
        platform is deliberately slowed (None: a normal study)."""
        fraction = self.config.get("slowdown_cpu_quota")
        return None if fraction is None else float(fraction)

    @property
    def quota_cores(self) -> float | None:
        """The CFS quota in cores: the scenario's (VNL), none (PIN), or the slowed fraction of them."""
        if self.slowdown is not None:
            return round(self.scenario.cores * self.slowdown, 2)  # docker's --cpus resolution
        return None if self.scenario.pinned else float(self.scenario.cores)

    def expected(self) -> Expected:
        return Expected(
            affinity=self.cpus, nproc=len(self.cpus), cpu_count=int(self.engine["NCPU"]),
            quota_cores=self.quota_cores,
            container="docker", vm=None,  # the container cannot tell its hypervisor as the host does
            cgroup_id=self.container.id, memory_limit_bytes=self.memory, memory_at_least_bytes=self.memory,
            image=self.image_label, privileges=PRIVILEGES, mems=self.placement.mems if self.placement else None,
            sockets=self.placement.sockets if self.placement else None,
            nodes=self.placement.nodes if self.placement else None)

    def launch_tasks(self) -> whose.Launch:
        """The processes in the container's cgroup (none before it is created); what serves it is the platform's."""
        container = getattr(self, "container", None)
        return whose.Launch(runner_children=False, cgroup=None if container is None else container.id)

    @property
    def container_name(self) -> str:
        return f"dlvirt-{self.run_id}"

    def teardown(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            from docker.errors import NotFound

            # by name: also a container the engine made while its create call was cut off
            with contextlib.suppress(NotFound):
                client.api.remove_container(self.container_name, force=True)
            self.container = None
            client.close()
            self.client = None

    def describe(self) -> dict[str, Any]:
        mechanism = "--cpuset-cpus + --cpuset-mems" if self.scenario.pinned else "--cpus (CFS quota)"
        return {"platform": self.name, "engine": f"docker {self.engine.get('ServerVersion')}",
                "runtime": self.runtime_used, "runtime_path": (self.engine.get("Runtimes") or {})
                .get(self.runtime_used, {}).get("path"),
                "docker_version": self.server["version"], "docker_server": self.server,
                "engine_url": docker_engine.engine_url(self.config), "cgroup_driver": self.engine.get("CgroupDriver"),
                "cpu_mechanism": mechanism, "accel": "none", "cpus": list(self.cpus),
                "placement": self.placement.to_dict() if self.placement else None, "image": self.image,
                "image_id": self.image_id, "memory_mib": self.memory_mib,
                "memory_mechanism": None if self.memory is None else "--memory = --memory-swap", "network": "none",
                "confinement": {**CONFINEMENT, "pids_limit": self.pids_limit},
                "start_to_harness_s": getattr(self, "start_to_harness_s", None),
                **({"slowed": {"cpu_quota_fraction": self.slowdown, "quota_cores": self.quota_cores,
                               "note": "deliberately slowed (slowdown_cpu_quota): not a normal study"}}
                   if self.slowdown is not None else {})}
