"""Browsers watching the host (``pyrofling host --web``): who may watch, and what each one is sent.

Pure: the shell (:mod:`pyrofling.server.web`) reports connections, their text
messages and each encoded video unit with ``now``; this returns what to send,
whom to close, and when the encoder should make a key frame.  A browser gets the
same access units the pyrofling viewers get (no second encode: H.264, or AV1 where
its page decodes it), over a WebSocket, and decodes them with WebCodecs (``docs/browser.md``):

* **Proof first.** A browser's first message must be ``{"type": "auth", "token":
  ...}`` with the host's web token (the secret part of the link the host prints),
  ``{"type": "auth", "code": ...}`` with the host's password or its one-time
  pairing code (which pairs the browser: spent, and its pass kept), counted against
  the address as a viewer's wrong codes are, or ``{"type": "auth", "resume": ...}``
  with the secret its ``hello`` gave it (its tab reconnecting); anything else, a
  wrong one, or none within ``auth_timeout_s`` closes it before a byte of the
  stream is sent.  All are compared in constant time.
* **A link admits one browser** (``link_once``): the token is spent by the first
  browser that proves it, and a new one is made (:class:`NewLinkKey`: the host
  shows the next link to the person); that browser's tab comes back with its
  resume secret (its pass).  A link that leaked later (a chat log, a screenshot) opens nothing.
  A pass outlives the run only where the shell keeps it (``remembered``: over HTTPS);
  else, or where the store would not keep it, it lasts this run.
* **Nobody else's place.** Each address prefix has ``max_pending_per_prefix`` slots to
  prove in; beyond them its own oldest unproved connection is closed, told busy.  A
  page is closed with :data:`CLOSE_BUSY` when it should come back, :data:`CLOSE_PASS_UNKNOWN`
  when its pass opens nothing (the only close after which it forgets the pass), else
  :data:`CLOSE_REFUSED`.
* **Start at a key frame.** WebCodecs decodes from a key frame, so a browser that
  was admitted, or fell behind, waits for the next IDR; the host's key-frame
  policy is asked for one (the same request a joining viewer makes).
* **Never queue behind a slow browser.** When more than ``max_backlog_bytes``
  are still waiting to leave for a browser, its frames are skipped until the next
  IDR instead of queued: late pictures are worth nothing.

Wire format: protocol.md §9 (:mod:`pyrofling.wire.browser`); the page's pad, keys and mouse go to the host's
player rules (:meth:`~pyrofling.core.host.sessions.HostSessions.browser_input`), its arrival reports to the
rate control as a pyrofling viewer's do.

**WebTransport, for a lossy link.**  Where the host offers it (``webtransport_cert``),
the ``hello`` carries the SHA-256 of the QUIC server's certificate and a one-time
ticket; the page opens a WebTransport session (HTTP/3, UDP, on the page's own port
number) at ``/wt/<ticket>``, and from then on each access unit goes on its own
unidirectional QUIC stream (the same numbered message): a lost packet is
resent by QUIC and holds back that picture only, never the ones behind it as a lost
TCP segment does; sound goes as datagrams (late sound is worth nothing), a group of
units spanning 20 ms in each (``b"G"``, then each unit's length and its ``b"A"``
message: :data:`SOUND_GROUP_US`), and the
page's pad, keys and mouse come back as datagrams (states, resent every 100 ms).
The page's arrival reports come as datagrams too, and say when each picture's stream
began and finished arriving (over the WebSocket, when its message came: both).
Until the page has opened the session or said it cannot (``{"type": "websocket"}``),
or ``auth_timeout_s`` passed, it is sent no video; a session that closes leaves the
browser on its WebSocket, from the next key frame.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from pyrofling.core.host.codec_choice import BROWSER_CODECS
from pyrofling.core.host.state import PairingCodeSpent
from pyrofling.core.secure import FailureLimiter, limiter_key
from pyrofling.wire import GamepadState, InputState, RateFeedback, VideoCodec, ViewerDisplay
from pyrofling.wire.browser import (
    MAX_DATAGRAM_BYTES,
    PAGE_CODEC_NAMES,
    PAGE_CODECS,
    audio_message,
    numbered,
    parse_page_message,
    sound_group,
    video_header,
)
from pyrofling.wire.errors import ProtocolError

#: Sound to a WebTransport session goes in groups spanning this much: the page plays it in blocks of 20 ms anyway,
#: so the wait costs no latency, while each datagram costs the host a QUIC packet built in Python and the browser's
#: acknowledgement of it (5 ms units: a quarter of them).  ``SOUND_GROUP_SLACK_US``: units' stamps may wobble.
SOUND_GROUP_US = 20_000
SOUND_GROUP_SLACK_US = 1_000


@dataclass(frozen=True, slots=True)
class WebConfig:
    token: str = field(repr=False)
    #: Each link admits one browser, and the next link has a new key (False: one link for the whole run).
    link_once: bool = True
    #: The host's password, which a page may prove instead of the link's key (None: the link only).  The page's
    #: connection is always TLS or this machine's own (plain HTTP listens on 127.0.0.1 only).
    password: str | None = field(default=None, repr=False)
    #: A browser that has not proved the token by then is closed.
    auth_timeout_s: float = 5.0
    #: Bytes waiting to leave for a browser beyond which its frames are skipped until the next IDR.
    max_backlog_bytes: int = 1_500_000
    #: Browsers at once; more are closed with a reason.
    max_browsers: int = 8
    #: Unproved connections at once (each costs a socket until its timeout), in all and from one address prefix;
    #: a newcomer beyond the prefix's share closes that prefix's oldest (a page that was told "busy" comes back).
    max_pending: int = 64
    max_pending_per_prefix: int = 4


@dataclass(frozen=True, slots=True)
class StreamInfo:
    codec: str
    width: int
    height: int
    fps: float
    #: time.time() − time.monotonic() on the host, seconds: maps its capture stamps onto the wall clock.
    clock_offset_s: float
    #: The sound the viewers get: "opus" or "pcm_s16le" (None: no sound), its rate and channels.
    audio_codec: str | None = None
    audio_rate: int = 0
    audio_channels: int = 0


@dataclass(frozen=True, slots=True)
class SendText:
    client: int
    text: str


@dataclass(frozen=True, slots=True)
class SendBinary:
    """To the browser's WebSocket (``channel="socket"``), or its WebTransport session (``session``): a new
    unidirectional stream (``"stream"``, reliable, ordered within itself) or a datagram (``"datagram"``, may be
    lost).  ``unit``: the picture's number on the session (what the page's arrival reports name)."""

    client: int
    data: bytes
    channel: str = "socket"
    session: int | None = None
    unit: int | None = None


@dataclass(frozen=True, slots=True)
class AcceptSession:
    """A WebTransport session presented a browser's ticket: accept it; it carries that browser's media now."""

    session: int
    client: int


@dataclass(frozen=True, slots=True)
class CloseSession:
    session: int
    reason: str


#: How the host closes a browser's WebSocket, so that the page knows what to do next: refused (say why, do not
#: retry), busy (keep everything, try again later) or a pass the host does not keep (forget that pass, and prove the
#: link or the password if the page has one).
CLOSE_REFUSED = 1008
CLOSE_BUSY = 1013
CLOSE_PASS_UNKNOWN = 4001


@dataclass(frozen=True, slots=True)
class CloseClient:
    client: int
    reason: str
    code: int = CLOSE_REFUSED


@dataclass(frozen=True, slots=True)
class NewLinkKey:
    """The link's key was spent: this is the next one (the shell shows the new link to the person, not the log)."""

    token: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class RequestKeyframe:
    """Make the next frame an IDR (a browser starts or recovers there)."""


@dataclass(frozen=True, slots=True)
class BrowserJoined:
    """A browser proved the key: it plays from now on (a pad, the keyboard and mouse, by the host's rules), and
    its page decodes ``codecs`` (what its auth said; H.264 where it said nothing)."""

    client: int
    codecs: frozenset[VideoCodec] = BROWSER_CODECS


@dataclass(frozen=True, slots=True)
class BrowserInput:
    client: int
    state: GamepadState | InputState


@dataclass(frozen=True, slots=True)
class BrowserDisplay:
    """A page's window, in device pixels, and the refresh rate its animation frames come at: a VIEWER_DISPLAY of
    its own (protocol.md §7.14), for a host whose desktop takes its viewer's size."""

    client: int
    display: ViewerDisplay


@dataclass(frozen=True, slots=True)
class BrowserRateReport:
    """A page's report of when its pictures arrived (``b"R"`` + a RATE_FEEDBACK payload, protocol.md §7.10, its
    samples naming the pictures' stream numbers): its link, for the host's rate control."""

    client: int
    feedback: RateFeedback


@dataclass(frozen=True, slots=True)
class BrowserLeft:
    """A browser that played is gone: what it held lets go."""

    client: int


@dataclass(frozen=True, slots=True)
class RememberBrowser:
    """A browser proved a link, the password or the pairing code and was given a pass: keep it (its SHA-256) so
    that a later run of the host admits that browser too (its page keeps the pass). ``via``: what it proved
    ("link", "password" or "pairing code": a pass given for the password is good only while the password is the
    same); ``address``: where from (the store keeps a few per address)."""

    pass_sha256: str
    name: str
    via: str = "link"
    address: str = ""


class RememberedBrowsers(Protocol):
    """The browsers' passes the host keeps across its runs (the shell's store, read at each try: a revoked one
    fails at once)."""

    def knows_browser(self, pass_sha256: str) -> bool: ...


def pass_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class PairingCodes(Protocol):
    """The host's one-time pairing code (:class:`~pyrofling.core.host.auth.HostAuth`'s), which a page may type
    instead of opening a link."""

    def take_typed_code(self, code: str, who: str, now: float) -> tuple[bool, list[PairingCodeSpent]]: ...


WebOutput = (
    SendText
    | SendBinary
    | CloseClient
    | RequestKeyframe
    | BrowserJoined
    | BrowserInput
    | BrowserRateReport
    | BrowserDisplay
    | BrowserLeft
    | AcceptSession
    | CloseSession
    | NewLinkKey
    | RememberBrowser
    | PairingCodeSpent
)


#: A browser's binary messages: its tag and the wire payload after it.
@dataclass(slots=True)
class _Browser:
    connected_s: float
    #: Where it connected from: what wrong passwords are counted against.
    address: str = ""
    proved: bool = False
    #: Skipping frames until an IDR (just admitted, fell behind, or its decoder asked).
    awaiting_idr: bool = True
    #: When it proved the key (its WebTransport session must open by auth_timeout_s after).
    proved_s: float = 0.0
    #: The one-time ticket its WebTransport session must present; None once used, refused, or not offered.
    ticket: str | None = field(default=None, repr=False)
    #: Waiting for its WebTransport session (or word that it has none): no video until then.
    awaiting_session: bool = False
    #: Its WebTransport session (the shell's number), which carries its media; None: the WebSocket does.
    session: int | None = None
    #: Units sent on its session: the number each stream starts with.
    units: int = 0
    #: The pass its tab reconnects with (given in its hello when it proved the link or the password).
    resume: str | None = field(default=None, repr=False)


@dataclass(slots=True)
class WebCounters:
    admitted: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    frames_sent: int = 0
    bytes_sent: int = 0
    frames_skipped: int = 0
    keyframe_requests: int = 0
    input_states: int = 0
    audio_sent: int = 0
    #: WebTransport sessions accepted, and browsers that stayed on (or went back to) the WebSocket.
    sessions: int = 0
    websocket_fallbacks: int = 0
    datagrams_dropped: int = 0
    rate_reports: int = 0
    rumbles: int = 0

    def refuse(self, why: str) -> None:
        self.refused[why] = self.refused.get(why, 0) + 1


class WebViewers:
    """The browsers of one host: :meth:`connected`, :meth:`message`, :meth:`closed` per connection,
    :meth:`video` per encoded unit, :meth:`handle_timer` at :meth:`next_timer`."""

    def __init__(
        self,
        config: WebConfig,
        info: StreamInfo | None = None,
        *,
        limiter: FailureLimiter | None = None,
        webtransport_cert: str | None = None,
        make_ticket: Callable[[], str] = lambda: secrets.token_urlsafe(18),
        remembered: RememberedBrowsers | None = None,
        pairing_codes: PairingCodes | None = None,
    ) -> None:
        """``limiter``: the host's count of wrong codes per address (the viewers' own), so that the page is not
        a way around it.  ``webtransport_cert``: the hex SHA-256 of the certificate the host's WebTransport
        server shows (None: the WebSocket carries everything).  ``remembered``: the passes kept from the host's
        earlier runs (None: a pass lasts this run).  ``pairing_codes``: the host's one-time pairing code, which a
        page may type instead of a password (None: the host has none)."""
        self.config = config
        self.pairing_codes = pairing_codes
        self.remembered = remembered
        self.info = info
        self.limiter = limiter or FailureLimiter()
        self.counters = WebCounters()
        self.webtransport_cert = webtransport_cert
        self._make_ticket = make_ticket
        self._browsers: dict[int, _Browser] = {}
        self._sessions: dict[int, int] = {}  # WebTransport session → its browser
        #: Sound for the sessions, (pts µs, its "A" message) until its group is whole; the last unit's pts.
        self._sound: list[tuple[int, bytes]] = []
        self._sound_last_us: int | None = None
        #: The link's key now, those already spent (to say so), and the passes that last this run only (their
        #: SHA-256): all of them where the host keeps none, else those its store would not keep.
        self.token = config.token
        self._spent: list[str] = []
        self._run_passes: set[str] = set()

    def set_stream(self, info: StreamInfo) -> None:
        self.info = info

    def codec_changed(self, codec: VideoCodec) -> list[WebOutput]:
        """The encoder makes ``codec`` from its next picture on (a key frame, ``host --codec auto``): every page
        watching is told (``{"type": "codec"}``) and gets nothing more until that key frame; a newcomer's hello
        names it."""
        name = PAGE_CODEC_NAMES.get(codec)
        if self.info is None or name is None or name == self.info.codec:
            return []
        self.info = replace(self.info, codec=name)
        out: list[WebOutput] = []
        for client, browser in self._browsers.items():
            if browser.proved:
                browser.awaiting_idr = True
                out.append(SendText(client, json.dumps({"type": "codec", "codec": name})))
        return out

    @property
    def watching(self) -> int:
        return sum(1 for b in self._browsers.values() if b.proved)

    def connected(self, client: int, now: float, address: str = "") -> list[WebOutput]:
        """A WebSocket opened. Each address prefix has a few slots to prove in: beyond them its oldest unproved
        connection makes room (told busy), so connections that never prove hold nobody else's place and a friend's
        new one always gets in; beyond ``max_pending`` in all the newcomer is told busy."""
        out: list[WebOutput] = []
        prefix = limiter_key(address)
        waiting = [c for c, b in self._browsers.items() if not b.proved and limiter_key(b.address) == prefix]
        if len(waiting) >= self.config.max_pending_per_prefix:
            self.counters.refuse("too_many_pending")
            out += self._close(waiting[0], "too many connections waiting from this address", CLOSE_BUSY)
        elif sum(1 for b in self._browsers.values() if not b.proved) >= self.config.max_pending:
            self.counters.refuse("too_many_pending")
            return [CloseClient(client, "too many connections waiting to prove the token", CLOSE_BUSY)]
        self._browsers[client] = _Browser(connected_s=now, address=address)
        return out

    def closed(self, client: int) -> list[WebOutput]:
        browser = self._browsers.pop(client, None)
        if browser is not None and browser.session is not None:
            self._sessions.pop(browser.session, None)
        return [BrowserLeft(client)] if browser is not None and browser.proved else []

    def message(self, client: int, text: str | bytes, now: float) -> list[WebOutput]:
        browser = self._browsers.get(client)
        if browser is None:
            return []
        if isinstance(text, bytes) and browser.proved:
            return self._input(client, text)
        try:
            msg = json.loads(text) if isinstance(text, str) else None
        except ValueError:
            msg = None
        if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
            self.counters.refuse("malformed")
            return self._close(client, "malformed message")
        if not browser.proved:
            return self._prove(client, browser, msg, now)
        if msg["type"] == "keyframe":
            browser.awaiting_idr = True
            self.counters.keyframe_requests += 1
            return [RequestKeyframe()]
        if msg["type"] == "websocket" and browser.awaiting_session:  # its WebTransport did not open
            return self._on_websocket(browser)
        if msg["type"] == "display":
            return self._display(client, msg)
        t = msg.get("t")
        if msg["type"] == "ping" and isinstance(t, int | float) and math.isfinite(t):  # the page times its clock
            return [SendText(client, json.dumps({"type": "pong", "t": t, "host_us": round(now * 1e6)}))]
        return []  # a later page may say more; an unknown message is not an error

    def _display(self, client: int, msg: dict[str, Any]) -> list[WebOutput]:
        """``{"type": "display", "width", "height", "hz"}``: whole pixels, a rate in Hz (0: unknown); anything else
        is counted and ignored (a page that measured nothing yet says nothing)."""
        width, height, hz = msg.get("width"), msg.get("height"), msg.get("hz", 0)
        if (
            not isinstance(width, int)
            or not isinstance(height, int)
            or not 0 < width <= 0xFFFF
            or not 0 < height <= 0xFFFF
            or not isinstance(hz, int | float)
            or not math.isfinite(hz)
            or not 0 <= hz <= 1000
        ):
            self.counters.refuse("malformed")
            return []
        return [BrowserDisplay(client, ViewerDisplay(width, height, round(hz * 1000)))]

    def _prove(self, client: int, browser: _Browser, msg: dict[str, Any], now: float) -> list[WebOutput]:
        token, code, resume = msg.get("token"), msg.get("code"), msg.get("resume")
        given = [v for v in (token, code, resume) if isinstance(v, str)]
        if msg["type"] != "auth" or len(given) != 1:
            self.counters.refuse("no_token")
            return self._close(client, "the first message must prove the token")
        spent: list[WebOutput] = []  # a pairing code typed in, spent: the host makes the next
        if isinstance(code, str):
            refusal, spent = self._check_code(browser, code, now)
            if refusal is not None:
                return [*spent, *self._close(client, refusal)]
        elif isinstance(resume, str):
            # Where the host keeps passes, its store decides (a revoked one fails at once, this run's too), but for
            # those it would not keep.
            digest = pass_digest(resume)
            known = digest in self._run_passes
            if not known and self.remembered is not None:
                known = self.remembered.knows_browser(digest)
            if not known:
                self.counters.refuse("wrong_resume")
                return self._close(
                    client, "a pass the host does not keep: open a new link from the host", CLOSE_PASS_UNKNOWN
                )
        elif not _equal(str(token), self.token):
            if _any_equal(str(token), self._spent):
                self.counters.refuse("link_spent")
                return self._close(client, "this link was used already: the host shows a new one for each browser")
            self.counters.refuse("wrong_token")
            return self._close(client, "wrong token: open the link the host printed")
        if self.watching >= self.config.max_browsers:
            self.counters.refuse("full")
            full = f"the host already streams to {self.config.max_browsers} browsers"
            return [*spent, *self._close(client, full, CLOSE_BUSY)]
        if self.info is None:
            self.counters.refuse("not_streaming")
            return [*spent, *self._close(client, "the host is not streaming yet: reload in a moment", CLOSE_BUSY)]
        new_link: list[WebOutput] = list(spent)
        if isinstance(token, str) and self.config.link_once:  # admitted: the link is spent, the next one made
            self._spent.append(self.token)
            self.token = self._make_ticket()
            new_link.append(NewLinkKey(self.token))
        browser.proved = True
        browser.proved_s = now
        self.counters.admitted += 1
        if not isinstance(resume, str):  # the pass its page comes back with (a reload, a lost connection, a later run)
            browser.resume = self._make_ticket()
            if self.remembered is not None:  # the store keeps it (and alone decides), else this run's list
                via = "link" if isinstance(token, str) else "pairing code" if self.pairing_codes else "password"
                name = f"browser at {browser.address or '?'}"
                new_link.append(RememberBrowser(pass_digest(browser.resume), name, via, browser.address))
            else:
                self._run_passes.add(pass_digest(browser.resume))
        info = self.info
        hello = {
            "type": "hello",
            "codec": info.codec,
            "width": info.width,
            "height": info.height,
            "fps": info.fps,
            "clock_offset_ms": info.clock_offset_s * 1000,
            "audio": {"codec": info.audio_codec, "rate": info.audio_rate, "channels": info.audio_channels}
            if info.audio_codec is not None
            else None,
        }
        if browser.resume is not None:
            hello["resume"] = browser.resume
        if isinstance(code, str) and self.pairing_codes is not None:
            hello["paired"] = True  # its code is spent: the page comes back with its pass alone
        joined = BrowserJoined(client, page_codecs(msg.get("codecs")))
        if self.webtransport_cert is None:
            return [*new_link, SendText(client, json.dumps(hello)), RequestKeyframe(), joined]
        # The ticket goes inside the connection that proved the key (TLS or loopback), and the certificate's hash
        # with it: the page's QUIC session is bound to that proof both ways.
        browser.ticket, browser.awaiting_session = self._make_ticket(), True
        hello["webtransport"] = {"cert_sha256": self.webtransport_cert, "ticket": browser.ticket}
        return [*new_link, SendText(client, json.dumps(hello)), joined]

    def kept_for_this_run(self, pass_sha256: str) -> None:
        """The store would not keep this pass (:class:`RememberBrowser`): it opens for the rest of this run only."""
        self._run_passes.add(pass_sha256)

    def session_of(self, client: int) -> int | None:
        """The WebTransport session carrying this browser's media (None: its WebSocket does)."""
        browser = self._browsers.get(client)
        return browser.session if browser is not None else None

    def session_opened(self, session: int, ticket: str) -> list[WebOutput]:
        """A WebTransport session asked for ``/wt/<ticket>``: it carries the media of the browser whose ticket that
        is (once: a ticket is spent by its first use), else it is refused."""
        found = None
        for client, waiting in self._browsers.items():
            if waiting.ticket is not None and _equal(ticket, waiting.ticket):  # every one compared
                found = client
        browser = self._browsers.get(found) if found is not None else None
        if found is None or browser is None or not browser.awaiting_session:
            self.counters.refuse("wrong_ticket")
            return [CloseSession(session, "no browser waits with that ticket")]
        browser.ticket, browser.awaiting_session, browser.session = None, False, session
        browser.awaiting_idr, browser.units = True, 0
        self._sessions[session] = found
        self.counters.sessions += 1
        return [AcceptSession(session, found), RequestKeyframe()]

    def session_closed(self, session: int) -> list[WebOutput]:
        """Its WebTransport session is gone: the browser goes on over its WebSocket, from the next key frame."""
        client = self._sessions.pop(session, None)
        browser = self._browsers.get(client) if client is not None else None
        if browser is None:
            return []
        browser.session = None
        return self._on_websocket(browser)

    def session_datagram(self, session: int, data: bytes) -> list[WebOutput]:
        """A datagram from a browser's session: its pad or keys and mouse, or its arrivals report; anything else
        is counted and dropped."""
        client = self._sessions.get(session)
        try:
            message = parse_page_message(data)
        except ProtocolError:
            message = None
        if client is None or message is None:
            self.counters.datagrams_dropped += 1
            return []
        return [self._from_page(client, message)]

    def _on_websocket(self, browser: _Browser) -> list[WebOutput]:
        browser.ticket, browser.awaiting_session, browser.awaiting_idr = None, False, True
        self.counters.websocket_fallbacks += 1
        return [RequestKeyframe()]

    def _check_code(self, browser: _Browser, code: str, now: float) -> tuple[str | None, list[WebOutput]]:
        """The host's password, or its one-time pairing code, typed into the page: (None if right, else why not;
        what the host must do: a spent or expired pairing code makes it show the next).  A wrong one is counted
        against the address, as a viewer's is, and an address blocked after wrong codes is not even checked."""
        password, codes = self.config.password, self.pairing_codes
        if password is None and codes is None:
            self.counters.refuse("no_password_here")
            return "this host takes no password from the page: open the link the host printed", []
        wait = self.limiter.blocked_for(browser.address, now)
        if wait > 0:
            self.counters.refuse("blocked")
            return f"too many wrong passwords from here: try again in {wait:.0f} s", []
        if codes is not None:
            right, host = codes.take_typed_code(code, f"a browser at {browser.address or '?'}", now)
            out: list[WebOutput] = list(host)
        else:
            right, out = password is not None and _equal(code, password), []
        if not right:
            self.limiter.failed(browser.address, now)
            self.counters.refuse("wrong_code")
            if codes is not None:
                return "wrong pairing code (each works once: the host shows the next)", out
            return "wrong password", out
        self.limiter.succeeded(browser.address)
        return None, out

    def _from_page(self, client: int, message: GamepadState | InputState | RateFeedback) -> WebOutput:
        if isinstance(message, RateFeedback):
            self.counters.rate_reports += 1
            return BrowserRateReport(client, message)
        self.counters.input_states += 1
        return BrowserInput(client, message)

    def _input(self, client: int, data: bytes) -> list[WebOutput]:
        """A proved browser's binary message on its WebSocket: its pad, keys and mouse, or its arrivals report; a
        malformed one closes it (the WebSocket is reliable: a bad message is a broken page, or not a page)."""
        try:
            message = parse_page_message(data)
        except ProtocolError:
            self.counters.refuse("malformed")
            return self._close(client, "malformed rate report" if data[:1] == b"R" else "malformed input message")
        return [self._from_page(client, message)]

    def _close(self, client: int, reason: str, code: int = CLOSE_REFUSED) -> list[WebOutput]:
        browser = self._browsers.pop(client, None)
        out: list[WebOutput] = [CloseClient(client, reason, code)]
        if browser is not None and browser.session is not None:
            self._sessions.pop(browser.session, None)
            out.append(CloseSession(browser.session, reason))
        if browser is not None and browser.proved:
            out.append(BrowserLeft(client))
        return out

    def video(
        self, data: bytes, *, capture_us: int, pts_us: int, idr: bool, backlog: dict[int, int], now: float
    ) -> list[WebOutput]:
        """One encoded unit: to each proved browser that can take it.  ``backlog``: bytes still waiting to leave
        for each browser (the shell's transports: its session's, where it has one)."""
        out: list[WebOutput] = []
        message: bytes | None = None
        want_idr = False
        for client, browser in self._browsers.items():
            if not browser.proved or browser.awaiting_session:
                continue
            if backlog.get(client, 0) > self.config.max_backlog_bytes:
                if not browser.awaiting_idr:
                    browser.awaiting_idr = want_idr = True
                self.counters.frames_skipped += 1
                continue
            if browser.awaiting_idr and not idr:
                self.counters.frames_skipped += 1
                continue
            browser.awaiting_idr = False
            if message is None:
                message = video_header(idr=idr, capture_us=capture_us, pts_us=pts_us) + data
            unit, ours = browser.units, numbered(browser.units, message)
            if browser.session is None:
                out.append(SendBinary(client, ours, unit=unit))
            else:
                out.append(SendBinary(client, ours, "stream", browser.session, unit))
            browser.units = (unit + 1) & 0xFFFFFFFF
            self.counters.frames_sent += 1
            self.counters.bytes_sent += len(message)
        if want_idr:
            self.counters.keyframe_requests += 1
            out.append(RequestKeyframe())
        return out

    def audio(self, data: bytes, *, pts_us: int, backlog: dict[int, int]) -> list[WebOutput]:
        """One encoded audio unit (the viewers' own: Opus or PCM) to each proved browser whose bytes are not piling
        up (sound that cannot leave is dropped, not queued): at once on a WebSocket; to a WebTransport session in
        groups of ``SOUND_GROUP_US`` (:meth:`_group_sound`)."""
        message = audio_message(data, pts_us=pts_us)
        out: list[WebOutput] = []
        listening = [
            (c, b) for c, b in self._browsers.items() if b.proved and backlog.get(c, 0) <= self.config.max_backlog_bytes
        ]
        for client, browser in listening:
            if browser.session is None:
                out.append(SendBinary(client, message))
                self.counters.audio_sent += 1
        sessions = [(c, b.session) for c, b in listening if b.session is not None]
        if not any(b.session is not None for b in self._browsers.values()):
            self._sound.clear()
            return out
        for units in self._group_sound(message, pts_us):
            group = sound_group(units)
            # late sound is worth nothing: a datagram, unless it cannot fit one
            channel = "datagram" if len(group) <= MAX_DATAGRAM_BYTES else "stream"
            for client, session in sessions:
                out.append(SendBinary(client, group, channel, session))
                self.counters.audio_sent += len(units)
        return out

    def _group_sound(self, message: bytes, pts_us: int) -> list[list[bytes]]:
        """The groups of sound that are whole with this unit: once the units held span ``SOUND_GROUP_US`` (a unit
        lasting as long as the gap before it), or alone while that is not yet known.  What a gap in the stamps (the
        sound paused, or started over) left held goes out first, by itself."""
        out: list[list[bytes]] = []
        last, self._sound_last_us = self._sound_last_us, pts_us
        unit_us = pts_us - last if last is not None and 0 < pts_us - last <= SOUND_GROUP_US else None
        if self._sound and unit_us is None:
            out.append([m for _, m in self._sound])
            self._sound.clear()
        self._sound.append((pts_us, message))
        if unit_us is None or pts_us - self._sound[0][0] + unit_us >= SOUND_GROUP_US - SOUND_GROUP_SLACK_US:
            out.append([m for _, m in self._sound])
            self._sound.clear()
        return out

    def rumble(self, client: int, strong: int, weak: int, duration_ms: int) -> list[WebOutput]:
        """The motors of the pad this browser holds (0..65535 each, for ``duration_ms``; 0: stop): a small message
        on its WebSocket, which the page plays on its pad."""
        browser = self._browsers.get(client)
        if browser is None or not browser.proved:
            return []
        self.counters.rumbles += 1
        message = {"type": "rumble", "strong": strong, "weak": weak, "duration_ms": duration_ms}
        return [SendText(client, json.dumps(message))]

    def next_timer(self) -> float | None:
        pending = [b.connected_s for b in self._browsers.values() if not b.proved]
        pending += [b.proved_s for b in self._browsers.values() if b.awaiting_session]
        return min(pending) + self.config.auth_timeout_s if pending else None

    def handle_timer(self, now: float) -> list[WebOutput]:
        timeout = self.config.auth_timeout_s
        late = [c for c, b in self._browsers.items() if not b.proved and now - b.connected_s >= timeout]
        out: list[WebOutput] = []
        for client in late:
            self.counters.refuse("timeout")
            out += self._close(client, "the token was not proved in time")
        for browser in self._browsers.values():
            if browser.awaiting_session and now - browser.proved_s >= timeout:  # no session came: the WebSocket
                out += self._on_websocket(browser)
        return out

    def summary(self) -> dict[str, Any]:
        c = self.counters
        return {
            "watching": self.watching,
            "admitted": c.admitted,
            "refused": dict(c.refused),
            "frames_sent": c.frames_sent,
            "bytes_sent": c.bytes_sent,
            "frames_skipped": c.frames_skipped,
            "keyframe_requests": c.keyframe_requests,
            "input_states": c.input_states,
            "audio_sent": c.audio_sent,
            "webtransport_sessions": c.sessions,
            "websocket_fallbacks": c.websocket_fallbacks,
            "datagrams_dropped": c.datagrams_dropped,
            "rate_reports": c.rate_reports,
            "rumbles": c.rumbles,
        }


def _equal(given: str, secret: str) -> bool:
    """In constant time (for the secret's length)."""
    return hmac.compare_digest(given.encode(), secret.encode())


def _any_equal(given: str, secrets_: list[str]) -> bool:
    """Compared with every one, whatever matched."""
    return sum(_equal(given, s) for s in secrets_) > 0


def page_codecs(said: Any) -> frozenset[VideoCodec]:
    """What a page's auth says it decodes (``"codecs": ["av1", "h264"]``, from WebCodecs): the names known here, in
    any order; a page that said nothing, nothing known or something that is not a list of names decodes H.264
    (the pages before this was asked, and the codec every page plays)."""
    if not isinstance(said, list):
        return BROWSER_CODECS
    known = frozenset(PAGE_CODECS[name] for name in said if isinstance(name, str) and name in PAGE_CODECS)
    return known or BROWSER_CODECS
