"""The viewer's control protocol core and key-frame gate, with a fake clock (protocol.md §3.3, §7.2)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from pyrofling.core.bitstream import KeyGate, KeyInfo
from pyrofling.core.host.keyframes import KeyframeConfig, KeyframePolicy
from pyrofling.core.viewer.clock_sync import ClockSync
from pyrofling.core.viewer.reassembler import ProgressCounters
from pyrofling.core.viewer.session import (
    ControlToHost,
    DatagramToHost,
    Phase,
    SessionFailed,
    Streaming,
    StreamStalled,
    ViewerSession,
    ViewerSessionConfig,
)
from pyrofling.wire import (
    ALL_EXTENSIONS,
    Again,
    CodecParameters,
    Cookie,
    ExtensionFeature,
    Extensions,
    Hello,
    Kick,
    KickFlags,
    Nak,
    PhaseOffset,
    Ping,
    Progress,
    RequestKeyframe,
    UnknownControl,
    parse_control,
)

PARAMS = CodecParameters(1, 1, 0, 60, 1, 320, 240, 0, 0)
IDR = KeyInfo(idr=True)


def sent(outputs: Sequence[object]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for o in outputs:
        if isinstance(o, ControlToHost):
            out.append(("tcp", parse_control(o.data)))
        elif isinstance(o, DatagramToHost):
            out.append(("udp", parse_control(o.data)))
    return out


def streaming(extensions: bool = True) -> ViewerSession:
    s = ViewerSession(ProgressCounters())
    s.start(0.0)
    s.control(Cookie(42), 0.001)
    s.control(Extensions(1, ExtensionFeature.KEYFRAME_REQUEST) if extensions else Nak(), 0.002)
    out = s.control(PARAMS, 0.003)
    assert isinstance(out[0], Streaming)
    return s


def test_handshake_pipelines_extensions_after_hello() -> None:
    s = ViewerSession(ProgressCounters())
    # It offers authentication and encryption too; a host without a secret grants neither.
    offered = ALL_EXTENSIONS
    assert sent(s.start(0.0)) == [("tcp", Hello()), ("tcp", Extensions(1, offered))]
    assert s.control(Cookie(42), 0.001) == []
    out = s.control(Extensions(1, ExtensionFeature.KEYFRAME_REQUEST), 0.002)
    assert sent(out) == [("udp", Cookie(42)), ("tcp", Kick(KickFlags.VIDEO | KickFlags.AUDIO))]
    [ready] = s.control(PARAMS, 0.004)
    assert isinstance(ready, Streaming)
    assert ready.extensions == ExtensionFeature.KEYFRAME_REQUEST
    assert ready.handshake_s == pytest.approx(0.004)


def test_native_host_naks_extensions_and_the_viewer_falls_back() -> None:
    s = ViewerSession(ProgressCounters())
    s.start(0.0)
    s.control(Cookie(42), 0.0)
    assert sent(s.control(Nak(), 0.0))[0] == ("udp", Cookie(42))
    s.control(PARAMS, 0.0)
    assert s.extensions == ExtensionFeature.NONE
    # Loss then asks through PROGRESS, which a native host understands.
    s.counters.dropped_video = 1
    assert sent(s.video_lost(1.0)) == [("tcp", Progress(0, 0, 1, 0, 0))]


def test_without_extensions_it_is_byte_for_byte_a_native_viewer() -> None:
    s = ViewerSession(ProgressCounters(), ViewerSessionConfig(extensions=ExtensionFeature.NONE))
    assert sent(s.start(0.0)) == [("tcp", Hello())]
    assert sent(s.control(Cookie(7), 0.0)) == [("udp", Cookie(7)), ("tcp", Kick(KickFlags.VIDEO | KickFlags.AUDIO))]


def test_kick_is_retried_after_a_pause_not_back_to_back() -> None:
    s = ViewerSession(ProgressCounters(), ViewerSessionConfig(extensions=ExtensionFeature.NONE, kick_retry_s=0.01))
    s.start(0.0)
    s.control(Cookie(7), 0.0)
    assert s.control(Nak(), 0.001) == []
    assert s.next_timer() == pytest.approx(0.011)
    assert s.handle_timer(0.005) == []
    assert sent(s.handle_timer(0.011)) == [("udp", Cookie(7)), ("tcp", Kick(KickFlags.VIDEO | KickFlags.AUDIO))]
    s.control(Again(), 0.012)
    assert s.kick_attempts == 2
    [failed] = s.handle_timer(5.0)
    assert isinstance(failed, SessionFailed) and "2 KICK attempts" in failed.reason


def test_unexpected_reply_fails_the_handshake_with_a_reason() -> None:
    s = ViewerSession(ProgressCounters())
    s.start(0.0)
    [failed] = s.control(Nak(), 0.0)
    assert isinstance(failed, SessionFailed) and "COOKIE" in failed.reason
    assert s.phase == Phase.FAILED and s.next_timer() is None


def test_progress_every_second_even_when_nothing_arrives() -> None:
    s = streaming()
    progress_times = []
    while True:
        due = s.next_timer()
        assert due is not None
        if due > 4.0:
            break
        now = due
        s.datagram(b"media", now)  # keep the stall timer quiet
        for _kind, msg in sent(s.handle_timer(now)):
            if isinstance(msg, Progress):
                progress_times.append(round(now, 3))
    assert progress_times == [1.003, 2.003, 3.003]


def test_pings_go_out_and_map_the_host_clock_at_the_rtt_midpoint() -> None:
    s = streaming()
    out = sent(s.handle_timer(0.003))
    assert ("udp", Ping(0)) in out
    # Host clock = our clock + 100 s; reply stamped at the midpoint, arrives 2 ms after sending.
    s.ping_reply(0, int((0.004 + 100.0) * 1e6), 0.005)
    assert s.clock.offset_s == pytest.approx(100.0)
    assert s.clock.to_local(int(200.0 * 1e6)) == pytest.approx(100.0)


def test_clock_sync_trusts_the_fastest_round_trip() -> None:
    c = ClockSync()
    c.add(0.0, 0.010, int(5.0e6))  # slow, asymmetric: offset estimate 4.995
    c.add(1.0, 1.001, int(6.0005e6))  # fast: 5.0
    assert c.offset_s == pytest.approx(5.0)
    assert c.min_rtt_s == pytest.approx(0.001)


def test_a_one_way_delay_skews_the_estimate_by_half_and_a_known_offset_not_at_all() -> None:
    # One machine (offset 0), 12 ms added on the way back only (netsim's media direction): every round trip
    # says the host is 6 ms ahead.  Told the host runs here, the mapping stays exact and the pings still count.
    estimated, known = ClockSync(), ClockSync(known_offset_s=0.0)
    for i in range(10):
        sent_s = float(i)
        host_stamp_us = int((sent_s + 0.0005) * 1e6)  # the host replies 0.5 ms after our send
        for c in (estimated, known):
            c.add(sent_s, sent_s + 0.001 + 0.012, host_stamp_us)
    assert estimated.offset_s == pytest.approx(-0.006, abs=1e-5)
    assert known.offset_s == 0.0 and known.to_local(3_000_000) == pytest.approx(3.0)
    assert known.min_rtt_s == pytest.approx(0.013)


def test_stall_reported_once_after_five_silent_seconds() -> None:
    s = streaming()
    s.datagram(b"media", 1.0)
    events = [o for o in s.handle_timer(5.9) if isinstance(o, StreamStalled)]
    assert events == []
    events = [o for o in s.handle_timer(6.0) if isinstance(o, StreamStalled)]
    assert events == [StreamStalled(5.0)]
    assert [o for o in s.handle_timer(20.0) if isinstance(o, StreamStalled)] == []


def test_loss_asks_for_a_key_frame_rate_limited_and_retried() -> None:
    s = streaming()
    assert s.video_packet(IDR, 0.01)[0]
    assert sent(s.video_lost(0.1)) == [("tcp", RequestKeyframe())]
    assert s.video_lost(0.13) == []  # already asked (a retry waits 50 ms)
    assert not s.video_packet(None, 0.2)[0]  # broken until a key frame
    retry = sent(s.handle_timer(0.36))
    assert ("tcp", RequestKeyframe()) in retry  # the IDR did not come: ask again
    assert s.video_packet(IDR, 0.4)[0]
    assert s.keyframe_requests == 2


def test_first_key_frame_sends_progress_at_once() -> None:
    s = streaming(extensions=False)
    s.counters.key_frames = 1
    whole, out = s.video_packet(IDR, 0.01)
    assert whole and sent(out) == [("tcp", Progress(0, 0, 0, 0, 1))]
    assert s.video_packet(IDR, 0.02)[1] == []


def test_gate_waits_for_the_first_key_frame_and_counts_a_recovery_wave() -> None:
    g = KeyGate()
    assert not g.packet(None)
    assert g.packet(IDR)
    g.lost()
    assert not g.packet(None)
    assert not g.packet(KeyInfo(idr=False, recovery_frames=3))  # the wave starts here
    assert [g.packet(None) for _ in range(3)] == [False, False, True]
    g.lost()
    assert not g.packet(KeyInfo(idr=False, recovery_frames=5))
    assert g.packet(IDR)  # an IDR ends the wait at once


def test_keyframe_policy_rate_limits_loss_but_serves_joins_fast() -> None:
    p = KeyframePolicy(KeyframeConfig(loss_interval_s=0.1, join_interval_s=0.05))
    assert not p.should_force(0.0)
    p.viewer_joined()
    assert p.should_force(0.0)
    p.loss_reported()
    assert not p.should_force(0.05)
    assert p.should_force(0.1)
    p.loss_reported()
    assert not p.should_force(0.12)  # loss: 100 ms since the last forced IDR
    p.viewer_joined()
    assert p.should_force(0.12)  # a join is limited only against the last join (50 ms)
    assert not p.pending  # the join's IDR served the loss too
    p.viewer_joined()
    assert not p.should_force(0.16)
    assert p.should_force(0.17)
    assert (p.forced, p.forced_for_join, p.forced_for_loss) == (4, 3, 1)


def test_phase_offsets_go_out_over_udp_only_while_streaming() -> None:
    s = ViewerSession(ProgressCounters())
    s.start(0.0)
    assert s.phase_offset(1500) == []  # not streaming yet: nothing to steer
    s = streaming()
    [(kind, msg)] = sent(s.phase_offset(-2500))
    assert kind == "udp" and msg == PhaseOffset(-2500)
    [(_, clamped)] = sent(s.phase_offset(2**40))
    assert clamped == PhaseOffset(2**31 - 1)  # an i32 on the wire
    assert s.phase_offsets_sent == 2


def test_control_messages_a_streaming_viewer_has_no_use_for_are_counted_and_ignored() -> None:
    s = streaming()
    for msg in (Nak(), Again(), UnknownControl(50, b"x" * 7)):
        assert s.control(msg, 1.0) == []
    assert s.refused["control_ignored"] == 3 and s.phase is Phase.STREAMING
