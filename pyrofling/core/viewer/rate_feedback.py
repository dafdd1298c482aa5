"""The viewer's half of rate control (protocol.md §7.10): what arrived, and when, every 50 ms.

Pure.  The connection tells :class:`ArrivalRecorder` of every datagram off the
wire (its size) and of every video datagram's packet; :meth:`ArrivalRecorder.poll`
returns a RATE_FEEDBACK when one is due.  The host, which knows when it sent
each packet, turns these into the link's queueing delay and rate
(:mod:`pyrofling.core.host.congestion`): the viewer needs no clock in common with it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from pyrofling.wire import RATE_FEEDBACK_INTERVAL_S, ArrivalSample, RateDecider, RateFeedback, StreamRate

#: Packets remembered (a late datagram of one still adds to its count).
_REMEMBERED = 32


@dataclass(slots=True)
class _Arrivals:
    datagrams: int
    first_s: float
    last_s: float


class ArrivalRecorder:
    """Counts and stamps arrivals; a RATE_FEEDBACK every ``interval_s`` while ``active``."""

    def __init__(self, interval_s: float = RATE_FEEDBACK_INTERVAL_S) -> None:
        self.interval_s = interval_s
        #: The host granted RATE_CONTROL and the stream runs.
        self.active = False
        self.sent = 0
        self._bytes = 0
        self._packets: OrderedDict[int, _Arrivals] = OrderedDict()
        self._touched: list[int] = []
        self._last_s: float | None = None

    def datagram(self, size: int, now: float) -> None:
        """Any datagram from the host, ``size`` bytes as it came off the wire."""
        if not self.active:
            return  # a host that did not grant it: keep nothing
        self._bytes += size
        if self._last_s is None:
            self._last_s = now

    def video(self, seq: int, now: float) -> None:
        """A datagram of video packet ``seq`` (data or repair, first transmission or resent, needed or not)."""
        if not self.active:
            return
        record = self._packets.get(seq)
        if record is None:
            record = self._packets[seq] = _Arrivals(0, now, now)
            if len(self._packets) > _REMEMBERED:
                self._packets.popitem(last=False)
        record.datagrams += 1
        record.last_s = now
        if not self._touched or self._touched[-1] != seq:
            if seq in self._touched:
                self._touched.remove(seq)
            self._touched.append(seq)
            del self._touched[:-_REMEMBERED]  # a report names the newest few anyway

    def next_timer(self) -> float | None:
        if not self.active or self._last_s is None:
            return None
        return self._last_s + self.interval_s

    def poll(self, now: float) -> RateFeedback | None:
        """The RATE_FEEDBACK due at ``now``, if one is (its samples: the packets touched since the last one)."""
        due = self.next_timer()
        if due is None or now < due:
            return None
        assert self._last_s is not None
        samples = [
            ArrivalSample(seq, r.datagrams, int(r.first_s * 1e6), int(r.last_s * 1e6))
            for seq in self._touched
            if (r := self._packets.get(seq)) is not None
        ]
        msg = RateFeedback.build(self.sent, int((now - self._last_s) * 1e6), self._bytes, samples)
        self.sent += 1
        self._bytes = 0
        self._touched.clear()
        self._last_s = now
        return msg


_WHY = {
    RateDecider.YOUR_LINK: "fitted to your link",
    RateDecider.CEILING: "the host's ceiling",
    RateDecider.OTHER_VIEWER: "set by another viewer's link (the player's)",
    RateDecider.FLOOR: "the host's floor",
    RateDecider.FIXED: "fixed by the host",
}


def describe_rate(rate: StreamRate) -> str:
    """One line for the HUD and the log: the encoder's bitrate and why."""
    why = _WHY.get(RateDecider(rate.decided_by), "?") if rate.decided_by in RateDecider._value2member_map_ else "?"
    text = f"stream {rate.bitrate_kbits / 1000:.2f} Mbit/s ({why})"
    if rate.your_link_kbits:
        text += f", your link carries about {rate.your_link_kbits / 1000:.2f}"
    return text


def narrower_than_stream(rate: StreamRate, received_kbits: float) -> bool:
    """This viewer's link is narrower than the stream someone else's link set, and the stream uses what the link
    carries (``received_kbits``: the video this viewer received in the last second): its picture will suffer.
    A small picture at a high bitrate sends far less than its bitrate, and then a low estimate (from frames of
    a datagram or two) squeezes nothing."""
    narrower = rate.decided_by == RateDecider.OTHER_VIEWER and 0 < rate.your_link_kbits < 0.9 * rate.bitrate_kbits
    return narrower and received_kbits >= 0.8 * rate.your_link_kbits


class NarrowLinkWarning:
    """When to warn that this viewer's link is narrower than the stream another viewer's link set: once the
    squeeze (:func:`narrower_than_stream`) has held for ``hold_s``, then not again until it has passed.

    A moment's squeeze is not worth a warning: on a machine short of CPU a few late datagrams read as a queue, the
    host cuts that viewer's estimate to what a small picture was sending, and it grows back within seconds.
    """

    def __init__(self, hold_s: float = 3.0) -> None:
        self.hold_s = hold_s
        self._since: float | None = None
        self._warned = False

    def update(self, rate: StreamRate | None, received_kbits: float, now: float) -> str | None:
        """The warning to log now, if one is due (``received_kbits``: the video received in the last second)."""
        if rate is None or not narrower_than_stream(rate, received_kbits):
            self._since, self._warned = None, False
            return None
        if self._since is None:
            self._since = now
        if self._warned or now - self._since < self.hold_s:
            return None
        self._warned = True
        return f"{describe_rate(rate)}: the picture will break up where your link drops it"
