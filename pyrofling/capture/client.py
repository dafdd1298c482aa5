"""The game's side of the capture socket: a swapchain of numpy arrays in shared memory.

::

    with CaptureClient(1280, 720, name="my game") as capture:
        while running:
            frame = capture.acquire()        # an image the host is not reading
            draw(frame.array)                # (720, 1280, 4) uint8, RGBA, in shared memory
            capture.present(frame)           # FIFO: returns when the host's heartbeat took it
            pad = capture.gamepad            # what the viewers' pad says, no uinput needed

Each image is a sealed ``memfd`` the host maps too, so presenting copies nothing.
``present`` paces the game to the host's frame clock (``sync="fifo"``, the default;
the clock is phase-locked to the viewers' displays), or never blocks
(``sync="mailbox"``: the newest present at each heartbeat wins).  In FIFO mode it
can return *just in time* (``just_in_time=True``; off by default, see below): not when the
heartbeat took the last picture but as late as the game's own frame time allows
before the next one (:mod:`pyrofling.core.just_in_time`), so the pad state the
next frame reads is the newest.  Where a game's frame is short it saves most of a frame of input latency
(the example game drawn with numpy on a 16-CPU machine: input to photon 1.81 → 0.90 frames); where the frame
takes most of a period (software GL on 2 cores) it changes nothing.  The example game turns it on; a game
whose frame time swings widely may miss heartbeats with it, so here it is the game's choice.

The game does not need the host to be there: without one, the images are plain
local memory, ``present`` paces at ``fallback_fps``, and the client tries to
connect again every ``reconnect_s``, so a game may start before the host and
survives the host restarting.

A reader thread receives the host's replies and events (image free again,
FrameComplete, gamepad), so a game that stops presenting never blocks the host.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import logging
import mmap
import os
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from pyrofling.capture.paths import default_socket_path, peer_uid
from pyrofling.core.input.pad import NEUTRAL, PadState
from pyrofling.core.just_in_time import JustInTime
from pyrofling.wire import ProtocolError
from pyrofling.wire import capture as m

log = logging.getLogger(__name__)

SYNC_MODES = ("fifo", "mailbox")


class CaptureRequestError(RuntimeError):
    """The host refused a request (its reason is the message)."""


@dataclass(frozen=True, slots=True)
class Frame:
    """An acquired image: draw into ``array``, then give it to :meth:`CaptureClient.present`."""

    index: int
    array: npt.NDArray[np.uint8]  # (height, width, bytes per pixel)


@dataclass(slots=True)
class CaptureStats:
    connects: int = 0
    disconnects: int = 0
    presents: int = 0
    presents_local: int = 0  # while no host was there
    frame_completes: int = 0
    gamepad_states: int = 0
    input_events: int = 0
    errors: int = 0
    #: Just in time: frames started later than FrameComplete, presents that still missed their heartbeat.
    frames_delayed: int = 0
    late_presents: int = 0
    #: ``time.monotonic()`` when each present returned (the game's frame clock), last 100 000.
    present_times: deque[float] = field(default_factory=lambda: deque(maxlen=100_000))


class _Image:
    """One sealed memfd and its mapping, kept for the client's life (passed again on reconnect)."""

    def __init__(self, index: int, width: int, height: int, fmt: m.PixelFormat, name: str) -> None:
        self.stride = width * fmt.bytes_per_pixel
        size = self.stride * height
        self.fd = os.memfd_create(f"{name}-{index}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, size)
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        self.map = mmap.mmap(self.fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.array: npt.NDArray[np.uint8] = np.ndarray((height, width, fmt.bytes_per_pixel), np.uint8, self.map)

    def close(self) -> None:
        os.close(self.fd)  # the mapping stays valid while the game holds arrays of it


class _Connection:
    """One connection to a host: the socket, its reader thread, and what the host told us."""

    def __init__(self, sock: socket.socket, client: CaptureClient) -> None:
        self.sock = sock
        self.client = client
        self.alive = True
        self.serial = 0
        self.replies: dict[int, tuple[int, bytes]] = {}
        self.send_lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, name="pyrofling-capture-reader", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        client = self.client
        try:
            while True:
                data = self.sock.recv(m.MAX_MESSAGE_BYTES + 1)
                if not data:
                    break
                try:
                    header, payload = m.unpack(data)
                except ProtocolError as exc:
                    log.warning("capture: malformed message from the host: %s", exc)
                    continue
                if header.type & m.EVENT:
                    client._event(self, header.type, payload)
                else:
                    with client._cond:
                        self.replies[header.serial] = (header.type, bytes(payload))
                        client._cond.notify_all()
        except OSError:
            pass
        with client._cond:
            self.alive = False
            client._cond.notify_all()

    def request(self, type_: int, payload: bytes = b"", fds: list[int] | None = None, *, timeout: float = 1.0) -> bytes:
        """Send a request and wait for its reply; CaptureRequestError if refused, OSError if the host is gone."""
        with self.send_lock:
            self.serial += 1
            serial = self.serial
            self._send(m.pack(serial, type_, payload), fds)
        deadline = time.monotonic() + timeout
        cond = self.client._cond
        with cond:
            while serial not in self.replies:
                left = deadline - time.monotonic()
                if not self.alive or left <= 0:
                    raise OSError(
                        "the host closed the capture socket" if not self.alive else "the host is not answering"
                    )
                cond.wait(left)
            kind, body = self.replies.pop(serial)
        if kind not in (m.MessageType.OK, m.MessageType.SERVER_HELLO):
            try:
                name = m.MessageType(kind).name
            except ValueError:
                name = f"reply type {kind}"
            raise CaptureRequestError(f"{name}: {m.error_text(body) or 'no reason given'}")
        return body

    def one_way(self, type_: int, payload: bytes) -> None:
        with self.send_lock:
            self.serial += 1
            self._send(m.pack(self.serial, type_, payload), None)

    def _send(self, data: bytes, fds: list[int] | None) -> None:
        if fds:
            ancdata = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
            self.sock.sendmsg([data], ancdata)
        else:
            self.sock.send(data)

    def close(self) -> None:
        self.alive = False
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


class CaptureClient:
    """A game's swapchain on the host's capture socket.  Thread-safe for one rendering thread plus audio."""

    def __init__(
        self,
        width: int,
        height: int,
        *,
        pixel_format: str = "rgba",
        images: int = 3,
        sync: str = "fifo",
        frames_in_flight: int = 1,
        name: str = "pyrofling game",
        path: str | None = None,
        reconnect_s: float = 0.5,
        fallback_fps: float = 60.0,
        on_gamepad: Callable[[int, PadState], None] | None = None,
        on_input: Callable[[m.InputEvent], None] | None = None,
        just_in_time: bool = False,
    ) -> None:
        """
        ``images``: 2..16 shared images.  ``sync``: fifo (paced by the host) or mailbox (never waits).
        ``frames_in_flight``: with fifo, presents that may wait for a heartbeat before ``present``
        blocks; 1 (the default) gives the lowest latency, 2 is PyroFling's layer.  ``on_gamepad``:
        called on the reader thread with (sequence, state) for every state the host applies.
        ``just_in_time``: with fifo and one frame in flight, ``present`` returns as late as the game's
        frame time allows before the next heartbeat (newer input); False: as soon as the host took it.
        """
        if sync not in SYNC_MODES:
            raise ValueError(f"sync must be one of {', '.join(SYNC_MODES)}, not {sync!r}")
        if not 2 <= images <= m.MAX_FDS:
            raise ValueError(f"a swapchain has 2..{m.MAX_FDS} images, not {images}")
        if frames_in_flight < 1:
            raise ValueError("frames_in_flight must be at least 1")
        self.format = m.PixelFormat.named(pixel_format)
        group = m.ImageGroup(images, width, height, self.format, width * self.format.bytes_per_pixel)
        try:
            group.check()
        except ProtocolError as exc:
            raise ValueError(str(exc)) from None
        self.width, self.height = width, height
        self.sync = sync
        self.frames_in_flight = frames_in_flight
        self.name = name
        self.path = path or default_socket_path()
        self.reconnect_s = reconnect_s
        self._told_waiting = False
        self.fallback_period_s = 1.0 / fallback_fps
        self.on_gamepad = on_gamepad
        #: Called on the reader thread with every keyboard and mouse update the host applies (protocol.md §8.5).
        self.on_input = on_input
        self._pads: dict[int, PadState] = {}
        #: Keys (Linux codes) and mouse buttons held, and motion not yet taken (:meth:`take_motion`).
        self.keys_held: frozenset[int] = frozenset()
        self.mouse_buttons = 0
        self.pointer: tuple[float, float] | None = None
        self._motion = [0, 0, 0, 0]
        self.stats = CaptureStats()
        self.period_ns: int | None = None  # the host's heartbeat, once connected
        self.capabilities = m.ServerCapability(0)
        self._group = group
        self._images = [_Image(i, width, height, self.format, "pyrofling-capture") for i in range(images)]
        self._cond = threading.Condition()
        self._conn: _Connection | None = None
        self._group_serial = 0
        self._free: deque[int] = deque(range(images))
        self._held: set[int] = set()
        self._present_id = 0
        self._completed_id = 0
        self._pad = NEUTRAL
        self._pad_seq: int | None = None
        self._next_try_s = 0.0
        self._next_local_s: float | None = None
        self._audio: m.AudioFormat | None = None
        self._closed = False
        self.pacing = JustInTime() if just_in_time and sync == "fifo" and frames_in_flight == 1 else None
        #: The newest FrameComplete: (when it came, its heartbeat, headroom s, period s, present id).
        self._complete: tuple[float, int, float, float, int] | None = None

    # -- public --------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        conn = self._conn
        return conn is not None and conn.alive

    @property
    def gamepad(self) -> PadState:
        """The newest pad state a viewer sent (neutral until one does)."""
        return self._pad

    def gamepad_of(self, pad: int) -> PadState:
        """Pad ``pad``'s newest state (a host with a pad per player: player ``pad``'s own); neutral until sent."""
        return self._pads.get(pad, NEUTRAL)

    def take_motion(self) -> tuple[int, int, int, int]:
        """Mouse motion and wheel (dx, dy, wheel, hwheel) since the last call: a game reads it once a frame."""
        with self._cond:
            dx, dy, wheel, hwheel = self._motion
            self._motion = [0, 0, 0, 0]
        return dx, dy, wheel, hwheel

    @property
    def gamepad_seq(self) -> int | None:
        """Its sequence number (None before the first), e.g. to stamp frames for latency measurement."""
        return self._pad_seq

    def acquire(self, timeout: float = 1.0) -> Frame:
        """An image to draw into.  Waits while the host reads every image (at most ``timeout``)."""
        self._ensure_connected()
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._free:
                left = deadline - time.monotonic()
                if not self.connected or left <= 0:
                    break
                self._cond.wait(left)
            if not self._free:  # the host went away or hangs: its images are ours again
                self._free.extend(i for i in range(len(self._images)) if i not in self._held)
                if self.connected:
                    self._disconnect("the host did not return an image in time")
            index = self._free.popleft()
            self._held.add(index)
        return Frame(index, self._images[index].array)

    def present(self, frame: Frame) -> None:
        """Give ``frame`` to the host; with fifo, returns when the host's frame clock has taken it."""
        with self._cond:
            if frame.index not in self._held:
                raise ValueError(f"image {frame.index} was not acquired (or was presented already)")
            self._held.discard(frame.index)
        conn = self._conn
        if conn is None or not conn.alive:
            self._present_local(frame.index)
            return
        self._present_id += 1
        present_id = self._present_id
        if self.pacing is not None:
            self.pacing.presenting(time.monotonic())
        period = 1 if self.sync == "fifo" else 0
        msg = m.PresentImage(self._group_serial, period, frame.index, 0, present_id)
        try:
            conn.request(m.MessageType.PRESENT_IMAGE, msg.payload())
        except (OSError, CaptureRequestError) as exc:
            self.stats.errors += isinstance(exc, CaptureRequestError)
            self._disconnect(f"present failed: {exc}")
            self._present_local(frame.index)
            return
        self.stats.presents += 1
        if self.sync == "fifo":
            self._wait_complete(conn, present_id - (self.frames_in_flight - 1))
            self._until_just_in_time(present_id)
        self.stats.present_times.append(time.monotonic())

    def start_audio(self, rate: int = 48_000, channels: int = 2) -> None:
        """Send audio with :meth:`send_audio` from now on (if the host takes it: ``host --audio game``)."""
        fmt = m.AudioFormat(rate, channels)
        try:
            fmt.check()
        except ProtocolError as exc:
            raise ValueError(str(exc)) from None
        self._audio = fmt
        conn = self._conn
        if conn is not None and conn.alive:
            self._announce_audio(conn)

    def send_audio(self, pcm: npt.NDArray[np.int16]) -> None:
        """Interleaved int16 samples, sent at once; dropped while no host (or no audio-taking host) is there."""
        conn = self._conn
        if self._audio is None or conn is None or not conn.alive:
            return
        if not self.capabilities & m.ServerCapability.AUDIO:
            return
        data = np.ascontiguousarray(pcm, dtype="<i2").tobytes()
        step = m.MAX_PAYLOAD_BYTES - m.MAX_PAYLOAD_BYTES % (2 * self._audio.channels)
        try:
            for start in range(0, len(data), step):
                conn.one_way(m.MessageType.AUDIO_SAMPLES, data[start : start + step])
        except OSError as exc:
            self._disconnect(f"audio send failed: {exc}")

    def rumble(self, strong: int, weak: int, duration_ms: int, *, pad: int = 1) -> None:
        """Ask the host to rumble pad ``pad``'s player's real pad: both motors 0..65535, for ``duration_ms``
        (0 stops, 65535 until the next call).  Dropped while no host is there."""
        conn = self._conn
        if conn is None or not conn.alive:
            return
        clamp = [max(0, min(0xFFFF, v)) for v in (strong, weak, duration_ms)]
        try:
            conn.one_way(m.MessageType.RUMBLE, m.RumbleRequest(pad, *clamp).payload())
        except OSError as exc:
            self._disconnect(f"rumble send failed: {exc}")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._disconnect(None)
        for image in self._images:
            image.close()

    def __enter__(self) -> CaptureClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- connection ----------------------------------------------------------------------------

    def _ensure_connected(self) -> None:
        if self.connected or self._closed:
            return
        if self._conn is not None:
            self._disconnect("the host closed the capture socket")
        now = time.monotonic()
        if now < self._next_try_s:
            return
        self._next_try_s = now + self.reconnect_s
        try:
            self._connect()
        except (OSError, CaptureRequestError) as exc:
            if not self._told_waiting:  # once per wait, not every half second
                self._told_waiting = True
                log.info("capture: waiting for a host on %s (pyrofling host --source capture)", self.path)
            log.debug("capture: no host at %s: %s", self.path, exc)
        else:
            self._told_waiting = False

    def _connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        try:
            sock.settimeout(1.0)  # a send that cannot go out in a second: the host hangs
            sock.connect(self.path)
            # The game's frames, memory and pad go only to a host run by the same user, wherever the socket is.
            uid = peer_uid(sock)
            if uid != os.getuid():
                raise CaptureRequestError(f"the capture socket {self.path} is served by uid {uid}, not by this user")
        except (OSError, CaptureRequestError):
            sock.close()
            raise
        sock.settimeout(None)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(1.0))
        conn = _Connection(sock, self)
        try:
            body = conn.request(m.MessageType.CLIENT_HELLO, m.ClientHello.of(self.name).payload())
            hello = m.ServerHello.parse_payload(body)
            serial = conn.serial + 1
            conn.request(m.MessageType.IMAGE_GROUP, self._group.payload(), [i.fd for i in self._images])
            if self._audio is not None and hello.capabilities & m.ServerCapability.AUDIO:
                self._announce_audio(conn)
        except (OSError, CaptureRequestError, ProtocolError):
            conn.close()
            raise
        with self._cond:
            self._conn = conn
            self._group_serial = serial
            self.period_ns = hello.period_ns
            self.capabilities = m.ServerCapability(hello.capabilities)
            self._present_id = self._completed_id = 0
            self._free = deque(i for i in range(len(self._images)) if i not in self._held)
            self._next_local_s = None
        self.stats.connects += 1
        log.info("capture: connected to the host at %s", self.path)

    def _announce_audio(self, conn: _Connection) -> None:
        assert self._audio is not None
        try:
            conn.request(m.MessageType.AUDIO_FORMAT, self._audio.payload())
        except CaptureRequestError as exc:
            log.warning("capture: the host takes no audio: %s", exc)

    def _disconnect(self, reason: str | None) -> None:
        with self._cond:
            conn, self._conn = self._conn, None
            self._free = deque(i for i in range(len(self._images)) if i not in self._held)
            self._cond.notify_all()
        if conn is None:
            return
        conn.close()
        if reason is not None:
            self.stats.disconnects += 1
            log.info("capture: disconnected (%s); will reconnect", reason)

    def _event(self, conn: _Connection, type_: int, payload: memoryview) -> None:
        """On the reader thread."""
        try:
            if type_ == m.MessageType.ACQUIRE_IMAGE:
                acquired = m.AcquireImage.parse_payload(payload)
                with self._cond:
                    ours = conn is self._conn and acquired.image_group_serial == self._group_serial
                    if ours and acquired.index not in self._free and acquired.index not in self._held:
                        self._free.append(acquired.index)
                        self._cond.notify_all()
            elif type_ == m.MessageType.FRAME_COMPLETE:
                done = m.FrameComplete.parse_payload(payload)
                with self._cond:
                    if conn is self._conn and done.image_group_serial == self._group_serial:
                        self._completed_id = max(self._completed_id, done.presented_id)
                        self._complete = (
                            time.monotonic(),
                            done.timestamp,
                            done.headroom_ns / 1e9,
                            done.period_ns / 1e9,
                            done.presented_id,
                        )
                        self.stats.frame_completes += 1
                        self._cond.notify_all()
            elif type_ == m.MessageType.INPUT_EVENT:
                ev = m.InputEvent.parse_payload(payload)
                with self._cond:
                    self.keys_held, self.mouse_buttons = ev.held(), ev.buttons
                    for i, v in enumerate((ev.dx, ev.dy, ev.wheel, ev.hwheel)):
                        self._motion[i] += v
                    if ev.flags & 1:
                        self.pointer = (ev.abs_x / 65535, ev.abs_y / 65535)
                self.stats.input_events += 1
                if self.on_input is not None:
                    self.on_input(ev)
            elif type_ == m.MessageType.GAMEPAD_STATE:
                g = m.parse_gamepad_event(payload)
                self._pad = self._pads[1] = PadState.of(g)
                self._pad_seq = g.seq
                self.stats.gamepad_states += 1
                if self.on_gamepad is not None:
                    self.on_gamepad(g.seq, self._pad)
            elif type_ == m.MessageType.PAD_STATE:  # another player's own pad (a host with --pads N)
                event = m.PadStateEvent.parse_payload(payload)
                self._pads[event.pad] = PadState.of(event.gamepad())
                self.stats.gamepad_states += 1
        except ProtocolError as exc:
            log.warning("capture: malformed event from the host: %s", exc)

    # -- pacing --------------------------------------------------------------------------------

    def _wait_complete(self, conn: _Connection, present_id: int) -> None:
        """Block until the host completed ``present_id`` (gives up after a few periods: a stalled host)."""
        period_s = (self.period_ns or 16_666_667) / 1e9
        deadline = time.monotonic() + max(0.25, 8 * period_s)
        with self._cond:
            while self._completed_id < present_id and conn.alive and conn is self._conn:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(left)

    def _until_just_in_time(self, present_id: int) -> None:
        """Just in time: sleep until the game's next frame should start (see :mod:`pyrofling.core.just_in_time`)."""
        pacing = self.pacing
        if pacing is None:
            return
        complete = self._complete
        if complete is not None and complete[4] == present_id:
            came_s, beat, headroom_s, period_s, _ = complete
            start = pacing.completed(came_s, beat=beat, headroom_s=headroom_s, period_s=period_s)
            delay = start - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self.stats.frames_delayed, self.stats.late_presents = pacing.stats.delayed, pacing.stats.late_presents
        pacing.frame_started(time.monotonic())

    def _present_local(self, index: int) -> None:
        """No host: the image is ours again at once; pace at the fallback rate."""
        with self._cond:
            if index not in self._free:
                self._free.append(index)
        self.stats.presents_local += 1
        now = time.monotonic()
        due = (self._next_local_s or now) + self.fallback_period_s
        if due < now:
            due = now  # fell behind: do not race to catch up
        if due > now:
            time.sleep(due - now)
        self._next_local_s = due
        self.stats.present_times.append(time.monotonic())


def _timeval(seconds: float) -> bytes:
    whole = int(seconds)
    return struct.pack("ll", whole, int((seconds - whole) * 1e6))
