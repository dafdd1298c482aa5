"""The host's control protocol core, driven with a fake clock (protocol.md §3)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pyrofling.core.host.congestion import RateConfig
from pyrofling.core.host.keyframes import KeyframePolicy
from pyrofling.core.host.packetizer import MediaPacket, Packetizer
from pyrofling.core.host.sessions import (
    CloseConnection,
    GamepadInput,
    HostSessionConfig,
    HostSessions,
    LogLine,
    PhaseFeedback,
    SendControl,
    SendDatagram,
    ViewerLeft,
)
from pyrofling.core.host.state import RemoteViewer, SetBitrate
from pyrofling.wire import (
    Again,
    ArrivalSample,
    CodecParameters,
    Cookie,
    ExtensionFeature,
    Extensions,
    GamepadState,
    Hello,
    Kick,
    KickFlags,
    Nak,
    PhaseOffset,
    Ping,
    PingReply,
    Progress,
    RateDecider,
    RateFeedback,
    RequestKeyframe,
    StreamRate,
    StreamType,
    UnknownControl,
    parse_control,
)

PARAMS = CodecParameters(1, 1, 0, 60, 1, 320, 240, 0, 0)
PEER = ("10.0.0.2", 40000)
UDP = ("10.0.0.2", 40001)


def make(params: CodecParameters | None = PARAMS) -> HostSessions:
    s = HostSessions(make_packetizer=Packetizer.for_cookie, keyframes=KeyframePolicy())
    s.codec_parameters = params
    return s


def replies(outputs: Sequence[object]) -> list[object]:
    return [parse_control(o.data) for o in outputs if isinstance(o, SendControl)]


def kicked(s: HostSessions, conn_id: int = 1, cookie: int = 0xDEADBEEF_00000001, now: float = 0.0) -> None:
    s.open(conn_id, PEER, now, cookie=cookie)
    s.control(conn_id, Hello(), now)
    s.datagram((UDP[0], UDP[1] + conn_id), bytes(Cookie(cookie)), now)
    out = s.control(conn_id, Kick(KickFlags.VIDEO | KickFlags.GAMEPAD), now)
    assert replies(out) == [PARAMS]


def test_handshake_exactly_as_the_reference() -> None:
    s = make()
    s.open(1, PEER, 0.0, cookie=77)
    assert replies(s.control(1, Hello(), 0.0)) == [Cookie(77)]
    # KICK before the UDP cookie arrived: NAK.
    assert replies(s.control(1, Kick(KickFlags.VIDEO), 0.01)) == [Nak()]
    assert s.datagram(UDP, bytes(Cookie(77)), 0.02) == []
    out = s.control(1, Kick(KickFlags.VIDEO), 0.03)
    assert replies(out) == [PARAMS]
    conn = s.connection(1)
    assert conn is not None and conn.kicked and conn.udp_address == UDP
    assert any(isinstance(o, LogLine) and "joined for video" in o.text for o in out)
    # A repeated KICK only updates the flags.
    again = s.control(1, Kick(KickFlags.VIDEO | KickFlags.AUDIO), 0.04)
    assert replies(again) == [] and conn.flags == KickFlags.VIDEO | KickFlags.AUDIO


def test_again_while_the_encoder_has_no_parameters() -> None:
    s = make(params=None)
    s.open(1, PEER, 0.0, cookie=5)
    s.datagram(UDP, bytes(Cookie(5)), 0.0)
    assert replies(s.control(1, Kick(KickFlags.VIDEO), 0.0)) == [Again()]
    s.codec_parameters = PARAMS
    assert replies(s.control(1, Kick(KickFlags.VIDEO), 0.1)) == [PARAMS]


def test_first_video_packet_of_a_new_viewer_is_an_idr_and_a_join_forces_one() -> None:
    s = make()
    kicked(s)
    assert s.keyframes.should_force(0.0)  # the join asks for an IDR
    assert s.video_targets(idr=False) == []  # no P-frames before its IDR
    [conn] = s.video_targets(idr=True)
    s.send_video(MediaPacket(bytes(100), 0, key_frame=True), idr=True, now=0.0)
    assert s.video_targets(idr=False) == [conn]
    assert len(s.datagrams_to_send(0.0)) == 1  # its IDR, through its pacer


def test_udp_binding_is_first_come_and_never_rebinds() -> None:
    s = make()
    s.open(1, PEER, 0.0, cookie=5)
    s.open(2, PEER, 0.0, cookie=6)
    s.datagram(UDP, bytes(Cookie(5)), 0.0)
    s.datagram((UDP[0], 9), bytes(Cookie(5)), 0.0)  # the cookie again, from another port
    assert s.discarded["rebind_refused"] == 1
    s.datagram(UDP, bytes(Cookie(6)), 0.0)  # one address cannot be two viewers
    assert s.discarded["address_taken"] == 1
    s.datagram(UDP, bytes(Cookie(999)), 0.0)
    assert s.discarded["unknown_cookie"] == 1
    conn = s.connection(1)
    assert conn is not None and conn.udp_address == UDP


def test_an_open_host_is_no_reflector_a_cookie_from_another_ip_aims_nothing() -> None:
    # Anyone who reads a cookie on the path (or guesses a native host's) sends it from a victim's address.
    s = make()
    s.open(1, PEER, 0.0, cookie=5)
    s.datagram(("6.6.6.6", 1), bytes(Cookie(5)), 0.0)
    assert s.discarded["cookie_from_another_address"] == 1
    conn = s.connection(1)
    assert conn is not None and conn.udp_address is None
    assert replies(s.control(1, Kick(KickFlags.VIDEO), 0.1)) == [Nak()]  # no media to the victim
    # The viewer itself, from its TCP peer's IP on another port (a native viewer does this), still binds;
    # an IPv4-mapped spelling of the same address is the same address.
    s.open(2, ("::ffff:10.0.0.3", 5), 0.0, cookie=6)
    s.datagram(UDP, bytes(Cookie(5)), 0.0)
    s.datagram(("10.0.0.3", 7), bytes(Cookie(6)), 0.0)
    assert conn.udp_address == UDP
    assert replies(s.control(1, Kick(KickFlags.VIDEO), 0.2)) == [PARAMS]
    second = s.connection(2)
    assert second is not None and second.udp_address == ("10.0.0.3", 7)


def test_ping_answered_with_the_server_clock_only_for_a_kicked_bound_viewer() -> None:
    s = make()
    assert s.datagram(UDP, bytes(Ping(3)), 1.0) == []
    assert s.discarded["unknown_peer"] == 1
    kicked(s, cookie=9)
    assert s.datagram((UDP[0], UDP[1] + 1), bytes(Ping(3)), 12.345678) == []
    assert s.next_timer() == 12.345678  # the reply is due at once
    [reply] = s.datagrams_to_send(12.345678)
    assert isinstance(reply, SendDatagram) and reply.address == (UDP[0], UDP[1] + 1)
    assert PingReply.parse(reply.data) == PingReply(3, 12_345_678)


def test_phase_offsets_and_gamepad_states_are_passed_on() -> None:
    s = make()
    kicked(s, cookie=9)
    addr = (UDP[0], UDP[1] + 1)
    assert s.datagram(addr, bytes(PhaseOffset(-250)), 0.0) == [PhaseFeedback(1, -250)]
    out = s.datagram(addr, bytes(GamepadState(seq=1, buttons=1)), 0.0)
    [pad] = [o for o in out if isinstance(o, GamepadInput)]
    assert (pad.update.conn_id, pad.update.seq, pad.update.state.buttons) == (1, 1, 1)
    assert pad.update.events == [(1, 0x130, 1), (0, 0, 0)]  # BTN_SOUTH down, SYN_REPORT


def test_malformed_datagrams_are_counted_by_reason() -> None:
    s = make()
    kicked(s, cookie=9)
    for junk in (b"", b"\x01", b"\xff" * 12, bytes(Ping(1))[:-1], bytes(Kick(KickFlags.VIDEO))):
        assert s.datagram(UDP, junk, 0.0) == []
    assert sum(s.discarded.values()) == 5
    assert {"truncated", "bad_magic", "unknown_type"} <= set(s.discarded)


def test_keepalive_drops_a_silent_viewer_after_15_s_and_progress_keeps_it() -> None:
    s = make()
    kicked(s, now=0.0)
    assert s.next_timer() == 15.0
    s.control(1, Progress(1, 0, 0, 0, 1), 10.0)
    # Pings do not count as keep-alive (protocol.md §3.3).
    s.datagram((UDP[0], UDP[1] + 1), bytes(Ping(1)), 20.0)
    assert s.handle_timer(24.9) == []
    out = s.handle_timer(25.0)
    assert [type(o) for o in out] == [ViewerLeft, CloseConnection]  # it no longer steers the frame clock
    assert s.connection(1) is None and s.timed_out == 1
    # A connection that never speaks is dropped too.
    s.open(2, PEER, 30.0, cookie=3)
    assert [type(o) for o in s.handle_timer(45.0)] == [ViewerLeft, CloseConnection]


def test_progress_line_in_the_reference_format_at_most_once_a_second() -> None:
    s = make()
    kicked(s)
    out = s.control(1, Progress(10, 2, 3, 4, 1), 1.0)
    [line] = [o for o in out if isinstance(o, LogLine)]
    assert line.text == (
        "PROGRESS for 10.0.0.2 @ 40000: 10 complete, 3 dropped video, 4 dropped audio, 1 key frames, 2 FEC recovered."
    )
    assert [o for o in s.control(1, Progress(11, 2, 3, 4, 1), 1.5) if isinstance(o, LogLine)] == []
    assert [o for o in s.control(1, Progress(12, 2, 3, 4, 1), 2.0) if isinstance(o, LogLine)] != []


def test_loss_in_progress_forces_an_idr_for_a_native_viewer_only() -> None:
    native = make()
    kicked(native)
    native.keyframes.should_force(0.0)
    native.control(1, Progress(10, 0, 1, 0, 1), 1.0)
    assert native.keyframes.should_force(1.0)

    ours = make()
    ours.open(1, PEER, 0.0, cookie=5)
    ext = ours.control(1, Extensions(1, ExtensionFeature.KEYFRAME_REQUEST), 0.0)
    assert replies(ext) == [Extensions(1, ExtensionFeature.KEYFRAME_REQUEST)]
    ours.datagram(UDP, bytes(Cookie(5)), 0.0)
    ours.control(1, Kick(KickFlags.VIDEO), 0.0)
    ours.keyframes.should_force(0.0)
    ours.control(1, Progress(10, 0, 1, 0, 1), 1.0)
    assert not ours.keyframes.should_force(1.0)  # it asks explicitly instead
    ours.control(1, RequestKeyframe(), 1.1)
    assert ours.keyframes.should_force(1.1)


def test_a_viewer_whose_idr_never_arrived_gets_another() -> None:
    s = make()
    kicked(s)
    s.keyframes.should_force(0.0)
    s.send_video(MediaPacket(bytes(100), 0, key_frame=True), idr=True, now=0.0)
    s.control(1, Progress(0, 0, 0, 0, 0), 0.5)
    assert not s.keyframes.should_force(0.5)  # too early to tell
    s.control(1, Progress(0, 0, 0, 0, 0), 1.5)
    assert s.keyframes.should_force(1.5)


def test_unknown_and_host_only_messages_get_nak_and_do_not_close() -> None:
    s = make()
    s.open(1, PEER, 0.0, cookie=5)
    assert replies(s.control(1, UnknownControl(45, b"xyz"), 0.0)) == [Nak()]
    assert replies(s.control(1, PARAMS, 0.0)) == [Nak()]
    assert s.connection(1) is not None


def test_extension_grants_only_what_both_support() -> None:
    s = HostSessions(make_packetizer=Packetizer.for_cookie, config=HostSessionConfig(extensions=ExtensionFeature.NONE))
    s.open(1, PEER, 0.0, cookie=5)
    assert replies(s.control(1, Extensions(1, 0xFFFF), 0.0)) == [Extensions(1, 0)]


def test_cookies_must_be_unique() -> None:
    s = make()
    s.open(1, PEER, 0.0, cookie=5)
    with pytest.raises(ValueError):
        s.open(2, PEER, 0.0, cookie=5)


def test_close_forgets_the_udp_binding() -> None:
    s = make()
    kicked(s, cookie=9)
    s.close(1)
    assert s.datagram((UDP[0], UDP[1] + 1), bytes(Ping(1)), 0.0) == []
    assert s.discarded["unknown_peer"] == 1


def gamepad_inputs(outputs: Sequence[object]) -> list[GamepadInput]:
    return [o for o in outputs if isinstance(o, GamepadInput)]


def test_gamepad_states_need_the_gamepad_bit_and_a_kick() -> None:
    s = make()
    s.open(1, PEER, 0.0, cookie=5)
    s.control(1, Hello(), 0.0)
    s.datagram(UDP, bytes(Cookie(5)), 0.0)
    assert s.datagram(UDP, bytes(GamepadState(seq=1, buttons=1)), 0.0) == []  # bound, not kicked
    assert s.discarded["not_kicked"] == 1
    s.control(1, Kick(KickFlags.VIDEO), 0.0)
    assert s.datagram(UDP, bytes(GamepadState(seq=2, buttons=1)), 0.0) == []
    assert s.discarded["gamepad_not_requested"] == 1
    s.control(1, Kick(KickFlags.VIDEO | KickFlags.GAMEPAD), 0.0)  # a repeated KICK updates the flags
    assert len(gamepad_inputs(s.datagram(UDP, bytes(GamepadState(seq=3, buttons=1)), 0.0))) == 1
    assert s.gamepad.stats.applied == 1


def test_gamepad_kick_resets_ownership_and_closing_the_owner_releases_the_pad() -> None:
    s = make()
    kicked(s, 1, cookie=11)
    out = s.datagram((UDP[0], UDP[1] + 1), bytes(GamepadState(seq=1, buttons=1)), 0.0)
    assert [o.text for o in out if isinstance(o, LogLine)] == ["10.0.0.2 @ 40000 has the gamepad"]
    assert s.gamepad.owner == 1
    kicked(s, 2, cookie=12)  # another player joins asking for the gamepad
    assert s.gamepad.owner is None
    assert gamepad_inputs(s.datagram((UDP[0], UDP[1] + 2), bytes(GamepadState(seq=1, buttons=2)), 0.0))
    assert s.gamepad.owner == 2
    assert gamepad_inputs(s.datagram((UDP[0], UDP[1] + 1), bytes(GamepadState(seq=2, buttons=1)), 0.0)) == []
    assert s.discarded["gamepad_not_owner"] == 1
    [release] = gamepad_inputs(s.close(2))
    assert release.update.conn_id is None and release.update.events == [(1, 0x131, 0), (0, 0, 0)]
    assert gamepad_inputs(s.close(1)) == []  # not the owner: nothing to let go


def test_a_timed_out_owner_lets_go_of_the_pad() -> None:
    s = make()
    kicked(s, cookie=9)
    s.datagram((UDP[0], UDP[1] + 1), bytes(GamepadState(seq=1, buttons=1)), 0.0)
    out = s.handle_timer(100.0)
    assert any(isinstance(o, CloseConnection) for o in out)
    [release] = gamepad_inputs(out)
    assert release.update.events == [(1, 0x130, 0), (0, 0, 0)]


def test_connections_are_bounded_overall_and_per_address_and_idle_ones_make_room() -> None:
    s = HostSessions(
        make_packetizer=Packetizer.for_cookie,
        keyframes=KeyframePolicy(),
        config=HostSessionConfig(max_connections=6, max_pending_per_address=3),
    )
    s.codec_parameters = PARAMS
    kicked(s, conn_id=1, cookie=101)  # streaming: no longer pending
    for conn_id in (2, 3, 4):
        assert s.open(conn_id, PEER, 0.0, cookie=100 + conn_id) == []
    refused = s.open(5, PEER, 0.0, cookie=105)  # a fourth from the same address that has not kicked
    assert [type(o) for o in refused] == [CloseConnection] and s.connection(5) is None
    assert s.discarded["pending_limit"] == 1
    # Another address is not held up by the first one's pending connections...
    assert s.open(6, ("10.0.0.3", 5000), 0.0, cookie=106) == []
    assert s.open(7, ("10.0.0.4", 5000), 0.0, cookie=107) == []
    # ...and once the host is full, the oldest pending one makes room for a newcomer.
    made_room = s.open(8, ("10.0.0.5", 5000), 0.1, cookie=108)
    assert [(type(o), o.conn_id) for o in made_room if isinstance(o, CloseConnection)] == [(CloseConnection, 2)]
    assert s.connection(8) is not None and s.discarded["evicted_idle"] == 1 and len(s.connections) == 6
    # A pending one that leaves makes room too.
    s.close(3)
    assert s.open(9, PEER, 0.2, cookie=109) == []


# -- rate control (protocol.md §7.10) ---------------------------------------------------------------


def rate_viewer(s: HostSessions, conn_id: int, flags: KickFlags, now: float) -> RemoteViewer:
    cookie = 0x5EED_0000 + conn_id
    s.open(conn_id, (PEER[0], PEER[1] + conn_id), now, cookie=cookie)
    s.control(conn_id, Hello(), now)
    granted = replies(s.control(conn_id, Extensions(1, ExtensionFeature.RATE_CONTROL), now))
    assert granted == [Extensions(1, ExtensionFeature.RATE_CONTROL)]
    s.datagram((UDP[0], UDP[1] + conn_id), bytes(Cookie(cookie)), now)
    s.control(conn_id, Kick(flags), now)
    conn = s.connection(conn_id)
    assert conn is not None and conn.link is not None and conn.paced is not None
    return conn


def stream_with_feedback(
    s: HostSessions, viewers: dict[int, float], seconds: float
) -> tuple[list[SetBitrate], list[StreamRate]]:
    """Frames to every viewer, each reporting arrivals 10 ms after sending plus ``viewers[conn_id]`` seconds of
    queue growth per second (0: honest; more: a viewer claiming congestion it does not have)."""
    bitrates: list[SetBitrate] = []
    told: list[StreamRate] = []
    sent: dict[int, list[tuple[int, float]]] = {c: [] for c in viewers}
    for i in range(int(seconds * 60)):
        now = 1.0 + i / 60
        seqs = {}
        for conn_id in viewers:
            conn = s.connection(conn_id)
            assert conn is not None and conn.packetizer is not None
            seqs[conn_id] = conn.packetizer.next_seq(StreamType.VIDEO)
        first = any(c.awaiting_idr for c in s.connections)
        s.send_video(MediaPacket(bytes(20_000), int(now * 1e6), key_frame=first), idr=first, now=now)
        for ms in range(16):  # the shell sends what the pacers release, when they do
            s.datagrams_to_send(now + ms / 1000)
        for conn_id, growth in viewers.items():
            seq = seqs[conn_id]
            sent[conn_id].append((seq, now))
            if i % 3 == 2:
                claimed = growth * (now - 1.0)
                samples = [
                    ArrivalSample(q, 22, int((t + 0.01 + claimed) * 1e6), int((t + 0.012 + claimed) * 1e6))
                    for q, t in sent[conn_id][-3:]
                ]
                feedback = RateFeedback.build(i, 50_000, 3 * 22 * 1048, samples)
                out = s.datagram((UDP[0], UDP[1] + conn_id), bytes(feedback), now + 0.011)
                bitrates += [o for o in out if isinstance(o, SetBitrate)]
                told += [m for m in replies(out) if isinstance(m, StreamRate)]
    return bitrates, told


def rate_sessions() -> HostSessions:
    s = HostSessions(
        make_packetizer=Packetizer.for_cookie,
        keyframes=KeyframePolicy(),
        rate=RateConfig(ceiling_bps=10e6, floor_bps=1e6),
    )
    s.codec_parameters = PARAMS
    return s


def play(s: HostSessions, conn_id: int, now: float) -> None:
    """The viewer's pad drives the virtual pad: it is the player."""
    s.datagram((UDP[0], UDP[1] + conn_id), bytes(GamepadState(1, 1, 0, 0, 0, 0, 0, 0, 0, 0)), now)


def test_a_spectator_claiming_congestion_does_not_lower_the_players_stream() -> None:
    s = rate_sessions()
    liar = rate_viewer(s, 2, KickFlags.VIDEO | KickFlags.GAMEPAD, 0.0)  # joined first, asked for a pad too
    player = rate_viewer(s, 1, KickFlags.VIDEO | KickFlags.GAMEPAD, 0.5)
    play(s, 1, 0.6)
    bitrates, _ = stream_with_feedback(s, {1: 0.0, 2: 0.05}, 4.0)
    assert liar.link is not None and player.link is not None
    assert liar.link.cuts > 0 and liar.link.video_bps < 5e6  # its own estimate fell...
    assert player.link.video_bps == 10e6
    assert bitrates == []  # ...and the encoder never heard of it
    assert s.rate is not None and s.rate.shared.bitrate_bps == 10e6


def test_the_player_holding_the_pad_sets_the_bitrate_and_the_others_are_told_why() -> None:
    s = rate_sessions()
    rate_viewer(s, 1, KickFlags.VIDEO | KickFlags.GAMEPAD, 0.0)
    rate_viewer(s, 2, KickFlags.VIDEO | KickFlags.GAMEPAD, 0.5)
    play(s, 2, 0.6)
    bitrates, told = stream_with_feedback(s, {1: 0.0, 2: 0.05}, 4.0)
    assert bitrates and bitrates[-1].bits_per_s < 5e6
    assert any(m.decided_by == RateDecider.OTHER_VIEWER for m in told)  # the spectator learns why
    assert any(m.decided_by == RateDecider.YOUR_LINK for m in told)


def test_rate_feedback_from_a_viewer_that_did_not_negotiate_it_is_dropped() -> None:
    s = rate_sessions()
    kicked(s)  # no EXTENSIONS: a native viewer
    conn = s.connection(1)
    assert conn is not None and conn.link is None
    feedback = RateFeedback.build(1, 50_000, 1000, [ArrivalSample(1, 1, 2, 3)])
    assert s.datagram((UDP[0], UDP[1] + 1), bytes(feedback), 1.0) == []
    assert s.discarded["rate_feedback_not_negotiated"] == 1
