"""The host's frame clock: a heartbeat the phase-locked viewers steer (protocol.md §7.4).

Pure.  The host shell sleeps until :meth:`FrameClock.next_timer`, then calls
:meth:`FrameClock.handle_timer` with the time it woke up; the returned
:class:`Tick` says which heartbeat this is, how many were missed while the host
was busy, and whether to encode on it (``--client-rate-multiplier``).  PHASE_OFFSET
messages go to :meth:`FrameClock.feedback` as they arrive.

Each tick a :class:`PhaseController` turns the viewers' combined phase error
(µs, positive = "deliver later") into a one-off shift of the next tick and the
interval after it.  Two controllers, chosen by name:

* ``reference`` — the reference host's: sign only, a 200 µs dead-band, a nudge of
  0.6 % of a period per tick, and an interval trim of 0.01 % steps (±50) that
  always relaxes back toward nominal.
* ``pi`` (default) — a type-2 loop on the measured magnitude: a proportional
  phase correction plus an integrated frequency trim.  Its gains start high
  (fast acquisition) and narrow as samples accumulate, like a least-squares fit
  of phase and frequency, so network jitter averages out once locked; outliers
  are rejected, the integrator does not wind up, and both outputs are limited.
  What counts as an outlier, and as a lost lock, scales with the feedback's own
  measured noise: a jittery link's noise is averaged, never mistaken for a move.

Several phase-locked viewers cannot all be locked when their displays run at
different rates, so by default the clock follows one *leader*: the viewer that
has sent feedback the longest, until it goes quiet for ``leader_timeout_s``;
the others are measured but do not steer.  ``sum`` reproduces the reference,
which adds every viewer's offsets together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

CONTROLLERS = ("pi", "reference")
POLICIES = ("leader", "sum")


@dataclass(frozen=True, slots=True)
class ClockAdjustment:
    """What a controller decided for the coming tick."""

    #: Move the next tick by this much (positive = later), once.
    phase_shift_s: float
    #: Interval between ticks from the next one on.
    interval_s: float


class PhaseController(Protocol):
    """Turns phase feedback into clock adjustments.  Called once per heartbeat."""

    name: str

    def update(self, error_us: float | None) -> ClockAdjustment:
        """``error_us``: the feedback since the previous tick, combined (None: none arrived)."""
        ...


class ReferenceController:
    """The reference host's controller, step for step (PyroFling's `pyrofling.cpp`), in integer nanoseconds."""

    name = "reference"
    DEAD_BAND_US = 200
    NUDGE_STEPS = 60  # phase nudge per tick, in interval steps (0.6 % of a period)
    MAX_STEPS = 50  # interval trim limit, in steps of 0.01 %

    def __init__(self, period_s: float) -> None:
        self.base_ns = int(period_s * 1e9)
        self.frac_ns = self.base_ns // 10000
        self.steps = 0  # k: interval offset in 0.01 % steps

    def update(self, error_us: float | None) -> ClockAdjustment:
        shift_ns = 0
        s = error_us or 0.0
        if abs(s) > self.DEAD_BAND_US:
            if s > 0 and self.steps < self.MAX_STEPS:
                self.steps += 2
                shift_ns = self.NUDGE_STEPS * self.frac_ns
            elif s < 0 and self.steps > -self.MAX_STEPS:
                self.steps -= 2
                shift_ns = -self.NUDGE_STEPS * self.frac_ns
        if self.steps > 0:  # always relax toward nominal
            self.steps -= 1
        elif self.steps < 0:
            self.steps += 1
        interval_ns = self.base_ns + self.steps * self.frac_ns
        return ClockAdjustment(shift_ns * 1e-9, interval_ns * 1e-9)


@dataclass(frozen=True, slots=True)
class PiConfig:
    """Gains are per tick; errors in seconds.  Defaults tuned with ``pyrofling bench phase``."""

    #: Proportional gain on the first sample after (re)acquisition.  From there the gains narrow
    #: like a least-squares line fit over the n samples seen (kp = 4/(4/acquire_kp + n), the
    #: frequency gain ki = ki_ratio · kp²), so network jitter averages out over ever more
    #: frames, down to a floor of ``track_kp`` that keeps following slow changes.
    acquire_kp: float = 0.25
    track_kp: float = 0.012
    ki_ratio: float = 0.25
    #: Frequency gain ceiling: the feedback arrives a tick or two late, and a fast integrator
    #: would overshoot on the large errors of acquisition.
    max_ki: float = 0.0005
    #: Reported as locked while the smoothed error is within this (diagnostics only).
    lock_enter_s: float = 0.0008
    #: Acquire again (gains back to ``acquire_kp``) when the smoothed error leaves this, or ``exit_sigmas``
    #: times the smoothed error's own noise if more: on a link whose delay varies by σ 3 ms the smoothed
    #: error alone left 2 ms ten times a minute, and each time the high gains put the noise into the clock.
    lock_exit_s: float = 0.002
    exit_sigmas: float = 4.0
    #: Weight of a new sample in the smoothed error.
    smoothing: float = 0.1
    #: A sample further than this (or ``outlier_sigmas`` times the samples' noise, if more) from the smoothed
    #: error is an outlier (a stall, a lost frame) and is ignored, unless outliers keep coming: then the phase
    #: really moved.
    outlier_s: float = 0.006
    outlier_sigmas: float = 4.0
    max_outliers: int = 6
    #: Weight of a new sample in the noise estimate (the samples' variance around the smoothed error).
    noise_smoothing: float = 0.02
    #: Largest phase shift per tick, as a share of the period (a game's frame time changes by this much).
    max_step: float = 0.1
    #: Largest interval trim, as a share of the period (the reference's effective limit: 0.5 %).
    max_trim: float = 0.005


class PiController:
    """Proportional phase + integral frequency loop with gear shifting.  See the module docstring."""

    name = "pi"

    def __init__(self, period_s: float, config: PiConfig | None = None) -> None:
        self.config = config or PiConfig()
        self.period_s = period_s
        self.trim_s = 0.0  # integrated frequency correction: interval = period + trim
        self.locked = False
        self.smoothed_s = 0.0
        self.kp = self.config.acquire_kp
        self.samples = 0  # since the last (re)acquisition: the gains narrow as it grows
        self.outliers = 0
        self.rejected = 0
        self.reacquisitions = 0
        #: The samples' variance around the smoothed error (s²): how much of each sample is noise.
        self.noise_var_s2 = 0.0

    @property
    def noise_s(self) -> float:
        """The feedback's own noise (σ, s): the network's and the stages' jitter the loop must not follow."""
        return float(self.noise_var_s2**0.5)

    def update(self, error_us: float | None) -> ClockAdjustment:
        cfg = self.config
        if error_us is None:
            return ClockAdjustment(0.0, self.period_s + self.trim_s)
        e = error_us * 1e-6
        noise = self.noise_s
        outlier_s = max(cfg.outlier_s, cfg.outlier_sigmas * noise)
        if self.samples > 8:  # acquired: what is left is noise (a stall's one sample does not swell it)
            deviation = min(abs(e - self.smoothed_s), 2 * outlier_s)
            self.noise_var_s2 += cfg.noise_smoothing * (deviation**2 - self.noise_var_s2)
        if self.samples > 8 and abs(e - self.smoothed_s) > outlier_s:
            self.outliers += 1
            if self.outliers <= cfg.max_outliers:
                self.rejected += 1
                return ClockAdjustment(0.0, self.period_s + self.trim_s)
            self._reacquire(e)  # not a blip: the phase moved
        self.outliers = 0
        self.smoothed_s += cfg.smoothing * (e - self.smoothed_s)
        # The smoothed error's own noise: an EWMA of weight a keeps a/(2 − a) of the samples' variance.
        smoothed_noise = noise * (cfg.smoothing / (2 - cfg.smoothing)) ** 0.5
        if self.samples > 8 and abs(self.smoothed_s) > max(cfg.lock_exit_s, cfg.exit_sigmas * smoothed_noise):
            self._reacquire(self.smoothed_s)
        self.samples += 1
        self.locked = abs(self.smoothed_s) < cfg.lock_enter_s
        self.kp = max(cfg.track_kp, 4.0 / (4.0 / cfg.acquire_kp + self.samples))
        max_step = cfg.max_step * self.period_s
        shift = self.kp * e
        if abs(shift) < max_step:  # integrate only while not saturated (no wind-up on big errors)
            max_trim = cfg.max_trim * self.period_s
            self.trim_s = min(max_trim, max(-max_trim, self.trim_s + min(cfg.max_ki, cfg.ki_ratio * self.kp**2) * e))
        shift = min(max_step, max(-max_step, shift))
        return ClockAdjustment(shift, self.period_s + self.trim_s)

    def _reacquire(self, error_s: float) -> None:
        self.samples = 0
        self.smoothed_s = error_s
        self.reacquisitions += 1


def make_controller(name: str, period_s: float) -> PhaseController:
    if name == "pi":
        return PiController(period_s)
    if name == "reference":
        return ReferenceController(period_s)
    raise ValueError(f"unknown phase controller {name!r}; choose one of: {', '.join(CONTROLLERS)}")


@dataclass(frozen=True, slots=True)
class Tick:
    """One heartbeat, as :meth:`FrameClock.handle_timer` reports it."""

    index: int  # heartbeats since start, missed ones included
    due_s: float  # when it was scheduled
    missed: int  # heartbeats that passed while the host was busy (the reference logs them as dropped)
    encode: bool  # False on the ticks a client rate multiplier skips
    error_us: float | None  # the feedback the controller acted on


@dataclass(slots=True)
class _Viewer:
    first_s: float
    last_s: float
    total_us: float = 0.0
    count: int = 0


class FrameClock:
    """The heartbeat at ``fps × multiplier``, steered by phase feedback."""

    def __init__(
        self,
        *,
        fps: float,
        start_s: float,
        controller: str | PhaseController = "pi",
        multiplier: int = 1,
        policy: str = "leader",
        leader_timeout_s: float = 1.0,
    ) -> None:
        if fps <= 0:
            raise ValueError("fps must be positive")
        if multiplier < 1:
            raise ValueError("the client rate multiplier must be at least 1")
        if policy not in POLICIES:
            raise ValueError(f"unknown phase policy {policy!r}; choose one of: {', '.join(POLICIES)}")
        self.fps = fps
        self.nominal_s = 1.0 / (fps * multiplier)
        self.multiplier = multiplier
        self.policy = policy
        self.leader_timeout_s = leader_timeout_s
        self.controller = make_controller(controller, self.nominal_s) if isinstance(controller, str) else controller
        self.interval_s = self.nominal_s
        self.next_tick_s = start_s
        self.index = -1
        self.missed_total = 0
        self.feedback_total = 0
        self.feedback_ignored = 0  # from viewers that were not the leader
        self.leader: int | None = None
        self._viewers: dict[int, _Viewer] = {}

    def next_timer(self) -> float:
        return self.next_tick_s

    def set_fps(self, fps: float) -> None:
        """Tick at ``fps`` (times the multiplier) after the next tick: the phase controller starts again at the
        new period (a named one; the viewers' feedback locks it again within a few seconds)."""
        if fps <= 0:
            raise ValueError("fps must be positive")
        self.fps = fps
        self.nominal_s = self.interval_s = 1.0 / (fps * self.multiplier)
        if isinstance(self.controller, PiController):
            self.controller = PiController(self.nominal_s, self.controller.config)
        elif isinstance(self.controller, ReferenceController):
            self.controller = ReferenceController(self.nominal_s)

    def feedback(self, conn_id: int, offset_us: int, now: float) -> None:
        """A PHASE_OFFSET from a kicked viewer (µs, positive = deliver later)."""
        self.feedback_total += 1
        v = self._viewers.get(conn_id)
        if v is None:
            v = self._viewers[conn_id] = _Viewer(first_s=now, last_s=now)
        v.last_s = now
        v.total_us += offset_us
        v.count += 1

    def viewer_left(self, conn_id: int) -> None:
        self._viewers.pop(conn_id, None)
        if self.leader == conn_id:
            self.leader = None

    def handle_timer(self, now: float) -> Tick | None:
        """Call when :meth:`next_timer` has passed; returns the tick (None if woken early)."""
        if now < self.next_tick_s:
            return None
        expirations = 1 + int((now - self.next_tick_s) / self.interval_s)
        due = self.next_tick_s + (expirations - 1) * self.interval_s
        error_us = self._combine(now)
        adj = self.controller.update(error_us)
        self.next_tick_s = due + self.interval_s + adj.phase_shift_s
        self.interval_s = adj.interval_s
        first = self.index + 1
        self.index += expirations
        self.missed_total += expirations - 1
        # Decimation for --client-rate-multiplier: encode on every multiplier-th heartbeat
        # (if a missed one would have encoded, encode on this one instead).
        encode = self.index // self.multiplier != (first - 1) // self.multiplier
        return Tick(self.index, due, expirations - 1, encode, error_us)

    def _combine(self, now: float) -> float | None:
        """Feedback since the last tick, per the policy; resets the accumulators."""
        for conn_id, v in list(self._viewers.items()):
            if now - v.last_s > self.leader_timeout_s:
                del self._viewers[conn_id]
                if self.leader == conn_id:
                    self.leader = None
        if not self._viewers:
            return None
        result: float | None
        if self.policy == "sum":
            total = sum(v.total_us for v in self._viewers.values())
            any_new = any(v.count for v in self._viewers.values())
            result = total if any_new else None
        else:
            if self.leader is None:
                self.leader = min(self._viewers, key=lambda c: (self._viewers[c].first_s, c))
            lead = self._viewers[self.leader]
            result = lead.total_us / lead.count if lead.count else None
            self.feedback_ignored += sum(v.count for c, v in self._viewers.items() if c != self.leader)
        for v in self._viewers.values():
            v.total_us, v.count = 0.0, 0
        return result

    @property
    def rate_trim_ppm(self) -> float:
        """How far the interval is from nominal, parts per million (positive = slower)."""
        return (self.interval_s / self.nominal_s - 1.0) * 1e6

    def summary(self) -> dict[str, object]:
        """What the clock did, for the host's statistics."""
        return {
            "phase_controller": self.controller.name,
            "phase_feedback": self.feedback_total,
            "phase_feedback_ignored": self.feedback_ignored,
            "heartbeats": self.index + 1,
            "heartbeats_missed": self.missed_total,
            "rate_trim_ppm": self.rate_trim_ppm,
            # How often the loop took its high gains again (a lost lock, or noise taken for one).
            "phase_reacquisitions": pi.reacquisitions if isinstance(pi := self.controller, PiController) else None,
        }
