"""``host --spectators URL``: the host's one encode and its Opus sound published as RTP into a Janus mountpoint.

The decisions are :class:`~pyrofling.core.host.spectators.SpectatorsCore`'s; this shell moves bytes. It speaks
Janus's HTTP API (a session, the streaming plugin, ``create``/``destroy`` of an RTP mountpoint with a secret,
keepalives), each request on a worker thread so that the event loop never waits on Janus; sends the RTP
(:mod:`pyrofling.wire.rtp`) from one UDP socket, where Janus's key-frame requests come back. Nothing here is on
the players' path: a packet for the spectators is sent after the players' and never waits, and Janus going away
costs the players nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
import time
import urllib.parse
from collections.abc import Sequence
from typing import Any

from pyrofling.clocks import SYSTEM_CLOCK, Clock
from pyrofling.core.host.keyframes import KeyframePolicy
from pyrofling.core.host.spectator_edges import CreateEdge, DropEdge, EdgesCore, EdgesOutput
from pyrofling.core.host.spectators import (
    CreateMountpoint,
    ForceKeyFrame,
    KeepAlive,
    Phase,
    Publish,
    RemoveMountpoint,
    Say,
    SendReport,
    SpectatorsConfig,
    SpectatorsCore,
    SpectatorsOutput,
    StopPublishing,
)
from pyrofling.server.audio import EncodedAudio
from pyrofling.server.encoder import EncodedVideo
from pyrofling.server.janus_api import (
    REMOTE_AUDIO_SSRC,
    REMOTE_VIDEO_SSRC,
    JanusApi,
    JanusError,
    Published,
    SpectatorsOptions,
    add_edge,
    drop_edge,
    publish,
    unpublish,
)
from pyrofling.timers import DeadlineTimer
from pyrofling.wire.errors import ProtocolError
from pyrofling.wire.rtp import (
    VIDEO_CLOCK_HZ,
    h264_payloads,
    h264_profile_level_id,
    keyframe_requests,
    rtp_packet,
    sender_report,
)

log = logging.getLogger(__name__)

VIDEO_PT, AUDIO_PT = 96, 111
OPUS_CLOCK_HZ = 48_000
_NTP_EPOCH_S = 2_208_988_800  # 1900 → 1970


class Spectators:
    """The host's publisher into Janus: ``start`` on the host's loop, ``video``/``audio`` per packet after the
    players', ``close`` at the end."""

    def __init__(
        self,
        options: SpectatorsOptions,
        keyframes: KeyframePolicy,
        *,
        opus: bool,
        config: SpectatorsConfig | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.options = options
        self.secret = options.secret or secrets.token_urlsafe(16)
        self.core = SpectatorsCore(options.url, config)
        self.edges = EdgesCore(options.edges, config)
        self._keyframes, self._opus, self._clock = keyframes, opus, clock
        self._address = urllib.parse.urlsplit(options.url).hostname or "127.0.0.1"
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer = DeadlineTimer(self._on_timer, clock)
        self._tasks: set[asyncio.Task[None]] = set()
        self._profile: str | None = None
        self.mountpoint: Published | None = None
        self._to: tuple[int, int | None] | None = None  # video, audio ports while publishing
        # A cascade's origin tells its remote publisher's streams apart by these; a mountpoint takes any.
        cascade = bool(options.edges)
        self._ssrc = (REMOTE_VIDEO_SSRC, REMOTE_AUDIO_SSRC) if cascade else (secrets.randbits(32), secrets.randbits(32))
        self._seq = [secrets.randbits(16), secrets.randbits(16)]
        self._video_ts = 0  # the last video packet's RTP time, for the sender reports
        self._keepalive_pending = False
        self._media: list[dict[str, Any]] = []
        self.stats = {"video_packets": 0, "audio_packets": 0, "bytes": 0, "rtcp_bad": 0, "send_errors": 0}

    def start(self) -> None:
        """Open the socket (on the running loop); the mountpoint is created at the first picture that carries its
        parameter sets (the stream's profile goes into the spectators' SDP), which is asked for now."""
        found = socket.getaddrinfo(self._address, None, type=socket.SOCK_DGRAM)  # once, before the stream starts
        self._address = str(found[0][4][0])
        family = socket.AF_INET6 if ":" in self._address else socket.AF_INET
        sock = self._sock = socket.socket(family, socket.SOCK_DGRAM)
        sock.setblocking(False)
        sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", 0))
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(sock.fileno(), self._readable)
        self._keyframes.viewer_joined()

    def video(self, packet: EncodedVideo) -> None:
        if self._profile is None:
            self._profile = h264_profile_level_id(packet.data)
            if self._profile is not None:
                self._perform(self.core.start(self._clock.now()))
        if self._to is None or self._sock is None:
            return
        payloads = h264_payloads(packet.data)
        timestamp = self._video_ts = packet.pts_us * VIDEO_CLOCK_HZ // 1_000_000
        for i, payload in enumerate(payloads):
            self._send(rtp_packet(VIDEO_PT, self._next(0), timestamp, self._ssrc[0], payload,
                                     marker=i == len(payloads) - 1), self._to[0])  # fmt: skip
        self.stats["video_packets"] += len(payloads)

    def audio(self, packets: list[EncodedAudio]) -> None:
        """From the host's audio thread: sent from the event loop, as the video is."""
        if self._loop is not None and self._opus:
            with contextlib.suppress(RuntimeError):  # the loop closed while stopping
                self._loop.call_soon_threadsafe(self._send_audio, packets)

    def _send_audio(self, packets: list[EncodedAudio]) -> None:
        if self._to is None or self._to[1] is None or self._sock is None:
            return
        for p in packets:
            timestamp = p.pts_us * OPUS_CLOCK_HZ // 1_000_000
            self._send(rtp_packet(AUDIO_PT, self._next(1), timestamp, self._ssrc[1], p.data, marker=False),
                       self._to[1])  # fmt: skip
            self.stats["audio_packets"] += 1

    def close(self) -> None:
        """Stop publishing and remove the mountpoint (a request of at most a few seconds: the host is stopping)."""
        outputs = self.core.stop(self._clock.now())
        self._timer.cancel()
        for task in self._tasks:
            task.cancel()
        if any(isinstance(o, RemoveMountpoint) for o in outputs) and self.mountpoint is not None:
            unpublish(self.mountpoint, self.secret)
        self._to = None
        if self._sock is not None:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None

    def summary(self) -> dict[str, Any]:
        edges = {"edges": self.edges.summary()} if self.options.edges else {}
        return {**self.core.summary(), **self.stats, "mountpoint": self.mountpoint.id if self.mountpoint else None,
                **edges}  # fmt: skip

    # -- the core's outputs and inputs ------------------------------------------------------------

    def _perform(self, outputs: Sequence[SpectatorsOutput | EdgesOutput]) -> None:
        for out in outputs:
            if isinstance(out, CreateEdge) and self.mountpoint is not None:
                self._spawn(self._add_edge(self.mountpoint, out.edge))
            elif isinstance(out, DropEdge) and self.mountpoint is not None:
                self._spawn(asyncio.to_thread(drop_edge, self.mountpoint, self.options, self.secret, out.edge))
            elif isinstance(out, CreateMountpoint):
                self._spawn(self._create())
            elif isinstance(out, Publish):
                self._to = (out.video_port, out.audio_port)
            elif isinstance(out, StopPublishing):
                self._to = None
                self.edges.origin_down()
            elif isinstance(out, SendReport):
                self._report()
            elif isinstance(out, ForceKeyFrame):
                self._keyframes.viewer_joined()
            elif isinstance(out, KeepAlive) and self.mountpoint is not None and not self._keepalive_pending:
                self._keepalive_pending = True  # one at a time: a slow Janus gets no pile of them
                self._spawn(self._keepalive(self.mountpoint))
            elif isinstance(out, Say):
                (log.warning if out.warning else log.info)("%s", out.text)
        due = [t for t in (self.core.next_timer(), self.edges.next_timer()) if t is not None]
        self._timer.arm(min(due, default=None))

    async def _create(self) -> None:
        media: list[dict[str, Any]] = [{"type": "video", "mid": "v", "port": 0, "rtcpport": 0, "pt": VIDEO_PT,
                                        "codec": "h264",
                                        "fmtp": f"profile-level-id={self._profile};packetization-mode=1"}]  # fmt: skip
        if self._opus:
            media.append({"type": "audio", "mid": "a", "port": 0, "pt": AUDIO_PT, "codec": "opus"})
        try:
            wanted = self.mountpoint.id if self.mountpoint is not None else self.options.mountpoint_id
            self._media = media
            mountpoint = await asyncio.to_thread(publish, self.options, self.secret, media, wanted)
        except JanusError as exc:
            self._perform(self.core.failed(self._clock.now(), str(exc), refused=exc.refused))
            return
        if self.core.phase is Phase.STOPPED:  # the host stopped while Janus was answering: take it back
            self._spawn(asyncio.to_thread(unpublish, mountpoint, self.secret))
            return
        self.mountpoint = mountpoint
        where = [self.options.url, *self.options.edges]
        also = ", or with any of those Janus URLs" if self.options.edges else ""
        log.info("spectators: mountpoint %d on %s (its secret: %s); they watch at spectate.html#janus=%s&id=%d "
                 "(pyrofling/web/spectate.html, served beside Janus)%s", mountpoint.id, ", ".join(where), self.secret,
                 where[-1], mountpoint.id, also)  # fmt: skip
        now = self._clock.now()
        self._perform(
            [*self.core.created(now, mountpoint.video_port, mountpoint.audio_port), *self.edges.origin_up(now)]
        )

    async def _add_edge(self, published: Published, edge: str) -> None:
        try:
            await asyncio.to_thread(add_edge, published, self.options, self.secret, self._media, edge)
        except JanusError as exc:
            if self.mountpoint is published:
                self._perform(self.edges.failed(edge, self._clock.now(), str(exc)))
            return
        if self.mountpoint is published:
            self._perform(self.edges.created(edge, self._clock.now()))  # its spectators' joins ask for key frames

    async def _keepalive(self, published: Published) -> None:
        try:
            for url, session in published.origin_sessions:
                await asyncio.to_thread(JanusApi(url).keepalive, session)
            for edge in self.edges.up():  # an edge that does not answer is that edge's outage only
                edge_session = published.edge_session(edge)
                try:
                    if edge_session is not None:
                        await asyncio.to_thread(JanusApi(edge).keepalive, edge_session)
                except JanusError as exc:
                    if self.mountpoint is published:
                        self._perform(self.edges.failed(edge, self._clock.now(), str(exc)))
        except JanusError as exc:
            if self.mountpoint is published:
                self._perform(self.core.failed(self._clock.now(), str(exc)))
        finally:
            self._keepalive_pending = False

    def _on_timer(self) -> None:
        now = self._clock.now()
        self._perform([*self.core.timer(now), *self.edges.timer(now)])

    def _readable(self) -> None:
        assert self._sock is not None
        asked = 0
        for _ in range(64):
            try:
                data = self._sock.recv(1500)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:  # an ICMP error from a send to a Janus that went away
                continue
            try:
                asked += keyframe_requests(data)
            except ProtocolError:
                self.stats["rtcp_bad"] += 1
        if asked:  # however many came in this batch: the core rate-limits
            self._perform(self.core.keyframe_asked(self._clock.now()))

    def _report(self) -> None:
        if self.mountpoint is None or self.mountpoint.rtcp_port is None:
            return
        report = sender_report(self._ssrc[0], time.time() + _NTP_EPOCH_S, self._video_ts, self.stats["video_packets"],
                               self.stats["bytes"])  # fmt: skip
        self._send(report, int(self.mountpoint.rtcp_port), count=False)

    def _next(self, stream: int) -> int:
        self._seq[stream] = (self._seq[stream] + 1) & 0xFFFF
        return self._seq[stream]

    def _send(self, data: bytes, port: int, *, count: bool = True) -> None:
        assert self._sock is not None
        try:
            self._sock.sendto(data, (self._address, port))
        except OSError:  # a full buffer or an unreachable Janus: the spectators lose this one, the players nothing
            self.stats["send_errors"] += 1
            return
        if count:
            self.stats["bytes"] += len(data)

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
