"""What the presenter counts and samples, written by its thread and read (copied) by others under its lock."""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from pyrofling.core.samples import SAMPLES_KEPT, recent_samples

#: Samples kept for the HUD graphs (the reference keeps 150).
GRAPH_SAMPLES = 150


@dataclass(slots=True)
class PresentationStats:
    """Written by the presenter thread; read (copied) by others under ``lock``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    refresh_hz: float | None = None
    clock: str = ""  # "vsync" or "software"
    offset_ms: float = 0.0  # the phase offset and deadline in force (learnt in auto mode)
    deadline_ms: float = 0.0
    auto: dict[str, Any] | None = None  # auto mode: margin, lock, p99 lateness, misses, reversals
    presented: int = 0
    repeated: int = 0
    held: int = 0  # refreshes that kept a picture by the stream's cadence (half the display's rate): no repeats
    missed_deadlines: int = 0
    skipped: int = 0  # refreshes the presenter was too late to decide (each also repeated)
    dropped: int = 0
    phase_offsets_sent: int = 0
    glass_ms: deque[float] = field(default_factory=recent_samples)  # capture → on screen
    #: (time since start, capture → ready to show in ms) of every picture, shown or not: how far this spreads is
    #: what any phase offset must cover, so it bounds what locking can gain over free-running (``bench latency``).
    ready_trace: deque[tuple[float, float]] = field(default_factory=recent_samples)
    phase_trace: deque[tuple[float, int]] = field(default_factory=recent_samples)  # (time since start, µs)
    repeat_times: deque[float] = field(default_factory=recent_samples)  # time since start of each repeated refresh
    # Last GRAPH_SAMPLES refreshes, for the HUD: phase error ms, frame pace ms, latency ms, repeat flag.
    graph_phase_ms: deque[float] = field(default_factory=lambda: deque(maxlen=GRAPH_SAMPLES))
    graph_pace_ms: deque[float] = field(default_factory=lambda: deque(maxlen=GRAPH_SAMPLES))
    graph_glass_ms: deque[float] = field(default_factory=lambda: deque(maxlen=GRAPH_SAMPLES))
    graph_repeat: deque[bool] = field(default_factory=lambda: deque(maxlen=GRAPH_SAMPLES))

    def keep_two_minutes_at(self, hz: float) -> None:
        """The samples taken once a refresh kept for two minutes at this refresh rate (``SAMPLES_KEPT`` is two
        minutes at 60): at 144 Hz they held 50 s, so a minute's run lost its first ten seconds, start-up and all."""
        keep = max(SAMPLES_KEPT, math.ceil(hz * SAMPLES_KEPT / 60))
        self.glass_ms = deque(self.glass_ms, maxlen=keep)
        self.ready_trace = deque(self.ready_trace, maxlen=keep)
        self.phase_trace = deque(self.phase_trace, maxlen=keep)
        self.repeat_times = deque(self.repeat_times, maxlen=keep)
