"""The host's clock on the viewer's, from ping round trips (protocol.md §4.4).

Pure: the viewer's session records each ping it sends and each reply
(:meth:`ClockSync.add`); the decode and audio threads get the mapping as it stands,
an immutable :class:`HostClock`, with each packet they are handed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HostClock:
    """The host's clock on ours, as last measured: immutable, so another thread may keep it."""

    #: Host clock minus local clock, seconds; None until a ping came back.
    offset_s: float | None = None

    def to_local(self, server_time_us: int) -> float | None:
        return None if self.offset_s is None else server_time_us / 1e6 - self.offset_s


class ClockSync:
    """Maps the host's µs clock to ours from ping round trips (protocol.md §4.4).

    The host stamped its clock somewhere between our send and receive; the
    midpoint is the best guess, and the round trip with the smallest RTT among
    the last ``window`` bounds the error best.  (The reference pairs the stamp
    with "receive − RTT/2" wrongly signed, a bias of one RTT.)
    """

    def __init__(self, *, window: int = 32, known_offset_s: float | None = None) -> None:
        self._samples: list[tuple[float, float]] = []  # (rtt_s, offset_s = host − local)
        self._window = window
        self.last_rtt_s: float | None = None
        #: The offset when it is known, not estimated (a host on this machine: 0); round trips are still kept.
        self._known_offset_s = known_offset_s
        #: The mapping now (replaced, never changed, at each reply).
        self.mapping = HostClock(known_offset_s)

    def add(self, sent_s: float, received_s: float, server_time_us: int) -> None:
        rtt = received_s - sent_s
        if rtt < 0:
            return
        self.last_rtt_s = rtt
        self._samples.append((rtt, server_time_us / 1e6 - (sent_s + received_s) / 2))
        del self._samples[: -self._window]
        if self._known_offset_s is None:
            self.mapping = HostClock(min(self._samples)[1])

    @property
    def offset_s(self) -> float | None:
        """Host clock minus local clock, seconds; None until a ping came back."""
        return self.mapping.offset_s

    @property
    def min_rtt_s(self) -> float | None:
        return min(self._samples)[0] if self._samples else None

    def to_local(self, server_time_us: int) -> float | None:
        return self.mapping.to_local(server_time_us)
