"""The viewer's audio player: decode, conceal, hold a small buffer by resampling, feed the device.

Three threads touch audio:

* the network thread (asyncio) hands complete packets and loss reports to
  :meth:`AudioPlayer.packet` / :meth:`AudioPlayer.lost` (a bounded queue, never blocks);
* the player thread decodes, measures how much audio waits ahead of the speaker
  (:class:`~pyrofling.core.viewer.audio_control.DeviceClock`, on the device's own playback
  clock), and does what :class:`~pyrofling.core.viewer.audio_playout.AudioPlayout` decides —
  when to start, the speed for each chunk, what to skip after a burst and to conceal for a
  loss — resampling with libsamplerate (``samplerate``) into the :class:`OutputRing`;
* the device's callback only copies from the ring (:mod:`pyrofling.client.audio.ring`).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pyrofling.client.audio.devices import AudioOutput, OutputFactory, output_factory
from pyrofling.client.audio.readings import PlaybackReadings
from pyrofling.client.audio.ring import OutputRing
from pyrofling.client.codecs import AudioDecoder, DecodeError
from pyrofling.clocks import SYSTEM_CLOCK, Clock
from pyrofling.core.audio_signal import ClickDetector, Frames, fade_in, fade_out, fade_out_from
from pyrofling.core.viewer.audio_control import DeviceClock, RateController, make_rate_controller
from pyrofling.core.viewer.audio_playout import AudioPlayout
from pyrofling.core.viewer.clock_sync import HostClock
from pyrofling.wire import AudioCodec

log = logging.getLogger(__name__)

#: Seconds to wait for the output device to close before leaving it.
CLOSE_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class AudioPlayerConfig:
    """``pyrofling view`` audio settings."""

    #: Audio to hold ahead of the speaker (device latency included), seconds.
    target_s: float = 0.030
    #: "drift" (pyrofling's) or "reference" (PyroFling's proportional rule).
    controller: str = "drift"
    backend: str = "sounddevice"
    #: Output device name or index (None: the default output).
    device: str | None = None
    #: libsamplerate converter: sinc_fastest, sinc_medium, sinc_best.
    converter: str = "sinc_medium"
    #: More than this above target is skipped (after a burst), seconds.
    max_excess_s: float = 0.060
    #: Fades around concealment, underruns and skips, seconds.
    fade_s: float = 0.0025
    #: Ring capacity, seconds.
    ring_s: float = 1.0


@dataclass(frozen=True, slots=True)
class _Configure:
    codec: AudioCodec
    rate: int
    channels: int


@dataclass(frozen=True, slots=True)
class _Packet:
    data: bytes
    pts_us: int
    clock: HostClock


@dataclass(frozen=True, slots=True)
class _Lost:
    count: int


_Item = _Configure | _Packet | _Lost | None


@dataclass(slots=True)
class AudioStats:
    packets: int = 0
    packets_lost: int = 0
    decode_errors: int = 0
    queue_overflows: int = 0
    ring_overflows: int = 0
    clicks: int = 0
    frames_in: int = 0
    frames_out: int = 0


class AudioPlayer:
    """Plays one viewer's audio.  :meth:`configure` per stream, then :meth:`packet` / :meth:`lost`.

    Everything after the queue runs on the player's own thread; :meth:`close` stops it.
    """

    def __init__(
        self, config: AudioPlayerConfig, *, factory: OutputFactory | None = None, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        """``clock``: the player thread's (the device's playback times are mapped onto it)."""
        self.config = config
        self._clock = clock
        self.stats = AudioStats()
        self.controller: RateController = make_rate_controller(config.controller, config.target_s)
        self.playout = AudioPlayout(self.controller, max_excess_s=config.max_excess_s)
        self._factory = factory or output_factory(config.backend)
        self._queue: queue.Queue[_Item] = queue.Queue(maxsize=256)
        self.ring: OutputRing | None = None
        self.output: AudioOutput | None = None
        self.clock: DeviceClock | None = None
        self.error: str | None = None
        self.device_name: str | None = None
        self.device_rate: int | None = None
        self._decoder: AudioDecoder | None = None
        self._resampler: Any = None
        self._last: npt.NDArray[np.float32] | None = None
        self._detector: ClickDetector | None = None
        self.readings = PlaybackReadings()
        #: The output's close did not return (the process should exit without PortAudio's exit handler).
        self.close_stuck = False
        self._callbacks_seen: tuple[int, float] | None = None  # (callbacks, when that count was first seen)
        #: No output device could be opened (set by the player thread; a new stream's CODEC_PARAMETERS tries again).
        self._no_output = False
        self._thread = threading.Thread(target=self._run, name="pyrofling-audio", daemon=True)
        self._thread.start()

    # -- any thread -----------------------------------------------------------------------

    def configure(self, codec: int, rate: int, channels: int) -> None:
        """The host announced its audio (CODEC_PARAMETERS); an unknown codec leaves audio off."""
        try:
            self._put(_Configure(AudioCodec(codec), rate, channels))
        except ValueError:
            self.error = f"the host sends audio codec {codec}, which this viewer does not know"
            log.warning("audio disabled: %s", self.error)

    def packet(self, data: bytes, pts_us: int, clock: HostClock) -> None:
        """A complete audio packet, in sequence order; ``clock`` maps the host's µs to ours."""
        if not self._no_output:  # nowhere to play it: not worth waking the player thread 200 times a second
            self._put(_Packet(data, pts_us, clock))

    def lost(self, count: int) -> None:
        if not self._no_output:
            self._put(_Lost(count))

    def _put(self, item: _Item) -> None:
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self.stats.queue_overflows += 1

    def close(self) -> None:
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=1.0)
        self._thread.join(3.0)
        output, self.output = self.output, None
        if output is None:
            return
        # PortAudio waits for the device's callback to acknowledge the stop; a device that stopped
        # calling back (JACK drops a client it finds too slow) would hold the viewer forever.
        closer = threading.Thread(target=output.close, name="pyrofling-audio-close", daemon=True)
        closer.start()
        closer.join(CLOSE_TIMEOUT_S)
        if closer.is_alive():
            self.close_stuck = True
            log.warning("audio: the output did not close in %g s; leaving it", CLOSE_TIMEOUT_S)

    def idle(self, timeout_s: float) -> bool:
        """Whether every item handed over so far has been handled, waiting up to ``timeout_s`` (tests that
        run the player on a virtual clock move time on only once it has caught up)."""
        done = self._queue.all_tasks_done
        with done:
            return done.wait_for(lambda: self._queue.unfinished_tasks == 0, timeout_s)

    # -- player thread ----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                self._handle(item)
            finally:
                self._queue.task_done()

    def _handle(self, item: _Configure | _Packet | _Lost) -> None:
        try:
            if isinstance(item, _Configure):
                self._configure(item)
            elif self._decoder is None:
                return
            elif isinstance(item, _Packet):
                self._packet(item)
            else:
                self._conceal(item.count)
        except Exception as exc:  # never let one bad packet end the audio
            if self.error is None:
                log.exception("audio playback failed")
            self.error = str(exc)
            if isinstance(item, _Configure):
                self._decoder = None

    def _configure(self, item: _Configure) -> None:
        import samplerate  # the libsamplerate binding; imported here so video-only viewers do not need it

        cfg = self.config
        if self.ring is None:
            self.ring = OutputRing(max(4096, round(item.rate * 2 * cfg.ring_s)), item.channels, clock=self._clock)
        ring = self.ring
        if self.output is None:
            try:
                self.output = self._factory(ring, item.rate, cfg.device)
            except OSError as exc:
                self.error = str(exc)
                self._no_output = True
                log.warning("audio disabled: %s", exc)
                return
            self._no_output = False
            self.clock = DeviceClock(self.output.rate)
            self.device_name, self.device_rate = self.output.name, self.output.rate
            self.output.start()
            log.info("audio output: %s at %d Hz", self.output.name, self.output.rate)
        elif item.channels != ring.channels:
            log.warning("the host's channel count changed; audio disabled until the viewer restarts")
            return
        self._decoder = AudioDecoder(item.codec, item.rate, item.channels)
        self._resampler = samplerate.Resampler(cfg.converter, channels=item.channels)
        self._detector = ClickDetector(refractory_frames=self.output.rate // 4)
        self._last = None
        ring.playing = False  # prime again for the new stream
        self.playout.configure(item.rate)

    def _packet(self, item: _Packet) -> None:
        assert self._decoder is not None
        self.stats.packets += 1
        try:
            frames = self._decoder.decode(item.data)
        except DecodeError:
            self.stats.decode_errors += 1
            self._conceal(1)
            return
        if not len(frames):
            return
        cut, fade = self.playout.decoded(len(frames))  # a skip after a burst takes the start
        frames = frames[cut:]
        if not len(frames):
            return
        if fade:
            frames = frames.copy() if not frames.flags.writeable else frames
            fade_in(frames, self._fade_frames)
        self._last = frames[-1].copy()
        self._queue_audio(frames, item.pts_us, item.clock)

    def _conceal(self, count: int) -> None:
        """Lost packets: a short fade from the last sample to silence, as long as what was lost."""
        self.stats.packets_lost += count
        playing = self._last is not None and self.ring is not None and self.ring.playing
        buffered = self._buffered_s(self._clock.now()) if playing else None
        frames = self.playout.conceal(count, playing=playing, buffered_s=buffered)
        if frames and self._last is not None:
            self._queue_audio(fade_out_from(self._last, frames, self._fade_frames), None, None)
            self._last = np.zeros_like(self._last)

    @property
    def _fade_frames(self) -> int:
        return max(1, round(self.playout.stream_rate * self.config.fade_s))

    def _buffered_s(self, now: float) -> float | None:
        ring, clock = self.ring, self.clock
        if ring is None or clock is None:
            return None
        rec = ring.latest_record(played=True)
        if rec is None:
            return None  # playback has just (re)started: no block of it has been played yet
        clock.callback(*rec)
        return clock.buffered_s(ring.write_pos, now)

    def _queue_audio(self, frames: Frames, pts_us: int | None, host_clock: HostClock | None) -> None:
        ring, clock, out = self.ring, self.clock, self.output
        assert ring is not None and clock is not None and out is not None
        now = self._clock.now()
        self.readings.started(now)
        buffered = self._buffered_s(now) if ring.playing else None
        pace = self.playout.pace(now, playing=ring.playing, buffered_s=buffered)
        if pace.skip_excess:  # a burst after a stall: this chunk fades out, the excess after it is skipped
            frames = frames.copy()
            fade_out(frames)
        if buffered is not None:
            self.readings.record(now, buffered, pace.speed)
        stream_rate = self.playout.stream_rate
        ratio = out.rate / stream_rate / pace.speed
        resampled = self._resampler.process(frames, ratio)
        self.stats.frames_in += len(frames)
        self.stats.frames_out += len(resampled)
        if len(resampled) == 0:
            return
        first = ring.write_pos
        if pts_us is not None and host_clock is not None and self._detector is not None:
            for pos in self._detector.feed(resampled, first):
                offset_s = (pos - first) / (stream_rate * ratio)
                if self.readings.click_found(pos, pts_us, offset_s, host_clock, ring.underruns):
                    self.stats.clicks += 1
        written = ring.write(resampled)
        if written < len(resampled):
            self.stats.ring_overflows += 1
        if not ring.playing:
            self._prime(ring, clock, out.rate)
        self.readings.resolve_clicks(ring.read_pos, ring.underruns, clock)

    def _prime(self, ring: OutputRing, clock: DeviceClock, rate: int) -> None:
        """Start playback when the playout says so (the callback does not touch the ring while ``playing`` is
        False, so this thread may trim it)."""
        rec = ring.latest_record()
        if rec is not None:  # the device has called back: its latency is known
            clock.callback(*rec)
        prime = self.playout.prime(
            more_waiting=not self._queue.empty(),
            latency_s=clock.latency_s if rec is not None else None,
            level=ring.level,
            device_rate=rate,
        )
        if prime is not None:
            ring.read_pos += prime.trim_frames
            ring.start_level = prime.start_level
            ring.playing = True

    # -- reporting ----------------------------------------------------------------------------

    def device_stalled_s(self, now: float | None = None) -> float:
        """How long the output has not called back for more samples while started (0: it is calling)."""
        ring = self.ring
        if ring is None or self.output is None or ring.callbacks == 0:
            return 0.0
        now = self._clock.now() if now is None else now
        seen = self._callbacks_seen
        if seen is None or seen[0] != ring.callbacks:
            self._callbacks_seen = (ring.callbacks, now)
            return 0.0
        return now - seen[1]

    def live(self, samples: int = 150) -> dict[str, Any]:
        """Cheap figures for an overlay: the latest state and the last ``samples`` buffer readings."""
        recent, latency = self.readings.recent(samples)
        ring = self.ring
        return {
            "buffered_ms": recent[-1][1] if recent else None,
            "speed_ppm": (recent[-1][2] - 1) * 1e6 if recent else None,
            "target_ms": self.controller.target_s * 1000,
            "underruns": ring.underruns if ring is not None else 0,
            "concealed_ms": self.playout.concealed_frames / self.playout.stream_rate * 1000
            if self.playout.stream_rate
            else 0.0,
            "latency_ms": latency,
            "device_stalled_s": self.device_stalled_s(),
            "recent_buffered_ms": [b for _t, b, _s in recent],
            "error": self.error,
        }

    def summary(self, *, settle_s: float = 10.0) -> dict[str, Any]:
        """Statistics; ``settled`` ones leave out the first ``settle_s`` of playback."""
        ring = self.ring
        st = self.stats
        out: dict[str, Any] = {k: getattr(st, k) for k in st.__dataclass_fields__}
        playout = self.playout
        out.update(
            concealed_frames=playout.concealed_frames, skipped_frames=playout.skipped_frames, primes=playout.primes
        )
        stream_rate = playout.stream_rate
        target_ms = self.controller.target_s * 1000
        out.update(
            controller=self.controller.name,
            target_ms=target_ms,
            device=self.device_name,
            device_rate=self.device_rate,
            stream_rate=stream_rate or None,
            device_latency_ms=self.clock.latency_s * 1000 if self.clock is not None and self.clock.ready else None,
            error=self.error,
            underruns=ring.underruns if ring else 0,
            underrun_ms=ring.underrun_frames / self.device_rate * 1000 if ring and self.device_rate else 0.0,
            underruns_after_start=max(0, playout.primes - 1) if ring else 0,
            start_trimmed_ms=ring.start_trimmed / self.device_rate * 1000 if ring and self.device_rate else 0.0,
            device_xruns=ring.device_xruns if ring else 0,
            callbacks=ring.callbacks if ring else 0,
            close_stuck=self.close_stuck,
        )
        out.update(self.readings.summary(target_ms, settle_s))
        runs = ring.run_times_s() * 1e6 if ring is not None else np.zeros(0)
        out["callback_us_median"] = float(np.median(runs)) if len(runs) else None
        out["callback_us_p99"] = float(np.percentile(runs, 99)) if len(runs) else None
        out["callback_us_max"] = ring.max_run_s * 1e6 if ring is not None else None
        out["concealed_ms_per_loss"] = (
            playout.concealed_frames / st.packets_lost / stream_rate * 1000 if st.packets_lost and stream_rate else None
        )
        return out
