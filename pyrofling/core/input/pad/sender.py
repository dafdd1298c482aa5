"""Sending a pad: the 16-bit sequence, and when each state goes out (every 4 ms, and at once on a change)."""

from __future__ import annotations

from dataclasses import dataclass

from pyrofling.core.input.pad.state import PadState


@dataclass(frozen=True, slots=True)
class PadSenderConfig:
    #: The reference sends every 4 ms whether or not anything changed: loss is healed by the next one.
    interval_s: float = 0.004
    #: Also send a change at once rather than at the next tick (saves half a tick on average)...
    send_on_change: bool = True
    #: ...but no closer than this to the previous send (a 1000 Hz pad would otherwise send at 1000 Hz).
    min_gap_s: float = 0.001


@dataclass(slots=True)
class PadSenderStats:
    sent: int = 0
    sent_on_change: int = 0


class GamepadSender:
    """Sequences states and decides when each goes out.  ``poll(state, now)`` → (seq, datagram) or None.

    The periodic sends keep their cadence (each due one interval after the previous due time, so
    a loop that wakes a little late still sends 250 a second); a change goes out in between.
    Call :meth:`poll` again at :meth:`next_timer`.
    """

    def __init__(self, config: PadSenderConfig | None = None, *, first_seq: int = 0) -> None:
        self.config = config or PadSenderConfig()
        self.seq = first_seq & 0xFFFF
        self.stats = PadSenderStats()
        self._last: PadState | None = None
        self._last_sent_s: float | None = None
        self._next_s: float | None = None
        self._change_waiting = False

    def poll(self, state: PadState, now: float) -> tuple[int, bytes] | None:
        cfg = self.config
        changed = state != self._last
        due = self._next_s is None or now >= self._next_s
        early = (
            changed and cfg.send_on_change and (self._last_sent_s is None or now - self._last_sent_s >= cfg.min_gap_s)
        )
        if not (due or early):
            self._change_waiting = changed and cfg.send_on_change
            return None
        if due:
            nxt = self._next_s
            behind = nxt is None or now - nxt >= cfg.interval_s  # stalled: start over, no catch-up burst
            self._next_s = now + cfg.interval_s if nxt is None or behind else nxt + cfg.interval_s
        else:
            self.stats.sent_on_change += 1
        seq = self.seq
        self.seq = (seq + 1) & 0xFFFF
        self._last = state
        self._last_sent_s = now
        self._change_waiting = False
        self.stats.sent += 1
        return seq, bytes(state.message(seq))

    def next_timer(self) -> float | None:
        if self._change_waiting and self._last_sent_s is not None and self._next_s is not None:
            return min(self._next_s, self._last_sent_s + self.config.min_gap_s)
        return self._next_s
