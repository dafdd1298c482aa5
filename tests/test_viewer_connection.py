"""The viewer's pure connection against the host's pure sessions, in memory with a fake clock.

What the decoder and the audio player get, and when the viewer asks for a key frame; plus the small
decisions around it (reconnecting, concealment) and the host's encode schedule and pacing choice.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from pyrofling.core.host.congestion import RateConfig
from pyrofling.core.host.encode_schedule import EncodeSchedule
from pyrofling.core.host.keyframes import KeyframePolicy
from pyrofling.core.host.pacer import TokenBucketPacer, UnpacedPacer
from pyrofling.core.host.packetizer import MediaPacket, Packetizer
from pyrofling.core.host.sessions import HostSessions, SendControl
from pyrofling.core.viewer.concealment import Concealment
from pyrofling.core.viewer.connection import (
    AudioLost,
    ControlToHost,
    DatagramToHost,
    DecodeVideo,
    PlayAudio,
    Streaming,
    ViewerConnection,
)
from pyrofling.core.viewer.session import ViewerSessionConfig
from pyrofling.fec.planner import make_planner
from pyrofling.server.config import HostConfig
from pyrofling.wire import (
    CodecParameters,
    ControlFramer,
    ExtensionFeature,
    KickFlags,
    LossReport,
    Nack,
    RateDecider,
    RateFeedback,
    RequestKeyframe,
    StreamRate,
    StreamType,
    parse_control,
    parse_media_datagram,
    parse_udp_control,
)

PARAMS = CodecParameters(1, 1, 3, 60, 1, 320, 240, 2, 48_000)
UDP = ("127.0.0.1", 40000)
IDR = b"\x00\x00\x00\x01\x65" + bytes(3000)  # an IDR slice: whole on its own
P_FRAME = b"\x00\x00\x00\x01\x41" + bytes(800)


class Pair:
    """One viewer connection and the host's sessions, wired through their outputs as the two shells would."""

    def __init__(
        self,
        flags: KickFlags = KickFlags.VIDEO | KickFlags.AUDIO,
        *,
        extensions: ExtensionFeature | None = None,
        make_packetizer: Callable[[int], Packetizer] = Packetizer.for_cookie,
        rate: RateConfig | None = None,
        early_part_bytes: int | None = None,
    ) -> None:
        self.keyframes = KeyframePolicy()
        self.hs = HostSessions(make_packetizer=make_packetizer, keyframes=self.keyframes, rate=rate)
        self.hs.codec_parameters = PARAMS
        self.hs.open(1, ("127.0.0.1", 50000), 0.0, cookie=0xC0FFEE)
        config = ViewerSessionConfig(flags=flags)
        if extensions is not None:
            config = replace(config, extensions=extensions)
        self.conn = ViewerConnection(config, early_part_bytes=early_part_bytes)
        self.framer = ControlFramer()
        self.to_host: list[Any] = []  # control messages the viewer sent once streaming
        self.outputs: list[Any] = []  # everything else the viewer's connection said
        self.udp_to_host: list[bytes] = []  # every datagram the viewer sent
        self.drop_resends = False  # the network loses what the host sends again
        self.resends_to_lose = 0  # or only this many of them, the first ones
        self._perform(self.conn.start(0.0), 0.0)

    def _perform(self, outputs: list[Any], now: float) -> None:
        pending = list(outputs)
        while pending:
            out = pending.pop(0)
            if isinstance(out, ControlToHost):
                for msg in self.framer.feed(out.data):
                    if self.conn.streaming:
                        self.to_host.append(msg)
                    for reply in self.hs.control(1, msg, now):
                        if isinstance(reply, SendControl):
                            pending += self.conn.control_received(parse_control(reply.data), now)
            elif isinstance(out, DatagramToHost):
                self.udp_to_host.append(out.data)
                self.hs.datagram(UDP, out.data, now)
                for reply in self.hs.datagrams_to_send(now):
                    if reply.resend and (self.drop_resends or self.resends_to_lose > 0):
                        self.resends_to_lose -= 1
                        continue
                    pending += self.conn.datagram_received(reply.data, now)
            else:
                self.outputs.append(out)

    def media(self, data: bytes, pts_us: int, now: float, *, stream: StreamType = StreamType.VIDEO) -> list[bytes]:
        """The datagrams the host sends this viewer for one packet."""
        remote = self.hs.connection(1)
        assert remote is not None and remote.packetizer is not None
        key = stream == StreamType.VIDEO and data[4] & 0x1F == 5
        return remote.packetizer.packetize(MediaPacket(data, pts_us, stream, key_frame=key))

    def receive(self, datagrams: list[bytes], now: float) -> list[Any]:
        before = len(self.outputs)
        for d in datagrams:
            self._perform(self.conn.datagram_received(d, now), now)
        return self.outputs[before:]


def streaming_pair() -> Pair:
    pair = Pair()
    assert pair.conn.streaming and any(isinstance(o, Streaming) for o in pair.outputs)
    return pair


def test_nothing_reaches_the_decoder_before_the_first_key_frame_then_every_picture_does() -> None:
    pair = streaming_pair()
    assert pair.receive(pair.media(P_FRAME, 1_000, 0.1), 0.1) == []  # no reference yet: not worth decoding
    [idr] = [o for o in pair.receive(pair.media(IDR, 17_000, 0.12), 0.12) if isinstance(o, DecodeVideo)]
    assert idr.whole and idr.pts_us == 17_000 and idr.data == IDR
    [p] = pair.receive(pair.media(P_FRAME, 34_000, 0.13), 0.13)
    assert isinstance(p, DecodeVideo) and p.whole
    counts = pair.conn.counters()
    assert counts["packets_video"] == 3 and counts["packets_lost_video"] == 0 and counts["datagrams"] > 0


def test_a_packet_lost_for_good_marks_pictures_damaged_and_asks_for_a_key_frame() -> None:
    pair = Pair(extensions=ExtensionFeature.KEYFRAME_REQUEST)  # FEC only: no resends
    pair.receive(pair.media(IDR, 1_000, 0.1), 0.1)
    lost = pair.media(P_FRAME, 17_000, 0.12)  # never arrives, nor any of its repair blocks
    assert lost
    pair.receive(pair.media(P_FRAME, 34_000, 0.13), 0.13)
    pair.receive(pair.media(P_FRAME, 51_000, 0.15), 0.15)
    # The gap waits for reordering a few ms, then the newer packets go on, damaged until a key frame.
    pair._perform(pair.conn.handle_timer(0.2), 0.2)
    decoded = [o for o in pair.outputs if isinstance(o, DecodeVideo)]
    assert [d.whole for d in decoded] == [True, False, False]
    assert any(isinstance(m, RequestKeyframe) for m in pair.to_host)
    assert pair.keyframes.pending  # the host will force one
    # Asked when the loss was known (0.15 s), and again 50 ms later with no key frame yet (the IDR may be lost).
    assert pair.conn.counters()["packets_lost_video"] == 1 and pair.conn.counters()["keyframe_requests"] == 2
    # The key frame makes pictures whole again.
    [healed] = [o for o in pair.receive(pair.media(IDR, 68_000, 0.3), 0.3) if isinstance(o, DecodeVideo)]
    assert healed.whole


def test_a_lost_packet_is_asked_for_whole_and_resent_so_no_key_frame_is_needed() -> None:
    pair = streaming_pair()
    pair.receive(pair.media(IDR, 1_000, 0.1), 0.1)
    pair.media(P_FRAME, 17_000, 0.117)  # every datagram of it lost
    pair.receive(pair.media(P_FRAME, 34_000, 0.134), 0.134)  # the gap shows: NACK, resent at once
    nacks = [m for m in map(parse_udp_control, pair.udp_to_host) if isinstance(m, Nack)]
    assert nacks and nacks[0].whole and nacks[0].packet_seq == (0xC0FFEE + 1) & 0x3FFF
    decoded = [o for o in pair.outputs if isinstance(o, DecodeVideo)]
    assert [(d.pts_us, d.whole) for d in decoded] == [(1_000, True), (17_000, True), (34_000, True)]
    counts = pair.conn.counters()
    assert counts["packets_lost_video"] == 0 and counts["keyframe_requests"] == 0
    assert counts["packets_rebuilt_by_resend"] == 1 and pair.keyframes.requests_for_loss == 0
    assert pair.hs.connection(1).nacks == 1  # type: ignore[union-attr]


def test_a_block_whose_first_five_resends_are_lost_comes_on_the_sixth_and_no_key_frame_is_asked() -> None:
    # A link's bad spell outlasts several resends of one block (few datagrams pass between them); the viewer keeps
    # asking, and the host keeps answering (two copies at once after the first), for as long as the reassembler
    # waits for it, instead of giving the frame up for a key frame.
    pair = streaming_pair()
    pair.receive(pair.media(IDR, 1_000, 0.1), 0.1)
    frame = pair.media(b"\x00\x00\x00\x01\x41" + bytes(3000), 17_000, 0.117)  # three datagrams
    pair.resends_to_lose = 1 + 2 * 4  # the first resend, then four pairs of copies
    pair.receive(frame[:-1], 0.117)  # its last datagram lost
    nacks_at: list[float] = []
    for i in range(1, 5):  # the next frames keep coming at 60 fps, the timers fire in virtual time between them
        if i > 1:
            pair.receive(pair.media(P_FRAME, 1_000 + 16_667 * i, 0.1 + i / 60), 0.1 + i / 60)
        while (due := pair.conn.next_timer()) is not None and due < 0.1 + (i + 1) / 60:
            sent = len(pair.udp_to_host)
            pair._perform(pair.conn.handle_timer(due), due)
            nacks_at += [due for m in map(parse_udp_control, pair.udp_to_host[sent:]) if isinstance(m, Nack)]
    assert len(nacks_at) == 6 and pair.resends_to_lose == 0  # five resends lost, the sixth arrived
    assert nacks_at[-1] - 0.117 < 0.04  # while the next frame still waits behind it
    decoded = [o for o in pair.outputs if isinstance(o, DecodeVideo)]
    assert [(d.pts_us, d.whole) for d in decoded] == [(1_000, True), (17_000, True)] + [
        (1_000 + 16_667 * i, True) for i in range(2, 5)
    ]
    counts = pair.conn.counters()
    assert counts["packets_lost_video"] == 0 and counts["keyframe_requests"] == 0
    assert counts["packets_rebuilt_by_resend"] == 1 and pair.keyframes.requests_for_loss == 0


def with_fec(cookie: int) -> Packetizer:
    return Packetizer.for_cookie(cookie, video_planner=make_planner("reference"))


def test_a_nack_names_only_the_blocks_reed_solomon_cannot_cover() -> None:
    pair = Pair(make_packetizer=with_fec)
    frame = bytes(range(256)) * 40  # 10 data blocks, 3 repair blocks (the reference's count)
    datagrams = pair.media(frame, 1_000, 0.1)
    headers = [parse_media_datagram(d)[0] for d in datagrams]
    assert [h.fec for h in headers] == [False] * 10 + [True] * 3
    assert (headers[-1].num_xor_blocks_even, headers[-1].num_xor_blocks_odd) == (0, 0)  # MDS_FEC negotiated
    pair.drop_resends = True
    # Five data blocks lost, all three repair blocks arrive: two blocks short.
    pair.receive([d for i, d in enumerate(datagrams) if i not in (1, 2, 4, 7, 8)], 0.1)
    [nack] = [m for m in map(parse_udp_control, pair.udp_to_host) if isinstance(m, Nack)]
    assert nack.blocks() == [1, 2] and not nack.whole
    # The resends were lost too: asked again after the retry time, never after the give-up time.
    pair._perform(pair.conn.handle_timer(0.106), 0.106)
    assert sum(isinstance(m, Nack) for m in map(parse_udp_control, pair.udp_to_host)) == 2
    pair._perform(pair.conn.handle_timer(0.3), 0.3)
    assert sum(isinstance(m, Nack) for m in map(parse_udp_control, pair.udp_to_host)) == 2
    assert pair.conn.counters()["video_datagrams_lost"] == 5


def test_loss_reports_raise_the_viewers_repair_within_half_a_second_and_it_decays() -> None:
    def adaptive(cookie: int) -> Packetizer:
        return Packetizer.for_cookie(cookie, video_planner=make_planner("adaptive"))

    pair = Pair(make_packetizer=adaptive)
    remote = pair.hs.connection(1)
    assert remote is not None and remote.packetizer is not None
    planner = remote.packetizer.video_planner
    quiet = planner.plan(20).repair_blocks
    # Five reports of 5 % loss in half a second: the repair count has risen.
    for i in range(5):
        report = LossReport(i + 1, 1000, 50, 0, 0, 0, 10, 3)
        pair._perform([DatagramToHost(bytes(report))], 0.1 * i)
    assert planner.plan(20).repair_blocks > quiet + 1
    assert remote.loss_reports == 5 and remote.reported_loss > 0.03
    # And it decays once the loss goes away.
    high = planner.plan(20).repair_blocks
    for i in range(30):
        pair._perform([DatagramToHost(bytes(LossReport(10 + i, 1000, 0, 0, 0, 0, 0, 0)))], 1 + 0.1 * i)
    assert planner.plan(20).repair_blocks < high


def test_the_viewer_reports_its_losses_several_times_a_second() -> None:
    pair = streaming_pair()
    pair.drop_resends = True
    for i in range(12):
        datagrams = pair.media(P_FRAME if i else IDR, 1_000 + 16_667 * i, 0.1 + i / 60)
        pair.receive(datagrams[1:] if i % 3 == 0 else datagrams, 0.1 + i / 60)
        pair._perform(pair.conn.handle_timer(0.1 + i / 60 + 0.001), 0.1 + i / 60 + 0.001)
    reports = [m for m in map(parse_udp_control, pair.udp_to_host) if isinstance(m, LossReport)]
    assert len(reports) >= 1 and sum(r.datagrams_lost for r in reports) >= 1
    assert pair.conn.counters()["video_datagrams_lost"] == 4  # the first datagram of every third packet
    assert all(r.datagrams_lost <= r.datagrams_expected for r in reports)


def test_audio_goes_to_the_player_and_a_lost_chunk_is_concealed() -> None:
    pair = streaming_pair()
    chunk = bytes(960)
    [first] = pair.receive(pair.media(chunk, 1_000, 0.1, stream=StreamType.AUDIO), 0.1)
    assert isinstance(first, PlayAudio) and first.data == chunk
    pair.media(chunk, 6_000, 0.105, stream=StreamType.AUDIO)  # lost
    out = pair.receive(pair.media(chunk, 11_000, 0.11, stream=StreamType.AUDIO), 0.11)
    out += pair.conn.handle_timer(0.2)
    # The loss is reported before the chunk after it is played (the player conceals in order).
    assert [type(o) for o in out if isinstance(o, PlayAudio | AudioLost)] == [AudioLost, PlayAudio]
    assert sum(o.count for o in out if isinstance(o, AudioLost)) == 1
    assert pair.conn.counters()["packets_audio"] == 2


def test_a_full_decode_queue_counts_as_a_loss() -> None:
    pair = streaming_pair()
    pair.receive(pair.media(IDR, 1_000, 0.1), 0.1)
    pair._perform(pair.conn.decode_queue_full(0.11), 0.11)
    assert pair.conn.counters()["decode_queue_overflows"] == 1
    assert any(isinstance(m, RequestKeyframe) for m in pair.to_host)


def test_timers_merge_the_session_and_the_reassembler() -> None:
    pair = streaming_pair()
    session_due = pair.conn.session.next_timer()
    assert session_due is not None and pair.conn.next_timer() == session_due  # nothing in flight
    datagrams = pair.media(IDR, 1_000, 0.1)
    pair.receive(datagrams[:1], 0.1)  # an incomplete packet: its deadline is the reassembler's
    reassembly_due = pair.conn.reassembler.next_timer()
    assert reassembly_due is not None
    assert pair.conn.next_timer() == min(session_due, reassembly_due)


def test_a_gamepad_only_client_gets_no_media_outputs() -> None:
    pair = Pair(flags=KickFlags.GAMEPAD)
    assert pair.conn.streaming
    message = pair.conn.gamepad_state(b"\x01\x02")
    assert isinstance(message, DatagramToHost) and message.data == b"\x01\x02"  # plain: not sealed


def test_the_viewer_reports_arrivals_every_50_ms_once_granted_and_hears_the_bitrate() -> None:
    pair = Pair(extensions=ExtensionFeature.RATE_CONTROL, rate=RateConfig(ceiling_bps=10e6, floor_bps=1e6))
    assert pair.conn.arrivals.active
    host = pair.hs.connection(1)
    assert host is not None
    for i in range(12):  # 200 ms of frames, 60 fps
        now = 0.1 + i / 60
        pair.receive(pair.media(IDR if i == 0 else P_FRAME, int(now * 1e6), now), now)
        pair._perform(pair.conn.handle_timer(now), now)
    feedback = [m for m in map(parse_udp_control, pair.udp_to_host) if isinstance(m, RateFeedback)]
    assert 3 <= len(feedback) <= 4 and host.rate_feedbacks == len(feedback)
    assert all(m.samples and m.bytes_received > 0 for m in feedback)
    assert [m.seq for m in feedback] == list(range(len(feedback)))
    # The host's word on the bitrate is kept for the statistics and the HUD.
    pair.conn.control_received(StreamRate(4000, 10_000, 3900, RateDecider.YOUR_LINK), 0.5)
    assert pair.conn.session.stream_rate == StreamRate(4000, 10_000, 3900, RateDecider.YOUR_LINK)


def test_a_viewer_not_granted_rate_control_sends_no_feedback() -> None:
    pair = Pair(extensions=ExtensionFeature.LOSS_REPORTS)
    assert not pair.conn.arrivals.active
    for i in range(12):
        now = 0.1 + i / 60
        pair.receive(pair.media(IDR if i == 0 else P_FRAME, int(now * 1e6), now), now)
    assert not any(isinstance(parse_udp_control(d), RateFeedback) for d in pair.udp_to_host)
    assert pair.conn.arrivals.poll(10.0) is None and not pair.conn.arrivals._touched  # and keeps nothing
    pair.conn.control_received(StreamRate(4000, 10_000, 3900, RateDecider.YOUR_LINK), 0.5)
    assert pair.conn.session.stream_rate is None


def test_concealment_waits_for_a_whole_picture_and_bounds_a_freeze() -> None:
    c = Concealment(conceal_after_s=0.1)
    assert not c.show(whole=False, connection=1, now=0.0)  # nothing whole shown yet: nothing to conceal
    assert c.show(whole=True, connection=1, now=0.01)
    c.shown(0.01)
    assert not c.show(whole=False, connection=1, now=0.05)  # still recent: wait for the key frame
    assert c.show(whole=False, connection=1, now=0.12)  # still for 110 ms: show what the decoder has
    c.shown(0.12)
    assert not c.show(whole=False, connection=2, now=0.5)  # a new connection starts from a whole picture
    c.shown(0.5)  # (a whole one, say) after 380 ms of stillness: one freeze over 250 ms
    assert c.freezes == 1 and c.max_still_s == pytest.approx(0.38)
    assert not Concealment(conceal_after_s=None).show(whole=False, connection=1, now=9.0)


def test_frames_never_shown_are_counted_on_the_stream_per_connection() -> None:
    c = Concealment()
    c.shown(0.0, connection=1, seq=16380)
    c.shown(0.1, connection=1, seq=16383)  # two frames lost or held back
    c.shown(0.2, connection=1, seq=5)  # across the 14-bit wrap: 0..4 never shown, five
    assert c.max_unshown_frames == 5
    c.shown(0.3, connection=2, seq=9000)  # a new connection's numbers start afresh
    c.shown(0.4, connection=2, seq=9001)
    assert c.max_unshown_frames == 5
    c.shown(0.5, connection=2, seq=9009)
    assert c.max_unshown_frames == 7


def test_a_picture_never_replaced_is_the_longest_freeze() -> None:
    """One frame and then nothing (a link narrower than the stream): the freeze is measured while it lasts."""
    c = Concealment()
    assert c.still_s(5.0) == 0.0  # nothing shown yet
    c.shown(1.0)
    assert c.max_still_s == 0.0
    assert c.still_s(20.0) == pytest.approx(19.0)
    c.stream_ended(21.0)  # and when the stream ends, that freeze stays in the statistics
    assert c.max_still_s == pytest.approx(20.0)


def test_heartbeat_encoding_skips_a_beat_while_the_encoder_is_busy() -> None:
    s = EncodeSchedule(1 / 60)
    assert s.heartbeat(0.0)
    s.started(0.0)
    assert not s.heartbeat(1 / 60) and s.skipped == 1  # the frame is still encoding: that beat stalls
    s.finished()
    assert s.heartbeat(2 / 60, missed_frames=2) and s.skipped == 3  # beats the host slept through
    assert not s.presented(2 / 60, new_image=True)  # presents wait for the heartbeat in this mode


def test_immediate_encoding_takes_presents_at_most_twice_a_period_and_repeats_a_stalled_game() -> None:
    period = 1 / 60
    s = EncodeSchedule(period, immediate=True)
    assert s.presented(0.0, new_image=True)
    s.started(0.0)
    assert not s.presented(0.001, new_image=True)  # encoding
    s.finished()
    assert not s.presented(0.3 * period, new_image=True)  # too soon after the last: it waits half a period
    assert s.next_timer() == pytest.approx(0.5 * period)
    assert s.heartbeat(0.3 * period, new_image=True)  # ...unless the heartbeat comes first, which takes it
    s.started(0.3 * period)
    assert s.next_timer() is None
    s.finished()
    assert not s.heartbeat(period, new_image=False)  # nothing new, recently encoded: no repeat yet
    assert s.heartbeat(2 * period, new_image=False)  # a stalled game: repeat the picture
    assert not s.presented(3 * period, new_image=False)


def test_after_a_late_present_a_game_paced_by_the_heartbeat_is_not_held_a_frame_behind() -> None:
    # A game paced by the heartbeat (FrameComplete) presents 2 ms after each one; its frame 10 comes late,
    # 0.9 of a period after its heartbeat, so frame 11 comes too soon after frame 10's encode.  Encodes take
    # 4 ms.  Events in virtual time: (time, order, kind).
    period, late, encode_s = 1 / 60, 10, 0.004
    s = EncodeSchedule(period, immediate=True)
    events: list[tuple[float, int, str]] = []
    for k in range(40):
        heapq.heappush(events, (k * period, 0, "heartbeat"))
        heapq.heappush(events, (k * period + (0.9 * period if k == late else 0.002), 1, "present"))
    waiting: list[float] = []  # the newest present not yet encoded (the game's FIFO holds one)
    waits: list[float] = []  # present -> encode start, per present encoded

    def start(now: float) -> None:
        if waiting:
            waits.append(now - waiting.pop())
        s.started(now)
        heapq.heappush(events, (now + encode_s, 2, "finished"))

    def ask(now: float) -> None:  # what the shell does on a present, a finished encode or its timer
        if s.presented(now, new_image=bool(waiting)):
            start(now)
        elif (due := s.next_timer()) is not None:
            heapq.heappush(events, (due, 3, "timer"))

    while events:
        now, _, kind = heapq.heappop(events)
        if kind == "heartbeat" and s.heartbeat(now, new_image=bool(waiting)):
            start(now)
        elif kind == "present":
            waiting[:] = [now]
            ask(now)
        elif kind == "finished":
            s.finished()
            ask(now)
        elif kind == "timer":
            ask(now)
    assert len(waits) == 40
    # (The first present came 2 ms after the start's repeat of the picture, and waited as frame 11 does.)
    assert waits[0] == pytest.approx(0.5 * period - 0.002)
    assert all(w == 0 for w in waits[1 : late + 1])
    # Frame 11 waits until half a period after frame 10's encode began (0.4 of a period less its 2 ms), not
    # for the next heartbeat (a frame less 2 ms); from frame 12 on every present is encoded at once again
    # (waiting for the heartbeat, every later present came 2 ms after the one before was encoded, and waited
    # a frame too).
    assert waits[late + 1] == pytest.approx(0.4 * period - 0.002)
    assert all(w == 0 for w in waits[late + 2 :])


@pytest.mark.parametrize(("mbits", "kind"), [(0.0, UnpacedPacer), (200.0, TokenBucketPacer)])
def test_the_host_paces_every_viewer_through_one_path(mbits: float, kind: type) -> None:
    pacer = HostConfig(max_rate_mbits=mbits).make_pacer()
    assert isinstance(pacer, kind)
    if isinstance(pacer, TokenBucketPacer):
        assert pacer.rate_bytes_per_s == pytest.approx(200e6 / 8)
