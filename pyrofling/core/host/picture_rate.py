"""How many pictures a second the host makes, from what its viewers ask (protocol.md §7.16); pure.

A viewer that negotiated PICTURE_RATE may ask for fewer pictures a second than the host's own rate
(VIEWER_PICTURE_RATE): one whose pictures come too unevenly for its display's rate asks for half of it, and
then shows each picture two refreshes instead of repeating some of them. There is one encode for every viewer,
so the host makes the lowest rate any viewer watching asks for, of those its own rate divides into whole
pictures (144 → 72 or 48, 60 → 30): a picture the slowest viewer could not show in time would repeat there
anyway, and the others get the same pictures at an even pace. When that viewer leaves or takes its ask back,
the next lowest ask stands, or the host's own rate.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyrofling.core.host.state import HostOutput

#: The most a viewer's ask divides the host's rate by.
MAX_DIVISOR = 4
#: An ask this much below a whole fraction of the host's rate still takes it (a 143.86 Hz display's half,
#: 71.93, takes 72 of a 144 fps host: the phase lock closes that gap, as it does at the full rate).
TOLERANCE = 0.01


@dataclass(frozen=True, slots=True)
class SetPictureRate(HostOutput):
    """Make ``fps / divisor`` pictures a second from the next tick on (the encoder opened anew at that rate:
    its first picture an IDR); CODEC_PARAMETERS carry the rate as ``fps``/``divisor``."""

    fps: int
    divisor: int
    #: The viewer whose ask set it (None: the host's own rate again).
    conn_id: int | None


def divisor_for(fps: int, asked_mhz: int) -> int:
    """The smallest whole divisor of ``fps`` (up to :data:`MAX_DIVISOR`) that makes at most the rate asked; 1 for
    no ask (0), an ask at or above ``fps``, or one no divisor reaches."""
    if asked_mhz <= 0 or fps <= 0:
        return 1
    asked_hz = asked_mhz / 1000
    for divisor in range(1, MAX_DIVISOR + 1):
        if fps % divisor == 0 and fps / divisor <= asked_hz * (1 + TOLERANCE):
            return divisor
    return 1


class PictureRateFollower:
    """:meth:`asked` as viewers ask, :meth:`left` as they go; each returns the change to make, if any."""

    def __init__(self, fps: int) -> None:
        self.fps = fps
        #: Each viewer's ask, as the divisor it makes (only those above 1).
        self.asks: dict[int, int] = {}
        self.divisor = 1
        self.changes = 0

    @property
    def rate_hz(self) -> float:
        return self.fps / self.divisor

    def asked(self, conn_id: int, rate_mhz: int) -> list[HostOutput]:
        divisor = divisor_for(self.fps, rate_mhz)
        if divisor > 1:
            self.asks[conn_id] = divisor
        else:
            self.asks.pop(conn_id, None)
        return self._follow()

    def left(self, conn_id: int) -> list[HostOutput]:
        if self.asks.pop(conn_id, None) is None:
            return []
        return self._follow()

    def _follow(self) -> list[HostOutput]:
        lowest = max(self.asks.items(), key=lambda item: (item[1], -item[0]), default=None)
        divisor = lowest[1] if lowest is not None else 1
        if divisor == self.divisor:
            return []
        self.divisor = divisor
        self.changes += 1
        return [SetPictureRate(self.fps, divisor, lowest[0] if lowest is not None else None)]
