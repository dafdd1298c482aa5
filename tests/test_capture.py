"""The capture protocol's messages and the host's swapchain decisions (pure, fake clock)."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import parse_capture_message

from pyrofling.core.host.swapchain import EncodeImage, ImageState, Retire, Swapchain
from pyrofling.wire import BadMagicError, GamepadState, ProtocolError
from pyrofling.wire import capture as m

PERIOD_NS = 16_666_667

# -- messages -----------------------------------------------------------------------------------

SAMPLES: list[m.CaptureMessage] = [
    m.ClientHello.of("my game"),
    m.ServerHello(m.VERSION, 3, PERIOD_NS),
    m.ImageGroup(3, 1280, 720, m.PixelFormat.RGBA, 1280 * 4),
    m.PresentImage(7, 1, 2, 0, 99),
    m.AcquireImage(7, 1),
    m.RetireImage(7, 1),
    m.FrameComplete(7, 120, PERIOD_NS, 98, 0, 2, 5_000_000),
    m.AudioFormat(48_000, 2),
    m.InputEvent(bytes(range(32)), 0x1F, 1, -(2**31), 2**31 - 1, 3, -3, 65535, 0),
    m.PadStateEvent(4, bytes(range(16))),
    m.RumbleRequest(2, 65535, 1, 250),
]


@pytest.mark.parametrize("payload", SAMPLES, ids=lambda p: type(p).__name__)
def test_every_message_round_trips_through_header_and_payload(payload: m.CaptureMessage) -> None:
    data = payload.encode(42)
    header, body = m.unpack(data)
    assert (header.serial, header.type, header.payload_bytes) == (42, payload.TYPE, len(body))
    assert m.PAYLOADS[header.type].parse_payload(body) == payload
    assert len(data) <= m.MAX_MESSAGE_BYTES


@pytest.mark.parametrize("payload", SAMPLES, ids=lambda p: type(p).__name__)
def test_every_truncation_and_extension_is_refused(payload: m.CaptureMessage) -> None:
    data = payload.encode(1)
    for cut in range(len(data)):
        with pytest.raises(ProtocolError):
            _, body = m.unpack(data[:cut])
            payload.parse_payload(body)
    with pytest.raises(ProtocolError):
        payload.parse_payload(payload.payload() + b"\0")


def test_gamepad_events_carry_the_viewer_payload_unchanged() -> None:
    state = GamepadState(65535, 0x1234, -32768, 32767, 1, -1, 0, 255, -1, 1)
    header, body = m.unpack(m.gamepad_event(state))
    assert (header.serial, header.type) == (0, m.MessageType.GAMEPAD_STATE) and bytes(body) == state.payload()
    assert m.parse_gamepad_event(body) == state
    for cut in range(len(body)):
        with pytest.raises(ProtocolError):
            m.parse_gamepad_event(body[:cut])


def test_reference_framing_is_kept_byte_for_byte() -> None:
    """PyroFling's 32-byte header: magic, serial, type, payload length, reserved (protocol.md §8.7)."""
    data = m.pack(5, m.MessageType.OK)
    assert data == bytes.fromhex("9f2f12bd4a243875050000000000000001000000000000000000000000000000")
    assert m.MessageType.FRAME_COMPLETE == 0x80000069 and m.FrameComplete.payload_bytes() == 48
    assert (
        m.ClientHello.payload_bytes() == 256
        and m.ServerHello.payload_bytes() == 64
        and m.AcquireImage.payload_bytes() == 16
    )


def test_header_lies_and_bad_magic_are_refused() -> None:
    good = m.pack(1, m.MessageType.OK, b"abc")
    with pytest.raises(BadMagicError):
        m.unpack(b"\0" + good[1:])
    with pytest.raises(ProtocolError, match="payload bytes"):
        m.unpack(good[:-1])
    with pytest.raises(ProtocolError, match="exceeds"):
        m.unpack(m.pack(1, 1, b"x" * m.MAX_PAYLOAD_BYTES) + b"y")
    with pytest.raises(ValueError):
        m.pack(1, 1, b"x" * (m.MAX_PAYLOAD_BYTES + 1))


@pytest.mark.parametrize(
    ("group", "complaint"),
    [
        (m.ImageGroup(0, 64, 64, 1, 256), "1..16 images"),
        (m.ImageGroup(17, 64, 64, 1, 256), "1..16 images"),
        (m.ImageGroup(2, 8, 64, 1, 256), "outside"),
        (m.ImageGroup(2, 64, 9000, 1, 256), "outside"),
        (m.ImageGroup(2, 64, 64, 9, 256), "pixel format"),
        (m.ImageGroup(2, 64, 64, 1, 255), "stride"),
        (m.ImageGroup(2, 64, 64, 3, 191), "stride"),
        (m.ImageGroup(2, 64, 64, 1, 256, flags=4), "flags"),
    ],
)
def test_image_groups_outside_the_rules_are_refused(group: m.ImageGroup, complaint: str) -> None:
    with pytest.raises(ProtocolError, match=complaint):
        m.ImageGroup.parse_payload(group.payload())


def test_present_ids_start_at_one_and_audio_formats_are_checked() -> None:
    with pytest.raises(ProtocolError, match="start at 1"):
        m.PresentImage.parse_payload(m.PresentImage(1, 1, 0, 0, 0).payload())
    with pytest.raises(ProtocolError):
        m.AudioFormat.parse_payload(m.AudioFormat(48_000, 6).payload())
    assert m.PixelFormat.named("BGRX") is m.PixelFormat.BGRA and m.PixelFormat.RGB.av_name == "rgb24"
    with pytest.raises(ValueError, match="unknown pixel format"):
        m.PixelFormat.named("yuv")


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=1100))
def test_arbitrary_bytes_only_ever_raise_protocol_errors(data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        parse_capture_message(data, m.PAYLOADS)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(SAMPLES), st.integers(0, 1023), st.integers(0, 255))
def test_mutated_messages_only_ever_raise_protocol_errors(payload: m.CaptureMessage, at: int, value: int) -> None:
    data = bytearray(payload.encode(3))
    data[at % len(data)] = value
    with contextlib.suppress(ProtocolError):
        parse_capture_message(bytes(data), m.PAYLOADS)


# -- swapchain ----------------------------------------------------------------------------------


def present(chain: Swapchain, index: int, pid: int, *, period: int = 1, now: float = 0.0) -> list[object]:
    error, events = chain.present(m.PresentImage(chain.group_serial, period, index, 0, pid), now)
    assert error is None, error
    return list(events)


def beat(chain: Swapchain, now: float = 0.0) -> tuple[list[int], list[m.FrameComplete]]:
    events = chain.beat(now, now + 1 / 60)
    retired = [e.index for e in events if isinstance(e, Retire)]
    done = [e for e in events if isinstance(e, m.FrameComplete)]
    return retired, done


def test_fifo_presents_take_one_heartbeat_each_and_complete_in_order() -> None:
    chain = Swapchain(group_serial=2, num_images=3, period_ns=PERIOD_NS)
    present(chain, 0, 1)
    present(chain, 1, 2)  # a game running ahead: targets the heartbeat after
    assert [i.state for i in chain.images] == [ImageState.QUEUED, ImageState.QUEUED, ImageState.CLIENT_OWNED]
    retired, [done] = beat(chain, 1.0)
    assert retired == [] and done.presented_id == 1 and done.timestamp == 1 and done.period_ns == PERIOD_NS
    assert done.image_group_serial == 2 and done.headroom_ns == round(1e9 / 60)
    assert chain.take() == EncodeImage(0, 1, 0.0, repeat=False)
    assert chain.release(EncodeImage(0, 1, 0.0, False)) == []  # newest: kept, for repeats
    retired, [done] = beat(chain)
    assert done.presented_id == 2 and retired == [0]  # 2 is ready, so 1 goes back to the game
    taken = chain.take()
    assert taken is not None and taken.index == 1 and not taken.repeat
    chain.release(taken)
    retired, done_list = beat(chain)
    assert retired == [] and done_list == []  # nothing new: no FrameComplete, the encoder repeats image 1
    again = chain.take()
    assert again is not None and again.repeat and chain.stats.repeats == 1 and chain.stats.encoded == 2


def test_mailbox_presents_share_a_heartbeat_and_the_newest_wins() -> None:
    chain = Swapchain(1, 3, PERIOD_NS)
    present(chain, 0, 1, period=0)
    present(chain, 1, 2, period=0)
    present(chain, 2, 3, period=0)
    retired, [done] = beat(chain)
    assert sorted(retired) == [0, 1] and done.presented_id == 3 and done.delayed_count == 2
    taken = chain.take()
    assert taken is not None and taken.present_id == 3 and chain.stats.superseded == 2


def test_an_image_the_encoder_reads_is_retired_only_when_it_lets_go() -> None:
    chain = Swapchain(1, 3, PERIOD_NS)
    present(chain, 0, 1, period=0)
    beat(chain)
    taken = chain.take()
    assert taken is not None and chain.take() is None  # already in the encoder
    present(chain, 1, 2, period=0)
    retired, _ = beat(chain)
    assert retired == [] and chain.images[0].superseded  # still being read
    assert chain.release(taken) == [Retire(0)]
    assert chain.images[0].state is ImageState.CLIENT_OWNED
    assert chain.stats.superseded == 0  # it was encoded, so not lost


def test_immediate_mode_makes_presents_ready_at_once_but_completes_on_heartbeats() -> None:
    chain = Swapchain(1, 3, PERIOD_NS, immediate=True)
    present(chain, 0, 1)
    assert chain.has_new()
    taken = chain.take()
    assert taken is not None and taken.index == 0 and not chain.has_new()
    chain.release(taken)
    assert present(chain, 1, 2) == [Retire(0)]  # a newer one is ready: the old one is the game's again
    _, [done] = beat(chain)
    assert done.presented_id == 1  # FIFO: present 2 is for the next heartbeat
    _, [done] = beat(chain)
    assert done.presented_id == 2


@pytest.mark.parametrize(
    ("serial", "index", "pid", "complaint"),
    [(9, 0, 5, "image group 9"), (1, 3, 5, "outside"), (1, 0, 1, "does not follow"), (1, 1, 5, "not the game's")],
)
def test_bad_presents_are_refused_with_a_reason(serial: int, index: int, pid: int, complaint: str) -> None:
    chain = Swapchain(1, 3, PERIOD_NS)
    present(chain, 1, 1)
    error, events = chain.present(m.PresentImage(serial, 1, index, 0, pid), 0.0)
    assert error is not None and complaint in error and events == [] and chain.stats.rejected == 1


def test_a_new_image_group_replaces_the_old_and_restarts_present_ids() -> None:
    chain = Swapchain(1, 3, PERIOD_NS)
    present(chain, 0, 1)
    present(chain, 1, 2)
    beat(chain)
    old = chain.take()
    chain.replace(group_serial=5, num_images=2)
    assert len(chain.images) == 2 and all(i.state is ImageState.CLIENT_OWNED for i in chain.images)
    assert old is not None and chain.release(old) == []  # the old image is gone with its group
    present(chain, 0, 1)  # ids start again at 1 (PyroFling rejects this and the game reconnects)
    _, [done] = beat(chain)
    assert done.presented_id == 1 and done.image_group_serial == 5


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["present", "beat", "take", "release"]), st.integers(0, 3)), max_size=80))
def test_any_sequence_keeps_every_image_accounted_for(ops: list[tuple[str, int]]) -> None:
    """An image is retired only when it was presented and is not being read; a taken image is never retired early."""
    chain = Swapchain(1, 4, PERIOD_NS)
    owned = {0, 1, 2, 3}  # what the game may draw into, as the events tell it
    in_encoder: list[EncodeImage] = []
    pid = 0
    for op, arg in ops:
        events: list[Any] = []
        if op == "present" and owned:
            index = sorted(owned)[arg % len(owned)]
            pid += 1
            error, events = chain.present(m.PresentImage(1, arg % 2, index, 0, pid), 0.0)
            assert error is None
            owned.discard(index)
        elif op == "beat":
            events = list(chain.beat(0.0, 0.01))
        elif op == "take":
            taken = chain.take()
            if taken is not None:
                assert taken.index not in owned
                in_encoder.append(taken)
        elif op == "release" and in_encoder:
            events = list(chain.release(in_encoder.pop(0)))
        for event in events:
            if isinstance(event, Retire):
                assert event.index not in owned, "retired twice"
                assert all(t.index != event.index for t in in_encoder), "retired while the encoder reads it"
                owned.add(event.index)
        ready = [i for i in chain.images if i.state is ImageState.READY and not i.superseded]
        assert len(ready) <= 1  # the newest ready image is the only one kept
    # Everything not owned is queued, ready, or being read: nothing is lost.
    for image in chain.images:
        assert (image.index in owned) == (image.state is ImageState.CLIENT_OWNED)
