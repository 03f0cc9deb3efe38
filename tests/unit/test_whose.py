"""Whose time a launch's host CPUs gave (``dlvirt.system.whose``): the launch's, its platform's,
others'; the arithmetic on made-up readings, the classification on this host's real processes."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlvirt.system import whose
from dlvirt.system.whose import Launch, Process, Reading, Thread

TICK = os.sysconf("SC_CLK_TCK")


def reading(at: float, busy: int, processes: dict, threads: dict, steal: int = 0) -> Reading:
    """``processes``: pid -> (comm, ticks, children, whose, on_cpus[, ppid]); ``threads``: (pid, tid)
    -> (ticks, on_cpus, whose); every start time 1."""
    return Reading(unix_s=at, busy=busy, steal=steal,
                   processes={(pid, 1): Process(comm=p[0], ppid=p[5] if len(p) > 5 else 1, ticks=p[1], children=p[2],
                                                whose=p[3], on_cpus=p[4])
                              for pid, p in processes.items()},
                   threads={(pid, tid, 1): Thread(process=(pid, 1), ticks=t, on_cpus=on, whose=w)
                            for (pid, tid), (t, on, w) in threads.items()})


def test_others_are_the_cpus_busy_time_less_the_launchs_and_the_platforms():
    before = reading(0.0, 1000, {10: ("python", 300, 0, "launch", True), 20: ("dockerd", 50, 0, "platform", True),
                                 30: ("editor", 10, 0, "other", True), 40: ("far", 10, 0, "other", False)},
                     {(10, 10): (300, True, "launch"), (20, 20): (50, True, "platform"),
                      (30, 30): (10, True, "other"), (40, 40): (10, False, "other")})
    # 2 CPUs for 1 s; busy grew by TICK: the launch 0.6, dockerd 0.1 (one thread on the CPUs, one off),
    # the editor 0.3; "far" ran elsewhere and is not named
    after = reading(1.0, 1000 + TICK,
                    {10: ("python", 300 + int(0.6 * TICK), 0, "launch", True),
                     20: ("dockerd", 50 + int(0.2 * TICK), 0, "platform", True),
                     30: ("editor", 10 + int(0.3 * TICK), 0, "other", True),
                     40: ("far", 10 + TICK, 0, "other", False)},
                    {(10, 10): (300 + int(0.6 * TICK), True, "launch"),
                     (20, 20): (50 + int(0.1 * TICK), True, "platform"),
                     (20, 21): (int(0.1 * TICK), False, "platform"), (30, 30): (10 + int(0.3 * TICK), True, "other"),
                     (40, 40): (10 + TICK, False, "other")}, steal=TICK // 10)
    part = whose.interval(before, after)
    found = whose.window([part], 0.0, 1.0, cpus=2)
    assert found is not None and found["accounted_from"] == "host"
    assert found["launch_on_cpus_s"] == pytest.approx(0.6, abs=1 / TICK)
    assert found["platform_on_cpus_s"] == pytest.approx(0.1, abs=1 / TICK)
    assert found["others_on_cpus_s"] == pytest.approx(0.3, abs=2 / TICK)
    assert found["others_on_cpus_share"] == pytest.approx(0.15, abs=1 / TICK)
    assert found["steal_on_cpus_s"] == pytest.approx(0.1, abs=1 / TICK)
    assert list(found["others_seen"]) == ["editor"]
    # half the interval: half of each; outside the readings: not accounted
    half = whose.window([part], 0.25, 0.75, cpus=2)
    assert half is not None and half["launch_on_cpus_s"] == pytest.approx(0.3, abs=1 / TICK)
    assert whose.window([part], -1.0, 0.5, cpus=2) is None and whose.window([], 0.0, 1.0, cpus=2) is None
    # a 1-core vanilla launch floating on both CPUs: the second core's second, less the platform's
    # 0.1 s, is others' to use freely; the editor's 0.3 s fit in it, so they took none of the launch's
    vanilla = whose.window([part], 0.0, 1.0, cpus=2, cores=1)
    assert vanilla is not None and vanilla["others_on_cpus_s"] == found["others_on_cpus_s"]
    assert (vanilla["others_taken_s"], vanilla["others_on_cpus_share"], vanilla["launch_cores"]) == (0.0, 0.0, 1)
    # others busier by 1 s (1.3 s on the two CPUs): 0.4 s beyond the free 0.9 s, a share of 0.4 of the core
    busier = whose.interval(before, dataclasses.replace(after, busy=after.busy + TICK))
    crowded = whose.window([busier], 0.0, 1.0, cpus=2, cores=1)
    assert crowded is not None and crowded["others_on_cpus_share"] == pytest.approx(0.4, abs=2 / TICK)


def test_ended_threads_and_reaped_children_stay_their_processs():
    """A thread that ended, or a child reaped, between two readings left its time in its process's
    total (its parent's child times): the launch's stays whole, counted once, not taken for others'."""
    before = reading(0.0, 0, {10: ("python", 100, 0, "launch", True), 11: ("tool", 70, 0, "launch", True, 10)},
                     {(10, 10): (60, True, "launch"), (10, 12): (40, True, "launch"), (11, 11): (70, True, "launch")})
    # thread 12 ran 30 more and ended; child 11 ran 20 more and was reaped (its 90 into 10's child
    # times, 70 of them seen before); thread 10 ran 50 more
    after = reading(1.0, 100, {10: ("python", 100 + 50 + 30, 90, "launch", True)}, {(10, 10): (110, True, "launch")})
    found = whose.window([whose.interval(before, after)], 0.0, 1.0, cpus=1)
    assert found is not None and found["launch_on_cpus_s"] == pytest.approx(100 / TICK)
    assert found["others_on_cpus_s"] == 0


def test_whose_a_process_and_a_thread_is():
    runner = {100, 50}
    plain = Launch()
    assert whose.classify(7, "kworker/0:1", True, runner, False, plain) == "platform"
    assert whose.classify(100, "python", False, runner, False, plain) == "platform"  # the runner
    for engine in ("dockerd", "containerd", "containerd-shim", "runc", "libvirtd", "virtiofsd", "virtlogd"):
        assert whose.classify(300, engine, False, runner, False, plain) == "platform"
    assert whose.classify(200, "python", False, runner, True, plain) == "launch"  # BM: the runner's child
    assert whose.classify(200, "mkfs.ext4", False, runner, True, Launch(runner_children=False)) == "platform"
    assert whose.classify(400, "editor", False, runner, False, plain) == "other"
    # below an engine: its runtime's helper (gVisor's gofer, named exe) in no container is the platform's
    assert whose.classify(os.getpid(), "exe", False, runner, False, plain, below_engine=True) == (
        "other" if whose.CONTAINER_CGROUP.search(Path("/proc/self/cgroup").read_text()) else "platform")
    # a guest: its VMM's vCPU threads are the launch's, its other threads the platform's; another VMM is others'
    guest = Launch(runner_children=False, vmm=500)
    assert whose.classify(500, "qemu-system-x86", False, runner, False, guest) == "platform"
    assert whose.thread_whose("platform", 500, "CPU 0/TCG", guest) == "launch"
    assert whose.thread_whose("platform", 500, "CPU 1/KVM", guest) == "launch"
    assert whose.thread_whose("platform", 500, "fc_vcpu 0", guest) == "launch"
    assert whose.thread_whose("platform", 500, "IO mon_iothread", guest) == "platform"
    assert whose.classify(600, "qemu-system-x86", False, runner, False, guest) == "other"
    assert whose.thread_whose("other", 600, "CPU 0/TCG", guest) == "other"


def test_on_this_host_the_runners_child_is_the_launch_its_ancestors_and_kernel_threads_the_platform():
    cpus = frozenset(os.sched_getaffinity(0))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        found = whose.read(cpus, Launch(), whose.ancestors(os.getpid()), os.getpid())
        by_pid = {pid: process.whose for (pid, _), process in found.processes.items()}
        assert by_pid[child.pid] == "launch" and by_pid[os.getpid()] == by_pid[os.getppid()] == "platform"
        kernel = [p.whose for (pid, _), p in found.processes.items() if pid == 2]
        assert kernel in ([], ["platform"])  # kthreadd, where this PID namespace shows it
        # a container: every process in the cgroup its id names (here this one's own cgroup path)
        own = Path("/proc/self/cgroup").read_text().splitlines()[0].split(":", 2)[2]
        if own not in ("/", ""):
            assert whose.classify(child.pid, "python", False, set(), False, Launch(runner_children=False, cgroup=own)) \
                == "launch"
    finally:
        child.kill()
        child.wait()


def test_a_sampler_covers_its_block_and_a_busy_child_counts_as_the_launchs():
    cpus = (sorted(os.sched_getaffinity(0))[-1],)
    code = f"import os\nos.sched_setaffinity(0, {set(cpus)!r})\nwhile True: pass\n"
    with whose.Sampler(cpus, Launch, interval_s=0.1) as sampler:
        child = subprocess.Popen([sys.executable, "-c", code])
        try:
            started = time.time()
            time.sleep(1.0)
            ended = time.time()
        finally:
            child.kill()
            child.wait()
    found = sampler.window(started, ended)
    assert found is not None and len(sampler.intervals) >= 3
    # the busy child is the launch's; what others took is what was left (no timing asserted)
    assert found["launch_on_cpus_s"] > 0
    assert found["launch_on_cpus_s"] + found["platform_on_cpus_s"] + found["others_on_cpus_s"] \
        <= found["window_s"] + 3 * whose.ACCOUNTING_TICKS / TICK
