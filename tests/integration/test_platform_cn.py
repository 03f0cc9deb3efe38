"""The CN platform against a real Docker engine: what a container really gets (--cpus vs
--cpuset-cpus) seen from inside, nothing left behind after a kill or a timeout, and an image that is
built once and never rebuilt while its inputs stay the same.

The session starts dlvirt's own dockerd through dlvirt.system.engines when none answers (and stops it at
the end unless another workflow still uses it) and builds the image at most once."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from conftest import (
    BUSY,
    IC_SETTINGS,
    busy_process,
    copy_workflow,
    ic_job_spec,
    interrupt_at,
    smoke_config,
    snakemake,
    write_config,
)
from dlvirt.apps.ic import ImageClassification
from dlvirt.core.owner import new_run_id
from dlvirt.core.records import JobSpec
from dlvirt.platforms import container_image
from dlvirt.platforms.base import PlatformError
from dlvirt.platforms.cn import Container, online_cpus
from dlvirt.run.cleanup import remove_stale_containers
from dlvirt.run.runner import run_job
from dlvirt.system import allocator, docker_engine, engines, topology

pytestmark = pytest.mark.slow

SETTINGS = {"memory_mib": 4096, "gpus": "all", "debian_mirror": None, "image": None,
            "engine": {"host": None, "data_root": "/var/lib/dlvirt/docker"}}


@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    """A Docker engine that answers: the configured one, or dlvirt's own started for this module and
    released at its end, so that a later module's dockerd registers the runtimes that module needs
    (test_platform_scn.py: crun)."""
    if docker_engine.configured_url(SETTINGS) is None and not docker_engine.answers(docker_engine.DEFAULT_URL):
        if shutil.which("dockerd", path="/usr/sbin:/usr/bin:/sbin:/bin") is None:
            pytest.skip("no Docker engine answers and dockerd is not installed (Debian: docker.io)")
        if os.geteuid() != 0:
            pytest.skip("no Docker engine answers and starting dockerd needs root")
    daemons = Container.daemons({"CN": SETTINGS})
    for daemon in daemons:
        engines.acquire(daemon, os.getpid())
    client = docker_engine.connect(SETTINGS, "platforms.CN")
    try:
        yield client
    finally:
        client.close()
        for daemon in daemons:
            engines.release(daemon.name, os.getpid())


@pytest.fixture(scope="session")
def checkout(tmp_path_factory) -> Path:
    """A workflow copy taken once: the image's inputs stay fixed for the session (the tag is their
    hash, and the working tree may change while the tests run)."""
    return copy_workflow(tmp_path_factory.mktemp("cn") / "wf")


@pytest.fixture(scope="module")
def cn_image(engine, checkout, tmp_path_factory) -> str:
    """dlvirt's image for the checkout, built once unless the engine has its tag."""
    if shutil.which("debootstrap", path="/usr/sbin:/usr/bin:/sbin:/bin") is None:
        pytest.skip("building the CN image needs debootstrap")
    info = container_image.ensure(checkout, SETTINGS, tmp_path_factory.mktemp("images") / "cn.json")
    return str(info["image"])


@pytest.fixture(scope="module")
def ic_dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ic-cn")
    out.chmod(0o755)  # as resources/datasets/ic is: the harness in the container is not root
    ImageClassification.prepare_dataset(out, IC_SETTINGS)
    return out


def cn_spec(dataset: Path, image: str, cores: int, pinning: str, **extra) -> JobSpec:
    return ic_job_spec(dataset, cores, pinning, platform_settings={**SETTINGS, "image": image},
                scenario={"platform": "CN", "cores": cores, "pinning": pinning, "processor": "CPU"}, **extra)


def our_containers(client: docker.DockerClient, runner: int | None = None) -> list:
    """Containers of jobs run by ``runner`` (default: this test process; run ids start with its PID)."""
    prefix = f"{runner or os.getpid()}-"
    return [c for c in docker_engine.labelled_containers(client)
            if c.labels[docker_engine.LABEL_RUN].startswith(prefix)]


def test_cpus_one_is_a_quota_of_one_core_with_every_host_core_visible(engine, cn_image, ic_dataset, tmp_path):
    result = run_job(cn_spec(ic_dataset, cn_image, 1, "VNL"), tmp_path / "r.json", tmp_path / "lg")
    observed = result.runs[0].observed
    assert observed["quota_cores"] == pytest.approx(1.0)
    assert observed["affinity"] == list(online_cpus()) and observed["nproc"] == len(online_cpus())
    assert observed["virtualization"]["container"] == "docker" and observed["image"] == cn_image
    # study.memory is the container's limit (docker --memory), read from inside and recorded
    assert observed["memory_limit_bytes"] == 4 << 30 == result.expected["memory_limit_bytes"]
    assert result.platform["memory_mib"] == 4096
    # the engine's version as the daemon reports it (not the CLI's on PATH)
    assert result.platform["docker_version"] == engine.version()["Version"]
    cgroup_id = result.expected["cgroup_id"]
    assert cgroup_id and any(cgroup_id in path for path in observed["cgroup"].values())
    assert result.runs[0].threads["intra_op"] == 1  # sized from the quota, not the visible cores
    assert result.platform["cpu_mechanism"] == "--cpus (CFS quota)"
    assert result.platform["start_to_harness_s"] > 0
    assert json.loads((tmp_path / "r.json").read_text())["verified"] is True
    assert our_containers(engine) == []
    # least privilege, as the harness read it from /proc/self/status inside, recorded and checked
    asked = {"uid": 65534, "euid": 65534, "cap_eff": "0000000000000000", "no_new_privs": 1}
    assert observed["privileges"] == {**asked, "seccomp": 2} and result.expected["privileges"] == asked
    assert result.platform["confinement"]["cap_drop"] == ["ALL"] and result.platform["confinement"]["read_only"]


def test_a_process_on_the_containers_cpu_is_others_and_the_engine_is_the_platform(engine, cn_image, ic_dataset,
                                                                                   tmp_path):
    """A CN/1/PIN launch beside a real process pinned onto its CPU: the host's account (dlvirt.system.whose)
    counts that process as others', by name, and the engine that serves the container (dockerd,
    containerd, the shim) never as others'; the rule marks the repetition (no rerun asked)."""
    cpus = topology.place(topology.read(), 1, topology.DEFAULT_POLICY, tuple(sorted(os.sched_getaffinity(0)))).cpus
    busy = busy_process(cpus)
    try:
        result = run_job(cn_spec(ic_dataset, cn_image, 1, "PIN", interference={"disturbed_above": 0.05, "reruns": 0}),
                         tmp_path / "r.json", tmp_path / "lg")
    finally:
        busy.kill()
        busy.wait()
    assert result.runs[0].observed["affinity"] == list(cpus)
    for rep in result.runs:
        seen = rep.telemetry
        assert seen["accounted_from"] == "host" and seen["launch_on_cpus_s"] > 0
        assert seen["others_on_cpus_share"] > 0.05 and BUSY in seen["others_seen"] and seen["disturbed"] is True
        assert not {"dockerd", "containerd", "containerd-shim", "runc"} & set(seen["others_seen"])
        assert seen["platform_on_cpus_s"] >= 0
    assert result.interference["attempts"][0]["disturbed"] == len(result.runs) and result.interference["disturbed"]


def test_a_deliberately_slowed_container_gets_a_smaller_quota_verified_and_marked(engine, cn_image, ic_dataset,
                                                                                     tmp_path):
    job = cn_spec(ic_dataset, cn_image, 1, "VNL")
    job = dataclasses.replace(job, platform_settings={**job.platform_settings, "slowdown_cpu_quota": 0.5})
    result = run_job(job, tmp_path / "r.json", tmp_path / "lg")
    assert result.runs[0].observed["quota_cores"] == pytest.approx(0.5) == result.expected["quota_cores"]
    assert result.platform["slowed"]["cpu_quota_fraction"] == 0.5 and "not a normal study" in \
        result.platform["slowed"]["note"]
    assert result.runs[0].threads["intra_op"] == 1  # half a core still grants one thread
    assert result.runs[0].threads["allocator"] == {"mmap_threshold": allocator.MMAP_THRESHOLD,
                                                   "trim_threshold": allocator.TRIM_THRESHOLD}  # the image's glibc
    assert our_containers(engine) == []


def test_an_input_the_unprivileged_harness_cannot_read_is_refused(engine, cn_image, ic_dataset, tmp_path):
    private = tmp_path / "private"
    shutil.copytree(ic_dataset, private)
    private.chmod(0o700)
    with pytest.raises(PlatformError, match=rf"{private}: the container's user \(uid 65534\) cannot read it"):
        run_job(cn_spec(private, cn_image, 1, "VNL"), tmp_path / "r.json", tmp_path / "lg")
    assert our_containers(engine) == [] and not (tmp_path / "r.json").exists()


def test_a_pulled_image_must_be_named_by_digest(engine, tmp_path):
    with pytest.raises(engines.EngineError, match="name it by digest"):
        container_image.ensure(Path("."), {**SETTINGS, "image": "registry.example/dlvirt:latest"}, tmp_path / "m.json")
    assert not (tmp_path / "m.json").exists()


def test_host_facts_take_dockers_version_from_the_daemon(engine):
    from dlvirt.system import engine_versions

    facts = engine_versions.host_engines(docker_engine.engine_url(SETTINGS), os.uname().machine)["docker"]
    assert facts["version"] == engine.version()["Version"] and "Docker SDK" in facts["source"]


def test_framework_default_in_a_quota_uses_every_host_core_and_is_throttled(engine, cn_image, ic_dataset, tmp_path):
    """CN/1/VNL, framework-default: the frameworks size their pools from the host cores they see,
    so the container's threads outrun the quota and the kernel throttles them (read inside)."""
    if len(online_cpus()) < 2:
        pytest.skip("needs 2 host cores to oversubscribe a 1-core quota")
    result = run_job(cn_spec(ic_dataset, cn_image, 1, "VNL", threads="framework-default", repetitions=3),
                     tmp_path / "r.json", tmp_path / "lg")
    for run in result.runs:
        assert run.threads["intra_op"] is None
        assert run.threads["framework"]["intra_op"] == len(online_cpus())
        assert run.telemetry["nr_periods"] > 0
    throttled = sum(run.telemetry["nr_throttled"] for run in result.runs)
    if throttled == 0:
        # the quota throttles only a container that wants more than it; on a loaded host the
        # others' processes may keep it below that
        cpu = sum(sum(run.phases[k] for k in ("pre_cpu_s", "infer_cpu_s", "post_cpu_s")) for run in result.runs)
        used = cpu / sum(run.e2e_s for run in result.runs)
        if used < 0.95:
            pytest.skip(f"host too busy: the container used {used:.2f} cores on average, under its 1-core quota")
    assert throttled > 0
    assert result.code and result.runner_code and result.code["source"] == result.runner_code["source"]


def test_cpuset_run_sees_exactly_its_cores(engine, cn_image, ic_dataset, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative output paths, as the workflow passes them
    result = run_job(cn_spec(ic_dataset, cn_image, 1, "PIN"), Path("r.json"), Path("lg"))
    observed = result.runs[0].observed
    mine = sorted(os.sched_getaffinity(0))[:1]
    assert observed["affinity"] == mine and observed["nproc"] == 1
    assert observed["quota_cores"] is None
    assert result.platform["cpu_mechanism"] == "--cpuset-cpus + --cpuset-mems"
    assert result.platform["network"] == "none"
    # memory bound to the node of its core (--cpuset-mems), seen from inside as Mems_allowed_list
    placed = result.platform["placement"]
    assert observed["placement"]["mems"] == placed["mems"] == list(result.expected["mems"]) and placed["nodes"] == 1
    assert (tmp_path / "lg" / "rep-0000" / "mlperf_log_summary.txt").exists()
    assert our_containers(engine) == []


def test_container_killed_mid_run_leaves_no_container_and_no_result(engine, cn_image, ic_dataset, tmp_path):
    killed: list[str] = []

    def kill_when_running() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for container in our_containers(engine):
                if b"[harness]" in container.logs():  # mid-run: a repetition has finished
                    container.kill()
                    killed.append(container.name)
            time.sleep(0.2)

    killer = threading.Thread(target=kill_when_running, daemon=True)
    killer.start()
    long_job = cn_spec(ic_dataset, cn_image, 1, "PIN", repetitions=200)
    with pytest.raises(PlatformError, match="status 137"):
        run_job(long_job, tmp_path / "r.json", tmp_path / "lg")
    killer.join(timeout=10)
    assert killed, "the container was never seen running"
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "lg").exists()
    assert not list(tmp_path.glob(".work-*"))
    assert our_containers(engine) == []


# Points of a CN job's life, each marked by a line the job itself prints when it gets there.
INTERRUPT_POINTS = {
    "before the container exists": r"\[dlvirt\] CN/\S+ job \S+: provisioning",
    "while the container starts": r"\[dlvirt\] container dlvirt-\S+ created",
    "during model load": r"\[harness\] .*: loading the model",
    "during a repetition": r"\[harness\] .* (warm-up|rep) 0:",
}


@pytest.mark.parametrize(("point", "signals"), [
    *((point, (signal.SIGINT,)) for point in INTERRUPT_POINTS),
    # Ctrl-C in Snakemake's terminal: SIGINT from the terminal and SIGTERM forwarded by dlvirt.run.interrupt
    # (this one hung about every other time until the main thread waited in slices: dlvirt.core.signals)
    *((point, (signal.SIGINT, signal.SIGTERM)) for point in INTERRUPT_POINTS),
])
def test_ctrl_c_removes_the_container_and_counts_nothing(engine, cn_image, ic_dataset, tmp_path, point, signals):
    """The job is started with SIGINT ignored, as a non-interactive shell starts anything in the
    background (the suite once lost a Ctrl-C so): the runner must stop on it all the same, at
    every point of its life, quickly, leaving no container, no result and no work directory."""
    job = cn_spec(ic_dataset, cn_image, 1, "PIN", repetitions=200)
    bench = interrupt_at([sys.executable, "-m", "dlvirt", "bench", "--spec", json.dumps(job.to_dict()),
                          "--output", str(tmp_path / "r.json"), "--loadgen-dir", str(tmp_path / "lg")],
                         point, INTERRUPT_POINTS[point], signals, reach_s=300, stop_s=60,
                         env={**os.environ, "PYTHONFAULTHANDLER": "1"}, what="the CN job")
    returncode, took, lines = bench.returncode, bench.took_s, bench.lines
    print(f"CN job stopped after {took:.1f} s by {'+'.join(signal.Signals(n).name for n in signals)} {point}")
    assert returncode != 0
    assert took < 30, f"the job took {took:.1f} s to stop after {point}"
    assert not (tmp_path / "r.json").exists() and not list(tmp_path.glob(".work-*"))
    assert our_containers(engine, bench.pid) == [], "".join(lines[-20:])


def test_timeout_removes_the_container(engine, cn_image, ic_dataset, tmp_path):
    with pytest.raises(PlatformError, match="timeout"):
        run_job(cn_spec(ic_dataset, cn_image, 1, "PIN", timeout_s=2), tmp_path / "r.json", tmp_path / "lg")
    assert not (tmp_path / "r.json").exists()
    assert our_containers(engine) == []


def test_failed_provisioning_names_the_missing_image(engine, ic_dataset, tmp_path):
    with pytest.raises(PlatformError, match="dlvirt-cn:missing is not in the Docker engine"):
        run_job(cn_spec(ic_dataset, "dlvirt-cn:missing", 1, "PIN"), tmp_path / "r.json", tmp_path / "lg")
    assert our_containers(engine) == []


def test_stale_containers_of_dead_runs_are_removed_live_ones_kept(engine, cn_image):
    dead = f"{2 ** 22 + 1}-1234-{os.urandom(4).hex()}"  # above the default pid_max: no such process
    made = [engine.containers.create(cn_image, ["sleep", "60"], name=f"dlvirt-{run_id}",
                                     network_mode="none", labels=docker_engine.labels(run_id))
            for run_id in (dead, new_run_id())]
    try:
        removed = list(remove_stale_containers(SETTINGS))
        assert any(made[0].name in line for line in removed)
        assert not any(made[1].name in line for line in removed)
        names = {c.name for c in docker_engine.labelled_containers(engine)}
        assert made[0].name not in names and made[1].name in names
    finally:
        for container in made:
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)


def _tiny_images(engine, repo: str, count: int) -> list[str]:
    """``count`` tiny imported images ``<repo>:v<i>``, oldest first."""
    import io
    import tarfile

    tags = []
    for i in range(count):
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode="w") as tar:
            tar.addfile(tarfile.TarInfo(f"file{i}"), io.BytesIO(b""))
        engine.api.import_image_from_data(data.getvalue(), repository=repo, tag=f"v{i}")
        tags.append(f"{repo}:v{i}")
        time.sleep(1.1)  # Created has second resolution on some engines
    return tags


def test_a_prune_removes_only_this_studys_old_images_never_another_studys(engine, tmp_path):
    """container_image.prune on a repository of this test's own (never the real dlvirt-cn, which
    other sessions on this engine may use): two studies (two checkouts) claim tiny imported images;
    the first prunes to its newest 2. Its oldest is in a container's use and stays; one the second
    study claims too stays, with the second's claim; one only the first claimed is removed; images
    only the second claimed are not touched."""
    repo = f"dlvirt-prunetest-{os.getpid()}"
    tags = _tiny_images(engine, repo, 6)
    mine, theirs = (container_image.study_repo(tmp_path / name, repo) for name in ("first", "second"))
    assert mine != theirs and mine == container_image.study_repo(tmp_path / "x" / ".." / "first", repo)
    for tag in tags[:5]:
        container_image.claim(engine.images.get(tag), tag, mine)
    for tag in (tags[1], tags[5]):
        container_image.claim(engine.images.get(tag), tag, theirs)
    user = engine.containers.create(tags[0], ["none"], network_mode="none")
    try:
        said = container_image.prune(engine, 2, mine, repo)

        def tagged(name: str) -> set[str]:
            return {t for image in engine.images.list(name=name) for t in image.tags if t.startswith(f"{name}:")}

        assert tagged(repo) == {tags[i] for i in (0, 1, 3, 4, 5)}
        assert tagged(mine) == {f"{mine}:v{i}" for i in (0, 3, 4)}
        assert tagged(theirs) == {f"{theirs}:v{i}" for i in (1, 5)}
        assert f"removed old CN image {tags[2]} (platforms.CN.keep_images: 2)" in said
        assert any(line.startswith(f"released old CN image {tags[1]}") and "1 other study" in line for line in said)
        assert any(line.startswith(f"kept old CN image {tags[0]}") for line in said)
    finally:
        user.remove(force=True)
        for image in engine.images.list(name=repo):
            engine.images.remove(image.id, force=True)


def test_the_image_step_claims_the_image_for_its_study(engine, tmp_path):
    """``dlvirt image`` (container_image.ensure) claims the image it finds for the checkout it runs
    in. A checkout of this test's own (its code changed by a comment, so its tag is no real image's)
    with a tiny image under that tag: found present, not built, and claimed."""
    checkout = copy_workflow(tmp_path / "wf")
    with open(checkout / "src" / "dlvirt" / "__init__.py", "a") as handle:
        handle.write(f"# claims test {os.getpid()}\n")
    tag = container_image.content_tag(checkout)
    (tiny,) = _tiny_images(engine, f"dlvirt-claimtest-{os.getpid()}", 1)
    engine.images.get(tiny).tag(*tag.split(":"))
    try:
        info = container_image.ensure(checkout, SETTINGS, tmp_path / "cn.json")
        assert info["source"] == "present" and not info["built"]
        claims = container_image.study_repo(checkout)
        assert f"{claims}:{tag.split(':')[1]}" in engine.images.get(tag).tags
    finally:
        engine.images.remove(engine.images.get(tiny).id, force=True)


def test_a_study_with_another_data_root_gets_a_dockerd_of_its_own(engine, tmp_path):
    """The suite's engine serves the default data root; a study naming another one gets its own
    dockerd (own socket, pid, data root), which stops with its last lease; the suite's runs on."""
    if docker_engine.engine_url(SETTINGS) != docker_engine.own_url(SETTINGS):
        pytest.skip("the suite uses an engine dlvirt did not start")
    other = {**SETTINGS, "engine": {"host": None, "data_root": str(tmp_path / "docker")}}
    (daemon,) = Container.daemons({"CN": other})
    assert docker_engine.engine_url(other) != docker_engine.engine_url(SETTINGS)
    lease = engines.acquire(daemon, os.getpid())
    try:
        assert lease is not None and lease.started_now
        client = docker_engine.connect(other, "platforms.CN")
        try:
            assert client.info()["DockerRootDir"] == str(tmp_path / "docker")
        finally:
            client.close()
        assert engine.info()["DockerRootDir"] == docker_engine.data_root(SETTINGS)
    finally:
        engines.release(daemon.name, os.getpid())
    assert not docker_engine.answers(docker_engine.engine_url(other)) and engine.ping()
    shutil.rmtree(daemon.run_dir, ignore_errors=True)


def test_two_engines_up_at_once_never_fail(engine, tmp_path):
    """Two workflows' `engines up` at once, each round starting dlvirt's dockerd for a data root of
    their own and each `engines down` stopping it: no failure in any round (the config file was
    rewritten outside the engine lock, and two at once failed about 1 time in 120)."""
    if docker_engine.engine_url(SETTINGS) != docker_engine.own_url(SETTINGS):
        pytest.skip("the suite uses an engine dlvirt did not start")
    other = {"CN": {**SETTINGS, "engine": {"host": None, "data_root": str(tmp_path / "docker")}}}
    (daemon,) = Container.daemons(other)
    holders = [subprocess.Popen(["sleep", "600"]) for _ in range(2)]
    try:
        for _ in range(4):
            ups = [subprocess.Popen([sys.executable, "-m", "dlvirt", "engines", "up", "--holder", str(holder.pid),
                                     "--state-dir", str(tmp_path / f"state-{holder.pid}"), "--platforms", "CN",
                                     "--settings", json.dumps(other)], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True) for holder in holders]
            outputs = [up.communicate(timeout=180)[0] for up in ups]
            assert [up.returncode for up in ups] == [0, 0], outputs
            assert sorted(" started " in out for out in outputs) == [False, True], outputs  # one started it
            for holder in holders:
                subprocess.run([sys.executable, "-m", "dlvirt", "engines", "down", "--holder", str(holder.pid),
                                "--state-dir", str(tmp_path / f"state-{holder.pid}")], check=True, timeout=120)
            assert not daemon.probe() and engine.ping()
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()
        engines.release(daemon.name, None)
        shutil.rmtree(daemon.run_dir, ignore_errors=True)


def test_second_build_with_nothing_changed_rebuilds_nothing(engine, cn_image, checkout, tmp_path):
    info = container_image.ensure(checkout, SETTINGS, tmp_path / "cn.json")
    assert info["image"] == cn_image and info["source"] == "present" and not info["built"]
    assert json.loads((tmp_path / "cn.json").read_text())["id"] == engine.images.get(cn_image).id


def test_workflow_rebuilds_the_image_only_when_an_input_changes(engine, cn_image, checkout, tmp_path):
    """The rule's marker is made from the existing image (no build); afterwards nothing is stale
    until the package's code changes, which changes the tag."""
    workdir = Path(shutil.copytree(checkout, tmp_path / "wf", ignore=shutil.ignore_patterns("resources")))
    config = write_config(workdir / "smoke.yaml", smoke_config())
    snakemake(workdir, "resources/images/cn.json", "--configfile", str(config))
    marker = json.loads((workdir / "resources/images/cn.json").read_text())
    assert marker["image"] == cn_image and marker["source"] == "present"
    again = snakemake(workdir, "resources/images/cn.json", "--configfile", str(config), "-n")
    assert "Nothing to be done" in again.stdout + again.stderr
    with open(workdir / "src/dlvirt/__init__.py", "a") as handle:
        handle.write("# changed\n")
    changed = snakemake(workdir, "resources/images/cn.json", "--configfile", str(config), "-n")
    assert "cn_image" in changed.stdout
    assert not list((workdir / "resources").glob("engines/*.json"))  # the workflow released its lease


def test_pytorch_ic_backend_runs_in_the_container(engine, cn_image, ic_dataset, tmp_path):
    job = cn_spec(ic_dataset, cn_image, 1, "VNL", app_settings={**IC_SETTINGS, "framework": "pytorch"})
    result = run_job(job, tmp_path / "r.json", tmp_path / "lg")
    assert result.verified and result.model["framework"] == "pytorch" and "torch" in result.versions
    assert result.runs[0].observed["image"] == cn_image and result.runs[0].samples == 4
    # the image records the host's stack it was built from
    assert result.stack is not None and result.stack["stack"] == "cpu" and result.stack["chosen_by"] == "dlvirt image"
    assert our_containers(engine) == []
