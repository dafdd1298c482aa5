"""The viewer's side of one connection to a host: control, media, and what the decoder gets (protocol.md §3–§7).

Pure, and shaped like :class:`~pyrofling.core.host.sessions.HostSessions`.  The
viewer's shell opens the TCP connection and a UDP socket, then hands over what
arrives with the time it read it — :meth:`ViewerConnection.start` once,
:meth:`ViewerConnection.control_bytes` for what the control connection reads,
:meth:`ViewerConnection.datagram_received` for each datagram — calls
:meth:`ViewerConnection.handle_timer` when :meth:`ViewerConnection.next_timer`
comes due, and performs the returned outputs in order: bytes to write or send
(:class:`ControlToHost`, :class:`DatagramToHost`), packets to decode or play
(:class:`DecodeVideo`, :class:`PlayAudio`, :class:`AudioLost`) and the
connection's fate (:class:`Streaming`, :class:`SessionFailed`, :class:`StreamStalled`).

It joins the control session (:class:`~pyrofling.core.viewer.session.ViewerSession`:
handshake, keep-alive, pings, key-frame requests) with the reassembler
(:class:`~pyrofling.core.viewer.reassembler.Reassembler`: datagrams → packets, FEC), the
loss tracker (:class:`~pyrofling.core.viewer.loss_tracker.LossTracker`: NACKs and loss
reports, when the host grants them) and the session's key gate, and decides: no
video reaches the decoder before the first key frame, a picture is marked whole
or not, a video packet lost for good asks for a key frame.

:class:`Reconnect` decides whether the viewer tries again after a connection
ends.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from pyrofling.core.bitstream import key_info
from pyrofling.core.viewer.clock_sync import ClockSync, HostClock
from pyrofling.core.viewer.loss_tracker import LossTracker
from pyrofling.core.viewer.rate_feedback import ArrivalRecorder
from pyrofling.core.viewer.reassembler import (
    DatagramVerdict,
    PacketPart,
    PacketReady,
    PacketsLost,
    PingReplyReceived,
    Reassembler,
    ReassemblerConfig,
    ReassemblyEvent,
)
from pyrofling.core.viewer.session import (
    CodecChanged,
    ControlToHost,
    DatagramToHost,
    Paired,
    Phase,
    PlayRumble,
    SessionFailed,
    Streaming,
    StreamStalled,
    ViewerOutput,
    ViewerSession,
    ViewerSessionConfig,
)
from pyrofling.wire import (
    CodecParameters,
    ControlMessage,
    ExtensionFeature,
    StreamType,
    UnknownControl,
    VideoCodec,
)

#: With resends negotiated, how long a complete video packet waits for an older one being resent: a NACK and its
#: answer take a round trip and the host's queue; a frame later the picture would be late anyway.
RESEND_WAIT_S = 0.02
#: The least a part of a picture handed to the decoder early holds (:class:`DecodeVideoPart`): each part wakes the
#: decode thread, which costs more than decoding a few hundred bytes.
EARLY_PART_BYTES = 4096
#: Malformed datagrams a second beyond which the viewer stops asking for resends for a second (see below).
SUSPECT_REFUSED_PER_S = 200

#: Looked up once: an enum member costs 0.2 µs a lookup on Python 3.11, and these are read every datagram.
_VIDEO = StreamType.VIDEO
_REFUSED, _STALE = DatagramVerdict.REFUSED, DatagramVerdict.STALE
_STREAMING = Phase.STREAMING

__all__ = [
    "AudioLost",
    "CodecChanged",
    "ControlToHost",
    "DatagramToHost",
    "DecodeVideo",
    "DecodeVideoPart",
    "Paired",
    "PlayAudio",
    "PlayRumble",
    "Reconnect",
    "SessionFailed",
    "StreamStalled",
    "Streaming",
    "ViewerConnection",
    "ViewerOutput",
]


@dataclass(frozen=True, slots=True)
class DecodeVideo(ViewerOutput):
    """A complete video packet for the decoder, in sequence order."""

    data: bytes
    pts_us: int
    #: Its picture is whole (no loss since the last key frame healed the stream); else show it only to conceal.
    whole: bool
    complete_s: float
    codec: VideoCodec
    first_s: float = 0.0  # when its first datagram arrived
    seq: int | None = None  # the video packet's sequence number (14 bits): one per frame the host sent


@dataclass(frozen=True, slots=True)
class DecodeVideoPart(ViewerOutput):
    """The first bytes of the next video packet, from ``start``, ending where a NAL unit begins: an H.264
    decoder that takes pictures slice by slice may start on them.  Its :class:`DecodeVideo` (if it completes)
    carries the whole packet; a decoder that took parts feeds what follows them."""

    data: bytes
    pts_us: int
    seq: int
    start: int


@dataclass(frozen=True, slots=True)
class PlayAudio(ViewerOutput):
    """A complete audio packet, in sequence order; its pts is on the host's clock (map it with ``clock``)."""

    data: bytes
    pts_us: int


@dataclass(frozen=True, slots=True)
class AudioLost(ViewerOutput):
    """``count`` audio packets will never arrive: conceal them."""

    count: int


class ViewerConnection:
    """One connection to a host, from the first HELLO to its end (see the module docstring for the contract)."""

    def __init__(
        self,
        config: ViewerSessionConfig | None = None,
        *,
        reassembler: ReassemblerConfig | None = None,
        random_bytes: Callable[[int], bytes] = secrets.token_bytes,
        early_part_bytes: int | None = None,
        early_packet_bytes: int = 0,
    ) -> None:
        self.reassembler = Reassembler(reassembler)
        #: Hand out H.264 packets of ``early_packet_bytes`` or more in parts of at least ``early_part_bytes`` as
        #: they arrive (:class:`DecodeVideoPart`); None: whole packets only.
        self.reassembler.early_part_bytes = early_part_bytes
        self.reassembler.early_packet_bytes = early_packet_bytes
        self.session = ViewerSession(self.reassembler.counters, config, random_bytes=random_bytes)
        #: Datagrams that opened (sealed sessions) and reached the reassembler, and their bytes.
        self.datagrams = 0
        self.bytes_received = 0
        self.bytes_received_video = 0  # of them, the video stream's (what the host's link estimate is about)
        self.packets_video = 0
        self.packets_audio = 0
        #: Video packets that never completed (what FEC could not repair).
        self.packets_lost_video = 0
        #: Packets the shell could not queue for its decoder (the decoder is falling behind).
        self.decode_queue_overflows = 0
        #: Video loss seen datagram by datagram: NACKs and LOSS_REPORTs, once the host grants them.
        self.loss = LossTracker(nack=False, reports=False)
        #: What arrived when, for the host's rate control, once it grants RATE_CONTROL (protocol.md §7.10).
        self.arrivals = ArrivalRecorder()
        self._refused_window_s = 0.0
        self._refused_in_window = 0

    # -- what the shell reads --------------------------------------------------------------------

    @property
    def clock(self) -> ClockSync:
        """The host's clock on ours, from pings (round trips, for the statistics)."""
        return self.session.clock

    @property
    def host_clock(self) -> HostClock:
        """The mapping as it stands, for the decode and audio threads (immutable: hand it with each packet)."""
        return self.session.clock.mapping

    @property
    def streaming(self) -> bool:
        return self.session.phase is _STREAMING

    @property
    def codec_parameters(self) -> CodecParameters | None:
        return self.session.codec_parameters

    def counters(self) -> Counter[str]:
        """Per-connection totals, by name, for the viewer's statistics (the shell adds up its connections)."""
        return Counter(
            datagrams=self.datagrams,
            bytes_received=self.bytes_received,
            bytes_received_video=self.bytes_received_video,
            packets_video=self.packets_video,
            packets_audio=self.packets_audio,
            packets_lost_video=self.packets_lost_video,
            packets_recovered=self.reassembler.counters.fec_recovered,
            keyframe_requests=self.session.keyframe_requests,
            decode_queue_overflows=self.decode_queue_overflows,
            rate_feedbacks_sent=self.arrivals.sent,
            **self.loss.summary(),
        )

    def discarded(self) -> Counter[str]:
        """Datagrams dropped, by reason: malformed or late (the reassembler), refused unopened (the session)."""
        return self.reassembler.discarded + self.session.refused

    # -- inputs --------------------------------------------------------------------------------

    def start(self, now: float) -> list[ViewerOutput]:
        """The TCP connection is open: say HELLO (and ask for pyrofling's extensions)."""
        return self.session.start(now)

    def control_bytes(self, data: bytes, now: float) -> list[ViewerOutput]:
        """Bytes read from the control connection, as they came (plain, or sealed records after the handshake)."""
        return self._control_outputs(self.session.control_bytes(data, now))

    def control_received(self, msg: ControlMessage | UnknownControl, now: float) -> list[ViewerOutput]:
        """One control message, already framed (a plain session)."""
        return self._control_outputs(self.session.control(msg, now))

    def _control_outputs(self, out: list[ViewerOutput]) -> list[ViewerOutput]:
        for o in out:
            if isinstance(o, Streaming):
                p = o.codec_parameters
                self.reassembler.expect_picture(p.width, p.height)
                self.loss.max_data_blocks = -(-self.reassembler.packet_bytes_limit // 1024)
                self.loss.nack = bool(o.extensions & ExtensionFeature.NACK)
                self.loss.reports = bool(o.extensions & ExtensionFeature.LOSS_REPORTS)
                if self.loss.nack:
                    self.reassembler.reorder_wait_s[StreamType.VIDEO] = RESEND_WAIT_S
                self.arrivals.active = bool(o.extensions & ExtensionFeature.RATE_CONTROL)
        return out

    def control_closed(self) -> list[ViewerOutput]:
        """The host ended the control connection (:meth:`ViewerSession.control_closed`: after the viewer's proof,
        a refusal)."""
        return self.session.control_closed()

    def datagram_received(self, data: bytes, now: float) -> list[ViewerOutput]:
        """A datagram from the host, as it came off the wire.  Never raises on peer data."""
        opened, answer = self.session.datagram(data, now)
        if opened is None:
            return answer
        size = len(opened)
        self.datagrams += 1
        self.bytes_received += size
        self.arrivals.datagram(len(data), now)
        events, verdict, header = self.reassembler.take(opened, now)
        out = self._media(events, now) if events else []
        if verdict is _REFUSED:
            self._refused_recently(now)
            return out
        # Only a datagram the reassembler took (or found merely late) counts: a malformed one says nothing
        # about the link, and its header cannot be trusted to size anything.  (A ping reply is marked as audio.)
        if header is None or header.stream != _VIDEO or not self.streaming:
            return out
        self.bytes_received_video += size
        self.arrivals.video(header.packet_seq, now)
        if not self.loss.datagram(header, now, stale=verdict is _STALE):
            return out
        return out + self._ask(now)

    def phase_offset(self, offset_us: int) -> list[ViewerOutput]:
        """The presentation loop's phase error, for the host's frame clock (protocol.md §7.4)."""
        return self.session.phase_offset(offset_us)

    def display_changed(self, width: int, height: int, refresh_mhz: int) -> list[ViewerOutput]:
        """The viewer's display or window changed size (DISPLAY, protocol.md §7.14)."""
        return self.session.display_changed(width, height, refresh_mhz)

    def picture_rate_changed(self, rate_mhz: int) -> list[ViewerOutput]:
        """Ask the host for at most this many pictures a second (PICTURE_RATE, protocol.md §7.16)."""
        return self.session.picture_rate_changed(rate_mhz)

    def decode_failed(self, now: float) -> list[ViewerOutput]:
        """The decoder rejected a packet: pictures are broken until a key frame."""
        return self.session.video_lost(now)

    def decode_queue_full(self, now: float) -> list[ViewerOutput]:
        """The shell had to drop a :class:`DecodeVideo`: as good as lost."""
        self.decode_queue_overflows += 1
        return self.session.video_lost(now)

    def gamepad_state(self, message: bytes) -> DatagramToHost:
        """A GAMEPAD_STATE datagram as it goes on the wire (sealed on an encrypted session)."""
        return DatagramToHost(self.session.udp(message))

    def input_state(self, message: bytes) -> list[ViewerOutput]:
        """An INPUT_STATE datagram as it goes on the wire; nothing unless the host granted KEYBOARD_MOUSE."""
        if not self.streaming or not self.session.extensions & ExtensionFeature.KEYBOARD_MOUSE:
            return []
        return [DatagramToHost(self.session.udp(message))]

    # -- timers --------------------------------------------------------------------------------

    def next_timer(self) -> float | None:
        # Asked after every read of the socket: the earliest found in one pass, no lists.
        times: tuple[float | None, ...] = (self.session.next_timer(), self.reassembler.next_timer())
        if self.streaming:
            times += (self.loss.next_timer(), self.arrivals.next_timer())
        due = None
        for t in times:
            if t is not None and (due is None or t < due):
                due = t
        return due

    def handle_timer(self, now: float) -> list[ViewerOutput]:
        out = self.session.handle_timer(now) + self._media(self.reassembler.handle_timer(now), now)
        return out + self._ask(now) if self.streaming else out

    def _refused_recently(self, now: float) -> None:
        """Count a malformed datagram; many in a second mean someone on the path is forging them (an open
        session): NACKs stop for a while, so forged headers cannot make the host resend on their behalf."""
        if now - self._refused_window_s >= 1.0:
            self._refused_window_s, self._refused_in_window = now, 0
        self._refused_in_window += 1
        if self._refused_in_window > SUSPECT_REFUSED_PER_S:
            self.loss.suspend_nacks_until(now + 1.0)

    def _ask(self, now: float) -> list[ViewerOutput]:
        """NACKs for packets that need help, and the loss report when it is due (protocol.md §7.9)."""
        self.loss.rtt_s = self.clock.last_rtt_s or 0.0
        messages: list[ControlMessage] = []
        messages += self.loss.poll(now, lambda seq: self.reassembler.needed_blocks(StreamType.VIDEO, seq))
        feedback = self.arrivals.poll(now)
        if feedback is not None:
            messages.append(feedback)
        return [DatagramToHost(self.session.udp(bytes(m))) for m in messages]

    # -- media ---------------------------------------------------------------------------------

    def _media(self, events: list[ReassemblyEvent], now: float) -> list[ViewerOutput]:
        out: list[ViewerOutput] = []
        session = self.session
        for ev in events:
            if isinstance(ev, PacketReady):
                if ev.stream != StreamType.VIDEO:
                    self.packets_audio += 1
                    out.append(PlayAudio(ev.data, ev.pts_us))
                    continue
                self.packets_video += 1
                self.loss.packet_ready(ev.seq, recovered=ev.recovered)
                params = session.codec_parameters
                codec = VideoCodec(params.video_codec) if params is not None else VideoCodec.H264
                key = key_info(ev.data, codec) if ev.key_frame else None
                whole, outputs = session.video_packet(key, ev.complete_s)
                out += outputs
                if session.gate.key_frames == 0:
                    continue  # nothing decodes before the first key frame
                out.append(DecodeVideo(ev.data, ev.pts_us, whole, ev.complete_s, codec, ev.first_datagram_s, ev.seq))
            elif isinstance(ev, PacketPart):
                # Parts end at H.264's start codes; the other codecs' decoders take whole pictures.
                params = session.codec_parameters
                h264 = params is None or params.video_codec == VideoCodec.H264
                if session.gate.key_frames and h264:  # nothing decodes before the first key frame
                    out.append(DecodeVideoPart(ev.data, ev.pts_us, ev.seq, ev.start))
            elif isinstance(ev, PacketsLost):
                if ev.stream == StreamType.AUDIO:
                    out.append(AudioLost(ev.count))
                else:
                    self.packets_lost_video += ev.count
                    self.loss.packets_lost(ev.count)
                    out += session.video_lost(now)
            elif isinstance(ev, PingReplyReceived):
                session.ping_reply(ev.seq, ev.server_time_us, ev.received_s)
        return out


# --------------------------------------------------------------------------------------------
# Around the connection: trying again
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Reconnect:
    """Whether, and how soon, the viewer connects again after a connection ended.

    A viewer that never got a stream does not retry: a wrong address, a wrong
    code or a host that is not running is said once, not hidden behind endless
    "reconnects".  One that once streamed follows its host through restarts and
    through anything on the path: at once after a connection that streamed, then
    backing off to ``max_s`` while the host is away, and to ``auth_retry_s`` after
    a refusal, doubling with each refusal in a row up to ``max_blocked_wait_s``.
    """

    enabled: bool = True
    initial_s: float = 0.25
    max_s: float = 2.0
    delay_s: float = 0.25
    ever_streamed: bool = False
    #: After a refusal on a host it once streamed from.
    auth_retry_s: float = 5.0
    #: The longest a "blocked" reply (unauthenticated: maybe forged), or refusals in a row, make it wait.
    max_blocked_wait_s: float = 300.0
    #: Refusals in a row (each doubles the wait after the first, ``auth_retry_s``).
    refusals: int = 0

    #: "Busy" replies in a row (the host made no challenge for now) after which a viewer that never streamed
    #: gives up; each waits what the reply asks, at most ``max_busy_wait_s``.
    max_busy_replies: int = 10
    max_busy_wait_s: float = 10.0
    busy_replies: int = 0

    def after(
        self, *, streamed: bool, auth_failed: bool, retry_after_s: float = 0.0, busy: bool = False
    ) -> float | None:
        """A connection ended; seconds until the next attempt, or None to stop."""
        self.ever_streamed |= streamed
        self.busy_replies = self.busy_replies + 1 if busy else 0
        if busy and self.enabled and not self.ever_streamed and self.busy_replies <= self.max_busy_replies:
            return min(self.max_busy_wait_s, max(self.initial_s, retry_after_s))
        if not self.enabled or not self.ever_streamed:
            return None  # a wrong password fails the same way again (and gets the address blocked)
        self.delay_s = self.initial_s if streamed else min(self.max_s, self.delay_s * 2)
        if not auth_failed or streamed:
            self.refusals = 0
        if auth_failed:
            # Once it has streamed, a refusal does not stop the viewer for good: nobody can authenticate a refusal,
            # so someone on the path may have forged it.  It tries again, slowly, and slower each time in a row
            # (an impostor at the host's address would get a guess at its code with each try).
            self.refusals += 1
            backoff = min(self.max_blocked_wait_s, self.auth_retry_s * 2 ** (self.refusals - 1))
            self.delay_s = max(self.delay_s, backoff, min(retry_after_s, self.max_blocked_wait_s))
        return self.delay_s
