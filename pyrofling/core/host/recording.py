"""Decisions for the host's extra outputs (a recording, an RTMP broadcast); pure.

The outputs take the packets the host already encoded for its viewers and mux
them into a container. Three things need deciding. Where a container may
start: at a key frame, since an intra-refresh stream has no other entry point
(:class:`~pyrofling.core.bitstream.KeyGate`, the viewer's gate too). The
timestamps: zero at that frame, and strictly increasing in each stream, as
muxers demand. When to try again after a broadcast server went away:
exponential backoff, reset once a connection has stayed up.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class StreamClock:
    """The host's µs timestamps → one container's: zero at its first video frame, strictly increasing per stream."""

    origin_us: int | None = None
    _last: dict[str, int] = field(default_factory=dict)

    def start(self, pts_us: int) -> None:
        self.origin_us = pts_us
        self._last.clear()

    def stamp(self, stream: str, pts_us: int) -> int | None:
        """The container time of a packet in µs, or None when it comes before the container started."""
        if self.origin_us is None:
            return None
        t = pts_us - self.origin_us
        if t < 0:
            return None  # audio captured before the first video frame
        last = self._last.get(stream)
        if last is not None and t <= last:
            t = last + 1
        self._last[stream] = t
        return t


@dataclass(slots=True)
class Backoff:
    """When to reconnect: ``initial_s``, doubling up to ``max_s``; back to ``initial_s`` after ``stable_s`` up."""

    initial_s: float = 0.5
    max_s: float = 15.0
    stable_s: float = 10.0
    delay_s: float = 0.0
    failures: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.initial_s <= self.max_s:
            raise ValueError("backoff needs 0 < initial_s <= max_s")
        self.delay_s = self.initial_s

    def failed(self, now: float, up_since: float | None = None) -> float:
        """A connection failed (or never came up) at ``now``; returns when to try again."""
        if up_since is not None and now - up_since >= self.stable_s:
            self.delay_s = self.initial_s  # it worked for a while: this is a new outage, start small
        retry_at = now + self.delay_s
        self.delay_s = min(self.max_s, self.delay_s * 2)
        self.failures += 1
        return retry_at
