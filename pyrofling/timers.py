"""One asyncio timer that follows a pure core's ``next_timer()``: the shells' half of its timer contract.

The core says when it next has something to do (monotonic seconds); the shell
arms one ``call_at`` for then, after every input.  A deadline that moved later
leaves the armed timer as it is: firing early costs one ``handle_timer`` that
finds nothing due, and saves cancelling and re-creating a handle per datagram.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pyrofling.clocks import SYSTEM_CLOCK, Clock


class DeadlineTimer:
    """``arm(due)`` after each input; ``callback`` runs at the earliest deadline armed (then arm again)."""

    def __init__(self, callback: Callable[[], None], clock: Clock = SYSTEM_CLOCK) -> None:
        """``clock``: the one the deadlines are on (its seconds are the event loop's)."""
        self._callback = callback
        self._clock = clock
        self._handle: asyncio.TimerHandle | None = None

    def arm(self, due: float | None) -> None:
        """Run the callback at ``due`` (the clock's seconds) unless it is armed for earlier already."""
        if due is None:
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + max(0.0, due - self._clock.now())
        if self._handle is not None:
            if self._handle.when() <= when + 1e-4:
                return
            self._handle.cancel()
        self._handle = loop.call_at(when, self._fire)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        self._callback()
