"""The viewer's keyboard and mouse as INPUT_STATE messages (protocol.md §7.11); pure."""

from __future__ import annotations

from dataclasses import dataclass

from pyrofling.core.input.keyboard_mouse.codes import ABS_MAX, MOUSE_BUTTONS, as_i32
from pyrofling.wire import INPUT_KEY_CODES, InputFlags, InputState, key_bitmap


@dataclass(frozen=True, slots=True)
class InputSenderConfig:
    #: While anything is held, the state goes again this often (a lost release is repaired by the next one).
    refresh_s: float = 0.02


@dataclass(slots=True)
class InputSenderStats:
    sent: int = 0
    sent_on_change: int = 0


class InputSender:
    """The viewer's keyboard and mouse as INPUT_STATE messages: at once on every change, and every
    ``refresh_s`` while anything is held."""

    def __init__(self, config: InputSenderConfig | None = None) -> None:
        self.config = config or InputSenderConfig()
        self.keys: set[int] = set()
        self.buttons = 0
        self.dx_total = self.dy_total = self.wheel_total = self.hwheel_total = 0
        self.absolute: tuple[int, int] | None = None
        self.captured = False
        self.stats = InputSenderStats()
        self._seq = 0
        self._last_sent_s: float | None = None
        self._changed = False

    def key(self, code: int, down: bool) -> None:
        if not 0 < code < INPUT_KEY_CODES:
            return
        before = len(self.keys)
        (self.keys.add if down else self.keys.discard)(code)
        self._changed |= len(self.keys) != before

    def button(self, index: int, down: bool) -> None:
        if not 0 <= index < len(MOUSE_BUTTONS):
            return
        bit = 1 << index
        after = self.buttons | bit if down else self.buttons & ~bit
        self._changed |= after != self.buttons
        self.buttons = after

    def move(self, dx: int, dy: int) -> None:
        """Relative motion (pointer captured), in pixels of the viewer's screen."""
        if dx or dy:
            self.dx_total = as_i32(self.dx_total + dx)
            self.dy_total = as_i32(self.dy_total + dy)
            self._changed = True

    def scroll(self, vertical: int, horizontal: int = 0) -> None:
        if vertical or horizontal:
            self.wheel_total = as_i32(self.wheel_total + vertical)
            self.hwheel_total = as_i32(self.hwheel_total + horizontal)
            self._changed = True

    def point(self, x: float, y: float) -> None:
        """Where the pointer is over the picture, 0..1 each way (not captured)."""
        pos = (round(max(0.0, min(1.0, x)) * ABS_MAX), round(max(0.0, min(1.0, y)) * ABS_MAX))
        if pos != self.absolute:
            self.absolute = pos
            self._changed = True

    def capture(self, captured: bool) -> None:
        if captured != self.captured:
            self.captured = captured
            if captured:
                self.absolute = None
            self._changed = True

    def release_all(self) -> None:
        """The window lost focus, or the pointer was let go: nothing stays held."""
        if self.keys or self.buttons:
            self.keys.clear()
            self.buttons = 0
            self._changed = True

    @property
    def holding(self) -> bool:
        return bool(self.keys or self.buttons)

    def poll(self, now: float) -> InputState | None:
        """The message to send now, if any."""
        refresh = (
            self.holding and self._last_sent_s is not None and now - self._last_sent_s >= self.config.refresh_s - 1e-9
        )
        if not self._changed and not refresh:
            return None
        flags = InputFlags.CAPTURED if self.captured else InputFlags.NONE
        ax, ay = self.absolute or (0, 0)
        if self.absolute is not None and not self.captured:
            flags |= InputFlags.ABSOLUTE
        msg = InputState(
            self._seq,
            self.buttons,
            int(flags),
            key_bitmap(self.keys),
            self.dx_total,
            self.dy_total,
            self.wheel_total,
            self.hwheel_total,
            ax,
            ay,
        )
        self._seq = (self._seq + 1) & 0xFFFF
        self.stats.sent += 1
        self.stats.sent_on_change += self._changed
        self._changed = False
        self._last_sent_s = now
        return msg

    def next_timer(self) -> float | None:
        if self._changed:
            return 0.0
        if self.holding and self._last_sent_s is not None:
            return self._last_sent_s + self.config.refresh_s
        return None
