"""The shells' clock: monotonic seconds, and waiting on them.

Each shell that keeps time (the presenter, the heartbeat, the audio player, the capture server) takes one
:class:`Clock` and reads and waits through it alone, so that its timing runs the same on the system's clock
and, in tests, on a :class:`VirtualClock`, where time moves only when the shell waits: a test then checks
exact times, on any machine, however busy.
"""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

T = TypeVar("T")


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds."""
        ...

    def wait(self, event: threading.Event, timeout_s: float) -> bool:
        """Until ``event`` is set or ``timeout_s`` has passed; whether it is set."""
        ...

    def get(self, inbox: queue.Queue[T], timeout_s: float) -> T:
        """The next item of ``inbox``, waiting up to ``timeout_s``; ``queue.Empty`` if none came."""
        ...


class SystemClock:
    """``time.monotonic``, and the threads' own waits."""

    def now(self) -> float:
        return time.monotonic()

    def wait(self, event: threading.Event, timeout_s: float) -> bool:
        return event.wait(max(0.0, timeout_s))

    def get(self, inbox: queue.Queue[T], timeout_s: float) -> T:
        return inbox.get(timeout=max(0.0, timeout_s))


#: The clock every shell uses unless a test gives it another.
SYSTEM_CLOCK: Clock = SystemClock()


class VirtualClock:
    """Time that moves only when the shell waits (tests; one thread waits on it).

    :meth:`at` schedules what the outside world does at a time (a picture decoded, a stop): a wait runs each
    scheduled call it reaches, in time order, and ends early when the call set its event or filled its queue.
    """

    def __init__(self, start_s: float = 0.0) -> None:
        self.t = start_s
        self._order = itertools.count()
        self._due: list[tuple[float, int, Callable[[], None]]] = []

    def now(self) -> float:
        return self.t

    def at(self, when_s: float, call: Callable[[], None]) -> None:
        heapq.heappush(self._due, (when_s, next(self._order), call))

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass, running what is scheduled in them."""
        self._run_until(self.t + seconds, lambda: False)

    def wait(self, event: threading.Event, timeout_s: float) -> bool:
        self._run_until(self.t + max(0.0, timeout_s), event.is_set)
        return event.is_set()

    def get(self, inbox: queue.Queue[T], timeout_s: float) -> T:
        self._run_until(self.t + max(0.0, timeout_s), lambda: not inbox.empty())
        return inbox.get_nowait()

    def _run_until(self, end_s: float, done: Callable[[], bool]) -> None:
        while not done():
            if not self._due or self._due[0][0] > end_s:
                self.t = max(self.t, end_s)
                return
            when, _, call = heapq.heappop(self._due)
            self.t = max(self.t, when)
            call()
