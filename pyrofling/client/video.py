"""The viewer's decode thread: complete video packets in, pictures for the presenter out.

The network thread queues each :class:`~pyrofling.core.viewer.connection.DecodeVideo`
(bounded; :meth:`VideoPipeline.offer` never blocks).  This thread decodes it with
PyAV, reads the test scene's frame marker (capture time, for latency), asks
:class:`~pyrofling.core.viewer.concealment.Concealment` whether the picture is
shown, lets the display prepare it and hands it to the
:class:`~pyrofling.client.presenter.Presenter`.  A packet the decoder refuses is
reported back to the network thread, which asks for a key frame.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import av
import numpy as np
import numpy.typing as npt

from pyrofling.client.codecs import DecodeError, VideoDecoder, luma
from pyrofling.client.pictures import is_hdr10_frame
from pyrofling.client.presenter import Display, Picture, PictureTiming, Presenter
from pyrofling.core import frame_marker
from pyrofling.core.cpu_share import CpuShare
from pyrofling.core.samples import LIVE_SAMPLES, SAMPLES_KEPT, median_and_p95, recent_samples, tail
from pyrofling.core.scene import TestScene
from pyrofling.core.viewer.clock_sync import HostClock
from pyrofling.core.viewer.concealment import Concealment
from pyrofling.core.viewer.connection import DecodeVideo, DecodeVideoPart
from pyrofling.core.viewer.picture_quality import CLEAN_TILE_ERROR, tile_error
from pyrofling.runtime import THREAD_PRIORITIES
from pyrofling.wire import VideoCodec

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Item:
    packet: DecodeVideo
    clock: HostClock  # the connection's: maps the capture time in the picture to ours
    connection: int  # which connection (the viewer's count) it came on
    connect_s: float
    queued_s: float = 0.0  # handed to the decode thread
    decode_start_s: float = 0.0


@dataclass(frozen=True, slots=True)
class _Expect:
    codec: VideoCodec
    width: int
    height: int


#: What the decode thread is given: a packet, a part of one, a stream's parameters, or None (stop).
_Work = _Item | DecodeVideoPart | _Expect | None


@dataclass(slots=True)
class VideoStats:
    """What the decode thread counts; read by others under :attr:`VideoPipeline.lock`."""

    frames_decoded: int = 0
    frames_shown: int = 0  # pictures handed to the presenter: whole ones, and concealed ones (below)
    frames_hidden: int = 0  # decoded but not whole (after loss, before the key frame), and not shown
    frames_concealed: int = 0  # not whole, but shown: the picture had been still for a while
    decode_errors: int = 0
    markers_read: int = 0
    hdr10_pictures: int = 0  # decoded pictures that said they are HDR10 (BT.2020, PQ): shown tone-mapped
    scene_error_max: float = 0.0  # worst tile error of any picture compared with the scene (``check_scene``)
    #: (frame id, tile error) of the last pictures that did not match the scene: a damaged picture measures
    #: 40–120, a clean one at most ~6, so the figure says which a "corrupt" refresh was.
    unclean_pictures: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=100))
    decode_queue_max: int = 0
    #: Pictures begun from parts before they were complete (``view --early-decode``), the parts and their bytes,
    #: and pictures begun so that were never finished (their packet lost: the decoder is reset).  Parts queued
    #: behind one another go to the decoder together: ``part_feeds`` calls for ``parts_decoded`` parts.
    pictures_decoded_early: int = 0
    parts_decoded: int = 0
    part_feeds: int = 0
    bytes_decoded_early: int = 0
    parts_abandoned: int = 0
    decoder_resets: int = 0
    decode_ms: deque[float] = field(default_factory=recent_samples)
    latency_ms: deque[float] = field(default_factory=recent_samples)  # capture → decoded
    latency_count: int = 0  # samples ever added to ``latency_ms`` (the timeline takes the new ones)
    network_ms: deque[float] = field(default_factory=recent_samples)  # capture → packet complete
    connect_to_first_frame_ms: deque[float] = field(default_factory=recent_samples)


class VideoPipeline:
    """Runs the decode thread: :meth:`start`, :meth:`offer` per packet, :meth:`close` at the end."""

    def __init__(
        self,
        presenter: Presenter,
        display: Display,
        *,
        on_decode_error: Callable[[], None],
        conceal_after_s: float | None = 0.1,
        decode_threads: int = 2,
        max_queue: int = 8,
        marker_log: Path | None = None,
        check_scene: bool = False,
        early_decode: bool = False,
    ) -> None:
        self.presenter = presenter
        self.display = display
        self.stats = VideoStats()
        self.concealment = Concealment(conceal_after_s)
        self.lock = threading.Lock()
        self._on_decode_error = on_decode_error
        self._decode_threads = decode_threads
        self._marker_log_path = marker_log
        #: Compare each picture with the test scene's own rendering of its frame (benches): sets ``Picture.clean``.
        self._check_scene = check_scene
        self._scene: TestScene | None = None
        #: Decode H.264 pictures from their parts as they arrive (:meth:`offer_part`), not only whole.
        self.early_decode = early_decode
        #: Packets to decode, their parts, and what a stream will need before its first one (:meth:`expect`).
        #: At most ``max_queue`` whole packets wait (``_waiting``); a packet's parts only come before it.
        self._queue: queue.Queue[_Work] = queue.Queue()
        self._max_queue = max_queue
        self._waiting = 0
        #: The decode thread's picture begun from parts: its packet's sequence number and the bytes fed.
        self._early_seq: int | None = None
        self._early_fed = 0
        self._thread = threading.Thread(target=self._run, name="pyrofling-decode", daemon=True)
        self._first_picture_of: int | None = None  # the connection whose first picture was shown
        #: Whether the real-time decoder leaves its CPU room for the viewer's other threads.
        self.cpu_share = CpuShare()

    def start(self) -> None:
        self._thread.start()

    def offer(self, packet: DecodeVideo, clock: HostClock, connection: int, connect_s: float) -> bool:
        """Queue a packet for the decoder; False when the queue is full (the decoder is falling behind)."""
        with self.lock:
            if self._waiting >= self._max_queue:
                return False
            self._waiting += 1
            self.stats.decode_queue_max = max(self.stats.decode_queue_max, self._waiting)
        self._queue.put_nowait(_Item(packet, clock, connection, connect_s, time.monotonic()))
        return True

    def offer_part(self, part: DecodeVideoPart) -> bool:
        """Queue the next part of the packet on its way, if this pipeline decodes early and keeps up; a part
        not taken costs nothing but time (the whole packet carries its bytes)."""
        if not self.early_decode:
            return False
        with self.lock:
            if self._waiting >= self._max_queue:
                return False
        self._queue.put_nowait(part)
        return True

    def expect(self, codec: VideoCodec, width: int, height: int) -> None:
        """A stream's parameters came: the decode thread opens its decoder now (6-13 ms), and with
        ``check_scene`` builds the scene checker (26 ms at 720p), not while the first picture waits."""
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(_Expect(codec, width, height))

    def stream_ended(self, now: float) -> None:
        """The connection ended: the picture on screen stood still until now (a stream where nothing new
        arrived ends in its longest freeze)."""
        with self.lock:
            self.concealment.stream_ended(now)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the thread once what is queued is decoded (or after ``timeout_s``)."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout_s)

    def summary(self, *, streaming: bool = False, samples: bool = True) -> dict[str, Any]:
        """Counters and medians, in the viewer's statistics' names; ``streaming``: the stream is still running;
        ``samples``: also the latency samples, and medians over every sample kept (else over the last
        ``LIVE_SAMPLES``: the live figures, asked for every second or more often)."""
        keep = SAMPLES_KEPT if samples else LIVE_SAMPLES
        with self.lock:  # the decode thread takes it every picture: copy here, sort outside
            st = self.stats
            out: dict[str, Any] = {k: getattr(st, k) for k in st.__dataclass_fields__ if not k.endswith("_ms")}
            series = {name: tail(getattr(st, name), keep) for name in ("decode_ms", "latency_ms", "network_ms")}
            if samples:
                out["latency_ms_samples"] = tail(st.latency_ms, 2000)
            out["connect_to_first_frame_ms"] = list(st.connect_to_first_frame_ms)
            out["unclean_pictures"] = list(st.unclean_pictures)
            # While the stream runs, a picture that has not been replaced yet is a freeze in progress.
            still = self.concealment.still_s(time.monotonic()) if streaming else self.concealment.max_still_s
            out["max_freeze_ms"] = still * 1000
            out["freezes_over_250ms"] = self.concealment.freezes
            out["max_unshown_frames"] = self.concealment.max_unshown_frames
        series["connect_to_first_frame_ms"] = out["connect_to_first_frame_ms"]
        for name, values in series.items():
            out[f"{name}_median"], out[f"{name}_p95"] = median_and_p95(values)
        return out

    # -- the decode thread -------------------------------------------------------------------

    def _run(self) -> None:
        THREAD_PRIORITIES.apply("decoder")
        marker_log = self._marker_log_path.open("w") if self._marker_log_path is not None else None
        decoder: VideoDecoder | None = None
        layout: frame_marker.MarkerLayout | None = None
        layout_width = 0
        held: list[_Work] = []  # taken from the queue while gathering parts, not yet done
        try:
            while (item := held.pop() if held else self._queue.get()) is not None:
                if isinstance(item, _Expect):
                    if decoder is None or decoder.codec != item.codec:
                        with contextlib.suppress(ValueError, av.FFmpegError):  # the first packet says why
                            decoder = self._decoder(item.codec)
                    if self._check_scene:
                        self._scene_for(item.width, item.height)
                    continue
                if isinstance(item, DecodeVideoPart):
                    item, count = self._gathered(item, held)
                    if decoder is not None and decoder.parts:
                        self._part(decoder, item, count)
                    continue
                with self.lock:
                    self._waiting -= 1
                packet = item.packet
                if decoder is None or decoder.codec != packet.codec:
                    decoder = self._decoder(packet.codec)
                data = self._rest_of(decoder, packet)
                t0 = time.perf_counter()
                item.decode_start_s = time.monotonic()
                try:
                    frames = decoder.decode(data, packet.pts_us)
                except DecodeError as exc:
                    self._decode_failed(exc)
                    continue
                decode_ms = (time.perf_counter() - t0) * 1000
                if decoder.parts:  # a picture begun from parts and never finished comes out of no packet of ours
                    frames = [f for f in frames if f.pts == packet.pts_us]
                    if not frames:  # a packet that was not a whole picture: reset, or no picture comes again
                        self._reset(decoder)
                for frame in frames:
                    if frame.width != layout_width:  # the marker's layout is the picture width's (it may change)
                        layout, layout_width = frame_marker.layout_for(frame.width), frame.width
                    self._picture(frame, item, layout, decode_ms, marker_log)
                THREAD_PRIORITIES.worked("decoder", self.cpu_share, item.decode_start_s, time.monotonic())
        finally:
            if marker_log is not None:
                marker_log.close()

    def _decoder(self, codec: VideoCodec) -> VideoDecoder:
        self._early_seq, self._early_fed = None, 0
        return VideoDecoder(codec, threads=self._decode_threads, parts=self.early_decode)

    def _decode_failed(self, exc: DecodeError) -> None:
        with self.lock:
            self.stats.decode_errors += 1
        log.debug("decode error: %s", exc)
        self._on_decode_error()

    def _gathered(self, part: DecodeVideoPart, held: list[_Work]) -> tuple[DecodeVideoPart, int]:
        """The part and those queued behind it that follow it, as one (the decoder runs one call's slices on
        its threads together, where parts fed one by one take a slice at a time), and their count; the item
        taken after them goes to ``held``."""
        datas, end = [part.data], part.start + len(part.data)
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if not (isinstance(item, DecodeVideoPart) and item.seq == part.seq and item.start == end):
                held.append(item)
                break
            datas.append(item.data)
            end += len(item.data)
        if len(datas) > 1:
            part = DecodeVideoPart(b"".join(datas), part.pts_us, part.seq, part.start)
        return part, len(datas)

    def _part(self, decoder: VideoDecoder, part: DecodeVideoPart, count: int = 1) -> None:
        """Feed the next part of the packet on its way (a part that does not follow the last one is skipped:
        its packet's bytes go in whole when it is complete)."""
        if part.seq != self._early_seq:
            self._abandon(decoder)
            self._early_seq = part.seq
        if part.start != self._early_fed:
            return
        try:
            decoder.decode(part.data, part.pts_us)  # nothing comes out before the picture's last slice
        except DecodeError as exc:
            self._decode_failed(exc)
        self._early_fed += len(part.data)
        with self.lock:
            self.stats.parts_decoded += count
            self.stats.part_feeds += 1
            self.stats.bytes_decoded_early += len(part.data)

    def _rest_of(self, decoder: VideoDecoder, packet: DecodeVideo) -> bytes:
        """What of the packet the decoder has not had yet: all of it, or what follows its parts."""
        fed = self._early_fed if self._early_seq == packet.seq else 0
        if not fed:
            self._abandon(decoder)  # parts of another packet, if any: never finished
            return packet.data
        self._early_seq, self._early_fed = None, 0
        with self.lock:
            self.stats.pictures_decoded_early += 1
        return packet.data[fed:]

    def _abandon(self, decoder: VideoDecoder) -> None:
        """The picture begun from parts will not be finished (its packet was lost): reset the decoder."""
        if self._early_fed:
            with self.lock:
                self.stats.parts_abandoned += 1
            self._reset(decoder)
        self._early_seq, self._early_fed = None, 0

    def _reset(self, decoder: VideoDecoder) -> None:
        """FFmpeg's H.264 decoder taking parts never gives another picture after one left unfinished (a lost
        packet begun from its parts, or a complete packet that held only part of a picture: damaged or forged
        on an open session).  Reset it; its references go, so the pictures are broken until a key frame, and
        the connection is told so (it asks for one)."""
        decoder.flush()
        with self.lock:
            self.stats.decoder_resets += 1
        self._on_decode_error()

    def _picture(
        self,
        frame: av.VideoFrame,
        item: _Item,
        layout: frame_marker.MarkerLayout | None,
        decode_ms: float,
        marker_log: TextIO | None,
    ) -> None:
        decoded = time.monotonic()
        packet = item.packet
        stamp = None
        clean = None
        if layout is not None:
            rows = luma(frame)
            stamp = frame_marker.read(rows, layout)
            if self._check_scene:
                clean = self._clean(frame, rows, stamp)
        capture_s = None
        if stamp is not None:
            capture_s = item.clock.to_local(frame_marker.unwrap_capture_us(stamp.capture_us, packet.pts_us))
        with self.lock:
            show = self.concealment.show(whole=packet.whole, connection=item.connection, now=decoded)
            st = self.stats
            st.frames_decoded += 1
            st.decode_ms.append(decode_ms)
            st.markers_read += stamp is not None
            st.hdr10_pictures += is_hdr10_frame(frame)
            if not packet.whole:
                if show:
                    st.frames_concealed += 1
                else:
                    st.frames_hidden += 1
        if marker_log is not None and stamp is not None:
            record = {"t": decoded, "id": stamp.frame_id, "capture": capture_s, "whole": packet.whole,
                      "size": [frame.width, frame.height]}  # fmt: skip
            marker_log.write(json.dumps(record) + "\n")
        if not show:
            return
        prepared = self.display.prepare(frame)
        done = time.monotonic()  # decoded and ready to show: what the phase loop measures
        with self.lock:
            st.frames_shown += 1
            if capture_s is not None:
                st.latency_ms.append((decoded - capture_s) * 1000)
                st.latency_count += 1
                st.network_ms.append((packet.complete_s - capture_s) * 1000)
            if item.connection != self._first_picture_of:
                self._first_picture_of = item.connection
                st.connect_to_first_frame_ms.append((done - item.connect_s) * 1000)
            self.concealment.shown(done, connection=item.connection, seq=packet.seq)
        frame_id = stamp.frame_id if stamp is not None else None
        timing = PictureTiming(
            capture_us=frame_marker.unwrap_capture_us(stamp.capture_us, packet.pts_us) if stamp is not None else None,
            first_s=packet.first_s,
            complete_s=packet.complete_s,
            queued_s=item.queued_s,
            decode_start_s=item.decode_start_s,
            decoded_s=decoded,
        )
        self.presenter.submit(Picture(prepared, packet.pts_us, done, capture_s, frame_id, clean, timing))

    def _scene_for(self, width: int, height: int) -> TestScene:
        if self._scene is None or (self._scene.width, self._scene.height) != (width, height):
            self._scene = TestScene(width, height)
        return self._scene

    def _clean(
        self,
        frame: av.VideoFrame,
        luma: npt.NDArray[np.uint8],
        stamp: frame_marker.FrameStamp | None,
    ) -> bool:
        """Whether the picture is the scene's frame as rendered (a marker that cannot be read is not)."""
        if stamp is None:
            return False
        w, h = frame.width, frame.height
        scene = self._scene_for(w, h)
        reference = scene.render(stamp.frame_id, 0)[:h]
        error = tile_error(luma[:h, :w], reference, scene.structured_rows())
        with self.lock:
            self.stats.scene_error_max = max(self.stats.scene_error_max, error)
            if error > CLEAN_TILE_ERROR:
                self.stats.unclean_pictures.append((stamp.frame_id, round(error, 1)))
        return error <= CLEAN_TILE_ERROR
