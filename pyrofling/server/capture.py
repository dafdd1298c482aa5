"""The host's capture sockets: games present frames in shared memory or in Vulkan memory (protocol.md §8).

``SOCK_SEQPACKET`` Unix sockets served from the host's event loop (``add_reader``,
non-blocking): pyrofling's own, and PyroFling's (``/tmp/pyrofling-socket``) for its
Vulkan capture layer.  The connection's ClientHello intent says which kind of
game it is.  A pyrofling game's images are ``memfd``s it passed with
``SCM_RIGHTS``; the host maps them read-only and hands the encoder a numpy view of
the newest ready one, which PyAV wraps without a copy
(``VideoFrame.from_numpy_buffer``).  A Vulkan layer's images are imported into
the host's own device and copied into host memory at each present
(:mod:`pyrofling.server.vulkan_import`).  The colour conversion to YUV is the one
pass over the pixels; the image goes back to the game as soon as it is done,
before the encoder runs.

Decisions (which image, when to retire, FrameComplete) live in
:class:`~pyrofling.core.host.swapchain.Swapchain`; this module moves bytes and file
descriptors.  Any number of games may connect; the one that created its image
group last is the one streamed (like a window taking focus), the others are
paced but not encoded.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import errno
import fcntl
import logging
import mmap
import os
import socket
import stat
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from pyrofling.capture.paths import peer_uid, prepare_socket_dir
from pyrofling.clocks import SYSTEM_CLOCK, Clock
from pyrofling.core.host.swapchain import EncodeImage, Retire, Swapchain
from pyrofling.core.input.keyboard_mouse import InputUpdate
from pyrofling.core.input.pad import PadUpdate
from pyrofling.core.input.pad.rumble import RumbleCommand
from pyrofling.server.vulkan_import import ImportedGroup, VulkanError, VulkanHost, vulkan_problem
from pyrofling.wire import ProtocolError, key_bitmap
from pyrofling.wire import capture as m

log = logging.getLogger(__name__)

#: A game's requests that failed, after which the host gives up on it.
MAX_ERRORS_PER_CLIENT = 64


class GameAudio(Protocol):
    """Where the streamed game's audio goes (server/audio.py's GameAudioSource)."""

    def accepts(self, rate: int, channels: int) -> str | None: ...

    def feed(self, pcm: bytes) -> None: ...


@dataclass(frozen=True, slots=True)
class CapturedFrame:
    """An image the encoder may read until :meth:`CaptureServer.release` is called with it."""

    conn_id: int
    taken: EncodeImage
    array: npt.NDArray[np.uint8]  # (height, width, bytes per pixel), rows ``stride`` apart, shared memory
    pixel_format: str  # PyAV's name: rgba, bgra, rgb24, bgr24


@dataclass(slots=True)
class _Game:
    conn_id: int
    sock: socket.socket
    name: str = "?"
    hello: bool = False
    intent: int = 0
    last_serial: int = 0
    swapchain: Swapchain | None = None
    group: m.ImageGroup | None = None
    images: list[npt.NDArray[np.uint8]] = field(default_factory=list)
    audio: m.AudioFormat | None = None
    vk_device: Any = None  # a Vulkan layer's GPU, once it said which (vulkan_import.ImportDevice)
    vk_group: ImportedGroup | None = None
    errors: int = 0
    #: Events its socket had no room for (it queues 10 packets: a game that fell behind reading).  Their state
    #: is not lost: the newest of each pad and of the keyboard and mouse (motion summed) wait here, and go out
    #: as soon as the socket has room (``flush_armed``) or with the next event of their kind.
    events_dropped: int = 0
    unsent_pads: dict[int, bytes] = field(default_factory=dict)
    unsent_input: InputUpdate | None = None
    flush_armed: bool = False


@dataclass(slots=True)
class CaptureStats:
    games_total: int = 0
    #: Connections from another user's processes, closed at once.
    games_refused: int = 0
    rumbles: int = 0
    image_groups: int = 0
    presents: int = 0
    encoded: int = 0
    repeats: int = 0
    superseded: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    events_dropped: int = 0
    audio_bytes: int = 0
    vulkan_games: int = 0


class CaptureServer:
    """Serves the capture socket on the running loop; the host calls :meth:`beat`, :meth:`take`, :meth:`release`."""

    def __init__(
        self,
        path: str,
        *,
        period_ns: int,
        immediate: bool = False,
        on_new_image: Callable[[], None] | None = None,
        audio: GameAudio | None = None,
        layer_path: str | None = None,
        layer_path_required: bool = False,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """``on_new_image``: called (on the loop) when the streamed game presents; ``audio``: takes its samples;
        ``layer_path``: also serve PyroFling's Vulkan layer there (a warning if it is taken, unless required)."""
        self.path = path
        self._clock = clock  # the heartbeat's: a present's time and a beat's are on one clock
        self.layer_path = layer_path
        self._layer_path_required = layer_path_required
        self.period_ns = period_ns
        self.immediate = immediate
        self.stats = CaptureStats()
        self._on_new_image = on_new_image
        self._audio = audio
        #: Called (on the loop) with (pad, command) when a game asks a pad to rumble.
        self.on_rumble: Callable[[int, RumbleCommand], None] | None = None
        self._listeners: dict[str, socket.socket] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._vulkan: VulkanHost | None = None
        self._vulkan_problem: str | None = None
        self._last_vulkan: dict[str, Any] | None = None
        self._games: dict[int, _Game] = {}
        self._next_id = 1
        self._active: int | None = None  # the game being streamed

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._listen(self.path)
        log.info("capture socket: %s (games connect with pyrofling.capture)", self.path)
        if self.layer_path is not None:
            try:
                self._listen(self.layer_path)
            except OSError as exc:
                if self._layer_path_required:
                    self.close()
                    raise
                log.warning("PyroFling layer socket not served: %s (pass --layer-socket PATH)", exc.strerror or exc)
                self.layer_path = None
            else:
                log.info("PyroFling layer socket: %s (Vulkan games with PYROFLING=1)", self.layer_path)

    def _listen(self, path: str) -> None:
        assert self._loop is not None
        prepare_socket_dir(path)
        _claim_path(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        try:
            sock.bind(path)
            os.chmod(path, 0o600)  # only this user's games
            sock.listen(16)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._listeners[path] = sock
        self._loop.add_reader(sock.fileno(), self._accept, sock)

    def close(self) -> None:
        for game in list(self._games.values()):
            self._drop(game, "host stopping", log_it=False)
        for path, sock in self._listeners.items():
            if self._loop is not None:
                self._loop.remove_reader(sock.fileno())
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(path)
        self._listeners.clear()
        if self._vulkan is not None:
            self._vulkan.close()
            self._vulkan = None

    @property
    def active_name(self) -> str | None:
        game = self._games.get(self._active) if self._active is not None else None
        return game.name if game is not None else None

    @property
    def games(self) -> int:
        return len(self._games)

    # -- host side -------------------------------------------------------------------------------

    def beat(self, now: float, next_beat_s: float) -> None:
        """A heartbeat: every game's swapchain advances; FrameComplete and retires go out."""
        for game in list(self._games.values()):
            if game.swapchain is not None:
                self._perform(game, game.swapchain.beat(now, next_beat_s))

    def take(self) -> CapturedFrame | None:
        """The streamed game's newest ready image, or None (no game, or nothing presented yet)."""
        game = self._games.get(self._active) if self._active is not None else None
        if game is None or game.swapchain is None:
            return None
        taken = game.swapchain.take()
        if taken is None:
            return None
        if game.vk_group is not None:
            return CapturedFrame(game.conn_id, taken, game.vk_group.pixels(taken.index), game.vk_group.av_name)
        assert game.group is not None
        return CapturedFrame(game.conn_id, taken, game.images[taken.index], game.group.format.av_name)

    def has_new(self) -> bool:
        game = self._games.get(self._active) if self._active is not None else None
        return game is not None and game.swapchain is not None and game.swapchain.has_new()

    def release(self, frame: CapturedFrame) -> None:
        """The encoder has read ``frame``'s pixels."""
        game = self._games.get(frame.conn_id)
        if game is not None and game.swapchain is not None:
            self._perform(game, game.swapchain.release(frame.taken))

    def pad_update(self, update: PadUpdate, pad: int = 1) -> None:
        """A PadOutput listener: every game gets the state the host applied to a pad (pad 1 as GAMEPAD_STATE,
        as before; the players' own pads 2.. as PAD_STATE with the pad's number)."""
        state = update.state.message(update.seq or 0)
        event = m.gamepad_event(state) if pad == 1 else m.PadStateEvent(pad, state.payload()).encode(0)
        for game in list(self._games.values()):
            if game.intent == m.Intent.SHARED_MEMORY_FRAMES:  # PyroFling's layer drops on events it does not know
                game.unsent_pads.pop(pad, None)  # a pad's state replaces the last one
                if not self._send(game, event, droppable=True):
                    game.unsent_pads[pad] = event
                    self._flush_when_writable(game)

    def input_update(self, update: InputUpdate) -> None:
        """An InputOutput listener: every game gets what the host applied to its keyboard and mouse."""
        for game in list(self._games.values()):
            if game.intent == m.Intent.SHARED_MEMORY_FRAMES:
                pending = update.after(game.unsent_input) if game.unsent_input is not None else update
                game.unsent_input = None
                if not self._send(game, _input_event(pending), droppable=True):
                    game.unsent_input = pending
                    self._flush_when_writable(game)

    def _flush_when_writable(self, game: _Game) -> None:
        if self._loop is not None and not game.flush_armed:
            game.flush_armed = True
            self._loop.add_writer(game.sock.fileno(), self._flush_unsent, game)

    def _flush_unsent(self, game: _Game) -> None:
        """The game's socket has room again: the pad and input states it missed, newest only."""
        game.flush_armed = False
        if self._loop is not None:
            with contextlib.suppress(ValueError, OSError):
                self._loop.remove_writer(game.sock.fileno())
        if game.conn_id not in self._games:
            return
        pads, game.unsent_pads = game.unsent_pads, {}
        for pad, event in pads.items():
            if not self._send(game, event, droppable=True):
                game.unsent_pads[pad] = event
        if game.unsent_input is not None and self._send(game, _input_event(game.unsent_input), droppable=True):
            game.unsent_input = None
        if game.unsent_pads or game.unsent_input is not None:
            self._flush_when_writable(game)

    def summary(self) -> dict[str, Any]:
        st = self.stats
        chains = [g.swapchain for g in self._games.values() if g.swapchain is not None]
        return {
            "socket": self.path,
            "games": len(self._games),
            "games_total": st.games_total,
            "games_refused": st.games_refused,
            "rumbles": st.rumbles,
            "streamed": self.active_name,
            "image_groups": st.image_groups,
            "presents": st.presents + sum(c.stats.presents for c in chains),
            "encoded": st.encoded + sum(c.stats.encoded for c in chains),
            "repeats": st.repeats + sum(c.stats.repeats for c in chains),
            "superseded": st.superseded + sum(c.stats.superseded for c in chains),
            "errors": dict(st.errors),
            "events_dropped": st.events_dropped + sum(g.events_dropped for g in self._games.values()),
            "audio_bytes": st.audio_bytes,
            "layer_socket": self.layer_path,
            "vulkan_games": st.vulkan_games,
            "vulkan": self._vulkan_summary(),
        }

    def _vulkan_summary(self) -> dict[str, Any] | None:
        """The streamed (else the last) Vulkan game's images and what reading them costs."""
        game = self._games.get(self._active) if self._active is not None else None
        group = game.vk_group if game is not None else None
        return _group_summary(group) if group is not None else self._last_vulkan

    # -- socket ----------------------------------------------------------------------------------

    def _accept(self, listener: socket.socket) -> None:
        assert self._loop is not None
        while True:
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("capture socket accept failed: %s", exc)
                return
            uid = peer_uid(sock)
            if uid != os.getuid():  # a socket file's mode is not the whole story: ask the kernel who it is
                self.stats.games_refused += 1
                log.warning("capture: refused a connection from uid %d (only this user's games may present)", uid)
                sock.close()
                continue
            sock.setblocking(False)
            game = _Game(self._next_id, sock)
            self._next_id += 1
            self._games[game.conn_id] = game
            self.stats.games_total += 1
            self._loop.add_reader(sock.fileno(), self._readable, game)

    def _readable(self, game: _Game) -> None:
        while game.conn_id in self._games:
            try:
                data, ancdata, flags, _ = game.sock.recvmsg(
                    m.MAX_MESSAGE_BYTES + 1, socket.CMSG_SPACE(m.MAX_FDS * array.array("i").itemsize)
                )
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._drop(game, f"receive failed: {exc}")
                return
            fds = _fds_of(ancdata)
            try:
                if not data and not fds:
                    self._drop(game, "game disconnected")
                    return
                self._handle(game, data, fds, flags)
            finally:
                for fd in fds:
                    with contextlib.suppress(OSError):
                        os.close(fd)  # mappings hold their own reference

    def _handle(self, game: _Game, data: bytes, fds: list[int], flags: int) -> None:
        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            self._error(game, 0, m.MessageType.ERROR_PROTOCOL, "message or file descriptors truncated", "truncated")
            return
        try:
            header, payload = m.unpack(data)
        except ProtocolError as exc:
            self._error(game, 0, m.MessageType.ERROR_PROTOCOL, str(exc), exc.reason)
            return
        if header.type & m.EVENT:
            self._error(game, header.serial, m.MessageType.ERROR_PROTOCOL, "games send requests, not events", "event")
            return
        one_way = bool(header.type & m.ONE_WAY)
        if header.serial <= game.last_serial:
            if not one_way:
                self._error(
                    game,
                    header.serial,
                    m.MessageType.ERROR_PROTOCOL,
                    f"serial {header.serial} does not follow {game.last_serial}",
                    "serial",
                )
            return
        game.last_serial = header.serial
        try:
            reply = self._request(game, header, payload, fds)
        except ProtocolError as exc:
            kind = m.MessageType.ERROR_PARAMETER if exc.reason == "bad_field" else m.MessageType.ERROR_PROTOCOL
            reply = (kind, str(exc), exc.reason)
        if one_way or reply is None:
            return
        kind, text, reason = reply
        if kind is m.MessageType.OK:
            self._send(game, m.pack(header.serial, m.MessageType.OK))
        elif kind is m.MessageType.SERVER_HELLO:
            caps = m.ServerCapability.GAMEPAD_EVENTS | m.ServerCapability.INPUT_EVENTS | self._audio_cap
            hello = m.ServerHello(m.VERSION, int(caps), self.period_ns)
            self._send(game, hello.encode(header.serial))
        else:
            self._error(game, header.serial, kind, text, reason)

    @property
    def _audio_cap(self) -> m.ServerCapability:
        return m.ServerCapability.AUDIO if self._audio is not None else m.ServerCapability(0)

    def _request(
        self, game: _Game, header: m.Header, payload: memoryview, fds: list[int]
    ) -> tuple[m.MessageType, str, str] | None:
        t = header.type
        if t == m.MessageType.CLIENT_HELLO:
            if fds:
                raise ProtocolError(f"message type {t} carries no file descriptors")
            if game.hello:
                return m.MessageType.ERROR_PROTOCOL, "CLIENT_HELLO was already said", "hello_again"
            hello = m.ClientHello.parse_payload(payload)
            if hello.intent == m.Intent.VULKAN_EXTERNAL_STREAM:
                problem = self._vulkan_ready()
                if problem is not None:
                    return m.MessageType.ERROR, problem, "no_vulkan"
                self.stats.vulkan_games += 1
            elif hello.intent != m.Intent.SHARED_MEMORY_FRAMES:
                return m.MessageType.ERROR, f"intent {hello.intent} is not supported", "intent"
            game.hello, game.name, game.intent = True, hello.text_name or f"game {game.conn_id}", hello.intent
            log.info("capture: %s connected%s", game.name, " (Vulkan layer)" if game.intent == 1 else "")
            return m.MessageType.SERVER_HELLO, "", ""
        if not game.hello:
            return m.MessageType.ERROR_PROTOCOL, "say CLIENT_HELLO first", "no_hello"
        if game.intent == m.Intent.VULKAN_EXTERNAL_STREAM:
            return self._layer_request(game, header, payload, fds)
        if fds and t != m.MessageType.IMAGE_GROUP:
            raise ProtocolError(f"message type {t} carries no file descriptors")
        if t == m.MessageType.IMAGE_GROUP:
            return self._image_group(game, header.serial, m.ImageGroup.parse_payload(payload), fds)
        if t == m.MessageType.PRESENT_IMAGE:
            return self._present(game, m.PresentImage.parse_payload(payload))
        if t == m.MessageType.AUDIO_FORMAT:
            if self._audio is None:
                return m.MessageType.ERROR, "this host does not take audio from games (host --audio game)", "no_audio"
            fmt = m.AudioFormat.parse_payload(payload)
            problem = self._audio.accepts(fmt.rate, fmt.channels)
            if problem is not None:
                return m.MessageType.ERROR_PARAMETER, problem, "audio_format"
            game.audio = fmt
            return m.MessageType.OK, "", ""
        if t == m.MessageType.RUMBLE:
            req = m.RumbleRequest.parse_payload(payload)
            self.stats.rumbles += 1
            if self.on_rumble is not None:
                self.on_rumble(req.pad, RumbleCommand(req.strong, req.weak, req.duration_ms))
            return None
        if t == m.MessageType.AUDIO_SAMPLES:
            if game.audio is not None and self._audio is not None and game.conn_id == self._active:
                frame_bytes = 2 * game.audio.channels
                pcm = bytes(payload[: len(payload) - len(payload) % frame_bytes])
                self.stats.audio_bytes += len(pcm)
                self._audio.feed(pcm)
            return None
        return m.MessageType.ERROR_PROTOCOL, f"unknown message type {t}", "unknown_type"

    # -- PyroFling's Vulkan layer ----------------------------------------------------------------

    def _vulkan_ready(self) -> str | None:
        """Why this host cannot take Vulkan games (said once in the log), or None once its instance exists."""
        if self._vulkan is not None:
            return None
        if self._vulkan_problem is None:
            problem = vulkan_problem()
            if problem is None:
                try:
                    self._vulkan = VulkanHost()
                    return None
                except Exception as exc:  # the driver's word, whatever it is: the host goes on without Vulkan
                    problem = f"cannot create a Vulkan instance: {exc!r}"
            self._vulkan_problem = f"this host cannot read Vulkan games: {problem}"
            log.warning("capture: %s; other games and sources are unaffected", self._vulkan_problem)
        return self._vulkan_problem

    def _layer_request(
        self, game: _Game, header: m.Header, payload: memoryview, fds: list[int]
    ) -> tuple[m.MessageType, str, str] | None:
        t = header.type
        if t == m.MessageType.DEVICE:
            if fds:
                raise ProtocolError("DEVICE carries no file descriptors")
            assert self._vulkan is not None
            device = m.Device.parse_payload(payload)
            try:
                game.vk_device = self._vulkan.device_for(device)
            except VulkanError as exc:
                return m.MessageType.ERROR, str(exc), "vulkan_device"
            if game.vk_device is None:
                gpus = ", ".join(g.name for g in self._vulkan.gpus) or "none"
                text = f"the game's GPU is not one this host can open (this host has: {gpus})"
                log.warning("capture: %s: %s", game.name, text)
                return m.MessageType.ERROR, text, "vulkan_device"
            return m.MessageType.OK, "", ""
        if t == m.MessageType.IMAGE_GROUP:
            return self._layer_image_group(game, header.serial, m.VulkanImageGroup.parse_payload(payload), fds)
        if t == m.MessageType.PRESENT_IMAGE:
            if len(fds) > 1:
                raise ProtocolError(f"a present carries at most one semaphore fd, not {len(fds)}")
            return self._layer_present(game, m.VulkanPresentImage.parse_payload(payload), fds[0] if fds else None)
        if fds:
            raise ProtocolError(f"message type {t} carries no file descriptors")
        return m.MessageType.ERROR_PROTOCOL, f"message type {t} is not one PyroFling's layer sends", "unknown_type"

    def _layer_image_group(
        self, game: _Game, serial: int, group: m.VulkanImageGroup, fds: list[int]
    ) -> tuple[m.MessageType, str, str]:
        if game.vk_device is None:
            return m.MessageType.ERROR_PROTOCOL, "send DEVICE before IMAGE_GROUP", "no_device"
        if len(fds) != group.num_images:
            return m.MessageType.ERROR_PARAMETER, f"{group.num_images} images need as many fds, got {len(fds)}", "fds"
        problem = group.problem()
        if problem is not None:
            log.warning("capture: %s: cannot stream its images: %s", game.name, problem)
            return m.MessageType.ERROR_PARAMETER, problem, "vulkan_format"
        try:
            imported = ImportedGroup(game.vk_device, group, fds)
        except VulkanError as exc:
            log.warning("capture: %s: %s", game.name, exc)
            return m.MessageType.ERROR, str(exc), "vulkan_import"
        if game.vk_group is not None:
            game.vk_group.close()  # arrays the encoder still reads stay valid: they are the host's memory
        game.vk_group = imported
        what = f"{m.VkFormat(group.vk_format).name} on {game.vk_device.ids.name}"
        self._new_group(game, serial, group.num_images, f"{group.width}x{group.height} {what}")
        return m.MessageType.OK, "", ""

    def _layer_present(
        self, game: _Game, present: m.VulkanPresentImage, semaphore_fd: int | None
    ) -> tuple[m.MessageType, str, str] | None:
        if game.swapchain is None or game.vk_group is None:
            return m.MessageType.ERROR_PROTOCOL, "send an IMAGE_GROUP before presenting", "no_group"
        if present.semaphore_type and semaphore_fd is None:
            return m.MessageType.ERROR_PARAMETER, "the present names a semaphore but carries no fd", "semaphore"
        group = game.vk_group
        return self._present(game, present.as_present(), read=lambda: group.read(present, semaphore_fd))

    # -- pyrofling's shared-memory games -----------------------------------------------------------

    def _image_group(
        self, game: _Game, serial: int, group: m.ImageGroup, fds: list[int]
    ) -> tuple[m.MessageType, str, str]:
        if len(fds) != group.num_images:
            return m.MessageType.ERROR_PARAMETER, f"{group.num_images} images need as many fds, got {len(fds)}", "fds"
        images = []
        for fd in fds:
            problem = _check_memfd(fd, group.image_bytes)
            if problem is not None:
                return m.MessageType.ERROR_PARAMETER, problem, "memfd"
            mapping = mmap.mmap(fd, group.image_bytes, mmap.MAP_SHARED, mmap.PROT_READ)
            bpp = group.format.bytes_per_pixel
            images.append(np.ndarray((group.height, group.width, bpp), np.uint8, mapping, 0, (group.stride, bpp, 1)))
        game.group, game.images = group, images
        self._new_group(game, serial, group.num_images, f"{group.width}x{group.height} {group.format.name}")
        return m.MessageType.OK, "", ""

    def _new_group(self, game: _Game, serial: int, num_images: int, what: str) -> None:
        """A game's images were (re)created: a new swapchain, and this game is now the one streamed."""
        if game.swapchain is not None:
            self._absorb(game.swapchain)
            game.swapchain.replace(serial, num_images)
        else:
            game.swapchain = Swapchain(serial, num_images, self.period_ns, immediate=self.immediate)
        self.stats.image_groups += 1
        if self._active != game.conn_id:
            self._active = game.conn_id
            log.info("capture: streaming %s, %d images of %s", game.name, num_images, what)

    def _present(
        self, game: _Game, present: m.PresentImage, read: Callable[[], None] | None = None
    ) -> tuple[m.MessageType, str, str]:
        """``read``: start reading a Vulkan image once the present is accepted."""
        if game.swapchain is None:
            return m.MessageType.ERROR_PROTOCOL, "send an IMAGE_GROUP before presenting", "no_group"
        error, events = game.swapchain.present(present, self._clock.now())
        if error is not None:
            return m.MessageType.ERROR_PARAMETER, error, "present"
        if read is not None:
            try:
                read()
            except VulkanError as exc:
                # As PyroFling's server does: an image it cannot read ends the connection (after the reply).
                game.errors = MAX_ERRORS_PER_CLIENT - 1
                return m.MessageType.ERROR, str(exc), "vulkan_read"
        self._perform(game, events)
        if self.immediate and game.conn_id == self._active and self._on_new_image is not None:
            self._on_new_image()
        return m.MessageType.OK, "", ""

    def _perform(self, game: _Game, events: list[Any]) -> None:
        for event in events:
            if isinstance(event, Retire):
                serial = game.swapchain.group_serial if game.swapchain is not None else 0
                if game.vk_group is not None:
                    try:
                        game.vk_group.settle(event.index)  # the copy must be done before the game writes again
                    except VulkanError as exc:
                        self._drop(game, str(exc))
                        return
                self._send(game, m.AcquireImage(serial, event.index).encode(0))
                self._send(game, m.RetireImage(serial, event.index).encode(0))
            else:
                self._send(game, event.encode(0))

    def _send(self, game: _Game, data: bytes, *, droppable: bool = False) -> bool:
        """Whether ``data`` went out.  A full socket drops a ``droppable`` event (the caller keeps its state), and
        the game for anything else."""
        if game.conn_id not in self._games:
            return False
        try:
            game.sock.send(data)
            return True
        except (BlockingIOError, InterruptedError):
            if droppable:
                game.events_dropped += 1
            else:
                self._drop(game, "it stopped reading its socket")
        except OSError as exc:
            self._drop(game, f"send failed: {exc}")
        return False

    def _error(self, game: _Game, serial: int, kind: m.MessageType, text: str, reason: str) -> None:
        self.stats.errors[reason] += 1
        game.errors += 1
        log.debug("capture: %s: %s", game.name, text)
        self._send(game, m.pack(serial, kind, text.encode()[: m.MAX_PAYLOAD_BYTES]))
        if game.errors >= MAX_ERRORS_PER_CLIENT:
            self._drop(game, f"{game.errors} bad requests (last: {text})")

    def _absorb(self, chain: Swapchain) -> None:
        st, cs = self.stats, chain.stats
        st.presents += cs.presents
        st.encoded += cs.encoded
        st.repeats += cs.repeats
        st.superseded += cs.superseded
        chain.stats = type(cs)()

    def _drop(self, game: _Game, reason: str, *, log_it: bool = True) -> None:
        if self._games.pop(game.conn_id, None) is None:
            return
        if game.swapchain is not None:
            self._absorb(game.swapchain)
        self.stats.events_dropped += game.events_dropped
        if self._loop is not None:
            with contextlib.suppress(ValueError, OSError):
                self._loop.remove_reader(game.sock.fileno())
            if game.flush_armed:
                with contextlib.suppress(ValueError, OSError):
                    self._loop.remove_writer(game.sock.fileno())
        game.sock.close()
        game.images = []  # an image the encoder still reads keeps its mapping alive until it is done
        if game.vk_group is not None:
            if self._active == game.conn_id:
                self._last_vulkan = _group_summary(game.vk_group)
            game.vk_group.close()  # likewise: its arrays are the host's memory
            game.vk_group = None
        if log_it and game.hello:
            log.info("capture: %s left (%s)", game.name, reason)
        if self._active == game.conn_id:
            with_group = [g for g in self._games.values() if g.group is not None or g.vk_group is not None]
            self._active = with_group[-1].conn_id if with_group else None
            if self._active is not None:
                log.info("capture: streaming %s", self._games[self._active].name)


def _input_event(update: InputUpdate) -> bytes:
    ax, ay = update.absolute or (0, 0)
    flags = 1 if update.absolute is not None else 0
    motion = (update.dx, update.dy, update.wheel, update.hwheel)
    return m.InputEvent(key_bitmap(update.keys), update.buttons, flags, *motion, ax, ay).encode(0)


def _fds_of(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            ints = array.array("i")
            ints.frombytes(data[: len(data) - len(data) % ints.itemsize])
            fds.extend(ints)
    return fds


def _check_memfd(fd: int, needed: int) -> str | None:
    """Why ``fd`` cannot back an image of ``needed`` bytes, or None.

    It must be sealed against shrinking: a game that truncated a mapped file
    under the encoder would crash the host with SIGBUS.
    """
    try:
        st = os.fstat(fd)
    except OSError as exc:
        return f"cannot stat the image fd: {exc.strerror}"
    if not stat.S_ISREG(st.st_mode):
        return "an image fd must be a memfd"
    if st.st_size < needed:
        return f"the image memfd has {st.st_size} bytes, the image needs {needed}"
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError:
        return "the image fd is not a memfd (no seals)"
    if not seals & fcntl.F_SEAL_SHRINK:
        return "the image memfd must be sealed with F_SEAL_SHRINK"
    return None


def _claim_path(path: str) -> None:
    """Remove a stale socket left by a host that died; refuse if a live host or a non-socket is there."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise OSError(errno.EEXIST, f"{path} exists and is not a socket; pass another --capture-socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        probe.settimeout(0.5)
        probe.connect(path)
    except OSError:
        os.unlink(path)  # nobody listening: left over from a host that died
        return
    finally:
        probe.close()
    raise OSError(errno.EADDRINUSE, f"another host is serving the capture socket {path}; pass another --capture-socket")


def _median(values: Any) -> float | None:
    ordered = sorted(values)
    return round(ordered[len(ordered) // 2], 3) if ordered else None


def _group_summary(group: ImportedGroup) -> dict[str, Any]:
    st = group.stats
    return {
        "gpu": group.device.ids.name,
        "format": m.VkFormat(group.group.vk_format).name,
        "size": f"{group.group.width}x{group.group.height}",
        "presents": st.presents,
        "semaphores_imported": st.semaphores_imported,
        "semaphores_assumed": st.semaphores_assumed,
        "submit_ms_median": _median(st.submit_ms),
        "wait_ms_median": _median(st.wait_ms),
    }
