"""The capture protocol's rules (pyrofling.core.host.capture_session), pure: messages in, outputs out."""

from __future__ import annotations

from collections.abc import Sequence

from pyrofling.core.host.capture_session import (
    MAX_ERRORS_PER_GAME,
    CaptureLog,
    CaptureOutput,
    CaptureSessions,
    CheckVulkan,
    DropGame,
    GameAudio,
    GameRumble,
    ImportImages,
    InputToGame,
    MapImages,
    NewImage,
    OpenDevice,
    PadToGame,
    ReadImage,
    RetireImage,
    ToGame,
    WatchWritable,
)
from pyrofling.core.input.keyboard_mouse import InputUpdate
from pyrofling.core.input.pad import PadState, PadUpdate
from pyrofling.wire import capture as m

PERIOD_NS = 16_666_667
GROUP = m.ImageGroup(3, 64, 32, int(m.PixelFormat.BGRA), 256)
VK_GROUP = m.VulkanImageGroup(3, 1280, 720, 44, 0, 0x7, 0x8, 1, 2, (44, 50))


class Audio:
    def accepts(self, rate: int, channels: int) -> str | None:
        return None if (rate, channels) == (48_000, 2) else f"{rate} Hz x{channels}: the host takes 48000 Hz stereo"


def replies(outputs: Sequence[CaptureOutput]) -> list[tuple[int, str]]:
    """(message type, error text) of each message sent to a game."""
    out = []
    for o in outputs:
        if isinstance(o, ToGame):
            header, payload = m.unpack(o.data)
            error = header.type in (m.MessageType.ERROR_PROTOCOL, m.MessageType.ERROR, m.MessageType.ERROR_PARAMETER)
            out.append((header.type, m.error_text(payload) if error else ""))
    return out


def kinds(outputs: Sequence[CaptureOutput]) -> list[int]:
    return [t for t, _ in replies(outputs)]


def sessions(*, immediate: bool = False) -> CaptureSessions:
    return CaptureSessions(period_ns=PERIOD_NS, immediate=immediate, audio=Audio())


def hello(
    s: CaptureSessions, conn_id: int = 1, intent: m.Intent = m.Intent.SHARED_MEMORY_FRAMES
) -> list[CaptureOutput]:
    assert s.connected(conn_id, same_user=True, uid=1000) == []
    return s.message(conn_id, m.ClientHello.of(f"game {conn_id}", intent).encode(1), 0, truncated=False, now=0.0)


def with_images(s: CaptureSessions, conn_id: int = 1) -> None:
    hello(s, conn_id)
    [work] = s.message(conn_id, GROUP.encode(2), 3, truncated=False, now=0.0)
    assert isinstance(work, MapImages) and work.group == GROUP
    out = s.done(work, what="64x32 BGRA8")
    assert kinds(out) == [m.MessageType.OK] and s.active == conn_id


def test_hello_first_and_once_then_server_hello_with_what_the_host_offers() -> None:
    s = sessions()
    s.connected(1, same_user=True, uid=1000)
    early = s.message(1, m.pack(1, m.MessageType.AUDIO_FORMAT, bytes(8)), 0, truncated=False, now=0.0)
    assert replies(early) == [(m.MessageType.ERROR_PROTOCOL, "say CLIENT_HELLO first")]
    out = s.message(1, m.ClientHello.of("doom").encode(2), 0, truncated=False, now=0.0)
    [sent] = [o for o in out if isinstance(o, ToGame)]
    server = m.ServerHello.parse_payload(m.unpack(sent.data)[1])
    assert server.period_ns == PERIOD_NS and server.capabilities & m.ServerCapability.AUDIO
    again = s.message(1, m.ClientHello.of("doom").encode(3), 0, truncated=False, now=0.0)
    assert replies(again) == [(m.MessageType.ERROR_PROTOCOL, "CLIENT_HELLO was already said")]
    assert s.stats.errors == {"no_hello": 1, "hello_again": 1}


def test_serials_only_grow_a_late_request_is_refused_a_late_one_way_message_dropped() -> None:
    s = sessions()
    hello(s)
    late = s.message(1, m.pack(1, m.MessageType.AUDIO_FORMAT, bytes(8)), 0, truncated=False, now=0.0)
    assert replies(late) == [(m.MessageType.ERROR_PROTOCOL, "serial 1 does not follow 1")]
    one_way = m.pack(1, m.MessageType.AUDIO_SAMPLES | m.ONE_WAY, bytes(8))
    assert s.message(1, one_way, 0, truncated=False, now=0.0) == []


def test_file_descriptors_only_where_the_message_carries_them_and_as_many_as_images() -> None:
    s = sessions()
    hello(s)
    fmt = m.AudioFormat(48_000, 2).encode(2)
    assert replies(s.message(1, fmt, 1, truncated=False, now=0.0))[0][0] == m.MessageType.ERROR_PROTOCOL
    short = s.message(1, GROUP.encode(3), 2, truncated=False, now=0.0)
    assert replies(short) == [(m.MessageType.ERROR_PARAMETER, "3 images need as many fds, got 2")]
    truncated = s.message(1, GROUP.encode(4), 3, truncated=True, now=0.0)
    assert replies(truncated) == [(m.MessageType.ERROR_PROTOCOL, "message or file descriptors truncated")]


def test_images_the_shell_could_not_map_are_refused_with_its_reason() -> None:
    s = sessions()
    hello(s)
    [work] = s.message(1, GROUP.encode(2), 3, truncated=False, now=0.0)
    assert isinstance(work, MapImages)
    out = s.done(work, "the image memfd must be sealed with F_SEAL_SHRINK")
    assert replies(out) == [(m.MessageType.ERROR_PARAMETER, "the image memfd must be sealed with F_SEAL_SHRINK")]
    assert s.active is None and s.take() is None


def test_the_game_that_made_its_images_last_streams_and_the_one_before_takes_over_when_it_leaves() -> None:
    s = sessions()
    with_images(s, 1)
    with_images(s, 2)
    assert s.active == 2 and s.name(s.active) == "game 2"
    out = s.drop(2, "game disconnected")
    assert DropGame(2, "game disconnected") in out and s.active == 1
    assert [o.text for o in out if isinstance(o, CaptureLog)] == [
        "capture: game 2 left (game disconnected)",
        "capture: streaming game 1",
    ]


def test_a_present_is_encoded_at_its_heartbeat_and_retired_once_a_newer_one_is_read() -> None:
    s = sessions()
    with_images(s)
    ok = s.message(1, m.PresentImage(2, 1, 0, 0, 1).encode(3), 0, truncated=False, now=0.0)
    assert kinds(ok) == [m.MessageType.OK] and not s.has_new()
    beat = s.beat(0.016, 0.033)
    assert kinds(beat) == [m.MessageType.FRAME_COMPLETE] and s.has_new()
    taken = s.take()
    assert taken is not None and taken[0] == 1 and taken[1].index == 0
    s.release(*taken)
    s.message(1, m.PresentImage(2, 1, 1, 0, 2).encode(4), 0, truncated=False, now=0.02)
    retire = [o for o in s.beat(0.033, 0.05) if isinstance(o, RetireImage)]
    assert [(r.conn_id, r.index) for r in retire] == [(1, 0)]
    assert [m.unpack(d)[0].type for d in retire[0].data] == [m.MessageType.ACQUIRE_IMAGE, m.MessageType.RETIRE_IMAGE]


def test_immediate_encode_asks_for_an_encode_at_each_present_of_the_streamed_game() -> None:
    s = sessions(immediate=True)
    with_images(s)
    out = s.message(1, m.PresentImage(2, 1, 0, 0, 1).encode(3), 0, truncated=False, now=0.0)
    assert any(isinstance(o, NewImage) for o in out) and s.has_new()


def test_a_game_that_keeps_failing_is_dropped_after_its_error_budget() -> None:
    s = sessions()
    hello(s)
    dropped = []
    for serial in range(2, 2 + MAX_ERRORS_PER_GAME):
        dropped += [o for o in s.message(1, m.pack(serial, 99), 0, truncated=False, now=0.0) if isinstance(o, DropGame)]
    assert len(dropped) == 1 and dropped[0].reason.startswith(f"{MAX_ERRORS_PER_GAME} bad requests")
    assert s.games == 0 and s.stats.errors["unknown_type"] == MAX_ERRORS_PER_GAME


def test_another_users_process_is_refused_before_it_says_anything() -> None:
    s = sessions()
    out = s.connected(7, same_user=False, uid=1001)
    assert DropGame(7, "another user", log=False) in out and s.games == 0 and s.stats.games_refused == 1


def test_audio_and_rumble_from_a_game() -> None:
    s = sessions()
    with_images(s, 1)
    hello(s, 2)
    bad = s.message(1, m.AudioFormat(44_100, 2).encode(3), 0, truncated=False, now=0.0)
    assert replies(bad) == [(m.MessageType.ERROR_PARAMETER, "44100 Hz x2: the host takes 48000 Hz stereo")]
    assert kinds(s.message(1, m.AudioFormat(48_000, 2).encode(4), 0, truncated=False, now=0.0)) == [m.MessageType.OK]
    assert kinds(s.message(2, m.AudioFormat(48_000, 2).encode(3), 0, truncated=False, now=0.0)) == [m.MessageType.OK]
    samples = m.pack(5, m.MessageType.AUDIO_SAMPLES | m.ONE_WAY, bytes(4 * 10 + 3))
    assert s.message(1, samples, 0, truncated=False, now=0.0) == [GameAudio(bytes(40))]  # whole frames only
    assert (
        s.message(2, m.pack(4, m.MessageType.AUDIO_SAMPLES | m.ONE_WAY, bytes(40)), 0, truncated=False, now=0.0) == []
    )
    [rumble] = s.message(1, m.RumbleRequest(2, 100, 200, 300).encode(6), 0, truncated=False, now=0.0)
    assert isinstance(rumble, GameRumble) and rumble.pad == 2 and rumble.command.duration_ms == 300


def test_a_full_socket_holds_the_newest_pad_state_and_sums_the_motion_then_sends_them_when_it_has_room() -> None:
    s = sessions()
    hello(s)

    def move(dx: int) -> InputUpdate:
        return InputUpdate(1, [], [], [], dx=dx, keys=frozenset({30}))

    [first] = s.input_update(move(1))
    assert isinstance(first, InputToGame)
    assert s.blocked(first) == [WatchWritable(1)]  # the socket was full
    assert s.input_update(move(2)) == [] and s.input_update(move(3)) == []  # known full: held, not tried
    pads = [PadUpdate(1, seq, PadState(), [], False) for seq in (5, 6)]
    assert s.pad_update(pads[0]) == [] and s.pad_update(pads[1]) == []
    out = s.writable(1)
    pad, keys = out
    assert isinstance(pad, PadToGame) and isinstance(keys, InputToGame)
    assert keys.update.dx == 6 and keys.update.keys == {30}
    assert m.parse_gamepad_event(m.unpack(pad.data)[1]).seq == 6  # the newest state only


def test_a_reply_a_full_socket_cannot_take_drops_the_game() -> None:
    s = sessions()
    hello(s)
    out = s.blocked(ToGame(1, m.pack(2, m.MessageType.OK)))
    assert DropGame(1, "it stopped reading its socket") in out and s.games == 0


def test_pyrofling_layer_device_then_images_then_presents_read_before_they_count() -> None:
    s = sessions()
    [check] = hello(s, 1, m.Intent.VULKAN_EXTERNAL_STREAM)
    assert isinstance(check, CheckVulkan)
    assert kinds(s.done(check)) == [m.MessageType.SERVER_HELLO] and s.is_vulkan(1)
    early = s.message(1, VK_GROUP.encode(2), 3, truncated=False, now=0.0)
    assert replies(early) == [(m.MessageType.ERROR_PROTOCOL, "send DEVICE before IMAGE_GROUP")]
    [device] = s.message(1, m.Device(bytes(16), bytes(16), bytes(8), 0).encode(3), 0, truncated=False, now=0.0)
    assert isinstance(device, OpenDevice) and kinds(s.done(device)) == [m.MessageType.OK]
    [imported] = s.message(1, VK_GROUP.encode(4), 3, truncated=False, now=0.0)
    assert isinstance(imported, ImportImages) and kinds(s.done(imported, what="1280x720")) == [m.MessageType.OK]
    present = m.VulkanPresentImage(4, 1, 0, 1, 0, 0, 1)
    no_fd = s.message(1, present.encode(5), 0, truncated=False, now=0.0)
    assert replies(no_fd) == [(m.MessageType.ERROR_PARAMETER, "the present names a semaphore but carries no fd")]
    [read] = s.message(1, present.encode(6), 1, truncated=False, now=0.0)
    assert isinstance(read, ReadImage) and read.semaphore and not s.has_new()
    assert kinds(s.done(read, now=0.0)) == [m.MessageType.OK]
    # An image the host cannot read ends the connection, after the reply (as PyroFling's server does).
    [again] = s.message(1, m.VulkanPresentImage(4, 1, 1, 0, 0, 0, 2).encode(7), 0, truncated=False, now=0.0)
    assert isinstance(again, ReadImage)
    out = s.done(again, "the device was lost")
    assert kinds(out) == [m.MessageType.ERROR] and any(isinstance(o, DropGame) for o in out)


def test_a_host_without_vulkan_refuses_the_layer_with_the_reason() -> None:
    s = sessions()
    [check] = hello(s, 1, m.Intent.VULKAN_EXTERNAL_STREAM)
    assert isinstance(check, CheckVulkan)
    out = s.done(check, "this host cannot read Vulkan games: no Vulkan loader")
    assert replies(out) == [(m.MessageType.ERROR, "this host cannot read Vulkan games: no Vulkan loader")]
    assert s.stats.vulkan_games == 0
