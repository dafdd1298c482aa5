"""Browsers watching the host, the pure core: proof first, start at a key frame, never queue behind one."""

import json

from pyrofling.core.host.web_viewers import (
    CLOSE_BUSY,
    CLOSE_PASS_UNKNOWN,
    AcceptSession,
    BrowserInput,
    BrowserJoined,
    BrowserLeft,
    CloseClient,
    CloseSession,
    NewLinkKey,
    RequestKeyframe,
    SendBinary,
    SendText,
    StreamInfo,
    WebConfig,
    WebViewers,
)
from pyrofling.wire.browser import FLAG_IDR, MAX_DATAGRAM_BYTES, MEDIA_HEADER, SOUND_UNIT_LENGTH, STREAM_SEQ

TOKEN = "k" * 24
INFO = StreamInfo("h264", 1280, 720, 60, 1_700_000_000.0)


def admitted(web: WebViewers, client: int = 1, now: float = 0.0) -> list[object]:
    """Connect and prove the link's key as it is now (each link admits one browser: the next has a new key)."""
    assert web.connected(client, now) == []
    out = web.message(client, json.dumps({"type": "auth", "token": web.token}), now)
    return [o for o in out if not isinstance(o, NewLinkKey)]


def frame(web: WebViewers, *, idr: bool, backlog: dict[int, int] | None = None, n: int = 0) -> list[object]:
    return list(
        web.video(b"\x00\x00\x01\x65" + bytes([n]), capture_us=1000 + n, pts_us=2000 + n, idr=idr,
                  backlog=backlog or {}, now=n / 60)
    )  # fmt: skip


def test_the_right_token_gets_the_streams_parameters_and_asks_for_a_key_frame() -> None:
    web = WebViewers(WebConfig(TOKEN), INFO)
    hello, key, joined = admitted(web)
    assert isinstance(hello, SendText) and isinstance(key, RequestKeyframe) and joined == BrowserJoined(1)
    msg = json.loads(hello.text)
    assert isinstance(msg.pop("resume"), str)  # its tab's pass back in
    assert msg == {"type": "hello", "codec": "h264", "width": 1280, "height": 720, "fps": 60,
                   "clock_offset_ms": 1_700_000_000_000.0, "audio": None}  # fmt: skip
    assert web.watching == 1 and web.counters.admitted == 1


def test_no_byte_of_the_stream_before_the_token_and_a_wrong_or_missing_one_closes() -> None:
    web = WebViewers(WebConfig(TOKEN), INFO)
    messages: list[str | bytes] = [
        json.dumps({"type": "auth", "token": "x" * 24}),
        json.dumps({"type": "keyframe"}),  # no proof first
        json.dumps({"type": "auth"}),
        "not json",
        b"\x00binary",
        json.dumps(["auth", TOKEN]),
    ]
    for client, message in enumerate(messages, start=1):
        web.connected(client, 0.0)
        assert frame(web, idr=True) == []  # connected, not proved: nothing
        out = web.message(client, message, 0.0)
        assert len(out) == 1 and isinstance(out[0], CloseClient)
    assert web.watching == 0 and web.counters.admitted == 0
    assert web.counters.refused == {"wrong_token": 1, "no_token": 2, "malformed": 3}


def test_a_browser_that_never_proves_the_token_is_closed_at_its_deadline() -> None:
    web = WebViewers(WebConfig(TOKEN, auth_timeout_s=5.0), INFO)
    web.connected(1, 10.0)
    web.connected(2, 12.0)
    assert web.next_timer() == 15.0
    assert web.handle_timer(14.9) == []
    assert web.handle_timer(15.0) == [CloseClient(1, "the token was not proved in time")]
    assert web.next_timer() == 17.0


def test_the_browsers_deadlines_are_the_host_sessions_one_timer() -> None:
    """One road: with the browsers' core attached, the sessions' next deadline is theirs too, and the sessions'
    timer hands out their outputs beside its own (the web shell keeps no timer: tests/test_architecture.py)."""
    from pyrofling.core.host.keyframes import KeyframePolicy
    from pyrofling.core.host.packetizer import Packetizer
    from pyrofling.core.host.sessions import HostSessions

    hs = HostSessions(make_packetizer=Packetizer.for_cookie, keyframes=KeyframePolicy())
    assert hs.next_timer() is None
    web = hs.browsers = WebViewers(WebConfig(TOKEN, auth_timeout_s=5.0), INFO)
    web.connected(1, 10.0)
    assert hs.next_timer() == 15.0
    assert hs.handle_timer(14.9) == []
    assert hs.handle_timer(15.0) == [CloseClient(1, "the token was not proved in time")]
    assert hs.next_timer() is None


def test_one_encoded_unit_goes_to_the_viewers_and_the_browsers_through_the_sessions() -> None:
    """One road out: the host hands each unit to its sessions once; a proved browser's message comes back from
    that call, the viewers' datagrams from the pacer, and a browser whose bytes pile up is skipped there too."""
    from pyrofling.core.host.keyframes import KeyframePolicy
    from pyrofling.core.host.packetizer import MediaPacket, Packetizer
    from pyrofling.core.host.sessions import HostSessions
    from pyrofling.wire import StreamType

    hs = HostSessions(make_packetizer=Packetizer.for_cookie, keyframes=KeyframePolicy())
    assert hs.send_video(MediaPacket(b"\x00\x00\x01\x65", 2000, StreamType.VIDEO), idr=True, now=0.0) == []
    web = hs.browsers = WebViewers(WebConfig(TOKEN), INFO)
    admitted(web, 1)
    admitted(web, 2)
    unit = MediaPacket(b"\x00\x00\x01\x65\x01", 2000, StreamType.VIDEO, key_frame=True)
    out = hs.send_video(unit, idr=True, now=1.0, backlog={2: 10_000_000})
    sent = [o for o in out if isinstance(o, SendBinary)]
    assert [o.client for o in sent] == [1]  # the second's bytes pile up: skipped, not queued
    assert sent[0].data.endswith(b"\x00\x00\x01\x65\x01")
    sound = hs.send_audio(MediaPacket(b"opus!", 3000, StreamType.AUDIO), 1.0, {})
    assert [o.client for o in sound if isinstance(o, SendBinary)] == [1, 2]


def test_unproved_connections_are_capped() -> None:
    web = WebViewers(WebConfig(TOKEN, max_pending=2), INFO)
    assert web.connected(1, 0.0, "192.0.2.1") == [] and web.connected(2, 0.0, "192.0.2.2") == []
    assert web.connected(3, 0.0, "192.0.2.3") == [
        CloseClient(3, "too many connections waiting to prove the token", CLOSE_BUSY)
    ]
    web.closed(1)  # one of them went (or timed out): a friend with the token gets in
    assert isinstance(admitted(web, 4)[0], SendText)
    assert web.counters.refused == {"too_many_pending": 1}


def test_silent_connections_hold_no_friends_place_and_a_busy_page_is_never_told_its_pass_is_gone() -> None:
    """Row 1 of the web door's attacks: 16 connections that never prove anything, sustained, took every waiting
    slot, and the friend's page was closed as refused (1008), which made it delete its pass. Now each address
    prefix has a few slots: beyond them its own oldest goes, told busy (1013: the page keeps everything and comes
    back), so a friend elsewhere, or at the same address, always gets a slot and is admitted."""
    web = WebViewers(WebConfig(TOKEN), INFO)
    friend_pass = json.loads(next(o for o in admitted(web, 1) if isinstance(o, SendText)).text)["resume"]
    web.closed(1)  # the friend's tab went away for a moment
    told: list[CloseClient] = []
    for client in range(100, 116):  # 16 silent connections, from one address
        told += [o for o in web.connected(client, client / 100, "198.51.100.9") if isinstance(o, CloseClient)]
    assert len(told) == 16 - web.config.max_pending_per_prefix
    assert {o.code for o in told} == {CLOSE_BUSY} and not any(o.client >= 112 for o in told)  # the oldest went
    assert web.connected(2, 1.0, "203.0.113.5") == []  # the friend from elsewhere: a slot of its own
    # ...or from the silent connections' address: their oldest makes room
    assert web.connected(3, 1.0, "198.51.100.9") == [
        CloseClient(112, "too many connections waiting from this address", CLOSE_BUSY)
    ]
    for client in (2, 3):
        back = web.message(client, json.dumps({"type": "auth", "resume": friend_pass}), 1.0)
        assert BrowserJoined(client) in back
    assert web.counters.refused == {"too_many_pending": 13}


def test_a_browser_starts_at_an_idr_and_gets_every_unit_after_it() -> None:
    web = WebViewers(WebConfig(TOKEN), INFO)
    admitted(web)
    assert frame(web, idr=False, n=1) == []  # before the first IDR: skipped
    sent = frame(web, idr=True, n=2) + frame(web, idr=False, n=3)
    assert [type(s) for s in sent] == [SendBinary, SendBinary]
    assert all(isinstance(s, SendBinary) and s.channel == "socket" for s in sent)
    # Numbered, as on a WebTransport session: the page's arrival reports name them.
    numbered = [(STREAM_SEQ.unpack(s.data[: STREAM_SEQ.size]), s.unit) for s in sent if isinstance(s, SendBinary)]
    assert numbered == [((b"S", 0), 0), ((b"S", 1), 1)]
    first = sent[0]
    assert isinstance(first, SendBinary)
    message = first.data[STREAM_SEQ.size :]
    tag, flags, capture, pts = MEDIA_HEADER.unpack(message[: MEDIA_HEADER.size])
    assert (tag, flags, capture, pts) == (b"V", FLAG_IDR, 1002, 2002)
    assert message[MEDIA_HEADER.size :] == b"\x00\x00\x01\x65\x02"
    assert web.counters.frames_sent == 2 and web.counters.frames_skipped == 1


def test_a_browser_whose_bytes_pile_up_skips_to_the_next_idr_and_one_is_asked_for() -> None:
    web = WebViewers(WebConfig(TOKEN, max_backlog_bytes=1000), INFO)
    admitted(web, 1)
    admitted(web, 2)
    assert len(frame(web, idr=True)) == 2
    out = frame(web, idr=False, backlog={1: 5000, 2: 10}, n=1)
    assert [o.client for o in out if isinstance(o, SendBinary)] == [2]  # the other browser is not held up
    assert RequestKeyframe() in out
    later = frame(web, idr=False, backlog={}, n=3)
    assert [o.client for o in later if isinstance(o, SendBinary)] == [2]  # 1 waits for the IDR
    assert {o.client for o in frame(web, idr=True, n=4) if isinstance(o, SendBinary)} == {1, 2}


def test_a_decoder_that_asks_for_a_key_frame_waits_for_it() -> None:
    web = WebViewers(WebConfig(TOKEN), INFO)
    admitted(web)
    frame(web, idr=True)
    assert web.message(1, json.dumps({"type": "keyframe"}), 1.0) == [RequestKeyframe()]
    assert frame(web, idr=False, n=1) == []
    assert len(frame(web, idr=True, n=2)) == 1


def test_no_more_browsers_than_the_cap_and_none_before_the_stream_exists() -> None:
    web = WebViewers(WebConfig(TOKEN, max_browsers=1), INFO)
    admitted(web, 1)
    web.connected(2, 0.0)
    link = web.token
    out = web.message(2, json.dumps({"type": "auth", "token": link}), 0.0)
    assert isinstance(out[0], CloseClient) and "already streams" in out[0].reason
    assert web.token == link  # a browser turned away did not spend the link
    early = WebViewers(WebConfig(TOKEN))
    early.connected(1, 0.0)
    out = early.message(1, json.dumps({"type": "auth", "token": TOKEN}), 0.0)
    assert isinstance(out[0], CloseClient) and "not streaming yet" in out[0].reason


def test_a_proved_browsers_pad_and_keys_come_out_as_the_wire_states_and_it_leaves_as_a_player() -> None:
    from pyrofling.wire import GamepadButton, GamepadState, InputState, key_bitmap

    web = WebViewers(WebConfig(TOKEN), INFO)
    admitted(web)
    pad = GamepadState(seq=7, buttons=int(GamepadButton.SOUTH), lx=-32767, rz=255, hat_y=-1)
    keys = InputState(seq=3, buttons=1, flags=1, keys=key_bitmap({30}), dx_total=-5, abs_x=65535)
    assert web.message(1, b"P" + bytes(pad)[-16:], 0.0) == [BrowserInput(1, pad)]
    assert web.message(1, b"I" + bytes(keys)[-58:], 0.0) == [BrowserInput(1, keys)]
    assert web.counters.input_states == 2
    # A truncated or unknown message closes the browser, and what it held lets go.
    out = web.message(1, b"I" + bytes(keys)[-58:-1], 0.0)
    assert isinstance(out[0], CloseClient) and out[1] == BrowserLeft(1)
    assert web.closed(1) == []  # already gone


def test_input_before_the_key_is_proved_is_never_taken() -> None:
    from pyrofling.wire import GamepadState

    web = WebViewers(WebConfig(TOKEN), INFO)
    web.connected(1, 0.0)
    out = web.message(1, b"P" + bytes(GamepadState(buttons=1))[-16:], 0.0)
    assert len(out) == 1 and isinstance(out[0], CloseClient) and web.counters.input_states == 0
    admitted(web, 2)
    assert web.closed(2) == [BrowserLeft(2)]


def test_sound_goes_to_proved_browsers_whose_bytes_are_not_piling_up() -> None:

    info = StreamInfo("h264", 1280, 720, 60, 0.0, "opus", 48_000, 2)
    web = WebViewers(WebConfig(TOKEN, max_backlog_bytes=1000), info)
    hello = admitted(web, 1)[0]
    assert isinstance(hello, SendText)
    assert json.loads(hello.text)["audio"] == {"codec": "opus", "rate": 48_000, "channels": 2}
    admitted(web, 2)
    web.connected(3, 0.0)  # not proved: no sound either
    out = web.audio(b"opus!", pts_us=5000, backlog={2: 5000})
    assert [o.client for o in out if isinstance(o, SendBinary)] == [1]
    sent = out[0]
    assert isinstance(sent, SendBinary)
    assert MEDIA_HEADER.unpack(sent.data[: MEDIA_HEADER.size]) == (b"A", 0, 5000, 5000)
    assert sent.data[MEDIA_HEADER.size :] == b"opus!" and web.counters.audio_sent == 1


def test_a_browser_plays_by_the_host_sessions_rules_and_lets_go_when_it_leaves() -> None:
    """The sessions' side: a browser that proved the key gets the pad and the keyboard as an authenticated viewer
    would; what it held is released when it goes; a browser that never joined is not heard."""
    from pyrofling.core.host.keyframes import KeyframePolicy
    from pyrofling.core.host.packetizer import Packetizer
    from pyrofling.core.host.sessions import HostSessionConfig, HostSessions
    from pyrofling.core.host.state import GamepadInput, KeyboardMouseInput
    from pyrofling.wire import GamepadButton, GamepadState, InputState, key_bitmap

    hs = HostSessions(make_packetizer=Packetizer.for_cookie, keyframes=KeyframePolicy(), config=HostSessionConfig())
    assert hs.browser_input(5, GamepadState(seq=1, buttons=1), 0.0) == []  # never joined
    assert hs.discarded["browser_not_playing"] == 1
    hs.browser_joined(1, 0.0)
    pad = hs.browser_input(1, GamepadState(seq=1, buttons=int(GamepadButton.SOUTH)), 0.1)
    assert any(isinstance(o, GamepadInput) for o in pad)
    keys = hs.browser_input(1, InputState(seq=1, flags=2, keys=key_bitmap({30})), 0.1)  # A held
    typed = [o for o in keys if isinstance(o, KeyboardMouseInput)]
    assert typed and (1, 30, 1) in typed[0].update.keyboard
    left = hs.browser_left(1)
    released = [o for o in left if isinstance(o, KeyboardMouseInput)]
    assert released and (1, 30, 0) in released[0].update.keyboard  # nothing stays held
    assert any(isinstance(o, GamepadInput) for o in left)
    assert hs.browser_left(1) == []


def test_the_hosts_password_typed_into_the_page_admits_and_wrong_ones_count_against_the_address() -> None:
    from pyrofling.core.secure import FailureLimiter

    limiter = FailureLimiter()
    web = WebViewers(WebConfig(TOKEN, password="open sesame"), INFO, limiter=limiter)
    web.connected(1, 0.0, "192.0.2.7")
    out = web.message(1, json.dumps({"type": "auth", "code": "open sesame"}), 0.0)
    assert isinstance(out[0], SendText) and BrowserJoined(1) in out
    guesses = 0
    while True:  # a guesser from one address is blocked as a viewer guessing codes would be
        guesses += 1
        web.connected(100 + guesses, 1.0, "192.0.2.9")
        out = web.message(100 + guesses, json.dumps({"type": "auth", "code": f"guess {guesses}"}), 1.0)
        assert isinstance(out[0], CloseClient)
        if "too many wrong passwords" in out[0].reason:
            break
        assert out[0].reason == "wrong password" and guesses < 50
    assert limiter.blocked("192.0.2.9", 1.0) and web.counters.refused["wrong_code"] == guesses - 1
    web.connected(999, 1.0, "192.0.2.9")  # blocked: even the right password is not checked now
    assert isinstance(web.message(999, json.dumps({"type": "auth", "code": "open sesame"}), 1.0)[0], CloseClient)
    # A host without a password takes none from the page.
    bare = WebViewers(WebConfig(TOKEN), INFO)
    bare.connected(1, 0.0, "192.0.2.7")
    out = bare.message(1, json.dumps({"type": "auth", "code": ""}), 0.0)
    assert isinstance(out[0], CloseClient) and "no password" in out[0].reason


def test_the_hosts_one_time_pairing_code_typed_into_the_page_pairs_that_browser_once() -> None:
    """A friend types the pairing code the host shows (no link needed): admitted, the code spent (the host shows
    the next), the browser kept as a link's would be; whoever saw the code typed gets nothing with it, and a code
    left unused runs out."""
    from collections import Counter

    from pyrofling.core.host.auth import HostAuth
    from pyrofling.core.host.state import HostSessionConfig, PairingCodeSpent
    from pyrofling.core.host.web_viewers import RememberBrowser

    auth = HostAuth(HostSessionConfig(auth_secret="4821-7730", one_time_code=True), Counter(), random_bytes=bytes)
    kept = _KeptPasses()
    web = WebViewers(WebConfig(TOKEN), INFO, limiter=auth.limiter, remembered=kept, pairing_codes=auth)
    web.connected(1, 0.0, "192.0.2.7")
    out = web.message(1, json.dumps({"type": "auth", "code": "4821-7730"}), 0.0)
    assert PairingCodeSpent("a browser at 192.0.2.7 used it") in out and BrowserJoined(1) in out
    hello = json.loads(next(o for o in out if isinstance(o, SendText)).text)
    assert hello["paired"] is True and hello["resume"]  # the page comes back with its pass, not the spent code
    assert any(isinstance(o, RememberBrowser) for o in out)  # and the host's later runs admit it
    # Spent: the same code from someone who saw it typed is a wrong guess, counted against their address.
    web.connected(2, 1.0, "192.0.2.9")
    out = web.message(2, json.dumps({"type": "auth", "code": "4821-7730"}), 1.0)
    assert out == [CloseClient(2, "wrong pairing code (each works once: the host shows the next)")]
    assert web.counters.refused["wrong_code"] == 1 and auth.code is None
    # The next code the host shows admits the next browser, once.
    auth.issue_code("5190-2264", now=2.0)
    web.connected(3, 2.0, "192.0.2.8")
    assert BrowserJoined(3) in web.message(3, json.dumps({"type": "auth", "code": "5190-2264"}), 2.0)
    # A code not used within its lifetime: refused, and the host is told to show the next.
    auth.issue_code("7000-1111", now=3.0)
    web.connected(4, 3.0 + 601, "192.0.2.8")
    out = web.message(4, json.dumps({"type": "auth", "code": "7000-1111"}), 3.0 + 601)
    assert PairingCodeSpent("it was not used within 10 minutes") in out
    assert any(isinstance(o, CloseClient) for o in out) and not any(isinstance(o, BrowserJoined) for o in out)


CERT = "ab" * 32


def offered(web: WebViewers, client: int = 1, now: float = 0.0) -> str:
    """Admit a browser on a host that offers WebTransport; the ticket its hello carries."""
    hello, joined = admitted(web, client, now)
    assert isinstance(hello, SendText) and joined == BrowserJoined(client)
    offer = json.loads(hello.text)["webtransport"]
    assert offer["cert_sha256"] == CERT
    return str(offer["ticket"])


def test_webtransport_a_session_with_the_hellos_one_time_ticket_carries_the_pictures_as_numbered_streams() -> None:
    made = iter(range(100))
    web = WebViewers(WebConfig(TOKEN), INFO, webtransport_cert=CERT, make_ticket=lambda: f"secret-{next(made)}")
    ticket = offered(web)
    assert ticket.startswith("secret-")
    assert frame(web, idr=True) == []  # no picture until its session opened (or it said it has none)
    assert web.session_opened(7, "guess") == [CloseSession(7, "no browser waits with that ticket")]
    assert web.session_opened(7, ticket) == [AcceptSession(7, 1), RequestKeyframe()]
    assert web.session_opened(8, ticket)[0] == CloseSession(8, "no browser waits with that ticket")  # spent
    assert web.counters.refused == {"wrong_ticket": 2}
    assert frame(web, idr=False, n=1) == []  # the session starts at a key frame
    sent = [o for n in (2, 3, 4) for o in frame(web, idr=n == 2, n=n)]
    assert all(isinstance(o, SendBinary) and o.channel == "stream" for o in sent)
    numbers = [STREAM_SEQ.unpack(o.data[: STREAM_SEQ.size]) for o in sent if isinstance(o, SendBinary)]
    assert numbers == [(b"S", 0), (b"S", 1), (b"S", 2)]
    first = sent[0]
    assert isinstance(first, SendBinary)
    header = MEDIA_HEADER.unpack(first.data[STREAM_SEQ.size : STREAM_SEQ.size + MEDIA_HEADER.size])
    assert header == (b"V", FLAG_IDR, 1002, 2002)


def test_webtransport_sound_goes_as_datagrams_and_input_datagrams_play_while_bad_ones_are_counted() -> None:
    from pyrofling.wire import GamepadState

    web = WebViewers(WebConfig(TOKEN), INFO, webtransport_cert=CERT)
    web.session_opened(3, offered(web))
    small = web.audio(b"x" * 100, pts_us=1, backlog={})
    large = web.audio(b"x" * MAX_DATAGRAM_BYTES, pts_us=1_000_000, backlog={})  # after a pause: alone too
    assert [o.channel for o in small + large if isinstance(o, SendBinary)] == ["datagram", "stream"]
    state = GamepadState(seq=4, buttons=1)
    payload = b"P" + bytes(state)[-GamepadState.PAYLOAD.size :]  # the tag, then the wire payload
    out = web.session_datagram(3, payload)
    assert out == [BrowserInput(1, state)]
    assert web.session_datagram(3, b"P\x00") == [] and web.session_datagram(3, b"?" * 17) == []
    assert web.session_datagram(99, payload) == []  # no such session
    assert web.counters.datagrams_dropped == 3 and web.counters.input_states == 1


def sound_units(group: bytes) -> list[int]:
    """The pts of each unit in a session's sound group (b"G", then each unit's length and its "A" message)."""

    assert group[:1] == b"G"
    pts, at = [], 1
    while at < len(group):
        (n,) = SOUND_UNIT_LENGTH.unpack_from(group, at)
        tag, _, _, unit_pts = MEDIA_HEADER.unpack_from(group, at + SOUND_UNIT_LENGTH.size)
        assert tag == b"A"
        pts.append(unit_pts)
        at += SOUND_UNIT_LENGTH.size + n
    assert at == len(group)
    return pts


def test_a_sessions_sound_goes_in_groups_of_20_ms_while_a_websocket_gets_each_unit_at_once() -> None:
    """5 ms units: the session gets four in each datagram (the page plays 20 ms blocks), the WebSocket each one
    as it comes; 10 and 20 ms units group by the same span; a pause sends what was held and starts over."""
    web = WebViewers(WebConfig(TOKEN), INFO, webtransport_cert=CERT)
    web.session_opened(3, offered(web, 1))
    offered(web, 2)
    web.message(2, json.dumps({"type": "websocket"}), 0.0)  # 2 has no WebTransport
    sent: dict[int, list[bytes]] = {1: [], 2: []}

    def play(pts_us: int) -> None:
        for o in web.audio(b"opus", pts_us=pts_us, backlog={}):
            assert isinstance(o, SendBinary)
            assert o.channel == ("datagram" if o.client == 1 else "socket")
            sent[o.client].append(o.data)

    for pts in range(0, 50_000, 5_000):  # 10 units of 5 ms
        play(pts)
    assert len(sent[2]) == 10  # each at once
    groups = [[0], [5_000, 10_000, 15_000, 20_000], [25_000, 30_000, 35_000, 40_000]]  # the first alone
    assert [sound_units(g) for g in sent[1]] == groups
    play(50_000)  # the next group is not whole yet: held
    assert len(sent[1]) == 3
    play(900_000)  # a pause: what was held goes as it is, and the new unit alone (its length is not known)
    assert [sound_units(g) for g in sent[1][3:]] == [[45_000, 50_000], [900_000]]
    sent[1].clear()
    for pts in range(910_000, 990_000, 10_000):  # 10 ms units: two a group
        play(pts)
    pairs = [[910_000, 920_000], [930_000, 940_000], [950_000, 960_000], [970_000, 980_000]]
    assert [sound_units(g) for g in sent[1]] == pairs
    assert web.counters.audio_sent == 2 * (10 + 1 + 1 + 8)  # units, to each browser


def test_a_browser_without_webtransport_goes_on_over_its_websocket_from_a_key_frame() -> None:
    web = WebViewers(WebConfig(TOKEN, auth_timeout_s=5.0), INFO, webtransport_cert=CERT)
    ticket = offered(web, 1)
    offered(web, 2)
    # 1 says its WebTransport failed: the WebSocket, from the next key frame; its ticket no longer opens anything.
    assert web.message(1, json.dumps({"type": "websocket"}), 0.5) == [RequestKeyframe()]
    assert web.session_opened(4, ticket)[0] == CloseSession(4, "no browser waits with that ticket")
    assert [o.client for o in frame(web, idr=True) if isinstance(o, SendBinary)] == [1]
    # 2 says nothing: at the deadline it gets the WebSocket too.
    assert web.next_timer() == 5.0
    assert web.handle_timer(5.0) == [RequestKeyframe()]
    assert {(o.client, o.channel) for o in frame(web, idr=True, n=1) if isinstance(o, SendBinary)} == {
        (1, "socket"),
        (2, "socket"),
    }
    assert web.counters.websocket_fallbacks == 2 and web.next_timer() is None


def test_a_closed_session_falls_back_to_the_websocket_and_a_closed_page_closes_its_session() -> None:
    web = WebViewers(WebConfig(TOKEN), INFO, webtransport_cert=CERT)
    web.session_opened(5, offered(web, 1))
    web.session_opened(6, offered(web, 2))
    assert web.session_closed(5) == [RequestKeyframe()]
    assert {(o.client, o.channel) for o in frame(web, idr=True) if isinstance(o, SendBinary)} == {
        (1, "socket"),
        (2, "stream"),
    }
    assert web.session_closed(5) == []  # once
    out = web.message(2, "not json", 1.0)  # a misbehaving page is closed, and its session with it
    assert CloseSession(6, "malformed message") in out and BrowserLeft(2) in out
    assert web.session_datagram(6, b"P" + bytes(16)) == []


def _browser_on_a_link(
    link_bps: float, policy: str, seconds: float = 4.0, *, whole_messages: bool = False
) -> tuple[list[int], dict[str, object]]:
    """A browser that plays, its pictures through a bottleneck of ``link_bps`` (a queue that never drops), its page
    reporting their arrivals every 50 ms on its own clock: the encoder bitrates the host set, and its summary.
    ``whole_messages``: as over a WebSocket, which hands the page each picture whole: it began and finished
    arriving when it came."""
    import math

    from pyrofling.core.host.congestion import RateConfig
    from pyrofling.core.host.keyframes import KeyframePolicy
    from pyrofling.core.host.packetizer import Packetizer
    from pyrofling.core.host.sessions import HostSessions
    from pyrofling.core.host.state import SetBitrate
    from pyrofling.wire import ArrivalSample, RateFeedback

    hs = HostSessions(
        make_packetizer=Packetizer.for_cookie,
        keyframes=KeyframePolicy(),
        rate=RateConfig(ceiling_bps=10e6, floor_bps=1e6),
        rate_policy=policy,
    )
    hs.browser_joined(1, 0.0)
    bitrate, free_s, page_clock = 10e6, 0.0, 5000.0  # the page's clock is not the host's
    arrived: list[tuple[float, ArrivalSample, int]] = []
    bitrates: list[int] = []
    for frame in range(int(seconds * 60)):
        now = frame / 60
        size = int(bitrate / 60 / 8)
        hs.browser_sent(1, frame, size, now)
        hs.browser_sent(1, None, 240, now)  # its sound
        start = max(now + 0.004, free_s)
        free_s = start + size * 8 / link_bps
        us = lambda t: int((t + page_clock) * 1e6) & 0xFFFFFFFF  # noqa: E731
        began = us(free_s) if whole_messages else us(start)
        arrived.append((free_s, ArrivalSample(frame & 0x3FFF, math.ceil(size / 1300), began, us(free_s)), size))
        if frame % 3 == 2:
            done = [a for a in arrived if a[0] <= now]
            arrived = [a for a in arrived if a[0] > now]
            report = RateFeedback.build(frame, 50_000, sum(a[2] for a in done), [a[1] for a in done])
            out = hs.browser_rate_feedback(1, report, lost=0, sent=40, now=now)
            for o in out:
                if isinstance(o, SetBitrate):
                    bitrate = o.bits_per_s
                    bitrates.append(o.bits_per_s)
    return bitrates, hs.rate_summary()


def test_a_browsers_narrow_link_is_heard_by_the_rate_control_as_a_viewers_is() -> None:
    bitrates, summary = _browser_on_a_link(6e6, "player")
    assert bitrates and bitrates[-1] < 6e6  # the encoder came down to what the page's link carries
    links = summary["links"]
    assert isinstance(links, dict) and "browser @ 1" in links
    # A wide link leaves the ceiling alone, and so does the fixed policy, as PyroFling's.
    assert _browser_on_a_link(50e6, "player")[0] == [] and _browser_on_a_link(6e6, "fixed")[0] == []


def test_a_browser_on_its_websocket_is_heard_too_though_it_sees_each_picture_only_whole() -> None:
    bitrates, _summary = _browser_on_a_link(6e6, "player", whole_messages=True)
    assert bitrates and bitrates[-1] < 6e6
    assert _browser_on_a_link(50e6, "player", whole_messages=True)[0] == []


def test_a_pages_arrival_report_is_read_as_rate_feedback_and_a_bad_one_is_dropped() -> None:
    from pyrofling.core.host.web_viewers import BrowserRateReport
    from pyrofling.wire import ArrivalSample, RateFeedback

    web = WebViewers(WebConfig(TOKEN), INFO, webtransport_cert=CERT)
    web.session_opened(3, offered(web))
    report = RateFeedback.build(9, 50_000, 42_000, [ArrivalSample(7, 17, 1000, 2000)])
    payload = bytes(report)[-RateFeedback.PAYLOAD.size :]
    assert web.session_datagram(3, b"R" + payload) == [BrowserRateReport(1, report)]
    too_many = bytearray(payload)
    too_many[12:14] = (9).to_bytes(2, "little")  # nine samples claimed, eight fit
    assert web.session_datagram(3, b"R" + bytes(too_many)) == []
    assert web.session_datagram(3, b"R" + payload[:-1]) == []
    assert web.counters.rate_reports == 1 and web.counters.datagrams_dropped == 2


def test_a_pages_arrival_report_over_its_websocket_is_rate_feedback_and_a_bad_one_closes_it() -> None:
    """A page without a session reports over its WebSocket: the same report; a malformed one is a broken page (or
    not a page), and the reliable WebSocket closes as for a malformed input message.  Before the key, nothing."""
    from pyrofling.core.host.web_viewers import BrowserRateReport
    from pyrofling.wire import ArrivalSample, RateFeedback

    report = RateFeedback.build(3, 50_000, 30_000, [ArrivalSample(0, 12, 5000, 5000)])
    message = b"R" + bytes(report)[-RateFeedback.PAYLOAD.size :]
    web = WebViewers(WebConfig(TOKEN), INFO)
    assert web.connected(2, 0.0) == []
    assert web.message(2, message, 0.0) == [CloseClient(2, "malformed message")]  # not proved: no report taken
    admitted(web)
    assert web.message(1, message, 0.1) == [BrowserRateReport(1, report)]
    assert web.message(1, message[:-1], 0.2) == [CloseClient(1, "malformed rate report"), BrowserLeft(1)]
    assert web.counters.rate_reports == 1


def test_a_proved_page_times_its_clock_to_the_hosts_and_nothing_else_is_answered() -> None:
    """``ping`` with the page's time: ``pong`` with it and the host's clock (its capture stamps' clock) in µs; a
    ping without a finite time is ignored, and one before the key is a broken proof."""
    web = WebViewers(WebConfig(TOKEN), INFO)
    assert web.connected(2, 0.0) == []
    assert web.message(2, json.dumps({"type": "ping", "t": 1.5}), 0.0)[0] == CloseClient(
        2, "the first message must prove the token"
    )
    admitted(web)
    (pong,) = web.message(1, json.dumps({"type": "ping", "t": 1234.5}), 7.25)
    assert isinstance(pong, SendText) and json.loads(pong.text) == {"type": "pong", "t": 1234.5, "host_us": 7_250_000}
    for bad in ('"soon"', "NaN", "Infinity", "null"):
        assert web.message(1, '{"type": "ping", "t": ' + bad + "}", 8.0) == []


def test_a_game_shaking_the_pad_a_browser_holds_reaches_that_page_only() -> None:
    from pyrofling.core.host.keyframes import KeyframePolicy
    from pyrofling.core.host.packetizer import Packetizer
    from pyrofling.core.host.sessions import HostSessions
    from pyrofling.core.host.state import BrowserRumble
    from pyrofling.core.input.pad.rumble import RumbleCommand
    from pyrofling.wire import GamepadButton, GamepadState

    hs = HostSessions(make_packetizer=Packetizer.for_cookie, keyframes=KeyframePolicy())
    hs.browser_joined(4, 0.0)
    assert hs.rumble(1, RumbleCommand(40_000, 20_000, 300)) == []  # nobody holds the pad yet
    hs.browser_input(4, GamepadState(seq=1, buttons=int(GamepadButton.SOUTH)), 0.1)  # the page takes it
    assert hs.rumble(1, RumbleCommand(40_000, 20_000, 300)) == [BrowserRumble(4, 40_000, 20_000, 300)]
    hs.browser_left(4)
    assert hs.rumble(1, RumbleCommand(1, 1, 1)) == []

    web = WebViewers(WebConfig(TOKEN), INFO)
    web.connected(2, 0.0)  # not proved: told nothing
    assert web.rumble(2, 1, 1, 1) == []
    admitted(web, 1)
    (told,) = web.rumble(1, 40_000, 20_000, 300)
    assert isinstance(told, SendText) and told.client == 1
    assert json.loads(told.text) == {"type": "rumble", "strong": 40_000, "weak": 20_000, "duration_ms": 300}


def test_a_link_admits_one_browser_whose_tab_comes_back_with_its_pass_and_the_next_link_has_a_new_key() -> None:
    made = iter(range(100))
    web = WebViewers(WebConfig(TOKEN), INFO, make_ticket=lambda: f"secret-{next(made)}")
    web.connected(1, 0.0)
    out = web.message(1, json.dumps({"type": "auth", "token": TOKEN}), 0.0)
    new_link = out[0]
    assert isinstance(new_link, NewLinkKey) and new_link.token != TOKEN and web.token == new_link.token
    hello = out[1]
    assert isinstance(hello, SendText)
    resume = json.loads(hello.text)["resume"]
    # Someone else with the same link (it leaked): refused, and told why; the new link admits the next friend.
    web.connected(2, 0.0)
    (refused, *_) = web.message(2, json.dumps({"type": "auth", "token": TOKEN}), 0.0)
    assert isinstance(refused, CloseClient) and refused.reason.startswith("this link was used already")
    assert isinstance(admitted(web, 3)[0], SendText)
    # The first tab reconnects with its pass (no new link spent); a made-up pass, or two proofs at once, do not.
    web.closed(1)
    web.connected(4, 1.0)
    back = web.message(4, json.dumps({"type": "auth", "resume": resume}), 1.0)
    assert [type(o) for o in back] == [SendText, RequestKeyframe, BrowserJoined]
    web.connected(5, 1.0)
    (wrong, *_) = web.message(5, json.dumps({"type": "auth", "resume": "secret-guess"}), 1.0)
    assert isinstance(wrong, CloseClient)
    web.connected(6, 1.0)
    (both, *_) = web.message(6, json.dumps({"type": "auth", "resume": resume, "token": web.token}), 1.0)
    assert isinstance(both, CloseClient)
    assert web.counters.refused == {"link_spent": 1, "wrong_resume": 1, "no_token": 1}


def test_a_run_long_link_admits_every_browser_that_has_it() -> None:
    web = WebViewers(WebConfig(TOKEN, link_once=False), INFO)
    for client in (1, 2, 3):
        web.connected(client, 0.0)
        out = web.message(client, json.dumps({"type": "auth", "token": TOKEN}), 0.0)
        assert not any(isinstance(o, NewLinkKey | CloseClient) for o in out)
    assert web.watching == 3 and web.token == TOKEN


class _KeptPasses:
    """The host's store of browsers' passes (their SHA-256), as the pairing file keeps them."""

    def __init__(self) -> None:
        self.digests: set[str] = set()

    def knows_browser(self, pass_sha256: str) -> bool:
        return pass_sha256 in self.digests


def test_a_browsers_pass_is_kept_as_its_hash_and_a_later_run_of_the_host_admits_it() -> None:
    from pyrofling.core.host.web_viewers import RememberBrowser, pass_digest

    kept = _KeptPasses()
    first = WebViewers(WebConfig(TOKEN), INFO, remembered=kept)
    assert first.connected(1, 0.0, "192.0.2.7") == []
    out = first.message(1, json.dumps({"type": "auth", "token": first.token}), 0.0)
    hello = next(o for o in out if isinstance(o, SendText))
    given = json.loads(hello.text)["resume"]
    (keep,) = [o for o in out if isinstance(o, RememberBrowser)]
    assert keep == RememberBrowser(pass_digest(given), "browser at 192.0.2.7", "link", "192.0.2.7")
    assert given not in keep.pass_sha256
    kept.digests.add(keep.pass_sha256)
    assert first.connected(3, 1.0) == []  # its reload, this run
    assert any(isinstance(o, BrowserJoined) for o in first.message(3, json.dumps({"type": "auth", "resume": given}), 1))

    later = WebViewers(WebConfig("n" * 24), INFO, remembered=kept)  # the host's next run: a new link, no passes
    assert later.connected(1, 5.0) == []
    out = later.message(1, json.dumps({"type": "auth", "resume": given}), 5.0)
    assert any(isinstance(o, BrowserJoined) for o in out) and not any(isinstance(o, RememberBrowser) for o in out)
    # A pass the host does not keep (never given, or revoked: at once, in the run that gave it too) opens nothing.
    kept.digests.clear()
    refused = [CloseClient(2, "a pass the host does not keep: open a new link from the host", CLOSE_PASS_UNKNOWN)]
    for run in (later, first):
        assert run.connected(2, 6.0) == []
        assert run.message(2, json.dumps({"type": "auth", "resume": given}), 6.0) == refused
    # A host that keeps no passes asks to keep none.
    alone = WebViewers(WebConfig(TOKEN), INFO)
    assert not any(isinstance(o, RememberBrowser) for o in admitted(alone))


def test_a_pass_the_store_would_not_keep_opens_for_this_run_only() -> None:
    """The store keeps a few passes per address and 64 in all, and pushes none out for a newer one: a browser
    admitted beyond that gets a pass all the same, good until the host stops."""
    from pyrofling.core.host.web_viewers import RememberBrowser

    kept = _KeptPasses()
    web = WebViewers(WebConfig(TOKEN), INFO, remembered=kept)
    out = admitted(web, 1)
    given = json.loads(next(o for o in out if isinstance(o, SendText)).text)["resume"]
    (keep,) = [o for o in out if isinstance(o, RememberBrowser)]
    web.kept_for_this_run(keep.pass_sha256)  # what the shell says when the store declined it
    web.connected(2, 1.0)
    assert BrowserJoined(2) in web.message(2, json.dumps({"type": "auth", "resume": given}), 1.0)
    later = WebViewers(WebConfig("n" * 24), INFO, remembered=kept)  # the host's next run
    later.connected(1, 5.0)
    (refused, *_) = later.message(1, json.dumps({"type": "auth", "resume": given}), 5.0)
    assert isinstance(refused, CloseClient) and refused.code == CLOSE_PASS_UNKNOWN


def test_a_page_says_its_window_and_the_desktop_follows_it_also_with_only_browsers_watching() -> None:
    """``{"type": "display", ...}`` from an admitted page is its VIEWER_DISPLAY; nonsense is counted and ignored. The
    host's sessions follow it as a viewer's, and a change deferred by the quarter-second rule comes at its timer
    even when no UDP viewer is connected (the sessions' timer is the browsers' too)."""
    from pyrofling.core.host.display import DisplayMode, FollowDisplay
    from pyrofling.core.host.keyframes import KeyframePolicy
    from pyrofling.core.host.packetizer import Packetizer
    from pyrofling.core.host.sessions import HostSessions
    from pyrofling.core.host.web_viewers import BrowserDisplay
    from pyrofling.wire import ViewerDisplay

    web = WebViewers(WebConfig(TOKEN), INFO)
    admitted(web)
    said = web.message(1, json.dumps({"type": "display", "width": 800, "height": 513, "hz": 59.9}), 1.0)
    assert said == [BrowserDisplay(1, ViewerDisplay(800, 513, 59_900))]
    for bad in ({"width": -1, "height": 600}, {"width": 800}, {"width": 800, "height": 600, "hz": "fast"},
                {"width": 1e9, "height": 600}, {"width": 800, "height": 600, "hz": 1e6}):  # fmt: skip
        assert web.message(1, json.dumps({"type": "display", **bad}), 1.0) == []
    assert web.counters.refused["malformed"] == 5
    assert [o for o in web.message(1, json.dumps({"type": "display", "width": 8, "height": 8}), 1.0)]  # still in

    hs = HostSessions(make_packetizer=Packetizer.for_cookie, keyframes=KeyframePolicy())
    hs.browser_joined(1, 0.0)
    first = hs.browser_display(1, ViewerDisplay(800, 513, 59_900), 1.0)
    assert [o.mode for o in first if isinstance(o, FollowDisplay)] == [DisplayMode(800, 512, 59.9)]
    assert hs.browser_display(1, ViewerDisplay(1024, 576, 60_000), 1.1) == []  # too soon after the last
    due = hs.next_timer()
    assert due == 1.25
    assert [o.mode for o in hs.handle_timer(due) if isinstance(o, FollowDisplay)] == [DisplayMode(1024, 576, 60.0)]
    hs.browser_left(1)
    assert hs.display.displays == {}


def test_the_sessions_take_a_browsers_joins_reports_and_key_frame_asks_and_hand_the_rest_back() -> None:
    """One road: what the browsers' core decides goes through ``HostSessions.from_browsers``; the players' part is
    theirs (a join, input, an arrivals report counting its QUIC connection's losses since the last report, a key
    frame asked), the rest comes back for the web shell, and a leaver's counts go with it."""
    from pyrofling.core.host.congestion import RateConfig
    from pyrofling.core.host.keyframes import KeyframePolicy
    from pyrofling.core.host.packetizer import Packetizer
    from pyrofling.core.host.sessions import HostSessions
    from pyrofling.core.host.state import GamepadInput
    from pyrofling.core.host.web_viewers import BrowserRateReport
    from pyrofling.wire import ArrivalSample, GamepadButton, GamepadState, RateFeedback

    keyframes = KeyframePolicy()
    hs = HostSessions(make_packetizer=Packetizer.for_cookie, keyframes=keyframes,
                      rate=RateConfig(ceiling_bps=10e6, floor_bps=1e6))  # fmt: skip
    hs.browsers = web = WebViewers(WebConfig(TOKEN), INFO)
    assert hs.from_browsers(web.connected(1, 0.0), 0.0) == []
    out = hs.from_browsers(web.message(1, json.dumps({"type": "auth", "token": web.token}), 0.0), 0.0)
    assert {type(o) for o in out if isinstance(o, SendText | NewLinkKey)} == {SendText, NewLinkKey}  # the hello
    assert not any(isinstance(o, RequestKeyframe | BrowserJoined) for o in out)  # taken, not handed back
    assert keyframes.pending

    pad = GamepadState(seq=1, buttons=int(GamepadButton.SOUTH))
    out = hs.from_browsers([BrowserInput(1, pad)], 0.1)
    assert any(isinstance(o, GamepadInput) for o in out)

    def report(n: int) -> RateFeedback:
        return RateFeedback.build(n, 50_000, 3000, [ArrivalSample(n, 2, 1000 * n, 1000 * n + 500)])

    hs.from_browsers([BrowserRateReport(1, report(1))], 0.2, packets=(2, 100))
    hs.from_browsers([BrowserRateReport(1, report(2))], 0.3, packets=(5, 180))  # 3 of 80 since the last
    browser = hs.browser(1)
    assert browser is not None and browser.link is not None and abs(browser.link.recent_loss - 5 / 180) < 1e-9

    left = hs.from_browsers([BrowserLeft(1)], 0.4)
    assert any(isinstance(o, GamepadInput) for o in left)  # its pad let go
    hs.browser_joined(1, 0.5)  # the same number again: its counts start afresh
    hs.from_browsers([BrowserRateReport(1, report(3))], 0.6, packets=(1, 50))
    browser = hs.browser(1)
    assert browser is not None and browser.link is not None and abs(browser.link.recent_loss - 1 / 50) < 1e-9
    assert hs.browser(2) is None


def test_the_one_way_out_carries_browsers_beside_the_viewers_each_unit_whole() -> None:
    """``MediaOut``'s other kind of viewer: with a web door its video and sound calls also say what each browser
    gets (the unit whole, over its WebSocket here); nothing of theirs becomes a UDP datagram."""
    from pyrofling.core.host.media_out import MediaOut
    from pyrofling.core.host.packetizer import MediaPacket
    from pyrofling.wire import StreamType

    out = MediaOut()
    idr = MediaPacket(b"\x00\x00\x01\x65\x88", 2000, StreamType.VIDEO, key_frame=True)
    assert out.video([], idr, idr=True, now=0.0) == []  # no web door
    out.browsers = web = WebViewers(WebConfig(TOKEN), INFO)
    admitted(web)
    sent = out.video([], idr, idr=True, now=0.1)
    assert len(sent) == 1 and isinstance(sent[0], SendBinary) and sent[0].client == 1
    assert sent[0].data.endswith(idr.data)  # whole, after its header
    busy = out.video([], idr, idr=True, now=0.2, backlog={1: 10_000_000})
    assert busy == [RequestKeyframe()]  # bytes piling up: skipped rather than queued, and the next IDR asked for
    assert out.due([], 0.3) == []


def test_key_frames_the_browsers_ask_on_the_way_out_and_at_their_deadlines_reach_the_encoder_too() -> None:
    """Not only a browser's messages: what its core decides when a unit goes out (its bytes piled up: skip to
    the next IDR, and ask for one) and at a deadline (no WebTransport session came: the WebSocket, from a key
    frame) goes through the sessions to the key-frame policy."""
    from pyrofling.core.host.keyframes import KeyframePolicy
    from pyrofling.core.host.packetizer import MediaPacket, Packetizer
    from pyrofling.core.host.sessions import HostSessions
    from pyrofling.wire import StreamType

    keyframes = KeyframePolicy()
    hs = HostSessions(make_packetizer=Packetizer.for_cookie, keyframes=keyframes)
    hs.browsers = web = WebViewers(WebConfig(TOKEN, auth_timeout_s=5.0), INFO, webtransport_cert=CERT)
    hs.from_browsers(web.connected(1, 0.0), 0.0)
    hs.from_browsers(web.message(1, json.dumps({"type": "auth", "token": web.token}), 0.0), 0.0)
    assert not keyframes.pending  # it waits for its WebTransport session before its first key frame
    assert hs.next_timer() == 5.0
    out = hs.handle_timer(5.0)  # no session came: its WebSocket, from a key frame
    assert not any(isinstance(o, RequestKeyframe) for o in out) and keyframes.pending
    assert keyframes.should_force(5.0)
    idr = MediaPacket(b"\x00\x00\x01\x65\x88", 2000, StreamType.VIDEO, key_frame=True)
    assert [o.client for o in hs.send_video(idr, idr=True, now=5.1) if isinstance(o, SendBinary)] == [1]
    piled = hs.send_video(idr, idr=False, now=5.2, backlog={1: 10_000_000})
    assert not any(isinstance(o, SendBinary | RequestKeyframe) for o in piled) and keyframes.pending
