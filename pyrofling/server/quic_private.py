"""qh3's private names that the browsers' WebTransport reaches into, all here, checked when the host starts.

qh3 (1.9, held below 1.10 in pyproject.toml) gives no public way to do four things the host needs:

* **its own congestion window** (:class:`~pyrofling.server.web_transport.FixedWindow`): the host's rate policy
  sets the rate, not QUIC's (the connection's ``_loss._cc``, before its first packet);
* **path MTU probes as a server** (``_mtu_probe_sizes``: qh3 probes only as a client);
* **sending only when there is something to send** after a browser's datagram (most are acknowledgements): the
  protocol's ``_process_events``, ``_transmit_soon``, its timer (``_timer``, ``_timer_at``, ``_handle_timer``),
  and what the connection holds (``_handshake_complete``, ``_datagrams_pending``, ``_streams`` and each stream
  sender's ``_pending``), also a browser's backlog (``_loss.bytes_in_flight``);
* **cheap Retry tokens** in place of its RSA ones (the server's ``_retry``), and its GSO datagram transport
  (``qh3.asyncio._transport``).

:func:`missing` says which of them this qh3 lacks; the web shell asks it before it offers WebTransport and,
where any is missing, says so in one line and leaves the browsers on their WebSocket, rather than failing in
the middle of a stream. Everything else in the shell uses qh3's public API.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

from qh3.asyncio import QuicConnectionProtocol
from qh3.asyncio.server import QuicServer
from qh3.quic.configuration import QuicConfiguration
from qh3.quic.connection import QuicConnection
from qh3.quic.recovery import QuicCongestionControl
from qh3.quic.stream import QuicStreamSender

#: What the protocol (our connection's base class) must have, by name.
PROTOCOL_METHODS = ("_process_events", "_transmit_soon", "_handle_timer")
#: What a new protocol object holds.
PROTOCOL_ATTRIBUTES = ("_quic", "_loop", "_timer", "_timer_at", "_connection_terminated_handler")
#: What a connection holds.
CONNECTION_ATTRIBUTES = ("_loss", "_mtu_probe_sizes", "_handshake_complete", "_datagrams_pending", "_streams")


def missing() -> list[str]:
    """The private names this qh3 does not have (empty: all there). Called with an event loop running (a
    protocol object is made to look at)."""
    gone: list[str] = []
    try:
        importlib.import_module("qh3.asyncio._transport").create_optimized_datagram_transport  # noqa: B018
    except (ImportError, AttributeError):
        gone.append("qh3.asyncio._transport.create_optimized_datagram_transport")
    gone += [f"QuicConnectionProtocol.{n}" for n in PROTOCOL_METHODS if not hasattr(QuicConnectionProtocol, n)]
    try:
        quic = QuicConnection(configuration=QuicConfiguration(is_client=True))
        protocol = QuicConnectionProtocol(quic)
    except Exception as exc:  # a qh3 whose constructors changed: everything below is unknown
        return [*gone, f"a connection and its protocol ({type(exc).__name__}: {exc})"]
    gone += [f"QuicConnectionProtocol.{n}" for n in PROTOCOL_ATTRIBUTES if not hasattr(protocol, n)]
    gone += [f"QuicConnection.{n}" for n in CONNECTION_ATTRIBUTES if not hasattr(quic, n)]
    loss = getattr(quic, "_loss", None)
    for name in ("_cc", "bytes_in_flight"):
        if loss is not None and not hasattr(loss, name):
            gone.append(f"QuicConnection._loss.{name}")
    if not hasattr(QuicStreamSender(stream_id=0, writable=True), "_pending"):
        gone.append("QuicStreamSender._pending")
    if "_retry" not in QuicServer.__init__.__code__.co_names:
        gone.append("QuicServer._retry")
    return gone


def datagram_transport() -> Any:
    """qh3's datagram transport (one GSO ``sendmsg`` for a picture's packets where the system has it)."""
    return importlib.import_module("qh3.asyncio._transport").create_optimized_datagram_transport


def connection(protocol: QuicConnectionProtocol) -> QuicConnection:
    quic: QuicConnection = protocol._quic
    return quic


def use_window(protocol: QuicConnectionProtocol, window: QuicCongestionControl) -> None:
    """The connection's congestion control, before it sends its first packet."""
    protocol._quic._loss._cc = window


def window(protocol: QuicConnectionProtocol) -> QuicCongestionControl:
    cc: QuicCongestionControl = protocol._quic._loss._cc
    return cc


def probe_path_mtu(protocol: QuicConnectionProtocol, sizes: list[int]) -> None:
    protocol._quic._mtu_probe_sizes = sizes


def has_to_send(protocol: QuicConnectionProtocol) -> bool:
    """Is there more than acknowledgements to send: a handshake under way, datagrams, a stream's data?"""
    quic = protocol._quic
    return (
        not quic._handshake_complete
        or bool(quic._datagrams_pending)
        or any(not stream.sender.buffer_is_empty for stream in quic._streams.values())
    )


def backlog_bytes(protocol: QuicConnectionProtocol) -> int:
    """Bytes in flight, and what its streams have yet to send (a lost packet's data is sent again from there)."""
    quic = protocol._quic
    unsent = 0
    for stream in quic._streams.values():
        if not stream.sender.buffer_is_empty:  # asked 260 times a second: only streams with something unsent
            unsent += sum(stop - start for start, stop in _ranges(stream.sender._pending))
    return int(quic._loss.bytes_in_flight) + unsent


def _ranges(pending: Iterable[Any]) -> Iterable[tuple[int, int]]:
    return ((r[0], r[1]) for r in pending)


def process_events(protocol: QuicConnectionProtocol) -> None:
    protocol._process_events()


def transmit_soon(protocol: QuicConnectionProtocol) -> None:
    protocol._transmit_soon()


def terminated(protocol: QuicConnectionProtocol) -> None:
    protocol._connection_terminated_handler()


def arm_timer(protocol: QuicConnectionProtocol) -> None:
    """The timer for the connection's next deadline, as the protocol's transmit arms it."""
    p: Any = protocol
    timer_at = p._quic.get_timer()
    if p._timer is not None and p._timer_at != timer_at:
        p._timer.cancel()
        p._timer = None
    if p._timer is None and timer_at is not None:
        p._timer = p._loop.call_at(timer_at, p._handle_timer)
    p._timer_at = timer_at


def loop_time(protocol: QuicConnectionProtocol) -> float:
    t: float = protocol._loop.time()
    return t


def use_retry_tokens(server: QuicServer, tokens: Any) -> None:
    """The server's Retry tokens made and checked by ``tokens`` (``create_token``, ``validate_token``)."""
    server._retry = tokens
