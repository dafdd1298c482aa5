"""``pyrofling host``: the asyncio shell around the host core.

One TCP listener and one UDP socket on the same port (protocol.md §1).  The
frame clock (:class:`~pyrofling.core.frame_clock.FrameClock`) ticks at ``fps``,
steered by the phase-locked viewers' PHASE_OFFSET; a heartbeat thread sleeps
precisely until each tick (asyncio's timers are only good to a millisecond) and
hands it to the event loop.  Each tick renders/reads a frame and encodes it in
the encode thread, then fans the packets out to every kicked viewer through
that viewer's packetizer (own sequence numbers and FEC) and paced queue.
Decisions live in :class:`~pyrofling.core.host_session.HostSessions`,
:class:`~pyrofling.core.keyframes.KeyframePolicy` and the frame clock; this
module only moves bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
import statistics
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import av

from pyrofling.capture.messages import default_socket_path
from pyrofling.core.frame_clock import FrameClock
from pyrofling.core.host_session import (
    Address,
    CloseConnection,
    GamepadInput,
    HostOutput,
    HostSessionConfig,
    HostSessions,
    LogLine,
    PhaseFeedback,
    SendControl,
    SendDatagram,
    ViewerConnection,
)
from pyrofling.core.keyframes import KeyframePolicy
from pyrofling.core.pacer import PacedQueue, TokenBucketPacer
from pyrofling.core.packetizer import MediaPacket, Packetizer
from pyrofling.core.samples import recent_samples, tail
from pyrofling.core.secure import SALT_BYTES, derive_key
from pyrofling.fec.codec import FecPlan
from pyrofling.fec.planner import REFERENCE_RATIO, make_planner
from pyrofling.server.audio import (
    AudioChunk,
    AudioConfig,
    AudioEncoder,
    AudioSource,
    EncodedAudio,
    GameAudioSource,
    open_audio_source,
)
from pyrofling.server.capture import CapturedFrame, CaptureServer
from pyrofling.server.encoder import EncodedVideo, EncoderConfig, VideoEncoder
from pyrofling.server.gamepad import PadOutput, VirtualPad, open_virtual_pad
from pyrofling.server.outputs import OutputConfig, Outputs, StreamInfo
from pyrofling.server.sources import VideoSource, open_source, placeholder_frame
from pyrofling.stats_file import write_stats
from pyrofling.wire import AudioCodec, CodecParameters, ControlFramer, ProtocolError, StreamType

log = logging.getLogger(__name__)

DEFAULT_PORT = 9876
#: Control replies queued for a connection before it counts as not reading them (and is closed).
CONTROL_BACKLOG_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class HostConfig:
    """Everything ``pyrofling host`` can be told.  Defaults are what a person gets with no flags."""

    bind: str = "127.0.0.1"
    port: int = DEFAULT_PORT  # 0: any free port (tests); TCP and UDP share it
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    source: str = "scene"
    raw_format: str = "yuv420p"
    #: FEC planner for video: tuned, reference, adaptive, or none.
    fec: str = "tuned"
    #: Repair blocks as a share of data blocks (0.25: the reference's ~25 % + 1).
    fec_ratio: float = REFERENCE_RATIO
    #: Overhead for key frames, which recovery from loss waits for (0: same as other frames).
    key_fec_ratio: float = 0.5
    #: Pacing cap per viewer, Mbit/s (0: unpaced, like the reference).
    max_rate_mbits: float = 200.0
    #: Stop after this many seconds (None: until Ctrl-C).
    duration_s: float | None = None
    stats_json: Path | None = None
    #: Rewrite ``stats_json`` this often while running (0: only on exit), for soak runs and dashboards.
    stats_interval_s: float = 0.0
    #: Seconds between status lines in the log (0: none).
    status_interval_s: float = 5.0
    #: Phase controller for the frame clock: pi (pyrofling's) or reference (PyroFling's).
    phase_controller: str = "pi"
    #: Which phase-locked viewers steer: leader (the longest-locked one) or sum (the reference).
    phase_policy: str = "leader"
    #: Heartbeat at fps × this; a frame is encoded on every n-th (a game at 120 Hz, a 60 Hz stream).
    client_rate_multiplier: int = 1
    #: Audio source and codec (source "none": video only).
    audio: AudioConfig = field(default_factory=AudioConfig)
    #: The virtual gamepad viewers drive: uinput (a warning and no pad without /dev/uinput) or none.
    virtual_pad: str = "uinput"
    #: Write every state applied to the virtual pad, with its time, as JSON lines.
    gamepad_trace: Path | None = None
    #: With source "capture": the games' socket (None: $XDG_RUNTIME_DIR/pyrofling-capture).
    capture_socket: str | None = None
    #: Encode a game's frame the moment it is presented instead of on the next heartbeat.
    immediate_encode: bool = False
    #: A recording and/or an RTMP broadcast of the stream.
    outputs: OutputConfig = field(default_factory=OutputConfig)
    #: The secret viewers must prove they know (protocol.md §7.7); None: open to anyone, as the reference.
    password: str | None = field(default=None, repr=False)
    #: Seal the datagrams of authenticated viewers (AES-GCM).
    encrypt: bool = True


@dataclass(slots=True)
class HostStats:
    frames_encoded: int = 0
    frames_skipped: int = 0  # heartbeats with no frame: the host was busy or the encoder still running
    key_frames: int = 0
    idrs: int = 0
    bytes_encoded: int = 0
    datagrams_sent: int = 0
    bytes_sent: int = 0
    send_errors: int = 0
    queue_dropped: int = 0
    encode_errors: int = 0
    audio_chunks: int = 0
    audio_packets: int = 0
    audio_bytes: int = 0
    audio_encode_errors: int = 0
    encode_ms: deque[float] = field(default_factory=recent_samples)
    convert_ms: deque[float] = field(default_factory=recent_samples)
    render_ms: deque[float] = field(default_factory=recent_samples)


class _UdpProtocol(asyncio.DatagramProtocol):
    def __init__(self, host: Host) -> None:
        self.host = host

    def datagram_received(self, data: bytes, addr: Address) -> None:
        self.host._on_datagram(data, addr)

    def error_received(self, exc: Exception) -> None:
        # ICMP unreachable from a viewer that went away: nothing to do, the keep-alive drops it.
        log.debug("UDP error: %s", exc)


class Host:
    """Runs a host until :meth:`stop` (or the configured duration).  ``await host.run()``."""

    def __init__(self, config: HostConfig, *, pad: VirtualPad | None = None) -> None:
        """``pad``: a virtual pad to use instead of opening ``config.virtual_pad`` (tests)."""
        self.config = config
        self.stats = HostStats()
        self.keyframes = KeyframePolicy()
        session_config = HostSessionConfig(encrypt=config.encrypt)
        if config.password is not None:
            salt = secrets.token_bytes(SALT_BYTES)
            # Stretched once per run (~50 ms); the secret itself is not kept.
            session_config = replace(session_config, auth_key=derive_key(config.password, salt), auth_salt=salt)
        self.sessions = HostSessions(
            make_packetizer=self._make_packetizer, keyframes=self.keyframes, config=session_config
        )
        self.port: int | None = None
        self.ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._writers: dict[int, asyncio.StreamWriter] = {}
        self._queues: dict[int, PacedQueue] = {}
        self._pump_handles: dict[int, asyncio.TimerHandle] = {}
        self._udp: asyncio.DatagramTransport | None = None
        self._next_conn_id = 1
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pyrofling-encode")
        self._cpu_start = time.process_time()
        self._started_s = time.monotonic()
        fps = config.encoder.fps
        self.clock = FrameClock(
            fps=fps,
            start_s=time.monotonic(),
            controller=config.phase_controller,
            multiplier=config.client_rate_multiplier,
            policy=config.phase_policy,
        )
        self._next_tick_s = self.clock.next_timer()  # read by the heartbeat thread
        self._tick_handled = threading.Event()
        self._halt = threading.Event()
        self._encoding = False
        self._encode_task: asyncio.Future[None] | None = None
        self._frame_index = 0
        self._audio_source: AudioSource | None = None
        self._pad = pad
        self.pad_output: PadOutput | None = None
        self.capture: CaptureServer | None = None
        self._last_encode_s = 0.0
        self._stream_period_s = 1.0 / config.encoder.fps
        self._encoder: VideoEncoder | None = None
        self.outputs = Outputs()

    def _make_packetizer(self, cookie: int) -> Packetizer:
        cfg = self.config
        planner = make_planner(cfg.fec, ratio=cfg.fec_ratio)
        key_planner = None
        if cfg.fec != "none" and cfg.key_fec_ratio > cfg.fec_ratio:
            key_planner = make_planner(cfg.fec, ratio=cfg.key_fec_ratio)
        return Packetizer.for_cookie(cookie, video_planner=planner, key_planner=key_planner)

    def stop(self) -> None:
        self._stop.set()

    # -- lifecycle -----------------------------------------------------------------------

    async def run(self) -> HostStats:
        cfg = self.config
        loop = asyncio.get_running_loop()
        source: VideoSource | None = None
        if cfg.source != "capture":
            source = open_source(cfg.source, cfg.encoder.width, cfg.encoder.height, cfg.raw_format)
        encoder = self._encoder = await loop.run_in_executor(self._executor, VideoEncoder, cfg.encoder)
        audio_source = self._audio_source = open_audio_source(cfg.audio)
        audio_encoder = AudioEncoder(cfg.audio, audio_source.rate) if audio_source is not None else None
        self.sessions.codec_parameters = CodecParameters(
            video_codec=int(encoder.video_codec),
            color_profile=int(encoder.color_profile),
            audio_codec=int(audio_encoder.codec) if audio_encoder is not None else 0,
            frame_rate_num=cfg.encoder.fps,
            frame_rate_den=1,
            width=cfg.encoder.width,
            height=cfg.encoder.height,
            channels=cfg.audio.channels if audio_source is not None else 0,
            rate=audio_source.rate if audio_source is not None else 0,
        )
        if cfg.outputs.enabled:
            self.outputs = Outputs.open(
                cfg.outputs,
                StreamInfo(
                    width=cfg.encoder.width,
                    height=cfg.encoder.height,
                    fps=cfg.encoder.fps,
                    video_codec=encoder.video_codec,
                    preset=cfg.encoder.preset,
                    audio_codec=audio_encoder.codec if audio_encoder is not None else AudioCodec.NONE,
                    audio_rate=audio_source.rate if audio_source is not None else 0,
                    audio_channels=cfg.audio.channels,
                ),
            )
            if self.outputs.wants_frames:
                encoder.frame_tap = self.outputs.push_frame
        pad = self._pad if self._pad is not None else open_virtual_pad(cfg.virtual_pad)
        self.pad_output = PadOutput(pad, trace=cfg.gamepad_trace)
        log.info("gamepad: %s", pad.description)
        if cfg.source == "capture":
            self.capture = CaptureServer(
                cfg.capture_socket or default_socket_path(),
                period_ns=round(1e9 / (cfg.encoder.fps * cfg.client_rate_multiplier)),
                immediate=cfg.immediate_encode,
                on_new_image=self._on_new_image,
                audio=audio_source if isinstance(audio_source, GameAudioSource) else None,
            )
            self.capture.start(loop)
            self.pad_output.listeners.append(self.capture.pad_update)
        server = await self._listen()
        log.info(
            "hosting %dx%d@%d %s %d kbit/s on %s port %d (TCP+UDP); FEC %s; join with: pyrofling view pyro://%s:%d",
            cfg.encoder.width,
            cfg.encoder.height,
            cfg.encoder.fps,
            cfg.encoder.encoder,
            cfg.encoder.bitrate_kbits,
            cfg.bind,
            self.port,
            cfg.fec,
            _uri_host(cfg.bind),
            self.port,
        )
        if audio_source is not None and audio_encoder is not None:
            log.info(
                "audio: %s, %d Hz %s, %s in %g ms chunks",
                {"tone": "test tone", "game": "from the game"}.get(
                    cfg.audio.source, f"capture device {cfg.audio.device or '(default)'}"
                ),
                audio_source.rate,
                "stereo" if cfg.audio.channels == 2 else "mono",
                audio_encoder.codec.name,
                cfg.audio.chunk_ms,
            )
            encoder_ref = audio_encoder
            audio_source.start(lambda chunk: self._on_audio_chunk(loop, encoder_ref, chunk))
        self.ready.set()
        self.clock.next_tick_s = self._next_tick_s = time.monotonic()
        heartbeat = threading.Thread(
            target=self._heartbeat, args=(loop, source, encoder), name="pyrofling-heartbeat", daemon=True
        )
        heartbeat.start()
        tasks = [asyncio.create_task(self._timer_loop())]
        if cfg.status_interval_s > 0:
            tasks.append(asyncio.create_task(self._status_loop()))
        if cfg.stats_json is not None and cfg.stats_interval_s > 0:
            tasks.append(asyncio.create_task(self._stats_loop(cfg.stats_json, cfg.stats_interval_s)))
        try:
            if cfg.duration_s is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), cfg.duration_s)
            else:
                await self._stop.wait()
        finally:
            self._halt.set()
            self._tick_handled.set()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await loop.run_in_executor(None, heartbeat.join, 2.0)
            server.close()
            for writer in list(self._writers.values()):
                writer.close()
            for handle in self._pump_handles.values():
                handle.cancel()
            if self._udp is not None:
                self._udp.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 1.0)
            self._executor.shutdown(wait=True)
            if source is not None:
                source.close()
            if self.capture is not None:
                self.capture.close()
            if audio_source is not None:
                audio_source.close()
            self.outputs.close()  # after the last packet: the recording is finished and indexed
            if self.pad_output is not None:
                self.pad_output.close()
            if cfg.stats_json is not None:
                write_stats(cfg.stats_json, self.summary())
            log.info("host stopped after %d frames", self.stats.frames_encoded)
        return self.stats

    async def _listen(self) -> asyncio.Server:
        loop = asyncio.get_running_loop()
        cfg = self.config
        for _attempt in range(20):
            server = await asyncio.start_server(self._on_connection, cfg.bind, cfg.port, reuse_address=True)
            port = server.sockets[0].getsockname()[1]
            try:
                transport, _ = await loop.create_datagram_endpoint(
                    lambda: _UdpProtocol(self), local_addr=(cfg.bind, port), reuse_port=False
                )
            except OSError:
                server.close()
                if cfg.port:
                    raise
                continue  # port 0: the TCP port we got is taken for UDP; try another
            sock = transport.get_extra_info("socket")
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * 1024 * 1024)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024 * 1024)
            self._udp = transport
            self.port = port
            return server
        raise OSError("could not find a port free for both TCP and UDP")

    # -- control channel ---------------------------------------------------------------------

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn_id = self._next_conn_id
        self._next_conn_id += 1
        peer = writer.get_extra_info("peername") or ("?", 0)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._writers[conn_id] = writer
        self._perform(self.sessions.open(conn_id, peer, _new_cookie(self.sessions), time.monotonic()))
        if self.sessions.connection(conn_id) is None:  # refused: too many connections
            return
        log.info("connection %d from %s", conn_id, _fmt(peer))
        framer = ControlFramer(max_buffer_bytes=4096)
        reason = "closed by viewer"
        try:
            while not self._stop.is_set():
                data = await reader.read(4096)
                if not data:
                    break
                try:
                    messages = framer.feed(data)
                except ProtocolError as exc:
                    reason = f"protocol error: {exc}"
                    self.sessions.discarded[f"tcp_{exc.reason}"] += 1
                    break
                for msg in messages:
                    self._perform(self.sessions.control(conn_id, msg, time.monotonic()))
                if self.sessions.connection(conn_id) is None:
                    reason = "dropped"
                    break
        except (ConnectionError, OSError) as exc:
            reason = f"connection error: {exc}"
        finally:
            self._drop(conn_id, reason)

    def _drop(self, conn_id: int, reason: str) -> None:
        conn = self.sessions.connection(conn_id)
        self._perform(self.sessions.close(conn_id))
        writer = self._writers.pop(conn_id, None)
        if writer is not None:
            writer.close()
        queue = self._queues.pop(conn_id, None)
        if queue is not None:
            self.stats.queue_dropped += queue.dropped
        handle = self._pump_handles.pop(conn_id, None)
        if handle is not None:
            handle.cancel()
        self.clock.viewer_left(conn_id)
        if writer is not None:
            log.info("connection %d%s ended: %s", conn_id, f" ({conn.label})" if conn else "", reason)

    def _perform(self, outputs: list[HostOutput]) -> None:
        for out in outputs:
            if isinstance(out, SendControl):
                writer = self._writers.get(out.conn_id)
                if writer is not None and not writer.is_closing():
                    writer.write(out.data)  # one message, one write (TCP_NODELAY is on)
                    if writer.transport.get_write_buffer_size() > CONTROL_BACKLOG_BYTES:
                        # A peer that sends but never reads its replies would grow this buffer forever.
                        self.sessions.discarded["tcp_not_reading"] += 1
                        self._drop(out.conn_id, "not reading its replies")
            elif isinstance(out, SendDatagram):
                self._send_datagram(out.data, out.address)
            elif isinstance(out, LogLine):
                log.info("%s", out.text)
            elif isinstance(out, CloseConnection):
                self._drop(out.conn_id, out.reason)
            elif isinstance(out, PhaseFeedback):
                self.clock.feedback(out.conn_id, out.offset_us, time.monotonic())
            elif isinstance(out, GamepadInput) and self.pad_output is not None:
                self.pad_output.apply(out.update)

    # -- UDP ---------------------------------------------------------------------------------

    def _on_datagram(self, data: bytes, addr: Address) -> None:
        self._perform(self.sessions.datagram(addr, data, time.monotonic()))

    def _send_datagram(self, data: bytes, addr: Address) -> None:
        if self._udp is None or self._udp.is_closing():
            return
        try:
            self._udp.sendto(data, addr)
        except OSError:
            self.stats.send_errors += 1
            return
        self.stats.datagrams_sent += 1
        self.stats.bytes_sent += len(data)

    async def _timer_loop(self) -> None:
        while True:
            due = self.sessions.next_timer()
            delay = 1.0 if due is None else max(0.0, due - time.monotonic())
            await asyncio.sleep(min(delay, 1.0))
            self._perform(self.sessions.handle_timer(time.monotonic()))

    # -- media -------------------------------------------------------------------------------

    def _heartbeat(self, loop: asyncio.AbstractEventLoop, source: VideoSource | None, encoder: VideoEncoder) -> None:
        """Heartbeat thread: sleep until the next tick, hand it to the loop, wait until it is handled."""
        while not self._halt.is_set():
            delay = self._next_tick_s - time.monotonic()
            if delay > 0 and self._halt.wait(min(delay, 0.5)):
                return
            woke = time.monotonic()
            if woke < self._next_tick_s:
                continue  # woke early (or the loop moved the tick): sleep again
            self._tick_handled.clear()
            try:
                loop.call_soon_threadsafe(self._on_tick, woke, source, encoder)
            except RuntimeError:
                return  # the loop is closed
            self._tick_handled.wait(1.0)

    def _on_tick(self, woke: float, source: VideoSource | None, encoder: VideoEncoder) -> None:
        """On the loop: advance the frame clock, then capture and encode unless still busy."""
        try:
            tick = self.clock.handle_timer(woke)
            self._next_tick_s = self.clock.next_timer()
        finally:
            self._tick_handled.set()
        if tick is None:
            return
        if self.capture is not None:
            self.capture.beat(woke, self._next_tick_s)
        self.stats.frames_skipped += tick.missed // self.clock.multiplier
        if not tick.encode or self._halt.is_set():
            return
        capture = self.capture
        if capture is not None and self.config.immediate_encode:
            # Presents are encoded as they come; the heartbeat only takes one that had to wait, or repeats
            # the last picture when the game has sent nothing for a while (a stalled game, a loading screen).
            if self._encoding or (not capture.has_new() and woke - self._last_encode_s < 1.5 * self._stream_period_s):
                return
        elif self._encoding:  # the previous frame is still encoding: this heartbeat stalls
            self.stats.frames_skipped += 1
            return
        captured = capture.take() if capture is not None else None
        self._start_encode(woke, source, encoder, captured)

    def _on_new_image(self) -> None:
        """--immediate-encode: the streamed game presented (or an encode finished); encode its newest image now."""
        if self._encoding or self.capture is None or self._encoder is None or not self.capture.has_new():
            return
        now = time.monotonic()
        if now - self._last_encode_s < 0.5 * self._stream_period_s:
            return  # a game presenting faster than the stream: the next heartbeat takes the newest
        captured = self.capture.take()
        if captured is not None:
            self._start_encode(now, None, self._encoder, captured)

    def _start_encode(
        self, now: float, source: VideoSource | None, encoder: VideoEncoder, captured: CapturedFrame | None
    ) -> None:
        self._encoding = True
        self._last_encode_s = now
        self._encode_task = asyncio.ensure_future(self._encode_and_send(now, source, encoder, captured))

    async def _encode_and_send(
        self, woke: float, source: VideoSource | None, encoder: VideoEncoder, captured: CapturedFrame | None
    ) -> None:
        loop = asyncio.get_running_loop()
        index = self._frame_index
        capture_us = int(woke * 1_000_000)
        force = self.keyframes.should_force(woke)
        packets: list[EncodedVideo] | None
        try:
            if source is None:
                packets = await loop.run_in_executor(
                    self._executor, self._encode_captured, loop, encoder, captured, capture_us, force
                )
            else:
                packets = await loop.run_in_executor(
                    self._executor, self._capture_and_encode, source, encoder, index, capture_us, force
                )
        except Exception:
            # One bad frame must not end the stream; the next frame is an IDR.
            self.stats.encode_errors += 1
            self.keyframes.loss_reported()
            log.exception("encoding frame %d failed", index)
            packets = []
        finally:
            self._encoding = False
        if self.capture is not None and self.config.immediate_encode and not self._halt.is_set():
            self._on_new_image()  # a present that came while this frame encoded
        if packets is None:
            log.info("source ended after %d frames", index)
            self.stop()
            return
        self._frame_index += 1
        for packet in packets:
            self._fan_out(packet)

    def _capture_and_encode(
        self, source: VideoSource, encoder: VideoEncoder, index: int, capture_us: int, force: bool
    ) -> list[EncodedVideo] | None:
        t0 = time.perf_counter()
        array = source.read(index, capture_us)
        if array is None:
            return None
        self.stats.render_ms.append((time.perf_counter() - t0) * 1000)
        if isinstance(array, av.VideoFrame):
            return encoder.encode_frame(array, capture_us, force_keyframe=force)
        return encoder.encode_array(array, capture_us, pixel_format=source.pixel_format, force_keyframe=force)

    def _encode_captured(
        self,
        loop: asyncio.AbstractEventLoop,
        encoder: VideoEncoder,
        captured: CapturedFrame | None,
        capture_us: int,
        force: bool,
    ) -> list[EncodedVideo]:
        """Encode thread: a game's shared image (given back to the game once converted), or the placeholder."""
        if captured is None:
            return encoder.encode_frame(placeholder_frame(encoder.pix_fmt), capture_us, force_keyframe=force)
        capture = self.capture
        assert capture is not None

        def give_back() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed while stopping
                loop.call_soon_threadsafe(capture.release, captured)

        return encoder.encode_shared(
            captured.array, capture_us, pixel_format=captured.pixel_format, force_keyframe=force, on_read=give_back
        )

    def _fan_out(self, packet: EncodedVideo) -> None:
        st = self.stats
        st.frames_encoded += 1
        st.bytes_encoded += len(packet.data)
        st.encode_ms.append(packet.encode_s * 1000)
        st.convert_ms.append(packet.convert_s * 1000)
        if packet.key_frame:
            st.key_frames += 1
        if packet.idr:
            st.idrs += 1
        media = MediaPacket(packet.data, packet.pts_us, StreamType.VIDEO, key_frame=packet.key_frame)
        now = time.monotonic()
        repair_cache: dict[FecPlan, list[bytes]] = {}  # one FEC encode per packet, whatever the viewer count
        for conn in self.sessions.video_targets(idr=packet.idr):
            self._send_packet(conn, media, now, repair_cache)
            if packet.idr:
                self.sessions.idr_sent(conn, now)
        self.outputs.push_video(packet)  # after the viewers, and it never waits

    def _send_packet(
        self, conn: ViewerConnection, media: MediaPacket, now: float, repair_cache: dict[FecPlan, list[bytes]]
    ) -> None:
        assert conn.packetizer is not None and conn.udp_address is not None
        datagrams = conn.packetizer.packetize(media, repair_cache=repair_cache)
        if conn.sealer is not None:
            datagrams = [conn.sealer.seal(d) for d in datagrams]
        queue = self._queues.get(conn.conn_id)
        if queue is None:
            rate = self.config.max_rate_mbits
            if rate <= 0:
                for d in datagrams:
                    self._send_datagram(d, conn.udp_address)
                return
            queue = PacedQueue(TokenBucketPacer(rate_bits_per_s=rate * 1e6))
            self._queues[conn.conn_id] = queue
        queue.push(datagrams)
        self._pump(conn.conn_id, conn.udp_address)

    def _pump(self, conn_id: int, addr: Address) -> None:
        """Send what the pacer allows now; come back when the next datagram is due."""
        self._pump_handles.pop(conn_id, None)
        queue = self._queues.get(conn_id)
        if queue is None:
            return
        now = time.monotonic()
        for d in queue.pop_due(now):
            self._send_datagram(d, addr)
        due = queue.next_timer(now)
        if due is not None and conn_id not in self._pump_handles:
            loop = asyncio.get_running_loop()
            self._pump_handles[conn_id] = loop.call_at(loop.time() + max(0.0, due - now), self._pump, conn_id, addr)

    def _on_audio_chunk(self, loop: asyncio.AbstractEventLoop, encoder: AudioEncoder, chunk: AudioChunk) -> None:
        """Audio thread: encode the chunk there, send it from the loop."""
        self.stats.audio_chunks += 1
        self.outputs.push_pcm(chunk)
        try:
            packets = encoder.encode(chunk)
        except Exception:
            self.stats.audio_encode_errors += 1
            log.exception("audio encode failed")
            return
        if packets:
            self.outputs.push_audio(packets)
        if packets and not self._halt.is_set():
            with contextlib.suppress(RuntimeError):  # the loop closed while stopping
                loop.call_soon_threadsafe(self._fan_out_audio, packets)

    def _fan_out_audio(self, packets: list[EncodedAudio]) -> None:
        """Audio goes out at once, past the pacer: it is small and any queueing is latency."""
        for packet in packets:
            self.stats.audio_packets += 1
            self.stats.audio_bytes += len(packet.data)
            media = MediaPacket(packet.data, packet.pts_us, StreamType.AUDIO)
            for conn in self.sessions.audio_targets():
                assert conn.packetizer is not None and conn.udp_address is not None
                for d in conn.packetizer.packetize(media):
                    self._send_datagram(conn.outgoing(d), conn.udp_address)

    # -- reporting ---------------------------------------------------------------------------

    async def _status_loop(self) -> None:
        last_frames, last_bytes, last_t = 0, 0, time.monotonic()
        while True:
            await asyncio.sleep(self.config.status_interval_s)
            now = time.monotonic()
            st = self.stats
            dt = max(1e-6, now - last_t)
            recent = tail(st.encode_ms, 120)
            log.info(
                "%.1f fps, %.2f Mbit/s encoded, encode %.1f ms, %d viewer(s), %d key frames forced, %d skipped%s",
                (st.frames_encoded - last_frames) / dt,
                (st.bytes_encoded - last_bytes) * 8 / dt / 1e6,
                statistics.median(recent) if recent else 0.0,
                len(self.sessions.connections),
                self.keyframes.forced,
                st.frames_skipped,
                self._phase_status() + self._capture_status() + self.outputs.status(),
            )
            last_frames, last_bytes, last_t = st.frames_encoded, st.bytes_encoded, now

    def _capture_status(self) -> str:
        if self.capture is None:
            return ""
        name = self.capture.active_name
        return f"; streaming game {name!r}" if name else f"; waiting for a game on {self.capture.path}"

    def _phase_status(self) -> str:
        clock = self.clock
        if clock.leader is None and clock.policy == "leader":
            return "; frame clock free-running"
        steering = f"viewer {clock.leader}" if clock.policy == "leader" else "all viewers (sum)"
        return f"; frame clock locked to {steering} ({clock.controller.name}), rate {clock.rate_trim_ppm:+.0f} ppm"

    async def _stats_loop(self, path: Path, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            write_stats(path, self.summary())

    def summary(self) -> dict[str, Any]:
        st = self.stats
        elapsed = time.monotonic() - self._started_s
        out: dict[str, Any] = {k: v for k, v in asdict(st).items() if not isinstance(v, deque)}
        for name in ("encode_ms", "convert_ms", "render_ms"):
            values = getattr(st, name)
            out[f"{name}_median"] = statistics.median(values) if values else None
        out.update(
            elapsed_s=elapsed,
            cpu_s=time.process_time() - self._cpu_start,
            keyframes_forced=self.keyframes.forced,
            keyframes_forced_for_join=self.keyframes.forced_for_join,
            keyframes_forced_for_loss=self.keyframes.forced_for_loss,
            connections_total=self.sessions.connections_total,
            control_messages=self.sessions.control_messages,
            auth={
                "required": self.sessions.auth_required,
                "encrypt": self.config.encrypt,
                "successes": self.sessions.auth_successes,
                "failures": self.sessions.auth_failures,
            },
            timed_out=self.sessions.timed_out,
            discarded=dict(self.sessions.discarded),
            encoded_mbits=st.bytes_encoded * 8 / max(elapsed, 1e-6) / 1e6,
            phase_controller=self.clock.controller.name,
            phase_feedback=self.clock.feedback_total,
            phase_feedback_ignored=self.clock.feedback_ignored,
            heartbeats=self.clock.index + 1,
            heartbeats_missed=self.clock.missed_total,
            rate_trim_ppm=self.clock.rate_trim_ppm,
            audio_capture_overflows=getattr(self._audio_source, "overflows", 0),  # device capture only
            gamepad=self._gamepad_summary(),
            capture=self.capture.summary() if self.capture is not None else None,
            outputs=self.outputs.summary(),
        )
        return out

    def _gamepad_summary(self) -> dict[str, Any]:
        router = self.sessions.gamepad
        pad = self.pad_output
        return {
            "pad": pad.pad.description if pad is not None else None,
            "states_applied": router.stats.applied,
            "takeovers": router.stats.takeovers,
            "owner": router.owner,
            "verdicts": dict(router.stats.verdicts),
            "events_written": pad.events_written if pad is not None else 0,
            "write_errors": pad.write_errors if pad is not None else 0,
        }


def _new_cookie(sessions: HostSessions) -> int:
    """A random 64-bit cookie (the reference counts from 1001, which anyone can guess)."""
    while True:
        cookie = secrets.randbits(64)
        if not any(c.cookie == cookie for c in sessions.connections):
            return cookie


def _fmt(addr: Address) -> str:
    return f"[{addr[0]}]:{addr[1]}" if ":" in str(addr[0]) else f"{addr[0]}:{addr[1]}"


def _uri_host(bind: str) -> str:
    if bind in ("0.0.0.0", "::", ""):
        return "HOST"
    return f"[{bind}]" if ":" in bind else bind
