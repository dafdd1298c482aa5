"""The shells' deadline timer on a real event loop: the timerfd it uses on Linux, and call_at where there is none."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pyrofling import timers
from pyrofling.clocks import SYSTEM_CLOCK
from pyrofling.timers import DeadlineTimer

WAIT_S = 5.0  # every wait is bounded


@pytest.fixture(params=["timerfd", "call_at"])
def kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "timerfd" and not timers.precise:
        pytest.skip("no timerfd on this system")
    if request.param == "call_at":
        monkeypatch.setattr(timers, "precise", False)
    yield request.param


def _record(fired: list[Any], done: asyncio.Event, value: Callable[[], Any]) -> Callable[[], None]:
    def callback() -> None:
        fired.append(value())
        done.set()

    return callback


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_it_fires_once_not_before_its_deadline(kind: str) -> None:
    async def main() -> list[float]:
        fired: list[float] = []
        done = asyncio.Event()
        timer = DeadlineTimer(_record(fired, done, SYSTEM_CLOCK.now))
        due = SYSTEM_CLOCK.now() + 0.002
        timer.arm(due)
        await asyncio.wait_for(done.wait(), WAIT_S)
        await asyncio.sleep(0.01)  # a second fire would come now
        timer.cancel()
        return [t - due for t in fired]

    late = asyncio.run(main())
    assert len(late) == 1 and late[0] >= 0, late


def test_an_earlier_deadline_wins_and_a_later_one_does_not_delay_it(kind: str) -> None:
    async def main() -> tuple[int, float]:
        fired: list[float] = []
        done = asyncio.Event()
        timer = DeadlineTimer(_record(fired, done, SYSTEM_CLOCK.now))
        now = SYSTEM_CLOCK.now()
        timer.arm(now + 30.0)
        timer.arm(now + 0.003)  # earlier: replaces it
        timer.arm(now + 60.0)  # later: leaves it as it is
        await asyncio.wait_for(done.wait(), WAIT_S)
        timer.cancel()
        return len(fired), fired[0] - now

    count, after = asyncio.run(main())
    assert count == 1 and 0.003 <= after < 30.0


def test_cancel_stops_it_and_it_can_be_armed_again(kind: str) -> None:
    async def main() -> tuple[int, int]:
        fired: list[int] = []
        done = asyncio.Event()
        timer = DeadlineTimer(_record(fired, done, lambda: 1))
        timer.arm(SYSTEM_CLOCK.now() + 0.002)
        timer.cancel()
        await asyncio.sleep(0.02)
        before = len(fired)
        timer.arm(SYSTEM_CLOCK.now() + 0.001)
        await asyncio.wait_for(done.wait(), WAIT_S)
        timer.cancel()
        return before, len(fired)

    assert asyncio.run(main()) == (0, 1)


def test_a_deadline_already_past_fires_at_once(kind: str) -> None:
    async def main() -> int:
        fired: list[int] = []
        done = asyncio.Event()
        timer = DeadlineTimer(_record(fired, done, lambda: 1))
        timer.arm(SYSTEM_CLOCK.now() - 1.0)
        await asyncio.wait_for(done.wait(), WAIT_S)
        timer.cancel()
        return len(fired)

    assert asyncio.run(main()) == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux's")
def test_the_timerfd_is_given_back_on_cancel() -> None:
    if not timers.precise:
        pytest.skip("no timerfd on this system")

    async def main() -> tuple[int, int, int]:
        before = _open_fds()
        timer = DeadlineTimer(lambda: None)
        timer.arm(SYSTEM_CLOCK.now() + 10.0)
        armed = _open_fds()
        timer.cancel()
        return before, armed, _open_fds()

    before, armed, after = asyncio.run(main())
    assert armed == before + 1 and after == before


def test_a_system_that_refuses_a_timerfd_falls_back_to_call_at(monkeypatch: pytest.MonkeyPatch) -> None:
    if not timers.precise:
        pytest.skip("no timerfd on this system")

    def refused() -> None:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(timers, "_TimerFd", refused)
    monkeypatch.setattr(timers, "precise", True)  # restored after: the fallback turns it off for good

    async def main() -> int:
        fired: list[int] = []
        done = asyncio.Event()
        timer = DeadlineTimer(_record(fired, done, lambda: 1))
        timer.arm(SYSTEM_CLOCK.now() + 0.002)
        await asyncio.wait_for(done.wait(), WAIT_S)
        timer.cancel()
        return len(fired)

    assert asyncio.run(main()) == 1
    assert timers.precise is False


@pytest.mark.io  # a fresh interpreter, so the imports run again
def test_importing_the_host_and_the_viewer_starts_no_process() -> None:
    """The timers find libc's timerfd in the process's own symbols: ``ctypes.util.find_library`` ran ldconfig in a
    subprocess at import (10 ms at every start, and a process in whichever quick test imported them first)."""
    probe = (
        "import subprocess\n"
        "started = []\n"
        "real = subprocess.Popen.__init__\n"
        "def record(self, *args, **kwargs):\n"
        "    started.append(args[0] if args else kwargs.get('args'))\n"
        "    real(self, *args, **kwargs)\n"
        "subprocess.Popen.__init__ = record\n"
        "import pyrofling.timers, pyrofling.server.host, pyrofling.client.viewer\n"
        "assert pyrofling.timers.precise, 'no timerfd found'\n"
        "print(started)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"
