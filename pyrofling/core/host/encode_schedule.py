"""When the host encodes a frame: on the heartbeat, or as soon as a game presents (protocol.md §8.4).

Pure.  The host has one encoder and encodes one frame at a time.  Its shell asks
:meth:`EncodeSchedule.heartbeat` at every heartbeat that is due to encode and, in
immediate mode, :meth:`EncodeSchedule.presented` whenever a game presents (or an
encode finishes with a newer present waiting); it encodes when the answer is
True, calling :meth:`EncodeSchedule.started` then and :meth:`EncodeSchedule.finished`
when the encoder is done.

* **Heartbeat** (the default, as in the reference): each heartbeat encodes the
  newest picture.  A heartbeat that finds the previous frame still encoding is
  skipped (counted): the stream stalls for a frame rather than queueing latency.
* **Immediate** (``--immediate-encode``, games only): a present is encoded the
  moment it arrives, but at most two frames a stream period, so a game running
  faster than the stream cannot monopolise the encoder; the heartbeat only takes
  a present that had to wait, or repeats the last picture when the game has sent
  nothing for a while (a stalled game, a loading screen), so viewers keep a
  picture and a clock.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class EncodeSchedule:
    """One encoder's schedule.  ``period_s`` is the stream's frame period."""

    period_s: float
    immediate: bool = False
    #: Immediate mode: a present waits if the last encode began less than this many periods ago.
    min_gap_periods: float = 0.5
    #: Immediate mode: the heartbeat repeats the picture once nothing was encoded for this many periods.
    repeat_after_periods: float = 1.5
    encoding: bool = False
    last_start_s: float = float("-inf")
    #: Frames the stream did not get: heartbeats missed or skipped because the encoder was busy.
    skipped: int = 0

    def heartbeat(self, now: float, *, new_image: bool = True, missed_frames: int = 0) -> bool:
        """A heartbeat due to encode; ``missed_frames`` went by unseen (the host was late).  Encode now?"""
        self.skipped += missed_frames
        if self.immediate:
            if self.encoding:
                return False
            return new_image or now - self.last_start_s >= self.repeat_after_periods * self.period_s
        if self.encoding:
            self.skipped += 1  # the previous frame is still encoding: this heartbeat stalls
            return False
        return True

    def presented(self, now: float, *, new_image: bool) -> bool:
        """Immediate mode: a game presented (or an encode finished).  Encode its newest image now?"""
        if not self.immediate or self.encoding or not new_image:
            return False
        return now - self.last_start_s >= self.min_gap_periods * self.period_s

    def started(self, now: float) -> None:
        self.encoding = True
        self.last_start_s = now

    def finished(self) -> None:
        self.encoding = False
