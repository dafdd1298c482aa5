"""Janus's HTTP API as the host's spectators use it: where its RTP goes, made and taken down (blocking calls: the
publisher makes them from worker threads).

One Janus: a session, the streaming plugin, an RTP mountpoint with a secret; the host sends its RTP there.

A cascade (an origin and its edges): Janus's streaming plugin cannot forward a mountpoint, its VideoRoom can. On
the origin the host joins a private room as a *remote publisher* (``add_remote_publisher``: the same plain RTP,
video and sound on one port told apart by their SSRCs, 1000 and 1010), and the origin ``rtp_forward``s that
publisher to an RTP mountpoint of the same id on itself and on every edge, so a spectator watches any of them the
same way. A spectator's key-frame request goes from its mountpoint to the forwarder that feeds it, to the room,
to the host (where the host's sender reports told the room to send them).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

#: Seconds a request to Janus may take before the core hears that it failed.
REQUEST_TIMEOUT_S = 5.0
#: Answers that asking again will not change: the streaming plugin's (a missing or invalid element, cannot create
#: the mountpoint, unauthorized: a wrong admin key or secret) and the VideoRoom's (unauthorized, a bad element).
REFUSALS = frozenset({453, 454, 456, 457, 433, 429, 430})
#: The VideoRoom's SSRCs for a remote publisher's streams: 1000 + 10 × its index (video first, then sound).
REMOTE_VIDEO_SSRC, REMOTE_AUDIO_SSRC = 1000, 1010


@dataclass(frozen=True, slots=True)
class SpectatorsOptions:
    """What ``--spectators`` and its options say."""

    url: str  # Janus's HTTP API, e.g. http://127.0.0.1:8088/janus (a cascade's origin)
    admin_key: str | None = None  # the plugins' admin_key, where Janus has one
    mountpoint_id: int | None = None  # None: one of the host's own choosing
    secret: str | None = None  # the mountpoint's secret (None: a new one each run)
    edges: tuple[str, ...] = ()  # the edges' HTTP APIs, fed by the origin


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


@dataclass(slots=True)
class Published:
    """What the host made on its Janus (or its cascade): where its RTP goes, and what to keep alive and take down."""

    id: int  # the mountpoint the spectators watch (the same id on every Janus)
    video_port: int
    audio_port: int | None
    rtcp_port: int | None
    mountpoints: list[tuple[str, Mountpoint]] = field(default_factory=list)  # (its Janus, it): the origin's first
    room: tuple[int, int, int] | None = None  # on the origin: (session, handle, room id)
    publisher: int = 0  # the host's id in the room
    forwarders: dict[str, list[int]] = field(default_factory=dict)  # each edge's forwarder streams on the origin

    @property
    def origin_sessions(self) -> list[tuple[str, int]]:
        """The origin's sessions: its mountpoint's and its room's."""
        url, m = self.mountpoints[0]
        return [(url, m.session)] + ([(url, self.room[0])] if self.room is not None else [])

    def edge_session(self, edge: str) -> int | None:
        return next((m.session for url, m in self.mountpoints[1:] if url == edge), None)


class JanusApi:
    """One Janus's HTTP API."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.address = urllib.parse.urlsplit(self.url).hostname or "127.0.0.1"

    def post(self, path: str, body: dict[str, Any], timeout_s: float = REQUEST_TIMEOUT_S) -> dict[str, Any]:
        """One request of Janus's API (``path``: "", "/SESSION" or "/SESSION/HANDLE"); its answer."""
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

    def plugin(self, session: int, handle: int, body: dict[str, Any], timeout_s: float = REQUEST_TIMEOUT_S) -> Any:
        data: dict[str, Any] = self.post(f"/{session}/{handle}", {"janus": "message", "body": body}, timeout_s)
        result = data.get("plugindata", {}).get("data", {})
        if "error_code" in result:
            code = int(result["error_code"])
            raise JanusError(str(result.get("error") or f"error {code}"), refused=code in REFUSALS)
        return dict(result)

    def attach(self, plugin: str) -> tuple[int, int]:
        """A new session and a handle on ``plugin`` (``streaming`` or ``videoroom``)."""
        session = int(self.post("", {"janus": "create"})["data"]["id"])
        handle = int(self.post(f"/{session}", {"janus": "attach", "plugin": f"janus.plugin.{plugin}"})["data"]["id"])
        return session, handle

    def mountpoint(
        self, admin_key: str | None, secret: str, media: list[dict[str, Any]], mountpoint_id: int | None
    ) -> Mountpoint:
        """A new session and an RTP mountpoint (``mountpoint_id``: this one, so that the spectators' link still
        holds; one of ours left there by a session Janus dropped is taken back with its secret first)."""
        session, handle = self.attach("streaming")
        body: dict[str, Any] = {"request": "create", "type": "rtp", "secret": secret, "is_private": True,
                                "description": "pyrofling", "media": media}  # fmt: skip
        if admin_key is not None:
            body["admin_key"] = admin_key
        if mountpoint_id is not None:
            body["id"] = mountpoint_id
        try:
            stream = self.plugin(session, handle, body)["stream"]
        except JanusError as exc:
            if mountpoint_id is None or "already exists" not in str(exc):
                raise
            self.plugin(session, handle, {"request": "destroy", "id": mountpoint_id, "secret": secret})
            stream = self.plugin(session, handle, body)["stream"]
        ports = {p["type"]: p for p in stream.get("ports", [])}
        video = ports["video"]
        audio = ports.get("audio")
        return Mountpoint(session, handle, int(stream["id"]), int(video["port"]),
                          int(audio["port"]) if audio else None, video.get("rtcp_port"))  # fmt: skip

    def event(self, session: int, timeout_s: float = 40.0) -> dict[str, Any]:
        """The session's next event (Janus's long poll: a plugin's answer, an offer)."""
        try:
            with urllib.request.urlopen(f"{self.url}/{session}?maxev=1", timeout=timeout_s) as answer:
                event: dict[str, Any] = json.loads(answer.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise JanusError(str(getattr(exc, "reason", exc))) from None
        return event

    def keepalive(self, session: int) -> None:
        self.post(f"/{session}", {"janus": "keepalive"})

    def end(self, session: int, request: dict[str, Any] | None = None, handle: int = 0, timeout_s: float = 2.0) -> None:
        """``request`` on the handle, then the session ended; a Janus that does not answer is left as it is."""
        with contextlib.suppress(JanusError):
            if request is not None:
                self.plugin(session, handle, request, timeout_s)
            self.post(f"/{session}", {"janus": "destroy"}, timeout_s)


def publish(options: SpectatorsOptions, secret: str, media: list[dict[str, Any]], wanted: int | None) -> Published:
    """Make where the host's RTP goes: a mountpoint on ``options.url``; with edges, the origin's room too, and
    the origin's forwarder to its own mountpoint (each edge is :func:`add_edge`'s, one at a time)."""
    origin = JanusApi(options.url)
    m = origin.mountpoint(options.admin_key, secret, media, wanted)
    published = Published(m.id, m.video_port, m.audio_port, m.rtcp_port, [(origin.url, m)])
    if not options.edges:
        return published
    try:
        _room(origin, options, secret, media, published)
        _forward(origin, options, secret, published, origin.url, m)
    except BaseException:
        unpublish(published, secret)
        raise
    return published


def add_edge(published: Published, options: SpectatorsOptions, secret: str, media: list[dict[str, Any]],
             edge: str) -> None:  # fmt: skip
    """A mountpoint of the same id on ``edge``, and the origin's forwarder to it."""
    api = JanusApi(edge)
    m = api.mountpoint(options.admin_key, secret, media, published.id)
    try:
        published.forwarders[edge] = _forward(JanusApi(options.url), options, secret, published, edge, m)
    except BaseException:
        api.end(m.session, {"request": "destroy", "id": m.id, "secret": secret}, m.handle)
        raise
    published.mountpoints.append((edge, m))


def drop_edge(published: Published, options: SpectatorsOptions, secret: str, edge: str) -> None:
    """Stop the origin's forwarders to an edge that went away, and forget its mountpoint."""
    published.mountpoints = [(url, m) for url, m in published.mountpoints if url != edge]
    streams = published.forwarders.pop(edge, [])
    if published.room is None or not streams:
        return
    session, handle, room = published.room
    key = {"admin_key": options.admin_key} if options.admin_key else {}
    with contextlib.suppress(JanusError):
        for stream_id in streams:
            JanusApi(options.url).plugin(session, handle, {"request": "stop_rtp_forward", "room": room,
                                                           "publisher_id": published.publisher, "stream_id": stream_id,
                                                           "secret": secret, **key}, 2.0)  # fmt: skip


def _room(origin: JanusApi, options: SpectatorsOptions, secret: str, media: list[dict[str, Any]],
          published: Published) -> None:  # fmt: skip
    """The origin's private room, the host as its remote publisher."""
    session, handle = origin.attach("videoroom")
    room, key = published.id, {"admin_key": options.admin_key} if options.admin_key else {}
    create = {"request": "create", "room": room, "secret": secret, "is_private": True, "publishers": 1,
              "videocodec": "h264", "audiocodec": "opus", "description": "pyrofling", **key}  # fmt: skip
    try:
        origin.plugin(session, handle, create)
    except JanusError as exc:
        if "already exists" not in str(exc):  # one of ours, left by a session Janus dropped: taken back
            raise
        origin.plugin(session, handle, {"request": "destroy", "room": room, "secret": secret, **key})
        origin.plugin(session, handle, create)
    published.room = (session, handle, room)
    # Janus 1.1 names a remote publisher's streams by their index ("0", "1"), whatever mid they are given.
    streams = [{"type": "video", "mindex": 0, "mid": "0", "codec": "h264"}]
    streams += [{"type": "audio", "mindex": 1, "mid": "1", "codec": "opus"}] if len(media) > 1 else []
    remote = origin.plugin(session, handle, {"request": "add_remote_publisher", "room": room, "secret": secret,
                                             "display": "pyrofling", "streams": streams})  # fmt: skip
    published.publisher = int(remote["id"])
    published.video_port = published.audio_port = int(remote["port"])
    published.rtcp_port = int(remote["rtcp_port"]) if remote.get("rtcp_port") else None


def _forward(origin: JanusApi, options: SpectatorsOptions, secret: str, published: Published, url: str,
             m: Mountpoint) -> list[int]:  # fmt: skip
    """The origin's forwarder of the room's publisher to mountpoint ``m`` on ``url``; its streams' ids."""
    assert published.room is not None
    session, handle, room = published.room
    key = {"admin_key": options.admin_key} if options.admin_key else {}
    forwarded = [{"mid": "0", "port": m.video_port, **({"rtcp_port": m.rtcp_port} if m.rtcp_port else {})}]
    forwarded += [{"mid": "1", "port": m.audio_port}] if m.audio_port is not None else []
    answer = origin.plugin(session, handle, {"request": "rtp_forward", "room": room, "secret": secret, "publisher_id":
                                             published.publisher, "host": JanusApi(url).address, "streams": forwarded,
                                             **key})  # fmt: skip
    return [int(f["stream_id"]) for f in answer.get("forwarders", []) if "stream_id" in f]


def unpublish(published: Published, secret: str, timeout_s: float = 2.0) -> None:
    """Take down what :func:`publish` and :func:`add_edge` made (the room first: no forwarder sends into a
    mountpoint that is gone)."""
    if published.room is not None and published.mountpoints:
        session, handle, room = published.room
        JanusApi(published.mountpoints[0][0]).end(session, {"request": "destroy", "room": room, "secret": secret},
                                                  handle, timeout_s)  # fmt: skip
    for url, m in published.mountpoints:
        JanusApi(url).end(m.session, {"request": "destroy", "id": m.id, "secret": secret}, m.handle, timeout_s)
