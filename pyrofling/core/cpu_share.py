"""How much of its CPU a real-time worker takes: whether it may keep its real-time priority.

Pure.  The host's encode thread and the viewer's decode thread (and the codec
threads each starts, which inherit its priority) run real-time, below the beat
threads (heartbeat, presenter), so that nothing else of their own process, the
event loop or the sound, takes their CPU in the middle of a frame: on a CPU shared
with those, their turns stretched a frame's encode by up to 2–3 ms at its tail.
But a real-time thread that needs most of its CPU would leave the others on that
CPU, the event loop that sends or receives the frames among them, next to nothing.
So a worker keeps real time only while its work fills at most ``max_share`` of
the last ``window_s``; the first time it fills more (a slow machine, a large
picture), it steps down to the raised priority of the other frame-carrying
threads, for the rest of the stream.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(slots=True)
class CpuShare:
    window_s: float = 1.0
    #: The most of the window the work may fill and keep real time.
    max_share: float = 0.5
    #: The share that made the worker step down (None: it has not; it never steps up again).
    share_at_step_down: float | None = None
    _jobs: deque[tuple[float, float]] = field(default_factory=deque)  # (started, finished) in the window

    def worked(self, started_s: float, finished_s: float) -> bool:
        """A piece of work (a frame's encode or decode) ran from ``started_s`` to ``finished_s``.  True once: the
        first time the work of the last ``window_s`` filled more than ``max_share`` of it (the shell then steps
        the worker down)."""
        if self.stepped_down:
            return False
        self._jobs.append((started_s, max(started_s, finished_s)))
        since = finished_s - self.window_s
        while self._jobs and self._jobs[0][1] <= since:
            self._jobs.popleft()
        share = self.share(finished_s)
        if share > self.max_share:
            self.share_at_step_down = share
            self._jobs.clear()
            return True
        return False

    @property
    def stepped_down(self) -> bool:
        return self.share_at_step_down is not None

    def share(self, now: float) -> float:
        """The part of the window up to ``now`` that the work filled (the part of a piece cut by the window's
        start left out).  Always over the whole window: the first frames, slow as the codec warms up, are a
        small part of a second, not the whole of the little time since the start."""
        since = now - self.window_s
        busy = sum(max(0.0, end - max(start, since)) for start, end in self._jobs)
        return busy / self.window_s
