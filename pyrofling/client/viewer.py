"""``pyrofling view``: the asyncio shell around the viewer core, plus the decode thread.

Network (asyncio): TCP control through :class:`~pyrofling.core.viewer_session.ViewerSession`,
UDP media through :class:`~pyrofling.core.reassembler.Reassembler`; complete
video packets go to the decode thread through a bounded queue.  The decode
thread decodes with PyAV, reads the test scene's frame marker for latency, lets
the display prepare whole pictures and hands them to the
:class:`~pyrofling.client.presenter.Presenter`, which shows one per display
refresh and sends the phase error back as PHASE_OFFSET.  When the host goes
away the viewer reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import queue
import socket
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from pyrofling.client.audio import AudioPlayer, AudioPlayerConfig
from pyrofling.client.decoder import DecodeError, VideoDecoder
from pyrofling.client.gamepad import GamepadConfig, GamepadLink
from pyrofling.client.presenter import Display, HeadlessDisplay, Picture, Presenter
from pyrofling.core import frame_marker
from pyrofling.core.bitstream import key_info
from pyrofling.core.presentation import PresentationConfig
from pyrofling.core.reassembler import (
    PacketReady,
    PacketsLost,
    PingReplyReceived,
    Reassembler,
    ReassemblerConfig,
    ReassemblyEvent,
)
from pyrofling.core.samples import recent_samples, tail
from pyrofling.core.viewer_session import (
    ClockSync,
    SendControl,
    SendDatagram,
    SessionFailed,
    Streaming,
    StreamStalled,
    ViewerOutput,
    ViewerSession,
    ViewerSessionConfig,
)
from pyrofling.stats_file import write_stats
from pyrofling.wire import (
    CodecParameters,
    ControlFramer,
    ExtensionFeature,
    KickFlags,
    ProtocolError,
    StreamType,
    VideoCodec,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ViewerConfig:
    """Everything ``pyrofling view`` can be told."""

    host: str
    port: int
    flags: KickFlags = KickFlags.VIDEO
    #: Ask for pyrofling extensions (explicit key-frame requests); off = behave like a native viewer.
    extensions: bool = True
    #: The host's password or pairing code (protocol.md §7.7).
    password: str | None = field(default=None, repr=False)
    #: Only connect to a host that authenticates itself (it must know ``password``).
    require_auth: bool = False
    #: Stop after this many seconds of streaming time (None: until Ctrl-C or the window closes).
    duration_s: float | None = None
    reconnect: bool = True
    stats_json: Path | None = None
    reassembler: ReassemblerConfig = field(default_factory=ReassemblerConfig)
    decode_threads: int = 2
    #: Complete packets waiting for the decoder; beyond this the viewer is falling behind.
    max_decode_queue: int = 8
    #: After a loss, pictures wait for the key frame that repairs them; once the picture has been still this
    #: long, show the decoder's concealed pictures instead (intra refresh heals them).  None: wait, frozen.
    conceal_after_ms: float | None = 100.0
    #: Seconds to wait for the TCP connection.
    connect_timeout_s: float = 5.0
    #: Rewrite ``stats_json`` this often while running (0: only on exit), for live displays.
    stats_interval_s: float = 0.0
    #: Phase lock and deadline (URI ``phase_locked=…&deadline=…``).
    presentation: PresentationConfig = field(default_factory=PresentationConfig)
    #: Refresh rate of the software display clock (None: the display's, else the stream's).
    refresh_hz: float | None = None
    #: Run the software display clock this many ppm slow (negative: fast), to show locking.
    refresh_skew_ppm: float = 0.0
    #: Audio playback (None: no audio; the AUDIO bit in ``flags`` asks the host for it).
    audio: AudioPlayerConfig | None = None
    #: The pad to send (None: none; the GAMEPAD bit in ``flags`` tells the host to expect it).
    gamepad: GamepadConfig | None = None
    #: Write each decoded frame's marker (id, capture time) and decode time here, as JSON lines (benches).
    marker_log: Path | None = None


@dataclass(slots=True)
class ViewerStats:
    connects: int = 0
    sessions_streaming: int = 0
    reconnects: int = 0
    datagrams: int = 0
    bytes_received: int = 0
    packets_video: int = 0
    packets_audio: int = 0
    packets_lost_video: int = 0
    packets_recovered: int = 0
    frames_decoded: int = 0
    frames_shown: int = 0  # pictures handed to the presenter: whole ones, and concealed ones (below)
    frames_hidden: int = 0  # decoded but not whole (after loss, before the key frame), and not shown
    frames_concealed: int = 0  # not whole, but shown: the picture had been still for conceal_after_ms
    decode_errors: int = 0
    decode_queue_overflows: int = 0
    decode_queue_max: int = 0
    markers_read: int = 0
    keyframe_requests: int = 0
    handshake_ms: deque[float] = field(default_factory=recent_samples)
    connect_to_first_frame_ms: deque[float] = field(default_factory=recent_samples)
    decode_ms: deque[float] = field(default_factory=recent_samples)
    latency_ms: deque[float] = field(default_factory=recent_samples)  # capture → decoded
    network_ms: deque[float] = field(default_factory=recent_samples)  # capture → packet complete
    max_freeze_ms: float = 0.0
    freezes_over_250ms: int = 0
    rtt_ms: float | None = None


@dataclass(slots=True)
class _DecodeItem:
    data: bytes
    pts_us: int
    whole: bool
    complete_s: float
    codec: VideoCodec
    clock: ClockSync
    connect_s: float


class _UdpProtocol(asyncio.DatagramProtocol):
    def __init__(self, on_datagram: Any) -> None:
        self.on_datagram = on_datagram

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.on_datagram(data)

    def error_received(self, exc: Exception) -> None:
        log.debug("UDP error: %s", exc)  # ICMP refused while the host restarts


class Viewer:
    """Connects, streams, reconnects.  ``await viewer.run()``; :meth:`stop` from any thread.

    With no ``display`` the viewer is headless and runs its presenter on a thread of its
    own; a window runs :attr:`presenter` on its main thread (``run_presenter=False``).
    """

    def __init__(
        self, config: ViewerConfig, display: Display | None = None, *, run_presenter: bool | None = None
    ) -> None:
        self.config = config
        self.display: Display = display or HeadlessDisplay()
        self.presenter = Presenter(
            config.presentation,
            self.display,
            refresh_hz=config.refresh_hz,
            skew_ppm=config.refresh_skew_ppm,
            stream_hz=self._stream_hz,
            on_phase_error=self._phase_error_from_presenter,
        )
        self._run_presenter = display is None if run_presenter is None else run_presenter
        self.presenter_stop = threading.Event()
        self.stats = ViewerStats()
        self.session: ViewerSession | None = None
        self.reassembler: Reassembler | None = None
        self.codec_parameters: CodecParameters | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._decode_queue: queue.Queue[_DecodeItem | None] = queue.Queue(maxsize=config.max_decode_queue)
        self._lock = threading.Lock()  # guards stats written by both threads
        self._last_shown_s: float | None = None
        self._first_frame_of_connect: float | None = None
        self._cpu_start = time.process_time()
        self._started_s = time.monotonic()
        self._counters_before: dict[str, int] = {}
        self._perform: Callable[[list[ViewerOutput]], None] | None = None
        self.audio: AudioPlayer | None = None
        if config.audio is not None and config.flags & KickFlags.AUDIO:
            self.audio = AudioPlayer(config.audio)
        self.gamepad: GamepadLink | None = None
        if config.gamepad is not None and config.flags & KickFlags.GAMEPAD:
            self.gamepad = GamepadLink(config.gamepad)
        #: Why authentication failed (a wrong password...): the viewer stops instead of reconnecting.
        self.auth_failure: str | None = None

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed between the check and the call
                self._loop.call_soon_threadsafe(self._stop.set)

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self) -> ViewerStats:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        video = bool(self.config.flags & KickFlags.VIDEO)  # a gamepad-only client decodes nothing
        decoder = None
        if video:
            decoder = threading.Thread(target=self._decode_thread, name="pyrofling-decode", daemon=True)
            decoder.start()
        if self.gamepad is not None:
            self.gamepad.start(self._loop)
        presenter = None
        if self._run_presenter and video:
            presenter = threading.Thread(
                target=self.presenter.run, args=(self.presenter_stop,), name="pyrofling-present", daemon=True
            )
            presenter.start()
        stopper = None
        if self.config.duration_s is not None:
            stopper = self._loop.call_later(self.config.duration_s, self._stop.set)
        backoff = 0.25
        writer_task = None
        if self.config.stats_json is not None and self.config.stats_interval_s > 0:
            writer_task = asyncio.create_task(self._write_stats_periodically())
        try:
            while not self._stop.is_set():
                streamed = await self._one_session()
                if self._stop.is_set() or not self.config.reconnect or self.auth_failure is not None:
                    break
                backoff = 0.25 if streamed else min(2.0, backoff * 2)
                self.stats.reconnects += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), backoff)
        finally:
            if stopper is not None:
                stopper.cancel()
            if writer_task is not None:
                writer_task.cancel()
            self._decode_queue.put(None)
            self.presenter_stop.set()
            if self.audio is not None:
                await asyncio.get_running_loop().run_in_executor(None, self.audio.close)
            if self.gamepad is not None:
                self.gamepad.close()
            if decoder is not None:
                await asyncio.get_running_loop().run_in_executor(None, decoder.join, 5.0)
            if presenter is not None:
                await asyncio.get_running_loop().run_in_executor(None, presenter.join, 5.0)
            if self.config.stats_json is not None:
                write_stats(self.config.stats_json, self.summary())
        return self.stats

    async def _write_stats_periodically(self) -> None:
        assert self.config.stats_json is not None
        path = self.config.stats_json
        while True:
            await asyncio.sleep(self.config.stats_interval_s)
            # Live updates skip the audio distributions: computing them on this loop every second
            # would hold up datagrams (and the audio they carry) as the run grows.
            live = self.summary(audio=False)
            if self.audio is not None:
                live["audio_live"] = self.audio.live()
            write_stats(path, live)

    async def _one_session(self) -> bool:
        """One connection from TCP connect to its end; returns whether it got as far as streaming."""
        assert self._stop is not None
        cfg = self.config
        loop = asyncio.get_running_loop()
        connect_s = time.monotonic()
        self.stats.connects += 1
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(cfg.host, cfg.port), cfg.connect_timeout_s)
        except (OSError, TimeoutError) as exc:
            log.warning("cannot connect to %s port %d: %s", cfg.host, cfg.port, exc or "timed out")
            return False
        sock = writer.get_extra_info("socket")
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = writer.get_extra_info("peername")
        ended: asyncio.Future[str] = loop.create_future()
        reassembler = Reassembler(cfg.reassembler)
        session_config = ViewerSessionConfig(flags=cfg.flags, secret=cfg.password, require_auth=cfg.require_auth)
        if not cfg.extensions:
            session_config = replace(session_config, extensions=ExtensionFeature.NONE)
        session = ViewerSession(reassembler.counters, session_config)
        self.session, self.reassembler = session, reassembler
        streamed = False
        timer: asyncio.TimerHandle | None = None

        def end(reason: str) -> None:
            if not ended.done():
                ended.set_result(reason)

        def perform(outputs: list[ViewerOutput]) -> None:
            nonlocal streamed
            for out in outputs:
                if isinstance(out, SendControl):
                    if not writer.is_closing():
                        writer.write(out.data)
                elif isinstance(out, SendDatagram):
                    if not udp.is_closing():
                        udp.sendto(out.data)
                elif isinstance(out, Streaming):
                    streamed = True
                    self.codec_parameters = out.codec_parameters
                    self.stats.sessions_streaming += 1
                    self.stats.handshake_ms.append(out.handshake_s * 1000)
                    p = out.codec_parameters
                    reassembler.expect_picture(p.width, p.height)
                    if self.audio is not None and p.audio_codec and p.channels and p.rate:
                        self.audio.configure(p.audio_codec, p.rate, p.channels)
                    if self.gamepad is not None:
                        self.gamepad.attach(send_udp)
                    log.info(
                        "streaming %dx%d@%d/%d %s from %s (handshake %.1f ms%s)",
                        p.width,
                        p.height,
                        p.frame_rate_num,
                        max(1, p.frame_rate_den),
                        _codec_name(p.video_codec),
                        _fmt(peer),
                        out.handshake_s * 1000,
                        ", pyrofling host" if out.extensions else "",
                    )
                elif isinstance(out, SessionFailed):
                    if session.auth_failed:
                        self.auth_failure = out.reason
                    end(f"handshake failed: {out.reason}")
                elif isinstance(out, StreamStalled):
                    end(f"no media for {out.silent_s:.1f} s")

        def send_udp(data: bytes) -> None:
            if not udp.is_closing():
                udp.sendto(session.udp(data))

        def on_timer() -> None:
            nonlocal timer
            timer = None
            now = time.monotonic()
            perform(session.handle_timer(now))
            self._handle_events(reassembler.handle_timer(now), session, perform, connect_s)
            schedule()

        def schedule() -> None:
            nonlocal timer
            times = [t for t in (session.next_timer(), reassembler.next_timer()) if t is not None]
            if not times or ended.done():
                return
            due = min(times)
            if timer is not None:
                if timer.when() <= loop.time() + (due - time.monotonic()) + 1e-4:
                    return
                timer.cancel()
            timer = loop.call_at(loop.time() + max(0.0, due - time.monotonic()), on_timer)

        def on_datagram(wire_data: bytes) -> None:
            now = time.monotonic()
            data = session.open_datagram(wire_data)
            if data is None:
                return  # forged, replayed or plaintext on a sealed session: counted by the session
            self.stats.datagrams += 1
            self.stats.bytes_received += len(data)
            session.datagram_received(now)
            self._handle_events(reassembler.receive(data, now), session, perform, connect_s)
            schedule()

        family = sock.family if sock is not None else socket.AF_INET
        try:
            udp, _ = await loop.create_datagram_endpoint(
                lambda: _UdpProtocol(on_datagram), remote_addr=(cfg.host, cfg.port), family=family
            )
        except OSError as exc:
            log.warning("cannot open a UDP socket to %s port %d: %s", cfg.host, cfg.port, exc)
            writer.close()
            self.session = self.reassembler = None
            return False
        with contextlib.suppress(OSError):
            udp.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)

        async def read_control() -> None:
            framer = ControlFramer(max_buffer_bytes=4096)
            try:
                while True:
                    data = await reader.read(4096)
                    if not data:
                        end("host closed the connection")
                        return
                    for msg in framer.feed(data):
                        perform(session.control(msg, time.monotonic()))
                    schedule()
            except ProtocolError as exc:
                end(f"protocol error on the control channel: {exc}")
            except (ConnectionError, OSError) as exc:
                end(f"control connection error: {exc}")

        self._perform = perform
        perform(session.start(time.monotonic()))
        schedule()
        reader_task = asyncio.create_task(read_control())
        stop_task: asyncio.Future[Any] = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait([ended, stop_task], return_when=asyncio.FIRST_COMPLETED)
        finally:
            reason = ended.result() if ended.done() else "stopped"
            if timer is not None:
                timer.cancel()
            if self.gamepad is not None:
                self.gamepad.detach()
            reader_task.cancel()
            stop_task.cancel()
            udp.close()
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)
            self._bank_counters(reassembler, session)
            self.session = self.reassembler = None  # banked: summary() must not count them twice
            self._perform = None
        if reason != "stopped":
            log.warning("lost the stream: %s", reason)
        return streamed

    def _bank_counters(self, reassembler: Reassembler, session: ViewerSession) -> None:
        c = reassembler.counters
        self.stats.packets_recovered += c.fec_recovered
        self.stats.keyframe_requests += session.keyframe_requests
        for reason, n in [*reassembler.discarded.items(), *session.refused.items()]:
            self._counters_before[reason] = self._counters_before.get(reason, 0) + n
        if session.clock.last_rtt_s is not None:
            self.stats.rtt_ms = session.clock.last_rtt_s * 1000

    # -- network thread: reassembled packets --------------------------------------------------

    def _handle_events(
        self,
        events: list[ReassemblyEvent],
        session: ViewerSession,
        perform: Callable[[list[ViewerOutput]], None],
        connect_s: float,
    ) -> None:
        for ev in events:
            if isinstance(ev, PacketReady):
                if ev.stream != StreamType.VIDEO:
                    self.stats.packets_audio += 1
                    if self.audio is not None:
                        self.audio.packet(ev.data, ev.pts_us, session.clock)
                    continue
                self.stats.packets_video += 1
                params = session.codec_parameters
                codec = VideoCodec(params.video_codec) if params else VideoCodec.H264
                key = key_info(ev.data, codec) if ev.key_frame else None
                whole, outputs = session.video_packet(key, ev.complete_s)
                perform(outputs)
                if session.gate.key_frames == 0:
                    continue  # nothing decodes before the first key frame
                item = _DecodeItem(ev.data, ev.pts_us, whole, ev.complete_s, codec, session.clock, connect_s)
                try:
                    self._decode_queue.put_nowait(item)
                except queue.Full:
                    self.stats.decode_queue_overflows += 1
                    perform(session.video_lost(ev.complete_s))
                self.stats.decode_queue_max = max(self.stats.decode_queue_max, self._decode_queue.qsize())
            elif isinstance(ev, PacketsLost):
                if ev.stream == StreamType.AUDIO and self.audio is not None:
                    self.audio.lost(ev.count)
                if ev.stream == StreamType.VIDEO:
                    self.stats.packets_lost_video += ev.count
                    perform(session.video_lost(time.monotonic()))
            elif isinstance(ev, PingReplyReceived):
                session.ping_reply(ev.seq, ev.server_time_us, ev.received_s)

    def _stream_hz(self) -> float | None:
        p = self.codec_parameters
        return p.frame_rate_num / max(1, p.frame_rate_den) if p is not None and p.frame_rate_num else None

    def _phase_error_from_presenter(self, offset_us: int) -> None:
        """Presenter thread: send PHASE_OFFSET from the event loop."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._send_phase_offset, offset_us)

    def _send_phase_offset(self, offset_us: int) -> None:
        if self.session is not None and self._perform is not None:
            self._perform(self.session.phase_offset(offset_us))

    def _decode_failed(self) -> None:
        """On the event loop: the decoder rejected a packet, so pictures are broken until a key frame."""
        if self.session is not None and self._perform is not None:
            self._perform(self.session.decode_failed(time.monotonic()))

    # -- decode thread ---------------------------------------------------------------------------

    def _decode_thread(self) -> None:
        decoder: VideoDecoder | None = None
        layout: frame_marker.MarkerLayout | None = None
        marker_log = self.config.marker_log.open("w") if self.config.marker_log is not None else None
        while True:
            item = self._decode_queue.get()
            if item is None:
                if marker_log is not None:
                    marker_log.close()
                return
            if decoder is None or decoder.codec != item.codec:
                decoder = VideoDecoder(item.codec, threads=self.config.decode_threads)
            t0 = time.perf_counter()
            try:
                frames = decoder.decode(item.data, item.pts_us)
            except DecodeError as exc:
                with self._lock:
                    self.stats.decode_errors += 1
                log.debug("decode error: %s", exc)
                if self._loop is not None:
                    self._loop.call_soon_threadsafe(self._decode_failed)
                continue
            decode_ms = (time.perf_counter() - t0) * 1000
            for frame in frames:
                decoded = time.monotonic()
                if layout is None or layout.per_row * layout.block > frame.width:
                    layout = frame_marker.layout_for(frame.width)
                stamp = None
                if layout is not None:
                    plane = frame.planes[0]
                    luma = np.frombuffer(memoryview(plane), np.uint8).reshape(frame.height, plane.line_size)
                    stamp = frame_marker.read(luma, layout)
                capture_s = None
                if stamp is not None:
                    capture_us = frame_marker.unwrap_capture_us(stamp.capture_us, item.pts_us)
                    capture_s = item.clock.to_local(capture_us)
                show = item.whole or self._conceal(item, decoded)
                with self._lock:
                    st = self.stats
                    st.frames_decoded += 1
                    st.decode_ms.append(decode_ms)
                    if stamp is not None:
                        st.markers_read += 1
                    if not item.whole:
                        if show:
                            st.frames_concealed += 1
                        else:
                            st.frames_hidden += 1
                if marker_log is not None and stamp is not None:
                    record = {"t": decoded, "id": stamp.frame_id, "capture": capture_s, "whole": item.whole}
                    marker_log.write(json.dumps(record) + "\n")
                if not show:
                    continue
                prepared = self.display.prepare(frame)
                done = time.monotonic()  # decoded and ready to show: what the phase loop measures
                with self._lock:
                    st.frames_shown += 1
                    if capture_s is not None:
                        st.latency_ms.append((decoded - capture_s) * 1000)
                        st.network_ms.append((item.complete_s - capture_s) * 1000)
                    if item.connect_s != self._first_frame_of_connect:  # first picture of this connection
                        self._first_frame_of_connect = item.connect_s
                        st.connect_to_first_frame_ms.append((done - item.connect_s) * 1000)
                    if self._last_shown_s is not None:
                        gap = (done - self._last_shown_s) * 1000
                        st.max_freeze_ms = max(st.max_freeze_ms, gap)
                        if gap > 250:
                            st.freezes_over_250ms += 1
                    self._last_shown_s = done
                self.presenter.submit(
                    Picture(prepared, item.pts_us, done, capture_s, stamp.frame_id if stamp is not None else None)
                )

    def _conceal(self, item: _DecodeItem, now: float) -> bool:
        """Show a damaged picture: only after this connection's first whole one, once the screen has been
        still for ``conceal_after_ms`` (a freeze bounded in time rather than by the next key frame)."""
        limit = self.config.conceal_after_ms
        if limit is None or self._last_shown_s is None or item.connect_s != self._first_frame_of_connect:
            return False
        return (now - self._last_shown_s) * 1000 >= limit

    # -- reporting ---------------------------------------------------------------------------

    def summary(self, *, audio: bool = True) -> dict[str, Any]:
        """Counters and distributions; ``audio=False`` leaves out the audio statistics (costly on long runs)."""
        with self._lock:
            st = self.stats
            out: dict[str, Any] = {k: getattr(st, k) for k in st.__dataclass_fields__ if not k.endswith("_ms")}
            for name in ("decode_ms", "latency_ms", "network_ms", "handshake_ms", "connect_to_first_frame_ms"):
                values = list(getattr(st, name))
                out[f"{name}_median"] = statistics.median(values) if values else None
                out[f"{name}_p95"] = float(np.percentile(values, 95)) if values else None
            out["latency_ms_samples"] = tail(st.latency_ms, 2000)
            out["connect_to_first_frame_ms"] = list(st.connect_to_first_frame_ms)
            out["max_freeze_ms"] = st.max_freeze_ms
            out["rtt_ms"] = st.rtt_ms
        live = self.reassembler
        discarded = dict(self._counters_before)
        recovered = st.packets_recovered
        if live is not None:
            for reason, n in live.discarded.items():
                discarded[reason] = discarded.get(reason, 0) + n
            recovered += live.counters.fec_recovered
        if self.session is not None:
            for reason, n in self.session.refused.items():
                discarded[reason] = discarded.get(reason, 0) + n
        out["discarded"] = discarded
        out["packets_recovered"] = recovered
        live_session = self.session
        if live_session is not None:
            out["keyframe_requests"] = st.keyframe_requests + live_session.keyframe_requests
        out["presentation"] = self.presenter.summary()
        glass = out["presentation"]["glass_ms"]
        out["glass_ms_median"] = statistics.median(glass) if glass else None
        out["glass_ms_p95"] = float(np.percentile(glass, 95)) if glass else None
        if self.audio is not None and audio:
            audio_stats = self.audio.summary()
            out["audio"] = audio_stats
            lat = audio_stats.get("latency_ms_median")
            out["av_offset_ms"] = lat - out["glass_ms_median"] if lat is not None and out["glass_ms_median"] else None
        if self.gamepad is not None:
            out["gamepad"] = self.gamepad.summary()
        out["cpu_s"] = time.process_time() - self._cpu_start
        out["elapsed_s"] = time.monotonic() - self._started_s
        out["received_mbits"] = st.bytes_received * 8 / max(out["elapsed_s"], 1e-6) / 1e6
        return out


def _codec_name(code: int) -> str:
    try:
        return VideoCodec(code).name
    except ValueError:
        return f"codec {code}"


def _fmt(addr: Any) -> str:
    if not addr:
        return "?"
    return f"[{addr[0]}]:{addr[1]}" if ":" in str(addr[0]) else f"{addr[0]}:{addr[1]}"
