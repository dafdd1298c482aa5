"""Audio playout decisions: how much audio waits ahead of the speaker, and how fast to play it.

Pure (no clocks, threads or devices): the viewer's audio shell
(:mod:`pyrofling.client.audio`) reports what the output callback saw and asks:

* :class:`DeviceClock` maps ring positions to the times they are heard, from the
  output callback's reports on the device's own playback clock;
* a rate controller (:class:`DriftController`, :class:`ReferenceRateController`)
  turns the buffered amount into a playback speed: ``speed = controller.update(now_s,
  buffered_s)``; ``speed > 1`` plays faster (the resampler's output/input ratio is
  ``nominal / speed``).

The host's and the viewer's audio clocks never agree exactly, so without control
the buffer drifts by the skew (500 ppm is 30 ms a minute).  The reference steers
``1 + 0.05·(buffered − target)``, clamped to ±0.5 % (Granite's `video/ffmpeg_decode.cpp`): a proportional
controller, so a skew of s leaves the buffer s/0.05 away from target (10 ms at
500 ppm) and every millisecond of network jitter moves the rate by 50 ppm.
:class:`DriftController` removes both: it filters the buffered amount over
a quarter of a second, learns the skew with an integrator (zero offset in steady
state) and keeps the proportional gain small once locked (little rate wobble).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Protocol

#: The reference's and pyrofling's limit on the speed change: ±0.5 %, about 9 cents.
MAX_TRIM = 0.005

RATE_CONTROLLERS = ("drift", "reference")


class RateController(Protocol):
    """``speed = update(now_s, buffered_s)``: called whenever a new chunk is about to be queued."""

    name: str
    target_s: float
    #: The speed last returned (1.0 before the first update).
    speed: float

    def update(self, now_s: float, buffered_s: float) -> float: ...

    def reset(self) -> None:
        """Forget the past (a new stream or a re-primed buffer); the learned skew may be kept."""
        ...


class ReferenceRateController:
    """PyroFling's rule: ``1 + 0.05·(buffered − target)``, clamped to ±0.5 % (Granite's `video/ffmpeg_decode.cpp`)."""

    name = "reference"

    def __init__(self, target_s: float) -> None:
        self.target_s = target_s
        self.speed = 1.0

    def update(self, now_s: float, buffered_s: float) -> float:
        delta = buffered_s - self.target_s
        self.speed = 1.0 + max(-MAX_TRIM, min(MAX_TRIM, 0.05 * delta))
        return self.speed

    def reset(self) -> None:
        pass


@dataclass(frozen=True, slots=True)
class DriftConfig:
    """Settings of :class:`DriftController`.  Times in seconds, rates as fractions."""

    #: Time constant of the low-pass filter on the buffered amount.
    filter_s: float = 0.5
    #: Proportional gain right after start, per second (1/gain: how long an offset takes to go).
    acquire_gain: float = 0.5
    #: Proportional gain once settled: small, so network jitter barely moves the rate.
    track_gain: float = 0.15
    #: The gain narrows from acquire to track over this long.
    settle_s: float = 10.0
    #: The skew fit forgets with this time constant (it follows slow drift of either clock).
    fit_s: float = 30.0
    #: The fit is used once it spans this long (before that the skew estimate stays at its prior).
    min_fit_span_s: float = 3.0
    #: Limit on the speed change (both the skew estimate and the total).
    max_trim: float = MAX_TRIM
    #: Updates further apart than this are a gap: the filter restarts from the new sample.
    max_dt_s: float = 0.2


class DriftController:
    """pyrofling's controller: a skew estimate from a drift fit, plus a small proportional pull.

    With ``speed`` applied, the buffer changes as ``d(buffered)/dt = skew − (speed − 1)``.
    So ``U(t) = buffered(t) + ∫(speed − 1)dt`` grows at exactly the clock skew, whatever the
    controller does: an exponentially weighted least-squares line through U gives the
    skew without bias from the starting offset (an integrator would wind up on it and
    take tens of seconds to unwind).  The speed is that skew plus a proportional term
    on the filtered buffer error, whose gain narrows after start so that jitter barely
    moves the rate once locked.
    """

    name = "drift"

    def __init__(self, target_s: float, config: DriftConfig | None = None) -> None:
        self.target_s = target_s
        self.config = config or DriftConfig()
        self.skew = 0.0  # estimated steady-state speed − 1; kept across reset()
        self.speed = 1.0
        self.filtered_s: float | None = None
        self._last_s: float | None = None
        self._running_s = 0.0  # time since start or reset, for the gain schedule and the fit span
        self._integral = 0.0  # ∫(speed − 1)dt
        self._mean_dt_s: float | None = None
        # Weighted sums of the fit, with times relative to the latest sample.
        self._s0 = self._st = self._stt = self._su = self._stu = 0.0

    def reset(self) -> None:
        self.filtered_s = None
        self._last_s = None
        self._running_s = 0.0
        self._integral = 0.0
        self._s0 = self._st = self._stt = self._su = self._stu = 0.0
        self.speed = self._clamp(1.0 + self.skew)

    @property
    def gain(self) -> float:
        cfg = self.config
        progress = min(1.0, self._running_s / cfg.settle_s) if cfg.settle_s > 0 else 1.0
        return cfg.acquire_gain * (cfg.track_gain / cfg.acquire_gain) ** progress

    def update(self, now_s: float, buffered_s: float) -> float:
        cfg = self.config
        if self._last_s is None or self.filtered_s is None:
            self._last_s = now_s
            self.filtered_s = buffered_s
            self._add_sample(0.0, buffered_s)
            self.speed = self._clamp(1.0 + self.skew)
            return self.speed
        dt = now_s - self._last_s
        if dt <= 0:
            return self.speed
        self._last_s = now_s
        if dt > cfg.max_dt_s:
            # A gap (a stall): nothing says what the buffer did in between; start over, keep the skew.
            self.reset()
            return self.update(now_s, buffered_s)
        self._integral += (self.speed - 1.0) * dt
        self._running_s += dt
        self._add_sample(dt, buffered_s + self._integral)
        if self._running_s >= cfg.min_fit_span_s:
            slope = self._slope()
            if slope is not None:
                self.skew = max(-cfg.max_trim, min(cfg.max_trim, slope))
        # Per-sample smoothing over filter_s worth of samples at the usual spacing: a late packet's
        # low reading must weigh the same as any other (weighting by the gap before it biases high).
        self._mean_dt_s = dt if self._mean_dt_s is None else self._mean_dt_s + 0.01 * (dt - self._mean_dt_s)
        self.filtered_s += (1.0 - math.exp(-self._mean_dt_s / cfg.filter_s)) * (buffered_s - self.filtered_s)
        self.speed = self._clamp(1.0 + self.skew + self.gain * (self.filtered_s - self.target_s))
        return self.speed

    def _add_sample(self, dt: float, u: float) -> None:
        """Shift the fit's time origin by ``dt`` to the new sample, forget, and add (0, u)."""
        decay = math.exp(-dt / self.config.fit_s)
        s0, st, su = self._s0, self._st, self._su
        self._stt = (self._stt - 2.0 * dt * st + dt * dt * s0) * decay
        self._stu = (self._stu - dt * su) * decay
        self._st = (st - dt * s0) * decay
        self._s0 = s0 * decay + 1.0
        self._su = su * decay + u

    def _slope(self) -> float | None:
        den = self._s0 * self._stt - self._st * self._st
        if den <= 1e-12:
            return None
        return (self._s0 * self._stu - self._st * self._su) / den

    def _clamp(self, speed: float) -> float:
        m = self.config.max_trim
        return max(1.0 - m, min(1.0 + m, speed))


def make_rate_controller(name: str, target_s: float) -> RateController:
    if name == "drift":
        return DriftController(target_s)
    if name == "reference":
        return ReferenceRateController(target_s)
    raise ValueError(f"unknown audio rate controller {name!r}; choose from {', '.join(RATE_CONTROLLERS)}")


def cents(speed: float) -> float:
    """A speed factor as a pitch change in cents (1200 per octave); 0.05 % ≈ 0.87 cents."""
    return 1200.0 * math.log2(speed) if speed > 0 else float("-inf")


class DeviceClock:
    """When each ring frame is heard, from the output callback's reports.

    The callback reports, per block: the ring position of the block's first frame,
    the device time it will be heard (PortAudio's ``outputBufferDacTime``), the
    device's "now" (``currentTime``) and the local monotonic time the callback ran.
    The device clock is mapped to the local clock by the smallest ``local − device``
    difference seen over the last ``window`` callbacks: a late callback only makes
    the difference larger, so the minimum is the true offset (plus any drift of the
    device clock, which the window follows).
    """

    def __init__(self, rate: float, *, window: int = 64) -> None:
        self.rate = rate
        self._offsets: deque[float] = deque(maxlen=window)
        self.offset_s: float | None = None
        self.read_pos: int | None = None
        self.dac_local_s = 0.0  # when the frame at read_pos is heard, local clock
        self.latency_s = 0.0  # device latency: dac − current of the last block

    def callback(self, read_pos: int, dac_s: float, current_s: float, local_s: float) -> None:
        self._offsets.append(local_s - current_s)
        self.offset_s = min(self._offsets)
        self.read_pos = read_pos
        self.dac_local_s = dac_s + self.offset_s
        self.latency_s = max(0.0, dac_s - current_s)

    @property
    def ready(self) -> bool:
        return self.read_pos is not None

    def heard_at(self, pos: float) -> float | None:
        """Local time at which ring position ``pos`` is (or was) heard; None before any callback."""
        if self.read_pos is None:
            return None
        return self.dac_local_s + (pos - self.read_pos) / self.rate

    def position_at(self, now_s: float) -> float | None:
        """The ring position being heard at local time ``now_s``."""
        if self.read_pos is None:
            return None
        return self.read_pos + (now_s - self.dac_local_s) * self.rate

    def buffered_s(self, write_pos: int, now_s: float) -> float | None:
        """Audio queued ahead of the speaker at ``now_s``: how long a frame written now waits to be heard."""
        pos = self.position_at(now_s)
        if pos is None:
            return None
        return max(0.0, (write_pos - pos) / self.rate)
