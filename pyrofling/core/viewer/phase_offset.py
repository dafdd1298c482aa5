"""The automatic phase offset: pictures ready just before the refresh they are meant for.

Pure.  A phase-locked viewer shows a picture chosen during refresh *k* at refresh
*k+1*, so the closer to *k+1* a picture is ready, the less it waits; but a picture
later than the deadline (the last moment the display can still take it for *k+1*)
is a repeated refresh.  The reference asks the user for the offset; this chooses it.

The deadline sits a flip margin before the next refresh: the presenter must act
by then, and how late it wakes on a busy machine is learnt the same way.  The offset (where the
host's frame clock is steered to: refresh + offset) sits a *margin* before the
deadline, and the margin is what the viewer learns: from every picture's lateness
against its target (``done − (refresh + offset)``, the phase error's negative),
over the last ``window_s``, it takes the lateness that ``misses_per_minute`` pictures
exceed (half a miss a minute by default; extrapolated from the median and the 99th
percentile), plus a guard, plus a bump for every deadline missed in the last
minute beyond that rate (the tail that extrapolation did not see: stalls).  The
machine's own stalls (an encode in a slow spell of the CPU, a codec thread woken
late) come as pictures later than any in the window, which no estimate from it
foresees; so the margin also stays a fixed allowance beyond the median lateness
until ten minutes of pictures show the machine's own rate of them, and from then
on covers the lateness that rate of them exceeded (lower on a quiet machine).  Until
the window holds enough pictures for a percentile, the spread of the first ones
may already raise it (never lower it): a jittery link would otherwise miss
several times a second at the initial margin.

It never oscillates: it learns only while locked (the recent median lateness is
near zero) and not while the host is still following an earlier rise; the margin
rises at a bounded rate (safe at once: the deadline does not move) and falls far
more slowly, and it moves only when its target leaves a dead band around it.
"""

from __future__ import annotations

import heapq
import statistics
from collections import deque
from dataclasses import dataclass

import numpy as np


class _TimedWindow:
    """Values with the time each came, the oldest dropped by time; kept as two deques so that the values go
    to numpy without a Python loop (a percentile of 20 s of pictures four times a second)."""

    __slots__ = ("times", "values")

    def __init__(self) -> None:
        self.times: deque[float] = deque()
        self.values: deque[float] = deque()

    def __len__(self) -> int:
        return len(self.values)

    def append(self, now: float, value: float) -> None:
        self.times.append(now)
        self.values.append(value)

    def drop_before(self, t: float) -> None:
        times, values = self.times, self.values
        while times and times[0] < t:
            times.popleft()
            values.popleft()

    def median_p99_max(self) -> tuple[float, float, float]:
        """As ``np.percentile(values, (50, 99))`` (linear between ranks) and the largest, from one sort: numpy's
        percentile costs ten times the sort at these sizes."""
        a = np.sort(np.fromiter(self.values, float, len(self.values)))
        last = len(a) - 1
        out = []
        for q in (0.5, 0.99):
            rank = q * last
            lo = int(rank)
            hi = min(lo + 1, last)
            out.append(float(a[lo] + (a[hi] - a[lo]) * (rank - lo)))
        return out[0], out[1], float(a[last])


#: A picture must be handed to the display at least this long before the refresh that shows it: the presenter
#: acts (draws, flips) in it.  The phase-locked flip margin's floor, and free-running's (mailbox) own lead.
FLIP_LEAD_S = 0.001


@dataclass(frozen=True, slots=True)
class AutoOffsetConfig:
    #: A picture must reach the display this long before the refresh that shows it: the presenter must act
    #: by then, so this follows how late the presenter itself wakes (its lateness's tail, as for pictures).
    #: It starts at its floor, the presenter's last moment (it waits for a picture until then): a start of
    #: 1.5 ms never fell to the 1 ms a prompt presenter showed (the fall's dead band is 0.5 ms), so the
    #: deadline sat 0.5 ms before that last moment, a guard nobody chose that cost 0.5 ms of latency.
    flip_margin_s: float = FLIP_LEAD_S
    min_flip_margin_s: float = FLIP_LEAD_S
    max_flip_margin_s: float = 0.005
    initial_margin_s: float = 0.006
    min_margin_s: float = 0.0015
    #: The margin's ceiling; it also stops ``min_offset_s`` after the refresh (the offset stays in the period
    #: it is for).  A network whose delay varies by σ 3 ms needs about 11 ms for one late picture a minute.
    max_margin_s: float = 0.016
    min_offset_s: float = 0.001
    #: Lateness samples considered.
    window_s: float = 20.0
    #: Samples needed before the margin follows them.
    min_samples: int = 120
    #: After this many pictures (locked or not), then twice and four times as many, the margin may already
    #: rise (never fall) to what their spread (σ) shows, too few for a percentile: a jittery link then does
    #: not miss for seconds at the initial margin while the first ``min_samples`` gather.
    early_samples: int = 30
    #: Refreshes a minute allowed to miss their deadline.  The margin is the lateness that only that share of
    #: pictures exceeds, extrapolated from the window's median and 99th percentile as if the tail were
    #: Gaussian (20 s of samples cannot show a one-in-3600 event), plus a guard (plus the misses' bump, for
    #: the tail that is not Gaussian).  Half a miss a minute by default: aiming at one a minute, a minute with
    #: two came about one time in four (rare events come as they please), and a player counts those.
    misses_per_minute: float = 0.5
    guard_s: float = 0.0005
    #: The margin stays at least this far beyond the median lateness until ``stall_window_s`` of learnt pictures
    #: show the machine's own stalls; from then on, it covers the lateness that ``misses_per_minute`` of that
    #: window's pictures exceeded (plus the guard) instead, whichever way that moves it.  On a quiet link the
    #: window's spread alone put the margin 2.5–3.5 ms past the median, and the stalls a few ms past that came
    #: about twice a minute on both machines measured; their recorded pictures replayed in the loop (``bench
    #: phase --replay``), this allowance took a third of them for 1.8 ms more latency, as a 2.5 ms guard did for
    #: 2.2 ms, without moving a jittery link's margin (which its spread already carries past the allowance; the
    #: guard moved it 3 ms).  0: neither the allowance nor the stall window, the 20 s window alone.
    stall_allowance_s: float = 0.007
    stall_window_s: float = 600.0
    #: Each deadline missed in the last ``miss_memory_s`` beyond the ``misses_per_minute`` allowed adds this
    #: much (up to ``max_miss_bump_s``).
    miss_step_s: float = 0.0005
    miss_memory_s: float = 60.0
    max_miss_bump_s: float = 0.003
    #: How fast the margin may change, seconds per second, and how far its target must be before it moves
    #: (a dead band: the target's own noise never moves it).
    rise_per_s: float = 0.004
    fall_per_s: float = 0.0003
    rise_band_s: float = 0.00025
    fall_band_s: float = 0.0005
    #: ... or this share of the margin, if more (the percentile's own noise grows with the jitter).
    band_share: float = 0.12
    #: The lock's wait for a picture ready at its median time (the margin, then the flip margin) stays within
    #: this of what free-running's would be on average: half a refresh, then the lead a mailbox hands its
    #: picture over by (``min_flip_margin_s``, the flip margin's floor: the same act).  Where the ready times
    #: spread wider than a lock can spare (a 144 Hz display: 6.9 ms a refresh; a busy machine; a jittery link),
    #: covering their tail would cost every picture more latency than free-running's repeats cost some: the lock
    #: then keeps this wait, lets the late pictures repeat and says so (:attr:`OffsetState.wanted_margin_ms`).
    #: None: the margin covers the tail whatever it costs (up to ``max_margin_s``).  0: never longer than
    #: free-running's.  (While free-running was modelled taking a picture at the refresh itself, with no lead,
    #: 0.25 ms put the lock −0.1 to +0.4 ms from it at 144 Hz on the 2-core machine, 9 to 15 repeats a minute,
    #: and 0.75 ms 0.9 to 1.3 ms behind; with the lead counted the lock has that millisecond more to spare.)
    beyond_free_running_s: float | None = 0.0
    #: ... and what only the stall allowance asks for (stalls feared, not yet seen) keeps the wait this much shorter
    #: than that on a fast display. Free-running's pictures do wait less than half a refresh and the lead: the
    #: newest of two ready in one refresh is the one shown, the older dropped, and the mailbox's presenter takes
    #: what was done by the moment it woke, a little after its last moment (``bench latency`` at 144 Hz: 0.2–0.3
    #: ms less on the 2-core machine, 0.5 ms on a 16-CPU one; 120 Hz 0.4 ms). Held at that wait by the allowance,
    #: the lock's pictures waited 0.5 ms longer than free-running's there, with no repeat at all; a tail that is
    #: seen (the window's, the misses', the stall window's) still takes the margin up to free-running's wait.
    feared_below_free_running_s: float = 0.0006
    #: ... on displays that refresh at least this often (80 Hz and up).  At 60 Hz a lock can spare most of a
    #: refresh for a jittery link's tail, and does: one late picture a minute at σ 3 ms for about 3 ms more than
    #: free-running's median, the smoothness chosen there; at 120 and 144 Hz the same tail would cost every
    #: picture more than free-running's average wait, and the lock keeps to that wait instead.
    fast_display_period_s: float = 0.0125
    #: ... and where the lock at that wait still misses more than this many deadlines a minute beyond
    #: ``misses_per_minute``, it says the display outruns the machine as well (what a player counts: more than
    #: one repeat a minute), even if the tail's percentiles fit.
    outrun_misses: float = 1.0
    #: Locked: the median lateness of the last ``lock_samples`` pictures is within this.
    lock_tolerance_s: float = 0.0015
    lock_samples: int = 30
    #: After the margin rose, samples are not learnt for this long (the host is still moving the phase).
    settle_s: float = 1.5
    #: The percentiles are recomputed this often (a picture a refresh would be 60 sorts a second).
    recompute_s: float = 0.25


@dataclass(frozen=True, slots=True)
class OffsetState:
    offset_s: float
    deadline_s: float
    margin_s: float
    flip_margin_s: float
    locked: bool
    learning: bool  # enough samples: the margin follows them (else still the initial one)
    p99_late_ms: float | None
    misses_last_minute: int
    #: The lateness the stall window's allowed share of pictures exceeded (None: the window is not full yet,
    #: the fixed allowance holds).
    stall_late_ms: float | None
    #: The margin the lateness asks for where it is more than the lock can spare (``max_margin_s``, near
    #: free-running's wait): its tail's, or what its pictures showed where the lock keeps missing at that wait
    #: (``outrun_misses``). The display is too fast for this machine or link to cover every picture, and the
    #: late ones repeat.  None: the margin covers what it should.
    wanted_margin_ms: float | None = None


class AutoOffset:
    """Chooses ``offset_s`` and ``deadline_s`` for a display refreshing every ``period_s``."""

    def __init__(self, period_s: float, config: AutoOffsetConfig | None = None) -> None:
        self.config = cfg = config or AutoOffsetConfig()
        self.period_s = period_s
        self.flip_s = cfg.flip_margin_s
        self.margin_s = min(cfg.initial_margin_s, self.max_margin_s)
        if self.waits_like_free_running and cfg.stall_allowance_s:  # the allowance's own ceiling, from the start
            self.margin_s = max(
                cfg.min_margin_s, min(self.margin_s, self.max_margin_s - cfg.feared_below_free_running_s)
            )
        self._wakes = _TimedWindow()  # how late the presenter acted
        self._flip_target: float | None = None
        self._flip_moving = 0
        self._samples = _TimedWindow()  # the learnt pictures' lateness
        self._recent: deque[float] = deque(maxlen=cfg.lock_samples)
        self._latest: deque[float] = deque(maxlen=cfg.min_samples)  # locked or not: the early estimate's
        self._seen = 0
        self._early_next = cfg.early_samples
        self._early_margin = 0.0
        self._misses: deque[float] = deque()
        #: The learnt pictures' latest lateness, per second of the stall window: each second's
        #: ``_stall_rank`` latest (a min-heap), which hold the window's ``_stall_rank`` latest.
        self._stall_seconds: deque[tuple[int, list[float]]] = deque()
        self._stall_rank = int(cfg.misses_per_minute * cfg.stall_window_s / 60) + 1
        self._first_learnt_s: float | None = None
        self._stall_floor_s: float | None = None  # what the stall window showed (None: not full yet)
        self._last_update_s: float | None = None
        self._last_rise_s = float("-inf")
        self._p99: float | None = None
        self._target: float | None = None
        #: The misses' bump in the target, and the part of it the margin has already risen by: a new miss
        #: beyond the allowed rate raises the margin even inside the dead band (which at a wide margin is
        #: wider than a bump, so that misses never moved it).
        self._bump = 0.0
        self._bump_risen = 0.0
        #: The margin rose on the early estimate (few samples, a short view of the lateness): the first full
        #: one may then raise it even inside the dead band (else an early under-estimate would stick).
        self._early_rose = False
        self._catch_up = False
        self._wanted_s: float | None = None
        # How far beyond the median the allowed miss rate lies, in units of (p99 − median).
        gauss = statistics.NormalDist()
        miss_rate = min(0.01, max(1e-6, cfg.misses_per_minute * period_s / 60))
        self._tail_z = gauss.inv_cdf(1 - miss_rate)
        self._tail_stretch = max(1.0, self._tail_z / gauss.inv_cdf(0.99))
        self._target_at = float("-inf")
        self.locked = False
        #: Changes of direction of the margin (a rise after a fall or the reverse): the oscillation check.
        self.reversals = 0
        self._direction = 0  # the last move's direction
        self._moving = 0  # the direction of a move under way (0: none)

    @property
    def deadline_s(self) -> float:
        """The latest a picture may be ready to be shown at the next refresh."""
        return max(self.period_s / 2, self.period_s - self.flip_s)

    @property
    def offset_s(self) -> float:
        return self.deadline_s - self.margin_s

    @property
    def max_margin_s(self) -> float:
        """The most margin it takes: the configured ceiling, what keeps the offset in its period, and what keeps
        the lock's wait near free-running's (``beyond_free_running_s``)."""
        cfg = self.config
        ceiling = min(cfg.max_margin_s, self.deadline_s - cfg.min_offset_s)
        if self.waits_like_free_running and cfg.beyond_free_running_s is not None:
            free_running_wait = self.period_s / 2 + cfg.min_flip_margin_s
            ceiling = min(ceiling, free_running_wait + cfg.beyond_free_running_s - self.flip_s)
        return max(cfg.min_margin_s, ceiling)

    @property
    def waits_like_free_running(self) -> bool:
        """Whether the lock's wait is held near free-running's (a fast display: ``beyond_free_running_s``)."""
        cfg = self.config
        return cfg.beyond_free_running_s is not None and self.period_s <= cfg.fast_display_period_s

    def woke(self, late_s: float, now: float) -> None:
        """The presenter acted ``late_s`` after it should have (a picture was ready, or the deadline came)."""
        self._wakes.append(now, late_s)

    def observe(self, lateness_s: float, now: float) -> None:
        """A picture was ready ``lateness_s`` after its target (negative: early)."""
        cfg = self.config
        self._recent.append(lateness_s)
        self._latest.append(lateness_s)
        self._seen += 1
        self.locked = (
            len(self._recent) == self._recent.maxlen and abs(statistics.median(self._recent)) <= cfg.lock_tolerance_s
        )
        if self.locked and now - self._last_rise_s >= cfg.settle_s:
            self._learn(lateness_s, now)
        self.update(now)

    def missed_picture_came(self, lateness_s: float, now: float) -> None:
        """The picture a missed refresh waited for came after all, ``lateness_s`` after its target (the
        presenter dropped it for the next one).  Learnt even while the margin settles after that miss: it is
        the tail the margin did not cover, and left out, the window would never hold the pictures that missed
        (their stalls would not raise the margin beyond a miss's bump)."""
        if self.locked:
            self._learn(lateness_s, now)
            self.update(now)

    def _learn(self, lateness_s: float, now: float) -> None:
        self._samples.append(now, lateness_s)
        if self._first_learnt_s is None:
            self._first_learnt_s = now
        second = int(now)
        if not self._stall_seconds or self._stall_seconds[-1][0] != second:
            self._stall_seconds.append((second, []))
        latest = self._stall_seconds[-1][1]
        if len(latest) < self._stall_rank:
            heapq.heappush(latest, lateness_s)
        elif lateness_s > latest[0]:
            heapq.heapreplace(latest, lateness_s)

    def _learn_stalls(self, now: float) -> None:
        """The lateness the allowed rate of the stall window's pictures exceeded, once the window is full."""
        cfg = self.config
        while self._stall_seconds and self._stall_seconds[0][0] < now - cfg.stall_window_s:
            self._stall_seconds.popleft()
        if not cfg.stall_allowance_s or self._first_learnt_s is None or now - self._first_learnt_s < cfg.stall_window_s:
            self._stall_floor_s = None
            return
        latest = heapq.nlargest(self._stall_rank, (v for _, top in self._stall_seconds for v in top))
        self._stall_floor_s = latest[-1] if len(latest) == self._stall_rank else None

    def missed(self, now: float) -> None:
        """A refresh passed its deadline without a picture (counted once locked)."""
        if self.locked:
            self._misses.append(now)
            self._target_at = float("-inf")
            self.update(now)

    def update(self, now: float) -> None:
        """Move the margin towards its target at the allowed rate."""
        cfg = self.config
        self._samples.drop_before(now - cfg.window_s)
        while self._misses and self._misses[0] < now - cfg.miss_memory_s:
            self._misses.popleft()
        self._wakes.drop_before(now - cfg.window_s)
        last, self._last_update_s = self._last_update_s, now
        if now - self._target_at >= cfg.recompute_s:
            self._learn_stalls(now)
            self._target, self._target_at = self.target_margin_s(), now
            self._flip_target = self.target_flip_s()
        if last is None:
            return
        dt = max(0.0, now - last)
        self._follow_flip(dt, now)
        target = self._target
        if target is None:
            return
        gap = target - self.margin_s
        # Start moving only when the target leaves the dead band (or a miss added to it); once moving, go all
        # the way to it.
        band = cfg.band_share * self.margin_s
        self._bump_risen = min(self._bump_risen, self._bump)
        missed_more = self._bump > self._bump_risen + 1e-9
        catch_up, self._catch_up = self._catch_up, False
        if gap > max(cfg.rise_band_s, band) or ((self._moving > 0 or missed_more or catch_up) and gap > 0):
            self._bump_risen = self._bump
            self._turn(+1)
            self.margin_s += min(gap, cfg.rise_per_s * dt)
            self._last_rise_s = now
        elif gap < -max(cfg.fall_band_s, band) or (self._moving < 0 and gap < 0):
            self._turn(-1)
            self.margin_s -= min(-gap, cfg.fall_per_s * dt)
        else:
            self._moving = 0
            return
        if abs(target - self.margin_s) < 1e-9:
            self._moving = 0

    def _follow_flip(self, dt: float, now: float) -> None:
        """The flip margin towards its target, at the margin's rates (an earlier deadline is the safe way)."""
        cfg = self.config
        target = self._flip_target
        if target is None:
            return
        gap = target - self.flip_s
        if gap > cfg.rise_band_s or (self._flip_moving > 0 and gap > 0):
            self._flip_moving = 1
            self.flip_s += min(gap, cfg.rise_per_s * dt)
            self._last_rise_s = now  # the offset moved earlier with the deadline: the host follows
        elif gap < -cfg.fall_band_s or (self._flip_moving < 0 and gap < 0):
            self._flip_moving = -1
            self.flip_s -= min(-gap, cfg.fall_per_s * dt)
        else:
            self._flip_moving = 0
        if abs(target - self.flip_s) < 1e-9:
            self._flip_moving = 0

    def target_flip_s(self) -> float | None:
        """Where the flip margin is heading: the presenter's wake-up lateness that only the allowed share of
        refreshes exceeds, plus the guard (None: too few samples yet)."""
        cfg = self.config
        if len(self._wakes) < cfg.min_samples:
            return None
        p50, p99, _ = self._wakes.median_p99_max()
        flip = p50 + max(0.0, p99 - p50) * self._tail_stretch + cfg.guard_s
        return float(min(cfg.max_flip_margin_s, max(cfg.min_flip_margin_s, flip)))

    def target_margin_s(self) -> float | None:
        """Where the margin is heading (None: too few samples yet, it stays where it is)."""
        cfg = self.config
        allowed = cfg.misses_per_minute * cfg.miss_memory_s / 60  # only misses beyond the chosen rate count
        bump = self._bump = min(cfg.max_miss_bump_s, cfg.miss_step_s * max(0.0, len(self._misses) - allowed))
        if len(self._samples) < cfg.min_samples:
            self._p99 = None
            early = self.margin_s if not self._misses else min(self.max_margin_s, cfg.initial_margin_s + bump)
            if self._seen >= self._early_next and self._early_next <= cfg.min_samples:
                # Judged after ``early_samples`` pictures, then twice and four times as many, no more (a
                # rise-only target that followed every noisy estimate would ratchet up to their largest).  The
                # lateness's spread from one picture to the next is robust to the host's steering (a slow
                # trend) and to a few outliers; σ of the differences is √2 σ of the lateness.
                self._early_next *= 2
                steps = np.diff(np.fromiter(self._latest, float, len(self._latest)))
                half = self.period_s / 2  # a leftover's wrap, or a stall, is not the link's jitter
                sigma = float(np.std(np.clip(steps - np.median(steps), -half, half)) / np.sqrt(2))
                self._early_margin = sigma * self._tail_z + cfg.guard_s
            early = max(early, min(self.max_margin_s, self._early_margin + bump))
            if early <= self.margin_s and not self._misses:
                return None
            self._early_rose = True
            return early
        if self._early_rose:
            # The full estimate takes over: it may correct the early one either way, which is the start-up's
            # end, not a change of mind (reversals count from here).
            self._early_rose, self._catch_up, self._direction = False, True, 0
        p50, p99, latest = self._samples.median_p99_max()
        self._p99 = float(p99)
        margin = p50 + max(0.0, p99 - p50) * self._tail_stretch + cfg.guard_s + bump
        if cfg.misses_per_minute * cfg.window_s / 60 < 1:
            # Fewer than one miss a window allowed: its latest picture must be in time too.  A tail that is not
            # Gaussian (an encoder's slow frame every few seconds) lies beyond what the 99th percentile
            # extrapolates; on a noisy 16-CPU machine it missed 10 times a minute while the margin rose a bump
            # at a time.
            margin = max(margin, latest + cfg.guard_s + bump)
        if self._stall_floor_s is not None:
            margin = max(margin, self._stall_floor_s + cfg.guard_s + bump)
        seen = margin  # what the pictures have shown (their tail, the latest, the stalls and the misses)
        if self._stall_floor_s is None and cfg.stall_allowance_s:
            feared = p50 + cfg.stall_allowance_s
            if self.waits_like_free_running:
                feared = min(feared, self.max_margin_s - cfg.feared_below_free_running_s)
            margin = max(margin, feared + bump)
        # What the tail alone asks for, without the allowances for what it has not shown (stalls, misses): more
        # than the lock can spare is the display outrunning this machine or link.  So is what the pictures have
        # shown, where the lock at its ceiling still misses more than ``outrun_misses`` a minute beyond the
        # allowed rate: a tail of rare stalls that the percentiles do not show (a 16-CPU machine in a noisy
        # hour: 3 to 5 repeats a minute at 120 and 144 Hz while the tail alone fitted), which a player sees.
        tail = p50 + max(0.0, p99 - p50) * self._tail_stretch + cfg.guard_s
        missing = len(self._misses) > allowed + cfg.outrun_misses
        wanted = tail if tail > self.max_margin_s else seen if missing and seen > self.max_margin_s else None
        self._wanted_s = float(wanted) if self.waits_like_free_running and wanted is not None else None
        return float(min(self.max_margin_s, max(cfg.min_margin_s, margin)))

    def _turn(self, direction: int) -> None:
        if self._direction and direction != self._direction:
            self.reversals += 1
        self._direction = self._moving = direction

    def state(self) -> OffsetState:
        return OffsetState(
            offset_s=self.offset_s,
            deadline_s=self.deadline_s,
            margin_s=self.margin_s,
            flip_margin_s=self.flip_s,
            locked=self.locked,
            learning=len(self._samples) >= self.config.min_samples,
            p99_late_ms=None if self._p99 is None else self._p99 * 1000,
            misses_last_minute=len(self._misses),
            stall_late_ms=None if self._stall_floor_s is None else self._stall_floor_s * 1000,
            wanted_margin_ms=None if self._wanted_s is None else self._wanted_s * 1000,
        )
