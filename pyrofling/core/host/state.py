"""What the host's session core says and keeps: its outputs, its settings, and what it knows of each viewer.

Shared by :mod:`pyrofling.core.host.sessions` (the protocol) and
:mod:`pyrofling.core.host.auth` (its authentication); the host's shells perform
the outputs (protocol.md §3).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from pyrofling.core.control_channel import ControlChannel
from pyrofling.core.host.congestion import LinkController
from pyrofling.core.host.pacer import PacedQueue
from pyrofling.core.host.packetizer import Packetizer
from pyrofling.core.input.keyboard_mouse import InputUpdate
from pyrofling.core.input.pad import PadUpdate
from pyrofling.core.secure import (
    SEAL_OVERHEAD,
    CodeExchange,
    HostIdentity,
    Opener,
    Sealer,
    ShareExchange,
    Transcript,
)
from pyrofling.wire import ALL_EXTENSIONS, ControlMessage, ExtensionFeature, KickFlags, Progress, VideoCodec

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
    #: A datagram sent again because the viewer asked (NACK): it goes now, ahead of the paced queue.
    resend: bool = False


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


#: The browsers of ``host --web`` play as connections numbered from here (far above any viewer's).
BROWSER_CONN_IDS = 1 << 40


@dataclass(frozen=True, slots=True)
class BrowserRumble(HostOutput):
    """A game asked the motors of the pad a browser holds (host --web): the page plays it on its pad."""

    browser: int
    strong: int
    weak: int
    duration_ms: int


@dataclass(frozen=True, slots=True)
class SetBitrate(HostOutput):
    """The encoder's bitrate from the next frame on (rate control, protocol.md §7.10)."""

    bits_per_s: int
    why: str


@dataclass(frozen=True, slots=True)
class Compute(HostOutput):
    """Work too slow for the loop that paces media (a PAKE step: 4–6 ms of pure Python): run ``work()`` on a
    worker, then, back on the loop, perform ``then(its result, now)``.  ``work`` and its result pickle (a
    :func:`functools.partial` of module-level code), so the worker may be another process: pure Python in a
    thread would hold the interpreter lock the encoder and the pacers need."""

    work: Callable[[], Any]
    then: Callable[[Any, float], list[HostOutput]]


@dataclass(frozen=True, slots=True)
class PairingCodeSpent(HostOutput):
    """The one-time pairing code was used or ran out: make a new one, show it to the person, and
    :meth:`~pyrofling.core.host.auth.HostAuth.issue_code` it."""

    why: str


@dataclass(frozen=True, slots=True)
class ViewerPaired(HostOutput):
    """A viewer proved the code and asked to be remembered: store its credential (protocol.md §7.7)."""

    viewer_id: bytes
    name: str
    credential: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class KeyboardMouseInput(HostOutput):
    """An update for the virtual keyboard, mouse and pointer (protocol.md §7.11): write each device's report."""

    update: InputUpdate


@dataclass(frozen=True, slots=True)
class GamepadInput(HostOutput):
    """A state for virtual pad ``pad``: write ``update.events`` to it (they may be empty: nothing changed)."""

    update: PadUpdate
    pad: int = 1


# --------------------------------------------------------------------------------------------
# State
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HostSessionConfig:
    """Host control-protocol settings.  Seconds."""

    #: Drop a connection this long after its last KICK or PROGRESS (protocol.md §3.3).
    keepalive_timeout_s: float = 15.0
    #: Extension features this host grants (protocol.md §7.2).
    extensions: ExtensionFeature = ALL_EXTENSIONS & ~(ExtensionFeature.AUTH | ExtensionFeature.ENCRYPTION)
    #: At most one PROGRESS log line per viewer per this interval.
    progress_log_interval_s: float = 1.0
    #: A kicked viewer whose PROGRESS still shows no key frame this long after we sent one asks for another.
    key_frame_grace_s: float = 1.0
    #: The password or pairing code viewers may prove (protocol.md §7.7); None: no code is taken.
    auth_secret: str | None = field(default=None, repr=False)
    #: Require authentication even without a code: only paired viewers get in.
    private: bool = False
    #: The host's lasting identity key (its id is the key's hash; a paired viewer finds its credential by it).
    identity: HostIdentity = field(default_factory=HostIdentity, repr=False, compare=False)
    #: ``auth_secret`` is a pairing code: good for one successful handshake, and for ``code_lifetime_s`` (then
    #: :class:`PairingCodeSpent` asks the shell for a new one).
    one_time_code: bool = False
    code_lifetime_s: float = 600.0
    #: The PAKE's two steps as :class:`Compute` outputs, for the shell to run off its loop (False: at once).
    crypto_off_loop: bool = False
    #: With a secret: a connection that has not authenticated this long after it opened is closed.
    auth_timeout_s: float = 10.0
    #: At most one PATH_CHALLENGE per connection this often (protocol.md §7.7).
    path_probe_interval_s: float = 0.05
    #: Send a viewer audio repair blocks while the loss it reports (smoothed) is above this (protocol.md §7.5).
    audio_fec_above_loss: float = 0.002
    #: Connections at once; more are closed at once (a flood cannot exhaust the host).
    max_connections: int = 64
    #: Connections from one IP address that have not KICKed yet; more from it are closed at once.
    max_pending_per_address: int = 8
    #: Grant keyboard and mouse to viewers that did not authenticate (an open host): anyone who reaches the
    #: port could type into the host's session. Off unless the host says so.
    open_keyboard_mouse: bool = False


@dataclass(slots=True)
class HostHandshake:
    """One connection's handshake between AUTH_CHALLENGE and AUTH_RESPONSE."""

    transcript: Transcript
    share: ShareExchange
    code: CodeExchange | None
    #: Which code the challenge was made with (a one-time code used meanwhile is not used twice).
    code_serial: int = 0


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
    #: Its address's limiter key (an IPv4 address, an IPv6 /64): what per-address limits count by.
    prefix: str = ""
    #: The host let it go (work finishing for it after that is dropped).
    closed: bool = False
    kicked_s: float | None = None
    udp_address: Address | None = None
    extensions: ExtensionFeature = ExtensionFeature.NONE
    #: It sent EXTENSIONS (once only: a second closes the connection).
    negotiated: bool = False
    packetizer: Packetizer | None = None
    #: Its video datagrams wait here for the pacer (``HostSessions.datagrams_to_send`` takes what it releases).
    paced: PacedQueue | None = None
    #: What its link carries (it negotiated RATE_CONTROL, protocol.md §7.10).
    link: LinkController | None = None
    rate_feedbacks: int = 0
    #: The STREAM_RATE it was last sent (bitrate kbit/s, its link kbit/s, decided_by), and when.
    rate_told: tuple[int, int, int] | None = None
    rate_told_s: float = float("-inf")
    #: No video goes out until this viewer has been sent an IDR (its first video packet is a key frame).
    awaiting_idr: bool = True
    idr_sent_s: float | None = None
    progress: Progress = field(default_factory=Progress)
    progress_messages: int = 0
    last_log_s: float | None = None
    phase_offsets: int = 0
    gamepad_states: int = 0
    input_states: int = 0
    #: Who plays, across reconnects (PLAYER, protocol.md §7.12).
    player_token: int | None = None
    #: RUMBLE messages sent to it (their seq).
    rumble_seq: int = 0
    #: The video codecs it decodes (VIEWER_CODECS, protocol.md §7.15); None: it did not say.
    video_codecs: frozenset[VideoCodec] | None = None
    pings: int = 0
    nacks: int = 0
    loss_reports: int = 0
    #: The loss its last reports showed (datagrams lost / sent, before resends), smoothed.
    reported_loss: float = 0.0
    #: Authentication (protocol.md §7.7): the handshake under way, and how it ended.
    handshake: HostHandshake | None = None
    authenticated: bool = False
    #: "code" or "paired"; and the name it paired under.
    auth_method: str = ""
    paired_name: str = ""
    refusal_logged: bool = False
    #: The control connection's framing, plain or sealed.
    channel: ControlChannel = field(default_factory=ControlChannel)
    #: After the handshake: seals the datagrams that go to this viewer, opens what it sends.
    sealer: Sealer | None = None
    opener: Opener | None = None
    #: A new address it sent from, waiting to answer the PATH_CHALLENGE sent there: (address, token, when).
    path_probe: tuple[Address, int, float] | None = None
    path_validations: int = 0

    @property
    def label(self) -> str:
        return f"{self.peer[0]} @ {self.peer[1]}"

    @property
    def is_browser(self) -> bool:
        """A page of the host's web viewer: it plays and its link votes, but it has no control channel."""
        return self.conn_id >= BROWSER_CONN_IDS

    def send(self, message: ControlMessage) -> SendControl:
        """A control message for this viewer, sealed once the handshake has finished."""
        return SendControl(self.conn_id, self.channel.encode(message))

    def outgoing(self, datagram: bytes) -> bytes:
        """A datagram as it goes on the wire to this viewer, now: sealed when the connection is."""
        return self.sealer.seal(datagram) if self.sealer is not None else datagram

    @property
    def seal_overhead(self) -> int:
        """Bytes sealing adds to each datagram to this viewer."""
        return SEAL_OVERHEAD if self.sealer is not None else 0

    def wants(self, flag: KickFlags) -> bool:
        return self.kicked and self.udp_address is not None and bool(self.flags & flag)
