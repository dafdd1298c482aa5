"""The capture protocol's rules, for every game connected to the host (protocol.md §8); pure.

The capture shell (:mod:`pyrofling.server.capture`) reads a message and the number of
file descriptors that came with it and hands both over (:meth:`CaptureSessions.message`);
it never decides.  Back come outputs in order: bytes for a game (:class:`ToGame`), a
game to drop (:class:`DropGame`), lines to log, a rumble or game audio for the host, and
a :class:`HostWork` when a request needs what only the shell can do — look at a Vulkan
driver, map a game's memory, import or read its images.  The shell does that work and
reports with :meth:`CaptureSessions.done`, which answers the request.  File descriptors
are counted here, never held.

The rules: CLIENT_HELLO first and once, with an intent this host serves; serials that
only grow (a request out of order is an error, a one-way message is dropped); file
descriptors only where the message carries them; a game whose requests failed
:data:`MAX_ERRORS_PER_GAME` times is dropped; the game that created its images last is
the one streamed; what a game's full socket could not take of the pads and the keyboard
and mouse waits, newest state only and motion summed, until the socket has room.
Which image to encode, and when to retire, is each game's
:class:`~pyrofling.core.host.swapchain.Swapchain`'s.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from pyrofling.core.host.swapchain import EncodeImage, Retire, Swapchain, SwapchainStats
from pyrofling.core.input.keyboard_mouse import InputUpdate
from pyrofling.core.input.pad import PadUpdate
from pyrofling.core.input.pad.rumble import RumbleCommand
from pyrofling.wire import ProtocolError, key_bitmap
from pyrofling.wire import capture as m

#: A game's requests that failed, after which the host gives up on it.
MAX_ERRORS_PER_GAME = 64


class GameAudioRule(Protocol):
    """Which audio a game may send (the host's game audio source says)."""

    def accepts(self, rate: int, channels: int) -> str | None: ...


# -- outputs ----------------------------------------------------------------------------------------


class CaptureOutput:
    """Base of what :class:`CaptureSessions` asks the capture shell to do."""


@dataclass(frozen=True, slots=True)
class ToGame(CaptureOutput):
    """Send ``data`` (one message) to the game; if its socket has no room, tell :meth:`CaptureSessions.blocked`."""

    conn_id: int
    data: bytes


@dataclass(frozen=True, slots=True)
class GameEvent(ToGame):
    """A player's state for the game: one its full socket cannot take waits, the newest of its kind."""


@dataclass(frozen=True, slots=True)
class PadToGame(GameEvent):
    pad: int


@dataclass(frozen=True, slots=True)
class InputToGame(GameEvent):
    update: InputUpdate


@dataclass(frozen=True, slots=True)
class RetireImage(CaptureOutput):
    """The game may draw into image ``index`` again: settle any read of it still under way, then send ``data``
    (AcquireImage and RetireImage)."""

    conn_id: int
    index: int
    data: tuple[bytes, bytes]


@dataclass(frozen=True, slots=True)
class DropGame(CaptureOutput):
    """Close the game's connection (the sessions have forgotten it)."""

    conn_id: int
    reason: str
    log: bool = True


@dataclass(frozen=True, slots=True)
class WatchWritable(CaptureOutput):
    """Call :meth:`CaptureSessions.writable` once the game's socket has room."""

    conn_id: int


@dataclass(frozen=True, slots=True)
class CaptureLog(CaptureOutput):
    text: str
    warning: bool = False


@dataclass(frozen=True, slots=True)
class GameRumble(CaptureOutput):
    pad: int
    command: RumbleCommand


@dataclass(frozen=True, slots=True)
class GameAudio(CaptureOutput):
    """PCM from the streamed game, whole frames only."""

    pcm: bytes


@dataclass(frozen=True, slots=True)
class NewImage(CaptureOutput):
    """The streamed game presented, and pictures are encoded as they arrive: encode now."""


@dataclass(frozen=True, slots=True)
class HostWork(CaptureOutput):
    """A request that needs the shell: do it, then :meth:`CaptureSessions.done` with it."""

    conn_id: int
    serial: int


@dataclass(frozen=True, slots=True)
class CheckVulkan(HostWork):
    """Can this host read Vulkan games (a driver, an instance)?"""


@dataclass(frozen=True, slots=True)
class OpenDevice(HostWork):
    device: m.Device


@dataclass(frozen=True, slots=True)
class MapImages(HostWork):
    """Map the image group's memfds (checked sealed, and large enough) read-only."""

    group: m.ImageGroup


@dataclass(frozen=True, slots=True)
class ImportImages(HostWork):
    """Import a Vulkan layer's images into the host's device."""

    group: m.VulkanImageGroup


@dataclass(frozen=True, slots=True)
class ReadImage(HostWork):
    """Start reading a presented Vulkan image (waiting on its semaphore, if it came with one)."""

    present: m.VulkanPresentImage
    semaphore: bool


# -- state -------------------------------------------------------------------------------------------


@dataclass(slots=True)
class CaptureSessionStats:
    games_total: int = 0
    #: Connections from another user's processes, closed at once.
    games_refused: int = 0
    rumbles: int = 0
    image_groups: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    events_dropped: int = 0
    audio_bytes: int = 0
    vulkan_games: int = 0
    #: Swapchain counters of games and image groups gone (the live ones' are added in :meth:`summary`).
    chains: SwapchainStats = field(default_factory=SwapchainStats)


@dataclass(slots=True)
class _Game:
    conn_id: int
    name: str = "?"
    hello: bool = False
    intent: int = 0
    last_serial: int = 0
    errors: int = 0
    has_device: bool = False
    has_images: bool = False
    swapchain: Swapchain | None = None
    audio: m.AudioFormat | None = None
    events_dropped: int = 0
    #: Events its full socket held back: the newest of each pad, and of the keyboard and mouse (motion summed).
    unsent_pads: dict[int, bytes] = field(default_factory=dict)
    unsent_input: InputUpdate | None = None
    watching: bool = False

    @property
    def vulkan(self) -> bool:
        return self.intent == m.Intent.VULKAN_EXTERNAL_STREAM


_Reply = tuple[m.MessageType, str, str]
_OK: _Reply = (m.MessageType.OK, "", "")


class CaptureSessions:
    """Every game on the host's capture sockets (see the module docstring for the contract)."""

    def __init__(self, *, period_ns: int, immediate: bool = False, audio: GameAudioRule | None = None) -> None:
        self.period_ns = period_ns
        self.immediate = immediate
        self.audio = audio
        self.stats = CaptureSessionStats()
        self._games: dict[int, _Game] = {}
        #: The game being streamed: the one that created its images last.
        self.active: int | None = None

    # -- connections ---------------------------------------------------------------------------

    def connected(self, conn_id: int, *, same_user: bool, uid: int) -> list[CaptureOutput]:
        """A game connected; ``same_user``: the kernel says it runs as this host's user (nobody else may)."""
        if not same_user:
            self.stats.games_refused += 1
            text = f"capture: refused a connection from uid {uid} (only this user's games may present)"
            return [CaptureLog(text, warning=True), DropGame(conn_id, "another user", log=False)]
        self._games[conn_id] = _Game(conn_id)
        self.stats.games_total += 1
        return []

    def drop(self, conn_id: int, reason: str, *, log: bool = True) -> list[CaptureOutput]:
        """The game is gone (it left, or the shell could not reach it): forget it; another may stream."""
        game = self._games.pop(conn_id, None)
        if game is None:
            return []
        if game.swapchain is not None:
            self._absorb(game.swapchain)
        self.stats.events_dropped += game.events_dropped
        out: list[CaptureOutput] = [DropGame(conn_id, reason, log=log and game.hello)]
        if log and game.hello:
            out.append(CaptureLog(f"capture: {game.name} left ({reason})"))
        if self.active == conn_id:
            with_images = [g for g in self._games.values() if g.has_images]
            self.active = with_images[-1].conn_id if with_images else None
            if self.active is not None:
                out.append(CaptureLog(f"capture: streaming {self._games[self.active].name}"))
        return out

    def close_all(self) -> list[CaptureOutput]:
        out: list[CaptureOutput] = []
        for conn_id in list(self._games):
            out += self.drop(conn_id, "host stopping", log=False)
        return out

    @property
    def games(self) -> int:
        return len(self._games)

    def name(self, conn_id: int | None) -> str | None:
        game = self._games.get(conn_id) if conn_id is not None else None
        return game.name if game is not None else None

    def is_vulkan(self, conn_id: int) -> bool:
        game = self._games.get(conn_id)
        return game is not None and game.vulkan

    # -- requests ------------------------------------------------------------------------------

    def message(self, conn_id: int, data: bytes, fds: int, *, truncated: bool, now: float) -> list[CaptureOutput]:
        """One message from a game and how many file descriptors came with it; ``truncated``: the kernel cut the
        message or its descriptors."""
        game = self._games.get(conn_id)
        if game is None:
            return []
        if truncated:
            return self._error(
                game, 0, (m.MessageType.ERROR_PROTOCOL, "message or file descriptors truncated", "truncated")
            )
        try:
            header, payload = m.unpack(data)
        except ProtocolError as exc:
            return self._error(game, 0, (m.MessageType.ERROR_PROTOCOL, str(exc), exc.reason))
        if header.type & m.EVENT:
            return self._error(
                game, header.serial, (m.MessageType.ERROR_PROTOCOL, "games send requests, not events", "event")
            )
        one_way = bool(header.type & m.ONE_WAY)
        if header.serial <= game.last_serial:
            if one_way:
                return []
            text = f"serial {header.serial} does not follow {game.last_serial}"
            return self._error(game, header.serial, (m.MessageType.ERROR_PROTOCOL, text, "serial"))
        game.last_serial = header.serial
        try:
            result = self._request(game, header, payload, fds, now)
        except ProtocolError as exc:
            kind = m.MessageType.ERROR_PARAMETER if exc.reason == "bad_field" else m.MessageType.ERROR_PROTOCOL
            result = (kind, str(exc), exc.reason)
        if isinstance(result, list):
            return result
        if one_way or result is None:
            return []
        return self._reply(game, header.serial, result)

    def done(
        self, work: HostWork, problem: str | None = None, *, what: str = "", now: float = 0.0
    ) -> list[CaptureOutput]:
        """The shell did ``work``: ``problem`` says why it could not (None: it could); ``what``: the images it
        opened, in words, for the log."""
        game = self._games.get(work.conn_id)
        if game is None:
            return []
        serial = work.serial
        if isinstance(work, CheckVulkan):
            if problem is not None:
                return self._reply(game, serial, (m.MessageType.ERROR, problem, "no_vulkan"))
            self.stats.vulkan_games += 1
            game.hello, game.intent = True, m.Intent.VULKAN_EXTERNAL_STREAM
            return [CaptureLog(f"capture: {game.name} connected (Vulkan layer)"), *self._server_hello(game, serial)]
        if isinstance(work, OpenDevice):
            if problem is not None:
                out = self._reply(game, serial, (m.MessageType.ERROR, problem, "vulkan_device"))
                return [CaptureLog(f"capture: {game.name}: {problem}", warning=True), *out]
            game.has_device = True
            return self._reply(game, serial, _OK)
        if isinstance(work, MapImages | ImportImages):
            if problem is not None:
                reason = "memfd" if isinstance(work, MapImages) else "vulkan_import"
                kind = m.MessageType.ERROR_PARAMETER if isinstance(work, MapImages) else m.MessageType.ERROR
                out = (
                    []
                    if isinstance(work, MapImages)
                    else [CaptureLog(f"capture: {game.name}: {problem}", warning=True)]
                )
                return out + self._reply(game, serial, (kind, problem, reason))
            return self._new_group(game, serial, work.group.num_images, what) + self._reply(game, serial, _OK)
        if isinstance(work, ReadImage):
            if problem is not None:
                # As PyroFling's server does: an image it cannot read ends the connection (after the reply).
                game.errors = MAX_ERRORS_PER_GAME - 1
                return self._reply(game, serial, (m.MessageType.ERROR, problem, "vulkan_read"))
            return self._present(game, serial, work.present.as_present(), now)
        raise TypeError(f"unknown work {work!r}")

    def _request(
        self, game: _Game, header: m.Header, payload: memoryview, fds: int, now: float
    ) -> _Reply | list[CaptureOutput] | None:
        """A reply, what to do instead of one (outputs), or None (a one-way message, handled)."""
        t = header.type
        if t == m.MessageType.CLIENT_HELLO:
            if fds:
                raise ProtocolError(f"message type {t} carries no file descriptors")
            if game.hello:
                return m.MessageType.ERROR_PROTOCOL, "CLIENT_HELLO was already said", "hello_again"
            hello = m.ClientHello.parse_payload(payload)
            game.name = hello.text_name or f"game {game.conn_id}"
            if hello.intent == m.Intent.VULKAN_EXTERNAL_STREAM:
                return [CheckVulkan(game.conn_id, header.serial)]
            if hello.intent != m.Intent.SHARED_MEMORY_FRAMES:
                return m.MessageType.ERROR, f"intent {hello.intent} is not supported", "intent"
            game.hello, game.intent = True, hello.intent
            return [CaptureLog(f"capture: {game.name} connected"), *self._server_hello(game, header.serial)]
        if not game.hello:
            return m.MessageType.ERROR_PROTOCOL, "say CLIENT_HELLO first", "no_hello"
        if game.vulkan:
            return self._layer_request(game, header, payload, fds)
        if fds and t != m.MessageType.IMAGE_GROUP:
            raise ProtocolError(f"message type {t} carries no file descriptors")
        if t == m.MessageType.IMAGE_GROUP:
            group = m.ImageGroup.parse_payload(payload)
            if fds != group.num_images:
                return m.MessageType.ERROR_PARAMETER, f"{group.num_images} images need as many fds, got {fds}", "fds"
            return [MapImages(game.conn_id, header.serial, group)]
        if t == m.MessageType.PRESENT_IMAGE:
            return self._present(game, header.serial, m.PresentImage.parse_payload(payload), now)
        if t == m.MessageType.AUDIO_FORMAT:
            if self.audio is None:
                return m.MessageType.ERROR, "this host does not take audio from games (host --audio game)", "no_audio"
            fmt = m.AudioFormat.parse_payload(payload)
            problem = self.audio.accepts(fmt.rate, fmt.channels)
            if problem is not None:
                return m.MessageType.ERROR_PARAMETER, problem, "audio_format"
            game.audio = fmt
            return _OK
        if t == m.MessageType.RUMBLE:
            req = m.RumbleRequest.parse_payload(payload)
            self.stats.rumbles += 1
            return [GameRumble(req.pad, RumbleCommand(req.strong, req.weak, req.duration_ms))]
        if t == m.MessageType.AUDIO_SAMPLES:
            if game.audio is not None and self.audio is not None and game.conn_id == self.active:
                frame_bytes = 2 * game.audio.channels
                pcm = bytes(payload[: len(payload) - len(payload) % frame_bytes])
                self.stats.audio_bytes += len(pcm)
                return [GameAudio(pcm)]
            return None
        return m.MessageType.ERROR_PROTOCOL, f"unknown message type {t}", "unknown_type"

    def _layer_request(
        self, game: _Game, header: m.Header, payload: memoryview, fds: int
    ) -> _Reply | list[CaptureOutput]:
        """PyroFling's Vulkan layer (protocol.md §8.7)."""
        t = header.type
        if t == m.MessageType.DEVICE:
            if fds:
                raise ProtocolError("DEVICE carries no file descriptors")
            return [OpenDevice(game.conn_id, header.serial, m.Device.parse_payload(payload))]
        if t == m.MessageType.IMAGE_GROUP:
            group = m.VulkanImageGroup.parse_payload(payload)
            if not game.has_device:
                return m.MessageType.ERROR_PROTOCOL, "send DEVICE before IMAGE_GROUP", "no_device"
            if fds != group.num_images:
                return m.MessageType.ERROR_PARAMETER, f"{group.num_images} images need as many fds, got {fds}", "fds"
            problem = group.problem()
            if problem is not None:
                out = self._reply(game, header.serial, (m.MessageType.ERROR_PARAMETER, problem, "vulkan_format"))
                return [CaptureLog(f"capture: {game.name}: cannot stream its images: {problem}", warning=True), *out]
            return [ImportImages(game.conn_id, header.serial, group)]
        if t == m.MessageType.PRESENT_IMAGE:
            if fds > 1:
                raise ProtocolError(f"a present carries at most one semaphore fd, not {fds}")
            present = m.VulkanPresentImage.parse_payload(payload)
            if game.swapchain is None or not game.has_images:
                return m.MessageType.ERROR_PROTOCOL, "send an IMAGE_GROUP before presenting", "no_group"
            if present.semaphore_type and not fds:
                return m.MessageType.ERROR_PARAMETER, "the present names a semaphore but carries no fd", "semaphore"
            error = game.swapchain.check(present.as_present())
            if error is not None:
                game.swapchain.stats.rejected += 1
                return m.MessageType.ERROR_PARAMETER, error, "present"
            return [ReadImage(game.conn_id, header.serial, present, bool(fds))]
        if fds:
            raise ProtocolError(f"message type {t} carries no file descriptors")
        return m.MessageType.ERROR_PROTOCOL, f"message type {t} is not one PyroFling's layer sends", "unknown_type"

    def _server_hello(self, game: _Game, serial: int) -> list[CaptureOutput]:
        audio = m.ServerCapability.AUDIO if self.audio is not None else m.ServerCapability(0)
        caps = m.ServerCapability.GAMEPAD_EVENTS | m.ServerCapability.INPUT_EVENTS | audio
        return [ToGame(game.conn_id, m.ServerHello(m.VERSION, int(caps), self.period_ns).encode(serial))]

    def _new_group(self, game: _Game, serial: int, num_images: int, what: str) -> list[CaptureOutput]:
        """A game's images were (re)created: a new swapchain, and this game is now the one streamed."""
        if game.swapchain is not None:
            self._absorb(game.swapchain)
            game.swapchain.replace(serial, num_images)
        else:
            game.swapchain = Swapchain(serial, num_images, self.period_ns, immediate=self.immediate)
        game.has_images = True
        self.stats.image_groups += 1
        if self.active == game.conn_id:
            return []
        self.active = game.conn_id
        return [CaptureLog(f"capture: streaming {game.name}, {num_images} images of {what}")]

    def _present(self, game: _Game, serial: int, present: m.PresentImage, now: float) -> list[CaptureOutput]:
        if game.swapchain is None:
            return self._reply(
                game, serial, (m.MessageType.ERROR_PROTOCOL, "send an IMAGE_GROUP before presenting", "no_group")
            )
        error, events = game.swapchain.present(present, now)
        if error is not None:
            return self._reply(game, serial, (m.MessageType.ERROR_PARAMETER, error, "present"))
        out = self._events(game, events) + self._reply(game, serial, _OK)
        if self.immediate and game.conn_id == self.active:
            out.append(NewImage())
        return out

    def _reply(self, game: _Game, serial: int, reply: _Reply) -> list[CaptureOutput]:
        if reply[0] is m.MessageType.OK:
            return [ToGame(game.conn_id, m.pack(serial, m.MessageType.OK))]
        return self._error(game, serial, reply)

    def _error(self, game: _Game, serial: int, reply: _Reply) -> list[CaptureOutput]:
        kind, text, reason = reply
        self.stats.errors[reason] += 1
        game.errors += 1
        out: list[CaptureOutput] = [ToGame(game.conn_id, m.pack(serial, kind, text.encode()[: m.MAX_PAYLOAD_BYTES]))]
        if game.errors >= MAX_ERRORS_PER_GAME:
            out += self.drop(game.conn_id, f"{game.errors} bad requests (last: {text})")
        return out

    def _events(self, game: _Game, events: list[Retire | m.FrameComplete]) -> list[CaptureOutput]:
        out: list[CaptureOutput] = []
        for event in events:
            if isinstance(event, Retire):
                serial = game.swapchain.group_serial if game.swapchain is not None else 0
                acquire = m.AcquireImage(serial, event.index).encode(0)
                out.append(
                    RetireImage(game.conn_id, event.index, (acquire, m.RetireImage(serial, event.index).encode(0)))
                )
            else:
                out.append(ToGame(game.conn_id, event.encode(0)))
        return out

    def _absorb(self, chain: Swapchain) -> None:
        total, cs = self.stats.chains, chain.stats
        total.presents += cs.presents
        total.encoded += cs.encoded
        total.repeats += cs.repeats
        total.superseded += cs.superseded
        chain.stats = SwapchainStats()

    # -- the heartbeat and the encoder -------------------------------------------------------------

    def beat(self, now: float, next_beat_s: float) -> list[CaptureOutput]:
        """A heartbeat: every game's swapchain advances; FrameComplete and retires go out."""
        out: list[CaptureOutput] = []
        for game in list(self._games.values()):
            if game.swapchain is not None:
                out += self._events(game, game.swapchain.beat(now, next_beat_s))
        return out

    def _streamed(self) -> _Game | None:
        game = self._games.get(self.active) if self.active is not None else None
        return game if game is not None and game.swapchain is not None else None

    def take(self) -> tuple[int, EncodeImage] | None:
        """The streamed game and its newest ready image, for the encoder; None: no game, or nothing presented."""
        game = self._streamed()
        taken = game.swapchain.take() if game is not None and game.swapchain is not None else None
        return (game.conn_id, taken) if game is not None and taken is not None else None

    def has_new(self) -> bool:
        game = self._streamed()
        return game is not None and game.swapchain is not None and game.swapchain.has_new()

    def release(self, conn_id: int, taken: EncodeImage) -> list[CaptureOutput]:
        """The encoder has read the image."""
        game = self._games.get(conn_id)
        if game is None or game.swapchain is None:
            return []
        return self._events(game, game.swapchain.release(taken))

    # -- players' input, to games that take it ------------------------------------------------------

    def pad_update(self, update: PadUpdate, pad: int = 1) -> list[CaptureOutput]:
        """The state the host applied to a pad, for every shared-memory game (pad 1 as GAMEPAD_STATE, as before;
        the players' own pads 2.. as PAD_STATE with the pad's number).  PyroFling's layer drops on events it does
        not know: it gets none."""
        state = update.state.message(update.seq or 0)
        data = m.gamepad_event(state) if pad == 1 else m.PadStateEvent(pad, state.payload()).encode(0)
        out: list[CaptureOutput] = []
        for game in self._games.values():
            if game.intent == m.Intent.SHARED_MEMORY_FRAMES:
                game.unsent_pads.pop(pad, None)  # a pad's state replaces the last one
                out += self._offer(game, PadToGame(game.conn_id, data, pad))
        return out

    def input_update(self, update: InputUpdate) -> list[CaptureOutput]:
        """What the host applied to its keyboard and mouse, for every shared-memory game (with the motion of what
        its full socket held back, summed)."""
        out: list[CaptureOutput] = []
        for game in self._games.values():
            if game.intent == m.Intent.SHARED_MEMORY_FRAMES:
                pending = update.after(game.unsent_input) if game.unsent_input is not None else update
                game.unsent_input = None
                out += self._offer(game, InputToGame(game.conn_id, _input_event(pending), pending))
        return out

    def _offer(self, game: _Game, event: GameEvent) -> list[CaptureOutput]:
        """An event goes out, unless the game's socket is known full: then it waits with the rest."""
        if game.watching:
            self._hold(game, event)
            return []
        return [event]

    def blocked(self, send: ToGame) -> list[CaptureOutput]:
        """The game's socket had no room for ``send``: an event waits (the newest state of its kind), anything
        else drops the game."""
        game = self._games.get(send.conn_id)
        if game is None:
            return []
        if not isinstance(send, GameEvent):
            return self.drop(game.conn_id, "it stopped reading its socket")
        self._hold(game, send)
        if game.watching:
            return []
        game.watching = True
        return [WatchWritable(game.conn_id)]

    def _hold(self, game: _Game, event: GameEvent) -> None:
        game.events_dropped += 1
        if isinstance(event, InputToGame):
            game.unsent_input = event.update
        elif isinstance(event, PadToGame):
            game.unsent_pads[event.pad] = event.data

    def writable(self, conn_id: int) -> list[CaptureOutput]:
        """The game's socket has room again: the states it missed, newest only."""
        game = self._games.get(conn_id)
        if game is None:
            return []
        game.watching = False
        pads, game.unsent_pads = game.unsent_pads, {}
        out: list[CaptureOutput] = [PadToGame(conn_id, data, pad) for pad, data in pads.items()]
        if game.unsent_input is not None:
            out.append(InputToGame(conn_id, _input_event(game.unsent_input), game.unsent_input))
            game.unsent_input = None
        return out

    # -- statistics ------------------------------------------------------------------------------

    def summary(self) -> dict[str, object]:
        st = self.stats
        chains = [st.chains, *(g.swapchain.stats for g in self._games.values() if g.swapchain is not None)]
        return {
            "games": len(self._games),
            "games_total": st.games_total,
            "games_refused": st.games_refused,
            "rumbles": st.rumbles,
            "streamed": self.name(self.active),
            "image_groups": st.image_groups,
            "presents": sum(c.presents for c in chains),
            "encoded": sum(c.encoded for c in chains),
            "repeats": sum(c.repeats for c in chains),
            "superseded": sum(c.superseded for c in chains),
            "errors": dict(st.errors),
            "events_dropped": st.events_dropped + sum(g.events_dropped for g in self._games.values()),
            "audio_bytes": st.audio_bytes,
            "vulkan_games": st.vulkan_games,
        }


def _input_event(update: InputUpdate) -> bytes:
    ax, ay = update.absolute or (0, 0)
    flags = 1 if update.absolute is not None else 0
    motion = (update.dx, update.dy, update.wheel, update.hwheel)
    return m.InputEvent(key_bitmap(update.keys), update.buttons, flags, *motion, ax, ay).encode(0)
