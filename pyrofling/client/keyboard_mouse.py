"""The viewer's keyboard and mouse (protocol.md §7.11): from the window to INPUT_STATE datagrams.

The window calls in from its own thread (:meth:`InputLink.key`, :meth:`button`,
:meth:`move`, :meth:`scroll`, :meth:`point`, :meth:`capture`,
:meth:`release_all`); everything is moved onto the viewer's event loop, where an
:class:`~pyrofling.core.input.keyboard_mouse.InputSender` decides what to send and
when.  ``source="sweep"`` replaces the window with a synthetic player (a key
that changes and a mouse that moves at every send) for ``bench input``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pyrofling.core.input.keyboard_mouse import WINDOW_KEYS, InputSender, InputSenderConfig
from pyrofling.timers import DeadlineTimer
from pyrofling.wire import InputState

log = logging.getLogger(__name__)

INPUT_SOURCES = ("window", "sweep")


@dataclass(frozen=True, slots=True)
class InputConfig:
    """What sends keys and the mouse: the window (a person) or a synthetic sweep (benches)."""

    source: str = "window"
    #: The sweep's send interval.
    sweep_interval_ms: float = 4.0
    #: Write each sent state's sequence number and send time here, as JSON lines (benches).
    send_log: Path | None = None

    def check(self) -> None:
        if self.source not in INPUT_SOURCES:
            raise ValueError(f"unknown input source {self.source!r}; choose one of: {', '.join(INPUT_SOURCES)}")


class InputLink:
    """Keys and the mouse, from the window's thread to the host."""

    def __init__(self, config: InputConfig | None = None) -> None:
        self.config = config or InputConfig()
        self.config.check()
        self.sender = InputSender(InputSenderConfig())
        self._loop: asyncio.AbstractEventLoop | None = None
        self._send: Callable[[bytes], None] | None = None
        self._timer = DeadlineTimer(self._poll)
        self._log: IO[str] | None = None
        self._sweep_step = 0
        self.sends_dropped = 0
        #: The host took the keyboard and mouse (it granted KEYBOARD_MOUSE): the window may capture the pointer.
        self.available = False

    # -- lifecycle (loop) ------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        if self.config.send_log is not None and self._log is None:
            self._log = self.config.send_log.open("w")

    def attach(self, send: Callable[[bytes], None]) -> None:
        """A connection that negotiated KEYBOARD_MOUSE streams: send to it."""
        self._send = send
        self.available = True
        self._poll()

    def detach(self) -> None:
        self._send = None
        self.available = False
        self.sender.release_all()
        self._timer.cancel()

    def close(self) -> None:
        self.detach()
        if self._log is not None:
            self._log.close()
            self._log = None

    # -- from the window (any thread) ------------------------------------------------------------

    def key(self, name: str, down: bool) -> bool:
        """A key of the window by pyglet's name; True when it is one the keyboard sends."""
        code = WINDOW_KEYS.get(name)
        if code is None:
            return False
        self._on_loop(self.sender.key, code, down)
        return True

    def button(self, index: int, down: bool) -> None:
        self._on_loop(self.sender.button, index, down)

    def move(self, dx: int, dy: int) -> None:
        self._on_loop(self.sender.move, dx, dy)

    def scroll(self, vertical: int, horizontal: int = 0) -> None:
        self._on_loop(self.sender.scroll, vertical, horizontal)

    def point(self, x: float, y: float) -> None:
        self._on_loop(self.sender.point, x, y)

    def capture(self, captured: bool) -> None:
        self._on_loop(self.sender.capture, captured)
        if not captured:
            self.release_all()

    def release_all(self) -> None:
        """The window lost focus or let the pointer go: nothing stays held on the host."""
        self._on_loop(self.sender.release_all)

    @property
    def captured(self) -> bool:
        return self.sender.captured

    def _on_loop(self, call: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return

        def run() -> None:
            call(*args)
            self._poll()

        with contextlib.suppress(RuntimeError):  # the loop closed between the check and the call
            loop.call_soon_threadsafe(run)

    # -- sending (loop) --------------------------------------------------------------------------

    def _poll(self) -> None:
        if self._send is None or self._loop is None:
            return
        now = time.monotonic()
        if self.config.source == "sweep":
            self._sweep(now)
        msg = self.sender.poll(now)
        if msg is not None:
            self._write(msg, now)
        due = self.sender.next_timer()
        if self.config.source == "sweep":
            due = now + self.config.sweep_interval_ms / 1000
        if due is not None:
            self._timer.arm(due)

    def _sweep(self, now: float) -> None:
        """A synthetic player: every step presses a letter or lets it go, and moves the mouse one pixel; so
        after step N a program has seen N key events (``bench input``'s photon through a desktop)."""
        self._sweep_step += 1
        step = self._sweep_step
        self.sender.captured = True
        self.sender.key(30 + (step - 1) // 2 % 9, step % 2 == 1)  # A..L, each pressed, then released
        self.sender.move(1 if step % 4 < 2 else -1, 1)

    def _write(self, msg: InputState, now: float) -> None:
        assert self._send is not None
        try:
            self._send(bytes(msg))
        except OSError:
            self.sends_dropped += 1
        if self._log is not None:
            record = {"seq": msg.seq, "t": now}
            if self.config.source == "sweep":
                record["step"] = self._sweep_step
            self._log.write(json.dumps(record) + "\n")

    def summary(self) -> dict[str, Any]:
        return {
            "source": self.config.source,
            "available": self.available,
            "captured": self.sender.captured,
            "states_sent": self.sender.stats.sent,
            "sent_on_change": self.sender.stats.sent_on_change,
            "send_errors": self.sends_dropped,
        }
