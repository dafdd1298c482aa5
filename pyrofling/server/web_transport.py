"""The browsers' WebTransport: HTTP/3 over QUIC (UDP) on the page's port number, for their media on a lossy link.

A thin shell around qh3 (aioquic's fork with its packets, crypto and streams in Rust: half
the CPU a packet costs in aioquic).  It reports each session that asks for
``/wt/<ticket>``, each datagram and each end to its owner (:class:`WebServer`,
which asks :class:`~pyrofling.core.host.web_viewers.WebViewers`), and carries out
what comes back: accept or close a session, a message on a new unidirectional
stream, or a datagram.

* **The certificate** is made for this run (ECDSA P-256, 13 days: browsers take a
  ``serverCertificateHashes`` certificate only for at most 14) and its SHA-256 goes
  to the page inside the connection that proved the key, so the page talks to
  this server and no other, whatever the network answers.
* **No amplification.** Every new connection is first sent a Retry (smaller than
  the client's padded Initial), so a forged source address gets nothing bigger
  than what was sent from it. Its token is checked with a keyed hash
  (:class:`RetryTokens`, a few microseconds), not qh3's RSA (a millisecond: forged
  tokens at 2,000 a second took a 720p60 host from 55 % to 93 % of a core, and its
  viewer to 86 % good refreshes, on the 2-core machine).
  A connection without an accepted session
  ``SESSION_DEADLINE_S`` after it opened is closed, and at most ``MAX_CONNECTIONS``
  are open, ``MAX_PER_ADDRESS`` from one address (whose Retry proved it real): one
  beyond is forgotten before its first packet is read, unanswered.
* **Congestion.** QUIC's own loss-based controllers halve their window at every
  loss, which at 2 % random loss starves a 10 Mbit/s stream; the host already
  chooses its rate (``--rate-policy``), so the window here only bounds what may be in
  flight (``WINDOW_BYTES``), and a browser whose bytes pile up is skipped to the
  next key frame by the core.
* **Fewer packets.** Packets are ``PACKET_BYTES`` as Chromium sends its own, and 1452 once
  a probe of that size came through (path MTU discovery, as qh3's clients do); a picture's
  packets leave in one GSO ``sendmsg`` where the system has it.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import hmac
import ipaddress
import logging
import secrets
import socket
import struct
import time
from collections.abc import Callable, Iterable
from typing import Any, cast

from cryptography.hazmat.primitives import serialization
from qh3.asyncio import QuicConnectionProtocol
from qh3.asyncio.server import QuicServer
from qh3.h3.connection import H3_ALPN, H3Connection
from qh3.h3.events import DatagramReceived, H3Event, HeadersReceived
from qh3.quic.configuration import QuicConfiguration
from qh3.quic.events import ConnectionTerminated, QuicEvent
from qh3.quic.packet_builder import QuicSentPacket
from qh3.quic.recovery import QuicCongestionControl

from pyrofling.server import quic_private as private
from pyrofling.server.web_tls import make_certificate

log = logging.getLogger(__name__)

#: What may be in flight to one browser (about 0.4 s of a 20 Mbit/s stream).
WINDOW_BYTES = 1_000_000
#: QUIC packets of this size, as Chromium sends its own (fewer packets than the 1200 minimum: less CPU)...
PACKET_BYTES = 1350
#: ...and of this one once a probe of it came through (1500-byte Ethernet, IPv6 or IPv4).
PROBED_PACKET_BYTES = 1452
#: A connection that has not asked for a session by then is closed; more than this many at once are refused.
SESSION_DEADLINE_S = 5.0
MAX_CONNECTIONS = 32
#: Connections from one address at once (a page needs one; a reload, another for a moment).
MAX_PER_ADDRESS = 4
#: Browsers accept a serverCertificateHashes certificate valid for at most 14 days.
CERT_LIFETIME = datetime.timedelta(days=13)
PATH_PREFIX = b"/wt/"


#: A Retry's token is good for this long (a client answers a Retry at once: one round trip).
RETRY_TOKEN_LIFETIME_S = 10
_TOKEN_HEAD = struct.Struct("<BI")  # version, when it was made (whole seconds)
_TOKEN_VERSION = 1
_TOKEN_MAC_BYTES = 16


class RetryTokens:
    """The Retry's address-validation tokens, as qh3's ``QuicRetryTokenHandler`` makes and checks them, but sealed
    with HMAC-SHA256 under a key made for this run: a forged token costs one hash to refuse.

    A token: version, when made, the connection ids the handshake needs back (the client knows them anyway), and a
    MAC over those and the client's address and port: another address, an altered id, or a token older than
    :data:`RETRY_TOKEN_LIFETIME_S` is refused (``ValueError``, as qh3 expects)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._key = secrets.token_bytes(32)
        self._clock = clock
        self.refused = 0

    def create_token(
        self, addr: Any, original_destination_connection_id: bytes, retry_source_connection_id: bytes
    ) -> bytes:
        body = _TOKEN_HEAD.pack(_TOKEN_VERSION, int(self._clock()) & 0xFFFFFFFF) + _ids(
            original_destination_connection_id, retry_source_connection_id
        )
        return body + self._mac(addr, body)

    def validate_token(self, addr: Any, token: bytes) -> tuple[bytes, bytes]:
        try:
            body, mac = token[:-_TOKEN_MAC_BYTES], token[-_TOKEN_MAC_BYTES:]
            if len(body) < _TOKEN_HEAD.size + 2 or not hmac.compare_digest(mac, self._mac(addr, body)):
                raise ValueError("not a token of this server's, or not for this address")
            version, made = _TOKEN_HEAD.unpack_from(body)
            if version != _TOKEN_VERSION or (int(self._clock()) - made) & 0xFFFFFFFF > RETRY_TOKEN_LIFETIME_S:
                raise ValueError("an old token")
            rest = body[_TOKEN_HEAD.size :]
            original, rest = rest[1 : 1 + rest[0]], rest[1 + rest[0] :]
            retry, rest = rest[1 : 1 + rest[0]], rest[1 + rest[0] :]
            if rest or not retry:
                raise ValueError("a damaged token")
        except (ValueError, IndexError, struct.error) as exc:
            self.refused += 1
            raise ValueError(str(exc)) from None
        return original, retry

    def _mac(self, addr: Any, body: bytes) -> bytes:
        where = ipaddress.ip_address(str(addr[0]).split("%")[0]).packed + int(addr[1]).to_bytes(2, "big")
        return hmac.new(self._key, where + body, hashlib.sha256).digest()[:_TOKEN_MAC_BYTES]


def _ids(*ids: bytes) -> bytes:
    return b"".join(bytes([len(i)]) + i for i in ids)


class FixedWindow(QuicCongestionControl):
    """A window that losses do not shrink: the host's rate policy, not QUIC's, sets the rate."""

    def __init__(self, max_datagram_size: int) -> None:
        super().__init__(max_datagram_size)
        self.congestion_window = WINDOW_BYTES
        #: Packets sent and found lost so far: what the browser's link controller hears as its loss.
        self.packets_sent = 0
        self.packets_lost = 0

    def on_packet_acked(self, packet: QuicSentPacket, now: float) -> None:
        self.bytes_in_flight -= packet.sent_bytes

    def on_packet_sent(self, packet: QuicSentPacket) -> None:
        self.bytes_in_flight += packet.sent_bytes
        self.packets_sent += 1

    def on_packets_lost(self, packets: Iterable[QuicSentPacket], now: float) -> None:
        for packet in packets:
            self.bytes_in_flight -= packet.sent_bytes
            self.packets_lost += 1

    def on_persistent_congestion(self, now: float) -> None:
        pass

    def on_rtt_measurement(self, latest_rtt: float, now: float) -> None:
        pass


class _Connection(QuicConnectionProtocol):
    """One browser's QUIC connection; at most one WebTransport session on it."""

    def __init__(self, *args: Any, server: WebTransportServer, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.server = server
        # The host's rate policy, not QUIC's, sets the rate (before the connection has sent a packet).
        private.use_window(self, FixedWindow(PACKET_BYTES))
        private.probe_path_mtu(self, [PROBED_PACKET_BYTES])  # qh3 probes only as a client, unless told
        self.quic = private.connection(self)
        self.h3 = H3Connection(self.quic, enable_webtransport=True)
        self.session: int | None = None  # the server's number for its session
        self.stream_id: int | None = None  # the session's CONNECT stream
        self.accepted = False
        self.refused = False
        self.address: str | None = None
        self._refusal: str | None = None  # too many connections: refused at its first datagram
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        server = self.server
        if len(server.connections) >= MAX_CONNECTIONS:
            self._refusal = "too many connections"
            return
        server.connections.add(self)
        self._deadline = asyncio.get_running_loop().call_later(SESSION_DEADLINE_S, self._late)

    def datagram_received(self, data: bytes | str, addr: Any) -> None:
        if self.address is None:
            self.address = str(addr[0])
            if sum(1 for c in self.server.connections if c.address == self.address) > MAX_PER_ADDRESS:
                self._refusal = "too many connections from this address"
        if self._refusal is not None:  # before its first packet is read: nothing is answered, it is forgotten
            self.server.refused += 1
            self.quic.close(reason_phrase=self._refusal)
            private.terminated(self)
            self._ended()
            return
        window = private.window(self)
        lost = window.packets_lost if isinstance(window, FixedWindow) else None  # None: losses not counted
        self.quic.receive_datagram(cast(bytes, data), addr, now=private.loop_time(self))
        private.process_events(self)
        # As aioquic's own, but what it has to send goes once this turn of the loop is over, and only when there
        # is something: most of what a browser sends is acknowledgements (on loopback one for every three or four
        # packets), after which a transmit finds nothing to send and would cost a packet's build for nothing.  Its
        # own acknowledgements of the browser's packets are due at a time: the timer, rearmed here, sends them.
        if lost is None or lost != cast(FixedWindow, window).packets_lost or private.has_to_send(self):
            private.transmit_soon(self)
        else:
            private.arm_timer(self)

    def _late(self) -> None:
        if not self.accepted:  # never asked for a session, or was refused one
            self.quic.close(reason_phrase="no session")
            self.transmit()

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, ConnectionTerminated):
            self._ended()
            return
        for h3_event in self.h3.handle_event(event):
            self._h3_event(h3_event)

    def _h3_event(self, event: H3Event) -> None:
        if isinstance(event, HeadersReceived):
            headers = dict(event.headers)
            path = headers.get(b":path", b"")
            webtransport = headers.get(b":method") == b"CONNECT" and headers.get(b":protocol") == b"webtransport"
            if self.session is not None or not webtransport or not path.startswith(PATH_PREFIX):
                self.h3.send_headers(event.stream_id, [(b":status", b"404")], end_stream=True)
                self.transmit()
                return
            self.stream_id = event.stream_id
            self.session = self.server.new_session(self)
            self.server.on_opened(self.session, path[len(PATH_PREFIX) :].decode(errors="replace"))
        elif isinstance(event, DatagramReceived) and self.accepted and event.flow_id * 4 == self.stream_id:
            assert self.session is not None
            self.server.on_datagram(self.session, event.data)

    def accept(self) -> None:
        assert self.stream_id is not None
        self.accepted = True
        self.h3.send_headers(self.stream_id, [(b":status", b"200"), (b"sec-webtransport-http3-draft", b"draft02")])
        self.transmit()

    def end(self, reason: str) -> None:
        """Refuse its session (403; the connection closes at its deadline), or close an accepted one."""
        if self.stream_id is not None and not self.accepted and not self.refused:
            self.h3.send_headers(self.stream_id, [(b":status", b"403")], end_stream=True)
            self.refused = True  # ended again (the host closing before the deadline): close the connection
        else:
            self.quic.close(reason_phrase=reason[:100])
        self.transmit()

    def send_stream(self, data: bytes) -> None:
        assert self.stream_id is not None
        stream = self.h3.create_webtransport_stream(self.stream_id, is_unidirectional=True)
        self.quic.send_stream_data(stream, data, end_stream=True)
        self.transmit()

    def send_datagram(self, data: bytes) -> None:
        assert self.stream_id is not None
        self.h3.send_datagram(self.stream_id // 4, data)  # HTTP datagrams name their stream by a quarter of its id
        self.transmit()

    def backlog(self) -> int:
        """Bytes waiting to leave or to be acknowledged: those in flight, and what its streams have yet to send
        (a lost packet's data is sent again from there)."""
        return private.backlog_bytes(self)

    def packets(self) -> tuple[int, int]:
        """(packets lost, packets sent) so far on this connection."""
        window = private.window(self)
        return (window.packets_lost, window.packets_sent) if isinstance(window, FixedWindow) else (0, 0)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._ended()

    def _ended(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        if self in self.server.connections:
            self.server.connections.discard(self)
            if self.session is not None:
                self.server.ended(self.session)


class WebTransportServer:
    """Listens on UDP; ``on_opened(session, ticket)``, ``on_datagram(session, data)``, ``on_closed(session)``."""

    def __init__(
        self,
        *,
        on_opened: Callable[[int, str], None],
        on_datagram: Callable[[int, bytes], None],
        on_closed: Callable[[int], None],
        names: list[str],
    ) -> None:
        self.on_opened, self.on_datagram, self.on_closed = on_opened, on_datagram, on_closed
        cert, key = make_certificate(names, CERT_LIFETIME)
        #: What the page pins (serverCertificateHashes): the SHA-256 of the certificate's DER.
        self.cert_sha256 = hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()
        self._config = QuicConfiguration(
            alpn_protocols=H3_ALPN,
            is_client=False,
            max_datagram_frame_size=65536,
            max_datagram_size=PACKET_BYTES,
            idle_timeout=15.0,
        )
        pem = serialization.Encoding.PEM
        self._config.load_cert_chain(
            cert.public_bytes(pem),
            key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
        )
        self.connections: set[_Connection] = set()
        self.refused = 0
        self.retry_tokens = RetryTokens()
        self._sessions: dict[int, _Connection] = {}
        self._next = 1
        self._server: QuicServer | None = None

    async def start(self, bind: str, port: int) -> None:
        # qh3's own datagram transport: a picture's packets leave in one GSO sendmsg where the system has it.
        family, kind, proto, _, address = socket.getaddrinfo(bind, port, type=socket.SOCK_DGRAM)[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.bind(address)
            _, server = await private.datagram_transport()(
                asyncio.get_running_loop(),
                lambda: QuicServer(
                    configuration=self._config,
                    create_protocol=lambda *a, **k: _Connection(*a, server=self, **k),
                    retry=True,
                ),
                sock,
            )
        except BaseException:
            sock.close()
            raise
        self._server = cast(QuicServer, server)
        private.use_retry_tokens(self._server, self.retry_tokens)  # not qh3's RSA tokens (a millisecond each to check)

    def close(self) -> None:
        for connection in list(self.connections):
            connection.end("the host is closing")
        if self._server is not None:
            self._server.close()

    def new_session(self, connection: _Connection) -> int:
        session, self._next = self._next, self._next + 1
        self._sessions[session] = connection
        return session

    def ended(self, session: int) -> None:
        if self._sessions.pop(session, None) is not None:
            self.on_closed(session)

    def accept(self, session: int) -> None:
        connection = self._sessions.get(session)
        if connection is not None:
            connection.accept()

    def close_session(self, session: int, reason: str) -> None:
        connection = self._sessions.pop(session, None)
        if connection is not None:
            log.info("browser session %d closed: %s", session, reason)
            connection.end(reason)

    def send(self, session: int, data: bytes, *, datagram: bool) -> None:
        connection = self._sessions.get(session)
        if connection is None or not connection.accepted:
            return
        if datagram:
            connection.send_datagram(data)
        else:
            connection.send_stream(data)

    def backlog(self, session: int) -> int:
        connection = self._sessions.get(session)
        return connection.backlog() if connection is not None else 0

    def packets(self, session: int) -> tuple[int, int] | None:
        """(packets lost, packets sent) so far on the session's connection; None if it has none."""
        connection = self._sessions.get(session)
        return connection.packets() if connection is not None else None

    def summary(self) -> dict[str, int]:
        """Connections open and refused (too many), and Initials whose Retry token was refused (forged, old)."""
        return {"open": len(self.connections), "refused": self.refused, "tokens_refused": self.retry_tokens.refused}
