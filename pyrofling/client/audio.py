"""Viewer audio: decode, a jitter buffer held at a target by resampling, and the output device.

Three threads touch audio:

* the network thread (asyncio) hands complete packets and loss reports to
  :meth:`AudioPlayer.packet` / :meth:`AudioPlayer.lost` (a bounded queue, never blocks);
* the player thread decodes, conceals losses, measures how much audio waits ahead of
  the speaker (:class:`~pyrofling.core.audio_control.DeviceClock`, on the device's own
  playback clock), asks the rate controller for a speed, resamples with libsamplerate
  (``samplerate``) at that speed and writes the result into an :class:`OutputRing`;
* the device's callback (PortAudio's thread) only copies from the ring — no locks,
  no allocation beyond a few views, no logging, no decoding (conventions §14).  An
  underrun is zero-filled (after a short fade) and counted, and the ring is primed
  to the target again before playback resumes, so one stall never becomes a cascade.

Start-up fills the buffer to the target before playback starts.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import av
import numpy as np
import numpy.typing as npt

from pyrofling.core.audio_control import DeviceClock, RateController, make_rate_controller
from pyrofling.core.audio_signal import ClickDetector, Frames, fade_in, fade_out, fade_out_from, from_s16le
from pyrofling.core.samples import recent_samples, tail
from pyrofling.core.viewer_session import ClockSync
from pyrofling.wire import AudioCodec

log = logging.getLogger(__name__)

AUDIO_BACKENDS = ("sounddevice", "pyaudio")
#: Callback records kept for the player thread and the run-time statistics.
RECORD_SLOTS = 8192
#: The test tone's click period (on the host's clock), seconds.
CLICK_PERIOD_S = 1.0
#: Playback readings and latencies kept for the statistics (flat memory): ~2.5 min at ~40 updates a second.
AUDIO_SAMPLES_KEPT = 6_000
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


class DecodeError(Exception):
    """An audio packet could not be decoded; it is concealed like a lost one."""


class AudioDecoder:
    """``decode(data) -> (frames, channels) float32`` for raw S16LE or Opus."""

    def __init__(self, codec: AudioCodec, rate: int, channels: int) -> None:
        if codec not in (AudioCodec.RAW_S16LE, AudioCodec.OPUS):
            raise ValueError(f"audio codec {codec.name} is not supported (raw S16LE and Opus are)")
        self.codec = codec
        self.rate = rate
        self.channels = channels
        self._ctx: av.AudioCodecContext | None = None
        if codec == AudioCodec.OPUS:
            ctx = av.CodecContext.create("opus", "r")
            assert isinstance(ctx, av.AudioCodecContext)
            ctx.sample_rate = rate
            ctx.layout = "stereo" if channels == 2 else "mono"
            ctx.open()
            self._ctx = ctx

    def decode(self, data: bytes) -> Frames:
        if self._ctx is None:
            try:
                return from_s16le(data, self.channels)
            except ValueError as exc:
                raise DecodeError(str(exc)) from exc
        try:
            frames = self._ctx.decode(av.Packet(data))
        except av.FFmpegError as exc:
            raise DecodeError(str(exc)) from exc
        parts = []
        for f in frames:
            a = f.to_ndarray()
            parts.append(a.T if f.format.is_planar else a.reshape(-1, self.channels))
        if not parts:
            return np.zeros((0, self.channels), dtype=np.float32)
        return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)


class OutputRing:
    """Single-producer, single-consumer ring of float32 frames; :meth:`fill` is the device callback.

    Positions are running frame counts: the player thread only advances ``write_pos``,
    the callback only ``read_pos`` and ``playing`` (to False, on an underrun); plain
    attribute stores are atomic under the GIL, so neither side ever waits.
    """

    def __init__(self, capacity: int, channels: int, *, fade_frames: int = 120) -> None:
        self.capacity = capacity
        self.channels = channels
        self.buf = np.zeros((capacity, channels), dtype=np.float32)
        self.write_pos = 0
        self.read_pos = 0
        self.playing = False
        self.underruns = 0  # blocks that ran dry while playing
        self.underrun_frames = 0
        self.device_xruns = 0  # the device's own underflow flag
        self.callbacks = 0
        #: Set with ``playing``: the first played block drops what is queued beyond this many frames.
        self.start_level: int | None = None
        self.start_trimmed = 0
        # Per callback: read position at the block's start, DAC time, device now, local now, run time,
        # and whether the block was played from the ring (1) or was silence while priming (0).
        self.records = np.zeros((RECORD_SLOTS, 6), dtype=np.float64)
        self.max_run_s = 0.0
        self._fade = np.linspace(1.0, 0.0, fade_frames + 2, dtype=np.float32)[1:-1, None]
        self._rise = np.ascontiguousarray(self._fade[::-1])

    @property
    def level(self) -> int:
        return self.write_pos - self.read_pos

    def write(self, frames: Frames) -> int:
        """Append as many frames as fit; returns how many were written."""
        free = self.capacity - (self.write_pos - self.read_pos)
        n = min(len(frames), free)
        if n <= 0:
            return 0
        i = self.write_pos % self.capacity
        first = min(n, self.capacity - i)
        self.buf[i : i + first] = frames[:first]
        if n > first:
            self.buf[: n - first] = frames[first:n]
        self.write_pos += n
        return n

    def fill(self, out: npt.NDArray[np.float32], frames: int, dac_s: float, current_s: float, xrun: bool) -> None:
        """The output callback: copy up to ``frames`` into ``out``, zero the rest."""
        t0 = time.perf_counter()
        r = self.read_pos
        n = 0
        played = self.playing
        if played:
            start_level = self.start_level
            if start_level is not None:  # playback starts: begin exactly start_level frames ahead
                self.start_level = None
                if self.write_pos - r > start_level:
                    self.start_trimmed += self.write_pos - start_level - r
                    r = self.write_pos - start_level
            avail = self.write_pos - r
            n = frames if avail >= frames else max(0, avail)
            i = r % self.capacity
            first = min(n, self.capacity - i)
            out[:first] = self.buf[i : i + first]
            if n > first:
                out[first:n] = self.buf[: n - first]
            if start_level is not None:
                k = min(n, len(self._rise))
                np.multiply(out[:k], self._rise[:k], out=out[:k])
            if n < frames:
                fade = self._fade
                k = min(n, len(fade))
                if k:
                    np.multiply(out[n - k : n], fade[len(fade) - k :], out=out[n - k : n])
                self.underruns += 1
                self.underrun_frames += frames - n
                self.playing = False  # the player primes the buffer again before playback resumes
            self.read_pos = r + n
        if n < frames:
            out[n:] = 0.0
        if xrun:
            self.device_xruns += 1
        rec = self.records[self.callbacks % RECORD_SLOTS]
        rec[0] = r
        rec[1] = dac_s
        rec[2] = current_s
        rec[3] = time.monotonic()
        run = time.perf_counter() - t0
        rec[4] = run
        rec[5] = played
        if run > self.max_run_s:
            self.max_run_s = run
        self.callbacks += 1

    def latest_record(self, *, played: bool = False) -> tuple[int, float, float, float] | None:
        """The newest callback's (read_pos, dac_s, current_s, local_s), read without tearing.

        With ``played``, None unless that block was played from the ring (so its read
        position says where playback is)."""
        count = self.callbacks
        if count == 0:
            return None
        rec = self.records[(count - 1) % RECORD_SLOTS].copy()
        if played and not rec[5]:
            return None
        return int(rec[0]), float(rec[1]), float(rec[2]), float(rec[3])

    def run_times_s(self) -> npt.NDArray[np.float64]:
        n = min(self.callbacks, RECORD_SLOTS)
        return self.records[:n, 4].copy()


class AudioOutput(Protocol):
    """An open output stream that calls ``ring.fill`` from its own thread."""

    rate: int
    name: str

    def start(self) -> None: ...

    def close(self) -> None: ...


class SoundDeviceOutput:
    """PortAudio through sounddevice: float32 frames, the callback straight into the ring."""

    def __init__(self, ring: OutputRing, rate: int, device: str | None) -> None:
        import sounddevice as sd

        dev: Any = int(device) if device is not None and device.isdigit() else device
        if _no_output_devices(sd):
            # PortAudio lists devices once, when it starts; a sound server started since is missed.
            from pyrofling.client.portaudio import reinitialize_portaudio

            reinitialize_portaudio()
        if _no_output_devices(sd):
            raise OSError("no audio output device (no sound card or sound server; start JACK or use --no-audio)")
        self._ring = ring

        def callback(outdata: Any, frames: int, time_info: Any, status: Any) -> None:
            ring.fill(outdata, frames, time_info.outputBufferDacTime, time_info.currentTime, status.output_underflow)

        stream = None
        for try_rate in (rate, None):  # the stream's rate, else the device's own (JACK runs at one rate)
            try:
                stream = sd.OutputStream(
                    device=dev,
                    samplerate=try_rate,
                    channels=ring.channels,
                    dtype="float32",
                    callback=callback,
                    latency="low",
                )
                break
            except (sd.PortAudioError, ValueError) as exc:
                error = exc
        if stream is None:
            raise OSError(f"cannot open audio output {device or '(default)'}: {error}")
        self._stream = stream
        self.rate = int(stream.samplerate)
        info = sd.query_devices(stream.device)
        self.name = f"{info['name']} ({sd.query_hostapis(info['hostapi'])['name']})"

    def start(self) -> None:
        self._stream.start()

    def close(self) -> None:
        self._stream.close(ignore_errors=True)


def _no_output_devices(sd: Any) -> bool:
    try:
        return not any(d["max_output_channels"] > 0 for d in sd.query_devices())
    except Exception:
        return True


class PyAudioOutput:
    """PortAudio through PyAudio (where it is installed).  PyAudio wants bytes back, so each
    callback converts one block (a small allocation sounddevice avoids)."""

    def __init__(self, ring: OutputRing, rate: int, device: str | None) -> None:
        try:
            import pyaudio
        except ImportError as exc:
            raise OSError("PyAudio is not installed (pip install pyaudio; it needs portaudio19-dev)") from exc
        self._pa = pyaudio.PyAudio()
        block = np.zeros((4096, ring.channels), dtype=np.float32)

        def callback(_in: Any, frames: int, time_info: dict[str, float], status: int) -> tuple[bytes, int]:
            out = block[:frames] if frames <= len(block) else np.zeros((frames, ring.channels), np.float32)
            ring.fill(
                out,
                frames,
                time_info.get("output_buffer_dac_time", 0.0),
                time_info.get("current_time", 0.0),
                bool(status & pyaudio.paOutputUnderflow),
            )
            return out.tobytes(), pyaudio.paContinue

        index = int(device) if device is not None and device.isdigit() else None
        self._stream = self._pa.open(
            format=pyaudio.paFloat32,
            channels=ring.channels,
            rate=rate,
            output=True,
            output_device_index=index,
            stream_callback=callback,
            start=False,
        )
        self.rate = rate
        self.name = "PyAudio default output" if index is None else f"PyAudio device {index}"

    def start(self) -> None:
        self._stream.start_stream()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._stream.close()
        self._pa.terminate()


OutputFactory = Callable[[OutputRing, int, "str | None"], AudioOutput]


def output_factory(backend: str) -> OutputFactory:
    if backend == "sounddevice":
        return SoundDeviceOutput
    if backend == "pyaudio":
        return PyAudioOutput
    raise ValueError(f"unknown audio backend {backend!r}; choose from {', '.join(AUDIO_BACKENDS)}")


@dataclass(frozen=True, slots=True)
class _Configure:
    codec: AudioCodec
    rate: int
    channels: int


@dataclass(frozen=True, slots=True)
class _Packet:
    data: bytes
    pts_us: int
    clock: ClockSync


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
    concealed_frames: int = 0  # at the stream's rate
    skipped_frames: int = 0  # dropped after a burst, at the stream's rate
    ring_overflows: int = 0
    primes: int = 0  # playback (re)starts; 1 without underruns
    clicks: int = 0
    frames_in: int = 0
    frames_out: int = 0


class AudioPlayer:
    """Plays one viewer's audio.  :meth:`configure` per stream, then :meth:`packet` / :meth:`lost`.

    Everything after the queue runs on the player's own thread; :meth:`close` stops it.
    """

    def __init__(self, config: AudioPlayerConfig, *, factory: OutputFactory | None = None) -> None:
        self.config = config
        self.stats = AudioStats()
        self.controller: RateController = make_rate_controller(config.controller, config.target_s)
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
        self._stream_rate = 0
        self._chunk_frames = 0
        self._last: npt.NDArray[np.float32] | None = None
        self._fade_in_next = False
        self._skip = 0
        self._was_playing = False
        self._detector: ClickDetector | None = None
        self._pending_clicks: list[tuple[int, float, int]] = []  # (ring pos, capture local s, underruns then)
        self._lock = threading.Lock()  # guards the sample lists for summary()
        #: Per update while playing: (seconds since the first audio, buffered ms, speed).
        self.samples: deque[tuple[float, float, float]] = recent_samples(AUDIO_SAMPLES_KEPT)
        self.latency_ms: deque[float] = recent_samples(AUDIO_SAMPLES_KEPT)
        self._started_s: float | None = None
        #: The output's close did not return (the process should exit without PortAudio's exit handler).
        self.close_stuck = False
        self._callbacks_seen: tuple[int, float] | None = None  # (callbacks, when that count was first seen)
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

    def packet(self, data: bytes, pts_us: int, clock: ClockSync) -> None:
        """A complete audio packet, in sequence order; ``clock`` maps the host's µs to ours."""
        self._put(_Packet(data, pts_us, clock))

    def lost(self, count: int) -> None:
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

    # -- player thread ----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                if isinstance(item, _Configure):
                    self._configure(item)
                elif self._decoder is None:
                    continue
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
            self.ring = OutputRing(max(4096, round(item.rate * 2 * cfg.ring_s)), item.channels)
        ring = self.ring
        if self.output is None:
            try:
                self.output = self._factory(ring, item.rate, cfg.device)
            except OSError as exc:
                self.error = str(exc)
                log.warning("audio disabled: %s", exc)
                return
            self.clock = DeviceClock(self.output.rate)
            self.device_name, self.device_rate = self.output.name, self.output.rate
            self.output.start()
            log.info("audio output: %s at %d Hz", self.output.name, self.output.rate)
        elif item.channels != ring.channels:
            log.warning("the host's channel count changed; audio disabled until the viewer restarts")
            return
        self._decoder = AudioDecoder(item.codec, item.rate, item.channels)
        self._stream_rate = item.rate
        self._resampler = samplerate.Resampler(cfg.converter, channels=item.channels)
        self._detector = ClickDetector(refractory_frames=self.output.rate // 4)
        self._chunk_frames = 0
        self._last = None
        self._skip = 0
        ring.playing = False  # prime again for the new stream
        self.controller.reset()
        self._was_playing = False

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
        self._chunk_frames = len(frames)
        if self._skip > 0:  # skipping audio that piled up after a burst
            cut = min(self._skip, len(frames))
            self._skip -= cut
            self.stats.skipped_frames += cut
            frames = frames[cut:]
            if not len(frames):
                return
            self._fade_in_next = True
        if self._fade_in_next:
            frames = frames.copy() if not frames.flags.writeable else frames
            fade_in(frames, self._fade_frames)
            self._fade_in_next = False
        self._last = frames[-1].copy()
        self._queue_audio(frames, item.pts_us, item.clock)

    def _conceal(self, count: int) -> None:
        """Lost packets: a short fade from the last sample to silence, as long as what was lost."""
        self.stats.packets_lost += count
        if self._chunk_frames == 0 or self._last is None or self.ring is None or not self.ring.playing:
            return  # nothing playing yet: priming waits for real audio
        frames = count * self._chunk_frames
        buffered = self._buffered_s(time.monotonic())
        if buffered is not None:  # never conceal the buffer past its target (a long outage)
            room = (self.controller.target_s - buffered) * self._stream_rate + self._chunk_frames
            frames = min(frames, max(0, int(room)))
        if frames <= 0:
            return
        self.stats.concealed_frames += frames
        self._queue_audio(fade_out_from(self._last, frames, self._fade_frames), None, None)
        self._last = np.zeros_like(self._last)
        self._fade_in_next = True

    @property
    def _fade_frames(self) -> int:
        return max(1, round(self._stream_rate * self.config.fade_s))

    def _buffered_s(self, now: float) -> float | None:
        ring, clock = self.ring, self.clock
        if ring is None or clock is None:
            return None
        rec = ring.latest_record(played=True)
        if rec is None:
            return None  # playback has just (re)started: no block of it has been played yet
        clock.callback(*rec)
        return clock.buffered_s(ring.write_pos, now)

    def _queue_audio(self, frames: Frames, pts_us: int | None, host_clock: ClockSync | None) -> None:
        ring, clock, out = self.ring, self.clock, self.output
        assert ring is not None and clock is not None and out is not None
        now = time.monotonic()
        if self._started_s is None:
            self._started_s = now
        if self._was_playing and not ring.playing:
            # The callback ran dry: the block it played faded out; prime again and fade in.
            self._was_playing = False
            self._fade_in_next = False
        speed = self.controller.speed
        if ring.playing:
            buffered = self._buffered_s(now)
            if buffered is not None:
                if buffered > self.controller.target_s + self.config.max_excess_s:
                    # A burst after a stall: skip the excess rather than play it late for seconds.
                    frames = frames.copy()
                    fade_out(frames)
                    self._skip = int((buffered - self.controller.target_s) * self._stream_rate)
                    self.controller.reset()
                else:
                    speed = self.controller.update(now, buffered)
                self._record(now, buffered, speed)
        ratio = out.rate / self._stream_rate / speed
        resampled = self._resampler.process(frames, ratio)
        self.stats.frames_in += len(frames)
        self.stats.frames_out += len(resampled)
        if len(resampled) == 0:
            return
        first = ring.write_pos
        if pts_us is not None and host_clock is not None and self._detector is not None:
            for pos in self._detector.feed(resampled, first):
                self._click_found(pos, first, pts_us, host_clock, ratio)
        written = ring.write(resampled)
        if written < len(resampled):
            self.stats.ring_overflows += 1
        if not ring.playing:
            self._prime(ring, clock, out.rate)
        self._resolve_clicks()

    def _prime(self, ring: OutputRing, clock: DeviceClock, rate: int) -> None:
        """Start playback once the target is queued (counting the device's own latency).

        Anything queued beyond the target (packets that piled up while the device opened,
        or a burst) is dropped from the old end, so playback starts at the target, not above.
        The callback does not touch the ring while ``playing`` is False, so this thread may.
        """
        if not self._queue.empty():
            return  # more audio is already waiting (it piled up while the device opened): take it first
        rec = ring.latest_record()
        if rec is None:
            return  # the device has not called back yet: its latency is still unknown
        clock.callback(*rec)
        want = max(0, round((self.controller.target_s - clock.latency_s) * rate))
        if ring.level < want:
            return
        excess = ring.level - want
        if excess:
            ring.read_pos += excess
        self.controller.reset()
        # Audio keeps arriving until the callback plays the first block: it trims to ``want`` then,
        # and fades the block in.  The buffer is measured just before each arrival, when it is lowest:
        # half a chunk more makes those readings centre on the target from the start.
        ring.start_level = want + round(self._chunk_frames * rate / max(1, self._stream_rate) / 2)
        ring.playing = True
        self._was_playing = True
        self.stats.primes += 1

    def _click_found(self, pos: int, first: int, pts_us: int, host_clock: ClockSync, ratio: float) -> None:
        """A click at ring position ``pos``: which click of the host's clock it is, when it was captured."""
        input_offset_s = (pos - first) / (self._stream_rate * ratio)
        estimate_s = pts_us / 1e6 + input_offset_s
        grid_s = round(estimate_s / CLICK_PERIOD_S) * CLICK_PERIOD_S
        if abs(estimate_s - grid_s) > 0.02:
            return  # not the test tone's click (loud programme audio)
        capture_local = host_clock.to_local(round(grid_s * 1e6))
        if capture_local is not None and self.ring is not None:
            self._pending_clicks.append((pos, capture_local, self.ring.underruns))
            self.stats.clicks += 1

    def _resolve_clicks(self) -> None:
        ring, clock = self.ring, self.clock
        if ring is None or clock is None or not self._pending_clicks:
            return
        keep = []
        for pos, capture_local, underruns in self._pending_clicks:
            if ring.underruns != underruns:
                continue  # playback restarted in between: the mapping no longer holds
            if ring.read_pos <= pos:
                keep.append((pos, capture_local, underruns))
                continue
            heard = clock.heard_at(pos)
            if heard is not None:
                with self._lock:
                    self.latency_ms.append((heard - capture_local) * 1000)
        self._pending_clicks = keep

    def _record(self, now: float, buffered: float, speed: float) -> None:
        assert self._started_s is not None
        with self._lock:
            self.samples.append((now - self._started_s, buffered * 1000, speed))

    # -- reporting ----------------------------------------------------------------------------

    def device_stalled_s(self, now: float | None = None) -> float:
        """How long the output has not called back for more samples while started (0: it is calling)."""
        ring = self.ring
        if ring is None or self.output is None or ring.callbacks == 0:
            return 0.0
        now = time.monotonic() if now is None else now
        seen = self._callbacks_seen
        if seen is None or seen[0] != ring.callbacks:
            self._callbacks_seen = (ring.callbacks, now)
            return 0.0
        return now - seen[1]

    def live(self, samples: int = 150) -> dict[str, Any]:
        """Cheap figures for an overlay: the latest state and the last ``samples`` buffer readings."""
        with self._lock:
            recent = tail(self.samples, samples)
            latency = self.latency_ms[-1] if self.latency_ms else None
        ring = self.ring
        return {
            "buffered_ms": recent[-1][1] if recent else None,
            "speed_ppm": (recent[-1][2] - 1) * 1e6 if recent else None,
            "target_ms": self.controller.target_s * 1000,
            "underruns": ring.underruns if ring is not None else 0,
            "concealed_ms": self.stats.concealed_frames / self._stream_rate * 1000 if self._stream_rate else 0.0,
            "latency_ms": latency,
            "device_stalled_s": self.device_stalled_s(),
            "recent_buffered_ms": [b for _t, b, _s in recent],
            "error": self.error,
        }

    def summary(self, *, settle_s: float = 10.0) -> dict[str, Any]:
        """Statistics; ``settled`` ones leave out the first ``settle_s`` of playback."""
        ring = self.ring
        with self._lock:
            samples = list(self.samples)
            latency = list(self.latency_ms)
        st = self.stats
        out: dict[str, Any] = {k: getattr(st, k) for k in st.__dataclass_fields__}
        target_ms = self.controller.target_s * 1000
        out.update(
            controller=self.controller.name,
            target_ms=target_ms,
            device=self.device_name,
            device_rate=self.device_rate,
            stream_rate=self._stream_rate or None,
            device_latency_ms=self.clock.latency_s * 1000 if self.clock is not None and self.clock.ready else None,
            error=self.error,
            underruns=ring.underruns if ring else 0,
            underrun_ms=ring.underrun_frames / self.device_rate * 1000 if ring and self.device_rate else 0.0,
            underruns_after_start=max(0, st.primes - 1) if ring else 0,
            start_trimmed_ms=ring.start_trimmed / self.device_rate * 1000 if ring and self.device_rate else 0.0,
            device_xruns=ring.device_xruns if ring else 0,
            callbacks=ring.callbacks if ring else 0,
            close_stuck=self.close_stuck,
        )
        settled = [x for x in samples if x[0] >= settle_s]
        out.update(_distribution("buffered_ms", [b for _t, b, _s in samples], target_ms))
        out.update(_distribution("buffered_settled_ms", [b for _t, b, _s in settled], target_ms))
        out.update(_rates("rate", [s for _t, _b, s in samples]))
        out.update(_rates("rate_settled", [s for _t, _b, s in settled]))
        runs = ring.run_times_s() * 1e6 if ring is not None else np.zeros(0)
        out["callback_us_median"] = float(np.median(runs)) if len(runs) else None
        out["callback_us_p99"] = float(np.percentile(runs, 99)) if len(runs) else None
        out["callback_us_max"] = ring.max_run_s * 1e6 if ring is not None else None
        out["latency_ms_median"] = statistics.median(latency) if latency else None
        out["latency_ms_p95"] = float(np.percentile(latency, 95)) if latency else None
        out["latency_ms_samples"] = latency[-500:]
        out["concealed_ms_per_loss"] = (
            st.concealed_frames / st.packets_lost / self._stream_rate * 1000
            if st.packets_lost and self._stream_rate
            else None
        )
        out["series"] = [(round(t, 3), round(b, 3), round((s - 1) * 1e6, 1)) for t, b, s in samples[::10]]
        return out


def _distribution(name: str, values: list[float], target: float) -> dict[str, Any]:
    if not values:
        return {f"{name}_median": None}
    a = np.asarray(values)
    dev = np.abs(a - target)
    return {
        f"{name}_median": float(np.median(a)),
        f"{name}_p1": float(np.percentile(a, 1)),
        f"{name}_p99": float(np.percentile(a, 99)),
        f"{name}_min": float(a.min()),
        f"{name}_max": float(a.max()),
        f"{name}_dev_p99": float(np.percentile(dev, 99)),
    }


def _rates(name: str, speeds: list[float]) -> dict[str, Any]:
    if not speeds:
        return {f"{name}_mean_abs_ppm": None}
    s = np.asarray(speeds)
    a = s - 1.0
    c = np.abs(1200.0 * np.log2(s))  # cents
    return {
        f"{name}_mean_abs_ppm": float(np.mean(np.abs(a)) * 1e6),
        f"{name}_max_abs_ppm": float(np.max(np.abs(a)) * 1e6),
        f"{name}_mean_ppm": float(np.mean(a) * 1e6),
        f"{name}_wobble_ppm": float(np.std(a) * 1e6),
        f"{name}_mean_abs_cents": float(np.mean(c)),
        f"{name}_max_abs_cents": float(np.max(c)),
    }
