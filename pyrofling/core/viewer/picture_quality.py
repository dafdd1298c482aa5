"""What the player saw, refresh by refresh: a clean picture, a corrupt one, or a stale one.

Pure (numpy only).  "Frames shown" hides both freezes and corruption, so the
benches judge every display refresh instead:

* :func:`tile_error` compares a decoded picture of the test scene with the
  scene's own rendering of the same frame id (read from the frame marker), in the
  rows without film grain or the frame counter (grain is noise by design; the
  counter's digits change every frame and a starved encoder blurs them).  The rows
  are split into 64×64 tiles, luma sampled every 8th pixel; the worst tile's mean
  absolute error decides.  Calibration on this machine (``ultrafast``, 200 frames,
  one frame dropped before the decoder): clean pictures measure at most 5.6 at
  720p60 from 1.5 to 10 Mbit/s (1.2 at 4 Mbit/s and up) and 5.3 at 1080p60 from 3
  to 20 Mbit/s; pictures decoded through the lost frame have a median of 40–120
  until intra refresh or an IDR repairs them.  The threshold is 10.  Below those
  bitrates the encoder no longer reproduces the scene's structure (720p at
  0.8 Mbit/s: clean pictures measure 44) and the check is not valid.
* :class:`RefreshQuality` classifies each refresh by the picture on screen:
  *good* (clean and at most ``stale_frames`` frames older than the stream's
  usual latency), *corrupt* (not clean, or the frame id could not be read),
  *stale* (clean but too old), or *blank* (nothing shown yet).  A freeze is a
  run of refreshes that are not good; its length is the run's time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

#: Worst-tile mean absolute luma error above which a picture is not clean.
CLEAN_TILE_ERROR = 10.0
#: Tile size in sampled pixels (every ``STEP``-th pixel): 8 × 8 = 64 picture pixels.
TILE = 8
STEP = 8


def tile_error(
    decoded: npt.NDArray[np.uint8], reference: npt.NDArray[np.uint8], rows: list[tuple[int, int]] | None = None
) -> float:
    """The worst 64×64 tile's mean absolute luma error between two pictures of the same size, within ``rows``
    (row ranges; None: all)."""
    if rows is not None:
        return max((tile_error(decoded[r0:r1], reference[r0:r1]) for r0, r1 in rows if r1 > r0), default=0.0)
    a = decoded[::STEP, ::STEP]
    b = reference[::STEP, ::STEP]
    d = np.maximum(a, b) - np.minimum(a, b)  # |a − b| without leaving uint8
    height, width = (d.shape[0] // TILE) * TILE, (d.shape[1] // TILE) * TILE
    if height == 0 or width == 0:
        return float(d.mean()) if d.size else 0.0
    tiles = d[:height, :width].reshape(height // TILE, TILE, width // TILE, TILE).sum(axis=(1, 3), dtype=np.uint32)
    return float(tiles.max()) / (TILE * TILE)


class RefreshKind:
    GOOD = "good"
    CORRUPT = "corrupt"
    STALE = "stale"
    BLANK = "blank"


@dataclass(slots=True)
class RefreshQuality:
    """Per-refresh verdicts and their totals.  Call :meth:`refresh` once per display refresh.

    ``period_s`` is the stream's frame period.  A picture's age is its capture
    time's distance from the refresh, less the stream's usual latency (the 10th
    percentile of the latency of freshly presented pictures over the last
    ``window`` of them), in frame periods.
    """

    period_s: float
    stale_frames: float = 2.0
    window: int = 240
    refreshes: int = 0
    good: int = 0
    corrupt: int = 0
    stale: int = 0
    blank: int = 0
    freezes: int = 0
    longest_freeze_s: float = 0.0
    #: Freeze lengths over this count as freezes (a single repeated refresh is not one).
    freeze_min_s: float = 0.05
    #: (when it ended, its length) of the last freezes, seconds.
    freeze_log: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=1000))
    #: (when, kind) of the last refreshes that were not good: where single lost refreshes fall.
    not_good_log: deque[tuple[float, str]] = field(default_factory=lambda: deque(maxlen=1000))
    _run_s: float = 0.0
    _now: float = 0.0
    _latencies: deque[float] = field(default_factory=deque)
    _floor_s: float | None = None
    _since_floor: int = 0

    def refresh(self, now: float, *, capture_s: float | None, clean: bool | None, fresh: bool) -> str:
        """The refresh at ``now`` shows a picture captured at ``capture_s`` (our clock; None: unknown).

        ``clean``: the picture matched the scene (None: no picture yet).  ``fresh``: it is new at this refresh.
        """
        self.refreshes += 1
        self._now = now
        if clean is None:
            kind = RefreshKind.BLANK
        elif not clean or capture_s is None:
            kind = RefreshKind.CORRUPT
        else:
            latency = now - capture_s
            if fresh:
                self._learn(latency)
            floor = self._floor_s if self._floor_s is not None else latency
            kind = RefreshKind.STALE if (latency - floor) / self.period_s > self.stale_frames else RefreshKind.GOOD
        setattr(self, kind, getattr(self, kind) + 1)
        if kind == RefreshKind.GOOD:
            self._end_run()
        elif kind != RefreshKind.BLANK:
            self._run_s += self.period_s
            self.not_good_log.append((now, kind))
        return kind

    def finish(self) -> None:
        """Count a freeze still running at the end."""
        self._end_run()

    def _end_run(self) -> None:
        if self._run_s >= self.freeze_min_s:
            self.freezes += 1
            self.freeze_log.append((self._now, self._run_s))
        self.longest_freeze_s = max(self.longest_freeze_s, self._run_s)
        self._run_s = 0.0

    def _learn(self, latency_s: float) -> None:
        lat = self._latencies
        lat.append(latency_s)
        if len(lat) > self.window:
            lat.popleft()
        self._since_floor += 1
        if self._floor_s is None or self._since_floor >= 30:
            self._since_floor = 0
            self._floor_s = float(np.percentile(np.fromiter(lat, float), 10))

    def summary(self) -> dict[str, Any]:
        judged = self.refreshes - self.blank
        return {
            "refreshes": self.refreshes,
            "good_refreshes": self.good,
            "good_refreshes_pct": 100.0 * self.good / judged if judged else 0.0,
            "corrupt_refreshes": self.corrupt,
            "stale_refreshes": self.stale,
            "blank_refreshes": self.blank,
            "freezes": self.freezes,
            "longest_freeze_ms": 1000.0 * max(self.longest_freeze_s, self._run_s),
            "freeze_log": [(round(t, 3), round(length, 3)) for t, length in self.freeze_log],
            "not_good_log": [(round(t, 3), kind) for t, kind in self.not_good_log],
        }
