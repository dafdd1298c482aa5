"""The viewer's side of the control protocol (protocol.md §3.3, §7.2).

Pure: the viewer's network shell calls :meth:`ViewerSession.start` once the TCP
connection is open, passes every control message from the host to
:meth:`ViewerSession.control`, tells it about UDP traffic and video events
(:meth:`datagram_received`, :meth:`video_packet`, :meth:`video_lost`,
:meth:`ping_reply`), and performs the returned outputs: control bytes for TCP
(one message per write), datagrams for UDP, and the state changes
(:class:`Streaming`, :class:`SessionFailed`, :class:`StreamStalled`).  It calls
:meth:`handle_timer` when :meth:`next_timer` comes due.

Past the native client: PROGRESS once a second whether or not packets arrive
(a stalled stream does not get us dropped), a paced KICK retry instead of 64
back-to-back attempts, pings without a gamepad, an RTT-midpoint clock mapping,
and an explicit key-frame request when the host negotiated it.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from pyrofling.core.bitstream import KeyGate, KeyInfo
from pyrofling.core.control_channel import ControlChannel
from pyrofling.core.secure import (
    AuthError,
    Opener,
    Sealer,
)
from pyrofling.core.viewer.auth import AuthFailed, HostCredential, ViewerAuth
from pyrofling.core.viewer.clock_sync import ClockSync
from pyrofling.core.viewer.reassembler import ProgressCounters
from pyrofling.wire import (
    ALL_EXTENSIONS,
    EXTENSIONS_VERSION,
    SEALED_HEAD,
    SEALED_MAGIC,
    Again,
    AuthChallenge,
    AuthResult,
    AuthStatus,
    CodecParameters,
    ControlMessage,
    Cookie,
    ExtensionFeature,
    Extensions,
    Hello,
    Kick,
    KickFlags,
    Nak,
    PadAssigned,
    PathChallenge,
    PathResponse,
    PhaseOffset,
    Ping,
    Player,
    ProtocolError,
    RequestKeyframe,
    Rumble,
    StreamRate,
    UnknownControl,
    VideoCodec,
    ViewerCodecs,
    ViewerDisplay,
    ViewerPictureRate,
)

# --------------------------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------------------------


class ViewerOutput:
    """Base of what :class:`ViewerSession` asks the shell to do or tells it."""


@dataclass(frozen=True, slots=True)
class ControlToHost(ViewerOutput):
    """Write one whole control message on the TCP connection."""

    data: bytes


@dataclass(frozen=True, slots=True)
class DatagramToHost(ViewerOutput):
    """Send one datagram (already sealed when the session is encrypted)."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Streaming(ViewerOutput):
    """The handshake finished: media will flow."""

    codec_parameters: CodecParameters
    extensions: ExtensionFeature
    handshake_s: float


@dataclass(frozen=True, slots=True)
class SessionFailed(ViewerOutput):
    reason: str
    #: The host blocked this address for this long (an AUTH_RESULT that nobody can authenticate: maybe forged).
    retry_after_s: float = 0.0
    #: The host made no challenge for now (too many handshakes at once): worth trying again even on a first
    #: connection.
    busy: bool = False


@dataclass(frozen=True, slots=True)
class PlayRumble(ViewerOutput):
    """The host says the player's pad should rumble (RUMBLE, protocol.md §7.13)."""

    rumble: Rumble


@dataclass(frozen=True, slots=True)
class Paired(ViewerOutput):
    """The host accepted the code and remembers this viewer: store the credential."""

    credential: HostCredential


@dataclass(frozen=True, slots=True)
class CodecChanged(ViewerOutput):
    """The host streams another codec from its next key frame on (``host --codec auto``, protocol.md §7.15)."""

    before: VideoCodec
    after: VideoCodec


@dataclass(frozen=True, slots=True)
class StreamStalled(ViewerOutput):
    """No UDP for ``stall_timeout_s``: the shell should reconnect."""

    silent_s: float


# --------------------------------------------------------------------------------------------
# Session
# --------------------------------------------------------------------------------------------


class Phase(Enum):
    IDLE = "idle"
    HELLO = "waiting for cookie"
    EXTENSIONS = "negotiating extensions"
    AUTH = "authenticating"
    KICKING = "kicking"
    STREAMING = "streaming"
    FAILED = "failed"


#: Before streaming, the handshake's deadline holds.  Looked up once: :meth:`ViewerSession.next_timer` runs after
#: every read of the socket, and an enum member costs 0.2 µs a lookup on Python 3.11.
_HANDSHAKING = frozenset({Phase.HELLO, Phase.EXTENSIONS, Phase.AUTH, Phase.KICKING})
_STREAMING = Phase.STREAMING


@dataclass(frozen=True, slots=True)
class ViewerSessionConfig:
    """Viewer control settings.  Seconds unless named otherwise."""

    #: What to subscribe to (KICK flags).
    flags: KickFlags = KickFlags.VIDEO | KickFlags.AUDIO
    #: Extension features to ask for; NONE behaves exactly like a native viewer.
    extensions: ExtensionFeature = ALL_EXTENSIONS
    #: Who plays, the same across reconnects: a host with a pad per player gives it its pad back (§7.12).
    player_token: int | None = None
    #: The host's password or pairing code, for a host that asks (protocol.md §7.7).
    secret: str | None = field(default=None, repr=False)
    #: Credentials from earlier pairings; the host's AUTH_CHALLENGE names which one applies.
    credentials: tuple[HostCredential, ...] = field(default=(), repr=False)
    #: The host this viewer paired with at this address (its id): only it is accepted here, and it must
    #: authenticate.
    paired_host_id: bytes | None = None
    #: Ask the host to remember this viewer under this name (with ``secret``: the pairing code).
    pair_as: str | None = None
    #: Watch a host that does not authenticate even though we have a secret for it (the stream is not sealed).
    allow_open_host: bool = False
    #: Pause between KICK attempts answered NAK/AGAIN.
    kick_retry_s: float = 0.01
    #: Give up on the handshake after this long.
    handshake_timeout_s: float = 5.0
    progress_interval_s: float = 1.0
    ping_interval_s: float = 0.25
    #: The host's clock minus ours where it is known (0: the host runs on this machine); None: estimated from
    #: the pings, which a one-way delay skews by half of it.
    host_clock_offset_s: float | None = None
    #: No UDP this long while streaming = stalled (protocol.md §3.3).
    stall_timeout_s: float = 5.0
    #: While still waiting for a key frame after asking, ask again after this long (the IDR itself may be lost).
    keyframe_retry_s: float = 0.05
    #: Ask for a key frame after a loss nothing repaired (False: let intra refresh heal the picture).
    request_key_frames: bool = True
    #: The display this viewer shows the picture on: width, height, refresh in mHz (0: unknown); a host that makes
    #: its own desktop makes it that size (DISPLAY, protocol.md §7.14). None: say nothing.
    display: tuple[int, int, int] | None = None
    #: The video codecs this viewer decodes, said to a host that chooses its codec by them (CODECS, protocol.md
    #: §7.15). None: say nothing (the host then keeps the codec this viewer joined with while it watches).
    video_codecs: frozenset[VideoCodec] | None = None
    #: The most pictures a second to ask the host for, in mHz (PICTURE_RATE, protocol.md §7.16). 0: say nothing.
    picture_rate_mhz: int = 0


@dataclass(slots=True)
class _Timers:
    kick: float | None = None
    progress: float | None = None
    ping: float | None = None


class ViewerSession:
    """Handshake, keep-alive, pings and key-frame requests of one connection."""

    def __init__(
        self,
        counters: ProgressCounters,
        config: ViewerSessionConfig | None = None,
        *,
        random_bytes: Callable[[int], bytes] = secrets.token_bytes,
    ) -> None:
        self.config = config or ViewerSessionConfig()
        self._random_bytes = random_bytes
        #: The control connection's framing, plain or sealed.
        self.channel = ControlChannel()
        self._offer: Extensions | None = None
        self._handshake: ViewerAuth | None = None
        self.authenticated = False
        #: "code" or "paired" once authenticated.
        self.auth_method = ""
        self.auth_failed = False
        self._sealer: Sealer | None = None
        self._opener: Opener | None = None
        #: Datagrams from the host refused unopened, by reason (forged, replayed, plaintext on a sealed session).
        self.refused: Counter[str] = Counter()
        self.counters = counters
        self.phase = Phase.IDLE
        self.cookie: int | None = None
        self.codec_parameters: CodecParameters | None = None
        self.extensions = ExtensionFeature.NONE
        self.kick_attempts = 0
        self.clock = ClockSync(known_offset_s=self.config.host_clock_offset_s)
        self.gate = KeyGate()
        self.keyframe_requests = 0
        self.progress_sent = 0
        self.phase_offsets_sent = 0
        self.path_challenges = 0
        self._started_s = 0.0
        self._last_udp_s: float | None = None
        self._timers = _Timers()
        self._ping_seq = 0
        self._ping_sent: dict[int, float] = {}
        self._key_requested_s: float | None = None
        self._immediate_progress = False
        self.failure: str | None = None
        #: The host's last word on the stream's bitrate (RATE_CONTROL, protocol.md §7.10).
        self.stream_rate: StreamRate | None = None
        #: The pad this viewer drives and how many the host has (PADS, §7.12); None: not told.
        self.pad_assigned: tuple[int, int] | None = None
        self._player_sent = False
        self._codecs_sent = False
        #: Times the host changed the stream's codec (CODEC_PARAMETERS while streaming).
        self.codec_changes = 0
        #: The display told to the host last (DISPLAY), and the one to tell.
        self.display_sent: tuple[int, int, int] | None = None
        self.display = self.config.display
        #: The picture rate asked for last (PICTURE_RATE), and the one to ask for.
        self.picture_rate_sent = 0
        self.picture_rate_mhz = self.config.picture_rate_mhz

    # -- handshake -------------------------------------------------------------------------

    def start(self, now: float) -> list[ViewerOutput]:
        self._started_s = now
        self.phase = Phase.HELLO
        out: list[ViewerOutput] = [self._send(Hello())]
        if self.config.extensions:
            # Pipelined: the host answers HELLO then EXTENSIONS (or NAK, a native host) in order.
            self._offer = Extensions(EXTENSIONS_VERSION, int(self.config.extensions))
            out.append(self._send(self._offer))
        return out

    def _send(self, message: ControlMessage) -> ControlToHost:
        return ControlToHost(self.channel.encode(message))

    @property
    def turned_away(self) -> bool:
        """The connection ended before the host said a word (no COOKIE): it had too many connections, or too many
        from this address at once, and says so by closing. Worth trying again, like a "busy" reply."""
        return self.phase is Phase.HELLO and self.cookie is None

    @property
    def needs_auth(self) -> bool:
        """Whether this viewer accepts only an authenticated, sealed stream."""
        cfg = self.config
        wants = cfg.secret is not None or cfg.paired_host_id is not None or cfg.pair_as is not None
        return wants and not cfg.allow_open_host

    def control_bytes(self, data: bytes, now: float) -> list[ViewerOutput]:
        """Bytes read from the control connection: its messages one by one (the handshake switches it to sealed
        records between two).  Bytes that do not frame or a record that does not open end the session."""
        self.channel.feed(data)
        out: list[ViewerOutput] = []
        while self.phase is not Phase.FAILED:
            try:
                msg = self.channel.next()
            except ProtocolError as exc:
                return out + self._fail(f"protocol error on the control channel: {exc}")
            except AuthError:
                self.refused["control_forged"] += 1
                return out + self._fail("a sealed control message did not open: changed on the path")
            if msg is None:
                break
            out += self.control(msg, now)
        return out

    def control(self, msg: ControlMessage | UnknownControl, now: float) -> list[ViewerOutput]:
        if self.phase == Phase.HELLO:
            if not isinstance(msg, Cookie):
                return self._fail(f"expected COOKIE after HELLO, got {_name(msg)}")
            self.cookie = msg.cookie
            if self.config.extensions:
                self.phase = Phase.EXTENSIONS
                return []
            return self._kick(now)
        if self.phase == Phase.EXTENSIONS:
            if isinstance(msg, Extensions):
                self.extensions = msg.feature_flags & self.config.extensions
            elif not isinstance(msg, Nak):  # NAK: a native host; plain protocol
                return self._fail(f"expected EXTENSIONS or NAK, got {_name(msg)}")
            sealed = ExtensionFeature.AUTH | ExtensionFeature.ENCRYPTION
            if self.extensions & sealed == sealed:
                self.phase = Phase.AUTH
                if isinstance(msg, Extensions) and self._offer is not None and self.cookie is not None:
                    cfg = self.config
                    self._handshake = ViewerAuth(
                        self._offer,
                        self.cookie,
                        msg,
                        secret=cfg.secret,
                        credentials=cfg.credentials,
                        pair_as=cfg.pair_as,
                        random_bytes=self._random_bytes,
                        expected_host_id=cfg.paired_host_id,
                    )
                return []
            if self.extensions & sealed:
                return self._fail(
                    "the host offered authentication without sealing: refusing a half-open stream", auth=True
                )
            if self.needs_auth:
                return self._fail(
                    "the host did not ask this viewer to authenticate: an open host, an impostor, or something on the "
                    "path removed it; not sending the pad to it (pass --allow-open-host to watch an open host)",
                    auth=True,
                )
            return self._kick(now)
        if self.phase == Phase.AUTH:
            return self._auth(msg, now)
        if self.phase == Phase.KICKING:
            if isinstance(msg, CodecParameters):
                return self._streaming(msg, now)
            if isinstance(msg, Nak | Again):
                self._timers.kick = now + self.config.kick_retry_s
                return []
            return self._fail(f"expected CODEC_PARAMETERS, AGAIN or NAK, got {_name(msg)}")
        if self.phase == Phase.STREAMING and isinstance(msg, CodecParameters):
            before = self.codec_parameters
            self.codec_parameters = msg  # a host may announce new parameters; keep the latest
            if before is not None and msg.video_codec != before.video_codec:
                return self._codec_changed(VideoCodec(before.video_codec), msg, now)
        elif (
            self.phase == Phase.STREAMING
            and isinstance(msg, StreamRate)
            and self.extensions & ExtensionFeature.RATE_CONTROL
        ):
            self.stream_rate = msg
        elif self.phase == Phase.STREAMING and isinstance(msg, PadAssigned) and self._granted(ExtensionFeature.PADS):
            self.pad_assigned = (msg.pad, msg.pads)
        elif self.phase == Phase.STREAMING and isinstance(msg, Rumble) and self._granted(ExtensionFeature.RUMBLE):
            return [PlayRumble(msg)]
        else:
            self.refused["control_ignored"] += 1  # nothing to do with it now (an unknown id, a late NAK...)
        return []

    def _granted(self, feature: ExtensionFeature) -> bool:
        return bool(self.extensions & feature)

    def _auth(self, msg: ControlMessage | UnknownControl, now: float) -> list[ViewerOutput]:
        """Challenge → response → result (protocol.md §7.7); :class:`ViewerAuth` does the cryptography."""
        auth = self._handshake
        try:
            if auth is not None and isinstance(msg, AuthChallenge) and not auth.answered:
                response = auth.respond(msg)
                self.auth_method = auth.method
                return [self._send(response)]
            if auth is not None and isinstance(msg, AuthResult) and auth.answered:
                keys, credential = auth.result(msg)
            elif auth is not None and isinstance(msg, AuthResult) and msg.status == AuthStatus.BLOCKED:
                wait = msg.retry_after_ms / 1000  # before any challenge: the host makes no more just now
                reason = f"the host is busy with other handshakes: try again in {wait:.1f} s"
                return self._fail(reason, auth=True, retry_after_s=wait, busy=True)
            else:
                return self._fail(f"expected AUTH_CHALLENGE or AUTH_RESULT, got {_name(msg)}")
        except AuthFailed as exc:
            return self._fail(str(exc), auth=True, retry_after_s=exc.retry_after_s)
        self._handshake = None
        self.authenticated = True
        # Everything after AUTH_RESULT is sealed, both ways.
        self.channel.seal_with(keys.control_viewer_to_host)
        self.channel.open_with(keys.control_host_to_viewer)
        self._sealer, self._opener = Sealer(keys.datagram_viewer_to_host), Opener(keys.datagram_host_to_viewer)
        out: list[ViewerOutput] = [Paired(credential)] if credential is not None else []
        return out + self._kick(now)

    def control_closed(self) -> list[ViewerOutput]:
        """The host ended the control connection. After this viewer's proof and before the host's answer to it,
        that is a refusal (``SessionFailed`` with ``auth_failed``): an impostor at the host's address who ends the
        connection instead of refusing learns from each proof whether its guess at the code was right, and must
        not be given the next one at once (the viewer then waits as after a refusal, longer each time)."""
        if self._proof_unanswered:
            return self._fail(
                "the host ended the connection after this viewer's proof, without an answer: counted as a refusal",
                auth=True,
            )
        return []

    @property
    def _proof_unanswered(self) -> bool:
        return self.phase is Phase.AUTH and self._handshake is not None and self._handshake.answered

    @property
    def encrypted(self) -> bool:
        return self._sealer is not None

    def udp(self, message: bytes) -> bytes:
        """A viewer → host UDP message as it goes on the wire: sealed, with the cookie in front, when encrypted."""
        if self._sealer is None or self.cookie is None:
            return message
        head = SEALED_HEAD.pack(SEALED_MAGIC, self.cookie)
        return head + self._sealer.seal(message, aad=head)

    def open_datagram(self, data: bytes) -> bytes | None:
        """A datagram from the host as the reassembler reads it; None (counted) when it must be dropped."""
        if self._opener is None:
            return data
        try:
            return self._opener.open(data)
        except AuthError as exc:
            self.refused[str(exc)] += 1
            return None

    def path_challenge(self, plain: bytes) -> list[ViewerOutput] | None:
        """The answer when an opened datagram is the host's PATH_CHALLENGE (our address looked new to it);
        None when it is media.  A media header never starts with a sign-extended type word (protocol.md §7.7)."""
        if self._opener is None or len(plain) != _PATH_CHALLENGE_BYTES:  # every datagram passes here: no encoding
            return None
        try:
            msg = PathChallenge.parse(plain)
        except ProtocolError:
            return None
        self.path_challenges += 1
        return [DatagramToHost(self.udp(bytes(PathResponse(msg.token))))]

    def _kick(self, now: float) -> list[ViewerOutput]:
        assert self.cookie is not None
        self.phase = Phase.KICKING
        self.kick_attempts += 1
        self._timers.kick = None
        flags = self.config.flags
        if not self.extensions & ExtensionFeature.KEYBOARD_MOUSE:
            flags &= ~KickFlags.KEYBOARD_MOUSE  # only to a host that offered it
        out: list[ViewerOutput] = [DatagramToHost(self.udp(bytes(Cookie(self.cookie))))]
        token = self.config.player_token
        tell = token is not None and flags & KickFlags.GAMEPAD and self._granted(ExtensionFeature.PADS)
        if tell and token is not None and not self._player_sent:  # once per connection, before its first KICK
            self._player_sent = True
            out.append(self._send(Player(token)))
        out += self._tell_display()
        out += self._ask_picture_rate()
        codecs = self.config.video_codecs
        if codecs is not None and self._granted(ExtensionFeature.CODECS) and not self._codecs_sent:
            self._codecs_sent = True  # once per connection, before its first KICK
            out.append(self._send(ViewerCodecs.of(codecs)))
        return [*out, self._send(Kick(flags))]

    def display_changed(self, width: int, height: int, refresh_mhz: int) -> list[ViewerOutput]:
        """The viewer's display (or window) is now this size: the host hears of it (once it granted DISPLAY)."""
        self.display = (max(0, min(0xFFFF, width)), max(0, min(0xFFFF, height)), max(0, min(0xFFFFFFFF, refresh_mhz)))
        return self._tell_display() if self.phase in (Phase.KICKING, Phase.STREAMING) else []

    def picture_rate_changed(self, rate_mhz: int) -> list[ViewerOutput]:
        """Ask the host for at most this many pictures a second, in mHz (0: its own rate), once it granted
        PICTURE_RATE; said before the first KICK and again whenever it changes (protocol.md §7.16)."""
        self.picture_rate_mhz = max(0, min(0xFFFFFFFF, rate_mhz))
        return self._ask_picture_rate() if self.phase in (Phase.KICKING, Phase.STREAMING) else []

    def _ask_picture_rate(self) -> list[ViewerOutput]:
        if self.picture_rate_mhz == self.picture_rate_sent or not self._granted(ExtensionFeature.PICTURE_RATE):
            return []
        self.picture_rate_sent = self.picture_rate_mhz
        return [self._send(ViewerPictureRate(self.picture_rate_mhz))]

    def _tell_display(self) -> list[ViewerOutput]:
        if self.display is None or self.display == self.display_sent or not self._granted(ExtensionFeature.DISPLAY):
            return []
        self.display_sent = self.display
        return [self._send(ViewerDisplay(*self.display))]

    def _streaming(self, params: CodecParameters, now: float) -> list[ViewerOutput]:
        if params.video_codec == 0 and self.config.flags & KickFlags.VIDEO:
            return self._fail("host has no video stream (video codec NONE)")
        self.phase = Phase.STREAMING
        self.codec_parameters = params
        self._last_udp_s = now  # the stall clock starts now
        self._timers.kick = None
        self._timers.progress = now + self.config.progress_interval_s
        self._timers.ping = now
        return [Streaming(params, self.extensions, now - self._started_s)]

    def _fail(
        self, reason: str, *, auth: bool = False, retry_after_s: float = 0.0, busy: bool = False
    ) -> list[ViewerOutput]:
        self.phase = Phase.FAILED
        self.failure = reason
        self.auth_failed = auth  # trying again at once would fail the same way (and get the address blocked)
        self._timers = _Timers()
        return [SessionFailed(reason, retry_after_s, busy)]

    # -- stream events ---------------------------------------------------------------------

    def datagram(self, data: bytes, now: float) -> tuple[bytes | None, list[ViewerOutput]]:
        """A datagram from the host: its media, opened if the session is sealed; or None, with the answer when it
        was the host's PATH_CHALLENGE, or nothing when it must be dropped (forged, replayed, plaintext on a sealed
        session: counted in :attr:`refused`)."""
        opened = self.open_datagram(data)
        if opened is None:
            return None, []
        answer = self.path_challenge(opened)
        if answer is not None:
            return None, answer
        self._last_udp_s = now
        return opened, []

    def video_packet(self, key: KeyInfo | None, now: float) -> tuple[bool, list[ViewerOutput]]:
        """A video packet goes to the decoder; returns (its picture is whole, outputs)."""
        first = key is not None and self.gate.key_frames == 0
        whole = self.gate.packet(key)
        if whole:
            self._key_requested_s = None
        out: list[ViewerOutput] = []
        if first:
            out += self._progress(now)  # tells a native host its IDR arrived
        return whole, out

    def _codec_changed(self, before: VideoCodec, msg: CodecParameters, now: float) -> list[ViewerOutput]:
        """Another codec from the host's next picture on, a key frame: nothing is whole until it comes, and if it
        does not within ``keyframe_retry_s`` (it came before this message, or was lost) one is asked for."""
        self.codec_changes += 1
        self.gate.lost()
        self._key_requested_s = now
        try:
            after = VideoCodec(msg.video_codec)
        except ValueError:
            after = VideoCodec.NONE
        return [CodecChanged(before, after)]

    def video_lost(self, now: float) -> list[ViewerOutput]:
        """Video packets will never arrive: pictures are broken until a key frame."""
        self.gate.lost()
        return self._ask_for_key_frame(now)

    def decode_failed(self, now: float) -> list[ViewerOutput]:
        return self.video_lost(now)

    def _ask_for_key_frame(self, now: float) -> list[ViewerOutput]:
        if self.phase != Phase.STREAMING or not self.config.request_key_frames:
            return []
        if self._key_requested_s is not None and now - self._key_requested_s < self.config.keyframe_retry_s:
            return []
        self._key_requested_s = now
        self.keyframe_requests += 1
        if self.extensions & ExtensionFeature.KEYFRAME_REQUEST:
            return [self._send(RequestKeyframe())]
        # A native host forces an IDR when the dropped-video counter in PROGRESS changes.
        return self._progress(now)

    def phase_offset(self, offset_us: int) -> list[ViewerOutput]:
        """The presentation loop's phase error for the host's frame clock (protocol.md §7.4)."""
        if self.phase != Phase.STREAMING:
            return []
        self.phase_offsets_sent += 1
        clamped = max(-(2**31), min(2**31 - 1, offset_us))
        return [DatagramToHost(self.udp(bytes(PhaseOffset(clamped))))]

    def ping_reply(self, seq: int, server_time_us: int, received_s: float) -> None:
        sent = self._ping_sent.pop(seq & 0xFF, None)
        if sent is not None:
            self.clock.add(sent, received_s, server_time_us)

    def _progress(self, now: float) -> list[ViewerOutput]:
        self.progress_sent += 1
        self._timers.progress = now + self.config.progress_interval_s
        return [self._send(self.counters.to_message())]

    # -- timers ----------------------------------------------------------------------------

    def next_timer(self) -> float | None:
        timers = self._timers
        times = [t for t in (timers.kick, timers.progress, timers.ping) if t is not None]
        phase = self.phase
        if phase in _HANDSHAKING:
            times.append(self._started_s + self.config.handshake_timeout_s)
        elif phase is _STREAMING:
            if self._last_udp_s is not None:
                times.append(self._last_udp_s + self.config.stall_timeout_s)
            if self._key_requested_s is not None and not self.gate.whole:
                times.append(self._key_requested_s + self.config.keyframe_retry_s)
        return min(times) if times else None

    def handle_timer(self, now: float) -> list[ViewerOutput]:
        if self.phase in _HANDSHAKING:
            if now - self._started_s >= self.config.handshake_timeout_s:
                unanswered = self._proof_unanswered  # an impostor that sits on the proof: a refusal too
                return self._fail(
                    f"handshake did not finish in {self.config.handshake_timeout_s:g} s "
                    f"({self.phase.value}{', the proof unanswered' if unanswered else ''}, "
                    f"{self.kick_attempts} KICK attempts)",
                    auth=unanswered,
                )
            if self._timers.kick is not None and now >= self._timers.kick:
                return self._kick(now)
            return []
        if self.phase != Phase.STREAMING:
            return []
        out: list[ViewerOutput] = []
        if self._last_udp_s is not None and now - self._last_udp_s >= self.config.stall_timeout_s:
            silent = now - self._last_udp_s
            self._last_udp_s = None  # report once
            out.append(StreamStalled(silent))
        if self._timers.progress is not None and now >= self._timers.progress:
            out += self._progress(now)
        if self._timers.ping is not None and now >= self._timers.ping:
            seq = self._ping_seq
            self._ping_seq = (seq + 1) & 0xFF
            self._ping_sent[seq] = now
            self._timers.ping = now + self.config.ping_interval_s
            out.append(DatagramToHost(self.udp(bytes(Ping(seq)))))
        if (
            self._key_requested_s is not None
            and not self.gate.whole
            and now - self._key_requested_s >= self.config.keyframe_retry_s
        ):
            out += self._ask_for_key_frame(now)
        return out


_PATH_CHALLENGE_BYTES = len(bytes(PathChallenge(0)))


def _name(msg: ControlMessage | UnknownControl) -> str:
    return f"message id {msg.message_id}" if isinstance(msg, UnknownControl) else msg.ID.name
