"""A job stops on SIGINT even where it was started with SIGINT ignored, and the steps that create
something or tear it down are not cut in half by a signal (dlvirt.core.signals). Fast: plain
Python processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO

SRC = str(REPO / "src")


def _start(code: str) -> subprocess.Popen[str]:
    """``code`` in a Python process started with SIGINT ignored (as by ``cmd &`` in a script)."""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "PYTHONPATH": SRC},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def test_a_process_started_with_sigint_ignored_stops_on_it_once_it_asks():
    wait = "print('ready', flush=True); import time; time.sleep(60)"
    deaf = _start(wait)
    stops = _start(f"from dlvirt.core.signals import stop_on_signals; stop_on_signals(); {wait}")
    try:
        for proc in (deaf, stops):
            proc.send_signal(signal.SIGINT)
        assert stops.wait(timeout=10) != 0
        time.sleep(1)
        assert deaf.poll() is None, "Python without stop_on_signals ignores SIGINT it inherited ignored"
        assert "KeyboardInterrupt" in stops.communicate()[0]
    finally:
        for proc in (deaf, stops):
            proc.kill()
            proc.wait()


HELD = """
import sys, time
from dlvirt.core.signals import held, stop_on_signals
stop_on_signals()
try:
    with held():
        print('ready', flush=True)
        time.sleep(1.5)
        print('step done', flush=True)
    print('after the step', flush=True)
except KeyboardInterrupt:
    print('interrupted', flush=True)
except SystemExit as exc:
    print(f'terminated {exc.code}', flush=True)
"""


def _output_after(code: str, *steps: signal.Signals | float) -> list[str]:
    """``code`` started as ``_start`` starts it, then ``steps`` in order (a signal: sent to it; a
    number: seconds to wait first); the lines it printed after 'ready'."""
    proc = _start(code)
    for step in steps:
        if isinstance(step, signal.Signals):
            proc.send_signal(step)
        else:
            time.sleep(step)
    out, _ = proc.communicate(timeout=30)
    return out.splitlines()


def test_one_signal_waits_for_the_held_step_then_stops_the_job():
    assert _output_after(HELD, signal.SIGINT) == ["step done", "interrupted"]


def test_sigterm_is_held_too_and_ends_the_job_as_sigterm():
    assert _output_after(HELD, signal.SIGTERM) == ["step done", "terminated 143"]


def test_sigint_and_sigterm_together_are_one_stop_that_waits_for_the_step():
    """Ctrl-C under Snakemake: SIGINT from the terminal, SIGTERM forwarded by dlvirt.run.interrupt."""
    assert _output_after(HELD, signal.SIGINT, signal.SIGTERM) == ["step done", "interrupted"]


def test_the_same_signal_twice_cuts_a_held_step_short():
    assert _output_after(HELD, signal.SIGINT, 0.3, signal.SIGINT) == ["interrupted"]


def test_a_job_started_after_snakemake_was_interrupted_is_stopped_too(tmp_path):
    """dlvirt.run.interrupt in a stand-in Snakemake process: after SIGINT it starts a job runner
    (as Snakemake does when the signal comes while it spawns one) and an ``engines`` step (as its
    end handler does): the late runner gets SIGTERM within a sweep, the engines step is left."""
    fake = tmp_path / "fake" / "dlvirt"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text("import time\ntime.sleep(30)\n")
    code = f"""
import os, signal, subprocess, sys, time
from dlvirt.run.interrupt import stop_jobs_on_interrupt
stop_jobs_on_interrupt()
try:
    print('ready', flush=True)
    time.sleep(30)
except KeyboardInterrupt:
    pass
env = {{**os.environ, "PYTHONPATH": {str(fake.parent)!r}}}
job = subprocess.Popen([sys.executable, "-m", "dlvirt", "bench"], env=env)
step = subprocess.Popen([sys.executable, "-m", "dlvirt", "engines"], env=env)
time.sleep(3)
print(job.poll(), step.poll(), flush=True)
step.kill()
job.kill()
"""
    proc = _start(code)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert out.split() == [str(-signal.SIGTERM), "None"], out


UNHELD = """
import time
from dlvirt.core.signals import stop_on_signals
stop_on_signals()
try:
    print('ready', flush=True)
    time.sleep(30)
except KeyboardInterrupt:
    try:
        time.sleep(1.5)  # the teardown the first signal started, not yet held
        print('teardown done', flush=True)
    except SystemExit as exc:
        print(f'teardown cut by {exc.code}', flush=True)
"""


def test_a_second_different_stop_signal_does_not_cut_the_teardown_the_first_began():
    assert _output_after(UNHELD, signal.SIGINT, 0.5, signal.SIGTERM) == ["teardown done"]



TAKEN_ELSEWHERE = """
import signal, sys, threading, time
from dlvirt.core.signals import STOP_SIGNALS, start_thread, stop_on_signals, wait_thread
stop_on_signals()
# a thread that is not dlvirt's and blocks nothing (as a C library's pool, e.g. OpenBLAS's with numpy)
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
worker = start_thread(lambda: time.sleep(60), "worker")
mask = open(f"/proc/self/task/{worker.native_id}/status").read().split("SigBlk:")[1].split()[0]
print(f"worker blocks {int(mask, 16) & ((1 << 1) | (1 << 14)):#x}", flush=True)
signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # the kernel must hand them to the foreign thread
print('ready', flush=True)
try:
    wait_thread(worker) if sys.argv[1] == "sliced" else worker.join()
    print('never stopped', flush=True)
except KeyboardInterrupt:
    print(f"stopped; still pending: {sorted(signal.sigpending())}", flush=True)
"""


@pytest.mark.parametrize("wait", ["sliced", "one call"])
def test_a_stop_signal_taken_by_a_thread_that_is_not_the_main_one_still_stops_the_job(wait):
    """Python runs signal handlers in the main thread only and does not wake it: CN's runner, its
    main thread blocked in one long wait for the container, slept on when the kernel handed Ctrl-C
    (SIGINT + SIGTERM) to another thread. Deterministic: the main thread blocks both in the kernel,
    so a thread it did not start takes them while the main thread waits; ``wait_thread`` acts on
    them within a slice (one long join sleeps on: the bug), and the threads dlvirt starts
    (``start_thread``) block both."""
    proc = subprocess.Popen([sys.executable, "-c", TAKEN_ELSEWHERE, wait.split()[0]], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONPATH": SRC},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "worker blocks 0x4002\n"
        assert proc.stdout.readline() == "ready\n"
        time.sleep(0.3)  # in its wait
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGTERM)
        if wait == "one call":
            with pytest.raises(subprocess.TimeoutExpired):
                proc.wait(timeout=3)
            return
        out, _ = proc.communicate(timeout=3)
    finally:
        proc.kill()
        proc.wait()
    assert out.splitlines() == ["stopped; still pending: []"], out
