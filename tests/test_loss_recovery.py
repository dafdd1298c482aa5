"""Recovery between pyrofling peers (protocol.md §7.8, §7.9): Reed–Solomon repair, the host's resends, the
viewer's loss tracker.  Pure, with a fake clock."""

from __future__ import annotations

import random

import pytest

from pyrofling.core.host.keyframes import KeyframePolicy
from pyrofling.core.host.packetizer import MediaPacket, Packetizer
from pyrofling.core.host.resend import RetainedPackets
from pyrofling.core.host.sessions import HostSessions
from pyrofling.core.viewer.loss_tracker import TRACKED_PACKETS, LossTracker
from pyrofling.fec import FecError, FecPlan, split_data
from pyrofling.fec.mds import MdsFrameDecoder, encode_mds_repair, mds_plan
from pyrofling.fec.planner import make_planner
from pyrofling.seqnum import seq14_delta
from pyrofling.wire import (
    CodecParameters,
    Cookie,
    ExtensionFeature,
    Extensions,
    Hello,
    Kick,
    KickFlags,
    LossReport,
    MediaHeader,
    Nack,
    StreamType,
)

# -- Reed–Solomon -------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 1024, 1025, 20 * 1024 - 7, 40 * 1024, 200 * 1024 + 5, 700 * 1024])
def test_any_n_blocks_of_each_group_rebuild_the_frame_byte_exact(size: int) -> None:
    rng = random.Random(size)
    frame = rng.randbytes(size)
    n = -(-size // 1024)
    f = n // 4 + 1
    repair = encode_mds_repair(frame, f)
    data = split_data(frame)
    for _trial in range(5):
        dec = MdsFrameDecoder(size, f)
        groups = dec.groups
        # Lose exactly as many blocks per group as the group has repair blocks: always enough.
        for g in range(groups):
            members = [("d", i) for i in range(g, n, groups)] + [("r", j) for j in range(g, f, groups)]
            keep = rng.sample(members, len(range(g, n, groups)))
            for kind, i in keep:
                if kind == "d":
                    dec.add_data(i, data[i])
                else:
                    dec.add_repair(i, repair[i])
        assert dec.complete and dec.frame() == frame


def test_one_block_short_in_a_group_is_not_complete_and_wanted_names_it() -> None:
    frame = bytes(range(256)) * 40  # 10 blocks, one group
    repair = encode_mds_repair(frame, 3)
    data = split_data(frame)
    dec = MdsFrameDecoder(len(frame), 3)
    for i in range(10):
        if i not in (2, 5, 6, 9):
            dec.add_data(i, data[i])
    dec.add_repair(0, repair[0])
    dec.add_repair(2, repair[2])
    assert not dec.complete and dec.wanted() == [2, 5]  # two repair blocks cover two of the four
    dec.add_data(5, data[5])
    assert not dec.complete and dec.wanted() == [2]
    assert dec.add_repair(1, repair[1]) and dec.frame() == frame and dec.wanted() == []


def test_mds_plans_are_checked_like_any_other() -> None:
    mds_plan(5).check(20)
    FecPlan(246, 0, 0).check(10)  # 10 + 246 blocks fit one code
    with pytest.raises(FecError):
        FecPlan(247, 0, 0).check(10)  # 257 blocks do not
    with pytest.raises(FecError):
        MdsFrameDecoder(10 * 1024, 2).add_repair(2, bytes(1024))
    with pytest.raises(FecError):
        MdsFrameDecoder(10 * 1024, 2).add_repair(0, bytes(1000))


# -- the host's resends ---------------------------------------------------------------------------


def test_resends_are_bounded_by_the_viewers_own_stream() -> None:
    kept = RetainedPackets(packets=4, budget_bytes=0.0)
    datagrams = [bytes([i]) * 1048 for i in range(20)]
    kept.keep(StreamType.VIDEO, 7, datagrams)  # adds half its size to the budget
    budget = kept.budget_bytes
    assert budget == pytest.approx(0.5 * 20 * 1048)
    # A viewer that asks for everything, over and over, gets at most the budget.
    total = sum(len(d) for _ in range(10) for d in kept.resend(Nack.whole_packet(7, 0)))
    assert total <= budget and kept.refused_budget > 0
    assert kept.resend(Nack.whole_packet(99, 0)) == [] and kept.refused_unknown == 1


def test_each_datagram_is_resent_a_few_times_at_most_and_old_packets_are_forgotten() -> None:
    kept = RetainedPackets(packets=2, max_resends=2, budget_bytes=1e9, max_budget_bytes=10**9)
    for seq in range(3):
        kept.keep(StreamType.VIDEO, seq, [b"x" * 100, b"y" * 100])
    assert kept.resend(Nack.for_blocks(0, 0, [0])[0]) == []  # only the last two packets are kept
    ask = Nack.for_blocks(2, 0, [1, 5])[0]
    assert kept.resend(ask) == [b"y" * 100] and kept.refused_unknown == 2  # block 5 does not exist
    assert kept.resend(ask) == [b"y" * 100] * 2  # asked again: the resend was lost, two copies this time
    assert kept.resend(ask) == [] and kept.refused_repeats == 1
    assert kept.resent == 3


PARAMS = CodecParameters(1, 1, 0, 60, 1, 320, 240, 0, 0)


def _host_with_viewer(features: ExtensionFeature, cookie: int = 0xABC) -> tuple[HostSessions, tuple[str, int]]:
    hs = HostSessions(make_packetizer=lambda c: Packetizer.for_cookie(c), keyframes=KeyframePolicy())
    hs.codec_parameters = PARAMS
    address = ("127.0.0.1", 40000 + cookie % 1000)
    hs.open(1, ("127.0.0.1", 50000), 0.0, cookie=cookie)
    hs.control(1, Hello(), 0.0)
    hs.control(1, Extensions(1, int(features)), 0.0)
    hs.datagram(address, bytes(Cookie(cookie)), 0.0)
    hs.control(1, Kick(KickFlags.VIDEO), 0.0)
    return hs, address


def test_the_host_resends_only_to_a_viewer_that_negotiated_nack() -> None:
    hs, address = _host_with_viewer(ExtensionFeature.KEYFRAME_REQUEST | ExtensionFeature.NACK)
    conn = hs.connection(1)
    assert conn is not None and conn.packetizer is not None and conn.packetizer.retained is not None
    datagrams = conn.packetizer.packetize(MediaPacket(bytes(3000), 1_000))
    assert hs.datagram(address, bytes(Nack.for_blocks(0xABC & 0x3FFF, 0, [1])[0]), 0.01) == []
    out = hs.datagrams_to_send(0.01)
    assert [o.data for o in out] == [datagrams[1]] and all(o.resend for o in out) and out[0].address == address
    assert hs.media_counters["resent_datagrams"] == 1

    plain, plain_address = _host_with_viewer(ExtensionFeature.KEYFRAME_REQUEST, cookie=0xDEF)
    assert plain.datagram(plain_address, bytes(Nack.whole_packet(0, 0)), 0.01) == []
    assert plain.discarded["nack_not_negotiated"] == 1
    plain.datagram(plain_address, bytes(LossReport(1, 100, 100, 0, 0, 0, 1, 100)), 0.01)
    assert plain.discarded["loss_report_not_negotiated"] == 1


def test_a_viewer_that_lies_in_its_reports_changes_only_its_own_repair() -> None:
    def adaptive(cookie: int) -> Packetizer:
        return Packetizer.for_cookie(cookie, video_planner=make_planner("adaptive"))

    hs = HostSessions(make_packetizer=adaptive, keyframes=KeyframePolicy())
    hs.codec_parameters = PARAMS
    features = int(ExtensionFeature.LOSS_REPORTS)
    for conn_id, cookie in ((1, 0x111), (2, 0x222)):
        hs.open(conn_id, ("127.0.0.1", 50000 + conn_id), 0.0, cookie=cookie)
        hs.control(conn_id, Hello(), 0.0)
        hs.control(conn_id, Extensions(1, features), 0.0)
        hs.datagram(("127.0.0.1", 40000 + conn_id), bytes(Cookie(cookie)), 0.0)
        hs.control(conn_id, Kick(KickFlags.VIDEO), 0.0)
    liar, honest = hs.connection(1), hs.connection(2)
    assert liar is not None and honest is not None and liar.packetizer and honest.packetizer
    before = honest.packetizer.video_planner.plan(30)
    for i in range(50):  # "everything is lost", fifty times
        hs.datagram(("127.0.0.1", 40001), bytes(LossReport(i, 1000, 1000, 0, 0, 0, 1, 1000)), 0.01 * i)
    assert honest.packetizer.video_planner.plan(30) == before
    lied = liar.packetizer.video_planner.plan(30)
    assert before.repair_blocks < lied.repair_blocks <= 30  # capped at the planner's maximum: one per data block
    assert hs.keyframes.requests_for_loss == 0  # reports never force key frames on everyone


# -- the viewer's loss tracker -------------------------------------------------------------------


def _header(seq: int, index: int, *, fec: bool = False, data_blocks: int = 4, repair: int = 2) -> MediaHeader:
    begin = index == 0 and not fec
    return MediaHeader(1000 + seq, 0, data_blocks * 1024, repair, 0, 0, seq, index, fec=fec, begin=begin)


def test_the_tracker_counts_lost_datagrams_and_bursts_in_send_order() -> None:
    t = LossTracker(nack=False, reports=True)
    for i in (0, 3):  # data 1 and 2 lost: one burst of two
        t.datagram(_header(1, i), 0.0)
    t.datagram(_header(1, 1, fec=True), 0.0)  # repair 0 lost, repair 1 arrived (the last: closes the packet)
    assert t.total.datagrams_expected == 6 and t.total.datagrams_lost == 3
    assert t.total.bursts == 2 and t.total.longest_burst == 2
    [report] = t.poll(0.2, lambda seq: [])
    assert isinstance(report, LossReport) and report.datagrams_lost == 3 and report.bursts == 2


def test_a_packet_that_never_came_is_asked_for_whole_until_it_is_too_old() -> None:
    t = LossTracker(nack=True, reports=False, retry_s=0.004, give_up_s=0.05)
    t.datagram(_header(1, 0), 0.0)
    for i in range(1, 4):
        t.datagram(_header(1, i), 0.0)
    assert t.datagram(_header(3, 0), 0.02)  # packet 2 never came: its first transmission is over
    [nack] = t.poll(0.02, lambda seq: None)
    assert isinstance(nack, Nack) and nack.whole and nack.packet_seq == 2
    assert t.poll(0.021, lambda seq: None) == []  # not before the retry time
    assert t.next_timer() == pytest.approx(0.023)  # packet 3's tail wait comes first, then the retry at 0.024
    again = [m for m in t.poll(0.025, lambda seq: None) if isinstance(m, Nack)]
    assert len(again) == 1
    assert [m for m in t.poll(0.2, lambda seq: None) if isinstance(m, Nack)] == []  # past give_up_s
    t.packet_ready(2, recovered=False)
    assert t.total.rebuilt_by_resend == 1


def test_a_tail_lost_packet_is_noticed_by_the_timer() -> None:
    t = LossTracker(nack=True, reports=False, tail_wait_s=0.003)
    t.datagram(_header(5, 0), 0.0)
    t.datagram(_header(5, 1), 0.0)  # the rest never comes and no newer packet either
    assert t.next_timer() == pytest.approx(0.003)
    [nack] = t.poll(0.003, lambda seq: [2, 3])
    assert isinstance(nack, Nack) and nack.blocks() == [2, 3]
    assert t.total.datagrams_lost == 4


def test_the_tracker_keeps_the_last_64_packets_in_order_and_a_bounded_few_more_when_forged_ones_jump_about() -> None:
    t = LossTracker(nack=True, reports=True)
    for seq in range(20_000):  # wrapping past 16383 twice
        t.datagram(_header(seq & 0x3FFF, 0), seq * 0.001)
    newest = 19_999 & 0x3FFF
    assert sorted(seq14_delta(newest, s) for s in t._packets) == list(range(TRACKED_PACKETS))
    forged = LossTracker(nack=True, reports=True)
    rng = random.Random(7)
    most = 0
    for i in range(20_000):
        forged.datagram(_header(rng.randrange(1 << 14), 0), i * 0.001)
        most = max(most, len(forged._packets))
    assert most <= 2 * TRACKED_PACKETS + 1


def test_a_forged_sequence_far_ahead_makes_no_storm_of_nacks() -> None:
    t = LossTracker(nack=True, reports=False)
    t.datagram(_header(1, 0), 0.0)
    t.datagram(_header(3000, 0), 0.001)
    assert [m for m in t.poll(0.001, lambda seq: None) if isinstance(m, Nack)] == []


def test_audio_repair_goes_only_to_a_reporting_viewer_while_it_reports_loss() -> None:
    def with_audio_fec(cookie: int) -> Packetizer:
        return Packetizer.for_cookie(cookie, audio_planner=make_planner("reference"))

    def audio_repairs(hs: HostSessions, n: int = 3) -> int:
        conn = hs.connection(1)
        assert conn is not None and conn.packetizer is not None
        out = []
        for i in range(n):
            out += conn.packetizer.packetize(MediaPacket(bytes(960), 5_000 * i, StreamType.AUDIO))
        return sum(1 for d in out if MediaHeader.parse(d).fec)

    for features, lossy in ((ExtensionFeature.LOSS_REPORTS, True), (ExtensionFeature.NONE, False)):
        hs = HostSessions(make_packetizer=with_audio_fec, keyframes=KeyframePolicy())
        hs.codec_parameters = PARAMS
        hs.open(1, ("127.0.0.1", 50000), 0.0, cookie=0x77)
        hs.control(1, Hello(), 0.0)
        if features:
            hs.control(1, Extensions(1, int(features)), 0.0)
        hs.datagram(("127.0.0.1", 40000), bytes(Cookie(0x77)), 0.0)
        hs.control(1, Kick(KickFlags.AUDIO), 0.0)
        assert audio_repairs(hs) == 0  # a clean (or unknown) link pays nothing
        hs.datagram(("127.0.0.1", 40000), bytes(LossReport(1, 1000, 50, 0, 0, 0, 40, 2)), 0.1)
        assert (audio_repairs(hs) > 0) == lossy  # 5 % reported: each chunk's copy follows the next chunk
        for i in range(40):  # the loss goes away
            hs.datagram(("127.0.0.1", 40000), bytes(LossReport(2 + i, 1000, 0, 0, 0, 0, 0, 0)), 0.2 + 0.1 * i)
        assert audio_repairs(hs) <= 1  # at most the one still pending from before


def test_a_huge_repair_count_is_clamped_to_what_reed_solomon_can_carry() -> None:
    p = Packetizer(video_planner=make_planner("tuned", ratio=4.0))
    p.use_mds()
    frame = bytes(150 * 1024)  # two groups of 75: at most 181 repair blocks each
    datagrams = p.packetize(MediaPacket(frame, 1))
    header = MediaHeader.parse(datagrams[-1])
    assert header.num_fec_blocks == 2 * (256 - 75) and header.fec
    dec = MdsFrameDecoder(len(frame), header.num_fec_blocks)
    for d in datagrams[-150:]:  # only repair blocks: any 150 of them rebuild the frame
        h = MediaHeader.parse(d)
        dec.add_repair(h.subpacket_seq, d[24:])
    assert dec.complete and dec.frame() == frame


def test_auto_fec_follows_reports_only_for_a_viewer_that_sends_them() -> None:
    from pyrofling.fec.planner import AdaptivePlanner, TunedPlanner

    def auto(cookie: int) -> Packetizer:
        p = Packetizer.for_cookie(cookie, video_planner=make_planner("tuned"), key_planner=make_planner("tuned"))
        p.planner_when_reported = AdaptivePlanner
        return p

    for features, kind in (
        (ExtensionFeature.LOSS_REPORTS | ExtensionFeature.MDS_FEC, AdaptivePlanner),
        (0, TunedPlanner),
    ):
        hs = HostSessions(make_packetizer=auto, keyframes=KeyframePolicy())
        hs.codec_parameters = PARAMS
        hs.open(1, ("127.0.0.1", 50000), 0.0, cookie=0x99)
        hs.control(1, Hello(), 0.0)
        if features:
            hs.control(1, Extensions(1, int(features)), 0.0)
        hs.datagram(("127.0.0.1", 40000), bytes(Cookie(0x99)), 0.0)
        hs.control(1, Kick(KickFlags.VIDEO), 0.0)
        conn = hs.connection(1)
        assert conn is not None and conn.packetizer is not None
        assert isinstance(conn.packetizer.video_planner, kind)
        if kind is AdaptivePlanner:
            planner = conn.packetizer.video_planner
            assert conn.packetizer.key_planner is None and isinstance(planner, AdaptivePlanner)
            assert planner.efficiency == 1.0


def test_forged_headers_size_nothing_and_a_flood_of_them_stops_the_nacks() -> None:
    t = LossTracker(nack=True, reports=True)
    t.max_data_blocks = 256
    t.datagram(_header(1, 0), 0.0)
    huge = MediaHeader(5, 0, 1 << 30, 3, 0, 0, 2, 0, begin=True)  # 1 GiB "packet"
    assert not t.datagram(huge, 0.001) and 2 not in t._packets
    t.datagram(_header(1, 1), 0.002)
    # A stale datagram (its packet already delivered, say) only completes what is tracked; it starts nothing.
    assert not t.datagram(_header(9, 0), 0.003, stale=True) and 9 not in t._packets
    t.suspend_nacks_until(1.0)
    t.datagram(_header(3, 0), 0.004)  # packet 2 was lost whole, packet 1 lost its tail
    assert [m for m in t.poll(0.01, lambda seq: None) if isinstance(m, Nack)] == []
    t.datagram(_header(5, 0), 1.5)
    assert [m for m in t.poll(1.5, lambda seq: None) if isinstance(m, Nack)]  # packet 4, after the suspension


def test_a_first_transmission_that_was_only_late_is_not_counted_lost() -> None:
    t = LossTracker(nack=True, reports=True, tail_wait_s=0.003)
    t.datagram(_header(1, 0), 0.0)
    t.datagram(_header(1, 1), 0.0)
    [nack] = [m for m in t.poll(0.004, lambda seq: [2, 3]) if isinstance(m, Nack)]  # the tail looked lost
    assert t.total.datagrams_lost == 4
    t.datagram(_header(1, 2), 0.005)  # block 2 arrives: asked for, so it counts as the resend
    t.datagram(_header(1, 0, fec=True), 0.005)  # a repair block was never asked for: it was late, not lost
    assert t.total.datagrams_lost == 3
    [report] = [m for m in t.poll(0.2, lambda seq: []) if isinstance(m, LossReport)]
    assert report.datagrams_lost == 3 and nack.blocks() == [2, 3]


def test_late_repair_blocks_of_a_packet_already_delivered_are_not_counted_lost() -> None:
    # The data blocks came, the packet was decoded, the tail wait ran out before the repair blocks were read (a
    # busy viewer): they still arrive, stale for the reassembler, and must be credited like any late datagram.
    t = LossTracker(nack=True, reports=True, tail_wait_s=0.003)
    for i in range(4):
        t.datagram(_header(1, i), 0.0)
    t.packet_ready(1, recovered=False)
    assert not [m for m in t.poll(0.004, lambda seq: []) if isinstance(m, Nack)]
    assert t.total.datagrams_lost == 2
    t.datagram(_header(1, 0, fec=True), 0.005, stale=True)
    assert t.total.datagrams_lost == 1
    t.datagram(_header(1, 0, fec=True), 0.006, stale=True)  # a duplicate credits nothing twice
    t.datagram(_header(1, 1, fec=True, repair=3), 0.006, stale=True)  # nor does a header that disagrees
    assert t.total.datagrams_lost == 1
    for i in range(4):
        t.datagram(_header(2, i), 0.007)
    t.datagram(_header(1, 1, fec=True), 0.008, stale=True)  # still known after a newer packet came
    assert t.total.datagrams_lost == 0  # packet 2 is still open: its tail is judged later
    [report] = [m for m in t.poll(0.2, lambda seq: []) if isinstance(m, LossReport)]
    assert report.datagrams_lost == 2  # packet 2's repair blocks, which never came
