"""The host's side of the control protocol, for every viewer at once (protocol.md §3).

Pure: the host's network shell hands over what arrives — a TCP connection
opening (:meth:`HostSessions.open`, with a random cookie the shell drew), each
framed control message (:meth:`HostSessions.control`), each UDP datagram
(:meth:`HostSessions.datagram`), the connection closing
(:meth:`HostSessions.close`) — with the time it read it, and performs the
returned outputs: control bytes to write, datagrams to send, connections to
close, lines to log.  It calls :meth:`HostSessions.handle_timer` when
:meth:`HostSessions.next_timer` comes due (the 15 s keep-alive).

The media fan-out asks :meth:`HostSessions.video_targets` /
:meth:`HostSessions.audio_targets` for the viewers of each encoded packet and
sends through each viewer's own :class:`~pyrofling.core.packetizer.Packetizer`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from pyrofling.core.gamepad import GamepadRouter, PadUpdate, Verdict
from pyrofling.core.keyframes import KeyframePolicy
from pyrofling.core.packetizer import Packetizer
from pyrofling.wire import (
    EXTENSIONS_VERSION,
    Again,
    CodecParameters,
    ControlMessage,
    Cookie,
    ExtensionFeature,
    Extensions,
    GamepadState,
    Hello,
    Kick,
    KickFlags,
    Nak,
    PhaseOffset,
    Ping,
    PingReply,
    Progress,
    ProtocolError,
    RequestKeyframe,
    UnknownControl,
    parse_udp_control,
)

#: A socket address as asyncio reports it: (host, port) or (host, port, flowinfo, scope_id).
Address: TypeAlias = tuple[Any, ...]

# --------------------------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------------------------


class HostOutput:
    """Base of what :class:`HostSessions` asks the shell to do."""


@dataclass(frozen=True, slots=True)
class SendControl(HostOutput):
    conn_id: int
    data: bytes  # one whole message: write it in one call


@dataclass(frozen=True, slots=True)
class SendDatagram(HostOutput):
    address: Address
    data: bytes


@dataclass(frozen=True, slots=True)
class CloseConnection(HostOutput):
    conn_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class LogLine(HostOutput):
    conn_id: int
    text: str


@dataclass(frozen=True, slots=True)
class PhaseFeedback(HostOutput):
    """A kicked viewer's PHASE_OFFSET, for the frame clock (µs, positive = deliver later)."""

    conn_id: int
    offset_us: int


@dataclass(frozen=True, slots=True)
class GamepadInput(HostOutput):
    """A state for the virtual pad: write ``update.events`` to it (they may be empty: nothing changed)."""

    update: PadUpdate


# --------------------------------------------------------------------------------------------
# State
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HostSessionConfig:
    """Host control-protocol settings.  Seconds."""

    #: Drop a connection this long after its last KICK or PROGRESS (protocol.md §3.3).
    keepalive_timeout_s: float = 15.0
    #: Extension features this host grants (protocol.md §7.2).
    extensions: ExtensionFeature = ExtensionFeature.KEYFRAME_REQUEST
    #: At most one PROGRESS log line per viewer per this interval.
    progress_log_interval_s: float = 1.0
    #: A kicked viewer whose PROGRESS still shows no key frame this long after we sent one asks for another.
    key_frame_grace_s: float = 1.0


@dataclass(slots=True)
class ViewerConnection:
    """One TCP connection and what the host knows about it."""

    conn_id: int
    peer: Address
    cookie: int
    opened_s: float
    last_alive_s: float
    hello: bool = False
    flags: KickFlags = KickFlags.NONE
    kicked: bool = False
    kicked_s: float | None = None
    udp_address: Address | None = None
    extensions: ExtensionFeature = ExtensionFeature.NONE
    packetizer: Packetizer | None = None
    #: No video goes out until this viewer has been sent an IDR (its first video packet is a key frame).
    awaiting_idr: bool = True
    idr_sent_s: float | None = None
    progress: Progress = field(default_factory=Progress)
    progress_messages: int = 0
    last_log_s: float | None = None
    phase_offsets: int = 0
    gamepad_states: int = 0
    pings: int = 0

    @property
    def label(self) -> str:
        return f"{self.peer[0]} @ {self.peer[1]}"

    def wants(self, flag: KickFlags) -> bool:
        return self.kicked and self.udp_address is not None and bool(self.flags & flag)


class HostSessions:
    """All viewer connections of one host (see the module docstring for the contract)."""

    def __init__(
        self,
        *,
        make_packetizer: Callable[[int], Packetizer],
        keyframes: KeyframePolicy | None = None,
        config: HostSessionConfig | None = None,
    ) -> None:
        self.config = config or HostSessionConfig()
        self.keyframes = keyframes or KeyframePolicy()
        self.codec_parameters: CodecParameters | None = None
        self._make_packetizer = make_packetizer
        self._connections: dict[int, ViewerConnection] = {}
        self._by_cookie: dict[int, ViewerConnection] = {}
        self._by_address: dict[Address, ViewerConnection] = {}
        #: Datagrams and messages ignored, by reason.
        self.discarded: Counter[str] = Counter()
        self.connections_total = 0
        self.timed_out = 0
        #: Who drives the one virtual pad (protocol.md §7.6).
        self.gamepad = GamepadRouter()
        self._pad_holder: int | None = None

    # -- connections ---------------------------------------------------------------------

    def open(self, conn_id: int, peer: Address, cookie: int, now: float) -> list[HostOutput]:
        if cookie in self._by_cookie:
            raise ValueError("cookie already in use; draw another")
        conn = ViewerConnection(conn_id=conn_id, peer=peer, cookie=cookie, opened_s=now, last_alive_s=now)
        self._connections[conn_id] = conn
        self._by_cookie[cookie] = conn
        self.connections_total += 1
        return []

    def close(self, conn_id: int) -> list[HostOutput]:
        """The shell saw the connection end (or closed it).  If it held the gamepad, the pad lets go."""
        conn = self._connections.pop(conn_id, None)
        if conn is None:
            return []
        self._by_cookie.pop(conn.cookie, None)
        if conn.udp_address is not None and self._by_address.get(conn.udp_address) is conn:
            del self._by_address[conn.udp_address]
        release = self.gamepad.connection_closed(conn_id)
        if self._pad_holder == conn_id:
            self._pad_holder = None
        return [GamepadInput(release)] if release is not None else []

    def connection(self, conn_id: int) -> ViewerConnection | None:
        return self._connections.get(conn_id)

    @property
    def connections(self) -> list[ViewerConnection]:
        return list(self._connections.values())

    def video_targets(self, *, idr: bool) -> list[ViewerConnection]:
        """Viewers that get this video packet.  Call :meth:`idr_sent` after sending an IDR."""
        return [c for c in self._connections.values() if c.wants(KickFlags.VIDEO) and (idr or not c.awaiting_idr)]

    def audio_targets(self) -> list[ViewerConnection]:
        return [c for c in self._connections.values() if c.wants(KickFlags.AUDIO)]

    def idr_sent(self, conn: ViewerConnection, now: float) -> None:
        conn.awaiting_idr = False
        conn.idr_sent_s = now

    # -- TCP -------------------------------------------------------------------------------

    def control(self, conn_id: int, msg: ControlMessage | UnknownControl, now: float) -> list[HostOutput]:
        conn = self._connections.get(conn_id)
        if conn is None:
            return []
        if isinstance(msg, Hello):
            conn.hello = True
            return [SendControl(conn_id, bytes(Cookie(conn.cookie)))]
        if isinstance(msg, Extensions):
            granted = msg.feature_flags & self.config.extensions
            conn.extensions = granted
            return [SendControl(conn_id, bytes(Extensions(EXTENSIONS_VERSION, int(granted))))]
        if isinstance(msg, Kick):
            return self._kick(conn, msg.flags, now)
        if isinstance(msg, Progress):
            return self._progress(conn, msg, now)
        if isinstance(msg, RequestKeyframe):
            if conn.wants(KickFlags.VIDEO):
                self.keyframes.loss_reported()
            return []
        # Anything else (unknown ids, messages only the host sends): NAK, as the reference does.
        self.discarded["unexpected_control"] += 1
        return [SendControl(conn_id, bytes(Nak()))]

    def _kick(self, conn: ViewerConnection, flags: KickFlags, now: float) -> list[HostOutput]:
        conn.flags = flags
        conn.last_alive_s = now
        if flags & KickFlags.GAMEPAD:
            self.gamepad.reset_ownership()  # as the reference: a (re)joining player may take the pad
        if conn.kicked:
            return [LogLine(conn.conn_id, f"redundant KICK from {conn.label}")]
        if conn.udp_address is None:
            return [SendControl(conn.conn_id, bytes(Nak()))]
        if self.codec_parameters is None:
            return [SendControl(conn.conn_id, bytes(Again()))]
        conn.kicked = True
        conn.kicked_s = now
        conn.packetizer = self._make_packetizer(conn.cookie)
        if flags & KickFlags.VIDEO:
            self.keyframes.viewer_joined()
        return [
            SendControl(conn.conn_id, bytes(self.codec_parameters)),
            LogLine(conn.conn_id, f"viewer {conn.label} kicked with {_flag_names(flags)}"),
        ]

    def _progress(self, conn: ViewerConnection, msg: Progress, now: float) -> list[HostOutput]:
        conn.last_alive_s = now
        previous = conn.progress
        conn.progress = msg
        conn.progress_messages += 1
        video = conn.wants(KickFlags.VIDEO)
        # A pyrofling viewer asks with REQUEST_KEYFRAME the moment it loses a packet;
        # its once-a-second PROGRESS would only force a second, late IDR.
        asks_itself = bool(conn.extensions & ExtensionFeature.KEYFRAME_REQUEST)
        if video and msg.dropped_video != previous.dropped_video and not asks_itself:
            self.keyframes.loss_reported()
        if (
            video
            and msg.key_frames == 0
            and conn.idr_sent_s is not None
            and now - conn.idr_sent_s >= self.config.key_frame_grace_s
        ):
            self.keyframes.loss_reported()  # the IDR we sent it never arrived
        out: list[HostOutput] = []
        if conn.flags & (KickFlags.VIDEO | KickFlags.AUDIO) and (
            conn.last_log_s is None or now - conn.last_log_s >= self.config.progress_log_interval_s
        ):
            conn.last_log_s = now
            out.append(
                LogLine(
                    conn.conn_id,
                    f"PROGRESS for {conn.label}: {msg.received} complete, {msg.dropped_video} dropped video, "
                    f"{msg.dropped_audio} dropped audio, {msg.key_frames} key frames, "
                    f"{msg.fec_recovered} FEC recovered.",
                )
            )
        return out

    # -- UDP -------------------------------------------------------------------------------

    def datagram(self, address: Address, data: bytes, now: float) -> list[HostOutput]:
        """A datagram from a viewer.  ``now`` is also the server clock a ping reply carries."""
        try:
            msg = parse_udp_control(data)
        except ProtocolError as exc:
            self.discarded[exc.reason] += 1
            return []
        if isinstance(msg, Cookie):
            conn = self._by_cookie.get(msg.cookie)
            if conn is None:
                self.discarded["unknown_cookie"] += 1
            elif conn.udp_address is None:
                if address in self._by_address:
                    self.discarded["address_taken"] += 1
                else:
                    conn.udp_address = address
                    self._by_address[address] = conn
            elif conn.udp_address != address:
                self.discarded["rebind_refused"] += 1
            return []
        conn = self._by_address.get(address)
        if conn is None:
            self.discarded["unknown_peer"] += 1
            return []
        if not conn.kicked:
            self.discarded["not_kicked"] += 1
            return []
        if isinstance(msg, Ping):
            conn.pings += 1
            return [SendDatagram(address, bytes(PingReply(msg.seq, int(now * 1_000_000))))]
        if isinstance(msg, PhaseOffset):
            conn.phase_offsets += 1
            return [PhaseFeedback(conn.conn_id, msg.ideal_phase_offset_us)]
        if isinstance(msg, GamepadState):
            return self._gamepad(conn, msg)
        return []

    def _gamepad(self, conn: ViewerConnection, msg: GamepadState) -> list[HostOutput]:
        if not conn.flags & KickFlags.GAMEPAD:
            self.discarded["gamepad_not_requested"] += 1
            return []
        conn.gamepad_states += 1
        verdict, update = self.gamepad.offer(conn.conn_id, msg)
        if verdict is not Verdict.APPLIED or update is None:
            self.discarded[f"gamepad_{verdict.value}"] += 1
            return []
        out: list[HostOutput] = [GamepadInput(update)]
        if self._pad_holder != conn.conn_id:
            self._pad_holder = conn.conn_id
            how = "took the gamepad over" if update.took_over else "has the gamepad"
            out.append(LogLine(conn.conn_id, f"{conn.label} {how}"))
        return out

    # -- timers ----------------------------------------------------------------------------

    def next_timer(self) -> float | None:
        if not self._connections:
            return None
        return min(c.last_alive_s for c in self._connections.values()) + self.config.keepalive_timeout_s

    def handle_timer(self, now: float) -> list[HostOutput]:
        out: list[HostOutput] = []
        for conn in list(self._connections.values()):
            if now - conn.last_alive_s >= self.config.keepalive_timeout_s:
                self.timed_out += 1
                out += self.close(conn.conn_id)
                reason = f"no KICK or PROGRESS for {self.config.keepalive_timeout_s:g} s"
                out.append(CloseConnection(conn.conn_id, reason))
        return out


def _flag_names(flags: KickFlags) -> str:
    names = [f.name.lower() for f in (KickFlags.VIDEO, KickFlags.AUDIO, KickFlags.GAMEPAD) if flags & f and f.name]
    return "+".join(names) or "nothing"
