"""The host's one way out (pyrofling.core.host.media_out through HostSessions), in virtual time."""

from __future__ import annotations

from pyrofling.core.host.keyframes import KeyframePolicy
from pyrofling.core.host.pacer import TokenBucketPacer
from pyrofling.core.host.packetizer import MediaPacket, Packetizer
from pyrofling.core.host.sessions import HostSessions
from pyrofling.fec.codec import block_count
from pyrofling.fec.planner import make_planner
from pyrofling.wire import (
    CodecParameters,
    Cookie,
    Hello,
    Kick,
    KickFlags,
    MediaHeader,
    Ping,
    PingReply,
    StreamType,
)

PARAMS = CodecParameters(1, 1, 1, 60, 1, 320, 240, 2, 48000)
#: 1 Mbit/s with a 3-datagram burst: a 50-datagram frame takes about 0.4 s to leave.
RATE_BPS = 1_000_000


def sessions(*, fec: str = "none") -> HostSessions:
    def packetizer(cookie: int) -> Packetizer:
        return Packetizer.for_cookie(cookie, video_planner=make_planner(fec))

    s = HostSessions(
        make_packetizer=packetizer,
        keyframes=KeyframePolicy(),
        make_pacer=lambda: TokenBucketPacer(rate_bits_per_s=RATE_BPS, burst_bytes=3 * 1076),
    )
    s.codec_parameters = PARAMS
    return s


def viewer(s: HostSessions, conn_id: int, flags: KickFlags = KickFlags.VIDEO | KickFlags.AUDIO) -> tuple[str, int]:
    address = ("10.0.0.2", 40000 + conn_id)
    s.open(conn_id, ("10.0.0.2", 30000 + conn_id), 0.0, cookie=1000 + conn_id)
    s.control(conn_id, Hello(), 0.0)
    s.datagram(address, bytes(Cookie(1000 + conn_id)), 0.0)
    s.control(conn_id, Kick(flags), 0.0)
    return address


def frame(size: int = 50 * 1024, *, key: bool = False) -> MediaPacket:
    return MediaPacket(bytes(size), 1_000, StreamType.VIDEO, key_frame=key)


def drain(s: HostSessions, start: float, until: float) -> list[tuple[float, tuple[str, int], bytes]]:
    """Follow the core's one timer from ``start`` to ``until``: (time, address, datagram) for each that left."""
    sent = [(start, d.address, d.data) for d in s.datagrams_to_send(start)]
    while (due := s.next_timer()) is not None and due <= until:
        sent += [(due, d.address, d.data) for d in s.datagrams_to_send(due)]
    return sent


def test_a_frame_leaves_paced_to_every_viewer_on_the_one_timer() -> None:
    s = sessions()
    a, b = viewer(s, 1), viewer(s, 2)
    s.send_video(frame(key=True), idr=True, now=1.0)
    sent = drain(s, 1.0, 3.0)
    blocks = block_count(50 * 1024)
    for address in (a, b):
        times = [t for t, to, _ in sent if to == address]
        assert len(times) == blocks
        # Not one burst: three go at once, the rest at the pacer's rate (1 Mbit/s: about 8.8 ms a datagram).
        assert sum(t == 1.0 for t in times) == 3
        assert times[-1] - times[0] > 0.9 * (blocks - 3) * (1076 * 8 / RATE_BPS)
    keep_alive = s.next_timer()
    assert keep_alive is not None and keep_alive > 3.0  # only the keep-alive is left


def test_nothing_before_a_viewers_first_key_frame_then_everything() -> None:
    s = sessions()
    address = viewer(s, 1)
    s.send_video(frame(1000), idr=False, now=1.0)
    assert s.datagrams_to_send(1.0) == []
    s.send_video(frame(1000, key=True), idr=True, now=1.1)
    s.send_video(frame(1000), idr=False, now=1.2)
    sent = drain(s, 1.2, 2.0)
    headers = [MediaHeader.parse(data) for _, to, data in sent if to == address]
    assert len(headers) == 2 and headers[0].key_frame and headers[0].packet_seq + 1 == headers[1].packet_seq


def test_replies_and_audio_go_ahead_of_queued_video() -> None:
    s = sessions()
    address = viewer(s, 1)
    s.send_video(frame(key=True), idr=True, now=1.0)
    first = s.datagrams_to_send(1.0)
    assert len(first) == 3  # the burst; the rest of the frame waits for the pacer
    s.datagram(address, bytes(Ping(7)), 1.001)
    s.send_audio(MediaPacket(bytes(200), 1_000, StreamType.AUDIO), 1.001)
    assert s.next_timer() == 1.001  # due at once, not at the pacer's next slot
    out = s.datagrams_to_send(1.001)
    assert PingReply.parse(out[0].data).seq == 7
    assert MediaHeader.parse(out[1].data).stream == StreamType.AUDIO and len(out) == 2


def test_one_viewers_queue_does_not_hold_back_another_and_what_a_leaver_left_is_counted() -> None:
    s = sessions()
    player = viewer(s, 1)
    listener = viewer(s, 2, KickFlags.AUDIO)
    s.send_video(frame(key=True), idr=True, now=1.0)
    s.datagrams_to_send(1.0)
    s.send_audio(MediaPacket(bytes(200), 1_000, StreamType.AUDIO), 1.01)
    out = [d.address for d in s.datagrams_to_send(1.01)]
    # Both hear the audio at once, the listener without waiting behind the player's frame.
    assert out[:2] == [player, listener] and set(out[2:]) <= {player}
    conn = s.connection(1)
    assert conn is not None and conn.paced is not None
    conn.paced.max_queued_bytes = 0
    s.send_video(frame(), idr=False, now=1.02)
    s.close(1)
    assert s.media_counters["queue_dropped"] == block_count(50 * 1024)
    assert all(d.address != player for d in s.datagrams_to_send(5.0))


def test_repair_is_counted_once_per_viewer_with_its_size_on_the_wire() -> None:
    s = sessions(fec="reference")
    viewer(s, 1)
    viewer(s, 2)
    s.send_video(frame(key=True), idr=True, now=1.0)
    sent = drain(s, 1.0, 3.0)
    repair = [d for _, _, d in sent if MediaHeader.parse(d).fec]
    assert len(sent) - len(repair) == 2 * block_count(50 * 1024) and repair
    assert s.media_counters["repair_datagrams_sent"] == len(repair)
    assert s.media_counters["repair_bytes_sent"] == sum(map(len, repair))
