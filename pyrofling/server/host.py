"""``pyrofling host``: capture, encode and fan out one stream to every viewer.

The decisions live in the pure core — who is connected and what they may do
(:class:`~pyrofling.core.host.sessions.HostSessions`), when to force a key frame
(:class:`~pyrofling.core.host.keyframes.KeyframePolicy`), the frame clock steered by phase-locked viewers
(:class:`~pyrofling.core.host.frame_clock.FrameClock`), when to encode
(:class:`~pyrofling.core.host.encode_schedule.EncodeSchedule`), FEC and pacing per viewer
(:class:`~pyrofling.core.host.packetizer.Packetizer`, :mod:`pyrofling.core.host.pacer`).  This module wires
the shells together: the sockets (:class:`~pyrofling.server.network.HostNetwork`), the heartbeat and encoder
(:class:`~pyrofling.server.heartbeat.Heartbeat`), audio, the capture socket for games, the virtual pad and
where else the stream goes (a recording, a broadcast).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyrofling.capture.paths import default_socket_path
from pyrofling.clocks import SYSTEM_CLOCK, Clock
from pyrofling.core.host.codec_choice import CodecChoice, SwitchCodec
from pyrofling.core.host.congestion import RateConfig
from pyrofling.core.host.display import FollowDisplay
from pyrofling.core.host.encode_schedule import EncodeSchedule
from pyrofling.core.host.frame_clock import FrameClock
from pyrofling.core.host.keyframes import KeyframePolicy
from pyrofling.core.host.packetizer import MediaPacket
from pyrofling.core.host.picture_rate import SetPictureRate
from pyrofling.core.host.sessions import (
    GamepadInput,
    HostOutput,
    HostSessionConfig,
    HostSessions,
    KeyboardMouseInput,
    PhaseFeedback,
    ViewerLeft,
)
from pyrofling.core.host.state import BrowserRumble, PairingCodeSpent, SetBitrate, ViewerPaired
from pyrofling.core.host.web_viewers import WebOutput
from pyrofling.core.input.pad.rumble import RumbleCommand
from pyrofling.core.secure import pairing_code
from pyrofling.files import write_stats
from pyrofling.pairing import PairingStoreError, keep_pairing, open_host_pairings
from pyrofling.runtime import THREAD_PRIORITIES, ThreadCpu
from pyrofling.server.audio import (
    AudioChunk,
    AudioEncoder,
    AudioSource,
    EncodedAudio,
    GameAudioSource,
    open_audio_source,
)
from pyrofling.server.capture import CaptureServer
from pyrofling.server.codec_pace import codecs_that_keep_pace
from pyrofling.server.config import HostConfig
from pyrofling.server.destinations import Destinations, open_destinations
from pyrofling.server.encoder import EncodedVideo, VideoEncoder
from pyrofling.server.gamepad import PadOutput, VirtualPad, open_virtual_pad
from pyrofling.server.heartbeat import Heartbeat
from pyrofling.server.input_devices import InputDevices, InputOutput, open_input_devices
from pyrofling.server.network import HostNetwork, uri_host
from pyrofling.server.sources import desktop_input, desktop_sound, open_host_source, resized
from pyrofling.server.stats import HostStats, StatusLine, phase_status
from pyrofling.wire import AudioCodec, StreamType

if TYPE_CHECKING:
    from pyrofling.server.web import WebServer  # loaded (with websockets) only with --web

log = logging.getLogger(__name__)


class Host:
    """Runs a host until :meth:`stop` (or the configured duration).  ``await host.run()``."""

    def __init__(
        self,
        config: HostConfig,
        *,
        pad: VirtualPad | None = None,
        input_devices: InputDevices | None = None,
        pad_factory: Callable[[int], VirtualPad] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """``pad``, ``input_devices``, ``pad_factory``: a virtual pad (pad 1), keyboard and mouse, and pads 2..N,
        to use instead of opening ``config.virtual_pad`` / ``config.virtual_input`` (tests).  ``clock``: the one
        the frame clock, the heartbeat and the capture server keep time on."""
        self.config = config = codecs_that_keep_pace(config)  # --codec auto: those this machine encodes in time
        self._clock = clock
        self.stats = HostStats()
        self.keyframes = KeyframePolicy()
        #: The viewers this host paired with (None: pairing off), and its lasting identity.
        self.pairings, identity = open_host_pairings(config.pairing_dir, config.password is not None or config.private)
        session_config = HostSessionConfig(
            auth_secret=config.password,
            private=config.private,
            identity=identity,
            one_time_code=config.show_pairing_code is not None,
            crypto_off_loop=True,
            open_keyboard_mouse=config.open_keyboard_mouse,
        )
        ceiling = config.encoder.bitrate_kbits * 1000
        rate = RateConfig(ceiling_bps=ceiling, floor_bps=config.floor_kbits * 1000)
        self.sessions = HostSessions(
            make_packetizer=config.make_packetizer,
            keyframes=self.keyframes,
            config=session_config,
            make_pacer=config.make_pacer,
            rate=rate,
            rate_policy=config.rate_policy,
            paired=self.pairings,
            pads=config.pads,
            codec_choice=CodecChoice(config.auto_codecs, config.auto_codecs[0]) if config.auto_codecs else None,
        )
        if config.show_pairing_code is not None and config.password is not None:
            self.sessions.auth.issue_code(config.password, clock.now())  # its 10 minutes run from when it was shown
        self.network = HostNetwork(self.sessions, stats=self.stats, on_output=self._on_output, clock=clock)
        #: (seconds since start, encoder kbit/s) at each change, for the statistics and the benches.
        self.bitrate_trace: list[tuple[float, int]] = [(0.0, config.encoder.bitrate_kbits)]
        self._encoder: VideoEncoder | None = None
        self.ready = asyncio.Event()
        self._stop = asyncio.Event()
        # One encode thread, named, at the encoder's priority (its x264 slice threads inherit it).
        self._executor = ThreadPoolExecutor(1, "pyrofling-encode", THREAD_PRIORITIES.apply, ("encoder",))
        self._cpu_start, self._thread_cpu = time.process_time(), ThreadCpu()  # the host's CPU, and by thread
        self._started_s = clock.now()
        self.clock = FrameClock(
            fps=config.encoder.fps,
            start_s=clock.now(),
            controller=config.phase_controller,
            multiplier=config.client_rate_multiplier,
            policy=config.phase_policy,
        )
        self.schedule = EncodeSchedule(1.0 / config.encoder.fps, immediate=config.immediate_encode)
        self.heartbeat: Heartbeat | None = None
        self._audio_source: AudioSource | None = None
        self._pad = pad
        self._pad_factory = pad_factory
        self.pad_output: PadOutput | None = None
        #: Every pad made so far, by number (pad 1 is ``pad_output``; the others appear with their players).
        self.pad_outputs: dict[int, PadOutput] = {}
        self._input_devices = input_devices
        self.input_output: InputOutput | None = None
        self.capture: CaptureServer | None = None
        self.destinations = Destinations()
        #: The browser viewer (``web_port``), once serving; its link carries a token made for this run.
        self.web: WebServer | None = None
        self.web_link: str | None = None

    @property
    def port(self) -> int | None:
        return self.network.port

    def stop(self) -> None:
        self._stop.set()

    # -- lifecycle -----------------------------------------------------------------------

    async def run(self) -> HostStats:
        cfg = self.config
        loop = asyncio.get_running_loop()
        THREAD_PRIORITIES.apply("event loop")
        source = await open_host_source(cfg)
        encoder = self._encoder = await loop.run_in_executor(self._executor, VideoEncoder, cfg.encoder)
        encoder.before_reopen = self._thread_cpu.read  # the old encoder's codec threads end with it
        audio_source = self._audio_source = desktop_sound(source, cfg.audio) or open_audio_source(cfg.audio)
        audio_encoder = AudioEncoder(cfg.audio, audio_source.rate) if audio_source is not None else None
        self.sessions.codec_parameters = cfg.codec_parameters(
            encoder.video_codec,
            encoder.color_profile,
            audio_encoder.codec if audio_encoder is not None else AudioCodec.NONE,
            audio_source.rate if audio_source is not None else 0,
        )
        self.destinations = open_destinations(cfg, encoder, audio_encoder, audio_source, self.keyframes)
        pad = self._pad if self._pad is not None else open_virtual_pad(cfg.virtual_pad)
        self.pad_output = self.pad_outputs[1] = PadOutput(pad, trace=cfg.gamepad_trace)
        self._listen_for_rumble(pad, 1)
        log.info("gamepad: %s%s", pad.description, f"; up to {cfg.pads} pads, one per player" if cfg.pads > 1 else "")
        devices = (
            self._input_devices or desktop_input(source, cfg.virtual_input) or open_input_devices(cfg.virtual_input)
        )
        self.input_output = InputOutput(devices, trace=cfg.input_trace)
        log.info("keyboard and mouse: %s", devices.description)
        heartbeat = self.heartbeat = Heartbeat(
            clock=self.clock,
            schedule=self.schedule,
            keyframes=self.keyframes,
            encoder=encoder,
            executor=self._executor,
            stats=self.stats,
            source=source,
            on_packets=self._fan_out,
            on_source_end=self.stop,
            frame_trace=cfg.frame_trace.open("w") if cfg.frame_trace is not None else None,
            time_source=self._clock,
        )
        if cfg.source == "capture":
            heartbeat.capture = self.capture = CaptureServer(
                cfg.capture_socket or default_socket_path(),
                period_ns=round(1e9 / (cfg.encoder.fps * cfg.client_rate_multiplier)),
                immediate=cfg.immediate_encode,
                on_new_image=heartbeat.presented,
                audio=audio_source if isinstance(audio_source, GameAudioSource) else None,
                layer_path=cfg.layer_socket,
                layer_path_required=cfg.layer_socket_required,
                clock=self._clock,
            )
            self.capture.on_rumble = self._rumble
            self.capture.start(loop)
            self.pad_output.listeners.append(self.capture.pad_update)
            self.input_output.listeners.append(self.capture.input_update)
        port = await self.network.listen(cfg.bind, cfg.port)
        log.info(
            "hosting %dx%d@%d %s %d kbit/s on %s port %d (TCP+UDP); FEC %s; join with: pyrofling view pyro://%s:%d",
            cfg.encoder.width,
            cfg.encoder.height,
            cfg.encoder.fps,
            cfg.encoder.encoder,
            cfg.encoder.bitrate_kbits,
            " and ".join(self.network.addresses),
            port,
            cfg.fec,
            uri_host(cfg.bind),
            port,
        )
        log.info("security: %s", self.security())
        if cfg.web_port is not None:  # the page and the browsers' stream; the link (with its key) to the person
            from pyrofling.server.web import open_web

            web = self.web = await open_web(cfg, encoder, audio_encoder, self.sessions, self.network, self._clock,
                                            self.pairings)  # fmt: skip
            self.web_link = web.link  # and shown to the person (cfg.show_web_link)
        if audio_source is not None and audio_encoder is not None:
            self._start_audio(loop, audio_source, audio_encoder)
        self.ready.set()
        heartbeat.start(loop)
        tasks = []
        if cfg.status_interval_s > 0:
            tasks.append(asyncio.create_task(self._status_loop(cfg.status_interval_s)))
        if cfg.stats_json is not None and cfg.stats_interval_s > 0:
            tasks.append(asyncio.create_task(self._stats_loop(cfg.stats_json, cfg.stats_interval_s)))
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), cfg.duration_s)
        finally:
            self._thread_cpu.read()  # each thread's CPU while they all live (the statistics' split)
            await heartbeat.stop()
            heartbeat.close_trace()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.network.close()
            if self.web is not None:
                await self.web.close()
            self._executor.shutdown(wait=True)
            pads = [o for n, o in self.pad_outputs.items() if n != 1]
            inputs: list[Any] = [self.pad_output, self.input_output, *pads]  # each closed, or None
            for closable in (source, self.capture, audio_source, self.destinations, *inputs):
                if closable is not None:
                    closable.close()  # the outputs after the last packet: the recording is finished and indexed
            if cfg.stats_json is not None:
                write_stats(cfg.stats_json, self.summary())
            log.info("host stopped after %d frames", self.stats.frames_encoded)
        return self.stats

    def security(self) -> str:
        """Who may join and what protects the stream, in words."""
        cfg = self.config
        paired = 0
        if self.pairings is not None:
            try:
                paired = sum(e.side == "viewer" for e in self.pairings.entries())
            except PairingStoreError as exc:
                log.warning("pairings: %s", exc)
        return cfg.security_text(paired)

    # -- viewers' input ----------------------------------------------------------------------

    def _listen_for_rumble(self, pad: VirtualPad, number: int) -> None:
        """A pad that takes force feedback (evdev's uinput) tells the host what games ask of its motors."""
        start = getattr(pad, "start_rumble", None)
        if start is not None:
            start(asyncio.get_running_loop(), lambda command: self._rumble(number, command))

    def _rumble(self, pad: int, command: RumbleCommand) -> None:
        """A game asked pad ``pad`` to rumble (its uinput force feedback, or the capture socket): its player hears."""
        self.network.perform(self.sessions.rumble(pad, command))

    def _pad_output_for(self, number: int) -> PadOutput:
        """Pad ``number``, made when its first player arrives (and kept: a pad vanishing mid-game is worse)."""
        out = self.pad_outputs.get(number)
        if out is None:
            if self._pad_factory is not None:
                pad = self._pad_factory(number)
            else:
                pad = open_virtual_pad(self.config.virtual_pad, number=number)
            out = self.pad_outputs[number] = PadOutput(pad)
            log.info("gamepad %d: %s", number, pad.description)
            self._listen_for_rumble(pad, number)
            if self.capture is not None:
                capture = self.capture
                out.listeners.append(lambda update: capture.pad_update(update, number))
        return out

    def _on_output(self, out: HostOutput) -> None:
        """What the sessions decide beyond the sockets: phase feedback steers the clock, pad states the pad."""
        if isinstance(out, PhaseFeedback):
            self.clock.feedback(out.conn_id, out.offset_us, self._clock.now())
        elif isinstance(out, ViewerLeft):
            self.clock.viewer_left(out.conn_id)
        elif isinstance(out, GamepadInput) and self.pad_output is not None:
            self._pad_output_for(out.pad).apply(out.update)
        elif isinstance(out, KeyboardMouseInput) and self.input_output is not None:
            self.input_output.apply(out.update)
        elif isinstance(out, PairingCodeSpent) and self.config.show_pairing_code is not None:
            code = pairing_code()
            self.sessions.auth.issue_code(code, self._clock.now())
            log.info("the pairing code %s: a new one is on the host's terminal", out.why)
            self.config.show_pairing_code(code, out.why)
        elif isinstance(out, ViewerPaired):
            keep_pairing(self.pairings, out)
        elif isinstance(out, BrowserRumble) and self.web is not None:
            self.web.rumble(out)
        elif isinstance(out, FollowDisplay | SwitchCodec | SetPictureRate) and self.heartbeat is not None:
            self.heartbeat.follow(out, lambda asked, made: self.network.perform(
                self.sessions.codec_switched(asked, made, self._clock.now())))  # fmt: skip
        elif isinstance(out, SetBitrate) and self._encoder is not None:
            self._encoder.set_bitrate(out.bits_per_s)
            kbits = round(out.bits_per_s / 1000)
            self.bitrate_trace.append((round(self._clock.now() - self._started_s, 3), kbits))
            del self.bitrate_trace[:-2000]
            log.debug("bitrate %d kbit/s (%s)", kbits, out.why)

    # -- media out -----------------------------------------------------------------------------

    def _fan_out(self, packets: list[EncodedVideo]) -> None:
        """Encoded video to every viewer that wants it (the sessions packetize and pace it), then the destinations."""
        st, fps = self.stats, self.clock.fps  # the rate the viewers asked for, if lower
        for packet in packets:
            st.frames_encoded += 1
            st.bytes_encoded += len(packet.data)
            st.encode_ms.append(packet.encode_s * 1000)
            st.convert_ms.append(packet.convert_s * 1000)
            st.key_frames += packet.key_frame
            st.idrs += packet.idr
            if packet.idr and self._encoder is not None:  # a new size starts with one: new viewers are told it
                self.sessions.codec_parameters = resized(self.sessions.codec_parameters, self._encoder)
            if paced := self.sessions.video_encoded(packet.encode_s, 1 / fps, self._clock.now()):  # --codec auto
                self.network.perform(paced)
            media = MediaPacket(packet.data, packet.pts_us, StreamType.VIDEO, key_frame=packet.key_frame)
            # The viewers' and the browsers' (the same unit, no second encode), one road; then the destinations.
            backlog = self.web.backlog() if self.web is not None else None
            sends = self.sessions.send_video(media, idr=packet.idr, now=self._clock.now(), backlog=backlog)
            self.network.perform(sends)
            self.destinations.push_video(packet)  # after the viewers, and it never waits

    def _start_audio(self, loop: asyncio.AbstractEventLoop, source: AudioSource, encoder: AudioEncoder) -> None:
        log.info("audio: %s", self.config.audio.describe(source.rate, encoder.codec.name))
        source.start(lambda chunk: self._on_audio_chunk(loop, encoder, chunk))

    def _on_audio_chunk(self, loop: asyncio.AbstractEventLoop, encoder: AudioEncoder, chunk: AudioChunk) -> None:
        """Audio thread: encode the chunk there, send it from the loop."""
        self.stats.audio_chunks += 1
        self.destinations.push_pcm(chunk)
        try:
            packets = encoder.encode(chunk)
        except Exception:
            self.stats.audio_encode_errors += 1
            log.exception("audio encode failed")
            return
        if packets:
            self.destinations.push_audio(packets)
            with contextlib.suppress(RuntimeError):  # the loop closed while stopping
                loop.call_soon_threadsafe(self._fan_out_audio, packets)

    def _fan_out_audio(self, packets: list[EncodedAudio]) -> None:
        """Encoded audio to every viewer that wants it: the sessions send it at once, past the pacer."""
        to_browsers: list[HostOutput | WebOutput] = []
        backlog = self.web.backlog() if self.web is not None else None  # once a batch: it is read per browser
        for packet in packets:
            self.stats.audio_packets += 1
            self.stats.audio_bytes += len(packet.data)
            media = MediaPacket(packet.data, packet.pts_us, StreamType.AUDIO)
            to_browsers += self.sessions.send_audio(media, self._clock.now(), backlog)
        self.network.perform(to_browsers)

    # -- reporting ---------------------------------------------------------------------------

    async def _status_loop(self, interval_s: float) -> None:
        line = StatusLine(at_s=self._clock.now())
        while True:
            await asyncio.sleep(interval_s)
            text = line.text(
                self._clock.now(),
                self.stats,
                viewers=len(self.sessions.connections),
                forced=self.keyframes.forced,
                skipped=self.schedule.skipped,
            )
            capture = self.capture.status() if self.capture is not None else ""
            log.info("%s", text + phase_status(self.clock) + capture + self.destinations.status())

    async def _stats_loop(self, path: Path, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            write_stats(path, self.summary())

    def summary(self) -> dict[str, Any]:
        """Every part's statistics, as ``--stats-json`` writes them."""
        st = self.stats
        elapsed = self._clock.now() - self._started_s
        pad = self.pad_output.summary() if self.pad_output is not None else {"pad": None}
        return {
            **st.counters(),
            **self.sessions.media_counters,
            "frames_skipped": self.schedule.skipped,
            **st.medians(),
            "elapsed_s": elapsed,
            "cpu_s": time.process_time() - self._cpu_start + self.network.handshake_cpu_s(),  # its worker's too
            "cpu_by_thread_s": self._thread_cpu.read(),  # MainThread: the event loop; native: the codec's
            "encoded_mbits": st.bytes_encoded * 8 / max(elapsed, 1e-6) / 1e6,
            **self.keyframes.summary(),
            **self.sessions.summary(),
            **self.clock.summary(),
            "audio_capture_overflows": getattr(self._audio_source, "overflows", 0),  # device capture only
            "gamepad": {
                **pad,
                **self.sessions.gamepad.summary(),
                "pads": self.sessions.pads.summary(self._clock.now()),
                "rumbles_sent": self.sessions.players.rumbles_sent,
                "per_pad": {str(n): o.summary() for n, o in self.pad_outputs.items()},
            },
            "keyboard_mouse": {
                **(self.input_output.summary() if self.input_output is not None else {}),
                **self.sessions.input.summary(),
            },
            "capture": self.capture.summary() if self.capture is not None else None,
            "outputs": self.destinations.summary(),
            "web": self.web.summary() if self.web is not None else None,
            "rate": {
                **self.sessions.rate_summary(),
                "started_monotonic_s": self._started_s,
                "bitrate_trace": self.bitrate_trace,
            },
        }
