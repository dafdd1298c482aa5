"""The presentation shell: runs :class:`~pyrofling.core.viewer.presentation.PresentationLoop` against a display.

Once per display refresh it waits for the vblank — the return of a blocking
vsync'd flip where the display has one, else a software
:class:`~pyrofling.core.viewer.presentation.RefreshClock` at the display's rate (Xvfb,
headless, or ``--refresh-hz`` to simulate 59.94 Hz) — then lets the pure loop
choose a picture (waiting for one up to the deadline), hands it to the display,
and reports the phase error for PHASE_OFFSET.  The window runs it on pyglet's
main thread; headless viewers run it on a thread of its own.

Decoded pictures arrive from the decode thread through :meth:`Presenter.submit`.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, TextIO

from pyrofling.client.display import Display, HeadlessDisplay, Picture, PictureTiming
from pyrofling.client.presentation_stats import PresentationStats
from pyrofling.clocks import SYSTEM_CLOCK, Clock
from pyrofling.core.samples import LIVE_SAMPLES, median_and_p95, tail
from pyrofling.core.viewer.picture_quality import RefreshQuality
from pyrofling.core.viewer.picture_rate import HalfRatePolicy
from pyrofling.core.viewer.presentation import (
    Present,
    PresentationConfig,
    PresentationLoop,
    RefreshClock,
    Repeat,
    Wait,
    refreshes_per_picture,
)
from pyrofling.core.viewer.stage_tails import StageTails
from pyrofling.runtime import COLLECTOR_PAUSES, THREAD_PRIORITIES

log = logging.getLogger(__name__)

__all__ = ["Display", "HeadlessDisplay", "Picture", "PictureTiming", "PresentationStats", "Presenter"]


class Presenter:
    """Drives the presentation loop; :meth:`run` blocks until ``stop`` is set or the display closes."""

    def __init__(
        self,
        config: PresentationConfig,
        display: Display,
        *,
        refresh_hz: float | None = None,
        skew_ppm: float = 0.0,
        stream_hz: Callable[[], float | None] = lambda: None,
        on_phase_error: Callable[[int], None] = lambda _us: None,
        on_picture_rate: Callable[[int], None] | None = None,
        max_pending: int = 16,
        judge_refreshes: bool = False,
        frame_trace: TextIO | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """``on_picture_rate``: ask the host for this rate, mHz, when the lock cannot carry the display's (None:
        never); ``clock``: what it reads and waits on (a test's virtual one; pictures' times are on it too)."""
        self.config = config
        self.clock = clock
        self.display = display
        self.refresh_hz = refresh_hz
        self.skew_ppm = skew_ppm
        self.stream_hz = stream_hz
        self.on_phase_error = on_phase_error
        self.on_picture_rate = on_picture_rate
        #: When to ask the host for half the display's rate (protocol.md §7.16).
        self.half_rate = HalfRatePolicy()
        self._glass_before_ask: int | None = None  # how many glass samples came before it asked (benches split them)
        self.stats = PresentationStats()
        self._inbox: queue.Queue[Picture] = queue.Queue(maxsize=max_pending)
        self._started_s = clock.now()
        self._last_on_screen_s: float | None = None
        self._logged_offset_s: float | None = None
        self._said_outrun = False  # said that the display outruns what the lock can cover
        #: Judge every refresh by the picture on screen (pictures carry ``clean``: the bench's scene check).
        self._judge = judge_refreshes
        self.quality: RefreshQuality | None = None
        self._on_screen: Picture | None = None
        #: A JSON line per refresh that showed a new picture or missed its deadline, and per picture dropped
        #: unseen: where the time went.
        self._trace = frame_trace
        self._fed: list[tuple[Picture, float]] = []  # traced: pictures given to the loop, when it got them
        #: Each stage's median and once-a-minute tail, start-up apart (in the final statistics).
        self._stage_tails = StageTails()

    # -- decode thread -------------------------------------------------------------------------

    def submit(self, picture: Picture) -> None:
        """Hand over a decoded picture.  Never blocks: if the presenter is far behind, the oldest goes."""
        while True:
            try:
                self._inbox.put_nowait(picture)
                return
            except queue.Full:
                try:
                    self._inbox.get_nowait()
                    with self.stats.lock:
                        self.stats.dropped += 1
                except queue.Empty:
                    pass

    # -- presenter thread ----------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        THREAD_PRIORITIES.apply("presenter")
        first = self._first_picture(stop)
        if first is None:
            return
        hz = self.refresh_hz or self.display.refresh_hz or self.stream_hz() or 60.0
        refresh = RefreshClock(hz, self.clock.now(), skew_ppm=self.skew_ppm)
        vsync = self.display.vsync_blocks and not self.refresh_hz and not self.skew_ppm
        with self.stats.lock:
            self.stats.refresh_hz = refresh.hz
            self.stats.clock = "vsync" if vsync else "software"
            self.stats.keep_two_minutes_at(refresh.hz)
        log.info(
            "presenting at %.3f Hz (%s refresh clock)%s",
            refresh.hz,
            "vsync" if vsync else "software",
            self._mode_text(),
        )
        log.info("%s", THREAD_PRIORITIES.summary())  # decoder, event loop and presenter have started
        if self._judge:
            with self.stats.lock:
                self.quality = RefreshQuality(1.0 / (self.stream_hz() or refresh.hz))
        loop: PresentationLoop[Picture] = PresentationLoop(self.config, refresh.period_s)
        self._follow_cadence(loop, refresh.hz)
        self._ready(loop, first)
        vblank = self.clock.now()
        flipped_late = False  # the last picture was picked after the refresh it was meant for
        while not stop.is_set():
            if not vsync:
                previous = vblank
                grace = 0.0 if flipped_late else loop.late_grace_s
                vblank = refresh.following(previous, self.clock.now(), grace_s=grace)
                skipped = round((vblank - previous) / refresh.period_s) - 1
                if skipped > 0:  # the decision came after the next refresh: those refreshes repeated
                    loop.refreshes_skipped(skipped)
                    self._count_skipped(loop, previous, skipped, refresh.period_s)
                if self._sleep_until(vblank, stop):
                    return
            loop.vblank(vblank)
            self._follow_cadence(loop, refresh.hz)  # a stream that came back at another rate
            decision = self._decide(loop, vblank, stop)
            if decision is None:
                return
            flipped_late = isinstance(decision, Present) and self.clock.now() > decision.on_screen_s
            self._record(loop, decision, vblank)
            self.display.present(decision.frame if isinstance(decision, Present) else None)
            if vsync:
                vblank = self.clock.now()  # the flip returned: that was the refresh
            if not self.display.pump_events():
                return

    def _follow_cadence(self, loop: PresentationLoop[Picture], refresh_hz: float) -> None:
        """A stream at half the display's rate (60 fps on 120 Hz) keeps each picture two refreshes by design."""
        cadence = refreshes_per_picture(refresh_hz, self.stream_hz())
        if cadence != loop.cadence:
            loop.cadence = cadence
            log.info("the stream's pictures each stay %d refresh%s", cadence, "es (its rate divides the display's)"
                     if cadence > 1 else "")  # fmt: skip

    def _count_skipped(self, loop: PresentationLoop[Picture], last_s: float, count: int, period_s: float) -> None:
        with self.stats.lock:
            st = self.stats
            st.repeated, st.skipped = loop.counters.repeated, loop.counters.skipped
            for i in range(1, count + 1):
                st.repeat_times.append(round(last_s + i * period_s - self._started_s, 4))
                st.graph_repeat.append(True)
                self._rate_refresh(last_s + i * period_s, fresh=False)

    def _rate_refresh(self, at_s: float, *, fresh: bool) -> None:
        """Tell the picture-quality tracker what a refresh showed (the picture on screen; ``fresh``: new)."""
        if self.quality is not None:
            shown = self._on_screen
            self.quality.refresh(
                at_s,
                capture_s=shown.capture_s if shown is not None else None,
                clean=shown.clean if shown is not None else None,
                fresh=fresh,
            )

    def _first_picture(self, stop: threading.Event) -> Picture | None:
        while not stop.is_set():
            if not self.display.pump_events():
                return None
            try:
                return self.clock.get(self._inbox, 0.02)
            except queue.Empty:
                continue
        return None

    def _decide(
        self, loop: PresentationLoop[Picture], vblank: float, stop: threading.Event
    ) -> Present[Picture] | Repeat | None:
        self._drain(loop)
        while True:
            decision = loop.poll(self.clock.now())
            if not isinstance(decision, Wait):
                return decision
            timeout = decision.until_s - self.clock.now()
            if timeout > 0:
                try:
                    picture = self.clock.get(self._inbox, timeout)
                except queue.Empty:
                    continue
                self._ready(loop, picture)
                self._drain(loop)
            if stop.is_set():
                return None

    def _drain(self, loop: PresentationLoop[Picture]) -> None:
        while True:
            try:
                picture = self._inbox.get_nowait()
            except queue.Empty:
                return
            self._ready(loop, picture)

    def _ready(self, loop: PresentationLoop[Picture], picture: Picture) -> None:
        if self._trace is not None:
            self._fed.append((picture, self.clock.now()))
        if picture.capture_s is not None:
            ready = (round(picture.done_s - self._started_s, 4), (picture.done_s - picture.capture_s) * 1000)
            with self.stats.lock:  # summary() copies it from another thread
                self.stats.ready_trace.append(ready)
        loop.frame_ready(picture, picture.done_s, picture.pts_us / 1e6)

    def _record(self, loop: PresentationLoop[Picture], decision: Present[Picture] | Repeat, vblank: float) -> None:
        c = loop.counters
        st = self.stats
        error_us = decision.phase_error_us if isinstance(decision, Present) else None
        repeated = c.repeated > st.repeated
        fresh = isinstance(decision, Present)
        if isinstance(decision, Present):
            self._on_screen = decision.frame
        with st.lock:
            self._rate_refresh(vblank, fresh=fresh)
            st.presented, st.repeated, st.missed_deadlines = c.presented, c.repeated, c.missed_deadlines
            st.held = c.held
            st.offset_ms, st.deadline_ms = loop.offset_s * 1000, loop.deadline_s * 1000
            if loop.auto is not None:
                a = loop.auto.state()
                st.auto = {
                    "margin_ms": a.margin_s * 1000,
                    "flip_margin_ms": a.flip_margin_s * 1000,
                    "locked": a.locked,
                    "learning": a.learning,
                    "p99_late_ms": a.p99_late_ms,
                    "misses_last_minute": a.misses_last_minute,
                    "stall_late_ms": a.stall_late_ms,
                    "reversals": loop.auto.reversals,
                }
            st.dropped += decision.dropped if isinstance(decision, Present) else 0
            st.graph_repeat.append(repeated)
            if repeated:
                st.repeat_times.append(round(self.clock.now() - self._started_s, 4))
            if isinstance(decision, Present):
                picture = decision.frame
                t = picture.timing
                if t is not None:
                    self._stage_tails.picture(
                        first_s=t.first_s,
                        complete_s=t.complete_s,
                        queued_s=t.queued_s,
                        decode_start_s=t.decode_start_s,
                        decoded_s=t.decoded_s,
                        done_s=picture.done_s,
                    )
                if self._last_on_screen_s is not None:
                    st.graph_pace_ms.append((decision.on_screen_s - self._last_on_screen_s) * 1000)
                self._last_on_screen_s = decision.on_screen_s
                if picture.capture_s is not None:
                    glass = (decision.on_screen_s - picture.capture_s) * 1000
                    st.glass_ms.append(glass)
                    st.graph_glass_ms.append(glass)
                    if self.on_picture_rate is not None and not self.half_rate.settled:  # judged: no more to keep
                        self.half_rate.shown(decision.on_screen_s, glass)
                if error_us is not None:
                    st.graph_phase_ms.append(error_us / 1000)
                    st.phase_trace.append((round(decision.on_screen_s - self._started_s, 4), error_us))
                    if self.config.phase_locked:
                        st.phase_offsets_sent += 1
        if error_us is not None and self.config.phase_locked:
            self.on_phase_error(error_us)
        if loop.auto is not None:
            self._log_offset(loop)
        if self._trace is not None and (isinstance(decision, Present) or decision.missed_deadline):
            self._write_trace(loop, decision, vblank)

    def close_trace(self) -> None:
        if self._trace is not None:
            self._trace.close()

    def _write_trace(self, loop: PresentationLoop[Picture], decision: Present[Picture] | Repeat, vblank: float) -> None:
        assert self._trace is not None
        now = self.clock.now()
        record: dict[str, Any] = {"vblank": vblank, "offset": loop.offset_s, "deadline": loop.deadline_s, "picked": now}
        if isinstance(decision, Present):
            p = decision.frame
            shown = next((i for i, (q, _) in enumerate(self._fed) if q is p), None)
            if shown is not None:  # the ones before it were dropped: when did they come, and when were they seen?
                for q, seen in self._fed[:shown]:
                    self._trace.write(
                        json.dumps(self._picture_record(q, seen, vblank=vblank, dropped_picture=True)) + "\n"
                    )
                record.update(self._picture_record(p, self._fed[shown][1]))
                del self._fed[: shown + 1]
            record.update(late=decision.late_s, on_screen=decision.on_screen_s, dropped=decision.dropped)
        else:
            record.update(miss=True, waiting=len(self._fed))
        self._trace.write(json.dumps(record) + "\n")
        for pause in COLLECTOR_PAUSES.drain():  # what stopped this process meanwhile
            self._trace.write(json.dumps(pause) + "\n")

    @staticmethod
    def _picture_record(p: Picture, seen: float, **extra: Any) -> dict[str, Any]:
        record: dict[str, Any] = {"done": p.done_s, "seen": seen, "capture": p.capture_s, **extra}
        if p.timing is not None:
            record.update(asdict(p.timing))
        return record

    def _log_offset(self, loop: PresentationLoop[Picture]) -> None:
        """Say where the automatic offset settles, and when it moves by a millisecond or more."""
        auto = loop.auto
        assert auto is not None
        a = auto.state()
        if self.on_picture_rate is not None and not self.half_rate.settled:  # once judged, nothing to decide
            hz = 1 / loop.period_s
            asked = self.half_rate.refresh(self.clock.now(), repeated_total=loop.counters.repeated, refresh_hz=hz,
                                           cadence=loop.cadence, outrun=a.wanted_margin_ms is not None,
                                           stream_hz=self.stream_hz())  # fmt: skip
            if (verdict := self.half_rate.verdict()) is not None:  # once: judged, it is not asked again
                log.info("%s", verdict)
            if asked == 0:
                self.on_picture_rate(0)
            elif asked is not None:
                with self.stats.lock:
                    self._glass_before_ask = len(self.stats.glass_ms)
                log.info("%d refreshes of the last %g s repeated: asking the host for %.4g pictures a second, "
                         "each shown two refreshes", len(self.half_rate.repeats), self.half_rate.config.window_s,
                         asked / 1000)  # fmt: skip
                self.on_picture_rate(asked)
        if a.wanted_margin_ms is not None and not self._said_outrun:  # once: the rule, not each wobble of it
            self._said_outrun = True
            # Where the host cannot keep the display's rate, half of it keeps each picture two refreshes.
            half = ""
            if loop.cadence == 1 and self.on_picture_rate is not None:
                half = "; if that happens often, this viewer asks the host for half the rate"
            elif loop.cadence == 1:
                half = (f"; if the host cannot make {1 / loop.period_s:.0f} pictures a second, host --fps "
                        f"{0.5 / loop.period_s:.0f} shows each one two refreshes without a repeat")  # fmt: skip
            log.info("the display refreshes every %.1f ms and the pictures' ready times spread wider than a lock "
                     "can spare (their tail asks %.1f ms of margin): a picture waits at most %.1f ms, about what "
                     "free-running would make it wait, and the latest ones repeat%s", loop.period_s * 1000,
                     a.wanted_margin_ms, (auto.max_margin_s + a.flip_margin_s) * 1000, half)  # fmt: skip
        if not a.learning:
            return
        if self._logged_offset_s is None or abs(loop.offset_s - self._logged_offset_s) >= 0.001:
            first = self._logged_offset_s is None
            self._logged_offset_s = loop.offset_s
            a = auto.state()
            log.info(
                "phase offset %s %+.1f ms (deadline %.1f ms, margin %.1f ms for a 99th-percentile lateness of "
                "%.1f ms, %d missed refreshes in the last minute)",
                "learnt:" if first else "now",
                loop.offset_s * 1000,
                loop.deadline_s * 1000,
                a.margin_s * 1000,
                a.p99_late_ms or 0.0,
                a.misses_last_minute,
            )

    def _sleep_until(self, deadline: float, stop: threading.Event) -> bool:
        """Sleep precisely until ``deadline``; True if stopped meanwhile."""
        while True:
            delay = deadline - self.clock.now()
            if delay <= 0:
                return stop.is_set()
            if self.clock.wait(stop, min(delay, 0.1)):
                return True

    def _mode_text(self) -> str:
        cfg = self.config
        parts = []
        if cfg.auto_offset:
            parts.append("phase-locked, offset and deadline found automatically")
        elif cfg.phase_locked:
            parts.append(f"phase-locked, offset {cfg.offset_s * 1000:+.1f} ms")
        if cfg.deadline_s > 0 and not cfg.auto_offset:
            parts.append(f"deadline {cfg.deadline_s * 1000:.1f} ms")
        if not cfg.fifo:
            parts.append("free-running (newest picture at each refresh)")
        return "; " + ", ".join(parts)

    def summary(self, *, samples: bool = True) -> dict[str, Any]:
        """Counters and the glass-to-glass median and 95th percentile; ``samples``: also every sample (the final
        statistics; live ones leave them out, as serializing them every second would hold up the viewer, and
        take the median over the last ``LIVE_SAMPLES``)."""
        with self.stats.lock:
            st = self.stats
            glass = list(st.glass_ms) if samples else tail(st.glass_ms, LIVE_SAMPLES)
            out: dict[str, Any] = {
                "refresh_hz": st.refresh_hz,
                "refresh_clock": st.clock,
                "mode": self.config.mode,
                "offset_ms": st.offset_ms,
                "deadline_ms": st.deadline_ms,
                **({"auto_offset": dict(st.auto)} if st.auto is not None else {}),
                "presented": st.presented,
                "repeated": st.repeated,
                "held_by_cadence": st.held,
                "missed_deadlines": st.missed_deadlines,
                "skipped_refreshes": st.skipped,
                "dropped": st.dropped,
                "phase_offsets_sent": st.phase_offsets_sent,
                # The rate this viewer asked its host for (0: none), and when (since the presenter started).
                "picture_rate_asked_mhz": self.half_rate.asked_mhz,
                "picture_rate_asked_s": self.half_rate.asked_s and round(self.half_rate.asked_s - self._started_s, 3),
                "glass_samples_before_ask": self._glass_before_ask,
                "picture_rate_back_s": self.half_rate.back_s and round(self.half_rate.back_s - self._started_s, 3),
                # The automatic lock said, in its one line, that the display outruns what it can cover.
                "said_outrun": self._said_outrun,
                **({"quality": self.quality.summary()} if self.quality is not None else {}),
            }
            if samples:
                out.update(
                    stage_tails=self._stage_tails.summary(st.refresh_hz or 60.0),
                    glass_ms=glass,
                    ready_trace=list(st.ready_trace),
                    phase_trace=list(st.phase_trace),
                    repeat_times=list(st.repeat_times),
                    # What the times above count from, on this process's clock (monotonic: a bench on the same
                    # machine places repeats against what else happened then).
                    started_s=self._started_s,
                )
        # Outside the lock: the presenter takes it every refresh.
        out["glass_ms_median"], out["glass_ms_p95"] = median_and_p95(glass)
        return out
