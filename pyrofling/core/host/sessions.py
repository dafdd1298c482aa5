"""The host's side of the control protocol, for every viewer at once (protocol.md §3).

Pure: the host's network shell hands over what arrives — a TCP connection
opening (:meth:`HostSessions.open`; the core draws its cookie), the bytes each
connection reads (:meth:`HostSessions.tcp_received`: plain messages, then
sealed records once it has authenticated), each UDP datagram
(:meth:`HostSessions.datagram`), the connection closing
(:meth:`HostSessions.close`) — with the time it read it, and performs the
returned outputs: control bytes to write, connections to close, lines to log,
and what the rest of the host acts on (pad states, phase feedback, bitrate).
The encoder's output comes in the same way (:meth:`HostSessions.send_video`,
:meth:`HostSessions.send_audio`).

Every datagram leaves by one road, as aioquic's connections do: the shell asks
:meth:`HostSessions.datagrams_to_send` after each input and whenever
:meth:`HostSessions.next_timer` comes due (pacing, the keep-alive, the
authentication deadline, held input), sends what it gets, and calls
:meth:`HostSessions.handle_timer` at that time too (:mod:`pyrofling.core.host.media_out`).

The outputs and what the host keeps per viewer are in :mod:`pyrofling.core.host.state`;
authentication (protocol.md §7.7) is :class:`~pyrofling.core.host.auth.HostAuth`'s, rate control
:class:`~pyrofling.core.host.rate.HostRate`'s, the players' pads, keyboard, mouse and rumble
:class:`~pyrofling.core.host.players.HostPlayers`'.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction

from pyrofling.core.host.admission import ConnectionBudget
from pyrofling.core.host.auth import HostAuth, PairedViewers
from pyrofling.core.host.codec_choice import BROWSER_CODECS, CodecChoice
from pyrofling.core.host.congestion import LinkController, RateConfig
from pyrofling.core.host.display import DisplayFollower
from pyrofling.core.host.keyframes import KeyframePolicy
from pyrofling.core.host.media_out import MediaOut
from pyrofling.core.host.pacer import PacedQueue, Pacer, TokenBucketPacer
from pyrofling.core.host.packetizer import MediaPacket, Packetizer
from pyrofling.core.host.picture_rate import PictureRateFollower, SetPictureRate
from pyrofling.core.host.players import HostPlayers
from pyrofling.core.host.rate import HostRate
from pyrofling.core.host.resend import RetainedPackets
from pyrofling.core.host.state import (
    BROWSER_CONN_IDS,
    Address,
    CloseConnection,
    GamepadInput,
    HostOutput,
    HostSessionConfig,
    KeyboardMouseInput,
    LogLine,
    PhaseFeedback,
    RemoteViewer,
    SendControl,
    SendDatagram,
    ViewerLeft,
    ViewerPaired,
)
from pyrofling.core.host.web_viewers import (
    BrowserDisplay,
    BrowserInput,
    BrowserJoined,
    BrowserLeft,
    BrowserRateReport,
    WebOutput,
    WebViewers,
)
from pyrofling.core.host.web_viewers import RequestKeyframe as BrowserWantsKeyframe
from pyrofling.core.input.pad.rumble import RumbleCommand
from pyrofling.core.secure import (
    AuthError,
    FailureLimiter,
    limiter_key,
    plain_ip,
)
from pyrofling.wire import (
    SEALED_HEAD,
    Again,
    AuthResponse,
    CodecParameters,
    ControlMessage,
    Cookie,
    ExtensionFeature,
    Extensions,
    GamepadState,
    Hello,
    InputState,
    Kick,
    KickFlags,
    LossReport,
    Nack,
    Nak,
    PathChallenge,
    PathResponse,
    PhaseOffset,
    Ping,
    PingReply,
    Player,
    Progress,
    ProtocolError,
    RateFeedback,
    RequestKeyframe,
    UnknownControl,
    VideoCodec,
    ViewerCodecs,
    ViewerDisplay,
    ViewerPictureRate,
    parse_udp_control,
    sealed_cookie,
)

#: What the host's shells take from here (the outputs and state live in host_state).
__all__ = [
    "Address",
    "CloseConnection",
    "GamepadInput",
    "HostOutput",
    "HostSessionConfig",
    "HostSessions",
    "KeyboardMouseInput",
    "LogLine",
    "PhaseFeedback",
    "RemoteViewer",
    "SendControl",
    "SendDatagram",
    "ViewerLeft",
    "ViewerPaired",
]


#: A browser's picture counted as QUIC packets of about this much video each (for its link's controller).
BROWSER_DATAGRAM_BYTES = 1300


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
        make_pacer: Callable[[], Pacer] = TokenBucketPacer,
        rate: RateConfig | None = None,
        rate_policy: str = "player",
        paired: PairedViewers | None = None,
        pads: int = 1,
        codec_choice: CodecChoice | None = None,
    ) -> None:
        self.config = config or HostSessionConfig()
        #: Which codec the encode uses, from what the viewers watching decode (``host --codec auto``, protocol.md
        #: §7.15); None: the host's one codec.
        self.codec_choice = codec_choice
        self._make_pacer = make_pacer
        #: The encoder's bitrate from the links of the viewers that report them (protocol.md §7.10); None: fixed.
        self.rate = HostRate(rate, rate_policy) if rate is not None else None
        self.keyframes = keyframes or KeyframePolicy()
        self.codec_parameters: CodecParameters | None = None
        self._make_packetizer = make_packetizer
        self._connections: dict[int, RemoteViewer] = {}
        self._by_cookie: dict[int, RemoteViewer] = {}
        self._by_address: dict[Address, RemoteViewer] = {}
        #: Browsers of the web viewer that play (``browser_joined``), by the web viewer's client number.
        self._browsers: dict[int, RemoteViewer] = {}
        #: Each browser's QUIC packets (lost, sent) as of its last arrivals report: the next counts from there.
        self._browser_packets: dict[int, tuple[int, int]] = {}
        #: Datagrams and messages ignored, by reason.
        self.discarded: Counter[str] = Counter()
        #: AUTH and ENCRYPTION (protocol.md §7.7).
        self.auth = HostAuth(self.config, self.discarded, random_bytes=random_bytes, limiter=limiter, paired=paired)
        #: New connections per address prefix, before any work is done for them.
        self.connection_budget = ConnectionBudget()
        self._random_bytes = random_bytes
        self.connections_total = 0
        self.timed_out = 0
        #: TCP messages read from viewers, whatever became of them.
        self.control_messages = 0
        #: Pads, keyboard and mouse, and rumble (protocol.md §7.6, §7.11–§7.13).
        self.players = HostPlayers(self.discarded, pads=pads)
        #: The display the host's own desktop follows (protocol.md §7.14).
        self.display = DisplayFollower()
        #: The picture rate, from the lowest the viewers ask (protocol.md §7.16); made at the first ask.
        self.picture_rate: PictureRateFollower | None = None
        #: Every datagram the host sends waits here until :meth:`datagrams_to_send`.
        self.media_out = MediaOut()
        self.pads = self.players.pads
        self.gamepads = self.players.gamepads
        self.gamepad = self.gamepads[1]  # the shared pad
        self.input = self.players.input

    # -- connections ---------------------------------------------------------------------

    def open(self, conn_id: int, peer: Address, now: float, *, cookie: int | None = None) -> list[HostOutput]:
        """A new TCP connection; a CloseConnection for it back means it was refused (and is not tracked), one for
        another connection that it took that one's place (every slot was taken).  ``cookie``:
        the one to give it (tests); by default a random 64-bit one (the reference counts from 1001, which anyone
        can guess)."""
        if cookie is None:
            cookie = self._draw_cookie()
        elif cookie in self._by_cookie:
            raise ValueError("cookie already in use; draw another")
        cfg = self.config
        prefix = limiter_key(str(peer[0]))
        if not self.connection_budget.take(prefix, now):
            self.discarded["connection_rate"] += 1
            return [CloseConnection(conn_id, f"refused: {prefix} opens connections too fast")]
        pending = sum(1 for c in self._connections.values() if not c.kicked and c.prefix == prefix)
        if pending >= cfg.max_pending_per_address:
            self.discarded["pending_limit"] += 1
            return [CloseConnection(conn_id, f"refused: {pending} connections from {prefix} not streaming yet")]
        out: list[HostOutput] = []
        if len(self._connections) >= cfg.max_connections:
            # Full: the oldest connection that is not streaming yet makes room (idle ones cannot lock friends
            # out); when every slot streams, the newcomer is refused.
            idle = [c for c in self._connections.values() if not c.kicked and not c.authenticated]
            if not idle:
                self.discarded["connection_limit"] += 1
                return [CloseConnection(conn_id, f"refused: already {cfg.max_connections} connections")]
            oldest = min(idle, key=lambda c: c.opened_s)
            self.discarded["evicted_idle"] += 1
            out += self.close(oldest.conn_id)
            out.append(CloseConnection(oldest.conn_id, "made room: the oldest connection not streaming yet"))
        conn = RemoteViewer(conn_id=conn_id, peer=peer, cookie=cookie, opened_s=now, last_alive_s=now, prefix=prefix)
        self._connections[conn_id] = conn
        self._by_cookie[cookie] = conn
        self.connections_total += 1
        return out

    def _draw_cookie(self) -> int:
        while True:
            cookie = int.from_bytes(self._random_bytes(8), "little")
            if cookie not in self._by_cookie:
                return cookie

    def close(self, conn_id: int) -> list[HostOutput]:
        """The shell saw the connection end (or closed it): it leaves, and if it held the pad, the pad lets go."""
        conn = self._connections.pop(conn_id, None)
        if conn is None:
            return []
        conn.closed = True
        self.media_out.left(conn)
        self._by_cookie.pop(conn.cookie, None)
        if conn.udp_address is not None and self._by_address.get(conn.udp_address) is conn:
            del self._by_address[conn.udp_address]
        out: list[HostOutput] = [ViewerLeft(conn_id), *self.players.left(conn)]
        # The next viewer's display, once the interval since the last change allows (at the next timer).
        out += self.display.left(conn_id, conn.last_alive_s)
        if conn.link is not None and self.rate is not None:
            out += self.rate.left(conn, conn.last_alive_s, self._video_viewers(), self.players.pad_holder)
        if self.codec_choice is not None:
            out += self.codec_choice.left(conn_id, conn.last_alive_s)
        if self.picture_rate is not None:
            out += self._picture_rate_made(self.picture_rate.left(conn_id))
        return out

    # -- browsers (host --web) -----------------------------------------------------------------

    def from_browsers(
        self, outputs: list[WebOutput], now: float, packets: tuple[int, int] | None = None
    ) -> list[HostOutput | WebOutput]:
        """What the browsers' core decided (on a browser's message, its connection's opening or its end, a unit
        sent to them, a deadline): the players' part is taken here (a browser joins, sends its pad, keys and
        mouse, its arrivals report or its display, asks for a key frame, leaves), the rest comes back beside what
        these sessions decided, for the network to carry out as the viewers' outputs are. ``packets``: that
        browser's QUIC connection's packets lost and sent so far (None over a WebSocket, whose TCP hides its
        losses)."""
        out: list[HostOutput | WebOutput] = []
        for o in outputs:
            if isinstance(o, BrowserJoined):
                out += self.browser_joined(o.client, now, o.codecs)
            elif isinstance(o, BrowserInput):
                out += self.browser_input(o.client, o.state, now)
            elif isinstance(o, BrowserRateReport):
                lost, sent = self._packets_since_report(o.client, packets)
                out += self.browser_rate_feedback(o.client, o.feedback, lost, sent, now)
            elif isinstance(o, BrowserDisplay):
                out += self.browser_display(o.client, o.display, now)
            elif isinstance(o, BrowserLeft):
                out += self.browser_left(o.client)
            elif isinstance(o, BrowserWantsKeyframe):
                self.keyframes.viewer_joined()  # a browser's decoder starts at an IDR
            else:
                out.append(o)
        return out

    def _packets_since_report(self, browser: int, packets: tuple[int, int] | None) -> tuple[int, int]:
        if packets is None:
            return 0, 0
        lost, sent = self._browser_packets.get(browser, (0, 0))
        self._browser_packets[browser] = packets
        return max(0, packets[0] - lost), max(0, packets[1] - sent)

    def browser_joined(
        self, browser: int, now: float, codecs: frozenset[VideoCodec] = BROWSER_CODECS
    ) -> list[HostOutput]:
        """A browser the web viewer admitted (it proved the link's key) plays as an authenticated viewer does:
        a pad by the same rules (its own, or the shared one), and the keyboard and mouse by the same ownership;
        under ``--codec auto`` it watches as a viewer that follows a change of codec and decodes ``codecs``."""
        conn = RemoteViewer(
            conn_id=BROWSER_CONN_IDS + browser,
            peer=("browser", browser),
            cookie=0,
            opened_s=now,
            last_alive_s=now,
            prefix="browser",
        )
        conn.flags = KickFlags.GAMEPAD | KickFlags.KEYBOARD_MOUSE
        conn.extensions = ExtensionFeature.KEYBOARD_MOUSE | ExtensionFeature.RUMBLE
        conn.authenticated = conn.kicked = True
        conn.kicked_s = now  # when it started watching (the "player" policy's first viewer is the earliest)
        self._browsers[browser] = conn
        out = self.players.joined(conn, now)
        if self.codec_choice is not None:
            out += self.codec_choice.joined(conn.conn_id, codecs, now)
        return out

    def browser_input(self, browser: int, msg: GamepadState | InputState, now: float) -> list[HostOutput]:
        """A browser's pad or keyboard and mouse, as a viewer's GAMEPAD_STATE or INPUT_STATE."""
        conn = self._browsers.get(browser)
        if conn is None:
            self.discarded["browser_not_playing"] += 1
            return []
        conn.last_alive_s = now
        if isinstance(msg, GamepadState):
            return self.players.gamepad(conn, msg)
        return self.players.keyboard_mouse(conn, msg, now)

    def browser_display(self, browser: int, msg: ViewerDisplay, now: float) -> list[HostOutput]:
        """A browser's page says its window's size and refresh rate, as a viewer's VIEWER_DISPLAY does."""
        conn = self._browsers.get(browser)
        if conn is None:
            self.discarded["browser_not_playing"] += 1
            return []
        return self.display.stated(conn.conn_id, msg, now, connected_s=conn.opened_s)

    def browser_left(self, browser: int) -> list[HostOutput]:
        """The browser went: its pad and keys let go, as a viewer's do, its link no longer votes, and its display
        is no longer followed."""
        self._browser_packets.pop(browser, None)
        conn = self._browsers.pop(browser, None)
        if conn is None:
            return []
        conn.closed = True
        out = [*self.players.left(conn), *self.display.left(conn.conn_id, conn.last_alive_s)]
        if conn.link is not None and self.rate is not None:
            out += self.rate.left(conn, conn.last_alive_s, self._video_viewers(), self.players.pad_holder)
        if self.codec_choice is not None:
            out += self.codec_choice.left(conn.conn_id, conn.last_alive_s)
        return out

    def browser_sent(self, browser: int, unit: int | None, size: int, now: float) -> None:
        """Bytes went to a browser (its WebTransport session or its WebSocket): picture ``unit`` (the number the
        page reports its arrival by), or sound (None); its link's controller counts them as a viewer's paced queue
        does."""
        conn = self._browsers.get(browser)
        link = conn.link if conn is not None else None
        if link is None:
            return
        if unit is None:
            link.count(size)
            return
        link.video_packet(size)
        seq = unit & 0x3FFF
        for offset in range(0, size, BROWSER_DATAGRAM_BYTES):  # as many samples as QUIC packets, near enough
            link.sent(seq, now, min(BROWSER_DATAGRAM_BYTES, size - offset))

    def browser_rate_feedback(
        self, browser: int, msg: RateFeedback, lost: int, sent: int, now: float
    ) -> list[HostOutput]:
        """A browser's report of its pictures' arrivals, with its QUIC connection's lost and sent datagrams since
        the last (none over a WebSocket: TCP hides its losses, which show as delay): its link votes in the shared
        bitrate (``--rate-policy``) as a pyrofling viewer's does."""
        conn = self._browsers.get(browser)
        if conn is None or self.rate is None:
            self.discarded["rate_feedback_not_negotiated"] += 1
            return []
        if conn.link is None:
            conn.link = LinkController(self.rate.config)
        conn.last_alive_s = now
        return self.rate.browser_feedback(conn, msg, lost, sent, now, self._video_viewers(), self.players.pad_holder)

    def connection(self, conn_id: int) -> RemoteViewer | None:
        return self._connections.get(conn_id)

    def browser(self, browser: int) -> RemoteViewer | None:
        """A browser that plays, by the web viewer's client number."""
        return self._browsers.get(browser)

    @property
    def connections(self) -> list[RemoteViewer]:
        return list(self._connections.values())

    def not_reading(self, conn_id: int) -> list[HostOutput]:
        """The shell's write buffer for this connection is full: a peer that sends but never reads its replies
        would grow it forever, so it is closed."""
        if conn_id not in self._connections:
            return []
        self.discarded["tcp_not_reading"] += 1
        return [*self.close(conn_id), CloseConnection(conn_id, "not reading its replies")]

    def video_targets(self, *, idr: bool) -> list[RemoteViewer]:
        """Viewers that get a video packet (an IDR, or anything once they have had one)."""
        return [c for c in self._connections.values() if c.wants(KickFlags.VIDEO) and (idr or not c.awaiting_idr)]

    def audio_targets(self) -> list[RemoteViewer]:
        return [c for c in self._connections.values() if c.wants(KickFlags.AUDIO)]

    @property
    def auth_required(self) -> bool:
        return self.auth.required

    @property
    def auth_failures(self) -> int:
        return self.auth.failures

    @property
    def auth_successes(self) -> int:
        return self.auth.successes

    # -- media out --------------------------------------------------------------------------

    @property
    def browsers(self) -> WebViewers | None:
        """The browsers' core, where the host has a web door: viewers of another kind on the one way out
        (:attr:`MediaOut.browsers <pyrofling.core.host.media_out.MediaOut.browsers>`); its deadlines are these
        sessions' (one timer), its outputs come out of :meth:`handle_timer` beside theirs."""
        return self.media_out.browsers

    @browsers.setter
    def browsers(self, core: WebViewers | None) -> None:
        self.media_out.browsers = core

    def send_video(
        self, media: MediaPacket, *, idr: bool, now: float, backlog: dict[int, int] | None = None
    ) -> list[HostOutput | WebOutput]:
        """One encoded video unit for every viewer that wants it, each through its own FEC and pacer, and for every
        browser (the same unit, whole: what to send them, and a key frame asked for one whose bytes piled up;
        ``backlog``: bytes still waiting to leave for each)."""
        out = self.media_out.video(self.video_targets(idr=idr), media, idr=idr, now=now, backlog=backlog)
        return self.from_browsers(out, now) if out else []

    def send_audio(
        self, media: MediaPacket, now: float, backlog: dict[int, int] | None = None
    ) -> list[HostOutput | WebOutput]:
        """One encoded audio unit for every viewer that wants it: it goes at once, past the pacer; and for every
        browser whose bytes are not piling up."""
        out = self.media_out.audio(self.audio_targets(), media, now, backlog)
        return self.from_browsers(out, now) if out else []

    def datagrams_to_send(self, now: float) -> list[SendDatagram]:
        """Every datagram that may leave at ``now``, in order: replies, resends and audio, then paced video.  A
        packet's repair, computed only once the data before it has been taken, comes from a second call."""
        return self.media_out.due(list(self._connections.values()), now)

    @property
    def media_counters(self) -> dict[str, int]:
        """Repair, resends and queue drops, for the statistics."""
        return self.media_out.counters.as_dict()

    # -- TCP -------------------------------------------------------------------------------

    def tcp_received(self, conn_id: int, data: bytes, now: float) -> list[HostOutput]:
        """Bytes read from a connection: its messages, one by one (the handshake may switch it to sealed records
        between two).  Bytes that do not frame, or a record that does not open, close it."""
        conn = self._connections.get(conn_id)
        if conn is None:
            return []
        conn.channel.feed(data)
        out: list[HostOutput] = []
        while self._connections.get(conn_id) is conn:
            try:
                msg = conn.channel.next()
            except ProtocolError as exc:
                self.discarded[f"tcp_{exc.reason}"] += 1
                out += self.close(conn_id)
                out.append(CloseConnection(conn_id, f"protocol error: {exc}"))
                break
            except AuthError as exc:
                self.discarded[str(exc)] += 1
                out += self.close(conn_id)
                out.append(CloseConnection(conn_id, "a sealed control record did not open: changed on the path?"))
                break
            if msg is None:
                break
            answer = self.control(conn_id, msg, now)
            out += answer
            if any(isinstance(o, CloseConnection) and o.conn_id == conn_id for o in answer):
                out += self.close(conn_id)  # what it sent after that is not read
                break
        return out

    def control(self, conn_id: int, msg: ControlMessage | UnknownControl, now: float) -> list[HostOutput]:
        conn = self._connections.get(conn_id)
        if conn is None:
            return []
        self.control_messages += 1
        if isinstance(msg, Hello):
            conn.hello = True
            return [conn.send(Cookie(conn.cookie))]
        if isinstance(msg, Extensions):
            return self.auth.negotiate(conn, msg, now)
        if isinstance(msg, AuthResponse):
            return self.auth.respond(conn, msg, now)
        if self.auth_required and not conn.authenticated:
            return self.auth.refuse(conn, msg)
        if isinstance(msg, Kick):
            return self._kick(conn, msg.flags, now)
        if isinstance(msg, Progress):
            return self._progress(conn, msg, now)
        if isinstance(msg, RequestKeyframe):
            if conn.wants(KickFlags.VIDEO):
                self.keyframes.loss_reported()
            return []
        if isinstance(msg, Player) and self.players.player(conn, msg):
            return []
        if isinstance(msg, ViewerDisplay) and conn.extensions & ExtensionFeature.DISPLAY:
            return self.display.stated(conn_id, msg, now, connected_s=conn.opened_s)
        if isinstance(msg, ViewerPictureRate) and conn.extensions & ExtensionFeature.PICTURE_RATE:
            return self._picture_rate_asked(conn_id, msg.rate_mhz)
        if isinstance(msg, ViewerCodecs) and conn.extensions & ExtensionFeature.CODECS:
            conn.video_codecs = msg.codecs()  # counts from its KICK on (protocol.md §7.15)
            return []
        # Anything else (unknown ids, messages only the host sends): NAK, as the reference does.
        self.discarded["unexpected_control"] += 1
        return [conn.send(Nak())]

    def _kick(self, conn: RemoteViewer, flags: KickFlags, now: float) -> list[HostOutput]:
        conn.flags = flags
        conn.last_alive_s = now
        self.players.kick(conn, flags)
        if conn.kicked:
            again: list[HostOutput] = [LogLine(conn.conn_id, f"redundant KICK from {conn.label}")]
            if flags & KickFlags.GAMEPAD:
                again += self.players.joined(conn, now)  # it asks for the gamepad only now
            return again
        if conn.udp_address is None:
            return [conn.send(Nak())]
        if self.codec_parameters is None:
            return [conn.send(Again())]
        conn.kicked = True
        conn.kicked_s = now
        conn.packetizer = packetizer = self._make_packetizer(conn.cookie)
        # Sealed as each datagram leaves, not as it is queued: counters reach the viewer in order, whatever the queue.
        conn.paced = PacedQueue(
            self._make_pacer(), seal=conn.outgoing if conn.sealer else None, seal_overhead=conn.seal_overhead
        )
        if conn.extensions & ExtensionFeature.RATE_CONTROL and self.rate is not None:
            self.rate.link_for(conn)
        if conn.extensions & ExtensionFeature.LOSS_REPORTS:
            packetizer.follow_reports()
        if conn.extensions & ExtensionFeature.MDS_FEC:
            packetizer.use_mds()
        if conn.extensions & ExtensionFeature.NACK:
            packetizer.retained = RetainedPackets()
        # Audio repair only while this viewer reports loss: a clean link pays nothing, a native viewer (which
        # would drop it unread) never gets it.
        packetizer.audio_fec_active = False
        out: list[HostOutput] = []
        params: CodecParameters = self.codec_parameters
        if flags & KickFlags.VIDEO:
            self.keyframes.viewer_joined()
            if self.codec_choice is not None:
                # It may change the codec: it is answered with the one the stream is switching to.
                follows = conn.extensions & ExtensionFeature.CODECS and conn.video_codecs is not None
                out += self.codec_choice.joined(conn.conn_id, conn.video_codecs if follows else None, now)
                params = replace(params, video_codec=int(self.codec_choice.target))
        out += [
            conn.send(params),
            LogLine(conn.conn_id, f"viewer {conn.label} joined for {_flag_names(flags)}"),
        ]
        if flags & KickFlags.GAMEPAD:
            out += self.players.joined(conn, now)
        return out

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
        if plain_ip(address[0]) != plain_ip(conn.peer[0]):
            # Its TCP peer is elsewhere: anyone who reads a cookie could otherwise aim the stream at a victim
            # (a reflector). A viewer sends both from the same address (a NAT keeps one public address).
            self.discarded["cookie_from_another_address"] += 1
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
        if isinstance(msg, PathResponse):
            return self._path_response(conn, address, msg, now)
        out: list[HostOutput] = []
        if conn.udp_address != address:
            # Genuine (it opened under this connection's key), but a held-back datagram replayed from a forged source
            # would be too: media moves to a new address only once the viewer answers from it (return routability).
            out += self._probe_path(conn, address, now)
        if isinstance(msg, Cookie) or conn.udp_address is None:
            return out
        return out + self._udp_message(conn, msg, now)

    def _probe_path(self, conn: RemoteViewer, address: Address, now: float) -> list[HostOutput]:
        """A PATH_CHALLENGE to ``address``: at most one every 50 ms per connection, so a flood of replays from
        forged sources reflects less than it costs to send."""
        probe = conn.path_probe
        if probe is not None and now - probe[2] < self.config.path_probe_interval_s:
            self.discarded["path_probe_limited"] += 1
            return []
        if self._by_address.get(address, conn) is not conn:
            self.discarded["address_taken"] += 1
            return []
        token = int.from_bytes(self._random_bytes(8), "little")
        conn.path_probe = (address, token, now)
        self.media_out.at_once(SendDatagram(address, conn.outgoing(bytes(PathChallenge(token)))), now)
        return []

    def _path_response(self, conn: RemoteViewer, address: Address, msg: PathResponse, now: float) -> list[HostOutput]:
        probe = conn.path_probe
        if probe is None or probe[0] != address or probe[1] != msg.token:
            self.discarded["path_response_unexpected"] += 1
            return []
        conn.path_probe = None
        if self._by_address.get(address, conn) is not conn:
            self.discarded["address_taken"] += 1
            return []
        moved = conn.udp_address is not None
        if conn.udp_address is not None:
            self._by_address.pop(conn.udp_address, None)
        conn.udp_address = address
        self._by_address[address] = conn
        conn.path_validations += 1
        if moved:
            return [LogLine(conn.conn_id, f"{conn.label}: media follows its new address {address[0]} @ {address[1]}")]
        if conn.flags and not conn.kicked and self.codec_parameters is not None:
            # Its KICK came before the address was proved and got NAK: answer it now rather than at its retry.
            return self._kick(conn, conn.flags, now)
        return []

    def _udp_message(self, conn: RemoteViewer, msg: ControlMessage, now: float) -> list[HostOutput]:
        if not conn.kicked:
            self.discarded["not_kicked"] += 1
            return []
        assert conn.udp_address is not None
        if isinstance(msg, Ping):
            conn.pings += 1
            reply = bytes(PingReply(msg.seq, int(now * 1_000_000)))
            self.media_out.at_once(SendDatagram(conn.udp_address, conn.outgoing(reply)), now)
            return []
        if isinstance(msg, PhaseOffset):
            conn.phase_offsets += 1
            return [PhaseFeedback(conn.conn_id, msg.ideal_phase_offset_us)]
        if isinstance(msg, GamepadState):
            return self.players.gamepad(conn, msg)
        if isinstance(msg, InputState):
            return self.players.keyboard_mouse(conn, msg, now)
        if isinstance(msg, Nack):
            return self._nack(conn, msg, now)
        if isinstance(msg, LossReport):
            self._loss_report(conn, msg, now)
        if isinstance(msg, RateFeedback):
            return self._rate_feedback(conn, msg, now)
        return []

    def _nack(self, conn: RemoteViewer, msg: Nack, now: float) -> list[HostOutput]:
        """Send the datagrams again, now; what a viewer can ask for is bounded by its own stream (core.resend)."""
        retained = conn.packetizer.retained if conn.packetizer is not None else None
        if retained is None:
            self.discarded["nack_not_negotiated"] += 1
            return []
        conn.nacks += 1
        assert conn.udp_address is not None
        resent = [conn.outgoing(d) for d in retained.resend(msg)]
        if conn.link is not None:
            conn.link.count(sum(map(len, resent)))
        for d in resent:
            self.media_out.at_once(SendDatagram(conn.udp_address, d, resend=True), now)
        return []

    def _loss_report(self, conn: RemoteViewer, msg: LossReport, now: float) -> None:
        """The viewer's FEC follows what it reports (its own planners only: a lie costs nobody else)."""
        if not conn.extensions & ExtensionFeature.LOSS_REPORTS or conn.packetizer is None:
            self.discarded["loss_report_not_negotiated"] += 1
            return
        conn.loss_reports += 1
        if conn.link is not None:
            conn.link.lost(msg.datagrams_lost, msg.datagrams_expected)
            # Judged at the next RATE_FEEDBACK, with the queue measured after it: a full queue's losses are
            # not the link's randomness, and repair for them would only fill it further.
            conn.link.pending_loss = (msg.datagrams_lost, msg.datagrams_expected)
            return
        self._learn_loss(conn, msg.datagrams_lost, msg.datagrams_expected)

    def _learn_loss(self, conn: RemoteViewer, lost: int, expected: int) -> None:
        """Random loss the viewer saw: its FEC planners, and its audio repair, follow it."""
        p = conn.packetizer
        assert p is not None
        if expected:
            conn.reported_loss += 0.2 * (lost / expected - conn.reported_loss)
        # Audio repair costs as much as the audio: not while the link is what limits the stream.
        squeezed = conn.link is not None and conn.link.congested
        p.audio_fec_active = conn.reported_loss > self.config.audio_fec_above_loss and not squeezed
        for planner in (p.video_planner, p.key_planner):
            if planner is not None:
                planner.observe_datagram_loss(lost, expected)

    # -- rate control (protocol.md §7.10) --------------------------------------------------

    def _rate_feedback(self, conn: RemoteViewer, msg: RateFeedback, now: float) -> list[HostOutput]:
        if conn.link is None or self.rate is None:
            self.discarded["rate_feedback_not_negotiated"] += 1
            return []
        return self.rate.feedback(conn, msg, now, self._video_viewers(), self.players.pad_holder, self._learn_loss)

    def _video_viewers(self) -> list[RemoteViewer]:
        """Everyone watching, the browsers whose links report included (they vote too)."""
        viewers = [c for c in self._connections.values() if c.wants(KickFlags.VIDEO)]
        return viewers + [b for b in self._browsers.values() if b.link is not None]

    def rate_summary(self) -> dict[str, object]:
        """The shared bitrate and each reporting viewer's link, for statistics."""
        if self.rate is None:
            return {"rate_policy": "fixed"}
        return self.rate.summary([*self._connections.values(), *self._browsers.values()])

    def rumble(self, pad: int, command: RumbleCommand) -> list[HostOutput]:
        """A game asked pad ``pad``'s motors for ``command`` (its uinput force feedback, or the capture socket)."""
        players = {**self._connections, **{b.conn_id: b for b in self._browsers.values()}}
        return self.players.rumble(pad, command, players)

    def summary(self) -> dict[str, object]:
        """Connections, authentication, and what was dropped and why."""
        return {
            "connections_total": self.connections_total,
            "control_messages": self.control_messages,
            "auth": {
                "required": self.auth_required,
                "private": self.config.private,
                "code": self.config.auth_secret is not None,
                "pairings": self.auth.pairings,
                "successes": self.auth_successes,
                "failures": self.auth_failures,
            },
            "timed_out": self.timed_out,
            "discarded": dict(self.discarded),
        }

    # -- the codec (host --codec auto) --------------------------------------------------------

    def video_encoded(self, encode_s: float, period_s: float, now: float) -> list[HostOutput]:
        """A picture took ``encode_s`` to encode at a frame period of ``period_s``: a codec whose encoder cannot
        keep up is given up for the next (``--codec auto``)."""
        if self.codec_choice is None:
            return []
        return self.codec_choice.encoded(encode_s, period_s, now)

    def codec_switched(self, asked: VideoCodec, codec: VideoCodec, now: float) -> list[HostOutput | WebOutput]:
        """The switch to ``asked`` is done: the encoder makes ``codec`` from its next picture on (a key frame; the
        old codec when the switch failed). The viewers that follow a change are told, the browsers too, and every
        viewer's video starts again at that key frame."""
        out: list[HostOutput | WebOutput] = []
        if self.codec_choice is None or self.codec_parameters is None:
            return out
        before = self.codec_choice.running
        self.codec_choice.switched(asked, codec, now)
        self.codec_parameters = params = replace(self.codec_parameters, video_codec=int(codec))
        if codec == before == asked:
            return out
        if self.browsers is not None:
            out += self.browsers.codec_changed(codec)
        for conn in self._connections.values():
            if not conn.kicked or not conn.wants(KickFlags.VIDEO):
                continue
            if codec != before:
                conn.awaiting_idr = True  # nothing of the old codec after the switch: the new one starts whole
            if conn.extensions & ExtensionFeature.CODECS:
                out.append(conn.send(params))  # a failed switch too: a newcomer was told the codec asked for
        return out

    def _picture_rate_asked(self, conn_id: int, rate_mhz: int) -> list[HostOutput]:
        params = self.codec_parameters
        if self.picture_rate is None:
            if params is None or params.frame_rate_den != 1:
                return []  # no stream yet, or a rate that is not whole pictures a second: nothing to divide
            self.picture_rate = PictureRateFollower(params.frame_rate_num)
        return self._picture_rate_made(self.picture_rate.asked(conn_id, rate_mhz))

    def _picture_rate_made(self, outputs: list[HostOutput]) -> list[HostOutput]:
        """The new rate goes in CODEC_PARAMETERS: a KICK from now on is answered with it, and the viewers watching
        that take new parameters while streaming (PICTURE_RATE or CODECS) are told."""
        out = list(outputs)
        for change in outputs:
            if not isinstance(change, SetPictureRate) or self.codec_parameters is None:
                continue
            rate = Fraction(change.fps, change.divisor)
            self.codec_parameters = params = replace(
                self.codec_parameters, frame_rate_num=rate.numerator, frame_rate_den=rate.denominator
            )
            follows = ExtensionFeature.PICTURE_RATE | ExtensionFeature.CODECS
            for conn in self._connections.values():
                if conn.kicked and conn.wants(KickFlags.VIDEO) and conn.extensions & follows:
                    out.append(conn.send(params))
        return out

    # -- timers ----------------------------------------------------------------------------

    def next_timer(self) -> float | None:
        """When :meth:`handle_timer` and :meth:`datagrams_to_send` next have something to do: a datagram the pacer
        releases, a keep-alive or authentication deadline, held input to let go."""
        # Held input and the followed display have deadlines of their own, also with browsers alone watching.
        web = self.browsers.next_timer() if self.browsers is not None else None
        codec = self.codec_choice.next_timer() if self.codec_choice is not None else None
        dues = [t for t in (self.players.next_timer(), self.display.next_timer(), web, codec) if t is not None]
        if self._connections:
            dues.append(min(c.last_alive_s for c in self._connections.values()) + self.config.keepalive_timeout_s)
            sending = self.media_out.next_timer(list(self._connections.values()))
            if sending is not None:
                dues.append(sending)
            if self.auth_required:
                waiting = [c.opened_s for c in self._connections.values() if not c.authenticated]
                if waiting:
                    dues.append(min(waiting) + self.config.auth_timeout_s)
        return min(dues, default=None)

    def handle_timer(self, now: float) -> list[HostOutput | WebOutput]:
        out: list[HostOutput | WebOutput] = [*self.players.handle_timer(now), *self.display.handle_timer(now)]
        if self.codec_choice is not None:
            out += self.codec_choice.handle_timer(now)
        if self.browsers is not None:
            out += self.from_browsers(self.browsers.handle_timer(now), now)  # its key frames, too
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
    shown = (KickFlags.VIDEO, KickFlags.AUDIO, KickFlags.GAMEPAD, KickFlags.KEYBOARD_MOUSE)
    names = [f.name.lower() for f in shown if flags & f and f.name]
    return "+".join(names) or "nothing"
