"""When a game paced by the host starts its next frame: just in time for the heartbeat that takes it.

Pure.  A game presenting in FIFO mode gets control back when the host's
FrameComplete says the heartbeat took its last picture.  Starting the next frame
right then reads the pad almost a whole period before the heartbeat that takes
the picture: up to a frame of input latency for nothing.  FrameComplete carries
the *headroom* (the time to the next heartbeat), so the game can instead sleep
until ``next heartbeat − its own frame time − a safety margin`` and read newer
input.

The frame time is learnt (a high quantile of the game's recent frames, from
getting control back to presenting).  A present that still missed its heartbeat
shows in FrameComplete's heartbeat count (it completed two heartbeats after the
previous one instead of one): each such miss widens the margin for a while.
Until enough frames are known, or when the frame takes most of a period anyway,
the game simply starts at once, as before.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class JustInTimeConfig:
    #: Kept between the expected present and the heartbeat (the present must reach the host's loop).
    safety_s: float = 0.0015
    #: Frames of work remembered, and the quantile of them planned for.
    window: int = 120
    min_samples: int = 20
    quantile: float = 95.0
    #: The quantile is stretched by this factor (a frame slower than any seen recently is still in time).
    stretch: float = 1.1
    #: Each present that missed its heartbeat within ``late_memory_s`` adds this much, up to ``max_late_s``.
    late_step_s: float = 0.001
    late_memory_s: float = 10.0
    max_late_s: float = 0.005


@dataclass(slots=True)
class JustInTimeStats:
    delayed: int = 0  # frames started later than FrameComplete
    late_presents: int = 0  # presents that missed the heartbeat they were meant for
    slept_s: float = 0.0


class JustInTime:
    """Feed it the game's frames and FrameCompletes; :meth:`completed` says when to start the next frame."""

    def __init__(self, config: JustInTimeConfig | None = None) -> None:
        self.config = config or JustInTimeConfig()
        self.stats = JustInTimeStats()
        self._work: deque[float] = deque(maxlen=self.config.window)
        self._late: deque[float] = deque()
        self._started_s: float | None = None
        self._last_beat: int | None = None
        self._estimate_s: float | None = None

    def frame_started(self, now: float) -> None:
        """The game has control again: its frame starts now."""
        self._started_s = now

    def presenting(self, now: float) -> None:
        """The game presents: its frame took ``now − start``."""
        if self._started_s is not None:
            self._work.append(now - self._started_s)
            self._started_s = None
            if len(self._work) >= self.config.min_samples and len(self._work) % 8 == 0:
                self._estimate_s = float(np.percentile(np.fromiter(self._work, float), self.config.quantile))

    def completed(self, now: float, *, beat: int, headroom_s: float, period_s: float) -> float:
        """FrameComplete for the newest present came at ``now`` (heartbeat ``beat``, the next one
        ``headroom_s`` away): when the game should start its next frame (``now``: at once)."""
        cfg = self.config
        previous, self._last_beat = self._last_beat, beat
        if previous is not None and beat - previous >= 2 and self._estimate_s is not None:
            self.stats.late_presents += 1
            self._late.append(now)
        while self._late and self._late[0] < now - cfg.late_memory_s:
            self._late.popleft()
        lead = self.lead_s
        if lead is None or headroom_s <= 0:
            return now
        start = now + headroom_s - lead
        if start <= now or lead >= period_s:
            return now
        self.stats.delayed += 1
        self.stats.slept_s += start - now
        return start

    @property
    def lead_s(self) -> float | None:
        """How long before the heartbeat the next frame starts (None: not learnt yet)."""
        if self._estimate_s is None:
            return None
        cfg = self.config
        return self._estimate_s * cfg.stretch + cfg.safety_s + min(cfg.max_late_s, cfg.late_step_s * len(self._late))
