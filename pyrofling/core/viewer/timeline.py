"""Second by second: what a viewer received and saw, for benches that change the network over time.

Pure.  The viewer's shell takes a :class:`Snapshot` of its running totals once a
second, with the latency samples added since the last one; :class:`Timeline`
keeps one row per interval (bounded).  Times are the monotonic clock, which
every process on the machine shares, so a bench can line the rows up with the
host's bitrate changes and the relay's schedule.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Running totals at ``t`` (monotonic seconds)."""

    t: float
    bytes_received: int
    refreshes: int  # judged refreshes (the scene check), 0 when not judging
    good_refreshes: int
    frames_shown: int
    stream_kbits: int | None  # the encoder's bitrate, as the host last said (STREAM_RATE)


class Timeline:
    """Rows of (interval end, its length, received Mbit/s, good refreshes %, frames, latencies, stream kbit/s)."""

    def __init__(self, max_rows: int = 3600) -> None:
        self.rows: deque[dict[str, Any]] = deque(maxlen=max_rows)
        self._last: Snapshot | None = None

    def sample(self, snap: Snapshot, latencies_ms: list[float]) -> None:
        last, self._last = self._last, snap
        if last is None or snap.t <= last.t:
            return
        dt = snap.t - last.t
        judged = snap.refreshes - last.refreshes
        self.rows.append(
            {
                "t": round(snap.t, 3),
                "seconds": round(dt, 3),  # the interval: the last one, cut short by the end, may be less than 1
                "received_mbits": round((snap.bytes_received - last.bytes_received) * 8 / dt / 1e6, 3),
                "good_pct": round(100 * (snap.good_refreshes - last.good_refreshes) / judged, 2) if judged else None,
                "refreshes": judged,
                "frames": snap.frames_shown - last.frames_shown,
                "latency_ms": [round(x, 1) for x in latencies_ms],
                "stream_kbits": snap.stream_kbits,
            }
        )
