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
  faster than the stream cannot monopolise the encoder: one that comes too soon
  after the last encode waits until half a period after it (:meth:`EncodeSchedule.next_timer`),
  or for the heartbeat if that comes first.  Not for the heartbeat alone: a game
  paced by the heartbeat presents a few ms after it, so once one present had
  waited for a heartbeat, every later one came too soon after that heartbeat's
  encode and waited most of a frame for the next, until the game's phase moved
  (on the 16-CPU machine, after a 30 ms stall of the example game: to the end of
  the run, input to photon 27 ms instead of 15).  The heartbeat also repeats
  the last picture when the game has sent nothing for a while (a stalled game, a
  loading screen), so viewers keep a picture and a clock.
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
    #: Immediate mode: when a present that came too soon may be encoded (None: none is waiting for that).
    deferred_until_s: float | None = None
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
        self.deferred_until_s = None
        if not self.immediate or self.encoding or not new_image:
            return False
        allowed_s = self.last_start_s + self.min_gap_periods * self.period_s
        if now >= allowed_s:
            return True
        self.deferred_until_s = allowed_s
        return False

    def next_timer(self) -> float | None:
        """Immediate mode: when to ask :meth:`presented` again about a present that came too soon (None: no
        present waits for that; one that waits for the encoder is asked about when it finishes)."""
        return self.deferred_until_s

    def started(self, now: float) -> None:
        self.encoding = True
        self.last_start_s = now
        self.deferred_until_s = None

    def finished(self) -> None:
        self.encoding = False
