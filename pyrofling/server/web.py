"""``pyrofling host --web``: the page and the browsers' WebSocket, beside the PyroFling port.

A thin shell around :class:`~pyrofling.core.host.web_viewers.WebViewers`: it
serves the page (``pyrofling/web/``), accepts WebSockets at ``/stream`` and, on
the same port number over UDP, WebTransport sessions
(:mod:`pyrofling.server.web_transport`), and carries out what the core decides.
Sends never wait: a message is handed to the connection and the core skips
frames for a browser whose bytes pile up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import ssl
import tempfile
import time
from collections.abc import Callable
from importlib import resources
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from pyrofling import logs
from pyrofling.clocks import SYSTEM_CLOCK, Clock
from pyrofling.core.host.sessions import HostSessions
from pyrofling.core.host.state import BrowserRumble, HostOutput
from pyrofling.core.host.web_door import WebDoor, WebDoorConfig, request_refusal
from pyrofling.core.host.web_viewers import (
    AcceptSession,
    CloseClient,
    CloseSession,
    NewLinkKey,
    RememberBrowser,
    SendBinary,
    SendText,
    StreamInfo,
    WebConfig,
    WebOutput,
    WebViewers,
)
from pyrofling.pairing import HostPairings, KeptBrowsers
from pyrofling.server import quic_private
from pyrofling.server.audio import AudioEncoder
from pyrofling.server.config import HostConfig
from pyrofling.server.encoder import VideoEncoder
from pyrofling.server.network import HostNetwork, uri_host
from pyrofling.server.web_listener import descriptor_room, listen
from pyrofling.server.web_tls import LOOPBACK_BINDS, certificate_names, page_tls
from pyrofling.server.web_transport import WebTransportServer
from pyrofling.wire import AudioCodec, VideoCodec
from pyrofling.wire.browser import MAX_PAGE_MESSAGE_BYTES, PAGE_CODEC_NAMES

log = logging.getLogger(__name__)

#: Path → (file in pyrofling/web, content type).
PAGES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/viewer.js": ("viewer.js", "text/javascript; charset=utf-8"),
    "/viewer.css": ("viewer.css", "text/css; charset=utf-8"),
    "/transport.js": ("transport.js", "text/javascript; charset=utf-8"),
    "/report.js": ("report.js", "text/javascript; charset=utf-8"),
    "/marker.js": ("marker.js", "text/javascript; charset=utf-8"),
    "/draw.js": ("draw.js", "text/javascript; charset=utf-8"),
}
#: Sent with every page: nothing but this origin, never cached, never framed, no referrer.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}
#: The browsers' names for the viewers' audio codecs (AudioDecoder's "opus"; PCM is played as it comes).
WEB_AUDIO = {AudioCodec.OPUS: "opus", AudioCodec.RAW_S16LE: "pcm_s16le"}
#: A browser's largest message (its own are a few hundred bytes).
MAX_MESSAGE_BYTES = MAX_PAGE_MESSAGE_BYTES
#: A browser's WebSocket handshake must be done by then (and its TLS handshake: a silent connection holds a
#: descriptor until it is).
OPEN_TIMEOUT_S = 5.0
#: The logger websockets writes to: never below WARNING, whatever -v says (at DEBUG it writes every frame, the
#: link's key, passes and passwords among them), and held to a rate with the lines a stranger can cause.
CONNECTION_LOG = "pyrofling.server.web.connections"
logging.getLogger(CONNECTION_LOG).setLevel(logging.WARNING)
#: Loggers whose lines a stranger's connection can cause (asyncio's: TLS handshakes that fail, accept errors).
STRANGER_LOGS = (CONNECTION_LOG, __name__, "asyncio", "qh3", "quic")


def page(name: str) -> bytes:
    return resources.files("pyrofling.web").joinpath(name).read_bytes()


#: Ports tried for the page where any will do, until one's UDP twin is free for WebTransport too.
WEB_PORT_TRIES = 5


class WebServer:
    """Serves the page and the stream; :meth:`video` per encoded unit, from the host's loop."""

    def __init__(
        self,
        viewers: WebViewers,
        sessions: HostSessions,
        *,
        emit: Callable[[list[HostOutput | WebOutput]], None],
        on_remember: Callable[[RememberBrowser], None] = lambda _out: None,
        clock: Clock = SYSTEM_CLOCK,
        door: WebDoor | None = None,
    ) -> None:
        """``viewers``, the browsers' core, whose deadlines are ``sessions``'; what it decides goes through
        :meth:`HostSessions.from_browsers <pyrofling.core.host.sessions.HostSessions.from_browsers>` (a browser
        plays as a viewer does) to ``emit``, the network's perform, which hands the browsers' part back to
        :meth:`perform`; ``on_remember``: keep a browser's pass for the host's later runs."""
        self.viewers = viewers
        self.sessions = sessions
        self._emit = emit
        self._on_remember = on_remember
        self._clock = clock
        #: Who may connect at all (before TLS, before a read): per address prefix and in total.
        self.door = door or WebDoor(WebDoorConfig(max_open=descriptor_room()))
        self._scheme = "http"
        self._loopback_only = True
        self._connections: dict[int, ServerConnection] = {}
        self.transport: WebTransportServer | None = None
        self._server: Server | None = None
        self._next = 1
        self._tasks: set[asyncio.Task[Any]] = set()
        #: The host's one timer, told that the browsers' next deadline may have changed (their core's deadlines are
        #: the host's sessions': ``HostSessions.browsers``; the web shell keeps no timer of its own).
        self.rearm: Callable[[], None] = lambda: None
        self.port: int | None = None
        self.link: str | None = None
        #: The link without its key, and who is shown each new link (the person: the terminal or a file).
        self.link_base: str | None = None
        self.show_link: Callable[[str, str | None], None] | None = None
        #: Served over HTTPS: the certificate's SHA-256 fingerprint, and its public key's (for Chromium's flag).
        self.fingerprint: str | None = None
        self.spki_sha256: str | None = None
        self.tls_dir: tempfile.TemporaryDirectory[str] | None = None  # a certificate made for this run only

    async def start(self, bind: str, port: int, tls: ssl.SSLContext | None = None) -> int:
        """Listen (over TLS with ``tls``: the page then needs https:// and its WebSocket wss://). Every connection
        passes :attr:`door` at its accept, before TLS."""
        logs.limit(*STRANGER_LOGS)
        self._scheme = "https" if tls is not None else "http"
        self._loopback_only = tls is None  # plain HTTP listens on this machine's loopback only
        sock = listen(bind, port, self.door, self._clock)
        try:
            self._server = await serve(
                self._handle,
                sock=sock,
                ssl=tls,
                process_request=self._http,
                max_size=MAX_MESSAGE_BYTES,
                compression=None,  # H.264 does not compress; deflate would only cost CPU
                server_header=None,
                open_timeout=OPEN_TIMEOUT_S,
                logger=logging.getLogger(CONNECTION_LOG),
            )
        except BaseException:
            sock.close()
            raise
        self.port = int(sock.getsockname()[1])
        return self.port

    async def start_with_transport(
        self, bind: str, ports: list[int], tls: ssl.SSLContext | None, names: list[str]
    ) -> int:
        """:meth:`start` on the first of ``ports`` whose UDP twin :meth:`start_transport` can take too (0: any
        free port: another process may hold its UDP twin), the last without WebTransport if its UDP is taken."""
        for i, port in enumerate(ports):
            await self.start(bind, port, tls)
            last = i == len(ports) - 1
            if await self.start_transport(bind, names, warn=last) or last:
                break
            await self._stop_listening()
        assert self.port is not None
        return self.port

    async def _stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server, self.port = None, None

    async def start_transport(self, bind: str, names: list[str], *, warn: bool = True) -> bool:
        """WebTransport on UDP, the page's port number (the page finds it there); without it (the port's UDP
        taken: False), the WebSocket carries everything."""
        assert self.port is not None
        gone = quic_private.missing()
        if gone:  # a qh3 other than the one this was made for: the WebSocket, rather than a failure mid-stream
            log.warning("no WebTransport for browsers: this qh3 lacks %s, which the host needs (pyproject.toml holds "
                        "qh3 below 1.10); their media goes over TCP", ", ".join(gone))  # fmt: skip
            return True  # no other port would do better
        transport = WebTransportServer(
            on_opened=lambda s, ticket: self._decided(self.viewers.session_opened(s, ticket)),
            on_datagram=lambda s, data: self._decided(self.viewers.session_datagram(s, data), session=s),
            on_closed=lambda s: self._decided(self.viewers.session_closed(s)),
            names=names,
        )
        try:
            await transport.start(bind, self.port)
        except OSError as exc:
            if warn:
                log.warning("no WebTransport for browsers (UDP port %d: %s): their media goes over TCP", self.port, exc)
            return False
        self.transport = transport
        self.viewers.webtransport_cert = transport.cert_sha256
        return True

    async def close(self) -> None:
        self.rearm = lambda: None
        if self.transport is not None:
            self.transport.close()
        if self.tls_dir is not None:
            self.tls_dir.cleanup()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2)
        for task in list(self._tasks):
            task.cancel()

    def _http(self, connection: ServerConnection, request: Request) -> Response | None:
        """The page for a plain GET; None lets a WebSocket upgrade at /stream go on (from the page's own origin
        only: :func:`~pyrofling.core.host.web_door.request_refusal`)."""
        assert self.port is not None
        refusal = request_refusal(
            request.path,
            request.headers.get("Host"),
            request.headers.get("Origin"),
            scheme=self._scheme,
            port=self.port,
            loopback_only=self._loopback_only,
        )
        if refusal is not None:
            self.door.counters.refuse(refusal[0])
            return connection.respond(403, refusal[1] + "\n")
        if request.path == "/stream":
            return None
        path = request.path.split("?", 1)[0]
        if path not in PAGES:
            return connection.respond(404, "not found\n")
        name, kind = PAGES[path]
        body = page(name)
        headers = Headers({"Content-Type": kind, "Content-Length": str(len(body)), **PAGE_HEADERS})
        return Response(200, "OK", headers, body)

    async def _handle(self, ws: ServerConnection) -> None:
        client, self._next = self._next, self._next + 1
        self._connections[client] = ws
        try:
            peer = ws.remote_address
            self._decided(self.viewers.connected(client, self._clock.now(), str(peer[0]) if peer else ""))
            async for message in ws:
                self._decided(self.viewers.message(client, message, self._clock.now()), client=client)
        except ConnectionClosed:
            pass
        finally:
            self._connections.pop(client, None)
            self._decided(self.viewers.closed(client))

    def _decided(self, outputs: list[WebOutput], *, client: int | None = None, session: int | None = None) -> None:
        """What the browsers' core decided on what a browser sent (``client``'s message, or a datagram on its
        WebTransport ``session``), through the host's sessions, with its QUIC connection's packet counts."""
        if session is None and client is not None:
            session = self.viewers.session_of(client)
        packets = self.transport.packets(session) if session is not None and self.transport is not None else None
        self._emit(self.sessions.from_browsers(outputs, self._clock.now(), packets))

    def summary(self) -> dict[str, Any]:
        """The browsers' figures, and the door's: connections admitted and refused at the accept and the request."""
        out = self.viewers.summary()
        out["door"] = self.door.summary()
        if self.transport is not None:
            out["quic"] = self.transport.summary()
        return out

    def rumble(self, out: BrowserRumble) -> None:
        """A game asked the motors of the pad this browser holds."""
        self.perform(self.viewers.rumble(out.browser, out.strong, out.weak, out.duration_ms))

    def backlog(self) -> dict[int, int]:
        """Bytes waiting to leave for each browser: on its WebTransport session where it has one, else its socket."""
        backlog = {c: ws.transport.get_write_buffer_size() for c, ws in self._connections.items() if ws.transport}
        if self.transport is not None:
            for client in backlog:
                session = self.viewers.session_of(client)
                if session is not None:  # its media goes there: what waits there is what counts
                    backlog[client] = self.transport.backlog(session)
        return backlog

    def perform(self, outputs: list[WebOutput]) -> None:
        """Carry out what the browsers' core decided (from a browser's message here, or the host's one timer)."""
        for out in outputs:
            if isinstance(out, SendBinary) and out.session is not None:
                if self.transport is not None:
                    self.transport.send(out.session, out.data, datagram=out.channel == "datagram")
                    self.sessions.browser_sent(out.client, out.unit, len(out.data), self._clock.now())
            elif isinstance(out, AcceptSession):
                if self.transport is not None:
                    self.transport.accept(out.session)
            elif isinstance(out, CloseSession):
                if self.transport is not None:
                    self.transport.close_session(out.session, out.reason)
            elif isinstance(out, SendBinary | SendText):
                ws = self._connections.get(out.client)
                if ws is not None:
                    self._spawn(ws.send(out.data if isinstance(out, SendBinary) else out.text))
                    if isinstance(out, SendBinary):
                        self.sessions.browser_sent(out.client, out.unit, len(out.data), self._clock.now())
            elif isinstance(out, CloseClient):
                ws = self._connections.get(out.client)
                if ws is not None:
                    log.info("browser %d closed: %s", out.client, out.reason)
                    self._spawn(ws.close(out.code, out.reason))
            elif isinstance(out, RememberBrowser):
                self._on_remember(out)
            elif isinstance(out, NewLinkKey):  # the last link admitted its browser: the next one, to the person
                if self.link_base is not None:
                    self.link = self.link_base + out.token
                    if self.show_link is not None:
                        self.show_link(self.link, self.fingerprint)
            else:  # the sessions' to take (HostSessions.from_browsers): it never comes this way
                log.debug("a browsers' output with nothing to do here: %r", out)
        self.rearm()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.debug("a browser's send failed: %s", task.exception())


async def open_web(
    config: HostConfig,
    encoder: VideoEncoder,
    audio: AudioEncoder | None,
    sessions: HostSessions,
    network: HostNetwork,
    clock: Clock,
    pairings: HostPairings | None = None,
) -> WebServer:
    """The host's web viewer, serving: browsers ask the sessions' key-frame policy for IDRs and play through them
    (their pads, keys and mouse by the same rules as a viewer's: the sessions decide, the network applies).
    ``audio``: the encoder of the sound the viewers get, which the browsers get too."""
    # Under --codec auto the pages say what they decode and the codec follows them; else it must be one they play.
    if sessions.codec_choice is None and encoder.video_codec not in (VideoCodec.H264, VideoCodec.AV1):
        raise ValueError("--web needs H.264 or AV1 (what browsers' WebCodecs decode; HEVC rarely): use --codec h264")
    enc = config.encoder
    # The host's password may be typed into the page, or its one-time pairing code, which pairs that browser.
    one_time = config.show_pairing_code is not None
    loopback = config.bind in LOOPBACK_BINDS
    https = config.web_https if config.web_https is not None else (config.web_cert is not None or not loopback)
    # Passes outlive the run only over HTTPS: a page served over plain HTTP on 127.0.0.1 is served, while the host is
    # down, by whoever takes the port then (another user of this machine), whose page would read the pass.
    kept = KeptBrowsers(pairings, config.password) if https and pairings is not None else None
    viewers = WebViewers(
        WebConfig(
            token=secrets.token_urlsafe(18),
            password=None if one_time else config.password,
            link_once=config.web_link_once,
        ),
        limiter=sessions.auth.limiter,
        remembered=kept,
        pairing_codes=sessions.auth if one_time else None,
    )
    codec, rate, channels = (WEB_AUDIO[audio.codec], audio.rate, config.audio.channels) if audio else (None, 0, 0)
    offset = time.time() - clock.now()
    name = PAGE_CODEC_NAMES[encoder.video_codec]
    viewers.set_stream(StreamInfo(name, enc.width, enc.height, enc.fps, offset, codec, rate, channels))

    def remember(out: RememberBrowser) -> None:  # the browser's pass, for the host's later runs (``pairings``)
        if kept is not None and not kept.add(out):
            viewers.kept_for_this_run(out.pass_sha256)

    web = WebServer(viewers, sessions, emit=network.perform, on_remember=remember, clock=clock)
    # One road for the timers: the browsers' deadlines are the sessions', fired by the network's one timer.
    sessions.browsers, network.browser_outputs, web.rearm = viewers, web.perform, network.rearm
    tls = None
    if https:
        page = page_tls(config.web_cert, config.web_key, config.pairing_dir, certificate_names(config.bind))
        tls, web.fingerprint, web.spki_sha256, web.tls_dir = page.context, page.fingerprint, page.spki, page.made_in
    elif not loopback:
        log.warning("the browser viewer over plain HTTP listens on 127.0.0.1 only: --web-https to serve the network")
    # Plain HTTP stays on this machine whatever --bind says: on the network it would show the link's key and the
    # pictures to anyone on the path (and a browser elsewhere would not run WebCodecs on such a page anyway).
    bind = config.bind if https and not loopback else "127.0.0.1"
    if config.web_transport:  # any port (0): tried again where another process holds the port's UDP
        ports = [config.web_port] if config.web_port else [0] * WEB_PORT_TRIES
        port = await web.start_with_transport(bind, ports, tls, certificate_names(config.bind))
    else:
        port = await web.start(bind, config.web_port or 0, tls)
    address = "127.0.0.1" if loopback or not https else uri_host(config.bind)
    web.link_base = f"{'https' if https else 'http'}://{address}:{port}/#t="
    web.link = web.link_base + viewers.token
    log.info(
        "browser viewer on %s port %d over %s (the link, with its key, is shown to you, not logged)",
        bind,
        port,
        "HTTPS" if https else "HTTP",
    )
    web.show_link = config.show_web_link
    if web.show_link is not None:  # the link (with its key) to the person, never to the log
        web.show_link(web.link, web.fingerprint)
    return web
