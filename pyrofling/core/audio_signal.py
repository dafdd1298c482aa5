"""Sample-level audio helpers with no I/O: the test tone, click detection, concealment fades, PCM packing.

The test tone (:class:`ClickTone`) is a quiet sine with a loud click at every whole
``click_period_s`` of the host's clock, so a viewer that finds the click at its
output knows exactly when it was captured (the nearest click instant to the
chunk's pts) and can time audio end to end, as the frame marker does for video.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

Frames = npt.NDArray[np.float32]  # (frames, channels), float32 in [-1, 1]

#: Click amplitude and the detector's threshold: far above the tone, far below clipping.
CLICK_LEVEL = 0.9
CLICK_THRESHOLD = 0.55
TONE_LEVEL = 0.2


class ClickTone:
    """A 440 Hz sine at −14 dBFS with a 1 ms click at every multiple of ``click_period_s``.

    ``render(first_time_s, n, sample_rate_hz)`` returns the next ``n`` frames when the
    first of them was captured at ``first_time_s`` and the source's real sample rate is
    ``sample_rate_hz`` (the nominal rate times any clock skew).  The sine's phase runs on
    without gaps from one call to the next.
    """

    def __init__(self, channels: int = 2, *, frequency_hz: float = 440.0, click_period_s: float = 1.0) -> None:
        self.channels = channels
        self.frequency_hz = frequency_hz
        self.click_period_s = click_period_s
        self._phase = 0.0  # cycles
        self.clicks = 0

    def render(self, first_time_s: float, n: int, sample_rate_hz: float) -> Frames:
        step = self.frequency_hz / sample_rate_hz
        phases = self._phase + step * np.arange(n, dtype=np.float64)
        self._phase = (self._phase + step * n) % 1.0
        mono = (TONE_LEVEL * np.sin(2.0 * np.pi * phases)).astype(np.float32)
        if self.click_period_s > 0:
            end_s = first_time_s + n / sample_rate_hz
            k = math.ceil(first_time_s / self.click_period_s)
            while k * self.click_period_s < end_s:
                start = math.ceil((k * self.click_period_s - first_time_s) * sample_rate_hz - 1e-9)
                self._click(mono, start, round(sample_rate_hz / 1000))
                self.clicks += 1
                k += 1
        return np.repeat(mono[:, None], self.channels, axis=1)

    @staticmethod
    def _click(mono: Frames, start: int, length: int) -> None:
        # A 1 ms burst of a square wave at rate/8: sharp onset, no DC, survives Opus and resampling.
        idx = np.arange(max(0, start), min(len(mono), start + length))
        if len(idx):
            mono[idx] = np.where(((idx - start) // 4) % 2 == 0, CLICK_LEVEL, -CLICK_LEVEL)


class ClickDetector:
    """Finds click onsets in a stream of blocks (at most one per ``refractory`` frames)."""

    def __init__(self, refractory_frames: int, threshold: float = CLICK_THRESHOLD) -> None:
        self.refractory_frames = refractory_frames
        self.threshold = threshold
        self._quiet_until = -1  # absolute frame index before which nothing is reported

    def feed(self, block: Frames, first_index: int) -> list[int]:
        """Absolute frame indices of click onsets in ``block`` (frame ``first_index`` is its first)."""
        loud = np.flatnonzero(np.abs(block[:, 0]) > self.threshold)
        found: list[int] = []
        for i in loud:
            index = first_index + int(i)
            if index >= self._quiet_until:
                found.append(index)
                self._quiet_until = index + self.refractory_frames
        return found


def fade_out_from(last: npt.NDArray[np.float32], frames: int, fade_frames: int) -> Frames:
    """``frames`` of concealment after ``last`` (one frame): a linear fade from it to silence."""
    out = np.zeros((frames, len(last)), dtype=np.float32)
    n = min(frames, fade_frames)
    if n > 0:
        ramp = np.linspace(1.0, 0.0, n + 1, dtype=np.float32)[1:]
        out[:n] = ramp[:, None] * last[None, :]
    return out


def fade_in(block: Frames, fade_frames: int) -> None:
    """Ramp the start of ``block`` up from silence, in place (after concealment or a skip)."""
    n = min(len(block), fade_frames)
    if n > 0:
        block[:n] *= np.linspace(0.0, 1.0, n + 1, dtype=np.float32)[1:, None]


def fade_out(block: Frames) -> None:
    """Ramp the whole ``block`` down to silence, in place (before a skip)."""
    if len(block):
        block *= np.linspace(1.0, 0.0, len(block) + 1, dtype=np.float32)[1:, None]


def to_s16le(frames: Frames) -> bytes:
    """Interleaved little-endian 16-bit PCM, the reference's wire format for raw audio."""
    return (np.clip(frames, -1.0, 1.0) * 32767.0).round().astype("<i2").tobytes()


def from_s16le(data: bytes, channels: int) -> Frames:
    """Raises ValueError when ``data`` is not a whole number of frames."""
    frame_bytes = 2 * channels
    if channels <= 0 or len(data) % frame_bytes:
        raise ValueError(f"{len(data)} bytes is not a whole number of {channels}-channel S16 frames")
    pcm = np.frombuffer(data, dtype="<i2").reshape(-1, channels)
    return (pcm.astype(np.float32) / 32768.0).astype(np.float32)
