"""When a viewer asks its host for half its display's rate (protocol.md §7.16); pure.

On a fast display (120, 144 Hz) a refresh is 7 to 8 ms. A machine that cannot make and show a picture that
often with room to spare (the host's encode, the viewer's decode, a busy CPU) spreads the pictures' ready
times wider than the automatic lock can cover without waiting longer than free-running would; the lock then
keeps free-running's wait and lets the latest pictures repeat (:attr:`OffsetState.wanted_margin_ms`). When
that happens often — at least :attr:`HalfRateConfig.repeat_share` of the refreshes over
:attr:`HalfRateConfig.window_s` — while the lock says so, the viewer asks the host for half its display's
rate, once: each picture is then held two refreshes by design
(:func:`~pyrofling.core.viewer.presentation.refreshes_per_picture`), twice the time for each stage, and the
motion is even instead of a repeat every few refreshes.

It asks only in the automatic mode (the lock is what judges the spread), only on displays of
:attr:`HalfRateConfig.min_refresh_hz` or more (at 60 Hz, half is 30 pictures a second: worse than a repeat now
and then), and only while each picture is shown one refresh.

Half the rate is judged once it has held :attr:`HalfRateConfig.judge_settle_s` and
:attr:`HalfRateConfig.judge_window_s`: where the pictures reach the screen more than
:attr:`HalfRateConfig.glass_allowance_ms` later in the median than in the window before the ask (on a machine whose
pictures are no sooner ready at half the rate, the lock's wait grows with the misses), it asks for the full rate
again (0: the host's own) and never asks for half again in this run. It does not ask for the full rate once half is
kept: nothing here can tell whether the machine would carry it now; a new viewer (or ``view --picture-rate full``)
does.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from pyrofling.core.samples import median_and_p95


@dataclass(frozen=True, slots=True)
class HalfRateConfig:
    #: Displays slower than this are never asked for half (60 Hz: 30 pictures a second would be worse).
    min_refresh_hz: float = 80.0
    #: The repeats are counted over this long ...
    window_s: float = 10.0
    #: ... after this long from the first refresh (the lock's start-up repeats are not the rule).
    settle_s: float = 5.0
    #: ... and half is asked for when at least this share of the refreshes in it repeated (1 %: 86 a minute at
    #: 143.86 Hz, against the lock's ≤ 1 a minute where the machine carries the rate).
    repeat_share: float = 0.01
    #: Half is given back when the pictures' capture -> screen median grew by more than this after it (the 1 ms a
    #: lock that cannot carry a rate may cost over free-running's wait) ...
    glass_allowance_ms: float = 1.0
    #: ... judged over this long at half (300 pictures at 60 a second: their median to a tenth of a millisecond;
    #: at most :attr:`window_s`, the glass times kept) ...
    judge_window_s: float = 5.0
    #: ... from this long after the stream came at half (the switch's own pictures: a key frame, the lock moving).
    #: Seven seconds in all, so that a 30 s turn of ``bench latency`` that asks at 15 s is judged in it.
    judge_settle_s: float = 2.0


class HalfRatePolicy:
    """:meth:`refresh` at each refresh of the automatic mode; it returns the rate to ask for, once."""

    def __init__(self, config: HalfRateConfig | None = None) -> None:
        self.config = config or HalfRateConfig()
        #: The rate asked for, mHz (0: none yet), and when.
        self.asked_mhz = 0
        self.asked_s: float | None = None
        #: When each refresh of the window repeated.
        self.repeats: deque[float] = deque()
        self._repeated_total = 0
        self._first_s: float | None = None
        #: Capture -> screen of the pictures shown in the last window (when, ms); its median when it asked.
        self.glass: deque[tuple[float, float]] = deque()
        self.glass_before_ms: float | None = None
        self.glass_after_ms: float | None = None
        #: When the stream came at half (each picture two refreshes), and when half was given back.
        self.halved_s: float | None = None
        self.back_s: float | None = None
        #: Half judged (kept or given back): nothing more to decide.
        self.settled = False

    def shown(self, now: float, glass_ms: float) -> None:
        """A picture reached the screen ``glass_ms`` after its capture."""
        self.glass.append((now, glass_ms))
        while self.glass and self.glass[0][0] <= now - self.config.window_s:
            self.glass.popleft()

    def _glass_median(self, since_s: float) -> float | None:
        return median_and_p95(ms for at, ms in self.glass if at >= since_s)[0]

    def verdict(self) -> str | None:
        """Half judged: what was found and done, a line for the log (None before, or with nothing to compare)."""
        before, after = self.glass_before_ms, self.glass_after_ms
        if not self.settled or before is None or after is None:
            return None
        done = (
            "asking the host for its own rate again (this viewer does not ask for half again)"
            if self.back_s is not None
            else "keeping half"
        )
        return (
            f"at half the rate the pictures reached the screen {after:.1f} ms after their capture in the median, "
            f"against {before:.1f} ms before: {done}"
        )

    def refresh(
        self,
        now: float,
        *,
        repeated_total: int,
        refresh_hz: float,
        cadence: int,
        outrun: bool,
        stream_hz: float | None = None,
    ) -> int | None:
        """``repeated_total``: refreshes repeated so far; ``cadence``: refreshes each picture is meant to stay;
        ``outrun``: the lock says the pictures' spread is wider than it can spare; ``stream_hz``: the stream's
        rate, if known (one at half the display's or below has nothing to halve). The rate to ask for, mHz, at
        the refresh it decides (0: the host's own rate again); else None."""
        cfg = self.config
        if self.settled:
            return None
        if self.asked_mhz:
            return self._judge(now, cadence)
        for _ in range(max(0, repeated_total - self._repeated_total)):
            self.repeats.append(now)
        self._repeated_total = max(self._repeated_total, repeated_total)
        while self.repeats and self.repeats[0] <= now - cfg.window_s:
            self.repeats.popleft()
        if self._first_s is None:
            self._first_s = now
        if not outrun or self.asked_mhz or refresh_hz < cfg.min_refresh_hz or cadence != 1:
            return None
        if stream_hz is not None and stream_hz <= refresh_hz / 2 * 1.01:
            return None
        if now - self._first_s < cfg.settle_s + cfg.window_s:
            return None
        if len(self.repeats) < cfg.repeat_share * refresh_hz * cfg.window_s:
            return None
        self.asked_mhz, self.asked_s = round(refresh_hz / 2 * 1000), now
        self.glass_before_ms = self._glass_median(now - cfg.window_s)
        return self.asked_mhz

    def _judge(self, now: float, cadence: int) -> int | None:
        """After the ask: once the stream has come at half and held a settle and a window, keep it or give it back."""
        cfg = self.config
        if self.halved_s is None:
            if cadence < 2:
                return None  # the host has not followed yet (or does not)
            self.halved_s = now
        if now - self.halved_s < cfg.judge_settle_s + cfg.judge_window_s:
            return None
        self.settled = True
        self.glass_after_ms = self._glass_median(self.halved_s + cfg.judge_settle_s)
        if self.glass_before_ms is None or self.glass_after_ms is None:
            return None
        if self.glass_after_ms <= self.glass_before_ms + cfg.glass_allowance_ms:
            return None
        self.asked_mhz, self.back_s = 0, now
        return 0
