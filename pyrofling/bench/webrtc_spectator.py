"""Headless spectators for ``bench spectators``: WebRTC receivers (aiortc) watching a Janus mountpoint.

Each one does what the spectators' page does (``pyrofling/web/spectate.html``), through Janus's HTTP API: a
session, the streaming plugin, ``watch``; Janus's offer (its candidates in it), an answer with ours, ``start``.
Then every picture aiortc decodes has its frame marker read: when it was decoded (this machine's monotonic clock,
the host's too: one machine) and its capture time. No window: what a spectator would show at each refresh is
judged from that log (:func:`judge_spectator`), the newest picture decoded by then.

Run as ``python -m pyrofling.bench.webrtc_spectator URL ID COUNT SECONDS OUT.json [sound]``: ``COUNT``
spectators in one process, each joining at once, watching for ``SECONDS`` (and hearing, with ``sound``: aiortc
decodes all it is sent, and ten spectators' Opus doubled a process's CPU); the bench starts one such process per CPU so
that Python's one-core-per-process limit is not what it measures. Needs ``pip install 'pyrofling[spectators]'``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pyrofling.client.codecs import luma
from pyrofling.core import frame_marker
from pyrofling.core.viewer.picture_quality import RefreshQuality
from pyrofling.server.janus_api import JanusApi, JanusError

INSTALL_HINT = "pip install 'pyrofling[spectators]' (aiortc: the headless spectators' WebRTC)"
#: The streaming plugin's error code for a mountpoint it does not have.
NO_SUCH_MOUNTPOINT = 455
#: A spectator's keepalive (also how it notices Janus gone), and its pause before joining again.
KEEPALIVE_S = 1.0
REJOIN_S = 0.5


@dataclass
class SpectatorLog:
    """One spectator's watch: when it asked (monotonic s), each picture decoded as [decoded at, frame id (−1:
    unreadable), capture time (monotonic s, None: unreadable)], and why it failed, if it did."""

    asked_s: float = 0.0
    pictures: list[tuple[float, int, float | None]] = field(default_factory=list)
    error: str | None = None
    #: When Janus's offer came, Janus took the answer, the connection was up (monotonic s; the first join's).
    steps: dict[str, float] = field(default_factory=dict)
    #: When each join's watch request was answered, and when Janus was found gone.
    joins: list[float] = field(default_factory=list)
    lost: list[float] = field(default_factory=list)
    #: A browser's own receiver, as its WebRTC stats say (packets lost after repair, NACKs, PLIs, freezes).
    rtp: dict[str, float] = field(default_factory=dict)


def judge_spectator(log: SpectatorLog, fps: float, *, since_s: float | None = None) -> dict[str, Any]:
    """What a spectator's screen at ``fps`` would have shown, refresh by refresh from its first picture on (the
    newest picture decoded by each refresh), judged as the viewers' refreshes are; and its first picture's time
    after asking, and capture → decoded. ``since_s``: also how long after it the first picture came (a Janus
    back at that time: a picture again)."""
    pictures = sorted(log.pictures)
    if not pictures:
        return {"first_picture_s": None, "pictures": 0, "error": log.error or "no picture"}
    quality = RefreshQuality(period_s=1 / fps)
    period, start, end = 1 / fps, pictures[0][0], pictures[-1][0]
    shown, last_id = 0, None
    for k in range(int((end - start) / period) + 1):
        now = start + k * period
        while shown + 1 < len(pictures) and pictures[shown + 1][0] <= now:
            shown += 1
        _, frame_id, capture_s = pictures[shown]
        quality.refresh(now, capture_s=capture_s, clean=frame_id >= 0, fresh=frame_id != last_id)
        last_id = frame_id
    quality.finish()
    judged = quality.summary()
    latencies = [t - c for t, _, c in pictures if c is not None]
    again = next((t - since_s for t, i, _ in pictures if i >= 0 and t > since_s), None) if since_s else None
    return {
        "first_picture_s": start - log.asked_s,
        "pictures": len(pictures),
        "unreadable": sum(1 for _, i, _ in pictures if i < 0),
        "good_refreshes_pct": judged["good_refreshes_pct"],
        "refreshes": judged["refreshes"],
        "freezes": judged["freezes"],
        "longest_freeze_ms": judged["longest_freeze_ms"],
        "latency_ms_median": 1000 * statistics.median(latencies) if latencies else None,
        "latency_ms_p95": 1000 * sorted(latencies)[int(0.95 * len(latencies))] if latencies else None,
        "error": log.error,
        "joins": len(log.joins),
        "picture_again_s": again,
        "steps_s": {step: round(t - log.asked_s, 3) for step, t in sorted(log.steps.items(), key=lambda s: s[1])},
        "rtp": dict(log.rtp),
    }


class JanusWatch:
    """Watching one mountpoint through Janus's HTTP API (blocking calls: run them in a thread)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.api = JanusApi(url)
        self.session: int | None = None
        self.handle: int | None = None

    def offer(self, mountpoint: int, wait_s: float = 15.0) -> tuple[dict[str, Any], float]:
        """Ask to watch, again while the mountpoint is not there yet (the host makes it at its first key frame);
        Janus's offer, and when the request it answered was sent (monotonic)."""
        self.session, self.handle = session, handle = self.api.attach("streaming")
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            asked_s = time.monotonic()
            watch = {"janus": "message", "body": {"request": "watch", "id": mountpoint}}
            event = self.api.post(f"/{session}/{handle}", watch)
            while "jsep" not in event:
                event = self.api.event(session)
                data = (event.get("plugindata") or {}).get("data", {})
                if data.get("error_code") == NO_SUCH_MOUNTPOINT:
                    break
                if data.get("error"):
                    raise JanusError(str(data["error"]))
            if "jsep" in event:
                jsep: dict[str, Any] = event["jsep"]
                return jsep, asked_s
            time.sleep(0.2)
        raise JanusError(f"no mountpoint {mountpoint} on {self.url} within {wait_s:g} s")

    def start(self, answer_sdp: str) -> None:
        self.api.post(f"/{self.session}/{self.handle}", {"janus": "message", "body": {"request": "start"},
                                                         "jsep": {"type": "answer", "sdp": answer_sdp}})  # fmt: skip

    def keepalive(self) -> None:
        if self.session is not None:
            self.api.keepalive(self.session)

    def leave(self) -> None:
        if self.session is not None:
            self.api.end(self.session)


async def _pictures(track: Any, log: SpectatorLog) -> None:
    from aiortc.mediastreams import MediaStreamError

    layout = None
    try:
        while True:
            frame = await track.recv()
            now = time.monotonic()
            layout = layout or frame_marker.layout_for(frame.width)
            stamp = frame_marker.read(luma(frame), layout) if layout is not None else None
            if stamp is None:
                log.pictures.append((now, -1, None))
                continue
            capture_us = frame_marker.unwrap_capture_us(stamp.capture_us, int(now * 1_000_000))
            log.pictures.append((now, stamp.frame_id, capture_us / 1_000_000))
    except MediaStreamError:
        return  # the connection closed


async def _drain(track: Any) -> None:
    from aiortc.mediastreams import MediaStreamError

    try:
        while True:
            await track.recv()
    except MediaStreamError:
        return


async def _watch_once(url: str, mountpoint: int, end: float, log: SpectatorLog, sound: bool) -> None:
    """One join: until ``end``, or until Janus stops answering (then the exception says why)."""
    from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

    janus = JanusWatch(url)
    # No STUN server: aiortc's default is Google's, which a machine without the internet waits 5 s on (seen on
    # the edge's spectators); Janus and its spectators share a network here.
    peer = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    readers: list[asyncio.Task[None]] = []
    first = not log.joins

    @peer.on("connectionstatechange")
    def _state() -> None:
        if first:
            log.steps.setdefault(peer.connectionState, time.monotonic())

    @peer.on("track")
    def _track(track: Any) -> None:
        readers.append(asyncio.ensure_future(_pictures(track, log) if track.kind == "video" else _drain(track)))

    try:
        offer, asked_s = await asyncio.to_thread(janus.offer, mountpoint, max(1.0, min(15.0, end - time.monotonic())))
        log.joins.append(asked_s)
        if first:
            log.asked_s, log.steps["offer"] = asked_s, time.monotonic()
        await peer.setRemoteDescription(RTCSessionDescription(offer["sdp"], offer["type"]))
        if not sound:  # Janus sends this spectator no sound (aiortc decodes all it gets, a core's share each)
            for transceiver in peer.getTransceivers():
                if transceiver.kind == "audio":
                    transceiver.direction = "inactive"
        await peer.setLocalDescription(await peer.createAnswer())
        await asyncio.to_thread(janus.start, peer.localDescription.sdp)
        if first:
            log.steps["started"] = time.monotonic()
        while time.monotonic() < end:
            await asyncio.sleep(min(KEEPALIVE_S, max(0.0, end - time.monotonic())))
            if time.monotonic() < end:  # also how a Janus gone away is noticed
                await asyncio.to_thread(janus.keepalive)
    finally:
        await peer.close()
        for reader in readers:
            reader.cancel()
        with contextlib.suppress(Exception):  # Janus may be gone: nothing to tell
            await asyncio.to_thread(janus.leave)


async def spectate(
    url: str, mountpoint: int, seconds: float, log: SpectatorLog, *, sound: bool = False, rejoin: bool = False
) -> None:
    """One spectator watching for ``seconds``, its pictures into ``log``; with ``sound``, hearing too; with
    ``rejoin``, joining again (every :data:`REJOIN_S`) when Janus stops answering, as the spectators' page does."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            await _watch_once(url, mountpoint, end, log, sound)
            log.error = None  # watching at the end (a Janus lost meanwhile is in ``lost``)
            return
        except Exception as exc:  # said in the bench's table; the others go on
            log.error = f"{type(exc).__name__}: {exc}"
            if not rejoin:
                return
            log.lost.append(time.monotonic())
            await asyncio.sleep(REJOIN_S)


async def _main(url: str, mountpoint: int, count: int, seconds: float, sound: bool) -> list[SpectatorLog]:
    logs = [SpectatorLog() for _ in range(count)]
    await asyncio.gather(*(spectate(url, mountpoint, seconds, log, sound=sound, rejoin=True) for log in logs))
    return logs


def main(argv: list[str]) -> int:
    try:
        import aiortc  # noqa: F401
    except ImportError:
        print(f"the headless spectators need aiortc: {INSTALL_HINT}", file=sys.stderr)
        return 2
    url, mountpoint, count, seconds, out, *rest = argv
    logs = asyncio.run(_main(url, int(mountpoint), int(count), float(seconds), sound=rest == ["sound"]))
    Path(out).write_text(json.dumps([asdict(log) for log in logs]))
    return 0


def read_logs(path: Path) -> list[SpectatorLog]:
    """What a spectators' process wrote (nothing if it wrote nothing)."""
    if not path.exists():
        return []
    return [SpectatorLog(r["asked_s"], [tuple(p) for p in r["pictures"]], r["error"], r["steps"], r["joins"],
                         r["lost"]) for r in json.loads(path.read_text())]  # fmt: skip


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
