"""The browsers' stream on the wire (protocol.md §9): byte-exact messages, truncation and fuzz."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyrofling.wire import ArrivalSample, GamepadState, InputState, RateFeedback
from pyrofling.wire.browser import (
    MediaMessage,
    audio_message,
    numbered,
    page_message,
    parse_media,
    parse_page_message,
    parse_sound_group,
    sound_group,
    video_header,
)
from pyrofling.wire.errors import ProtocolError


def test_a_picture_is_its_number_then_v_flags_and_two_little_endian_stamps_then_annex_b() -> None:
    message = numbered(7, video_header(idr=True, capture_us=0x0102, pts_us=0x0304) + b"\x00\x00\x00\x01\x65")
    assert message == (b"S\x07\x00\x00\x00" + b"V\x01" + bytes.fromhex("0201000000000000")
                       + bytes.fromhex("0403000000000000") + b"\x00\x00\x00\x01\x65")  # fmt: skip
    assert parse_media(message) == MediaMessage(True, True, 0x0102, 0x0304, b"\x00\x00\x00\x01\x65", 7)
    assert numbered(0x1_0000_0002, b"V")[:5] == b"S\x02\x00\x00\x00"  # the number wraps at 32 bits


def test_sound_is_unnumbered_and_a_group_carries_each_units_length_and_message() -> None:
    units = [audio_message(b"opus-one", pts_us=20_000), audio_message(b"", pts_us=25_000)]
    assert units[0] == b"A\x00" + (20_000).to_bytes(8, "little") * 2 + b"opus-one"
    group = sound_group(units)
    assert group[:5] == b"G" + len(units[0]).to_bytes(4, "little")
    assert parse_sound_group(group) == [MediaMessage(False, False, 20_000, 20_000, b"opus-one"),
                                        MediaMessage(False, False, 25_000, 25_000, b"")]  # fmt: skip


def test_a_pages_pad_keys_and_report_are_a_tag_and_the_pyrofling_wires_payload() -> None:
    report = RateFeedback.build(3, 50_000, 1200, [ArrivalSample(1, 2, 3, 4)])
    for message in (GamepadState(seq=1, buttons=5, lx=-3), InputState(seq=2), report):
        data = page_message(message)
        assert data[1:] == bytes(message)[-type(message).PAYLOAD.size :]  # the control message's payload
        assert parse_page_message(data) == message
    assert page_message(report)[:1] == b"R" and page_message(InputState())[:1] == b"I"


def test_every_cut_short_message_is_refused_by_name() -> None:
    picture = numbered(1, video_header(idr=False, capture_us=1, pts_us=2) + b"data")
    units = [audio_message(b"abc", pts_us=1), audio_message(b"de", pts_us=2)]
    group = sound_group(units)
    pad = page_message(GamepadState(buttons=1))
    whole_groups = {1, 1 + 4 + len(units[0])}  # cut between units: a shorter group, whole
    for whole, parse in ((picture, parse_media), (group, parse_sound_group), (pad, parse_page_message)):
        parse(whole)
        cuts = range(1, len(whole) - (4 if parse is parse_media else 0))  # a picture's own bytes may be any length
        for n in cuts:
            if parse is parse_sound_group and n in whole_groups:
                assert len(parse_sound_group(whole[:n])) == (n > 1)
                continue
            with pytest.raises(ProtocolError):
                parse(whole[:n])


def test_what_is_not_a_message_of_its_place_is_refused() -> None:
    with pytest.raises(ProtocolError, match="numbered"):
        parse_media(video_header(idr=False, capture_us=1, pts_us=1))  # a picture without its number
    with pytest.raises(ProtocolError, match="numbered"):
        parse_media(numbered(1, audio_message(b"x", pts_us=1)))
    with pytest.raises(ProtocolError, match="sound only"):
        parse_sound_group(sound_group([numbered(1, video_header(idr=True, capture_us=1, pts_us=1))]))
    too_many = RateFeedback(1, 1, 1, 999, 0, bytes(RateFeedback.PAYLOAD.size - 12))
    with pytest.raises(ProtocolError):
        parse_page_message(b"R" + too_many.payload())


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_are_a_message_or_a_protocol_error_never_anything_else(data: bytes) -> None:
    for parse in (parse_media, parse_sound_group, parse_page_message):
        with contextlib.suppress(ProtocolError):  # anything else escaping fails the test
            parse(data)
