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

Every rule — the protocol's order and serials, which game streams, which image to
encode and when to retire, what a full socket holds back — is
:class:`~pyrofling.core.host.capture_session.CaptureSessions`' (and each game's
:class:`~pyrofling.core.host.swapchain.Swapchain`'s); this module moves bytes and
file descriptors, and does the work a request needs: mapping a game's memory,
asking the Vulkan driver.  Any number of games may connect; the one that created
its image group last is the one streamed (like a window taking focus), the others
are paced but not encoded.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import errno
import logging
import os
import socket
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from pyrofling.capture.paths import peer_uid, prepare_socket_dir
from pyrofling.clocks import SYSTEM_CLOCK, Clock
from pyrofling.core.host.capture_session import (
    CaptureLog,
    CaptureOutput,
    CaptureSessions,
    DropGame,
    GameAudio,
    GameAudioRule,
    GameRumble,
    HostWork,
    NewImage,
    RetireImage,
    ToGame,
    WatchWritable,
)
from pyrofling.core.host.swapchain import EncodeImage
from pyrofling.core.input.keyboard_mouse import InputUpdate
from pyrofling.core.input.pad import PadUpdate
from pyrofling.core.input.pad.rumble import RumbleCommand
from pyrofling.server.capture_work import CaptureWork, GameMemory, group_summary
from pyrofling.server.vulkan_import import VulkanError
from pyrofling.wire import capture as m

log = logging.getLogger(__name__)


class GameAudioSink(GameAudioRule, Protocol):
    """Where the streamed game's audio goes (server/audio.py's GameAudioSource)."""

    def feed(self, pcm: bytes) -> None: ...


@dataclass(frozen=True, slots=True)
class CapturedFrame:
    """An image the encoder may read until :meth:`CaptureServer.release` is called with it."""

    conn_id: int
    taken: EncodeImage
    array: npt.NDArray[np.uint8]  # (height, width, bytes per pixel), rows ``stride`` apart, shared memory
    pixel_format: str  # PyAV's name: rgba, bgra, rgb24, bgr24; x2bgr10le, x2rgb10le (a Vulkan game's 10-bit)
    hdr10: bool = False  # BT.2020 primaries in PQ code values (a Vulkan game's HDR10 swapchain)


@dataclass(slots=True)
class _Game:
    """What the shell holds for a game: its socket and its images' memory."""

    conn_id: int
    sock: socket.socket
    memory: GameMemory = field(default_factory=GameMemory)


class CaptureServer:
    """Serves the capture socket on the running loop; the host calls :meth:`beat`, :meth:`take`, :meth:`release`."""

    def __init__(
        self,
        path: str,
        *,
        period_ns: int,
        immediate: bool = False,
        on_new_image: Callable[[], None] | None = None,
        audio: GameAudioSink | None = None,
        layer_path: str | None = None,
        layer_path_required: bool = False,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """``on_new_image``: called (on the loop) when the streamed game presents; ``audio``: takes its samples;
        ``layer_path``: also serve PyroFling's Vulkan layer there (a warning if it is taken, unless required);
        ``clock``: the heartbeat's (a present's time and a beat's are on one clock)."""
        self.path = path
        self.layer_path = layer_path
        self._layer_path_required = layer_path_required
        self.sessions = CaptureSessions(period_ns=period_ns, immediate=immediate, audio=audio)
        self.stats = self.sessions.stats
        self._clock = clock
        self._on_new_image = on_new_image
        self._audio = audio
        #: Called (on the loop) with (pad, command) when a game asks a pad to rumble.
        self.on_rumble: Callable[[int, RumbleCommand], None] | None = None
        self._listeners: dict[str, socket.socket] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._work = CaptureWork()
        self._last_vulkan: dict[str, Any] | None = None
        self._games: dict[int, _Game] = {}
        self._next_id = 1

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
        self._perform(self.sessions.close_all())
        for path, sock in self._listeners.items():
            if self._loop is not None:
                self._loop.remove_reader(sock.fileno())
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(path)
        self._listeners.clear()
        self._work.close()

    @property
    def active_name(self) -> str | None:
        return self.sessions.name(self.sessions.active)

    @property
    def games(self) -> int:
        return self.sessions.games

    def status(self) -> str:
        """For the host's status line: the game streamed, or where games may connect."""
        name = self.active_name
        if name:
            return f"; streaming game {name!r}"
        layer = f" or {self.layer_path}" if self.layer_path else ""
        return f"; waiting for a game on {self.path}{layer}"

    # -- host side -------------------------------------------------------------------------------

    def beat(self, now: float, next_beat_s: float) -> None:
        """A heartbeat: every game's swapchain advances; FrameComplete and retires go out."""
        self._perform(self.sessions.beat(now, next_beat_s))

    def take(self) -> CapturedFrame | None:
        """The streamed game's newest ready image, or None (no game, or nothing presented yet)."""
        taken = self.sessions.take()
        game = self._games.get(taken[0]) if taken is not None else None
        if taken is None or game is None:
            return None
        conn_id, image = taken
        memory = game.memory
        if memory.vk_group is not None:
            group = memory.vk_group
            return CapturedFrame(conn_id, image, group.pixels(image.index), group.av_name, group.group.hdr10)
        return CapturedFrame(conn_id, image, memory.images[image.index], memory.pixel_format)

    def has_new(self) -> bool:
        return self.sessions.has_new()

    def release(self, frame: CapturedFrame) -> None:
        """The encoder has read ``frame``'s pixels."""
        self._perform(self.sessions.release(frame.conn_id, frame.taken))

    def pad_update(self, update: PadUpdate, pad: int = 1) -> None:
        """A PadOutput listener: every game gets the state the host applied to a pad."""
        self._perform(self.sessions.pad_update(update, pad))

    def input_update(self, update: InputUpdate) -> None:
        """An InputOutput listener: every game gets what the host applied to its keyboard and mouse."""
        self._perform(self.sessions.input_update(update))

    def summary(self) -> dict[str, Any]:
        return {
            "socket": self.path,
            **self.sessions.summary(),
            "layer_socket": self.layer_path,
            "vulkan": self._vulkan_summary(),
        }

    def _vulkan_summary(self) -> dict[str, Any] | None:
        """The streamed (else the last) Vulkan game's images and what reading them costs."""
        active = self.sessions.active
        game = self._games.get(active) if active is not None else None
        group = game.memory.vk_group if game is not None else None
        return group_summary(group) if group is not None else self._last_vulkan

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
            sock.setblocking(False)
            game = _Game(self._next_id, sock)
            self._next_id += 1
            self._games[game.conn_id] = game
            uid = peer_uid(sock)  # a socket file's mode is not the whole story: ask the kernel who it is
            self._perform(self.sessions.connected(game.conn_id, same_user=uid == os.getuid(), uid=uid))
            if game.conn_id in self._games:
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
                self._perform(self.sessions.drop(game.conn_id, f"receive failed: {exc}"))
                return
            fds = _fds_of(ancdata)
            try:
                if not data and not fds:
                    self._perform(self.sessions.drop(game.conn_id, "game disconnected"))
                    return
                truncated = bool(flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC))
                now = self._clock.now()
                self._perform(self.sessions.message(game.conn_id, data, len(fds), truncated=truncated, now=now), fds)
            finally:
                for fd in fds:
                    with contextlib.suppress(OSError):
                        os.close(fd)  # mappings hold their own reference

    def _perform(self, outputs: list[CaptureOutput], fds: list[int] | None = None) -> None:
        """Carry out what the sessions said, in order; ``fds``: those that came with the message."""
        for out in outputs:
            if isinstance(out, ToGame):
                self._send(out)
            elif isinstance(out, RetireImage):
                game = self._games.get(out.conn_id)
                if game is not None and game.memory.vk_group is not None:
                    try:
                        game.memory.vk_group.settle(out.index)  # the copy must be done before the game writes again
                    except VulkanError as exc:
                        self._perform(self.sessions.drop(out.conn_id, str(exc)))
                        continue
                for data in out.data:
                    self._send(ToGame(out.conn_id, data))
            elif isinstance(out, HostWork):
                game = self._games.get(out.conn_id)
                problem, what = self._work.do(out, game.memory, fds or []) if game else ("the game is gone", "")
                self._perform(self.sessions.done(out, problem, what=what, now=self._clock.now()), fds)
            elif isinstance(out, DropGame):
                self._close(out.conn_id)
            elif isinstance(out, WatchWritable):
                game = self._games.get(out.conn_id)
                if game is not None and self._loop is not None:
                    self._loop.add_writer(game.sock.fileno(), self._writable, game)
            elif isinstance(out, CaptureLog):
                (log.warning if out.warning else log.info)("%s", out.text)
            elif isinstance(out, GameRumble):
                if self.on_rumble is not None:
                    self.on_rumble(out.pad, out.command)
            elif isinstance(out, GameAudio):
                if self._audio is not None:
                    self._audio.feed(out.pcm)
            elif isinstance(out, NewImage) and self._on_new_image is not None:
                self._on_new_image()

    def _send(self, out: ToGame) -> None:
        game = self._games.get(out.conn_id)
        if game is None:
            return
        try:
            game.sock.send(out.data)
        except (BlockingIOError, InterruptedError):
            self._perform(self.sessions.blocked(out))
        except OSError as exc:
            self._perform(self.sessions.drop(out.conn_id, f"send failed: {exc}"))

    def _writable(self, game: _Game) -> None:
        if self._loop is not None:
            with contextlib.suppress(ValueError, OSError):
                self._loop.remove_writer(game.sock.fileno())
        self._perform(self.sessions.writable(game.conn_id))

    def _close(self, conn_id: int) -> None:
        game = self._games.pop(conn_id, None)
        if game is None:
            return
        if self._loop is not None:
            for remove in (self._loop.remove_reader, self._loop.remove_writer):
                with contextlib.suppress(ValueError, OSError):
                    remove(game.sock.fileno())
        drain_before_close(game.sock)
        game.sock.close()
        self._last_vulkan = game.memory.release() or self._last_vulkan


#: What the host still reads from a game's socket as it closes it, at most (messages the game sent meanwhile).
DRAIN_LIMIT = 64


def drain_before_close(sock: socket.socket) -> None:
    """Read what the game sent that was not read yet: a Unix socket closed with unread bytes ends the game's side
    with "connection reset" instead of the end of the stream, and the game's layer reports an error for an
    ordinary host restart."""
    with contextlib.suppress(OSError):
        sock.setblocking(False)
        for _ in range(DRAIN_LIMIT):
            if not sock.recv(65536):
                return


def _fds_of(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            ints = array.array("i")
            ints.frombytes(data[: len(data) - len(data) % ints.itemsize])
            fds.extend(ints)
    return fds


def _claim_path(path: str) -> None:
    """Remove a stale socket left by a host that died; refuse if a live host or a non-socket is there."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise OSError(errno.EEXIST, f"{path} exists and is not a socket; pass another --capture-socket")
    if st.st_uid != os.geteuid():  # squatted: this user's games would present to someone else
        raise OSError(
            errno.EPERM,
            f"{path} belongs to another user (uid {st.st_uid}), and your games would present to it: serve a path "
            "of your own (--layer-socket $XDG_RUNTIME_DIR/pyrofling-layer) and start games with PYROFLING_SERVER "
            "set to the same path",
        )
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
