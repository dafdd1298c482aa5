"""The host's CPU by thread (pyrofling.runtime.ThreadCpu), read from the system for this process's threads."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from pyrofling.runtime import ThreadCpu

pytestmark = [
    pytest.mark.io,  # threads of its own
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread CPU comes from /proc"),
]


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_each_thread_is_charged_its_own_work_by_name_and_one_that_ended_keeps_its_figure() -> None:
    cpu = ThreadCpu()
    spun = threading.Barrier(3, timeout=10.0)
    go = threading.Event()

    def work() -> None:
        _spin(0.15)
        spun.wait()
        go.wait(10.0)

    workers = [threading.Thread(target=work, name=f"spinner_{i}") for i in range(2)]
    for w in workers:
        w.start()
    spun.wait()
    cpu.read()  # while they live, after their work: what they keep once they have ended
    go.set()
    for w in workers:
        w.join(10.0)
    idle = threading.Thread(target=time.sleep, args=(0.05,), name="sleeper")
    idle.start()
    idle.join(10.0)
    _spin(0.1)
    got = cpu.read()
    # The two workers under one name, each with what it had when last read while alive.
    assert 0.3 <= got["spinner"] <= 0.4
    assert got["MainThread"] >= 0.1
    assert got.get("sleeper", 0.0) < 0.05  # a thread that slept is not charged another's work
    assert "native" not in got or got["native"] < 0.05


def test_work_done_before_it_was_made_is_not_counted() -> None:
    _spin(0.2)
    cpu = ThreadCpu()
    assert cpu.read().get("MainThread", 0.0) < 0.15
