"""The host's clock on the viewer's, from ping round trips (protocol.md §4.4).

Pure: the viewer's session records each ping it sends and each reply
(:meth:`ClockSync.add`); the decode and audio threads read the mapping.
"""

from __future__ import annotations


class ClockSync:
    """Maps the host's µs clock to ours from ping round trips (protocol.md §4.4).

    The host stamped its clock somewhere between our send and receive; the
    midpoint is the best guess, and the round trip with the smallest RTT among
    the last ``window`` bounds the error best.  (The reference pairs the stamp
    with "receive − RTT/2" wrongly signed, a bias of one RTT.)
    """

    def __init__(self, *, window: int = 32) -> None:
        self._samples: list[tuple[float, float]] = []  # (rtt_s, offset_s = host − local)
        self._window = window
        self.last_rtt_s: float | None = None

    def add(self, sent_s: float, received_s: float, server_time_us: int) -> None:
        rtt = received_s - sent_s
        if rtt < 0:
            return
        self.last_rtt_s = rtt
        self._samples.append((rtt, server_time_us / 1e6 - (sent_s + received_s) / 2))
        del self._samples[: -self._window]

    @property
    def offset_s(self) -> float | None:
        """Host clock minus local clock, seconds; None until a ping came back."""
        return min(self._samples)[1] if self._samples else None

    @property
    def min_rtt_s(self) -> float | None:
        return min(self._samples)[0] if self._samples else None

    def to_local(self, server_time_us: int) -> float | None:
        off = self.offset_s
        return None if off is None else server_time_us / 1e6 - off
