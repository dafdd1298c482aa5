"""One asyncio timer that follows a pure core's ``next_timer()``: the shells' half of its timer contract.

The core says when it next has something to do (monotonic seconds); the shell
arms one timer for then, after every input.  A deadline that moved later
leaves the armed timer as it is: firing early costs one ``handle_timer`` that
finds nothing due, and saves re-arming it per datagram.

On Linux the timer is a ``timerfd`` the event loop watches, not ``call_at``: asyncio's selector waits in whole
milliseconds (epoll's timeout, rounded up), so a deadline 0.3 ms away fired 0.8-1.2 ms late, and the pacer's
wake-ups within a frame's datagram train each came up to a millisecond late (a 40 kB picture left in 2 ms
where its pacing allows 1; docs/streaming.md, "The pacer's wake-ups on time").  A timerfd wakes the loop at
the nanosecond asked.  Elsewhere, or where the system refuses one, ``call_at``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import sys
import time
import weakref
from collections.abc import Callable

from pyrofling.clocks import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)

_CLOCK_MONOTONIC = 1  # the clock time.monotonic() and asyncio's loop.time() read
_TFD_TIMER_ABSTIME = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        # The process's own symbols, libc's among them: find_library("c") would run ldconfig in a subprocess at
        # every import (10 ms at each start of a host or viewer).
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.timerfd_settime.argtypes = [
            ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.POINTER(_Itimerspec),
        ]  # fmt: skip
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()
#: Whether timers are timerfds (off for good once the system refuses one).
precise = _LIBC is not None


class _TimerFd:
    """A one-shot timerfd on the monotonic clock: :meth:`set` an absolute time, and it becomes readable then."""

    def __init__(self) -> None:
        assert _LIBC is not None
        fd = _LIBC.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        self.fd = fd
        self._spec = _Itimerspec()
        self.close = weakref.finalize(self, os.close, fd)  # once; also when its owner is dropped unclosed

    def set(self, at_s: float) -> None:
        """Readable at ``at_s`` (monotonic seconds). A time already past fires at once."""
        assert _LIBC is not None
        self._spec.it_value.tv_sec, self._spec.it_value.tv_nsec = divmod(max(1, round(at_s * 1e9)), 1_000_000_000)
        if _LIBC.timerfd_settime(self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) < 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))

    def clear(self) -> None:
        """Reads the expiry count, so that the fd is no longer readable."""
        with contextlib.suppress(BlockingIOError, InterruptedError):
            os.read(self.fd, 8)


class DeadlineTimer:
    """``arm(due)`` after each input; ``callback`` runs at the earliest deadline armed (then arm again)."""

    def __init__(self, callback: Callable[[], None], clock: Clock = SYSTEM_CLOCK) -> None:
        """``clock``: the one the deadlines are on (its seconds are the event loop's)."""
        self._callback = callback
        self._clock = clock
        self._handle: asyncio.TimerHandle | None = None
        self._fd: _TimerFd | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fd_when: float | None = None  # monotonic seconds the timerfd is set for; None: not set

    def arm(self, due: float | None) -> None:
        """Run the callback at ``due`` (the clock's seconds) unless it is armed for earlier already."""
        if due is None:
            return
        wait = max(0.0, due - self._clock.now())
        if precise and self._arm_fd(time.monotonic() + wait):
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + wait
        if self._handle is not None:
            if self._handle.when() <= when + 1e-4:
                return
            self._handle.cancel()
        self._handle = loop.call_at(when, self._fire)

    def cancel(self) -> None:
        """Nothing fires until the next :meth:`arm`; the timerfd (if any) is given back."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._fd is not None:
            assert self._loop is not None
            with contextlib.suppress(RuntimeError):  # the loop has closed: it watches nothing any more
                self._loop.remove_reader(self._fd.fd)
            self._fd.close()
            self._fd = self._loop = self._fd_when = None

    def _arm_fd(self, when: float) -> bool:
        """The timerfd set for ``when`` (unless set for earlier already); False where there is none to set."""
        global precise
        if self._fd is None:
            try:
                self._fd = _TimerFd()
            except OSError as exc:
                precise = False
                log.info("no timerfd here (%s): timers wake on the event loop's whole milliseconds", exc)
                return False
            self._loop = asyncio.get_running_loop()
            self._loop.add_reader(self._fd.fd, self._fd_fired)
        if self._fd_when is not None and self._fd_when <= when + 1e-6:
            return True
        self._fd.set(when)
        self._fd_when = when
        return True

    def _fd_fired(self) -> None:
        assert self._fd is not None
        self._fd.clear()
        if self._fd_when is None:
            return  # read after the last fire was taken: nothing armed
        self._fd_when = None
        self._callback()

    def _fire(self) -> None:
        self._handle = None
        self._callback()
