"""Datagrams → complete packets, with FEC, reordering, deadlines and bounded memory (protocol.md §6).

Pure: the viewer's network shell calls :meth:`Reassembler.receive` with each UDP
datagram and the time it read it, calls :meth:`Reassembler.handle_timer` when
:meth:`Reassembler.next_timer` comes due, and acts on the returned events
(decode a packet, note a ping reply, request a key frame on loss).

Compared with the reference receiver (protocol.md §6), it keeps up to
``max_in_flight`` packets per stream instead of two, so datagrams reordered across
several packets still count; it delivers packets in sequence order, holding a
complete packet for at most ``reorder_timeout_s`` while an older one may still
complete; it gives up on a packet ``deadline_s`` after its first datagram; and a
malformed datagram is counted under a reason and dropped, never fatal.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

from pyrofling.fec.codec import BLOCK_BYTES, FecError, FecPlan, FrameDecoder, block_count, seed_for_pts
from pyrofling.fec.mds import MdsFrameDecoder
from pyrofling.seqnum import SEQ14_MASK, seq14_delta
from pyrofling.wire import (
    MAX_MEDIA_DATAGRAM_BYTES,
    MEDIA_HEADER_BYTES,
    Buffer,
    MediaHeader,
    PingReply,
    Progress,
    ProtocolError,
    StreamType,
)

# --------------------------------------------------------------------------------------------
# Events
# --------------------------------------------------------------------------------------------


class ReassemblyEvent:
    """Base of what :class:`Reassembler` reports."""


@dataclass(frozen=True, slots=True)
class PacketReady(ReassemblyEvent):
    """A complete packet, delivered in sequence order per stream."""

    stream: StreamType
    seq: int
    pts_us: int
    dts_us: int
    key_frame: bool
    data: bytes
    recovered: bool  # needed repair blocks
    first_datagram_s: float  # when its first datagram arrived
    complete_s: float  # when it became complete


@dataclass(frozen=True, slots=True)
class PacketPart(ReassemblyEvent):
    """The next bytes of the video packet that is next in sequence, before it is complete: ``data`` is its bytes
    from ``start`` up to where a NAL unit begins (so it ends with whole NAL units), for a decoder that takes a
    picture slice by slice (see :attr:`Reassembler.early_part_bytes`).  The packet's :class:`PacketReady`, if it
    completes, still carries all of it."""

    seq: int
    pts_us: int
    start: int
    data: bytes


@dataclass(frozen=True, slots=True)
class PacketsLost(ReassemblyEvent):
    """``count`` packets before ``before_seq`` will never be delivered."""

    stream: StreamType
    count: int
    before_seq: int


@dataclass(frozen=True, slots=True)
class PingReplyReceived(ReassemblyEvent):
    seq: int
    server_time_us: int
    received_s: float


class DatagramVerdict(enum.Enum):
    """What became of a datagram: taken into a packet, stale (its packet already delivered or given up: it
    still arrived), or refused as malformed."""

    TAKEN = "taken"
    STALE = "stale"
    REFUSED = "refused"


#: Looked up once (0.2 µs each on Python 3.11, and every datagram gets a verdict).
_TAKEN, _STALE, _REFUSED = DatagramVerdict.TAKEN, DatagramVerdict.STALE, DatagramVerdict.REFUSED
_VIDEO = StreamType.VIDEO
_START_CODE = b"\x00\x00\x01"


# --------------------------------------------------------------------------------------------
# Configuration and state
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReassemblerConfig:
    """Limits and timing of the reassembler.  All fields have working defaults."""

    #: Packets per stream held at once (complete-but-waiting and incomplete); ≥ 4 reorder tolerance.
    max_in_flight: int = 16
    #: Largest packet accepted, bytes.  A larger payload_size is a malformed datagram.
    max_packet_bytes: int = 8 * 1024 * 1024
    #: Bytes of packet buffers held at once, all streams together.
    max_buffered_bytes: int = 64 * 1024 * 1024
    #: How long a complete packet waits for an older incomplete one, seconds.
    reorder_timeout_s: float = 0.004
    #: Reordering tolerated across this many packets: a wait ends once more newer packets are complete.
    reorder_packets: int = 4
    #: An incomplete packet is given up this long after its first datagram, seconds.
    deadline_s: float = 0.25
    #: Decode with GF(2) elimination after peeling (False = peeling only, like the reference).
    elimination: bool = True
    #: A stream whose datagrams have all been stale (at or behind the floor) for this long, at least
    #: ``resync_after_stale`` of them and none delivered, is re-anchored on the next one: a forged or
    #: corrupted sequence number far ahead cannot stall it for good.
    resync_after_s: float = 0.5
    resync_after_stale: int = 32


@dataclass(slots=True)
class ProgressCounters:
    """Cumulative counters a viewer reports in PROGRESS (protocol.md §2.3)."""

    received: int = 0
    fec_recovered: int = 0
    dropped_video: int = 0
    dropped_audio: int = 0
    key_frames: int = 0

    def to_message(self) -> Progress:
        return Progress(self.received, self.fec_recovered, self.dropped_video, self.dropped_audio, self.key_frames)


@dataclass(slots=True)
class _Partial:
    header: MediaHeader  # of the first datagram seen; later ones must agree
    decoder: FrameDecoder | MdsFrameDecoder
    first_s: float
    buffer_bytes: int
    blocked_since_s: float | None = None  # when a newer packet of the stream became complete
    complete_s: float | None = None
    #: Early parts: bytes handed out as parts, searched for NAL starts, and where the last NAL start found is.
    parted: int = 0
    searched: int = 0
    nal_start: int = 0


@dataclass(slots=True)
class _StreamState:
    in_flight: dict[int, _Partial] = field(default_factory=dict)
    #: Newest sequence counted as delivered or lost: the loss of a packet given up is counted at once, not when
    #: (if ever) a later packet is delivered, so a stream where nothing completes still shows its loss.
    last_accounted: int | None = None
    #: Newest sequence delivered or given up; anything at or before it is stale.
    floor: int | None = None
    #: Stale datagrams since the last delivery, and when the first of them came.
    stale_run: int = 0
    stale_since_s: float | None = None


class Received(NamedTuple):
    """What one datagram did: the events it caused, what became of it, and its header (None: it had none).
    A named tuple: one is made per datagram, and a frozen dataclass takes twice as long to make."""

    events: list[ReassemblyEvent]
    verdict: DatagramVerdict
    header: MediaHeader | None


def _verdict(refusal: str | None) -> DatagramVerdict:
    if refusal is None:
        return _TAKEN
    return _STALE if refusal in ("unneeded_repair", "late") else _REFUSED


class Reassembler:
    """Rebuilds packets from media datagrams (see module docstring for the contract)."""

    def __init__(self, config: ReassemblerConfig | None = None) -> None:
        self.config = config or ReassemblerConfig()
        #: A tighter limit than ``config.max_packet_bytes`` once the stream is known (see :meth:`expect_picture`).
        self.packet_bytes_limit = self.config.max_packet_bytes
        self.counters = ProgressCounters()
        self.discarded: Counter[str] = Counter()
        self.datagrams = 0
        self._refusal: str | None = None  # why the datagram being read was discarded
        self._streams = {StreamType.VIDEO: _StreamState(), StreamType.AUDIO: _StreamState()}
        self._buffered_bytes = 0
        #: How long each stream waits for an older packet (``config.reorder_timeout_s`` until told otherwise:
        #: with resends negotiated, video waits long enough for a resent datagram to arrive).
        self.reorder_wait_s = {stream: self.config.reorder_timeout_s for stream in self._streams}
        #: Hand out the video packet that is next in sequence in parts (:class:`PacketPart`) of at least this
        #: many bytes as its leading blocks arrive, each ending where an H.264 NAL unit begins, so that a
        #: decoder can start on its first slices while the rest is on its way.  None: whole packets only.
        self.early_part_bytes: int | None = None
        #: Only packets of at least this many bytes go out in parts: a small picture arrives all at once, and
        #: its slices decoded one by one as parts take longer than the whole on the decoder's threads.
        self.early_packet_bytes = 0

    # ---------------------------------------------------------------------------------------
    # Inputs
    # ---------------------------------------------------------------------------------------

    def receive(self, datagram: Buffer, now: float) -> list[ReassemblyEvent]:
        """One datagram from the server: what it completed or gave up.  Never raises on peer data."""
        return self.take(datagram, now).events

    def take(self, datagram: Buffer, now: float) -> Received:
        """One datagram from the server: what it completed or gave up, what became of it, and its header."""
        self.datagrams += 1
        self._refusal = None
        size = len(datagram)
        if size < MEDIA_HEADER_BYTES:
            return Received(self._discard("short_datagram"), DatagramVerdict.REFUSED, None)
        if size > MAX_MEDIA_DATAGRAM_BYTES:
            return Received(self._discard("long_datagram"), DatagramVerdict.REFUSED, None)
        header = MediaHeader.parse(datagram)
        body = memoryview(datagram)[MEDIA_HEADER_BYTES:]
        if header.is_ping_reply:
            try:
                reply = PingReply.from_datagram(header, body)
            except ProtocolError as exc:
                return Received(self._discard(exc.reason), DatagramVerdict.REFUSED, header)
            return Received([PingReplyReceived(reply.seq, reply.server_time_us, now)], DatagramVerdict.TAKEN, header)
        events = self._media(header, body, now)
        return Received(events, _verdict(self._refusal), header)

    def handle_timer(self, now: float) -> list[ReassemblyEvent]:
        """Give up on packets whose reorder wait or deadline has passed."""
        events: list[ReassemblyEvent] = []
        for stream in self._streams:
            events += self._flush(stream, now)
        return events

    def next_timer(self) -> float | None:
        """When :meth:`handle_timer` next has something to do, or None."""
        cfg = self.config
        times: list[float] = []
        for stream, state in self._streams.items():
            if not state.in_flight:
                continue
            wait = self.reorder_wait_s[stream]
            oldest = state.in_flight[self._oldest(state)]
            if oldest.complete_s is not None:  # held behind a gap
                times.append(oldest.complete_s + wait)
            for part in state.in_flight.values():
                if part.complete_s is None:
                    times.append(part.first_s + cfg.deadline_s)
                    if part.blocked_since_s is not None:
                        times.append(part.blocked_since_s + wait)
        return min(times) if times else None

    def expect_picture(self, width: int, height: int) -> None:
        """The stream's picture size is known: no packet can sensibly be larger than two raw 4:2:0 frames
        (256 KiB at least), so a forged or corrupted size cannot make the viewer reserve megabytes."""
        if width > 0 and height > 0:
            self.packet_bytes_limit = min(self.config.max_packet_bytes, max(256 * 1024, width * height * 3))

    def needed_blocks(self, stream: StreamType, seq: int) -> list[int] | None:
        """The data blocks a packet still needs to be asked for: [] when it is complete, delivered or given up;
        None when nothing of it has arrived."""
        state = self._streams[stream]
        part = state.in_flight.get(seq)
        if part is None:
            return [] if state.floor is not None and seq14_delta(seq, state.floor) <= 0 else None
        return [] if part.complete_s is not None else part.decoder.wanted()

    @property
    def buffered_bytes(self) -> int:
        return self._buffered_bytes

    def in_flight(self, stream: StreamType) -> int:
        return len(self._streams[stream].in_flight)

    # ---------------------------------------------------------------------------------------
    # Media path
    # ---------------------------------------------------------------------------------------

    def _discard(self, reason: str) -> list[ReassemblyEvent]:
        self.discarded[reason] += 1
        self._refusal = reason
        return []

    def _media(self, header: MediaHeader, body: memoryview, now: float) -> list[ReassemblyEvent]:
        state = self._streams[header.stream]
        seq = header.packet_seq
        if state.floor is not None and seq14_delta(seq, state.floor) <= 0:
            if not self._stuck(state, now):
                # Repair blocks of a packet that completed without them are the normal case, not lateness.
                return self._discard("unneeded_repair" if header.fec else "late")
            self._resync(state)
        reason = _check_datagram(header, len(body))
        if reason:
            return self._discard(reason)
        part = state.in_flight.get(seq)
        if part is None:
            reason = self._check_new(header)
            if reason:
                return self._discard(reason)
            events: list[ReassemblyEvent] = []
            if not self._make_room(header, state, now, events):
                self.discarded["no_room"] += 1
                return events
            n_bytes = block_count(header.payload_size) * BLOCK_BYTES
            plan = FecPlan(header.num_fec_blocks, header.num_xor_blocks_even, header.num_xor_blocks_odd)
            decoder: FrameDecoder | MdsFrameDecoder
            if plan.mds:
                decoder = MdsFrameDecoder(header.payload_size, plan.repair_blocks)
            else:
                decoder = FrameDecoder(
                    header.payload_size, plan, seed_for_pts(header.pts_us), eliminate=self.config.elimination
                )
            part = _Partial(header, decoder, now, n_bytes)
            state.in_flight[seq] = part
            self._buffered_bytes += n_bytes
            # Newer packets already complete have been waiting for this one since they completed.
            for other_seq, other in state.in_flight.items():
                if other.complete_s is not None and seq14_delta(other_seq, seq) > 0:
                    part.blocked_since_s = other.complete_s
                    break
        else:
            events = []
            if not _same_packet(part.header, header):
                return events + self._discard("inconsistent_header")
            if part.complete_s is not None:
                return events + self._discard("unneeded_repair" if header.fec else "late")
        decoder = part.decoder
        try:
            if header.fec:
                done = decoder.add_repair(header.subpacket_seq, body)
            else:
                done = decoder.add_data(header.subpacket_seq, body)
        except FecError:  # _check_datagram rules this out; kept so peer data can never raise
            return events + self._discard("bad_block")
        if done:
            part.complete_s = now
            # Older incomplete packets now hold up a complete one: start their reorder wait.
            for other_seq, other in state.in_flight.items():
                if other.complete_s is None and other.blocked_since_s is None and seq14_delta(other_seq, seq) < 0:
                    other.blocked_since_s = now
            events += self._flush(header.stream, now)
        elif (
            self.early_part_bytes is not None
            and header.stream is _VIDEO
            and header.payload_size >= self.early_packet_bytes
        ):
            early = self._early_part(state, seq, part, self.early_part_bytes)
            if early is not None:
                events.append(early)
        return events

    @staticmethod
    def _early_part(state: _StreamState, seq: int, part: _Partial, least: int) -> PacketPart | None:
        """The packet's next part, if it is the next to deliver and its leading blocks now hold at least ``least``
        more bytes up to a NAL start.  Only the new bytes are searched: a datagram costs a few hundred ns."""
        if state.floor is None or (seq - state.floor) & SEQ14_MASK != 1:
            return None  # an older packet may still come: the decoder must have it first
        buf, have = part.decoder.prefix()
        if have - part.parted < least:
            return None
        # An Annex B start code (00 00 01) cannot occur inside a NAL unit (emulation prevention), so the last
        # one in hand is where the last whole NAL unit ends; a 4-byte code's leading zero stays with the NAL
        # before it, which the syntax allows (trailing_zero_8bits).
        found = buf.rfind(_START_CODE, max(part.parted + 4, part.searched - 2), have)
        part.searched = have
        if found > part.nal_start:
            part.nal_start = found
        if part.nal_start - part.parted < least:
            return None
        start, part.parted = part.parted, part.nal_start
        return PacketPart(seq, part.header.pts_us, start, bytes(buf[start : part.parted]))

    def _check_new(self, header: MediaHeader) -> str | None:
        """Why the first datagram of a packet cannot start a reassembly, or None."""
        size = header.payload_size
        if size > min(self.config.max_packet_bytes, self.packet_bytes_limit):
            return "oversize_packet"
        plan = FecPlan(header.num_fec_blocks, header.num_xor_blocks_even, header.num_xor_blocks_odd)
        try:
            plan.check(block_count(size))
        except FecError:
            return "bad_fec_plan"
        return None

    def _make_room(self, header: MediaHeader, state: _StreamState, now: float, events: list[ReassemblyEvent]) -> bool:
        """Evict the oldest packets if the new one would exceed a limit; False if it must be dropped."""
        need = block_count(header.payload_size) * BLOCK_BYTES
        while len(state.in_flight) >= self.config.max_in_flight or (
            self._buffered_bytes + need > self.config.max_buffered_bytes and state.in_flight
        ):
            oldest = min(state.in_flight, key=lambda s: seq14_delta(s, header.packet_seq))
            if seq14_delta(header.packet_seq, oldest) < 0:
                return False  # the new packet is older than everything held: it loses
            events += self._give_up(header.stream, oldest)
            events += self._flush(header.stream, now)
        return self._buffered_bytes + need <= self.config.max_buffered_bytes

    # ---------------------------------------------------------------------------------------
    # Delivery
    # ---------------------------------------------------------------------------------------

    def _flush(self, stream: StreamType, now: float) -> list[ReassemblyEvent]:
        """Deliver complete packets in order; stop waiting for older ones when their time is over.

        The oldest packet held is delivered when it is complete and no sequence
        number between it and the last one delivered is missing.  Otherwise the
        stream waits, for an incomplete oldest packet until its reorder wait or
        deadline passes, for a gap (packets not seen at all) until the oldest
        has been complete for ``reorder_timeout_s``; either wait also ends once
        more than ``reorder_packets`` newer packets are complete.
        """
        state = self._streams[stream]
        cfg = self.config
        wait = self.reorder_wait_s[stream]
        events: list[ReassemblyEvent] = []
        while state.in_flight:
            oldest = self._oldest(state)
            part = state.in_flight[oldest]
            gap = state.floor is not None and seq14_delta(oldest, state.floor) > 1
            if part.complete_s is not None and not gap:
                events += self._deliver(stream, oldest, part)
                continue
            newer_complete = sum(
                1 for s, p in state.in_flight.items() if p.complete_s is not None and seq14_delta(s, oldest) > 0
            )
            too_many = newer_complete + (part.complete_s is not None) > cfg.reorder_packets
            if part.complete_s is not None:
                if too_many or now >= part.complete_s + wait:
                    state.floor = (oldest - 1) & SEQ14_MASK  # stop waiting for the unseen packets
                    continue
                break
            expired = now >= part.first_s + cfg.deadline_s
            waited = part.blocked_since_s is not None and now >= part.blocked_since_s + wait
            if expired or waited or too_many:
                events += self._give_up(stream, oldest)
                continue
            break
        return events

    @staticmethod
    def _oldest(state: _StreamState) -> int:
        anchor = next(iter(state.in_flight))
        if len(state.in_flight) == 1:  # the usual case, asked after every datagram
            return anchor
        return min(state.in_flight, key=lambda s: seq14_delta(s, anchor))

    def _release(self, state: _StreamState, seq: int) -> _Partial:
        part = state.in_flight.pop(seq)
        self._buffered_bytes -= part.buffer_bytes
        if state.floor is None or seq14_delta(seq, state.floor) > 0:
            state.floor = seq
        return part

    def _stuck(self, state: _StreamState, now: float) -> bool:
        """Count one stale datagram; True when the floor must be wrong (only stale ones for a while)."""
        if state.stale_since_s is None:
            state.stale_since_s = now
        state.stale_run += 1
        cfg = self.config
        return state.stale_run >= cfg.resync_after_stale and now - state.stale_since_s >= cfg.resync_after_s

    def _resync(self, state: _StreamState) -> None:
        """Forget the stream's position and what it holds; the next packet starts it afresh."""
        for part in state.in_flight.values():
            self._buffered_bytes -= part.buffer_bytes
        state.in_flight.clear()
        state.floor = state.last_accounted = state.stale_since_s = None
        state.stale_run = 0
        self.discarded["stream_resync"] += 1  # an event, not a datagram: the stream was re-anchored

    def _give_up(self, stream: StreamType, seq: int) -> list[ReassemblyEvent]:
        """Abandon an incomplete packet, and count it lost now (with any unseen packets before it)."""
        state = self._streams[stream]
        self._release(state, seq)
        self.discarded["gave_up_packet"] += 1
        return self._count_lost(stream, state, seq, including=True)

    def _count_lost(
        self, stream: StreamType, state: _StreamState, seq: int, *, including: bool
    ) -> list[ReassemblyEvent]:
        """Packets before ``seq`` (and ``seq`` itself when ``including``) not yet accounted for are lost."""
        previous = state.last_accounted
        lost = 1 if including else 0
        if previous is not None:
            lost = seq14_delta(seq, previous) - (0 if including else 1)
        if previous is None or seq14_delta(seq, previous) > 0:
            state.last_accounted = seq
        if lost <= 0:
            return []
        c = self.counters
        if stream == StreamType.VIDEO:
            c.dropped_video += lost
        else:
            c.dropped_audio += lost
        return [PacketsLost(stream, lost, (seq + 1) & SEQ14_MASK if including else seq)]

    def _deliver(self, stream: StreamType, seq: int, part: _Partial) -> list[ReassemblyEvent]:
        state = self._streams[stream]
        self._release(state, seq)
        state.stale_run, state.stale_since_s = 0, None
        events = self._count_lost(stream, state, seq, including=False)
        c = self.counters
        c.received += 1
        h = part.header
        if part.decoder.recovered:
            c.fec_recovered += 1
        if h.key_frame:
            c.key_frames += 1
        assert part.complete_s is not None
        events.append(
            PacketReady(
                stream=stream,
                seq=seq,
                pts_us=h.pts_us,
                dts_us=h.pts_us - h.dts_delta_us,
                key_frame=h.key_frame,
                data=part.decoder.frame(),
                recovered=part.decoder.recovered,
                first_datagram_s=part.first_s,
                complete_s=part.complete_s,
            )
        )
        return events


def _check_datagram(header: MediaHeader, body_bytes: int) -> str | None:
    """Why a datagram cannot be one block of the packet its header describes, or None."""
    if header.payload_size == 0:
        return "empty_packet"  # an empty packet sends no datagrams at all
    index = header.subpacket_seq
    if header.fec:
        if index >= header.num_fec_blocks:
            return "bad_block_index"
        if body_bytes != BLOCK_BYTES:
            return "bad_length"
        return None
    if index >= block_count(header.payload_size):
        return "bad_block_index"
    if header.begin != (index == 0):
        return "bad_begin"
    if body_bytes != min(BLOCK_BYTES, header.payload_size - index * BLOCK_BYTES):
        return "bad_length"
    return None


def _same_packet(a: MediaHeader, b: MediaHeader) -> bool:
    """Datagrams of one packet agree on everything but the per-datagram fields."""
    return (
        a.pts_us == b.pts_us
        and a.payload_size == b.payload_size
        and a.num_fec_blocks == b.num_fec_blocks
        and a.num_xor_blocks_even == b.num_xor_blocks_even
        and a.num_xor_blocks_odd == b.num_xor_blocks_odd
        and a.key_frame == b.key_frame
        and a.dts_delta_us == b.dts_delta_us
    )
