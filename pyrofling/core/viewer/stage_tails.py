"""How long each shown picture spent in each stage of the viewer, and how far its rare slow ones ran over.

A phase lock that may repeat a refresh once a minute must leave room for the slowest picture in a
minute, stage by stage: the *once-a-minute tail* is the time only one picture in ``60 × refresh rate``
exceeds.  The first ``STARTUP_S`` after the first picture (the decoder's first pictures queue while
it starts, the lock is still settling) are kept apart: their queue is reported on its own, not folded
into the tails.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from pyrofling.core.samples import SAMPLES_KEPT

#: Stages a picture passes on the viewer, in order (each from one timestamp to the next).
STAGES = ("datagram train", "receive", "decode queue", "decode", "prepare")
#: Pictures that came this soon after the first are the start-up.
STARTUP_S = 2.0


def share_tail(values: list[float], share: float) -> float:
    """The value that only ``share`` of ``values`` exceed: of N, N × share may be above it (with fewer than one
    allowed, the largest: what one run can show)."""
    ordered = sorted(values)
    allowed = math.floor(len(ordered) * share + 1e-9)
    return ordered[max(0, len(ordered) - 1 - allowed)]


class StageTails:
    """Feed it every shown picture's stage times (:meth:`picture`); :meth:`summary` gives each stage's median,
    99.9th percentile and once-a-minute tail over the last ``keep`` pictures after the start-up."""

    def __init__(self, *, startup_s: float = STARTUP_S, keep: int = SAMPLES_KEPT) -> None:
        self.startup_s = startup_s
        self._first_s: float | None = None
        self._ms: dict[str, deque[float]] = {name: deque(maxlen=keep) for name in STAGES}
        self.startup_pictures = 0
        self.startup_worst_queue_ms: float | None = None

    def picture(
        self,
        *,
        first_s: float,
        complete_s: float,
        queued_s: float,
        decode_start_s: float,
        decoded_s: float,
        done_s: float,
    ) -> None:
        """One shown picture's stage timestamps (its first and last datagram, handed to the decoder, decode start
        and end, ready to show), seconds on one clock."""
        if self._first_s is None:
            self._first_s = first_s
        stamps = (first_s, complete_s, queued_s, decode_start_s, decoded_s, done_s)
        if first_s - self._first_s < self.startup_s:
            self.startup_pictures += 1
            queue_ms = (decode_start_s - complete_s) * 1000
            if self.startup_worst_queue_ms is None or queue_ms > self.startup_worst_queue_ms:
                self.startup_worst_queue_ms = queue_ms
            return
        for name, a, b in zip(STAGES, stamps, stamps[1:], strict=False):
            self._ms[name].append((b - a) * 1000)

    def summary(self, refresh_hz: float) -> dict[str, Any]:
        """Per stage: median, p99.9 and the once-a-minute tail at ``refresh_hz`` (ms); and the start-up."""
        share = 1 / (60 * refresh_hz)
        stages: dict[str, dict[str, float]] = {}
        for name, window in self._ms.items():
            if not window:
                continue
            ordered = sorted(window)
            stages[name] = {
                "median_ms": ordered[len(ordered) // 2],
                "p999_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.999))],
                "once_a_minute_ms": share_tail(ordered, share),
            }
        return {
            "pictures": len(self._ms[STAGES[0]]),
            "stages": stages,
            "startup": {
                "seconds": self.startup_s,
                "pictures": self.startup_pictures,
                "worst_queue_ms": self.startup_worst_queue_ms,
            },
        }
