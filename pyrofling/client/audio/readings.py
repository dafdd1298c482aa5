"""What the audio player measures while it plays: buffer and speed readings, and click-timed latency.

The test tone carries a click every second of the host's clock; finding it in
what the player queues, and later when the device plays that sample, times
audio end to end.  Everything here is written by the player thread and read,
under a lock, by whoever asks for the statistics.
"""

from __future__ import annotations

import statistics
import threading
from collections import deque
from typing import Any

import numpy as np

from pyrofling.core.samples import recent_samples, tail
from pyrofling.core.viewer.audio_control import DeviceClock
from pyrofling.core.viewer.clock_sync import HostClock

#: The test tone's click period (on the host's clock), seconds.
CLICK_PERIOD_S = 1.0
#: Playback readings and latencies kept for the statistics (flat memory): ~2.5 min at ~40 updates a second.
AUDIO_SAMPLES_KEPT = 6_000


class PlaybackReadings:
    """Buffer level and speed per update, and the latency of each click heard."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: Per update while playing: (seconds since the first audio, buffered ms, speed).
        self.samples: deque[tuple[float, float, float]] = recent_samples(AUDIO_SAMPLES_KEPT)
        self.latency_ms: deque[float] = recent_samples(AUDIO_SAMPLES_KEPT)
        self._pending: list[tuple[int, float, int]] = []  # (ring position, capture time here, underruns then)
        self._started_s: float | None = None

    def started(self, now: float) -> None:
        """Audio arrived: readings count their time from the first of it."""
        if self._started_s is None:
            self._started_s = now

    def record(self, now: float, buffered_s: float, speed: float) -> None:
        self.started(now)
        assert self._started_s is not None
        with self._lock:
            self.samples.append((now - self._started_s, buffered_s * 1000, speed))

    def click_found(self, pos: int, pts_us: int, input_offset_s: float, host_clock: HostClock, underruns: int) -> bool:
        """A click queued at ring position ``pos``: which click of the host's clock it is, when it was captured.

        False when it is no click of the test tone (loud programme audio) or the host's clock is not known yet.
        """
        estimate_s = pts_us / 1e6 + input_offset_s
        grid_s = round(estimate_s / CLICK_PERIOD_S) * CLICK_PERIOD_S
        if abs(estimate_s - grid_s) > 0.02:
            return False
        capture_local = host_clock.to_local(round(grid_s * 1e6))
        if capture_local is None:
            return False
        self._pending.append((pos, capture_local, underruns))
        return True

    def resolve_clicks(self, read_pos: int, underruns: int, clock: DeviceClock) -> None:
        """Clicks the device has played by now get their latency: heard − captured."""
        keep = []
        for pos, capture_local, underruns_then in self._pending:
            if underruns != underruns_then:
                continue  # playback restarted in between: the mapping no longer holds
            if read_pos <= pos:
                keep.append((pos, capture_local, underruns_then))
                continue
            heard = clock.heard_at(pos)
            if heard is not None:
                with self._lock:
                    self.latency_ms.append((heard - capture_local) * 1000)
        self._pending = keep

    def recent(self, samples: int) -> tuple[list[tuple[float, float, float]], float | None]:
        """The last ``samples`` readings and the newest latency."""
        with self._lock:
            return tail(self.samples, samples), (self.latency_ms[-1] if self.latency_ms else None)

    def summary(self, target_ms: float, settle_s: float) -> dict[str, Any]:
        """Distributions of the buffer (all, and after ``settle_s``), the speed and the latency."""
        with self._lock:
            samples = list(self.samples)
            latency = list(self.latency_ms)
        settled = [x for x in samples if x[0] >= settle_s]
        out: dict[str, Any] = {}
        out.update(_distribution("buffered_ms", [b for _t, b, _s in samples], target_ms))
        out.update(_distribution("buffered_settled_ms", [b for _t, b, _s in settled], target_ms))
        out.update(_rates("rate", [s for _t, _b, s in samples]))
        out.update(_rates("rate_settled", [s for _t, _b, s in settled]))
        out["latency_ms_median"] = statistics.median(latency) if latency else None
        out["latency_ms_p95"] = float(np.percentile(latency, 95)) if latency else None
        out["latency_ms_samples"] = latency[-500:]
        out["series"] = [(round(t, 3), round(b, 3), round((s - 1) * 1e6, 1)) for t, b, s in samples[::10]]
        return out


def _distribution(name: str, values: list[float], target: float) -> dict[str, Any]:
    if not values:
        return {f"{name}_median": None}
    a = np.asarray(values)
    dev = np.abs(a - target)
    return {
        f"{name}_median": float(np.median(a)),
        f"{name}_p1": float(np.percentile(a, 1)),
        f"{name}_p99": float(np.percentile(a, 99)),
        f"{name}_min": float(a.min()),
        f"{name}_max": float(a.max()),
        f"{name}_dev_p99": float(np.percentile(dev, 99)),
    }


def _rates(name: str, speeds: list[float]) -> dict[str, Any]:
    if not speeds:
        return {f"{name}_mean_abs_ppm": None}
    s = np.asarray(speeds)
    a = s - 1.0
    c = np.abs(1200.0 * np.log2(s))  # cents
    return {
        f"{name}_mean_abs_ppm": float(np.mean(np.abs(a)) * 1e6),
        f"{name}_max_abs_ppm": float(np.max(np.abs(a)) * 1e6),
        f"{name}_mean_ppm": float(np.mean(a) * 1e6),
        f"{name}_wobble_ppm": float(np.std(a) * 1e6),
        f"{name}_mean_abs_cents": float(np.mean(c)),
        f"{name}_max_abs_cents": float(np.max(c)),
    }
