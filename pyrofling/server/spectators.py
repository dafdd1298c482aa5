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
import json
import logging
import secrets
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from pyrofling.clocks import SYSTEM_CLOCK, Clock
from pyrofling.core.host.keyframes import KeyframePolicy
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
#: Seconds a request to Janus may take before the core hears that it failed.
REQUEST_TIMEOUT_S = 5.0
#: The streaming plugin's answers that asking again will not change (a missing or invalid element, cannot create
#: the mountpoint, e.g. its id in use, unauthorized: a wrong admin key or secret).
REFUSALS = frozenset({453, 454, 456, 457})
_NTP_EPOCH_S = 2_208_988_800  # 1900 → 1970


@dataclass(frozen=True, slots=True)
class SpectatorsOptions:
    """What ``--spectators`` and its options say."""

    url: str  # Janus's HTTP API, e.g. http://127.0.0.1:8088/janus
    admin_key: str | None = None  # the streaming plugin's admin_key, where Janus has one
    mountpoint_id: int | None = None  # None: one of the host's own choosing
    secret: str | None = None  # the mountpoint's secret (None: a new one each run)


class JanusError(Exception):
    def __init__(self, reason: str, *, refused: bool = False) -> None:
        super().__init__(reason)
        self.refused = refused


@dataclass(slots=True)
class Mountpoint:
    session: int
    handle: int
    id: int
    video_port: int
    audio_port: int | None
    rtcp_port: int | None


class JanusApi:
    """Janus's HTTP API, blocking (the publisher calls it from worker threads)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def _post(self, path: str, body: dict[str, Any], timeout_s: float = REQUEST_TIMEOUT_S) -> dict[str, Any]:
        data = json.dumps({**body, "transaction": secrets.token_hex(8)}).encode()
        request = urllib.request.Request(self.url + path, data, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as answer:
                reply: dict[str, Any] = json.loads(answer.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise JanusError(str(getattr(exc, "reason", exc))) from None
        if reply.get("janus") == "error":
            error = reply.get("error", {})
            raise JanusError(f"Janus error {error.get('code')}: {error.get('reason')}")
        return reply

    def _plugin(
        self, session: int, handle: int, body: dict[str, Any], timeout_s: float = REQUEST_TIMEOUT_S
    ) -> dict[str, Any]:
        data: dict[str, Any] = self._post(f"/{session}/{handle}", {"janus": "message", "body": body}, timeout_s)
        result = data.get("plugindata", {}).get("data", {})
        if "error_code" in result:
            code = int(result["error_code"])
            raise JanusError(str(result.get("error") or f"error {code}"), refused=code in REFUSALS)
        return dict(result)

    def create(
        self, options: SpectatorsOptions, secret: str, media: list[dict[str, Any]], mountpoint_id: int | None
    ) -> Mountpoint:
        """A new session and the mountpoint (``mountpoint_id``: this one, so that the spectators' link still
        holds; one of ours left there by a session Janus dropped is taken back with its secret first)."""
        session = int(self._post("", {"janus": "create"})["data"]["id"])
        handle = int(self._post(f"/{session}", {"janus": "attach", "plugin": "janus.plugin.streaming"})["data"]["id"])
        body: dict[str, Any] = {"request": "create", "type": "rtp", "secret": secret, "is_private": True,
                                "description": "pyrofling", "media": media}  # fmt: skip
        if options.admin_key is not None:
            body["admin_key"] = options.admin_key
        if mountpoint_id is not None:
            body["id"] = mountpoint_id
        try:
            stream = self._plugin(session, handle, body)["stream"]
        except JanusError as exc:
            if mountpoint_id is None or "already exists" not in str(exc):
                raise
            self._plugin(session, handle, {"request": "destroy", "id": mountpoint_id, "secret": secret})
            stream = self._plugin(session, handle, body)["stream"]
        ports = {p["type"]: p for p in stream.get("ports", [])}
        video = ports["video"]
        audio = ports.get("audio")
        return Mountpoint(session, handle, int(stream["id"]), int(video["port"]),
                          int(audio["port"]) if audio else None, video.get("rtcp_port"))  # fmt: skip

    def keepalive(self, session: int) -> None:
        self._post(f"/{session}", {"janus": "keepalive"})

    def destroy(self, mountpoint: Mountpoint, secret: str, timeout_s: float = 2.0) -> None:
        """Remove the mountpoint and end the session; a Janus that does not answer is left as it is."""
        body = {"request": "destroy", "id": mountpoint.id, "secret": secret}
        with contextlib.suppress(JanusError):
            self._plugin(mountpoint.session, mountpoint.handle, body, timeout_s)
            self._post(f"/{mountpoint.session}", {"janus": "destroy"}, timeout_s)


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
        self._keyframes, self._opus, self._clock = keyframes, opus, clock
        self._api = JanusApi(options.url)
        self._address = urllib.parse.urlsplit(options.url).hostname or "127.0.0.1"
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer = DeadlineTimer(self._on_timer, clock)
        self._tasks: set[asyncio.Task[None]] = set()
        self._profile: str | None = None
        self.mountpoint: Mountpoint | None = None
        self._to: tuple[int, int | None] | None = None  # video, audio ports while publishing
        self._ssrc = (secrets.randbits(32), secrets.randbits(32))
        self._seq = [secrets.randbits(16), secrets.randbits(16)]
        self._video_ts = 0  # the last video packet's RTP time, for the sender reports
        self._keepalive_pending = False
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
            self._api.destroy(self.mountpoint, self.secret)
        self._to = None
        if self._sock is not None:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None

    def summary(self) -> dict[str, Any]:
        return {**self.core.summary(), **self.stats, "mountpoint": self.mountpoint.id if self.mountpoint else None}

    # -- the core's outputs and inputs ------------------------------------------------------------

    def _perform(self, outputs: list[SpectatorsOutput]) -> None:
        for out in outputs:
            if isinstance(out, CreateMountpoint):
                self._spawn(self._create())
            elif isinstance(out, Publish):
                self._to = (out.video_port, out.audio_port)
            elif isinstance(out, StopPublishing):
                self._to = None
            elif isinstance(out, SendReport):
                self._report()
            elif isinstance(out, ForceKeyFrame):
                self._keyframes.viewer_joined()
            elif isinstance(out, KeepAlive) and self.mountpoint is not None and not self._keepalive_pending:
                self._keepalive_pending = True  # one at a time: a slow Janus gets no pile of them
                self._spawn(self._keepalive(self.mountpoint.session))
            elif isinstance(out, Say):
                (log.warning if out.warning else log.info)("%s", out.text)
        self._timer.arm(self.core.next_timer())

    async def _create(self) -> None:
        media: list[dict[str, Any]] = [{"type": "video", "mid": "v", "port": 0, "rtcpport": 0, "pt": VIDEO_PT,
                                        "codec": "h264",
                                        "fmtp": f"profile-level-id={self._profile};packetization-mode=1"}]  # fmt: skip
        if self._opus:
            media.append({"type": "audio", "mid": "a", "port": 0, "pt": AUDIO_PT, "codec": "opus"})
        try:
            wanted = self.mountpoint.id if self.mountpoint is not None else self.options.mountpoint_id
            mountpoint = await asyncio.to_thread(self._api.create, self.options, self.secret, media, wanted)
        except JanusError as exc:
            self._perform(self.core.failed(self._clock.now(), str(exc), refused=exc.refused))
            return
        if self.core.phase is Phase.STOPPED:  # the host stopped while Janus was answering: take it back
            self._spawn(asyncio.to_thread(self._api.destroy, mountpoint, self.secret))
            return
        self.mountpoint = mountpoint
        log.info("spectators: mountpoint %d on %s (its secret: %s); they watch at spectate.html#janus=%s&id=%d "
                 "(pyrofling/web/spectate.html, served beside Janus)", mountpoint.id, self.options.url, self.secret,
                 self.options.url, mountpoint.id)  # fmt: skip
        self._perform(self.core.created(self._clock.now(), mountpoint.video_port, mountpoint.audio_port))

    async def _keepalive(self, session: int) -> None:
        try:
            await asyncio.to_thread(self._api.keepalive, session)
        except JanusError as exc:
            if self.mountpoint is not None and self.mountpoint.session == session:
                self._perform(self.core.failed(self._clock.now(), str(exc)))
        finally:
            self._keepalive_pending = False

    def _on_timer(self) -> None:
        self._perform(self.core.timer(self._clock.now()))

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
