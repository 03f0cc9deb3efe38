"""dlvirt.system.engines with a real (tiny) daemon: started when none answers, shared through leases,
stopped by the last holder only, never stopped when dlvirt did not start it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import free_port, port_open
from dlvirt.system import engines, private

pytestmark = pytest.mark.skipif(not os.access(engines.RUN_ROOT.parent, os.W_OK),
                                reason=f"{engines.RUN_ROOT} is not writable (engines run as root)")


@pytest.fixture
def http_daemon() -> Iterator[engines.Daemon]:
    port = free_port()
    daemon = engines.Daemon(
        name=f"selftest-{os.getpid()}-{port}",
        command=(sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)),
        probe=lambda: port_open(port), ready_timeout_s=20, stop_timeout_s=5)
    yield daemon
    engines.release(daemon.name, None)
    shutil.rmtree(daemon.run_dir, ignore_errors=True)


def sleeper() -> subprocess.Popen:
    """A stand-in workflow: a lease follows its process."""
    return subprocess.Popen(["sleep", "60"])


def test_started_once_shared_and_stopped_by_the_last_holder(http_daemon):
    first, second = sleeper(), sleeper()
    try:
        lease = engines.acquire(http_daemon, first.pid)
        assert lease is not None and lease.started_now and http_daemon.probe()
        for directory in (engines.RUN_ROOT, http_daemon.run_dir):  # private: root's, 0700 (dlvirt.system.private)
            info = os.lstat(directory)
            assert info.st_uid == os.geteuid() and info.st_mode & 0o777 == 0o700
        again = engines.acquire(http_daemon, second.pid)
        assert again is not None and not again.started_now and again.pid == lease.pid
        assert engines.release(http_daemon.name, first.pid) is None  # the other holder still uses it
        assert http_daemon.probe()
        assert "stopped" in (engines.release(http_daemon.name, second.pid) or "")
        assert not http_daemon.probe() and engines.process_start_time(lease.pid) is None
    finally:
        for proc in (first, second):
            proc.kill()
            proc.wait()


def test_a_killed_holders_daemon_is_stopped_by_cleanup(http_daemon):
    holder = sleeper()
    lease = engines.acquire(http_daemon, holder.pid)
    assert lease is not None
    holder.kill()
    holder.wait()
    assert any(http_daemon.name in line for line in engines.release_orphans())
    assert not http_daemon.probe()


def test_a_daemon_dlvirt_did_not_start_is_used_but_never_stopped(http_daemon, tmp_path):
    port = int(http_daemon.command[-1])
    foreign = subprocess.Popen(list(http_daemon.command), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not port_open(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert engines.acquire(http_daemon, os.getpid()) is None
        assert engines.release_orphans() == [] and engines.release_recorded(tmp_path, os.getpid()) == []
        assert foreign.poll() is None and port_open(port)
    finally:
        foreign.kill()
        foreign.wait()


def test_a_daemon_that_never_answers_is_killed_with_its_log_in_the_error(tmp_path):
    port = free_port()
    silent = engines.Daemon(name=f"selftest-{os.getpid()}-silent", command=("sleep", "60"),
                            probe=lambda: port_open(port), ready_timeout_s=1)
    try:
        with pytest.raises(engines.EngineError, match="did not answer within 1 s"):
            engines.acquire(silent, os.getpid())
        assert not (silent.run_dir / engines.DAEMON_STATE).exists()
    finally:
        shutil.rmtree(silent.run_dir, ignore_errors=True)


def test_recorded_leases_are_released_at_the_workflow_end(http_daemon, tmp_path):
    holder = sleeper()
    try:
        lease = engines.acquire(http_daemon, holder.pid)
        assert lease is not None
        engines.record(tmp_path, lease)
        lines = engines.release_recorded(tmp_path, holder.pid)
        assert len(lines) == 1 and "stopped" in lines[0] and not list(tmp_path.glob("*.json"))
        assert not http_daemon.probe()
    finally:
        holder.kill()
        holder.wait()



def test_vmcn_uses_the_engine_the_cn_section_selects():
    """VMCN's guest image preloads the CN image from the host's engine: the one platforms.CN.engine
    names, so dlvirt starts no dockerd of its own for it."""
    from dlvirt.platforms.vm import VirtualMachine
    from dlvirt.platforms.vmcn import ContainerInVM

    platforms = {"CN": {"engine": {"host": "unix:///run/elsewhere/docker.sock"}}}
    assert [d.name for d in ContainerInVM.daemons(platforms)] == [d.name for d in VirtualMachine.daemons(platforms)]


def test_a_daemon_log_over_its_cap_keeps_its_tail_and_starts_again(tmp_path):
    log = tmp_path / "daemon.log"
    with open(log, "ab") as daemon:  # the daemon's end of its log: it appends
        daemon.write(b"a" * 900)
        daemon.flush()
        assert not engines.cap_log(log, cap=1000, keep=100)
        daemon.write(b"b" * 197 + b"END")
        daemon.flush()
        assert engines.cap_log(log, cap=1000, keep=100)
        assert (tmp_path / "daemon.log.1").read_bytes() == b"b" * 97 + b"END"
        assert log.stat().st_size == 0
        daemon.write(b"on")
    assert log.read_bytes() == b"on"  # written at the start again, no hole
    assert os.stat(tmp_path / "daemon.log.1").st_mode & 0o777 == 0o600


def test_a_running_daemon_that_serves_something_else_is_refused_not_used(http_daemon):
    """Two studies asking one daemon name for different things (dockerd: two data roots): the second
    is refused with a line naming both, and the first's daemon runs on."""
    import dataclasses

    holder = sleeper()
    first = dataclasses.replace(http_daemon, serves="data root /srv/a")
    try:
        lease = engines.acquire(first, holder.pid)
        assert lease is not None and lease.started_now
        with pytest.raises(engines.EngineError) as refused:
            engines.acquire(dataclasses.replace(http_daemon, serves="data root /srv/b"), os.getpid())
        message = str(refused.value)
        assert "\n" not in message and "data root /srv/a" in message and "data root /srv/b" in message
        assert first.probe() and engines.acquire(first, os.getpid()) is not None
        engines.release(first.name, os.getpid())
    finally:
        holder.kill()
        holder.wait()


def test_each_data_root_gets_its_own_dockerd_name_socket_and_run_directory():
    from dlvirt.system import docker_engine

    default = {"engine": {"data_root": docker_engine.DEFAULT_DATA_ROOT}}
    other = {"engine": {"data_root": "/srv/other/docker/"}}
    assert docker_engine.daemon_name(default) == docker_engine.daemon_name({}) == "dockerd"
    assert docker_engine.daemon_name(other) != "dockerd" and docker_engine.data_root(other) == "/srv/other/docker"
    assert docker_engine.own_url(default) == f"unix://{engines.RUN_ROOT}/dockerd/docker.sock"
    assert docker_engine.own_url(other) == f"unix://{engines.RUN_ROOT}/{docker_engine.daemon_name(other)}/docker.sock"


def test_cleanup_leaves_directories_that_are_no_daemons_alone():
    """/run/dlvirt also holds the host's benchmark lock and keep_others_away's records: the orphans'
    cleanup takes no lock there (in bench/ it would wait for another study's launch)."""
    other = private.private_dir(engines.RUN_ROOT / f"selftest-notadaemon-{os.getpid()}", engines.RUN_DIR_WHAT)
    try:
        engines.release_orphans()
        assert not (other / "lock").exists()
    finally:
        shutil.rmtree(other, ignore_errors=True)


ACQUIRE_LOOP = """
import os, sys
from dlvirt.system import engines
from conftest import port_open
port, rounds = int(sys.argv[1]), int(sys.argv[2])
daemon = engines.Daemon(name=sys.argv[3], command=(sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                        str(port)), probe=lambda: port_open(port), ready_timeout_s=20, stop_timeout_s=5,
                        files=(("config.json", b"{}\\n"),))
for _ in range(rounds):
    engines.acquire(daemon, os.getpid())
"""


def test_two_holders_acquiring_at_once_never_fail_and_its_files_are_written_under_the_lock(http_daemon):
    """Two `engines up` at once, many times: the daemon's files are written only by the holder that
    starts it, under the run directory's lock (they were rewritten before it by every holder, and
    two at once failed about 1 time in 120)."""
    port, tests = int(http_daemon.command[-1]), Path(__file__).parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")])}
    loops = [subprocess.Popen([sys.executable, "-c", ACQUIRE_LOOP, str(port), "150", http_daemon.name], env=env,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errors = [loop.communicate(timeout=120)[1] for loop in loops]
    assert [loop.returncode for loop in loops] == [0, 0], errors
    assert (http_daemon.run_dir / "config.json").read_bytes() == b"{}\n"
    assert engines.release_orphans() and not http_daemon.probe()  # both holders gone: stopped


def test_dockerd_is_described_without_writing_anything(tmp_path):
    """What `engines up` asks for (its config file included) is written only once it holds the lock."""
    from dlvirt.system import docker_engine

    settings = {"engine": {"host": None, "data_root": str(tmp_path / "docker")}}
    if docker_engine.dockerd_binary() is None or docker_engine.answers(docker_engine.DEFAULT_URL):
        pytest.skip("needs dockerd installed and no engine on the default socket")
    daemon = docker_engine.own_daemon(settings, "platforms.CN")
    assert daemon is not None and daemon.files == (("daemon-config.json", b"{}\n"),)
    assert str(daemon.run_dir / "daemon-config.json") in daemon.command
    assert not os.path.lexists(daemon.run_dir)
