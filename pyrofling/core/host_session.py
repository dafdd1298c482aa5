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

import secrets
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from pyrofling.core.gamepad import GamepadRouter, PadUpdate, Verdict
from pyrofling.core.keyframes import KeyframePolicy
from pyrofling.core.packetizer import Packetizer
from pyrofling.core.secure import (
    NONCE_BYTES,
    PROOF_BYTES,
    SCRYPT_LOG2_N,
    AuthError,
    FailureLimiter,
    Opener,
    Sealer,
    check_proof,
    host_proof,
    session_keys,
    viewer_proof,
)
from pyrofling.wire import (
    EXTENSIONS_VERSION,
    SEALED_HEAD,
    Again,
    AuthChallenge,
    AuthResponse,
    AuthResult,
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
    sealed_cookie,
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
class ViewerLeft(HostOutput):
    """A connection is gone: its phase feedback no longer steers the frame clock."""

    conn_id: int


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
    #: The key stretched from the host's secret (protocol.md §7.7); None: no authentication, as the reference.
    auth_key: bytes | None = None
    #: The salt ``auth_key`` was stretched with, and scrypt's cost, both sent in AUTH_CHALLENGE.
    auth_salt: bytes = b""
    scrypt_log2_n: int = SCRYPT_LOG2_N
    #: Seal datagrams for authenticated viewers that support it.
    encrypt: bool = True
    #: With a secret: a connection that has not authenticated this long after it opened is closed.
    auth_timeout_s: float = 10.0
    #: Connections at once; more are closed at once (a flood cannot exhaust the host).
    max_connections: int = 64
    #: Connections from one IP address that have not KICKed yet; more from it are closed at once.
    max_pending_per_address: int = 8


@dataclass(slots=True)
class RemoteViewer:
    """One viewer (or gamepad client) as the host sees it: its TCP connection and what the host knows of it."""

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
    #: Authentication (protocol.md §7.7): the challenge's nonce, and whether the proof checked out.
    host_nonce: bytes | None = None
    authenticated: bool = False
    refusal_logged: bool = False
    #: With ENCRYPTION: seals what goes to this viewer, opens what it sends.
    sealer: Sealer | None = None
    opener: Opener | None = None

    @property
    def label(self) -> str:
        return f"{self.peer[0]} @ {self.peer[1]}"

    def outgoing(self, datagram: bytes) -> bytes:
        """A datagram as it goes on the wire to this viewer: sealed when the connection is encrypted."""
        return self.sealer.seal(datagram) if self.sealer is not None else datagram

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
        random_bytes: Callable[[int], bytes] = secrets.token_bytes,
        limiter: FailureLimiter | None = None,
    ) -> None:
        self.config = config or HostSessionConfig()
        self._random_bytes = random_bytes
        #: Failed authentications per address (protocol.md §7.7).
        self.limiter = limiter or FailureLimiter()
        self.auth_failures = 0
        self.auth_successes = 0
        self.keyframes = keyframes or KeyframePolicy()
        self.codec_parameters: CodecParameters | None = None
        self._make_packetizer = make_packetizer
        self._connections: dict[int, RemoteViewer] = {}
        self._by_cookie: dict[int, RemoteViewer] = {}
        self._by_address: dict[Address, RemoteViewer] = {}
        #: Datagrams and messages ignored, by reason.
        self.discarded: Counter[str] = Counter()
        self.connections_total = 0
        self.timed_out = 0
        #: TCP messages read from viewers, whatever became of them.
        self.control_messages = 0
        #: Who drives the one virtual pad (protocol.md §7.6).
        self.gamepad = GamepadRouter()
        self._pad_holder: int | None = None

    # -- connections ---------------------------------------------------------------------

    def open(self, conn_id: int, peer: Address, cookie: int, now: float) -> list[HostOutput]:
        """A new TCP connection; a CloseConnection back means it was refused (and is not tracked)."""
        if cookie in self._by_cookie:
            raise ValueError("cookie already in use; draw another")
        cfg = self.config
        if len(self._connections) >= cfg.max_connections:
            self.discarded["connection_limit"] += 1
            return [CloseConnection(conn_id, f"refused: already {cfg.max_connections} connections")]
        pending = sum(1 for c in self._connections.values() if not c.kicked and c.peer[0] == peer[0])
        if pending >= cfg.max_pending_per_address:
            self.discarded["pending_limit"] += 1
            return [CloseConnection(conn_id, f"refused: {pending} connections from {peer[0]} not streaming yet")]
        conn = RemoteViewer(conn_id=conn_id, peer=peer, cookie=cookie, opened_s=now, last_alive_s=now)
        self._connections[conn_id] = conn
        self._by_cookie[cookie] = conn
        self.connections_total += 1
        return []

    def close(self, conn_id: int) -> list[HostOutput]:
        """The shell saw the connection end (or closed it): it leaves, and if it held the pad, the pad lets go."""
        conn = self._connections.pop(conn_id, None)
        if conn is None:
            return []
        self._by_cookie.pop(conn.cookie, None)
        if conn.udp_address is not None and self._by_address.get(conn.udp_address) is conn:
            del self._by_address[conn.udp_address]
        release = self.gamepad.connection_closed(conn_id)
        if self._pad_holder == conn_id:
            self._pad_holder = None
        out: list[HostOutput] = [ViewerLeft(conn_id)]
        if release is not None:
            out.append(GamepadInput(release))
        return out

    def connection(self, conn_id: int) -> RemoteViewer | None:
        return self._connections.get(conn_id)

    @property
    def connections(self) -> list[RemoteViewer]:
        return list(self._connections.values())

    def video_targets(self, *, idr: bool) -> list[RemoteViewer]:
        """Viewers that get this video packet.  Call :meth:`idr_sent` after sending an IDR."""
        return [c for c in self._connections.values() if c.wants(KickFlags.VIDEO) and (idr or not c.awaiting_idr)]

    def audio_targets(self) -> list[RemoteViewer]:
        return [c for c in self._connections.values() if c.wants(KickFlags.AUDIO)]

    @property
    def auth_required(self) -> bool:
        return self.config.auth_key is not None

    def idr_sent(self, conn: RemoteViewer, now: float) -> None:
        conn.awaiting_idr = False
        conn.idr_sent_s = now

    # -- TCP -------------------------------------------------------------------------------

    def control(self, conn_id: int, msg: ControlMessage | UnknownControl, now: float) -> list[HostOutput]:
        conn = self._connections.get(conn_id)
        if conn is None:
            return []
        self.control_messages += 1
        if isinstance(msg, Hello):
            conn.hello = True
            return [SendControl(conn_id, bytes(Cookie(conn.cookie)))]
        if isinstance(msg, Extensions):
            return self._extensions(conn, msg)
        if isinstance(msg, AuthResponse):
            return self._auth_response(conn, msg, now)
        if self.auth_required and not conn.authenticated:
            return self._refuse(conn, msg)
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

    # -- authentication (protocol.md §7.7) --------------------------------------------------

    def _extensions(self, conn: RemoteViewer, msg: Extensions) -> list[HostOutput]:
        offered = self.config.extensions
        if self.auth_required:
            offered |= ExtensionFeature.AUTH
            if self.config.encrypt:
                offered |= ExtensionFeature.ENCRYPTION
        granted = msg.feature_flags & offered
        if not granted & ExtensionFeature.AUTH:
            granted &= ~ExtensionFeature.ENCRYPTION  # keys come from the authentication
        conn.extensions = granted
        out: list[HostOutput] = [SendControl(conn.conn_id, bytes(Extensions(EXTENSIONS_VERSION, int(granted))))]
        if granted & ExtensionFeature.AUTH:
            conn.host_nonce = self._random_bytes(NONCE_BYTES)
            challenge = AuthChallenge(
                self.config.auth_salt,
                conn.host_nonce,
                self.config.scrypt_log2_n,
                1 if granted & ExtensionFeature.ENCRYPTION else 0,
            )
            out.append(SendControl(conn.conn_id, bytes(challenge)))
        return out

    def _auth_response(self, conn: RemoteViewer, msg: AuthResponse, now: float) -> list[HostOutput]:
        key = self.config.auth_key
        if key is None or conn.host_nonce is None or conn.authenticated:
            self.discarded["unexpected_auth"] += 1
            return [SendControl(conn.conn_id, bytes(Nak()))]
        address = str(conn.peer[0])
        refused = bytes(AuthResult(0, bytes(PROOF_BYTES)))
        if self.limiter.blocked(address, now):
            self.discarded["auth_blocked"] += 1
            return [
                SendControl(conn.conn_id, refused),
                CloseConnection(conn.conn_id, f"{address} is blocked after repeated wrong secrets"),
            ]
        nonce = conn.host_nonce
        conn.host_nonce = None  # one response per challenge
        if not check_proof(viewer_proof(key, conn.cookie, nonce, msg.viewer_nonce), msg.proof):
            self.auth_failures += 1
            blocked = self.limiter.failed(address, now)
            note = f"; {address} blocked for {self.limiter.block_s:g} s" if blocked else ""
            return [
                SendControl(conn.conn_id, refused),
                LogLine(conn.conn_id, f"{conn.label}: wrong secret{note}"),
                CloseConnection(conn.conn_id, "authentication failed"),
            ]
        self.limiter.succeeded(address)
        self.auth_successes += 1
        conn.authenticated = True
        encrypted = bool(conn.extensions & ExtensionFeature.ENCRYPTION)
        if encrypted:
            keys = session_keys(key, conn.cookie, nonce, msg.viewer_nonce)
            conn.sealer, conn.opener = Sealer(keys.host_to_viewer), Opener(keys.viewer_to_host)
        proof = host_proof(key, conn.cookie, nonce, msg.viewer_nonce)
        return [
            SendControl(conn.conn_id, bytes(AuthResult(1, proof))),
            LogLine(conn.conn_id, f"{conn.label} authenticated" + (", datagrams sealed" if encrypted else "")),
        ]

    def _refuse(self, conn: RemoteViewer, msg: ControlMessage | UnknownControl) -> list[HostOutput]:
        """This host has a secret and this connection has not proved it knows it: NAK, no media, no pad."""
        self.discarded["unauthenticated_control"] += 1
        out: list[HostOutput] = [SendControl(conn.conn_id, bytes(Nak()))]
        if isinstance(msg, Kick) and not conn.refusal_logged:
            conn.refusal_logged = True
            if conn.extensions & ExtensionFeature.AUTH:
                why = "it has not authenticated"
            else:
                why = (
                    "this host needs a password and the viewer cannot authenticate (a native PyroFling viewer, "
                    "or an old pyrofling); run the host without --password only on a trusted network"
                )
            out.append(LogLine(conn.conn_id, f"refused {conn.label}: {why}"))
        return out

    def _kick(self, conn: RemoteViewer, flags: KickFlags, now: float) -> list[HostOutput]:
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
            LogLine(conn.conn_id, f"viewer {conn.label} joined for {_flag_names(flags)}"),
        ]

    def _progress(self, conn: RemoteViewer, msg: Progress, now: float) -> list[HostOutput]:
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
        cookie = sealed_cookie(data)
        if cookie is not None:
            return self._sealed(address, cookie, data, now)
        try:
            msg = parse_udp_control(data)
        except ProtocolError as exc:
            self.discarded[exc.reason] += 1
            return []
        if isinstance(msg, Cookie):
            self._bind(address, msg.cookie)
            return []
        conn = self._by_address.get(address)
        if conn is None:
            self.discarded["unknown_peer"] += 1
            return []
        if not self._plain_allowed(conn):
            return []
        return self._udp_message(conn, msg, now)

    def _bind(self, address: Address, cookie: int) -> None:
        """A plaintext COOKIE ties its connection to the address it came from: once, and never a sealed one."""
        conn = self._by_cookie.get(cookie)
        if conn is None:
            self.discarded["unknown_cookie"] += 1
            return
        if not self._plain_allowed(conn):  # it counts why not
            return
        if conn.udp_address is None:
            if address in self._by_address:
                self.discarded["address_taken"] += 1
            else:
                conn.udp_address = address
                self._by_address[address] = conn
        elif conn.udp_address != address:
            self.discarded["rebind_refused"] += 1

    def _plain_allowed(self, conn: RemoteViewer) -> bool:
        """Whether a plaintext datagram may act for ``conn``: not before authenticating, never when sealed."""
        if self.auth_required and not conn.authenticated:
            self.discarded["unauthenticated_udp"] += 1
            return False
        if conn.opener is not None:
            self.discarded["plaintext_refused"] += 1
            return False
        return True

    def _sealed(self, address: Address, cookie: int, data: bytes, now: float) -> list[HostOutput]:
        conn = self._by_cookie.get(cookie)
        if conn is None or conn.opener is None:
            self.discarded["sealed_unknown"] += 1
            return []
        head = SEALED_HEAD.size
        try:
            plain = conn.opener.open(data[head:], aad=data[:head])
        except AuthError as exc:
            self.discarded[str(exc)] += 1
            return []
        try:
            msg = parse_udp_control(plain)
        except ProtocolError as exc:
            self.discarded[f"sealed_{exc.reason}"] += 1
            return []
        if conn.udp_address != address:
            # Genuine (it opened under this connection's key), so following a new address is safe:
            # a NAT rebinding or a roaming viewer keeps its stream.  A spoofed source cannot get here.
            if self._by_address.get(address, conn) is not conn:
                self.discarded["address_taken"] += 1
                return []
            if conn.udp_address is not None:
                self._by_address.pop(conn.udp_address, None)
            conn.udp_address = address
            self._by_address[address] = conn
        if isinstance(msg, Cookie):
            return []
        return self._udp_message(conn, msg, now)

    def _udp_message(self, conn: RemoteViewer, msg: ControlMessage, now: float) -> list[HostOutput]:
        if not conn.kicked:
            self.discarded["not_kicked"] += 1
            return []
        assert conn.udp_address is not None
        if isinstance(msg, Ping):
            conn.pings += 1
            reply = bytes(PingReply(msg.seq, int(now * 1_000_000)))
            return [SendDatagram(conn.udp_address, conn.outgoing(reply))]
        if isinstance(msg, PhaseOffset):
            conn.phase_offsets += 1
            return [PhaseFeedback(conn.conn_id, msg.ideal_phase_offset_us)]
        if isinstance(msg, GamepadState):
            return self._gamepad(conn, msg)
        return []

    def _gamepad(self, conn: RemoteViewer, msg: GamepadState) -> list[HostOutput]:
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

    def summary(self) -> dict[str, object]:
        """Connections, authentication, and what was dropped and why."""
        return {
            "connections_total": self.connections_total,
            "control_messages": self.control_messages,
            "auth": {
                "required": self.auth_required,
                "encrypt": self.config.encrypt,
                "successes": self.auth_successes,
                "failures": self.auth_failures,
            },
            "timed_out": self.timed_out,
            "discarded": dict(self.discarded),
        }

    # -- timers ----------------------------------------------------------------------------

    def next_timer(self) -> float | None:
        if not self._connections:
            return None
        due = min(c.last_alive_s for c in self._connections.values()) + self.config.keepalive_timeout_s
        if self.auth_required:
            waiting = [c.opened_s for c in self._connections.values() if not c.authenticated]
            if waiting:
                due = min(due, min(waiting) + self.config.auth_timeout_s)
        return due

    def handle_timer(self, now: float) -> list[HostOutput]:
        out: list[HostOutput] = []
        for conn in list(self._connections.values()):
            if now - conn.last_alive_s >= self.config.keepalive_timeout_s:
                self.timed_out += 1
                out += self.close(conn.conn_id)
                reason = f"no KICK or PROGRESS for {self.config.keepalive_timeout_s:g} s"
                out.append(CloseConnection(conn.conn_id, reason))
            elif self.auth_required and not conn.authenticated and now - conn.opened_s >= self.config.auth_timeout_s:
                self.timed_out += 1
                out += self.close(conn.conn_id)
                out.append(CloseConnection(conn.conn_id, f"not authenticated after {self.config.auth_timeout_s:g} s"))
        return out


def _flag_names(flags: KickFlags) -> str:
    names = [f.name.lower() for f in (KickFlags.VIDEO, KickFlags.AUDIO, KickFlags.GAMEPAD) if flags & f and f.name]
    return "+".join(names) or "nothing"
