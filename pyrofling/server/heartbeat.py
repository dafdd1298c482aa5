"""The host's heartbeat: the frame clock ticked on time, and a frame encoded when the schedule says so.

A thread sleeps precisely until each tick of the
:class:`~pyrofling.core.host.frame_clock.FrameClock` (asyncio's timers are only good
to a millisecond) and hands it to the event loop.  There the
:class:`~pyrofling.core.host.encode_schedule.EncodeSchedule` decides whether this
tick (or, with ``--immediate-encode``, a game's present) starts an encode; the
encode thread renders or takes the picture, converts and encodes it, and the
packets go back to the loop through ``on_packets``.  A source that ends stops
the host through ``on_source_end``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TextIO

import av

from pyrofling.clocks import SYSTEM_CLOCK, Clock
from pyrofling.core.cpu_share import CpuShare
from pyrofling.core.host.codec_choice import CODEC_NAMES, SwitchCodec
from pyrofling.core.host.display import FollowDisplay
from pyrofling.core.host.encode_schedule import EncodeSchedule
from pyrofling.core.host.frame_clock import FrameClock
from pyrofling.core.host.keyframes import KeyframePolicy
from pyrofling.core.host.picture_rate import SetPictureRate
from pyrofling.runtime import COLLECTOR_PAUSES, THREAD_PRIORITIES, CodecThreadTimes, timed_on_thread
from pyrofling.server.capture import CapturedFrame, CaptureServer
from pyrofling.server.encoder import EncodedVideo, VideoEncoder, encoder_for
from pyrofling.server.sources import VideoSource, follow_display, placeholder_frame
from pyrofling.server.stats import HostStats
from pyrofling.wire import VideoCodec

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Encode:
    """One frame's encode, from its start on the loop to its packets sent."""

    index: int
    timing: dict[str, Any] | None  # its trace line, when traced
    capture_us: int
    captured: CapturedFrame | None  # a game's picture (None: the source makes its own)
    started_s: float
    sent: asyncio.Future[None]  # done once its packets went to the viewers (what stop() waits for)


class Heartbeat:
    """Runs the frame clock and the encoder.  :meth:`start` on the loop, :meth:`stop` to end."""

    def __init__(
        self,
        *,
        clock: FrameClock,
        schedule: EncodeSchedule,
        keyframes: KeyframePolicy,
        encoder: VideoEncoder,
        executor: ThreadPoolExecutor,
        stats: HostStats,
        source: VideoSource | None,
        on_packets: Callable[[list[EncodedVideo]], None],
        on_source_end: Callable[[], None],
        frame_trace: TextIO | None = None,
        time_source: Clock = SYSTEM_CLOCK,
    ) -> None:
        """``time_source``: what the heartbeat thread reads and sleeps on (the frame clock's times are on it)."""
        self.clock = clock
        self._time = time_source
        self.schedule = schedule
        self.keyframes = keyframes
        self.encoder = encoder
        self.stats = stats
        self.source = source
        #: Games presenting through the capture socket (set once it is open; None with other sources).
        self.capture: CaptureServer | None = None
        self._executor = executor
        self._on_packets = on_packets
        self._on_source_end = on_source_end
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._next_tick_s = clock.next_timer()  # read by the heartbeat thread
        self._tick_handled = threading.Event()
        self._halt = threading.Event()
        self._frame_index = 0
        self._encoding: asyncio.Future[None] | None = None  # the encode in progress, held so it is not collected
        #: A present came too soon after the last encode (immediate mode): asks the schedule again once it may go.
        self._deferred: asyncio.TimerHandle | None = None
        #: A JSON line per encoded frame: when its tick was due, woke, reached the loop, encoded, was sent.
        self._trace = frame_trace
        #: Traced: whether the codec's slice threads, which the encode waits for, waited for a CPU themselves.
        self._codec_times = CodecThreadTimes() if frame_trace is not None else None
        self._due_s: float | None = None
        self._captured_s: float | None = None  # the traced picture's capture time (set by the encode thread)
        #: Whether the real-time encoder leaves its CPU room for the host's other threads.
        self.encoder_share = CpuShare()
        self._switching: asyncio.Future[None] | None = None  # the encoder opened anew for another codec

    def follow(
        self, out: FollowDisplay | SwitchCodec | SetPictureRate, switched: Callable[[VideoCodec, VideoCodec], None]
    ) -> None:
        """What the sessions decided of the picture: a desktop's size, the codec (then ``switched``), the rate."""
        if isinstance(out, FollowDisplay):
            follow_display(self.source, out, self.encoder.config.fps)
        elif isinstance(out, SwitchCodec):
            self.switch_codec(out, switched)
        else:
            self.set_picture_rate(out.fps // out.divisor)

    def set_picture_rate(self, fps: int) -> None:
        """Tick and encode ``fps`` pictures a second from the next tick on (the encoder opened anew at that rate on
        the encode thread, between two frames: its first picture an IDR)."""
        if fps == self.clock.fps:
            return
        log.info("making %d pictures a second (was %g): a viewer asked for %s", fps, self.clock.fps,
                 "fewer" if fps < self.clock.fps else "the host's own rate again")  # fmt: skip
        self.clock.set_fps(fps)
        self.schedule.period_s = 1.0 / fps
        self._switching = asyncio.ensure_future(
            asyncio.get_running_loop().run_in_executor(self._executor, self.encoder.set_fps, fps)
        )

    def switch_codec(self, out: SwitchCodec, done: Callable[[VideoCodec, VideoCodec], None]) -> None:
        """Open the encoder anew for ``out.codec`` on the encode thread, between two frames (``--codec auto``);
        then ``done(asked, made)``, ``made`` the old codec if the new encoder did not open."""
        self._switching = asyncio.ensure_future(self._switch_codec(out, done))

    async def _switch_codec(self, out: SwitchCodec, done: Callable[[VideoCodec, VideoCodec], None]) -> None:
        encoder, loop = self.encoder, asyncio.get_running_loop()
        before, started = encoder.video_codec, time.perf_counter()
        try:
            await loop.run_in_executor(self._executor, encoder.switch, encoder_for(out.codec, encoder.config.encoder))
        except ValueError as exc:
            log.warning("codec: staying with %s: %s", CODEC_NAMES[before], exc)
        done(out.codec, encoder.video_codec)
        if encoder.video_codec != before:
            took_ms = (time.perf_counter() - started) * 1000
            self.stats.codec_switches += 1
            self.stats.codec_switch_open_max = max(self.stats.codec_switch_open_max, took_ms)
            log.info("codec: %s -> %s (%s); the encoder opened anew in %.0f ms",
                     CODEC_NAMES[before], CODEC_NAMES[encoder.video_codec], out.why, took_ms)  # fmt: skip

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        notify = getattr(self.source, "notify_frames", None)
        if notify is not None and self.schedule.immediate:  # a desktop's frames encoded as they come

            def frame_came() -> None:
                with contextlib.suppress(RuntimeError):  # the loop closed while stopping
                    loop.call_soon_threadsafe(self.presented)

            notify(frame_came)
        self.clock.next_tick_s = self._next_tick_s = self._time.now()
        self._thread = threading.Thread(target=self._run, name="pyrofling-heartbeat", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """No more ticks or encodes; returns once the heartbeat thread has ended and the frame being encoded, if
        any, has been sent (a recording closed after this holds every frame encoded)."""
        self._halt.set()
        self._tick_handled.set()
        if self._deferred is not None:
            self._deferred.cancel()
        if self._thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 2.0)
        encoding = self._encoding
        if encoding is not None and not encoding.done():  # its packets still go out, and into the recording
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(encoding), 5.0)
        if self._thread is None or not self._thread.is_alive():
            self.encoder.close()

    def close_trace(self) -> None:
        if self._trace is not None:
            self._trace.close()

    # -- the heartbeat thread ------------------------------------------------------------------

    def _run(self) -> None:
        """Sleep until the next tick, hand it to the loop, wait until it is handled."""
        loop = self._loop
        assert loop is not None
        THREAD_PRIORITIES.apply("heartbeat")
        while not self._halt.is_set():
            delay = self._next_tick_s - self._time.now()
            if delay > 0 and self._time.wait(self._halt, min(delay, 0.5)):
                return
            woke = self._time.now()
            if woke < self._next_tick_s:
                continue  # woke early (or the loop moved the tick): sleep again
            self._tick_handled.clear()
            try:
                loop.call_soon_threadsafe(self._on_tick, woke)
            except RuntimeError:
                return  # the loop is closed
            self._tick_handled.wait(1.0)

    # -- the event loop ------------------------------------------------------------------------

    def _on_tick(self, woke: float) -> None:
        """Advance the frame clock, then encode if the schedule says so."""
        try:
            tick = self.clock.handle_timer(woke)
            self._next_tick_s = self.clock.next_timer()
        finally:
            self._tick_handled.set()
        if tick is None:
            return
        self._due_s = tick.due_s
        capture = self.capture
        if capture is not None:
            capture.beat(woke, self._next_tick_s)
        missed = tick.missed // self.clock.multiplier
        if not tick.encode or self._halt.is_set():
            self.schedule.skipped += missed
            return
        if self.schedule.heartbeat(woke, new_image=self._has_new(), missed_frames=missed):
            self._encode(woke, capture.take() if capture is not None else None)

    def _has_new(self) -> bool:
        """Is there a picture not encoded yet: a game's present, or a frame a desktop sent (other sources make
        theirs when asked: always)?"""
        if self.capture is not None:
            return self.capture.has_new()
        has_new = getattr(self.source, "has_new", None)
        return bool(has_new()) if has_new is not None else True

    def presented(self) -> None:
        """The streamed game presented, a desktop sent a frame (or an encode finished): with immediate encode,
        encode it now."""
        capture = self.capture
        if (capture is None and not hasattr(self.source, "has_new")) or self._halt.is_set():
            return
        now = self._time.now()
        if self.schedule.presented(now, new_image=self._has_new()):
            if capture is None:
                self._encode(now, None)
                return
            captured = capture.take()
            if captured is not None:
                self._encode(now, captured)
            return
        due = self.schedule.next_timer()
        if due is not None and self._deferred is None and self._loop is not None:
            self._deferred = self._loop.call_later(max(0.0, due - now), self._deferred_due)

    def _deferred_due(self) -> None:
        self._deferred = None
        self.presented()

    def _encode(self, woke: float, captured: CapturedFrame | None) -> None:
        """Start the encode on its thread now, and send its packets when it is done. Plain callbacks, not a task:
        a task's first step waited for the loop's next turn (behind whatever else was ready: an audio chunk, a
        viewer's datagrams), and its result came back in two turns where one does."""
        self.schedule.started(woke)
        loop = asyncio.get_running_loop()
        index = self._frame_index
        timing: dict[str, Any] | None = (
            {"due": self._due_s, "woke": woke, "loop": self._time.now()} if self._trace is not None else None
        )
        capture_us = int(woke * 1_000_000)
        force = self.keyframes.should_force(woke)
        job: tuple[Any, ...] = (
            (self._encode_captured, loop, captured, capture_us, force)
            if self.source is None
            else (self._render_and_encode, self.source, index, capture_us, force)
        )
        encode = _Encode(index, timing, capture_us, captured, self._time.now(), loop.create_future())
        self._encoding = encode.sent

        def done_on_the_encode_thread(work: Future[Any]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed while stopping
                loop.call_soon_threadsafe(self._encoded, work, encode)

        # Traced: where the encode thread's time went (on a CPU, waiting for one, blocked), and its codec threads'.
        try:
            work = (
                self._executor.submit(*job)
                if timing is None
                else self._executor.submit(functools.partial(timed_on_thread, codec=self._codec_times), *job)
            )
        except RuntimeError:  # the encode thread has been shut down: the host is stopping
            self.schedule.finished()
            encode.sent.set_result(None)
            return
        work.add_done_callback(done_on_the_encode_thread)

    def _encoded(self, work: Future[Any], encode: _Encode) -> None:
        """On the loop: an encode finished; its packets to the viewers (``encode.sent`` says when that is done)."""
        try:
            self._send_encoded(work, encode)
        finally:
            if not encode.sent.done():
                encode.sent.set_result(None)

    def _send_encoded(self, work: Future[Any], encode: _Encode) -> None:
        index, timing, captured = encode.index, encode.timing, encode.captured
        packets: list[EncodedVideo] | None
        try:
            result = work.result()
            if timing is None:
                packets = result
            else:
                packets, timing["thread"] = result
        except Exception:
            # One bad frame must not end the stream; the next frame is an IDR.
            self.stats.encode_errors += 1
            self.keyframes.loss_reported()
            log.exception("encoding frame %d failed", index)
            packets = []
        finally:
            self.schedule.finished()
            THREAD_PRIORITIES.worked("encoder", self.encoder_share, encode.started_s, self._time.now())
        if packets is None:
            log.info("source ended after %d frames", index)
            self._on_source_end()
            return
        self._frame_index += 1
        if self._frame_index == 1:  # the heartbeat and the encoder have both started
            log.info("%s", THREAD_PRIORITIES.summary())
        if timing is not None and self._trace is not None:
            timing.update(
                capture_us=encode.capture_us,
                encoded=self._time.now(),
                encode_s=sum(p.encode_s + p.convert_s for p in packets),
                bytes=sum(len(p.data) for p in packets),
            )
            if captured is not None:
                timing["present"] = captured.taken.present_s
            elif self.source is not None:
                timing["captured"] = self._captured_s
        self._on_packets(packets)
        if timing is not None and self._trace is not None and not self._trace.closed:  # an encode outlived close
            timing["queued"] = self._time.now()  # handed to every viewer's pacer
            self._trace.write(json.dumps(timing) + "\n")
            for pause in COLLECTOR_PAUSES.drain():  # what stopped this process meanwhile
                self._trace.write(json.dumps(pause) + "\n")
        self.presented()  # a present that came while this frame encoded

    # -- the encode thread ---------------------------------------------------------------------

    def _render_and_encode(
        self, source: VideoSource, index: int, capture_us: int, force: bool
    ) -> list[EncodedVideo] | None:
        t0, read_at = time.perf_counter(), self._time.now()
        array = source.read(index, capture_us)
        if array is None:
            return None
        # When the picture was had: a desktop's frame came before the tick; the others are made by the read.
        self._captured_s = getattr(source, "captured_s", None) or read_at
        self.stats.render_ms.append((time.perf_counter() - t0) * 1000)
        encoder = self.encoder
        if isinstance(array, av.VideoFrame):
            if getattr(source, "sized_by_pictures", False):  # the stream takes the pictures' size (headless)
                encoder.resize(array.width, array.height)
            return encoder.encode_frame(array, capture_us, force_keyframe=force)
        return encoder.encode_array(array, capture_us, pixel_format=source.pixel_format, force_keyframe=force)

    def _encode_captured(
        self, loop: asyncio.AbstractEventLoop, captured: CapturedFrame | None, capture_us: int, force: bool
    ) -> list[EncodedVideo]:
        """A game's shared image (given back to the game once converted), or the placeholder."""
        encoder = self.encoder
        if captured is None:
            encoder.set_hdr10(False)  # the placeholder is SDR (an HDR10 game that left is not its colours)
            return encoder.encode_frame(placeholder_frame(encoder.pix_fmt), capture_us, force_keyframe=force)
        capture = self.capture
        assert capture is not None

        def give_back() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed while stopping
                loop.call_soon_threadsafe(capture.release, captured)

        return encoder.encode_shared(
            captured.array,
            capture_us,
            pixel_format=captured.pixel_format,
            force_keyframe=force,
            on_read=give_back,
            hdr10=captured.hdr10,
        )
