"""PyroFling's Vulkan capture layer as a game source: its messages, and real Vulkan images on lavapipe.

The layer itself cannot run here unmodified (lavapipe cannot export semaphores), so
:class:`StandInLayer` plays it: real exportable images on lavapipe, the layer's exact
messages.  A real host imports them, a real encoder and viewer show them.  Every
wait has a timeout.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import os
import socket
import struct
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import parse_capture_message, run, start_host, stop_viewer_and_host, until

from pyrofling.capture.paths import default_layer_socket
from pyrofling.client.pictures import ScreenPictures
from pyrofling.client.presenter import HeadlessDisplay
from pyrofling.client.viewer import Viewer, ViewerConfig
from pyrofling.core.color import AVCOL_TRC_SMPTE2084, ToneMapper, sdr_to_pq16
from pyrofling.core.input.pad import PadUpdate
from pyrofling.server.capture import CaptureServer, drain_before_close
from pyrofling.server.encoder import EncoderConfig
from pyrofling.server.host import Host
from pyrofling.server.vulkan_import import instance_environment, vulkan_problem
from pyrofling.wire import ColorProfile, ProtocolError, VideoCodec
from pyrofling.wire import capture as m

SMALL = EncoderConfig(width=160, height=120, fps=30, bitrate_kbits=800)
GROUP = m.VulkanImageGroup(3, 1280, 720, 44, 0, 0x7, 0x8, 1, 2, (44, 50))
PRESENT = m.VulkanPresentImage(3, 1, 2, 1, 7, 5, 17)
DEVICE = m.Device(b"mesa22.3.6".ljust(16, b"\0"), b"llvmpipeUUID".ljust(16, b"\0"), b"\0" * 8, 0)
LAYER_SAMPLES: list[m.CaptureMessage] = [GROUP, PRESENT, DEVICE, m.ClientHello.of("vkcube", m.Intent(1))]

needs_vulkan = pytest.mark.skipif(vulkan_problem() is not None, reason=f"no Vulkan here: {vulkan_problem()}")


# -- the messages -------------------------------------------------------------------------------------


def test_the_layer_messages_have_the_reference_sizes_and_round_trip() -> None:
    assert [m.VulkanImageGroup.payload_bytes(), m.VulkanPresentImage.payload_bytes(), m.Device.payload_bytes()] == [
        104,
        32,
        44,
    ]
    for message in LAYER_SAMPLES:
        header, body = m.unpack(message.encode(5))
        assert header.serial == 5 and m.VULKAN_PAYLOADS[header.type].parse_payload(body) == message
    # Byte for byte as the layer packs them (field order, u64 alignment of drm_modifier at offset 96).
    raw = struct.pack("<9I15IQ", 3, 1280, 720, 44, 0, 7, 8, 1, 2, 44, 50, *[0] * 13, 0)
    assert GROUP.payload() == raw and GROUP.formats == (44, 50)
    assert PRESENT.payload() == struct.pack("<QHHIIIQ", 3, 1, 2, 1, 7, 5, 17)
    assert PRESENT.as_present() == m.PresentImage(3, 1, 2, 0, 17)


def test_every_truncation_of_a_layer_message_is_a_protocol_error() -> None:
    for message in LAYER_SAMPLES:
        cls = type(message)
        whole = message.payload()
        for cut in range(len(whole)):
            with pytest.raises(ProtocolError):
                cls.parse_payload(whole[:cut])
        with pytest.raises(ProtocolError):
            cls.parse_payload(whole + b"\0")


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=1100))
def test_arbitrary_bytes_as_layer_messages_only_ever_raise_protocol_errors(data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        parse_capture_message(data, m.VULKAN_PAYLOADS)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(LAYER_SAMPLES), st.integers(0, 1023), st.integers(0, 255))
def test_mutated_layer_messages_only_ever_raise_protocol_errors(message: m.CaptureMessage, at: int, value: int) -> None:
    data = bytearray(message.encode(3))
    data[at % len(data)] = value
    with contextlib.suppress(ProtocolError):
        parse_capture_message(bytes(data), m.VULKAN_PAYLOADS)


@pytest.mark.parametrize(
    ("changes", "complaint"),
    [
        ({"vk_color_space": m.COLOR_SPACE_HDR10_ST2084}, "HDR10 needs a 10-bit format"),  # 8-bit BGRA
        ({"vk_color_space": m.COLOR_SPACE_EXTENDED_SRGB_LINEAR, "vk_format": 97}, "scRGB"),
        ({"vk_color_space": 12345}, "unknown colour space"),
        ({"vk_format": 97}, "R16G16B16A16_SFLOAT"),
        ({"vk_format": 50, "flags": 0}, "MUTABLE_FORMAT"),
        ({"usage": 0x1}, "SAMPLED"),
        ({"memory_type": 0x200}, "OPAQUE_FD"),
    ],
)
def test_images_the_host_cannot_stream_are_named_with_the_reason(changes: dict[str, int], complaint: str) -> None:
    fields: dict[str, Any] = {name: getattr(GROUP, name) for name in GROUP.__match_args__}
    assert m.VulkanImageGroup(**fields).problem() is None
    assert complaint in (m.VulkanImageGroup(**(fields | changes)).problem() or "")


def test_srgb_unorm_and_10_bit_formats_are_read_as_their_byte_order() -> None:
    fields = {name: getattr(GROUP, name) for name in GROUP.__match_args__}
    for fmt, name in ((44, "bgra"), (50, "bgra"), (37, "rgba"), (43, "rgba"), (51, "rgba"), (64, "x2bgr10le"),
                      (58, "x2rgb10le")):  # fmt: skip
        group = m.VulkanImageGroup(**(fields | {"vk_format": fmt}))
        assert group.problem() is None and group.av_name == name and not group.hdr10
    for fmt in (64, 58):  # an HDR10 swapchain
        group = m.VulkanImageGroup(**(fields | {"vk_format": fmt, "vk_color_space": m.COLOR_SPACE_HDR10_ST2084}))
        assert group.problem() is None and group.hdr10


def test_the_hosts_own_instance_never_loads_the_capture_layer() -> None:
    env = {"VK_INSTANCE_LAYERS": "VK_LAYER_pyrofling_capture_64:VK_LAYER_KHRONOS_validation", "PYROFLING": "1"}
    changes = instance_environment(env)
    assert changes["VK_INSTANCE_LAYERS"] == "VK_LAYER_KHRONOS_validation"  # explicit: taken out
    assert changes["DISABLE_PYROFLING"] == "1"  # implicit (PYROFLING=1): the layer's own off switch
    assert instance_environment({}) == {"DISABLE_PYROFLING": "1"}


def test_the_layer_socket_is_where_the_layer_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYROFLING_SERVER", raising=False)
    assert default_layer_socket() == "/tmp/pyrofling-socket"
    monkeypatch.setenv("PYROFLING_SERVER", "/run/user/1000/pf")
    assert default_layer_socket() == "/run/user/1000/pf"


# -- a raw layer: hostile and broken requests ------------------------------------------------------------


class RawLayer:
    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.settimeout(3.0)
        self.sock.connect(path)
        self.serial = 0
        self.last_text = ""

    def request(self, message: m.CaptureMessage | None, *, type_: int = 0, fds: list[int] | None = None) -> int:
        self.serial += 1
        data = message.encode(self.serial) if message is not None else m.pack(self.serial, type_)
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())] if fds else []
        self.sock.sendmsg([data], anc)
        while True:
            header, body = m.unpack(self.sock.recv(2048))
            if not header.type & m.EVENT:
                self.last_text = m.error_text(body)
                return header.type


async def layer_server(tmp_path: Path) -> CaptureServer:
    server = CaptureServer(
        str(tmp_path / "own.sock"), period_ns=16_666_667, layer_path=str(tmp_path / "layer.sock"), immediate=False
    )
    server.start(asyncio.get_running_loop())
    return server


async def in_thread(fn: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, fn)


def memfd(size: int) -> int:
    fd = os.memfd_create("hostile")
    os.ftruncate(fd, size)
    return fd


@pytest.mark.io
@needs_vulkan
def test_hostile_layer_requests_get_error_replies_and_the_host_goes_on(tmp_path: Path) -> None:
    from pyrofling.capture.vulkan_standin import StandInLayer, quadrant_painter

    async def scenario() -> tuple[list[tuple[int, str]], dict[str, Any]]:
        server = await layer_server(tmp_path)
        assert server.layer_path is not None
        standin = StandInLayer(server.layer_path, 64, 48, semaphores="eventfd")
        real_device = standin.device_message

        def talk() -> list[tuple[int, str]]:
            raw = RawLayer(server.layer_path or "")
            out = []
            assert (
                raw.request(m.ClientHello.of("hostile", m.Intent.VULKAN_EXTERNAL_STREAM)) == m.MessageType.SERVER_HELLO
            )
            out.append((raw.request(GROUP, fds=[memfd(64)] * 3), raw.last_text))  # before DEVICE
            out.append((raw.request(PRESENT), raw.last_text))  # before any group
            out.append((raw.request(m.Device(b"\1" * 16, b"\2" * 16, b"\0" * 8, 0)), raw.last_text))  # no such GPU
            assert raw.request(real_device) == m.MessageType.OK
            small = m.VulkanImageGroup(3, 64, 48, 44, 0, 7, 8, 1, 2, (44, 50))
            out.append((raw.request(small, fds=[memfd(64)]), raw.last_text))  # 1 fd for 3 images
            out.append((raw.request(small, fds=[memfd(64)] * 3), raw.last_text))  # memory far too small
            huge = m.VulkanImageGroup(16, 8192, 8192, 44, 0, 7, 8, 1, 2, (44, 50))
            out.append((raw.request(huge, fds=[memfd(64)] * 16), raw.last_text))  # 4 GiB of host memory
            hdr = m.VulkanImageGroup(3, 64, 48, 44, m.COLOR_SPACE_HDR10_ST2084, 7, 8, 1, 2, (44, 50))
            out.append((raw.request(hdr, fds=[memfd(1 << 16)] * 3), raw.last_text))  # HDR10 in 8 bits
            shared = m.VulkanImageGroup(3, 64, 48, 64, m.COLOR_SPACE_HDR10_ST2084, 7, 0, 1, 0)
            out.append((raw.request(shared, fds=[memfd(1 << 16)] * 3), raw.last_text))  # one memory for 3 images
            out.append((raw.request(PRESENT, fds=[memfd(8), memfd(8)]), raw.last_text))  # two semaphore fds
            out.append((raw.request(None, type_=m.MessageType.AUDIO_FORMAT), raw.last_text))  # not a layer message
            out.append((raw.request(m.ClientHello.of("again", m.Intent(1))), raw.last_text))
            raw.sock.close()
            # And the host still takes a well-behaved layer, with its pixels intact.
            assert standin.connect(), standin.stats.errors
            standin.present(quadrant_painter(standin.vk_format))
            return out

        replies = await in_thread(talk)
        for _ in range(3):
            await asyncio.sleep(0.02)
            server.beat(asyncio.get_running_loop().time(), asyncio.get_running_loop().time() + 0.016)
        frame = server.take()
        assert frame is not None and frame.pixel_format == "bgra"
        assert tuple(frame.array[5, 5, :3]) == (30, 30, 220)  # top-left red, as B, G, R
        server.release(frame)
        summary = server.summary()
        await in_thread(standin.close)
        server.close()
        return replies, summary

    replies, summary = run(scenario)
    kinds = [kind for kind, _ in replies]
    texts = " | ".join(text for _, text in replies)
    P, E, X = m.MessageType.ERROR_PROTOCOL, m.MessageType.ERROR, m.MessageType.ERROR_PARAMETER
    assert kinds == [P, P, E, X, E, E, X, E, P, P, P], texts
    for fragment in ("DEVICE before", "IMAGE_GROUP before", "not one this host can open", "need as many fds",
                     "the image needs", "at most 512 MiB", "HDR10 needs a 10-bit format", "cannot import",
                     "at most one semaphore",
                     "not one PyroFling's layer sends", "already said"):  # fmt: skip
        assert fragment in texts, fragment
    assert summary["vulkan_games"] == 2 and summary["vulkan"]["presents"] == 1


@pytest.mark.io
@needs_vulkan
def test_layer_games_get_no_pyrofling_events(tmp_path: Path) -> None:
    """PyroFling's layer drops the connection on an event it does not know: gamepad states go only to
    pyrofling's own games."""
    from pyrofling.core.input.pad import PadState

    async def scenario() -> tuple[bytes | None, bytes | None]:
        server = await layer_server(tmp_path)
        loop = asyncio.get_running_loop()

        def talk() -> tuple[bytes | None, bytes | None]:
            layer, own = RawLayer(server.layer_path or ""), RawLayer(server.path)
            layer.request(m.ClientHello.of("layer", m.Intent.VULKAN_EXTERNAL_STREAM))
            own.request(m.ClientHello.of("python game"))
            loop.call_soon_threadsafe(server.pad_update, PadUpdate(1, 1, PadState(buttons=1), []))
            got: list[bytes | None] = []
            for raw in (layer, own):
                raw.sock.settimeout(0.5)
                try:
                    got.append(raw.sock.recv(2048))
                except TimeoutError:
                    got.append(None)
            return got[0], got[1]

        got = await in_thread(talk)
        server.close()
        return got

    to_layer, to_own = run(scenario)
    assert to_layer is None
    assert to_own is not None and m.unpack(to_own)[0].type == m.MessageType.GAMEPAD_STATE


# -- the stand-in against a real host and viewer -----------------------------------------------------------


class QuadrantDisplay(HeadlessDisplay):
    """Remembers the colour at the centre of each quadrant of every decoded picture."""

    def __init__(self) -> None:
        self.quadrants: list[tuple[tuple[int, int, int], ...]] = []
        self.sizes: list[tuple[int, int]] = []

    def prepare(self, frame: Any) -> Any:
        rgb = frame.to_ndarray(format="rgb24")
        h, w = rgb.shape[:2]
        spots = ((h // 4, w // 4), (h // 4, 3 * w // 4), (3 * h // 4, 3 * w // 4), (3 * h // 4, w // 4))
        self.quadrants.append(tuple(tuple(int(v) for v in rgb[y, x]) for y, x in spots))  # type: ignore[misc]
        return None


def quadrants_intact(display: QuadrantDisplay) -> bool:
    from pyrofling.capture.vulkan_standin import QUADRANTS

    if not display.quadrants:
        return False
    seen = display.quadrants[-1]
    return all(all(abs(a - b) <= 8 for a, b in zip(s, w, strict=True)) for s, w in zip(seen, QUADRANTS, strict=True))


class LayerGame(threading.Thread):
    """The stand-in presenting quadrants on its own thread until stopped."""

    def __init__(
        self, path: str, width: int = SMALL.width, height: int = SMALL.height, paint: Any = None, **kwargs: Any
    ) -> None:
        from pyrofling.capture.vulkan_standin import StandInLayer, quadrant_painter

        super().__init__(daemon=True)
        self.layer = StandInLayer(path, width, height, retry_presents=5, **kwargs)
        self.paint = paint or quadrant_painter(self.layer.vk_format)
        self.halt = threading.Event()
        self.resize_to: tuple[int, int] | None = None

    def run(self) -> None:
        self.layer.connect()  # as the layer does when the game creates its swapchain
        while not self.halt.is_set():
            if self.resize_to is not None:
                self.layer.resize(*self.resize_to)
                self.resize_to = None
            self.layer.present(self.paint)
            if not self.layer.connected:
                self.halt.wait(0.02)

    def stop(self) -> None:
        self.halt.set()
        self.join(5)
        self.layer.close()


async def layer_host(tmp_path: Path, port: int = 0, encoder: EncoderConfig = SMALL) -> tuple[Host, asyncio.Task[Any]]:
    return await start_host(
        encoder=encoder,
        port=port,
        source="capture",
        capture_socket=str(tmp_path / "own.sock"),
        layer_socket=str(tmp_path / "layer.sock"),
        layer_socket_required=True,
    )


@pytest.mark.io
@needs_vulkan
@pytest.mark.parametrize("vk_format", [m.VkFormat.B8G8R8A8_UNORM, m.VkFormat.R8G8B8A8_SRGB], ids=["bgra", "rgba-srgb"])
def test_layer_images_reach_a_viewer_intact_paced_by_the_host_through_a_resize(
    tmp_path: Path, vk_format: m.VkFormat
) -> None:
    display = QuadrantDisplay()

    async def scenario() -> tuple[LayerGame, dict[str, Any], int]:
        host, task = await layer_host(tmp_path)
        viewer = Viewer(ViewerConfig(host="127.0.0.1", port=host.port or 0), display, run_presenter=True)
        vtask = asyncio.create_task(viewer.run())
        game = LayerGame(str(tmp_path / "layer.sock"), vk_format=vk_format, semaphores="eventfd")
        beats = host.clock.index
        game.start()
        await until(lambda: quadrants_intact(display), 15)
        await until(lambda: len(game.layer.stats.complete_times) >= 30, 10)  # FIFO pacing, counted below
        game.resize_to = (96, 64)  # the game's window changed: a new image group mid-stream
        await until(lambda: game.layer.stats.image_groups == 2, 5)
        shown, first = len(display.quadrants), game.layer.stats.presents
        # The pictures shown count the host's repeats too: the new group's own presents are waited for apart.
        await until(
            lambda: (
                len(display.quadrants) > shown + 10
                and game.layer.stats.presents - first >= 12
                and quadrants_intact(display)
            ),
            10,
        )
        await in_thread(game.stop)  # off the loop: the host answers its last present
        beats = host.clock.index - beats
        summary = host.summary()
        await stop_viewer_and_host(viewer, vtask, host, task)
        return game, summary, beats

    game, summary, beats = run(scenario, 90)
    cap, stats = summary["capture"], game.layer.stats
    assert (
        stats.connects == 1
        and stats.presents_local == 0
        and stats.errors == []
        and cap["errors"] == {}
        and summary["encode_errors"] == 0
    )
    assert cap["image_groups"] == 2 and cap["presents"] == stats.presents
    # FIFO: each present waits for the previous one's FrameComplete, so the game presents once a heartbeat at
    # most (the interval's median and spread are `bench capture`'s to report).
    assert stats.presents <= beats + 2 and len(stats.complete_times) >= stats.presents - 2
    vk = cap["vulkan"]  # the last image group's
    assert vk["size"] == "96x64" and vk["semaphores_assumed"] == vk["presents"] > 10  # lavapipe: taken as signalled


def test_a_game_whose_last_messages_the_host_never_read_sees_the_socket_end_not_reset() -> None:
    """The host closing a game's socket while the game's last presents wait unread: a Unix socket closed so resets
    the game's side (ECONNRESET, and the layer reports an error for an ordinary restart); read first, it ends."""
    for drained in (False, True):
        host_side, game_side = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        game_side.sendall(b"\0" * 5000)
        if drained:
            drain_before_close(host_side)
        host_side.close()
        try:
            ended = game_side.recv(16) == b""
        except ConnectionResetError:
            ended = False
        game_side.close()
        assert ended == drained


@pytest.mark.io
@needs_vulkan
def test_a_layer_game_survives_a_host_restart(tmp_path: Path) -> None:
    display = QuadrantDisplay()

    async def scenario() -> LayerGame:
        host, task = await layer_host(tmp_path)
        port = host.port or 0
        viewer = Viewer(ViewerConfig(host="127.0.0.1", port=port), display, run_presenter=True)
        vtask = asyncio.create_task(viewer.run())
        game = LayerGame(str(tmp_path / "layer.sock"), semaphores="none")
        game.start()
        await until(lambda: quadrants_intact(display), 15)
        host.stop()
        await asyncio.wait_for(task, 10)
        await until(lambda: not game.layer.connected, 5)
        await asyncio.sleep(0.3)  # the game keeps presenting on its own
        alone = game.layer.stats.presents_local
        display.quadrants.clear()
        host, task = await layer_host(tmp_path, port=port)
        await until(lambda: game.layer.stats.connects == 2, 10)
        await until(lambda: quadrants_intact(display), 20)
        assert alone > 0
        await in_thread(game.stop)  # off the loop: the host answers its last present
        await stop_viewer_and_host(viewer, vtask, host, task)
        return game

    game = run(scenario, 90)
    stats = game.layer.stats
    assert stats.connects == 2 and stats.disconnects == 2  # the restart, then its own close
    assert stats.errors == ["the host closed the socket"] and np.isfinite(stats.interval_ms()[0])


@pytest.mark.io
def test_without_vulkan_the_host_says_so_once_and_keeps_its_other_games(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import pyrofling.server.capture_work as capture_module

    monkeypatch.setattr(capture_module, "vulkan_problem", lambda: "no Vulkan loader (libvulkan.so.1: not found)")

    async def scenario() -> list[tuple[int, str]]:
        server = await layer_server(tmp_path)

        def talk() -> list[tuple[int, str]]:
            out = []
            for _ in range(2):
                layer = RawLayer(server.layer_path or "")
                out.append(
                    (layer.request(m.ClientHello.of("vkcube", m.Intent.VULKAN_EXTERNAL_STREAM)), layer.last_text)
                )
                layer.sock.close()
            own = RawLayer(server.path)
            out.append((own.request(m.ClientHello.of("python game")), own.last_text))
            return out

        replies = await in_thread(talk)
        server.close()
        return replies

    with caplog.at_level("WARNING", logger="pyrofling.server.capture"):
        replies = run(scenario)
    assert [kind for kind, _ in replies] == [m.MessageType.ERROR, m.MessageType.ERROR, m.MessageType.SERVER_HELLO]
    assert "libvulkan.so.1: not found" in replies[0][1]
    said = [r for r in caplog.records if "cannot read Vulkan games" in r.getMessage()]
    assert len(said) == 1 and "other games and sources are unaffected" in said[0].getMessage()


@pytest.mark.io
@needs_vulkan
def test_a_mailbox_layer_game_presents_freely_and_the_newest_image_wins(tmp_path: Path) -> None:
    from pyrofling.capture.vulkan_standin import QUADRANTS, StandInLayer, quadrant_painter

    async def scenario() -> tuple[list[tuple[int, ...]], dict[str, Any], int]:
        server = await layer_server(tmp_path)
        loop = asyncio.get_running_loop()
        layer = StandInLayer(server.layer_path or "", 64, 48, fifo=False, semaphores="none")
        paint = quadrant_painter(layer.vk_format, shift=lambda n: n)  # each present rotates the quadrants

        def game() -> None:
            layer.connect()
            for _ in range(40):
                layer.present(paint)

        thread = loop.run_in_executor(None, game)
        seen: list[tuple[int, ...]] = []
        while not thread.done():
            await asyncio.sleep(1 / 30)  # slower heartbeats than the game presents
            server.beat(loop.time(), loop.time() + 1 / 30)
            frame = server.take()
            if frame is not None:
                seen.append(tuple(int(v) for v in frame.array[5, 5, 2::-1]))  # top-left, B G R → R G B
                server.release(frame)
        await thread
        server.beat(loop.time(), loop.time() + 1 / 30)
        last = server.take()
        assert last is not None
        seen.append(tuple(int(v) for v in last.array[5, 5, 2::-1]))
        server.release(last)
        summary = server.summary()
        presents = layer.stats.presents
        await in_thread(layer.close)
        server.close()
        return seen, summary, presents

    seen, summary, presents = run(scenario)
    assert presents == 40 and summary["errors"] == {}
    assert summary["superseded"] > 0  # presents between heartbeats replaced each other, unencoded
    assert all(colour in QUADRANTS for colour in seen)
    assert seen[-1] == QUADRANTS[39 % 4]  # the last present (n = 39) is what the host took last


class ScreenDisplay(HeadlessDisplay):
    """What an SDR screen is shown (the window's conversion: HDR10 tone-mapped): the quadrants' centres."""

    def __init__(self) -> None:
        self.pictures = ScreenPictures()
        self.quadrants: list[tuple[tuple[int, int, int], ...]] = []
        self.kinds: set[tuple[str, int]] = set()  # (pixel format, transfer) of the decoded pictures

    def prepare(self, frame: Any) -> Any:
        h, w = frame.height, frame.width
        rgb = np.frombuffer(self.pictures.rgb24(frame, w, h), np.uint8).reshape(h, w, 3)
        spots = ((h // 4, w // 4), (h // 4, 3 * w // 4), (3 * h // 4, 3 * w // 4), (3 * h // 4, w // 4))
        self.quadrants.append(tuple(tuple(int(v) for v in rgb[y, x]) for y, x in spots))  # type: ignore[misc]
        self.kinds.add((frame.format.name, frame.color_trc))
        return None


def hdr10_quadrants_on_an_sdr_screen() -> list[tuple[int, int, int]]:
    """The stand-in's HDR10 quadrants tone-mapped straight from its code values: what the viewer must show."""
    from pyrofling.capture.vulkan_standin import hdr10_quadrant_codes

    codes = np.array([hdr10_quadrant_codes()], np.uint16)
    wide = (codes << 6 | codes >> 4).astype(np.uint16)  # 10 → 16 bits, as swscale widens them
    return [(int(r), int(g), int(b)) for r, g, b in ToneMapper().to_srgb8(wide)[0]]


#: How far the viewer's tone-mapped quadrant centres may be from the source's (8-bit levels): 4:2:0 10-bit
#: HEVC at 800 kbit/s and two colour conversions, on flat quadrants.
HDR10_TOLERANCE = 6


@pytest.mark.io
@needs_vulkan
def test_an_hdr10_swapchain_streams_in_10_bit_bt2020_pq_and_the_viewer_tone_maps_it_to_the_source(
    tmp_path: Path,
) -> None:
    from pyrofling.capture.vulkan_standin import QUADRANTS, hdr10_quadrant_painter

    display, expected = ScreenDisplay(), hdr10_quadrants_on_an_sdr_screen()

    def matches() -> bool:
        return bool(display.quadrants) and all(
            abs(a - b) <= HDR10_TOLERANCE for s, e in zip(display.quadrants[-1], expected, strict=True)
            for a, b in zip(s, e, strict=True)
        )  # fmt: skip

    async def scenario() -> tuple[Any, dict[str, Any], Any]:
        host, task = await layer_host(tmp_path, encoder=replace(SMALL, encoder="libx265"))
        game = LayerGame(
            str(tmp_path / "layer.sock"),
            paint=hdr10_quadrant_painter(),
            vk_format=m.VkFormat.A2B10G10R10_UNORM_PACK32,
            color_space=m.COLOR_SPACE_HDR10_ST2084,
            semaphores="eventfd",
        )
        game.start()
        hdr10 = ColorProfile.BT2020_PQ_FULL_CENTER_420
        await until(lambda: (p := host.sessions.codec_parameters) is not None and p.color_profile == hdr10, 15)
        viewer = Viewer(ViewerConfig(host="127.0.0.1", port=host.port or 0), display, run_presenter=True)
        vtask = asyncio.create_task(viewer.run())
        await until(matches, 15)
        params = viewer.connection.codec_parameters if viewer.connection is not None else None
        await in_thread(game.stop)
        summary = host.summary()
        await stop_viewer_and_host(viewer, vtask, host, task)
        return params, summary, viewer

    params, summary, viewer = run(scenario, 90)
    assert params is not None and params.video_codec == VideoCodec.H265
    assert params.color_profile == ColorProfile.BT2020_PQ_FULL_CENTER_420  # as PyroFling's server says HDR10
    assert ("yuv420p10le", AVCOL_TRC_SMPTE2084) in display.kinds  # 10-bit, PQ in the bitstream's own description
    assert summary["capture"]["errors"] == {} and summary["encode_errors"] == 0
    assert viewer.video.stats.hdr10_pictures > 0 and display.pictures.tone_mapped > 0
    # The highlight (its white at 600 nits) shows brighter than the same yellow at the SDR white, rolled off short
    # of full scale where the tone curve has room (its red is past BT.709's gamut and clips).
    at_sdr_white = ToneMapper().to_srgb8(sdr_to_pq16(np.array([[QUADRANTS[3]]], np.uint8)))[0, 0]
    assert sum(expected[3]) > sum(int(v) for v in at_sdr_white) + 30 and expected[3][1] < 255
