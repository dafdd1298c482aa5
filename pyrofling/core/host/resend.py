"""The host's side of NACK (protocol.md §7.9): recent packets kept per viewer, resent within a budget.

Pure.  The viewer's :class:`~pyrofling.core.host.packetizer.Packetizer` hands every
packet's data datagrams (plaintext, before sealing) to :meth:`RetainedPackets.keep`;
a NACK from that viewer asks :meth:`RetainedPackets.resend` for some of them
again.  What a viewer can make the host send is bounded, so a viewer that lies
in its NACKs only spends its own link:

* only the last ``packets`` packets of each stream are kept (older ones are past
  their frame's deadline anyway), and at most ``max_bytes`` in all;
* each datagram is resent at most ``max_resends`` times (as often as a viewer
  asks for one within its frame's wait on a short round trip: a link's bad spell
  can take several resends of one block in a row, and a refused one costs the
  viewer a key frame), in two copies at once from the second time on;
* resends spend a budget that each packet sent adds ``budget_ratio`` of its size to
  (capped at ``max_budget_bytes``): resends can never be more than that share of
  the viewer's own stream.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from pyrofling.wire import Nack, StreamType


@dataclass(slots=True)
class _Kept:
    datagrams: list[bytes]
    resends: list[int]


@dataclass(slots=True)
class RetainedPackets:
    packets: int = 32
    max_bytes: int = 8 * 1024 * 1024
    max_resends: int = 12
    budget_ratio: float = 0.5
    max_budget_bytes: int = 512 * 1024
    budget_bytes: float = 64 * 1024.0
    resent: int = 0
    resent_bytes: int = 0
    #: NACKs or blocks refused, by reason.
    refused_unknown: int = 0
    refused_repeats: int = 0
    refused_budget: int = 0
    _kept: dict[StreamType, OrderedDict[int, _Kept]] = field(
        default_factory=lambda: {StreamType.VIDEO: OrderedDict(), StreamType.AUDIO: OrderedDict()}
    )
    _bytes: int = 0

    def keep(self, stream: StreamType, seq: int, datagrams: list[bytes]) -> None:
        """A packet's data datagrams, as first sent (sequence numbers only grow)."""
        size = sum(map(len, datagrams))
        self.budget_bytes = min(self.max_budget_bytes, self.budget_bytes + self.budget_ratio * size)
        kept = self._kept[stream]
        kept[seq] = _Kept(datagrams, [0] * len(datagrams))
        self._bytes += size
        while kept and (len(kept) > self.packets or self._bytes > self.max_bytes):
            _, old = kept.popitem(last=False)
            self._bytes -= sum(map(len, old.datagrams))

    def resend(self, nack: Nack) -> list[bytes]:
        """The datagrams a NACK asks for that may be sent again, in block order."""
        stream = StreamType.AUDIO if nack.stream else StreamType.VIDEO
        packet = self._kept[stream].get(nack.packet_seq)
        if packet is None:
            self.refused_unknown += 1
            return []
        blocks = range(len(packet.datagrams)) if nack.whole else nack.blocks()
        out: list[bytes] = []
        for i in blocks:
            if i >= len(packet.datagrams):
                self.refused_unknown += 1
                continue
            if packet.resends[i] >= self.max_resends:
                self.refused_repeats += 1
                continue
            data = packet.datagrams[i]
            # Asked again: the last resend was lost too, most likely in a bad spell of the link that is still
            # on. Two copies back to back then take two of its losses to be lost (a third round trip less often).
            copies = 2 if packet.resends[i] else 1
            if self.budget_bytes < copies * len(data):
                self.refused_budget += 1
                continue
            self.budget_bytes -= copies * len(data)
            packet.resends[i] += 1
            out += [data] * copies
        self.resent += len(out)
        self.resent_bytes += sum(map(len, out))
        return out

    def summary(self) -> dict[str, int]:
        return {
            "resent": self.resent,
            "resent_bytes": self.resent_bytes,
            "refused_unknown": self.refused_unknown,
            "refused_repeats": self.refused_repeats,
            "refused_budget": self.refused_budget,
        }
