"""The one way out of the host: every datagram it sends, to whom, and when (protocol.md §4, §7.5, §7.9, §7.10).

Pure.  :class:`~pyrofling.core.host.sessions.HostSessions` hands each encoded
video or audio unit here with the viewers that get it, and so does every reply
the protocol makes over UDP (PING_REPLY, PATH_CHALLENGE, resends).  The shell
asks :meth:`MediaOut.due` (through ``HostSessions.datagrams_to_send(now)``)
after every input and whenever ``HostSessions.next_timer()`` comes due, and sends
what it gets, in order, then asks once more (for repair whose data went out in
the first answer): that is its whole media path.

Video goes through each viewer's own packetizer (its sequence numbers and FEC,
one FEC encode per packet shared by every viewer with the same plan, made when
the packet's first repair datagram is due, after its data) into its paced queue,
so a frame never leaves as one burst.  Audio, replies and resends go
out at once, ahead of queued video: they are small, and any queueing is latency.

Browsers of the web door are the other kind of viewer on the same way out
(:attr:`MediaOut.browsers`): each unit goes to them whole, over their
WebTransport session or WebSocket, as their core decides (a unit skipped to the
next key frame rather than queued behind bytes that pile up); what to send them
comes back from :meth:`MediaOut.video` and :meth:`MediaOut.audio`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, fields

from pyrofling.core.host.congestion import KEY_FRAME_PACING
from pyrofling.core.host.packetizer import Datagram, MediaPacket, RepairBlocks
from pyrofling.core.host.state import RemoteViewer, SendDatagram
from pyrofling.core.host.web_viewers import WebOutput, WebViewers
from pyrofling.fec.codec import FecPlan, block_count
from pyrofling.wire import StreamType


@dataclass(slots=True)
class MediaCounters:
    """What left the host beyond the media itself, for ``--stats-json`` (names as the benches read them)."""

    #: FEC repair datagrams (video and audio) and their bytes on the wire; of which audio's.
    repair_datagrams_sent: int = 0
    repair_bytes_sent: int = 0
    audio_repair_bytes_sent: int = 0
    #: Datagrams sent again because a viewer asked (NACK).
    resent_datagrams: int = 0
    resent_bytes: int = 0
    #: Video datagrams a viewer's paced queue had no room for (counted when the viewer leaves).
    queue_dropped: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class MediaOut:
    """What waits to leave: replies, resends and audio at once; each viewer's video through its pacer."""

    def __init__(self) -> None:
        self.counters = MediaCounters()
        #: The latest time it was told (the pacers' state is as of then).
        self._now = float("-inf")
        self._at_once: deque[SendDatagram] = deque()
        #: The browsers' core, where the host has a web door (None: no browsers).
        self.browsers: WebViewers | None = None

    def at_once(self, datagram: SendDatagram, now: float) -> None:
        """A datagram that goes ahead of any queued video (a reply, a resend)."""
        self._now = max(self._now, now)
        self._at_once.append(datagram)
        if datagram.resend:
            self.counters.resent_datagrams += 1
            self.counters.resent_bytes += len(datagram.data)

    def video(
        self, viewers: list[RemoteViewer], media: MediaPacket, *, idr: bool, now: float,
        backlog: dict[int, int] | None = None,
    ) -> list[WebOutput]:  # fmt: skip
        """One encoded video unit into each viewer's paced queue (an IDR, on a link rate control has measured,
        leaves at just over the link's rate: protocol.md §7.10), and what to send each browser (``backlog``: the
        bytes still waiting to leave for each)."""
        self._now = max(self._now, now)
        # One FEC encode per packet, whatever the viewer count, and only once the data is on its way.
        repair_cache: dict[FecPlan, RepairBlocks] = {}
        data_blocks = block_count(len(media.data))
        for conn in viewers:
            assert conn.packetizer is not None and conn.paced is not None
            seq = conn.packetizer.next_seq(StreamType.VIDEO)
            datagrams = conn.packetizer.packetize_video(media, repair_cache=repair_cache)
            self._count_repair(datagrams[data_blocks:], conn.seal_overhead, audio=False)
            link = conn.link
            weight = KEY_FRAME_PACING if idr and link is not None and link.capacity_bps is not None else 1.0
            # Sealed as each leaves the queue, not as it joins: counters reach the viewer in order (§7.7).
            conn.paced.push(datagrams, tag=seq if link is not None else None, weight=weight)
            if link is not None:
                link.video_packet(len(media.data))
            if idr:
                conn.awaiting_idr = False
                conn.idr_sent_s = now
        if self.browsers is None:
            return []
        return self.browsers.video(media.data, capture_us=media.pts_us, pts_us=media.pts_us, idr=idr,
                                   backlog=backlog or {}, now=now)  # fmt: skip

    def audio(
        self, viewers: list[RemoteViewer], media: MediaPacket, now: float, backlog: dict[int, int] | None = None
    ) -> list[WebOutput]:
        """One encoded audio unit to each viewer, at once: past the pacer, sharing the viewer's link; and what to
        send each browser whose bytes are not piling up."""
        self._now = max(self._now, now)
        data_blocks = block_count(len(media.data))
        for conn in viewers:
            assert conn.packetizer is not None and conn.udp_address is not None
            wire = [conn.outgoing(d) for d in conn.packetizer.packetize(media)]
            self._count_repair(wire[data_blocks:], 0, audio=True)
            if conn.link is not None:
                conn.link.count(sum(map(len, wire)))
            self._at_once.extend(SendDatagram(conn.udp_address, d) for d in wire)
        return self.browsers.audio(media.data, pts_us=media.pts_us, backlog=backlog or {}) if self.browsers else []

    def due(self, viewers: list[RemoteViewer], now: float) -> list[SendDatagram]:
        """Everything that may leave at ``now``, in the order it should: what goes at once, then each viewer's
        video its pacer releases."""
        self._now = max(self._now, now)
        out = list(self._at_once)
        self._at_once.clear()
        for conn in viewers:
            if conn.paced is not None and conn.udp_address is not None and len(conn.paced):
                address = conn.udp_address
                out += [SendDatagram(address, d) for d in conn.paced.pop_due(now)]
        return out

    def next_timer(self, viewers: list[RemoteViewer]) -> float | None:
        """When something next may leave: now if anything waits to go at once, else the earliest pacer."""
        if self._at_once:
            return self._now
        due = [conn.paced.next_timer(self._now) for conn in viewers if conn.paced is not None and len(conn.paced)]
        return min((d for d in due if d is not None), default=None)

    def left(self, conn: RemoteViewer) -> None:
        """A viewer is gone: what its queue could not take is counted (what it still held goes with it)."""
        if conn.paced is not None:
            self.counters.queue_dropped += conn.paced.dropped

    def _count_repair(self, repair: Sequence[Datagram], seal_overhead: int, *, audio: bool) -> None:
        size = sum(map(len, repair)) + len(repair) * seal_overhead
        self.counters.repair_datagrams_sent += len(repair)
        self.counters.repair_bytes_sent += size
        if audio:
            self.counters.audio_repair_bytes_sent += size
