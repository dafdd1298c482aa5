"""Spectators through a Janus SFU: when the host (re)creates its mountpoint, keeps it, and forces key frames for it.

Pure. The host publishes its one encode as RTP into a Janus streaming mountpoint that it creates with a secret
and removes when it stops (``host --spectators URL``). The shell tells this core what Janus answered, what came
back on the mountpoint's RTCP port and when; the core answers with what to do (:data:`SpectatorsOutput`) and
when it next wants to be asked (:meth:`SpectatorsCore.next_timer`).

Three decisions live here:

* **Janus goes away and comes back.** A failed request while publishing stops the publishing and says so in one
  line; the mountpoint is created again with backoff (``retry_min_s`` doubling to ``retry_max_s``) and nothing
  more is said until it is back. The players' stream never waits on any of it.
* **A refusal is final.** A wrong admin key or secret does not get better by asking again: one line that says
  what to fix, and no retries.
* **Key frames on the spectators' behalf.** The stream refreshes by intra refresh alone, so a spectator who joins
  late, or whose SFU path lost a picture, has no entry point until the host forces one. Janus relays their
  PLI/FIR to the mountpoint's RTCP port; however many come, the host forces at most one IDR every
  ``keyframe_interval_s``, since every IDR is a large frame for the players too. A request after a quiet spell
  is answered at once and once more an interval later: Janus asks at most once a second for every spectator
  who joined in that second, and those whose connection came up just after the first IDR would otherwise
  wait for the next second's request (20 spectators joining at once: the slowest's first picture 1.1 s).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, TypeAlias

from pyrofling.core.host.recording import Backoff


class Phase(enum.Enum):
    STARTING = "starting"  # the first mountpoint not yet created
    PUBLISHING = "publishing"
    WAITING = "waiting"  # Janus went away: trying again at ``retry_at``
    REFUSED = "refused"  # Janus said no for good (wrong key or secret): nothing more is tried
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class SpectatorsConfig:
    """Seconds."""

    #: Least time between two key frames forced for spectators (their PLI/FIR, any number of them, in between).
    #: A flood costs the players two IDRs a second at most.
    keyframe_interval_s: float = 0.5
    #: How often the Janus session is kept alive (Janus ends a silent session after 60 s); a keepalive that fails
    #: is how a Janus that went away is noticed, so it is frequent (a small request).
    keepalive_s: float = 1.0
    #: How often an RTCP sender report goes to the mountpoint's RTCP port: Janus sends its key-frame requests to
    #: where the last one came from.
    report_s: float = 5.0
    retry_min_s: float = 0.5
    #: Janus back: a picture for its spectators within about this long (and a second more for their key frame).
    retry_max_s: float = 2.0

    def __post_init__(self) -> None:
        if min(self.keyframe_interval_s, self.keepalive_s, self.report_s) <= 0:
            raise ValueError("keyframe_interval_s, keepalive_s and report_s must be positive")
        if not 0 < self.retry_min_s <= self.retry_max_s:
            raise ValueError("retries need 0 < retry_min_s <= retry_max_s")


@dataclass(frozen=True, slots=True)
class CreateMountpoint:
    """Open a Janus session and create the mountpoint (again)."""


@dataclass(frozen=True, slots=True)
class RemoveMountpoint:
    """Remove the mountpoint and end the session (the host is stopping)."""


@dataclass(frozen=True, slots=True)
class KeepAlive:
    """Tell Janus the session is still wanted."""


@dataclass(frozen=True, slots=True)
class Publish:
    """Send RTP to these ports of Janus (audio: None when the mountpoint has no audio)."""

    video_port: int
    audio_port: int | None


@dataclass(frozen=True, slots=True)
class SendReport:
    """An RTCP sender report to the mountpoint's RTCP port (where Janus learns to send key-frame requests)."""


@dataclass(frozen=True, slots=True)
class StopPublishing:
    """Send nothing more to Janus until the next :class:`Publish`."""


@dataclass(frozen=True, slots=True)
class ForceKeyFrame:
    """Ask the encoder for an IDR at its next frame (for the spectators; the players get it too)."""


@dataclass(frozen=True, slots=True)
class Say:
    """One line for the person hosting (``warning``: something they may want to act on)."""

    text: str
    warning: bool = False


SpectatorsOutput: TypeAlias = (
    CreateMountpoint | RemoveMountpoint | KeepAlive | Publish | SendReport | StopPublishing | ForceKeyFrame | Say
)


class SpectatorsCore:
    """The mountpoint's lifecycle and the spectators' key frames; every method takes the time and returns outputs."""

    def __init__(self, target: str, config: SpectatorsConfig | None = None) -> None:
        self.target = target  # for the lines it says: where the spectators' SFU is
        self.config = config or SpectatorsConfig()
        self.phase = Phase.STARTING
        self._backoff = Backoff(initial_s=self.config.retry_min_s, max_s=self.config.retry_max_s)
        self._retry_at: float | None = None
        self._keepalive_at: float | None = None
        self._report_at: float | None = None
        self._up_since: float | None = None
        self._last_forced_s: float | None = None
        self._keyframe_pending = False
        self.creations = 0
        self.outages = 0
        self.keyframes_asked = 0
        self.keyframes_forced = 0

    def start(self, now: float) -> list[SpectatorsOutput]:
        del now
        return [CreateMountpoint()]

    def created(self, now: float, video_port: int, audio_port: int | None) -> list[SpectatorsOutput]:
        """Janus created the mountpoint: publish, with a key frame so that those already watching get a picture."""
        if self.phase in (Phase.REFUSED, Phase.STOPPED):
            return []
        back = self.phase is Phase.WAITING
        self.phase, self._retry_at, self._up_since = Phase.PUBLISHING, None, now
        self._keepalive_at = now + self.config.keepalive_s
        self._report_at = now + self.config.report_s
        self.creations += 1
        self._keyframe_pending = True  # a new mountpoint: whoever watches it needs an entry point
        where = f"mountpoint on {self.target}"
        line = (
            f"spectators: Janus is back, publishing to its {where} again"
            if back
            else f"spectators: publishing to a {where}"
        )
        return [Publish(video_port, audio_port), SendReport(), *self._force(now), Say(line)]

    def failed(self, now: float, reason: str, *, refused: bool = False) -> list[SpectatorsOutput]:
        """A request to Janus failed (``refused``: Janus answered that the key or secret is wrong)."""
        if self.phase in (Phase.REFUSED, Phase.STOPPED):
            return []
        out: list[SpectatorsOutput] = [StopPublishing()] if self.phase is Phase.PUBLISHING else []
        if refused:
            self.phase, self._retry_at, self._keepalive_at, self._report_at = Phase.REFUSED, None, None, None
            return [*out, Say(f"spectators: {self.target} refused the mountpoint ({reason}); the players' stream "
                              "goes on without spectators", warning=True)]  # fmt: skip
        if self.phase is Phase.PUBLISHING:
            self.outages += 1
            out.append(Say(f"spectators: lost {self.target} ({reason}); the players' stream goes on, publishing "
                           "again when it is back", warning=True))  # fmt: skip
        elif self.phase is Phase.STARTING:
            out.append(Say(f"spectators: cannot reach {self.target} ({reason}); trying again until it answers",
                           warning=True))  # fmt: skip
        self.phase, self._keepalive_at, self._report_at = Phase.WAITING, None, None
        self._retry_at = self._backoff.failed(now, self._up_since)
        self._up_since = None
        return out

    def keyframe_asked(self, now: float) -> list[SpectatorsOutput]:
        """A PLI or FIR from Janus for the mountpoint's video."""
        self.keyframes_asked += 1
        if self.phase is not Phase.PUBLISHING:
            return []
        self._keyframe_pending = True
        out = self._force(now)
        if out:  # answered at once; Janus asks at most once a second, for all who joined in it: one more follows
            self._keyframe_pending = True
        return out

    def timer(self, now: float) -> list[SpectatorsOutput]:
        out: list[SpectatorsOutput] = []
        if self.phase is Phase.WAITING and self._retry_at is not None and now >= self._retry_at:
            self._retry_at = None
            out.append(CreateMountpoint())
        if self.phase is Phase.PUBLISHING:
            if self._keepalive_at is not None and now >= self._keepalive_at:
                self._keepalive_at = now + self.config.keepalive_s
                out.append(KeepAlive())
            if self._report_at is not None and now >= self._report_at:
                self._report_at = now + self.config.report_s
                out.append(SendReport())
            out += self._force(now)
        return out

    def next_timer(self) -> float | None:
        due = (self._retry_at, self._keepalive_at, self._report_at, self._keyframe_due())
        times = [t for t in due if t is not None]
        return min(times) if times else None

    def stop(self, now: float) -> list[SpectatorsOutput]:
        del now
        publishing = self.phase is Phase.PUBLISHING
        self.phase, self._retry_at, self._keepalive_at, self._report_at = Phase.STOPPED, None, None, None
        self._keyframe_pending = False
        return [StopPublishing(), RemoveMountpoint()] if publishing else []

    def summary(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "phase": self.phase.value,
            "mountpoints_created": self.creations,
            "outages": self.outages,
            "keyframes_asked": self.keyframes_asked,
            "keyframes_forced": self.keyframes_forced,
        }

    def _keyframe_due(self) -> float | None:
        if not self._keyframe_pending or self.phase is not Phase.PUBLISHING:
            return None
        last = self._last_forced_s
        return last + self.config.keyframe_interval_s if last is not None else float("-inf")

    def _force(self, now: float) -> list[SpectatorsOutput]:
        """A key frame now if one is wanted and the last was long enough ago; else it waits for its timer."""
        due = self._keyframe_due()
        if due is None or now < due:
            return []
        self._keyframe_pending, self._last_forced_s = False, now
        self.keyframes_forced += 1
        return [ForceKeyFrame()]
