"""The host's side of one game's swapchain (protocol.md §8.4): which image to encode, when to retire, FrameComplete.

Pure: the capture shell feeds it presents and heartbeats with ``now`` and performs
the events it returns.  An image moves

    CLIENT_OWNED --present--> QUEUED --its heartbeat--> READY --superseded--> retired (CLIENT_OWNED)

A FIFO present (period ≥ 1) targets the heartbeat after the previous present's
target, so a game presenting faster than the stream is held back one heartbeat per
frame; a MAILBOX present (period 0) may share a heartbeat, the newest id wins.
The newest READY image is what the encoder takes on a heartbeat; it stays READY
(and is encoded again if nothing newer arrives: a repeat) until a newer one is
ready, then it is retired: AcquireImage + RetireImage tell the game it may draw
into it again.  An image the encoder is still reading is retired when the encoder
lets go of it.

With ``immediate`` (``--immediate-encode``) a present is READY at once, so the
host can encode it on arrival instead of at its heartbeat; heartbeats still pace
the game through FrameComplete.

Unlike PyroFling, a second image group replaces the first (the reference appends
to it and keeps the old present-id check, so a re-created swapchain fails).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from pyrofling.wire.capture import FrameComplete, PresentImage


class ImageState(enum.Enum):
    CLIENT_OWNED = "client_owned"
    QUEUED = "queued"  # presented, waiting for its target heartbeat
    READY = "ready"  # its heartbeat came (or immediate): the newest is the one to encode


@dataclass(slots=True)
class Image:
    index: int
    state: ImageState = ImageState.CLIENT_OWNED
    present_id: int = 0
    target: int = 0  # heartbeat this present is for
    present_s: float = 0.0
    in_encoder: bool = False
    encoded: bool = False
    superseded: bool = False  # retire as soon as the encoder lets go


@dataclass(frozen=True, slots=True)
class Retire:
    """The image is the game's again: send AcquireImage then RetireImage."""

    index: int


@dataclass(frozen=True, slots=True)
class EncodeImage:
    """The image the encoder should read now.  Give it back with :meth:`Swapchain.release`."""

    index: int
    present_id: int
    present_s: float
    repeat: bool  # encoded before: nothing newer arrived


SwapchainEvent = Retire | FrameComplete


@dataclass(slots=True)
class SwapchainStats:
    presents: int = 0
    encoded: int = 0  # distinct presents encoded
    repeats: int = 0
    superseded: int = 0  # presents retired without ever being encoded
    rejected: int = 0


@dataclass(slots=True)
class Swapchain:
    group_serial: int
    num_images: int
    period_ns: int
    immediate: bool = False
    images: list[Image] = field(default_factory=list)
    completed: int = 0  # heartbeats seen
    stats: SwapchainStats = field(default_factory=SwapchainStats)
    _earliest_next: int = 0
    _last_present_id: int = 0
    _last_complete_id: int = 0
    _pending: list[tuple[int, int]] = field(default_factory=list)  # (target heartbeat, present id)

    def __post_init__(self) -> None:
        self.images = [Image(i) for i in range(self.num_images)]

    def replace(self, group_serial: int, num_images: int) -> None:
        """A new image group: the old images are gone (the game made new ones), present ids start again."""
        self.group_serial = group_serial
        self.num_images = num_images
        self.images = [Image(i) for i in range(num_images)]
        self._earliest_next = self.completed
        self._last_present_id = 0
        self._last_complete_id = 0
        self._pending.clear()

    # -- game → host ---------------------------------------------------------------------------

    def present(self, msg: PresentImage, now: float) -> tuple[str | None, list[SwapchainEvent]]:
        """Validate and queue a present.  Returns (error text or None, events to send)."""
        error = self.check(msg)
        if error is not None:
            self.stats.rejected += 1
            return error, []
        image = self.images[msg.index]
        target = max(self.completed + 1, self._earliest_next)
        self._earliest_next = target + msg.period
        self._last_present_id = msg.present_id
        self._pending.append((target, msg.present_id))
        image.present_id, image.target, image.present_s = msg.present_id, target, now
        image.encoded = image.superseded = False
        image.state = ImageState.QUEUED
        self.stats.presents += 1
        events: list[SwapchainEvent] = []
        if self.immediate:
            image.state = ImageState.READY
            events += self._supersede_older(image)
        return None, events

    def check(self, msg: PresentImage) -> str | None:
        """Why the game may not present this now (None: it may); changes nothing."""
        if msg.image_group_serial != self.group_serial:
            return f"present for image group {msg.image_group_serial}, the current one is {self.group_serial}"
        if not 0 <= msg.index < self.num_images:
            return f"image index {msg.index} is outside the group's {self.num_images} images"
        if msg.present_id <= self._last_present_id:
            return f"present id {msg.present_id} does not follow {self._last_present_id}"
        state = self.images[msg.index].state
        if state is not ImageState.CLIENT_OWNED:
            return f"image {msg.index} is not the game's to present (it is {state.value})"
        return None

    # -- heartbeat -----------------------------------------------------------------------------

    def beat(self, now: float, next_beat_s: float) -> list[SwapchainEvent]:
        """One heartbeat: due presents become ready, older ones retire, FrameComplete if a present completed."""
        self.completed += 1
        events: list[SwapchainEvent] = []
        newest: Image | None = None
        for image in self.images:
            if image.state is ImageState.QUEUED and image.target <= self.completed:
                image.state = ImageState.READY
            if image.state is ImageState.READY and (newest is None or image.present_id > newest.present_id):
                newest = image
        if newest is not None:
            events += self._supersede_older(newest)
        done = [pid for target, pid in self._pending if target <= self.completed]
        if done:
            self._pending = [(t, p) for t, p in self._pending if t > self.completed]
            self._last_complete_id = max(done)
            events.append(
                FrameComplete(
                    image_group_serial=self.group_serial,
                    timestamp=self.completed,
                    period_ns=self.period_ns,
                    presented_id=self._last_complete_id,
                    delayed_count=self.stats.superseded,
                    headroom_ns=max(0, round((next_beat_s - now) * 1e9)),
                )
            )
        return events

    def _supersede_older(self, newest: Image) -> list[SwapchainEvent]:
        events: list[SwapchainEvent] = []
        for image in self.images:
            if image is newest or image.state is not ImageState.READY or image.superseded:
                continue
            if image.present_id > newest.present_id:
                continue
            if not image.encoded:
                self.stats.superseded += 1
            if image.in_encoder:
                image.superseded = True
            else:
                events.append(self._retire(image))
        return events

    def _retire(self, image: Image) -> Retire:
        image.state = ImageState.CLIENT_OWNED
        image.superseded = image.in_encoder = False
        return Retire(image.index)

    # -- encoder -------------------------------------------------------------------------------

    def take(self) -> EncodeImage | None:
        """The newest ready image for the encoder (marked in use), or None if there is none."""
        ready = [i for i in self.images if i.state is ImageState.READY and not i.superseded]
        if not ready:
            return None
        image = max(ready, key=lambda i: i.present_id)
        if image.in_encoder:
            return None
        image.in_encoder = True
        repeat = image.encoded
        if repeat:
            self.stats.repeats += 1
        else:
            self.stats.encoded += 1
            image.encoded = True
        return EncodeImage(image.index, image.present_id, image.present_s, repeat)

    def has_new(self) -> bool:
        """A ready image the encoder has not read yet (immediate mode encodes it at once)."""
        return any(i.state is ImageState.READY and not i.encoded and not i.in_encoder for i in self.images)

    def release(self, taken: EncodeImage) -> list[SwapchainEvent]:
        """The encoder is done reading ``taken``; retire it if something newer superseded it meanwhile."""
        if taken.index >= len(self.images):
            return []
        image = self.images[taken.index]
        if image.present_id != taken.present_id or not image.in_encoder:
            return []  # the group was replaced meanwhile
        image.in_encoder = False
        if image.superseded:
            return [self._retire(image)]
        return []
