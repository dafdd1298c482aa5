"""Encoded packets → datagrams for one viewer (protocol.md §4.2, §5).

Pure: no sockets, no clock.  The host keeps one :class:`Packetizer` per viewer
(own sequence counters, own FEC planner) and hands each encoded packet to it;
the returned datagrams go to the pacer in order: data blocks first, then repair
blocks.  Video's repair blocks may be left to compute until the first of them is
about to leave (:meth:`Packetizer.packetize_video`): the packet's
data goes out meanwhile, instead of waiting behind its repair.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyrofling.core.host.resend import RetainedPackets
from pyrofling.fec.codec import (
    BLOCK_BYTES,
    NO_FEC,
    FecPlan,
    block_count,
    encode_repair,
    max_mds_repair,
    seed_for_pts,
)
from pyrofling.fec.mds import encode_mds_repair, mds_plan
from pyrofling.fec.planner import AdaptivePlanner, FecPlanner, NoFecPlanner
from pyrofling.seqnum import SEQ14_MASK
from pyrofling.wire import StreamType, media_flags, media_header_prefix

#: Largest packet the wire can describe without the subpacket index wrapping (16 MiB).
MAX_PACKET_BYTES = (SEQ14_MASK + 1) * BLOCK_BYTES


@dataclass(frozen=True, slots=True)
class MediaPacket:
    """One encoder output unit: a video access unit or an audio chunk.  Times are µs."""

    data: bytes
    pts_us: int
    stream: StreamType = StreamType.VIDEO
    key_frame: bool = False
    dts_us: int | None = None  # None: same as pts (no B-frames)


class RepairBlocks:
    """One packet's repair blocks for one plan, computed the first time they are asked for (then kept): every
    viewer with that plan shares them."""

    __slots__ = ("_blocks", "_compute")

    def __init__(self, compute: Callable[[], list[bytes]]) -> None:
        self._compute: Callable[[], list[bytes]] | None = compute
        self._blocks: list[bytes] = []

    @property
    def computed(self) -> bool:
        return self._compute is None

    def blocks(self) -> list[bytes]:
        if self._compute is not None:
            self._blocks, self._compute = self._compute(), None
        return self._blocks


class LaterDatagram:
    """A repair datagram whose block is computed when it is about to leave; its length is known before."""

    __slots__ = ("_header", "_index", "_repair")

    def __init__(self, header: bytes, repair: RepairBlocks, index: int) -> None:
        self._header, self._repair, self._index = header, repair, index

    def __len__(self) -> int:
        return len(self._header) + BLOCK_BYTES  # repair blocks are always whole (§5.3)

    @property
    def computed(self) -> bool:
        return self._repair.computed

    def datagram(self) -> bytes:
        return self._header + self._repair.blocks()[self._index]


#: What a packetizer hands the pacer: a datagram, or one whose repair block is still to compute.
Datagram = bytes | LaterDatagram


def initial_sequences(cookie: int) -> tuple[int, int]:
    """First video and audio packet sequence numbers for a cookie (protocol.md §4.2)."""
    return cookie & SEQ14_MASK, ~cookie & SEQ14_MASK


class Packetizer:
    """Splits packets into datagrams with FEC for one viewer.

    ``video_planner`` chooses FEC for video (the reference sends none for audio;
    ``audio_planner`` adds audio repair blocks, which native viewers ignore).
    ``key_planner``, when given, plans key frames instead: they are the largest
    packets, so the likeliest to be hit, and the ones recovery from loss waits for.
    """

    def __init__(
        self,
        *,
        video_seq: int = 0,
        audio_seq: int = 0,
        video_planner: FecPlanner | None = None,
        audio_planner: FecPlanner | None = None,
        key_planner: FecPlanner | None = None,
    ) -> None:
        self._next_seq = {StreamType.VIDEO: video_seq & SEQ14_MASK, StreamType.AUDIO: audio_seq & SEQ14_MASK}
        self.video_planner: FecPlanner = video_planner or NoFecPlanner()
        self.audio_planner: FecPlanner = audio_planner or NoFecPlanner()
        self.key_planner = key_planner
        #: Makes the video planner for a viewer that reports its loss (``--fec-planner auto``); None: keep them.
        self.planner_when_reported: Callable[[], FecPlanner] | None = None
        #: Whether audio gets repair blocks now (the host turns it on while the viewer reports loss, §7.5).
        self.audio_fec_active = True
        #: Send each audio packet's repair blocks with the next audio packet (protocol.md §7.5).
        self.audio_repair_later = True
        self._audio_repair: list[bytes] = []
        #: Send Reed–Solomon repair with the planners' repair counts (the viewer negotiated MDS_FEC, §7.8).
        self.mds = False
        #: Keeps each packet's data datagrams for a while, for resends (the viewer negotiated NACK, §7.9).
        self.retained: RetainedPackets | None = None
        self.packets_sent = 0
        self.datagrams_sent = 0
        self.repair_datagrams_sent = 0

    @classmethod
    def for_cookie(cls, cookie: int, **kwargs: FecPlanner | None) -> Packetizer:
        video, audio = initial_sequences(cookie)
        return cls(video_seq=video, audio_seq=audio, **kwargs)

    def follow_reports(self) -> None:
        """The viewer negotiated LOSS_REPORTS: the planner made for that (if any) takes over video, key frames
        included (it sizes their repair by their size like any other frame's)."""
        if self.planner_when_reported is not None:
            self.video_planner = self.planner_when_reported()
            self.key_planner = None

    def use_mds(self) -> None:
        """Send Reed–Solomon repair (the viewer negotiated MDS_FEC, protocol.md §7.8); an adaptive planner then
        counts every repair block as one lost block covered."""
        self.mds = True
        for planner in (self.video_planner, self.key_planner):
            if isinstance(planner, AdaptivePlanner):
                planner.use_mds()

    def next_seq(self, stream: StreamType) -> int:
        return self._next_seq[stream]

    def plan_for(self, packet: MediaPacket) -> FecPlan:
        if packet.stream == StreamType.AUDIO:
            n = block_count(len(packet.data))
            return self.audio_planner.plan(n) if n and self.audio_fec_active else NO_FEC
        elif packet.key_frame and self.key_planner is not None:
            planner = self.key_planner
        else:
            planner = self.video_planner
        n = block_count(len(packet.data))
        if not n:
            return NO_FEC
        plan = planner.plan(n)
        if self.mds and plan.repair_blocks:
            return mds_plan(min(plan.repair_blocks, max_mds_repair(n)))
        return plan

    def packetize(self, packet: MediaPacket, *, repair_cache: dict[FecPlan, RepairBlocks] | None = None) -> list[bytes]:
        """Datagrams for one packet, in send order.  An empty packet still uses a sequence number.

        Repair blocks depend only on the data, the plan and the pts, not on the viewer: a host fanning one
        packet out to several viewers passes the same ``repair_cache`` to each so they are computed once.
        """
        data, repair = self._datagrams(packet, repair_cache)
        out = data + [d.datagram() for d in repair]
        if packet.stream == StreamType.AUDIO:
            # An audio chunk's repair goes out after the next chunk's data: one burst rarely takes both.
            pending, self._audio_repair = self._audio_repair, []
            if self.audio_repair_later:
                out[len(data) :], self._audio_repair = pending, out[len(data) :]
            else:
                out[len(data) : len(data)] = pending
        return out

    def packetize_video(
        self, packet: MediaPacket, *, repair_cache: dict[FecPlan, RepairBlocks] | None = None
    ) -> list[Datagram]:
        """:meth:`packetize` for a video packet whose repair is computed only when its first repair datagram is
        about to leave (:class:`LaterDatagram`): the paced queue sends the data meanwhile."""
        if packet.stream != StreamType.VIDEO:
            raise ValueError("only video is paced; audio leaves at once (packetize)")
        data, repair = self._datagrams(packet, repair_cache)
        return [*data, *repair]

    def _datagrams(
        self, packet: MediaPacket, repair_cache: dict[FecPlan, RepairBlocks] | None
    ) -> tuple[list[bytes], list[LaterDatagram]]:
        """A packet's data datagrams, and its repair datagrams still to compute."""
        size = len(packet.data)
        if packet.key_frame and packet.stream == StreamType.AUDIO:
            raise ValueError("audio packets cannot be key frames: KEY|AUDIO marks a ping reply on the wire")
        if size > MAX_PACKET_BYTES:
            raise ValueError(f"packet of {size} bytes exceeds the {MAX_PACKET_BYTES}-byte limit")
        seq = self._next_seq[packet.stream]
        self._next_seq[packet.stream] = (seq + 1) & SEQ14_MASK
        self.packets_sent += 1
        plan = self.plan_for(packet)
        dts_delta = 0 if packet.dts_us is None else max(0, packet.pts_us - packet.dts_us)
        prefix = media_header_prefix(
            packet.pts_us, dts_delta, size, plan.repair_blocks, plan.degree_even, plan.degree_odd
        )
        audio = packet.stream == StreamType.AUDIO
        key = packet.key_frame
        view = memoryview(packet.data)
        data = [
            b"".join(
                (
                    prefix,
                    media_flags(packet_seq=seq, subpacket_seq=i, key_frame=key, audio=audio, fec=False, begin=i == 0),
                    view[start : start + BLOCK_BYTES],
                )
            )
            for i, start in enumerate(range(0, size, BLOCK_BYTES))
        ]
        repair: list[LaterDatagram] = []
        if plan.repair_blocks:
            blocks = repair_cache.get(plan) if repair_cache is not None else None
            if blocks is None:
                blocks = RepairBlocks(_repair_of(packet, plan))
                if repair_cache is not None:
                    repair_cache[plan] = blocks
            flags = [
                media_flags(packet_seq=seq, subpacket_seq=i, key_frame=key, audio=audio, fec=True, begin=False)
                for i in range(plan.repair_blocks)
            ]
            repair = [LaterDatagram(prefix + f, blocks, i) for i, f in enumerate(flags)]
            self.repair_datagrams_sent += len(repair)
        self.datagrams_sent += len(data) + len(repair)
        if self.retained is not None:
            self.retained.keep(packet.stream, seq, data)
        return data, repair


def _repair_of(packet: MediaPacket, plan: FecPlan) -> Callable[[], list[bytes]]:
    """What computes a packet's repair blocks for ``plan``."""
    if plan.mds:
        return lambda: encode_mds_repair(packet.data, plan.repair_blocks)
    seed = seed_for_pts(packet.pts_us)
    return lambda: encode_repair(packet.data, plan, seed)
