"""The ring between the audio player's thread and the output device's callback (PortAudio's thread).

The callback only copies from the ring — no locks, no allocation beyond a few
views, no logging, no decoding.  An underrun is zero-filled
(after a short fade) and counted, and playback stops until the player has primed
the ring to its target again, so one stall never becomes a cascade.
"""

from __future__ import annotations

import time

import numpy as np
import numpy.typing as npt

from pyrofling.clocks import SYSTEM_CLOCK, Clock
from pyrofling.core.audio_signal import Frames

#: Callback records kept for the player thread and the run-time statistics.
RECORD_SLOTS = 8192


class OutputRing:
    """Single-producer, single-consumer ring of float32 frames; :meth:`fill` is the device callback.

    Positions are running frame counts: the player thread only advances ``write_pos``,
    the callback only ``read_pos`` and ``playing`` (to False, on an underrun); plain
    attribute stores are atomic under the GIL, so neither side ever waits.
    """

    def __init__(self, capacity: int, channels: int, *, fade_frames: int = 120, clock: Clock = SYSTEM_CLOCK) -> None:
        """``clock``: the player's, so that each callback's local time is on the clock the player reads."""
        self._clock = clock
        self.capacity = capacity
        self.channels = channels
        self.buf = np.zeros((capacity, channels), dtype=np.float32)
        self.write_pos = 0
        self.read_pos = 0
        self.playing = False
        self.underruns = 0  # blocks that ran dry while playing
        self.underrun_frames = 0
        self.device_xruns = 0  # the device's own underflow flag
        self.callbacks = 0
        #: Set with ``playing``: the first played block drops what is queued beyond this many frames.
        self.start_level: int | None = None
        self.start_trimmed = 0
        # Per callback: read position at the block's start, DAC time, device now, local now, run time,
        # and whether the block was played from the ring (1) or was silence while priming (0).
        self.records = np.zeros((RECORD_SLOTS, 6), dtype=np.float64)
        self.max_run_s = 0.0
        self._fade = np.linspace(1.0, 0.0, fade_frames + 2, dtype=np.float32)[1:-1, None]
        self._rise = np.ascontiguousarray(self._fade[::-1])

    @property
    def level(self) -> int:
        return self.write_pos - self.read_pos

    def write(self, frames: Frames) -> int:
        """Append as many frames as fit; returns how many were written."""
        free = self.capacity - (self.write_pos - self.read_pos)
        n = min(len(frames), free)
        if n <= 0:
            return 0
        i = self.write_pos % self.capacity
        first = min(n, self.capacity - i)
        self.buf[i : i + first] = frames[:first]
        if n > first:
            self.buf[: n - first] = frames[first:n]
        self.write_pos += n
        return n

    def fill(self, out: npt.NDArray[np.float32], frames: int, dac_s: float, current_s: float, xrun: bool) -> None:
        """The output callback: copy up to ``frames`` into ``out``, zero the rest."""
        t0 = time.perf_counter()
        r = self.read_pos
        n = 0
        played = self.playing
        if played:
            start_level = self.start_level
            if start_level is not None:  # playback starts: begin exactly start_level frames ahead
                self.start_level = None
                if self.write_pos - r > start_level:
                    self.start_trimmed += self.write_pos - start_level - r
                    r = self.write_pos - start_level
            avail = self.write_pos - r
            n = frames if avail >= frames else max(0, avail)
            i = r % self.capacity
            first = min(n, self.capacity - i)
            out[:first] = self.buf[i : i + first]
            if n > first:
                out[first:n] = self.buf[: n - first]
            if start_level is not None:
                k = min(n, len(self._rise))
                np.multiply(out[:k], self._rise[:k], out=out[:k])
            if n < frames:
                fade = self._fade
                k = min(n, len(fade))
                if k:
                    np.multiply(out[n - k : n], fade[len(fade) - k :], out=out[n - k : n])
                self.underruns += 1
                self.underrun_frames += frames - n
                self.playing = False  # the player primes the buffer again before playback resumes
            self.read_pos = r + n
        if n < frames:
            out[n:] = 0.0
        if xrun:
            self.device_xruns += 1
        rec = self.records[self.callbacks % RECORD_SLOTS]
        rec[0] = r
        rec[1] = dac_s
        rec[2] = current_s
        rec[3] = self._clock.now()
        run = time.perf_counter() - t0
        rec[4] = run
        rec[5] = played
        if run > self.max_run_s:
            self.max_run_s = run
        self.callbacks += 1

    def latest_record(self, *, played: bool = False) -> tuple[int, float, float, float] | None:
        """The newest callback's (read_pos, dac_s, current_s, local_s), read without tearing.

        With ``played``, None unless that block was played from the ring (so its read
        position says where playback is)."""
        count = self.callbacks
        if count == 0:
            return None
        rec = self.records[(count - 1) % RECORD_SLOTS].copy()
        if played and not rec[5]:
            return None
        return int(rec[0]), float(rec[1]), float(rec[2]), float(rec[3])

    def run_times_s(self) -> npt.NDArray[np.float64]:
        n = min(self.callbacks, RECORD_SLOTS)
        return self.records[:n, 4].copy()
