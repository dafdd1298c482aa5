"""When the viewer's audio starts, skips and conceals (pure): the audio player moves samples, this decides.

The player thread (:mod:`pyrofling.client.audio.player`) tells it what happened — a
decoded chunk, packets lost, a chunk about to be queued with how much audio waits
ahead of the speaker, the ring's level while it primes — and does what it says:

* **prime**: playback starts once the target is queued, counting the device's own
  latency; anything queued beyond it (packets that piled up while the device opened)
  is trimmed from the old end, so playback starts at the target, not above;
* **pace**: the rate controller's speed for the next chunk, or, after a burst that left
  more than ``max_excess_s`` above the target, skip the excess rather than play it late
  for seconds;
* **conceal**: a lost packet becomes as long a fade to silence, but never fills the
  buffer past its target (a long outage would otherwise play seconds late);
* and a fade in after every concealment, skip or underrun.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyrofling.core.viewer.audio_control import RateController


@dataclass(frozen=True, slots=True)
class Pace:
    """How to queue the next chunk: at ``speed``; ``skip_excess``: fade it out, the excess after it is skipped."""

    speed: float
    skip_excess: bool = False


@dataclass(frozen=True, slots=True)
class Prime:
    """Start playback: drop ``trim_frames`` from the ring's old end; measure from ``start_level`` frames."""

    trim_frames: int
    start_level: int


class AudioPlayout:
    """One stream's playout decisions (:meth:`configure` for each new stream)."""

    def __init__(self, controller: RateController, *, max_excess_s: float) -> None:
        self.controller = controller
        self.max_excess_s = max_excess_s
        self.stream_rate = 0
        #: Frames of one decoded packet (what a lost one is worth); 0 until the first.
        self.chunk_frames = 0
        #: Stream frames still to skip after a burst.
        self.skip = 0
        self.fade_in_next = False
        self.playing = False
        #: Counters: frames skipped and concealed (at the stream's rate), playback starts.
        self.skipped_frames = 0
        self.concealed_frames = 0
        self.primes = 0

    @property
    def target_s(self) -> float:
        return self.controller.target_s

    def configure(self, stream_rate: int) -> None:
        """A new stream: prime again."""
        self.stream_rate = stream_rate
        self.chunk_frames = 0
        self.skip = 0
        self.fade_in_next = False
        self.playing = False
        self.controller.reset()

    def decoded(self, frames: int) -> tuple[int, bool]:
        """A decoded chunk of ``frames``: how many to cut from its start (a skip under way), and whether what is
        left fades in.  Nothing is left when the cut is the whole chunk."""
        self.chunk_frames = frames
        cut = min(self.skip, frames)
        if cut:
            self.skip -= cut
            self.skipped_frames += cut
            self.fade_in_next = True  # what plays after the skip, in this chunk or the next, fades in
            if cut == frames:
                return cut, False
        fade, self.fade_in_next = self.fade_in_next, False
        return cut, fade

    def conceal(self, lost: int, *, playing: bool, buffered_s: float | None) -> int:
        """``lost`` packets went missing: frames of fade to silence to queue (0: none; nothing plays yet, or the
        buffer is at its target already).  ``playing``: the device plays the ring, and there is a sample to fade
        from."""
        if not self.chunk_frames or not playing:
            return 0  # nothing playing yet: priming waits for real audio
        frames = lost * self.chunk_frames
        if buffered_s is not None:
            room = (self.target_s - buffered_s) * self.stream_rate + self.chunk_frames
            frames = min(frames, max(0, int(room)))
        if frames > 0:
            self.concealed_frames += frames
            self.fade_in_next = True
        return max(0, frames)

    def pace(self, now_s: float, *, playing: bool, buffered_s: float | None) -> Pace:
        """A chunk is about to be queued; ``playing``: the device is playing the ring; ``buffered_s``: audio
        ahead of the speaker (None: not known yet)."""
        if self.playing and not playing:
            # The callback ran dry: the block it played faded out; prime again, and that start fades in.
            self.playing = False
            self.fade_in_next = False
        if not playing or buffered_s is None:
            return Pace(self.controller.speed)
        if buffered_s > self.target_s + self.max_excess_s:
            self.skip = int((buffered_s - self.target_s) * self.stream_rate)
            self.controller.reset()
            return Pace(self.controller.speed, skip_excess=True)
        return Pace(self.controller.update(now_s, buffered_s))

    def prime(self, *, more_waiting: bool, latency_s: float | None, level: int, device_rate: int) -> Prime | None:
        """Whether playback starts now: ``more_waiting``: packets are still queued (take them first);
        ``latency_s``: the device's own (None: it has not called back yet); ``level``: frames in the ring."""
        if more_waiting or latency_s is None:
            return None
        want = max(0, round((self.target_s - latency_s) * device_rate))
        if level < want:
            return None
        self.controller.reset()
        self.playing = True
        self.primes += 1
        # Audio keeps arriving until the callback plays the first block, which trims to ``want`` then.  The buffer
        # is measured just before each arrival, when it is lowest: half a chunk more centres those readings on
        # the target from the start.
        half_chunk = round(self.chunk_frames * device_rate / max(1, self.stream_rate) / 2)
        return Prime(level - want, want + half_chunk)
