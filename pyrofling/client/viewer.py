"""``pyrofling view`` and ``pyrofling gamepad``: the asyncio shell around the viewer's connection.

It moves bytes.  Each connection is a pure
:class:`~pyrofling.core.viewer.connection.ViewerConnection` behind its sockets
(:class:`~pyrofling.client.connection.ConnectionIO`); what it decides goes where
it belongs: video packets to the decode thread
(:class:`~pyrofling.client.video.VideoPipeline`), audio to the
:class:`~pyrofling.client.audio.AudioPlayer`, the pad's link to the host.  The
presenter shows one picture per display refresh and its phase error goes back as
PHASE_OFFSET.  When a connection ends,
:class:`~pyrofling.core.viewer.connection.Reconnect` says whether to try again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from pyrofling.client.audio import AudioPlayer
from pyrofling.client.config import ViewerConfig, display_mode
from pyrofling.client.connection import ConnectionIO
from pyrofling.client.gamepad import GamepadLink
from pyrofling.client.keyboard_mouse import InputLink
from pyrofling.client.presenter import Display, HeadlessDisplay, Presenter
from pyrofling.client.video import VideoPipeline
from pyrofling.client.viewer_stats import codec_name, viewer_summary
from pyrofling.core.samples import recent_samples, tail
from pyrofling.core.viewer.connection import (
    AudioLost,
    CodecChanged,
    DecodeVideo,
    DecodeVideoPart,
    Paired,
    PlayAudio,
    PlayRumble,
    Reconnect,
    SessionFailed,
    Streaming,
    ViewerConnection,
    ViewerOutput,
)
from pyrofling.core.viewer.rate_feedback import NarrowLinkWarning
from pyrofling.core.viewer.timeline import Snapshot, Timeline
from pyrofling.files import write_stats
from pyrofling.pairing import PairingStoreError, ViewerPairings
from pyrofling.runtime import THREAD_PRIORITIES, ThreadCpu
from pyrofling.wire import CodecParameters, ExtensionFeature, KickFlags, StreamRate, VideoCodec

log = logging.getLogger(__name__)


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
            on_picture_rate=self._picture_rate_from_presenter if config.picture_rate == "auto" else None,
            judge_refreshes=config.check_scene,
            frame_trace=config.frame_trace.open("w") if config.frame_trace is not None else None,
        )
        self._run_presenter = display is None if run_presenter is None else run_presenter
        self.presenter_stop = threading.Event()
        self.video = VideoPipeline(
            self.presenter,
            self.display,
            on_decode_error=self._decode_error_from_decoder,
            conceal_after_s=config.conceal_after_s,
            decode_threads=config.decode_threads,
            max_queue=config.max_decode_queue,
            marker_log=config.marker_log,
            check_scene=config.check_scene,
            early_decode=config.decodes_early,
        )
        #: The connection in progress (None between connections).
        self.connection: ViewerConnection | None = None
        #: The display the window said last (None: the configured one, if any).
        self._display: tuple[int, int, int] | None = None
        self.codec_parameters: CodecParameters | None = None
        #: Times the host changed the codec while this viewer watched (``host --codec auto``).
        self.codec_changes = 0
        self.reconnect = Reconnect(enabled=config.reconnect)
        self.connects = 0
        self.sessions_streaming = 0
        self.reconnects = 0
        self.handshake_ms: deque[float] = recent_samples()
        self.rtt_ms: float | None = None
        #: Why the last connection ended, when the viewer stopped because of it (None: stopped on request).
        self.failure: str | None = None
        #: What the viewer is doing, in words (the window shows it until a picture arrives).
        self.state = f"connecting to {config.host} port {config.port}…"
        #: Why authentication failed (a wrong password...): the viewer stops instead of reconnecting.
        self.auth_failure: str | None = None
        self._retry_after_s = 0.0
        self._busy = False  # the host made no challenge for now: try again even before a first stream
        #: Whether the stream is sealed, and how the viewer authenticated ("code", "paired"; "" when open).
        self.sealed = False
        self.auth_method = ""
        #: This viewer paired with the host in this run.
        self.paired = False
        #: The pad the host gave this player, and how many it has (PADS, protocol.md §7.12).
        self.pad_assigned: tuple[int, int] | None = None
        #: Counters and discards of the connections that ended (the live one adds its own).
        self.ended_totals: Counter[str] = Counter()
        #: The host's last word on the bitrate (STREAM_RATE) on a connection that has ended.
        self.stream_rate: StreamRate | None = None
        #: A row a second of what arrived and what was seen (statistics' ``timeline``).
        self.timeline = Timeline()
        self.ended_discarded: Counter[str] = Counter()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._perform: Callable[[list[ViewerOutput]], None] | None = None
        self.cpu_start, self.thread_cpu = time.process_time(), ThreadCpu()  # the viewer's CPU, and by thread
        self.started_s = time.monotonic()
        self.audio: AudioPlayer | None = None
        if config.audio is not None and config.flags & KickFlags.AUDIO:
            self.audio = AudioPlayer(config.audio)
        self.gamepad: GamepadLink | None = None
        if config.gamepad is not None and config.flags & KickFlags.GAMEPAD:
            self.gamepad = GamepadLink(config.gamepad)
        #: Keys and the mouse for a host that offers them (protocol.md §7.11).
        self.keyboard_mouse: InputLink | None = None
        if config.keyboard_mouse is not None and config.flags & KickFlags.KEYBOARD_MOUSE:
            self.keyboard_mouse = InputLink(config.keyboard_mouse)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed between the check and the call
                self._loop.call_soon_threadsafe(self._stop.set)

    @property
    def streamed(self) -> bool:
        """Whether any connection got as far as streaming."""
        return self.sessions_streaming > 0

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        """Stream until stopped (or the duration ends, or the host is gone for good); the statistics."""
        loop = self._loop = asyncio.get_running_loop()
        THREAD_PRIORITIES.apply("event loop")
        self._stop = asyncio.Event()
        video = bool(self.config.flags & KickFlags.VIDEO)  # a gamepad-only client decodes nothing
        if video:
            self.video.start()
        presenter = None
        if self._run_presenter and video:
            presenter = threading.Thread(
                target=self.presenter.run, args=(self.presenter_stop,), name="pyrofling-present", daemon=True
            )
            presenter.start()
        stopper = loop.call_later(self.config.duration_s, self._stop.set) if self.config.duration_s else None
        timeline_task = asyncio.create_task(self._sample_timeline())
        writer_task = None
        if self.config.stats_json is not None and self.config.stats_interval_s > 0:
            writer_task = asyncio.create_task(self._write_stats_periodically(self.config.stats_json))
        try:
            while not self._stop.is_set():
                streamed, reason = await self._one_connection()
                if self._stop.is_set():
                    break
                delay = self.reconnect.after(
                    streamed=streamed,
                    auth_failed=self.auth_failure is not None,
                    retry_after_s=self._retry_after_s,
                    busy=self._busy,
                )
                self.auth_failure, self._retry_after_s, self._busy = None, 0.0, False
                if delay is None:
                    self.failure = self.state = reason
                    break
                self.state = f"{reason}; connecting again…"
                if streamed:
                    log.warning("lost the stream: %s; connecting again", reason)
                elif self.reconnect.refusals > 1:
                    log.warning(
                        "refused %d times in a row (%s): trying again in %.0f s; if the host did not change its "
                        "code, something at its address is not your host",
                        self.reconnect.refusals,
                        reason,
                        delay,
                    )
                else:
                    log.info("%s; trying again in %.2f s", reason, delay)
                self.reconnects += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), delay)
        finally:
            self.thread_cpu.read()  # while the threads still run: what each used is kept once it ends
            if stopper is not None:
                stopper.cancel()
            if writer_task is not None:
                writer_task.cancel()
            timeline_task.cancel()
            self.presenter_stop.set()
            if self.audio is not None:
                await loop.run_in_executor(None, self.audio.close)
            if self.gamepad is not None:
                self.gamepad.close()
            if self.keyboard_mouse is not None:
                self.keyboard_mouse.close()
            await loop.run_in_executor(None, self.video.close)
            if presenter is not None:
                await loop.run_in_executor(None, presenter.join, 5.0)
            self.presenter.close_trace()
        summary = self.summary()
        if self.config.stats_json is not None:
            write_stats(self.config.stats_json, summary)
        return summary

    async def _sample_timeline(self) -> None:
        """A row a second for the statistics' ``timeline`` (benches line it up with the network's changes); and a
        warning when this viewer's link is narrower than the stream another viewer's link set."""
        seen = 0
        narrow = NarrowLinkWarning()
        last: tuple[float, int] | None = None  # (when, video bytes received by then)
        while True:
            with self.video.lock:
                st = self.video.stats
                new = st.latency_count - seen
                seen = st.latency_count
                latencies = tail(st.latency_ms, new) if new > 0 else []
                shown = st.frames_shown
            with self.presenter.stats.lock:
                quality = self.presenter.quality
                judged = (quality.refreshes - quality.blank, quality.good) if quality is not None else (0, 0)
            conn = self.connection
            rate = conn.session.stream_rate if conn is not None else None
            totals = self.ended_totals + conn.counters() if conn is not None else self.ended_totals
            received, video = totals["bytes_received"], totals["bytes_received_video"]
            snap = Snapshot(
                time.monotonic(), received, judged[0], judged[1], shown, rate.bitrate_kbits if rate else None
            )
            self.timeline.sample(snap, latencies)
            video_kbits = (video - last[1]) * 8 / 1000 / (snap.t - last[0]) if last and snap.t > last[0] else 0.0
            last = (snap.t, video)
            if (warning := narrow.update(rate, video_kbits, snap.t)) is not None:
                log.warning("%s", warning)
            await asyncio.sleep(1.0)

    async def _write_stats_periodically(self, path: Path) -> None:
        while True:
            await asyncio.sleep(self.config.stats_interval_s)
            # Live updates leave out what grows with the run (and compact JSON): serializing 20 000 samples took
            # 10-20 ms of this loop every second, datagrams waiting, and pictures missed their refresh.
            live = self.summary(live=True)
            if self.audio is not None:
                live["audio_live"] = self.audio.live()
            write_stats(path, live, indent=None)

    async def _one_connection(self) -> tuple[bool, str]:
        """One connection from TCP connect to its end: (whether it streamed, why it ended)."""
        assert self._stop is not None
        cfg = self.config
        connect_s = time.monotonic()
        self.connects += 1
        number = self.connects
        session = cfg.session_config()  # with what the window and the presenter said last, across reconnects
        rate = self.presenter.half_rate.asked_mhz
        session = replace(session, display=self._display or session.display, picture_rate_mhz=rate)
        parts, large = cfg.early_part_bytes, cfg.early_decode_bytes  # early decoding: parts of large packets
        conn = ViewerConnection(session, reassembler=cfg.reassembler, early_part_bytes=parts, early_packet_bytes=large)
        streamed = False

        def deliver(out: ViewerOutput) -> None:
            """What the connection decided beyond the sockets: decode, play, start, fail."""
            nonlocal streamed
            if isinstance(out, DecodeVideoPart):
                self.video.offer_part(out)
            elif isinstance(out, DecodeVideo):
                if not self.video.offer(out, conn.host_clock, number, connect_s):
                    io.perform(conn.decode_queue_full(time.monotonic()))
            elif isinstance(out, PlayAudio):
                if self.audio is not None:
                    self.audio.packet(out.data, out.pts_us, conn.host_clock)
            elif isinstance(out, AudioLost):
                if self.audio is not None:
                    self.audio.lost(out.count)
            elif isinstance(out, Streaming):
                streamed = True
                self._streaming(out, io.peer, lambda message: io.perform([conn.gamepad_state(message)]))
                if self.keyboard_mouse is not None and out.extensions & ExtensionFeature.KEYBOARD_MOUSE:
                    self.keyboard_mouse.start(asyncio.get_running_loop())
                    self.keyboard_mouse.attach(lambda message: io.perform(conn.input_state(message)))
            elif isinstance(out, SessionFailed) and conn.session.auth_failed:
                self.auth_failure, self._retry_after_s, self._busy = out.reason, out.retry_after_s, out.busy
            elif isinstance(out, Paired):
                self._store_pairing(out)
            elif isinstance(out, CodecChanged):
                self.codec_changes += 1
                self.codec_parameters = conn.session.codec_parameters
                log.info("the host streams %s from its next key frame on (was %s)",
                         codec_name(out.after), codec_name(out.before))  # fmt: skip
            elif isinstance(out, PlayRumble) and self.gamepad is not None:
                r = out.rumble
                self.gamepad.rumble(r.strong, r.weak, r.duration_ms, r.seq)

        io = ConnectionIO(conn, deliver)
        failure = await io.open(cfg.host, cfg.port, cfg.connect_timeout_s)
        if failure is not None:
            return False, failure
        self.connection, self._perform = conn, io.perform
        io.perform(conn.start(time.monotonic()))
        try:
            reason = await io.ended(self._stop)
        finally:
            if self.gamepad is not None:
                self.gamepad.detach()
            if self.keyboard_mouse is not None:
                self.keyboard_mouse.detach()
            self._bank(conn)
        self._busy = self._busy or conn.session.turned_away
        return streamed, reason

    def _streaming(self, out: Streaming, peer: Any, send_gamepad: Callable[[bytes], None]) -> None:
        p = self.codec_parameters = out.codec_parameters
        self.sessions_streaming += 1
        self.state = "waiting for the first picture…"
        self.handshake_ms.append(out.handshake_s * 1000)
        if self.audio is not None and p.audio_codec and p.channels and p.rate:
            self.audio.configure(p.audio_codec, p.rate, p.channels)
        if self.gamepad is not None:
            if self.sessions_streaming == 1:  # look for a pad once there is a host to send it to
                self.gamepad.start(asyncio.get_running_loop())
            self.gamepad.attach(send_gamepad)
        session = self.connection.session if self.connection is not None else None
        self.sealed = session is not None and session.encrypted
        self.auth_method = session.auth_method if session is not None and self.sealed else ""
        how = f"handshake {out.handshake_s * 1000:.1f} ms" + (", pyrofling host" if out.extensions else "")
        how += f"; {self.security}"
        if not self.config.flags & KickFlags.VIDEO:  # a controller: no picture to speak of
            log.info("sending the gamepad to %s (%s)", _fmt(peer), how)
            return
        rate = p.frame_rate_num / max(1, p.frame_rate_den)
        with contextlib.suppress(ValueError):  # a codec unknown here: its first packet says so
            self.video.expect(VideoCodec(p.video_codec), p.width, p.height)
        log.info(
            "streaming %dx%d@%g %s from %s (%s)", p.width, p.height, rate, codec_name(p.video_codec), _fmt(peer), how
        )
        said = self.config.video_codecs
        if said is not None and p.video_codec not in said:  # a viewer that cannot follow a change holds the codec
            log.warning("the host streams %s, which this viewer said it does not decode (another viewer holds it)",
                        codec_name(p.video_codec))  # fmt: skip

    @property
    def security(self) -> str:
        """What protects the stream, in words (the log, the HUD, the statistics)."""
        if not self.sealed:
            return "not sealed: anyone on the path can watch it and move the pad"
        how = {"paired": "a stored pairing", "code": "the code"}.get(self.auth_method, self.auth_method)
        return f"sealed, authenticated with {how}"

    def _store_pairing(self, out: Paired) -> None:
        if self.config.pairing_dir is None:
            log.warning("paired with the host, but this viewer keeps no pairings (no pairing directory)")
            return
        try:
            ViewerPairings(self.config.pairing_dir).add(out.credential, self.config.address)
        except (PairingStoreError, OSError) as exc:
            log.error("paired with the host, but could not keep the pairing: %s", exc)
            return
        self.paired = True
        log.info("paired with %s: from now on it admits this viewer without a code", self.config.address)

    def _bank(self, conn: ViewerConnection) -> None:
        """The connection ended: keep its counters (summary() adds the live one's to these)."""
        self.ended_totals += conn.counters()
        self.ended_discarded += conn.discarded()
        if conn.streaming:
            self.video.stream_ended(time.monotonic())
        if conn.clock.last_rtt_s is not None:
            self.rtt_ms = conn.clock.last_rtt_s * 1000
        if conn.session.pad_assigned is not None:
            self.pad_assigned = conn.session.pad_assigned
        if conn.session.stream_rate is not None:
            self.stream_rate = conn.session.stream_rate
        self.connection = self._perform = None

    # -- from the presenter and decode threads -------------------------------------------------

    def _stream_hz(self) -> float | None:
        conn = self.connection  # its CODEC_PARAMETERS are the newest: the host may change the rate (§7.16)
        p = conn.session.codec_parameters if conn is not None else self.codec_parameters
        return p.frame_rate_num / max(1, p.frame_rate_den) if p is not None and p.frame_rate_num else None

    def _on_loop(self, call: Callable[[], None]) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed between the check and the call
                loop.call_soon_threadsafe(call)

    def _phase_error_from_presenter(self, offset_us: int) -> None:
        self._on_loop(lambda: self._to_connection(lambda conn: conn.phase_offset(offset_us)))

    def _picture_rate_from_presenter(self, rate_mhz: int) -> None:
        self._on_loop(lambda: self._to_connection(lambda conn: conn.picture_rate_changed(rate_mhz)))

    def display_changed(self, width: int, height: int, refresh_hz: float) -> None:
        """The display (or the window) the picture is shown on is now this size (any thread): a host that makes its
        own desktop makes it this size too (protocol.md §7.14)."""
        mode = display_mode(width, height, refresh_hz)

        def tell() -> None:
            self._display = mode
            self._to_connection(lambda conn: conn.display_changed(*mode))

        self._on_loop(tell)

    def _decode_error_from_decoder(self) -> None:
        self._on_loop(lambda: self._to_connection(lambda conn: conn.decode_failed(time.monotonic())))

    def _to_connection(self, call: Callable[[ViewerConnection], list[ViewerOutput]]) -> None:
        """On the loop: tell the connection in progress (if it has not ended since) and perform its answer."""
        if self.connection is not None and self._perform is not None:
            self._perform(call(self.connection))

    # -- reporting ---------------------------------------------------------------------------

    def summary(self, *, live: bool = False) -> dict[str, Any]:
        """Counters and distributions (:func:`~pyrofling.client.viewer_stats.viewer_summary`)."""
        return viewer_summary(self, live=live)


def _fmt(addr: Any) -> str:
    if not addr:
        return "?"
    return f"[{addr[0]}]:{addr[1]}" if ":" in str(addr[0]) else f"{addr[0]}:{addr[1]}"
