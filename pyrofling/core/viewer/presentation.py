"""The viewer's presentation loop: which picture each display refresh shows, and the phase error.

Pure.  The shell (``pyrofling.client.presenter``) drives it once per display
refresh: :meth:`PresentationLoop.vblank` at the refresh, :meth:`frame_ready` for
every decoded picture (from any thread, via the shell), then :meth:`poll` until
it returns a :class:`Present` or :class:`Repeat`; a :class:`Wait` means "wait for
a picture until ``until_s``, then poll again".

Two ways to present, as in the reference viewer (PyroFling's `pyrofling_viewer.cpp`):

* **FIFO** (phase-locked, or a deadline is set): at each refresh show the newest
  picture (older ones are dropped), or wait for one up to the deadline (most of
  a refresh without a deadline); phase-locked, a picture left over from an
  earlier refresh is only shown if no fresher one comes by the deadline.  A picture chosen during refresh *k* is
  on screen at refresh *k+1*.  No picture in time: the old one stays (a miss).
* **Mailbox** (free-running, neither): the newest picture finished a flip lead
  (``flip_lead_s``) before a refresh is on screen at that refresh; older ones are
  dropped.  No display takes a picture at the refresh itself: the presenter must
  draw and hand it over first, as a phase-locked one must by its flip margin.  So
  the mailbox's presenter acts at its last moment before the refresh, and its pick
  is on screen at that refresh (chosen during refresh *k*, on screen at *k+1*, as
  FIFO); acting at the refresh that had just begun kept it waiting a whole refresh
  behind a display that blocks on the flip.

Each new picture yields the phase error: ``(refresh + offset) − decode_done``,
folded into ± half a refresh (positive: it was done early, "deliver later").  In
phase-locked mode the viewer sends it to the host, which steers on it.  With
``auto_offset`` (the viewer's default) the offset and deadline are not given but
learnt from those errors (:mod:`pyrofling.core.viewer.phase_offset`): pictures are
steered to be ready just before the refresh that shows them.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from pyrofling.core.phase import wrap_phase
from pyrofling.core.viewer.phase_offset import FLIP_LEAD_S, AutoOffset, AutoOffsetConfig

T = TypeVar("T")

#: Pictures whose stamp → screen time tells a leftover from an early picture, and how many are needed first.
LEFTOVER_HISTORY = 15
LEFTOVER_HISTORY_MIN = 8


@dataclass(frozen=True, slots=True)
class PresentationConfig:
    """How the viewer presents (URI ``phase_locked=OFFSET&deadline=SECONDS``; reference defaults: off, 0)."""

    #: Lock the host's frame clock to this display; frames should be done at refresh + ``offset_s``.
    phase_locked: bool = False
    offset_s: float = 0.0
    #: Wait at most this long after a refresh for the next picture (0: no deadline).
    deadline_s: float = 0.0
    #: Phase-locked with an offset and deadline the viewer finds itself (``offset_s``/``deadline_s`` unused).
    auto_offset: bool = False
    auto: AutoOffsetConfig = field(default_factory=AutoOffsetConfig)
    #: Free-running (mailbox): a picture must be handed to the display this long before the refresh that shows
    #: it; the presenter picks the newest then (the phase-locked one's floor for its flip margin, the same act).
    flip_lead_s: float = FLIP_LEAD_S

    @classmethod
    def automatic(cls, auto: AutoOffsetConfig | None = None) -> PresentationConfig:
        return cls(phase_locked=True, auto_offset=True, auto=auto or AutoOffsetConfig())

    @property
    def fifo(self) -> bool:
        return self.phase_locked or self.deadline_s > 0

    @property
    def mode(self) -> str:
        """auto, fixed (a given offset), deadline (FIFO, not locked) or free."""
        if self.auto_offset:
            return "auto"
        if self.phase_locked:
            return "fixed"
        return "deadline" if self.deadline_s > 0 else "free"


@dataclass(frozen=True, slots=True)
class Present(Generic[T]):
    """Show ``frame``; it reaches the screen at ``on_screen_s``."""

    frame: T
    done_s: float
    on_screen_s: float
    #: (refresh + offset) − done, sent as PHASE_OFFSET when phase-locked: ``-late_s``.
    phase_error_us: int
    dropped: int  # pictures skipped to get to this one
    #: done − (refresh + offset), not folded: a picture later than half a refresh is late, not early (FIFO;
    #: a picture left over from an earlier refresh, and mailbox, take the folded error's).
    late_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Repeat:
    """No new picture this refresh: the previous one stays on screen."""

    missed_deadline: bool  # FIFO mode waited in vain


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait for a picture until ``until_s``, then :meth:`PresentationLoop.poll` again."""

    until_s: float


Decision = Present[T] | Repeat | Wait


class RefreshClock:
    """A software display clock: refreshes every ``period_s`` from ``start_s``.

    For displays without usable vsync (Xvfb, headless) and to simulate one:
    ``hz`` 59.94, or ``skew_ppm`` to run the clock that much slow (negative: fast).
    """

    def __init__(self, hz: float, start_s: float, *, skew_ppm: float = 0.0) -> None:
        if hz <= 0:
            raise ValueError("refresh rate must be positive")
        self.hz = hz / (1.0 + skew_ppm * 1e-6)
        self.period_s = 1.0 / self.hz
        self.start_s = start_s

    def next_vblank(self, now: float) -> float:
        """The first refresh after ``now`` (a refresh within a µs of ``now`` counts as ``now``'s own)."""
        n = math.floor((now - self.start_s) / self.period_s + 1e-4) + 1
        return self.start_s + n * self.period_s

    def following(self, previous_s: float, now: float, *, grace_s: float) -> float:
        """The refresh to decide for after the one at ``previous_s``: the latest that has passed, if that was
        less than ``grace_s`` ago and is not ``previous_s`` (a presenter that woke late still decides for it, and
        what it picks is on screen at the refresh after, as if it had been on time); else the first after
        ``now``.  Without this, waking a little after a refresh cost that refresh too: a second repeat."""
        last = self.next_vblank(now) - self.period_s
        if last > previous_s + self.period_s / 2 and now - last < grace_s:
            return last
        return last + self.period_s


def refreshes_per_picture(refresh_hz: float, stream_hz: float | None) -> int:
    """How many refreshes each picture of a stream at ``stream_hz`` stays on a display at ``refresh_hz``: 2 for
    60 fps on 119.88 Hz or 72 fps on 143.86 Hz (within 1 % of a whole number, which the lock's steering covers),
    else 1 (the same rate, or one that does not divide it: then a picture simply stays until the next)."""
    if not stream_hz or stream_hz <= 0 or refresh_hz <= 0:
        return 1
    ratio = refresh_hz / stream_hz
    n = round(ratio)
    return n if n >= 2 and abs(ratio - n) <= 0.01 * n else 1


@dataclass(slots=True)
class PresentationCounters:
    refreshes: int = 0
    presented: int = 0
    repeated: int = 0  # refreshes that showed the previous picture again (duplicates)
    #: Refreshes that kept the picture by the stream's own rate (the second of each two for a stream at half the
    #: display's rate): no new picture was due (one that came all the same was still taken), and none is a repeat.
    held: int = 0
    missed_deadlines: int = 0  # FIFO waits that ended without a picture
    skipped: int = 0  # refreshes that went by while the presenter could not run (counted as repeated too)
    dropped: int = 0  # pictures decoded but never shown


class PresentationLoop(Generic[T]):
    """Decides per refresh.  See the module docstring for the driving protocol."""

    def __init__(self, config: PresentationConfig, refresh_period_s: float, *, cadence: int = 1) -> None:
        """``cadence``: refreshes a picture of the stream is meant to stay (:func:`refreshes_per_picture`)."""
        self.config = config
        self.period_s = refresh_period_s
        self.cadence = max(1, cadence)
        self.counters = PresentationCounters()
        self._since_present = 0  # refreshes since the last picture was picked
        self._ready: deque[tuple[T, float, float | None]] = deque()  # (picture, done, stamp)
        #: How long after its stamp each of the last pictures was on screen, and the usual one while they agree
        #: (None: too few yet, or not steady), worked out as each is shown.
        self._stamp_to_screen: deque[float] = deque(maxlen=LEFTOVER_HISTORY)
        self._usual_stamp_to_screen: float | None = None
        self._vblank_s: float | None = None
        #: The refresh that missed its deadline last, while its picture may still come (auto learns how late).
        self._missed_vblank_s: float | None = None
        self._decided = True
        self._shown_any = False
        #: The offset and deadline in force (learnt with ``auto_offset``).
        self.auto = AutoOffset(refresh_period_s, config.auto) if config.auto_offset else None
        self.offset_s, self.deadline_s = config.offset_s, config.deadline_s
        self._follow_auto()

    def _follow_auto(self) -> None:
        if self.auto is not None:
            self.offset_s, self.deadline_s = self.auto.offset_s, self.auto.deadline_s

    def frame_ready(self, frame: T, done_s: float, stamp_s: float | None = None) -> None:
        """A decoded picture, ready to show since ``done_s``; ``stamp_s``: its capture time on the host's clock
        (any fixed origin: its pts), which tells a picture left over from an earlier refresh from an early one."""
        self._ready.append((frame, done_s, stamp_s))

    def _left_over(self, done_s: float, stamp_s: float | None, vblank_s: float) -> bool:
        """Whether a picture is left over from an earlier refresh (phase-locked): shown now, it would be one
        refresh late.  By its stamp where the lock is steady: the last pictures were on screen a steady time after
        their stamps, and this one would be more than half a refresh later than that.  Else by when it was
        ready, more than half a refresh before its target: which, on a link whose delay varies by more than a
        quarter of a refresh, this refresh's own early pictures also are (taking them for leftovers dropped them
        for the next refresh's, and that refresh then missed)."""
        usual = self._usual_stamp_to_screen
        if stamp_s is not None and usual is not None:
            return vblank_s + self.period_s - stamp_s - usual > self.period_s / 2
        return done_s < vblank_s + self.offset_s - self.period_s / 2

    def _shown_after_stamp(self, stamp_to_screen_s: float) -> None:
        self._stamp_to_screen.append(stamp_to_screen_s)
        history = sorted(self._stamp_to_screen)
        # Steady: one outlier either way aside, the last pictures' times agree within half a refresh.
        steady = len(history) >= LEFTOVER_HISTORY_MIN and history[-2] - history[1] < self.period_s / 2
        self._usual_stamp_to_screen = history[len(history) // 2] if steady else None

    @property
    def wait_s(self) -> float:
        """How long after a refresh the presenter waits for a picture (FIFO): the deadline, or most of a
        refresh without one.  With the automatic offset, until just before the next refresh: the deadline
        there is what the margin protects, and a picture later than it is still shown if the presenter can
        act in time (if not, its flip is late: the repeat a miss would have been, no more)."""
        if self.auto is not None:
            return self.period_s - self.auto.config.min_flip_margin_s
        if not self.config.fifo:  # mailbox: it picks at its last moment
            return max(0.0, self.period_s - self.config.flip_lead_s)
        return self.deadline_s if self.deadline_s > 0 else self.period_s * 0.95

    @property
    def late_grace_s(self) -> float:
        """How long after a refresh its decision may still start (:meth:`RefreshClock.following`): as long as
        it would wait for a picture."""
        return self.wait_s

    def vblank(self, now: float) -> None:
        """A display refresh happened at ``now``; a new decision is due."""
        if not self._decided:  # the shell skipped a poll: the previous refresh showed nothing new
            self._repeat(missed=False)
        self._vblank_s = now
        self._decided = False
        self._since_present += 1
        self.counters.refreshes += 1

    def refreshes_skipped(self, count: int) -> None:
        """``count`` refreshes went by without a decision (the presenter was held up): the picture on screen
        stayed, so each is a repeated refresh."""
        self.counters.refreshes += count
        self.counters.skipped += count
        self._since_present += count
        if self._shown_any:
            self.counters.repeated += count

    def poll(self, now: float) -> Decision[T]:
        if self._vblank_s is None or self._decided:
            raise RuntimeError("poll() is only valid once after each vblank()")
        v = self._vblank_s
        cfg = self.config
        wait = self.wait_s
        if not cfg.fifo:  # mailbox: the newest picture finished by the presenter's last moment, on screen next
            if now < v + wait:
                return Wait(v + wait)
            due = [item for item in self._ready if item[1] <= now]
            if not due:
                return self._hold() if self._holding() else self._repeat(missed=False)
            for _ in due:
                self._ready.popleft()
            frame, done, stamp = due[-1]
            return self._present(
                frame, done, stamp, on_screen_s=v + self.period_s, dropped=len(due) - 1, left_over=True
            )
        # The newest picture is shown and older ones dropped (the reference keeps one back whenever
        # two are waiting, which holds a frame of extra latency after every burst).  In phase-locked
        # mode a picture finished more than half a refresh before its target is left over from an
        # earlier refresh: showing it would keep a frame of backlog forever, one in, one out, and
        # its phase would fold to look right.  So wait for a fresher one until the deadline first (no later:
        # a picture is there to show, in good time).
        if self._ready:
            frame, done, stamp = self._ready[-1]
            left_over = self._left_over(done, stamp, v)
            stale = cfg.phase_locked and left_over
            until = v + (self.deadline_s if self.deadline_s > 0 else wait)  # a leftover waits to the deadline
            if not stale or now >= until:
                dropped = len(self._ready) - 1
                if dropped:
                    self._learn_from_missed(v)
                self._ready.clear()
                self._woke(now - (max(done, v) if not stale else until))
                return self._present(frame, done, stamp, on_screen_s=v + self.period_s, dropped=dropped,
                                     left_over=left_over)  # fmt: skip
            return Wait(until)
        if now < v + wait:
            return Wait(v + wait)
        self._woke(now - (v + wait))
        # A refresh that keeps the picture by the stream's cadence still took any picture that came (above).
        return self._hold() if self._holding() else self._repeat(missed=True)

    def _missed_refresh_before(self, vblank_s: float) -> float | None:
        """The refresh before ``vblank_s``, if it missed its deadline (its picture may be the one in hand now);
        told once."""
        missed_at, self._missed_vblank_s = self._missed_vblank_s, None
        return missed_at if missed_at is not None and vblank_s - missed_at <= 1.5 * self.period_s else None

    def _learn_from_missed(self, vblank_s: float) -> None:
        """Pictures are being dropped for a newer one: if the refresh before missed, the oldest of them, a
        leftover by its stamp, is the picture it waited for; auto learns how late it came."""
        missed_at = self._missed_refresh_before(vblank_s)
        if self.auto is None or missed_at is None:
            return
        _, done, stamp = self._ready[0]
        if self._left_over(done, stamp, vblank_s):
            self.auto.missed_picture_came(done - (missed_at + self.offset_s), missed_at)

    def _woke(self, late_s: float) -> None:
        """How late the presenter acted on what it waited for (auto mode learns its flip margin from it)."""
        if self.auto is not None and self._vblank_s is not None:
            self.auto.woke(max(0.0, late_s), self._vblank_s)

    def _present(
        self, frame: T, done_s: float, stamp_s: float | None, *, on_screen_s: float, dropped: int, left_over: bool
    ) -> Present[T]:
        assert self._vblank_s is not None
        self._decided = True
        self._shown_any = True
        self._since_present = 0
        self.counters.presented += 1
        self.counters.dropped += dropped
        if stamp_s is not None:
            self._shown_after_stamp(on_screen_s - stamp_s)
        target = self._vblank_s + self.offset_s
        late = done_s - target
        if left_over:  # (and mailbox) the error folded: early by most of a refresh reads as late
            late = -wrap_phase(target - done_s, self.period_s)
        # The host is steered by the same error, not folded either: with a margin over half a refresh (a jittery
        # link), a picture that late would read as early and pull the host's clock the wrong way.
        error = -late
        if self.auto is not None:
            missed_at = self._missed_refresh_before(self._vblank_s)
            if left_over and missed_at is not None:
                self.auto.missed_picture_came(late, missed_at)  # the missed refresh's picture, nothing newer came
            else:
                self.auto.observe(late, self._vblank_s)  # folded, the tail it must cover would look early
            self._follow_auto()
        return Present(frame, done_s, on_screen_s, round(error * 1e6), dropped, late)

    def _holding(self) -> bool:
        """Whether this refresh keeps the last picture by the stream's cadence (no new one was due): no repeat."""
        return self.cadence > 1 and self._shown_any and self._since_present < self.cadence

    def _hold(self) -> Repeat:
        self._decided = True
        self.counters.held += 1
        return Repeat(missed_deadline=False)

    def _repeat(self, *, missed: bool) -> Repeat:
        self._decided = True
        if self._shown_any:  # before the first picture there is nothing to repeat
            self.counters.repeated += 1
            if missed:
                self.counters.missed_deadlines += 1
                self._missed_vblank_s = self._vblank_s
                if self.auto is not None and self._vblank_s is not None:
                    self.auto.missed(self._vblank_s)
                    self._follow_auto()
        return Repeat(missed_deadline=missed and self._shown_any)
