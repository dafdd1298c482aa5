"""The browsers' QUIC (qh3) in virtual time: the host's fixed window keeps a lossy, distant link's pictures whole."""

from __future__ import annotations

import datetime
import heapq
import random
import ssl

from cryptography.hazmat.primitives import serialization
from qh3.h3.connection import H3_ALPN
from qh3.quic.configuration import QuicConfiguration
from qh3.quic.connection import QuicConnection
from qh3.quic.events import StreamDataReceived

from pyrofling.server.web_tls import make_certificate
from pyrofling.server.web_transport import PACKET_BYTES, WINDOW_BYTES, FixedWindow

PICTURE = bytes(21_000)  # 10 Mbit/s at 60 pictures a second


def _stream_through_loss(*, fixed_window: bool, one_way_s: float, loss: float, pictures: int) -> tuple[int, int]:
    """A server sends each picture on its own stream every 1/60 s to a client over a path that delays every
    packet by ``one_way_s`` and loses ``loss`` of the server's at random: (pictures whole at the client, bytes
    still waiting at the server at the end)."""
    cert, key = make_certificate(["localhost"], datetime.timedelta(days=1))
    pem = serialization.Encoding.PEM
    server_config = QuicConfiguration(is_client=False, alpn_protocols=H3_ALPN, max_datagram_size=PACKET_BYTES)
    server_config.load_cert_chain(
        cert.public_bytes(pem), key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    client_config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, verify_mode=ssl.CERT_NONE)
    rng = random.Random(1)
    now = 1000.0
    client = QuicConnection(configuration=client_config)
    client.connect(("192.0.2.1", 443), now=now)
    server = QuicConnection(
        configuration=server_config, original_destination_connection_id=client.original_destination_connection_id
    )
    if fixed_window:
        server._loss._cc = FixedWindow(PACKET_BYTES)
    in_flight: list[tuple[float, int, bool, bytes]] = []  # (arrival, order, to the client, datagram)
    order = 0

    def send(conn: QuicConnection, at: float) -> None:
        nonlocal order
        to_client = conn is server
        for data, _ in conn.datagrams_to_send(now=at):
            if not (to_client and rng.random() < loss):
                order += 1
                heapq.heappush(in_flight, (at + one_way_s, order, to_client, data))

    def run_until(t: float) -> None:
        last = -1.0
        while True:
            due = [in_flight[0][0]] if in_flight else []
            due += [x for x in (client.get_timer(), server.get_timer()) if x is not None]
            at = max(min(due, default=t), last + 1e-5)  # a timer due now that stays due: time goes on
            if at > t:
                return
            last = at
            while in_flight and in_flight[0][0] <= at:
                _, _, to_client, data = heapq.heappop(in_flight)
                receiver, sender_addr = (client, ("192.0.2.2", 443)) if to_client else (server, ("192.0.2.1", 5))
                receiver.receive_datagram(data, sender_addr, now=at)
                send(receiver, at)
            for conn in (client, server):
                timer = conn.get_timer()
                if timer is not None and timer <= at:
                    conn.handle_timer(now=at)
                    send(conn, at)

    send(client, now)
    run_until(now + 1.0)  # the handshake
    now += 1.0
    whole = set()
    for _ in range(pictures):
        stream = server.get_next_available_stream_id(is_unidirectional=True)
        server.send_stream_data(stream, PICTURE, end_stream=True)
        send(server, now)
        now += 1 / 60
        run_until(now)
        while (event := client.next_event()) is not None:
            if isinstance(event, StreamDataReceived) and event.end_stream:
                whole.add(event.stream_id)
    waiting = sum(stop - start for s in server._streams.values() for start, stop in s.sender._pending)
    return len(whole), waiting + int(server._loss.bytes_in_flight)


def test_the_fixed_window_keeps_a_10_mbits_stream_whole_through_2_percent_loss_at_30_ms() -> None:
    """QUIC's own controller (qh3's CUBIC) halves its window at every loss: at 2 % random loss over a 30 ms round
    trip it cannot carry 10 Mbit/s, and the pictures pile up behind it. The host's window only bounds what is in
    flight: every picture arrives and nothing piles up; the host's rate policy, hearing the page, decides the rate."""
    kept, waiting = _stream_through_loss(fixed_window=True, one_way_s=0.015, loss=0.02, pictures=300)
    assert kept >= 298 and waiting < WINDOW_BYTES // 10
    stock, piled = _stream_through_loss(fixed_window=False, one_way_s=0.015, loss=0.02, pictures=300)
    assert stock < 200 and piled > WINDOW_BYTES
