"""A launch taking turns with another process (dlvirt.run.turns): the protocol on a real Unix
socket, both sides in this process; a real launch doing it is in tests/integration/test_platform_bm.py."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from conftest import spec_document
from dlvirt.core.records import JobSpec
from dlvirt.platforms.base import PlatformError
from dlvirt.platforms.bm import BareMetal
from dlvirt.platforms.cn import Container
from dlvirt.run import runner
from dlvirt.run.turns import TurnError, TurnListener, Turns


def harness_side(path: Path, reps: list[int | None], done: list[float], errors: list[BaseException]) -> None:
    """What the harness does: a turn before each of ``reps``, noting when each turn came back."""
    try:
        turns = Turns(path)
        for rep in reps:
            turns.take(rep)
            done.append(time.perf_counter())
        turns.close()
    except BaseException as error:  # noqa: BLE001 - the test reads it
        errors.append(error)


def test_the_launch_waits_out_each_turn_and_names_the_next_repetition_and_its_cpus(tmp_path):
    path = tmp_path / "turns"
    done: list[float] = []
    errors: list[BaseException] = []
    with TurnListener(path) as listener:
        launch = threading.Thread(target=harness_side, args=(path, [0, 1, None], done, errors))
        launch.start()
        seen, held_until = [], []
        for turn in listener.turns(launch.is_alive):
            seen.append(turn)
            time.sleep(0.2)  # the other process's turn: the launch may not go on meanwhile
            held_until.append(time.perf_counter())
        launch.join()
    assert errors == []
    assert [t["next"] for t in seen] == [0, 1, None]
    assert all(t["cpus"] == sorted(os.sched_getaffinity(0)) for t in seen)
    assert all(back >= held for back, held in zip(done, held_until, strict=True))
    assert not path.exists()  # the listener leaves no socket behind


def test_a_listener_stops_waiting_for_a_launch_that_died_before_it_connected(tmp_path):
    with TurnListener(tmp_path / "turns") as listener:
        started = time.perf_counter()
        assert list(listener.turns(lambda: False)) == []
    assert time.perf_counter() - started < 5


def test_the_launch_fails_when_the_other_side_goes_away_in_its_turn(tmp_path):
    path = tmp_path / "turns"
    errors: list[BaseException] = []
    with TurnListener(path) as listener:
        launch = threading.Thread(target=harness_side, args=(path, [0, 1], [], errors))
        launch.start()
        turns = listener.turns(launch.is_alive)
        next(turns)
        turns.close()  # leaves in the middle of the first turn, without answering
        launch.join(10)
    assert len(errors) == 1 and isinstance(errors[0], TurnError) and "answered ''" in str(errors[0])


def test_nobody_listening_is_an_error_naming_the_socket(tmp_path):
    with pytest.raises(TurnError, match=f"nobody takes turns at {tmp_path / 'none'}"):
        Turns(tmp_path / "none")


def spec(tmp_path: Path, platform: str, turns: str | None) -> JobSpec:
    return JobSpec.from_dict(spec_document("ic", tmp_path, f"{platform}/1/PIN/CPU", repetitions=1,
                                           warmup_repetitions=0, timeout_s=60, platform_settings={}, turns=turns))


def test_only_bare_metal_takes_turns(tmp_path):
    with pytest.raises(PlatformError, match="turns are taken at a socket on the host .* only bare metal"):
        runner.check_node(Container, spec(tmp_path, "CN", str(tmp_path / "turns")))
    runner.check_node(BareMetal, spec(tmp_path, "BM", str(tmp_path / "turns")))
