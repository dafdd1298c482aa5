"""Which video codec the one encode uses under ``host --codec auto`` (protocol.md §7.15); pure.

A pyrofling viewer that negotiated CODECS says which codecs it decodes (VIEWER_CODECS) before its first KICK.
The host streams the first codec of its preference (AV1, then H.265, then H.264 by default: the fewest bits for
a picture, ``bench codecs``) that every viewer watching decodes and the host can encode. Two kinds of viewer
cannot follow a change of codec: a native PyroFling viewer (it reads the codec from CODEC_PARAMETERS once, at its
KICK) and a pyrofling viewer that did not negotiate CODECS; each takes whatever runs when it joins, and while one
watches the codec stays as it is. A browser on the web door follows a change and decodes what its page said
(its WebCodecs: AV1 and H.264 in Chromium; H.264 where the page said nothing, :data:`BROWSER_CODECS`).

A viewer that cannot decode the running codec changes it at once, before its first picture: its KICK is
answered with the parameters of the codec being switched to, the encoder is opened anew for that codec, and
every viewer that follows changes (CODECS) is sent the new parameters (:meth:`CodecChoice.switched`), the
first picture of the new codec being a key frame. When the viewer that held the stream down leaves, the better
codec comes back only after :data:`HOLD_S` without a change: a viewer that reconnects does not reopen the
encoder twice. A viewer that nothing running can serve (a native viewer holds a codec the newcomer lacks) gets
the running codec and its own viewer says it cannot decode it.

A codec whose encoder cannot keep up on this machine at this size (its median encode time over
:data:`PACE_FRAMES` pictures above :data:`PACE_SHARE` of a frame period: AV1 at 720p60 on 2 cores, 20 ms a frame)
is given up for the rest of the run, for the next codec of the preference that every viewer decodes: a picture a
frame late every frame costs more than the bits the better codec saves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pyrofling.core.host.state import HostOutput
from pyrofling.wire import VIDEO_CODEC_NAMES as CODEC_NAMES
from pyrofling.wire import VideoCodec

#: The preference of ``--codec auto``: the fewest bits for H.264's quality first (``bench codecs``: AV1 64 %, HEVC
#: 78 % at 720p).
DEFAULT_PREFERENCE = (VideoCodec.AV1, VideoCodec.H265, VideoCodec.H264)
#: How long a better codec waits after the last change before it comes back.
HOLD_S = 5.0
#: Pictures whose encode times are judged together, and the share of a frame period their median may take.
PACE_FRAMES = 30
PACE_SHARE = 0.8
#: What a browser on the web door decodes when its page says nothing (every page's WebCodecs plays H.264).
BROWSER_CODECS = frozenset({VideoCodec.H264})


def median_s(encode_s: Sequence[float]) -> float:
    """The pictures' median encode time (the upper one of an even count)."""
    return sorted(encode_s)[len(encode_s) // 2]


def keeps_pace(encode_s: Sequence[float], period_s: float) -> bool:
    """Whether an encoder whose pictures took ``encode_s`` keeps up with a frame every ``period_s``: their median
    within :data:`PACE_SHARE` of it."""
    return not encode_s or median_s(encode_s) <= PACE_SHARE * period_s


@dataclass(frozen=True, slots=True)
class SwitchCodec(HostOutput):
    """Open the encoder anew for ``codec``, then tell the sessions (:meth:`HostSessions.codec_switched`)."""

    codec: VideoCodec
    why: str


@dataclass(slots=True)
class CodecChoice:
    """:meth:`joined` and :meth:`left` as viewers come and go; :meth:`handle_timer` at :meth:`next_timer`;
    :meth:`switched` when the shell has done a :class:`SwitchCodec`."""

    #: The codecs the host would stream, best first (only those it can encode).
    preference: tuple[VideoCodec, ...]
    #: What the encoder makes now.
    running: VideoCodec
    hold_s: float = HOLD_S
    #: Asked of the shell and not done yet.
    switching: VideoCodec | None = None
    #: Each watching viewer's codecs; None: it cannot follow a change (it holds the codec it joined with).
    watchers: dict[int, frozenset[VideoCodec] | None] = field(default_factory=dict)
    switches: int = 0
    #: Codecs given up because their encoder could not keep up (see the module docstring).
    too_slow: set[VideoCodec] = field(default_factory=set)
    _encode_s: list[float] = field(default_factory=list)
    _changed_s: float = float("-inf")
    _due_s: float | None = None

    def __post_init__(self) -> None:
        if not self.preference:
            raise ValueError("no codec to choose from")

    @property
    def target(self) -> VideoCodec:
        """The codec the stream is or will be in: a newcomer is answered with it."""
        return self.switching if self.switching is not None else self.running

    def best(self) -> VideoCodec:
        """The first codec of the preference that every viewer watching decodes; the running one while a viewer
        that cannot follow a change watches, or when none serves them all."""
        sets = list(self.watchers.values())
        if any(s is None for s in sets):
            return self.target
        for codec in self.preference:
            if codec in self.too_slow:
                continue
            if all(codec in s for s in sets if s is not None):
                return codec
        return self.target

    def joined(self, conn_id: int, codecs: frozenset[VideoCodec] | None, now: float) -> list[HostOutput]:
        """A viewer starts watching (its KICK): a switch at once if it cannot decode what runs or is coming."""
        self.watchers[conn_id] = codecs
        if codecs is not None and self.target not in codecs:
            best = self.best()
            if best != self.target:
                return self._switch(best, now, f"a viewer that decodes only {_names(codecs)} joined")
        return self._reconsider(now)

    def left(self, conn_id: int, now: float) -> list[HostOutput]:
        if conn_id not in self.watchers:
            return []
        del self.watchers[conn_id]
        return self._reconsider(now)

    def encoded(self, encode_s: float, period_s: float, now: float) -> list[HostOutput]:
        """One picture of the running codec took ``encode_s`` to encode, at a frame period of ``period_s``."""
        if self.switching is not None:
            return []
        times = self._encode_s
        times.append(encode_s)
        if len(times) < PACE_FRAMES:
            return []
        median = median_s(times)
        times.clear()
        if median <= PACE_SHARE * period_s or self.running in self.too_slow:
            return []
        self.too_slow.add(self.running)
        best = self.best()
        if best == self.running:
            return []  # nothing else every viewer decodes (or a viewer holds this one): it stays, slow
        why = f"its encoder cannot keep up here: {median * 1000:.1f} ms a picture at {1 / period_s:.0f} fps"
        return self._switch(best, now, f"{CODEC_NAMES[self.running]}: {why}")

    def switched(self, asked: VideoCodec, made: VideoCodec, now: float) -> None:
        """The switch to ``asked`` is done: the encoder makes ``made`` from now on (the old codec if it failed). A
        later switch asked meanwhile (a second newcomer that decodes even less) is still to come."""
        self.running = made
        if asked == self.switching:
            self.switching = None
        self._changed_s = now
        self._encode_s.clear()

    def next_timer(self) -> float | None:
        return self._due_s

    def handle_timer(self, now: float) -> list[HostOutput]:
        if self._due_s is None or now < self._due_s:
            return []
        self._due_s = None
        return self._reconsider(now)

    def _reconsider(self, now: float) -> list[HostOutput]:
        """A codec a viewer watching lacks (the viewer that held it left) or that cannot keep up changes at once;
        a better one for everyone comes back once the hold since the last change is over."""
        best = self.best()
        self._due_s = None
        if best == self.target or self.switching is not None:
            return []
        lacking = any(s is not None and self.target not in s for s in self.watchers.values())
        if not lacking and self.target not in self.too_slow and now < self._changed_s + self.hold_s:
            self._due_s = self._changed_s + self.hold_s
            return []
        return self._switch(best, now, "every viewer watching decodes it")

    def _switch(self, codec: VideoCodec, now: float, why: str) -> list[HostOutput]:
        self.switching = codec
        self.switches += 1
        self._changed_s = now
        self._due_s = None
        return [SwitchCodec(codec, why)]


def _names(codecs: frozenset[VideoCodec]) -> str:
    return ", ".join(CODEC_NAMES[c] for c in sorted(codecs)) or "nothing"
