"""CODECS and ``host --codec auto`` (protocol.md §7.15): which codec the one encode uses as viewers come and go, in
virtual time; what the host answers and tells; what the viewer says, and what it does when the codec changes."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace

import pytest

from pyrofling.core.host.codec_choice import DEFAULT_PREFERENCE, HOLD_S, PACE_FRAMES, CodecChoice, SwitchCodec
from pyrofling.core.host.keyframes import KeyframePolicy
from pyrofling.core.host.packetizer import Packetizer
from pyrofling.core.host.sessions import HostSessions, SendControl
from pyrofling.core.viewer.reassembler import ProgressCounters
from pyrofling.core.viewer.session import CodecChanged, ControlToHost, Phase, ViewerSession, ViewerSessionConfig
from pyrofling.wire import (
    CodecParameters,
    Cookie,
    ExtensionFeature,
    Extensions,
    Hello,
    Kick,
    KickFlags,
    RequestKeyframe,
    VideoCodec,
    ViewerCodecs,
    parse_control,
)

H264, HEVC, AV1 = VideoCodec.H264, VideoCodec.H265, VideoCodec.AV1
ALL = frozenset({H264, HEVC, AV1})


def choice() -> CodecChoice:
    return CodecChoice(DEFAULT_PREFERENCE, AV1)


def switches(out: Sequence[object]) -> list[VideoCodec]:
    return [o.codec for o in out if isinstance(o, SwitchCodec)]


def test_a_viewer_that_cannot_decode_the_codec_turns_it_at_once_and_its_leaving_brings_the_best_back_later() -> None:
    c = choice()
    assert switches(c.joined(1, ALL, 0.0)) == []  # AV1 suits it
    assert switches(c.joined(2, frozenset({H264, HEVC}), 1.0)) == [HEVC]  # the best both decode, at once
    assert c.target == HEVC and c.running == AV1  # a newcomer now is answered with HEVC
    c.switched(HEVC, HEVC, 1.05)
    assert switches(c.joined(3, frozenset({H264}), 2.0)) == [H264]
    c.switched(H264, H264, 2.05)
    assert switches(c.left(3, 3.0)) == [] and c.next_timer() == pytest.approx(2.05 + HOLD_S)  # not before the hold
    assert switches(c.handle_timer(2.05 + HOLD_S - 0.01)) == []
    assert switches(c.handle_timer(2.05 + HOLD_S)) == [HEVC]  # what 1 and 2 both decode
    c.switched(HEVC, HEVC, 7.1)
    assert switches(c.left(2, 8.0)) == [] and switches(c.handle_timer(7.1 + HOLD_S)) == [AV1]
    assert c.switches == 4


def test_a_second_newcomer_during_a_switch_turns_it_again_and_a_failed_switch_leaves_the_old_codec() -> None:
    c = choice()
    c.joined(1, ALL, 0.0)
    assert switches(c.joined(2, frozenset({H264, HEVC}), 1.0)) == [HEVC]
    assert switches(c.joined(3, frozenset({H264}), 1.01)) == [H264] and c.target == H264  # answered with H.264
    c.switched(HEVC, HEVC, 1.02)  # the first switch done: the second still to come
    assert c.running == HEVC and c.target == H264
    c.switched(H264, H264, 1.03)
    assert c.running == c.target == H264 and c.switching is None
    failed = choice()
    failed.joined(1, frozenset({HEVC}), 0.0)
    failed.switched(HEVC, AV1, 0.1)  # its encoder did not open: AV1 goes on, nothing is left waiting
    assert failed.running == failed.target == AV1 and failed.switching is None


def test_a_viewer_that_says_nothing_holds_the_codec_it_joined_with_while_it_watches() -> None:
    c = choice()
    c.joined(1, None, 0.0)  # a native PyroFling viewer: it read AV1 at its KICK and cannot follow a change
    assert switches(c.joined(2, frozenset({H264}), 1.0)) == [] and c.target == AV1  # it gets AV1 and says so
    assert switches(c.left(2, 2.0)) == []
    assert switches(c.left(1, 3.0)) == []  # nothing better than AV1 to come back to
    # When the viewer that held the codec leaves, the one that lacked it gets its own at once, hold or not.
    c = choice()
    c.joined(1, None, 0.0)
    c.joined(2, frozenset({H264}), 0.5)
    assert switches(c.left(1, 1.0)) == [H264]
    # A viewer that cannot follow, watching the H.264 a newcomer needed: H.264 stays after the newcomer leaves.
    c = choice()
    c.joined(1, frozenset({H264}), 0.0)
    c.switched(H264, H264, 0.1)
    c.joined(2, None, 1.0)
    c.left(1, 2.0)
    assert c.next_timer() is None and switches(c.handle_timer(100.0)) == [] and c.running == H264


def test_a_codec_whose_encoder_cannot_keep_up_is_given_up_for_the_next_every_viewer_decodes() -> None:
    c = choice()
    c.joined(1, ALL, 0.0)
    period = 1 / 60
    fast = [c.encoded(0.009, period, i * period) for i in range(PACE_FRAMES)]  # 9 ms a picture at 60 fps: fits
    assert all(out == [] for out in fast) and not c.too_slow
    slow = [o for i in range(PACE_FRAMES) for o in c.encoded(0.020, period, 1 + i * period)]  # 20 ms: never fits
    assert switches(slow) == [HEVC] and c.too_slow == {AV1}
    assert "cannot keep up" in slow[0].why and "20.0 ms" in slow[0].why  # type: ignore[attr-defined]
    c.switched(HEVC, HEVC, 2.0)
    assert switches(c.left(1, 3.0)) == [] and switches(c.handle_timer(100.0)) == []  # AV1 is not brought back
    # A viewer that holds the codec (a native one) keeps it, slow or not.
    held = choice()
    held.joined(1, None, 0.0)
    assert [o for i in range(PACE_FRAMES) for o in held.encoded(0.020, period, i * period)] == []
    assert held.running == AV1 and held.too_slow == {AV1}


def test_the_preference_is_what_the_host_can_encode_and_an_empty_one_is_refused() -> None:
    c = CodecChoice((H264,), H264)
    assert switches(c.joined(1, frozenset({AV1}), 0.0)) == [] and c.target == H264  # nothing it takes: it is told
    with pytest.raises(ValueError, match="no codec"):
        CodecChoice((), H264)


# -- the host's sessions --------------------------------------------------------------------------------------

PARAMS = CodecParameters(int(AV1), 1, 0, 60, 1, 320, 240, 0, 0)


def host() -> HostSessions:
    hs = HostSessions(
        make_packetizer=lambda c: Packetizer.for_cookie(c),
        keyframes=KeyframePolicy(),
        codec_choice=CodecChoice(DEFAULT_PREFERENCE, AV1),
    )
    hs.codec_parameters = PARAMS
    return hs


def join(hs: HostSessions, conn: int, codecs: frozenset[VideoCodec] | None, now: float) -> list[object]:
    """A viewer's handshake up to its KICK; what the KICK was answered with."""
    hs.open(conn, ("127.0.0.1", 50000 + conn), now, cookie=0x100 + conn)
    hs.control(conn, Hello(), now)
    features = ExtensionFeature.CODECS if codecs is not None else ExtensionFeature.NONE
    hs.control(conn, Extensions(1, int(features)), now)
    if codecs is not None:
        assert hs.control(conn, ViewerCodecs.of(codecs), now) == []
    hs.datagram(("127.0.0.1", 40000 + conn), bytes(Cookie(0x100 + conn)), now)
    return list(hs.control(conn, Kick(KickFlags.VIDEO), now))


def told(out: Sequence[object], conn: int) -> list[int]:
    msgs = [parse_control(o.data) for o in out if isinstance(o, SendControl) and o.conn_id == conn]
    return [m.video_codec for m in msgs if isinstance(m, CodecParameters)]


def test_the_host_answers_a_newcomer_with_the_codec_it_switches_to_and_tells_the_others_once_it_has() -> None:
    hs = host()
    assert told(join(hs, 1, ALL, 0.0), 1) == [AV1]
    out = join(hs, 2, frozenset({H264}), 1.0)
    assert told(out, 2) == [H264] and switches(out) == [H264]  # answered with what comes, before it comes
    assert join(hs, 3, None, 1.01) and hs.codec_choice is not None and hs.codec_choice.watchers[3] is None
    done = hs.codec_switched(H264, H264, 1.02)
    assert told(done, 1) == [H264] and told(done, 2) == [H264]  # the viewers that follow (CODECS) are told
    assert told(done, 3) == []  # a viewer that did not negotiate CODECS is never sent an unasked message
    assert all(c.awaiting_idr for c in (hs.connection(1), hs.connection(2)) if c is not None)  # the new key frame
    assert hs.codec_parameters is not None and hs.codec_parameters.video_codec == H264
    # A viewer that did not negotiate the feature cannot say what it decodes: its message is not taken.
    hs.open(9, ("127.0.0.1", 50009), 1.1, cookie=0x999)
    hs.control(9, Hello(), 1.1)
    hs.control(9, ViewerCodecs.of([H264]), 1.1)
    assert hs.connection(9).video_codecs is None  # type: ignore[union-attr]


def test_the_host_goes_back_to_the_best_codec_through_its_own_timer_when_the_viewer_that_needed_less_leaves() -> None:
    hs = host()
    join(hs, 1, ALL, 0.0)
    join(hs, 2, frozenset({H264}), 1.0)
    hs.codec_switched(H264, H264, 1.05)
    hs.close(2)
    due = hs.next_timer()
    assert due is not None and due <= 1.05 + HOLD_S
    assert switches(hs.handle_timer(1.05 + HOLD_S)) == [AV1]
    assert told(hs.codec_switched(AV1, AV1, 6.2), 1) == [AV1]


def test_a_switch_that_failed_tells_the_newcomer_the_codec_that_runs_and_holds_nobody_back() -> None:
    hs = host()
    join(hs, 1, ALL, 0.0)
    assert told(join(hs, 2, frozenset({H264, HEVC}), 1.0), 2) == [HEVC]
    viewers = [c for c in (hs.connection(1), hs.connection(2)) if c is not None]
    for c in viewers:
        c.awaiting_idr = False  # both streaming: each has had its key frame
    done = hs.codec_switched(HEVC, AV1, 1.02)  # x265 did not open: AV1 goes on
    assert told(done, 2) == [AV1] and told(done, 1) == [AV1]
    assert len(viewers) == 2 and not any(c.awaiting_idr for c in viewers)  # no one waits for a key frame


def test_a_host_with_one_codec_records_what_viewers_decode_and_changes_nothing() -> None:
    hs = HostSessions(make_packetizer=lambda c: Packetizer.for_cookie(c), keyframes=KeyframePolicy())
    hs.codec_parameters = replace(PARAMS, video_codec=int(H264))
    assert told(join(hs, 1, frozenset({AV1}), 0.0), 1) == [H264]
    assert hs.codec_switched(AV1, AV1, 1.0) == [] and hs.codec_parameters.video_codec == H264


# -- the viewer -----------------------------------------------------------------------------------------------


def viewer(granted: ExtensionFeature, codecs: frozenset[VideoCodec] | None = ALL) -> ViewerSession:
    s = ViewerSession(ProgressCounters(), ViewerSessionConfig(video_codecs=codecs))
    s.cookie, s.extensions = 7, granted
    return s


def said(out: Sequence[object]) -> list[ViewerCodecs]:
    msgs = [parse_control(o.data) for o in out if isinstance(o, ControlToHost)]
    return [m for m in msgs if isinstance(m, ViewerCodecs)]


def test_the_viewer_says_what_it_decodes_once_before_its_kick_and_only_to_a_host_that_granted_it() -> None:
    s = viewer(ExtensionFeature.CODECS)
    [msg] = said(s._kick(0.0))
    assert msg.codecs() == ALL
    assert said(s._kick(0.01)) == []  # once per connection, not at every KICK
    assert said(viewer(ExtensionFeature.NONE)._kick(0.0)) == []  # a native host: no extension message
    assert said(viewer(ExtensionFeature.CODECS, None)._kick(0.0)) == []


def test_a_new_codec_mid_stream_closes_the_picture_until_its_key_frame_and_asks_for_one_if_none_comes() -> None:
    s = viewer(ExtensionFeature.CODECS | ExtensionFeature.KEYFRAME_REQUEST)
    s.phase, s.codec_parameters = Phase.STREAMING, PARAMS
    s.gate.whole = True
    assert s.control(PARAMS, 1.0) == []  # the same codec again: nothing changes
    [changed] = s.control(replace(PARAMS, video_codec=int(H264)), 1.0)
    assert changed == CodecChanged(AV1, H264) and not s.gate.whole and s.codec_changes == 1
    assert s.next_timer() == pytest.approx(1.0 + s.config.keyframe_retry_s)
    timer = s.handle_timer(1.0 + s.config.keyframe_retry_s)
    asked = [parse_control(o.data) for o in timer if isinstance(o, ControlToHost)]
    assert any(isinstance(m, RequestKeyframe) for m in asked)  # the new codec's key frame did not come


def test_view_codecs_takes_codec_names_and_says_what_is_wrong_with_anything_else() -> None:
    from pyrofling.cli.view import codec_list

    assert codec_list("h264") == {H264} and codec_list("AV1, hevc") == {AV1, HEVC}
    for bad in ("", "vp9", "h264,mpeg2"):
        with pytest.raises(argparse.ArgumentTypeError, match="name codecs from h264, hevc, av1"):
            codec_list(bad)


def test_host_codec_picks_the_encoder_and_refuses_what_does_not_fit_together() -> None:
    from pyrofling.cli import build_parser
    from pyrofling.cli.host import host_config

    def config(*flags: str) -> object:
        return host_config(build_parser().parse_args(["host", *flags]))

    assert config("--codec", "hevc").encoder.encoder == "libx265"  # type: ignore[attr-defined]
    auto = config("--codec", "auto")
    assert auto.auto_codecs[0] == AV1 and auto.encoder.encoder == "libsvtav1"  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="does not make h264"):
        config("--codec", "h264", "--encoder", "libsvtav1")
    with pytest.raises(ValueError, match="cannot follow: name one codec"):
        config("--codec", "auto", "--record", "/tmp/never-written.mkv")
    assert config("--codec", "auto", "--web").auto_codecs[0] == AV1  # type: ignore[attr-defined]  # pages say


# -- browsers (host --web): their pages say what their WebCodecs decodes ------------------------------------------


def test_a_page_says_what_it_decodes_with_its_proof_and_a_page_that_says_nothing_or_nonsense_decodes_h264() -> None:
    from pyrofling.core.host.web_viewers import BrowserJoined, StreamInfo, WebConfig, WebViewers, page_codecs

    assert page_codecs(["h264", "av1"]) == frozenset({H264, AV1})
    assert page_codecs(["av1", "vp9", 7]) == frozenset({AV1})  # the names known here, whatever else it lists
    for nonsense in (None, "av1", {"av1": True}, [], ["vp9"], [None]):
        assert page_codecs(nonsense) == frozenset({H264})
    web = WebViewers(WebConfig("k" * 24), StreamInfo("av1", 320, 240, 30, 0.0))
    web.connected(1, 0.0)
    out = web.message(1, '{"type": "auth", "token": "' + "k" * 24 + '", "codecs": ["h264", "av1"]}', 0.0)
    assert BrowserJoined(1, frozenset({H264, AV1})) in out
    web.connected(2, 0.0)
    out = web.message(2, '{"type": "auth", "token": "' + web.token + '"}', 0.0)
    assert BrowserJoined(2, frozenset({H264})) in out


def test_a_browser_that_decodes_av1_keeps_it_one_that_does_not_turns_the_stream_and_every_page_is_told() -> None:
    import json

    from pyrofling.core.host.web_viewers import SendBinary, SendText, StreamInfo, WebConfig, WebViewers

    hs = host()
    web = WebViewers(WebConfig("k" * 24), StreamInfo("av1", 320, 240, 30, 0.0))
    hs.browsers = web

    def page_joins(client: int, codecs: list[str] | None, now: float) -> list[object]:
        web.connected(client, now)
        auth = {"type": "auth", "token": web.token, **({"codecs": codecs} if codecs is not None else {})}
        return list(hs.from_browsers(web.message(client, json.dumps(auth), now), now))

    first = page_joins(1, ["h264", "av1"], 0.0)
    assert (
        switches(first) == [] and json.loads(next(o for o in first if isinstance(o, SendText)).text)["codec"] == "av1"
    )
    second = page_joins(2, None, 1.0)  # a page that said nothing (an older one): H.264
    assert switches(second) == [H264]
    done = hs.codec_switched(H264, H264, 1.05)
    said = {o.client: json.loads(o.text) for o in done if isinstance(o, SendText)}
    assert said == {1: {"type": "codec", "codec": "h264"}, 2: {"type": "codec", "codec": "h264"}}
    assert web.info is not None and web.info.codec == "h264"  # a later page's hello names it
    # Nothing of the old codec after the change: each page gets its next picture at the new key frame.
    delta = web.video(b"delta", capture_us=1, pts_us=1, idr=False, backlog={}, now=1.06)
    assert not any(isinstance(o, SendBinary) for o in delta)
    key = web.video(b"key", capture_us=3, pts_us=3, idr=True, backlog={}, now=1.08)
    assert sorted(o.client for o in key if isinstance(o, SendBinary)) == [1, 2]
    hs.from_browsers(web.closed(2), 2.0)
    assert switches(hs.handle_timer(1.05 + HOLD_S)) == [AV1]  # the page that decoded only H.264 went
    assert [json.loads(o.text) for o in hs.codec_switched(AV1, AV1, 6.2) if isinstance(o, SendText)] == [
        {"type": "codec", "codec": "av1"}
    ]


def test_the_pace_rule_takes_the_median_against_its_share_of_a_frame() -> None:
    from pyrofling.core.host.codec_choice import PACE_SHARE, keeps_pace

    period = 1 / 60
    assert keeps_pace([0.001] * 5 + [0.1] * 4, period)  # a few slow pictures do not make a slow encoder
    assert not keeps_pace([0.1] * 5 + [0.001] * 4, period)
    assert keeps_pace([PACE_SHARE * period], period) and not keeps_pace([PACE_SHARE * period * 1.01], period)
    assert keeps_pace([], period)


@pytest.mark.io  # real encoders, a second of their time
def test_before_streaming_codec_auto_leaves_out_the_codecs_this_machine_cannot_encode_in_time() -> None:
    """Judged on pictures of the test scene before the host starts: at 320x240 and 30 fps every codec keeps up;
    asked for 1,000 pictures a second, AV1 and HEVC cannot (nothing encodes such a picture in 0.8 ms here), and
    the host starts on H.264, the codec it keeps whatever it costs."""
    from pyrofling.server.codec_pace import codecs_that_keep_pace
    from pyrofling.server.config import HostConfig
    from pyrofling.server.encoder import EncoderConfig

    small = EncoderConfig(encoder="libsvtav1", width=320, height=240, fps=30, bitrate_kbits=800)
    config = HostConfig(encoder=small, auto_codecs=DEFAULT_PREFERENCE)
    assert codecs_that_keep_pace(config) == config
    fast = replace(config, encoder=replace(small, fps=1000))
    kept = codecs_that_keep_pace(fast)
    assert kept.auto_codecs == (H264,) and kept.encoder.encoder == "libx264" and kept.encoder.fps == 1000
    one = HostConfig(encoder=replace(small, encoder="libx264"))
    assert codecs_that_keep_pace(one) is one  # no --codec auto: nothing judged
