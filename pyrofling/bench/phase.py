"""``pyrofling bench phase``: the phase loop simulated with a fake clock, controller against controller.

A discrete-event simulation of the whole loop with the real pure objects: the
host's :class:`~pyrofling.core.host.frame_clock.FrameClock` ticks, each frame takes a
pipeline delay (capture + encode + network + decode, with jitter) to be decoded
at the viewer, whose :class:`~pyrofling.core.viewer.presentation.PresentationLoop`
presents it on a :class:`~pyrofling.core.viewer.presentation.RefreshClock` running at a
skew from the host and sends the phase error back, which reaches the host after
a return delay.  Every controller sees the same trace (same seed, same jitter
per frame, same starting phase).

The *true* phase error is what the viewer would measure without jitter: the
target (refresh + offset) minus the frame's mean arrival, folded into ± half a
refresh.  "Locked" means |true error| < ``lock_threshold_s`` for at least a second from then on.
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
from dataclasses import asdict, dataclass, field, replace
from typing import Any, NamedTuple

from pyrofling.core.host.frame_clock import CONTROLLERS, FrameClock
from pyrofling.core.phase import wrap_phase
from pyrofling.core.viewer.phase_offset import AutoOffsetConfig
from pyrofling.core.viewer.presentation import Present, PresentationConfig, PresentationLoop, RefreshClock, Repeat, Wait


@dataclass(frozen=True, slots=True)
class PhaseSimConfig:
    host_fps: float = 60.0
    #: Viewer display clock against the host's, parts per million (positive: display slower).
    skew_ppm: float = 500.0
    duration_s: float = 10.0
    #: Mean capture → decoded delay and its per-frame jitter (Gaussian σ, or uniform half-width).
    pipeline_delay_s: float = 0.008
    jitter_s: float = 0.002
    jitter_model: str = "gauss"  # gauss | uniform
    #: Viewer → host delay of the feedback.
    return_delay_s: float = 0.001
    #: The phase error at the start, as a share of a frame.
    initial_phase: float = 0.5
    offset_s: float = 0.0
    deadline_s: float = 0.008
    #: A pipeline stall: nothing arrives between these times, then everything at once.
    stall_at_s: float | None = None
    stall_s: float = 0.1
    #: The viewer finds its offset and deadline itself (``offset_s``/``deadline_s`` then only place the start).
    auto_offset: bool = False
    auto_config: AutoOffsetConfig | None = None  # its settings (None: the viewer's defaults)
    #: From this time on the jitter is ``jitter_later_s`` (a network that gets worse, or better).
    jitter_change_at_s: float | None = None
    jitter_later_s: float = 0.0
    #: Recorded capture → ready delays, frame *i* taking the *i*-th (round again past the end) in place of
    #: ``pipeline_delay_s`` and the jitter: a real run's pictures (``bench latency``'s ``ready_ms``) replayed
    #: through the loop, so that the pure core's rules can be tried on a machine's own stalls.
    recorded_delays_s: tuple[float, ...] | None = None
    lock_threshold_s: float = 0.001
    seed: int = 1


@dataclass(slots=True)
class PhaseSimResult:
    controller: str
    lock_s: float | None  # None: never locked for good
    sigma_ms: float | None  # σ of the true phase error in the steady state (second half of the run)
    mean_ms: float | None
    max_abs_ms: float | None  # after lock
    recover_s: float | None  # after the stall ended, time to be locked again
    #: Picture ready → on screen, median over the second half (the latency the offset costs), ms.
    wait_ms: float | None
    #: Capture → on screen, median after lock (the bench's glass-to-glass, less the display's own), ms.
    glass_ms: float | None
    offset_ms: float  # the offset in force at the end (learnt with auto_offset)
    margin_reversals: int  # auto_offset: times the margin changed direction
    presented: int
    repeated_after_lock: int
    dropped_after_lock: int
    feedback: int
    trace: list[tuple[float, float, float]] = field(default_factory=list)  # (t, true error, rate trim ppm)
    repeats_at: list[float] = field(default_factory=list)  # every repeated refresh's time, lock or not
    #: The automatic lock said the display outruns the pictures (:attr:`OffsetState.wanted_margin_ms`) at some point.
    said_outrun: bool = False


def simulate(cfg: PhaseSimConfig, controller: str) -> PhaseSimResult:
    """Run one controller (``pi``, ``reference`` or ``none``: free-running) over the trace ``cfg``."""
    period = 1.0 / cfg.host_fps
    clock = FrameClock(fps=cfg.host_fps, start_s=0.0, controller="pi" if controller == "none" else controller)
    # Refreshes start where the first frame's true phase error is ``initial_phase`` of a frame.
    display = RefreshClock(
        cfg.host_fps, cfg.initial_phase * period + cfg.pipeline_delay_s - cfg.offset_s, skew_ppm=cfg.skew_ppm
    )
    if cfg.auto_offset and controller != "none":
        presentation = PresentationConfig.automatic(cfg.auto_config)
    else:
        presentation = PresentationConfig(
            phase_locked=controller != "none", offset_s=cfg.offset_s, deadline_s=cfg.deadline_s
        )
    loop: PresentationLoop[int] = PresentationLoop(presentation, display.period_s)
    rng = random.Random(cfg.seed)
    jitter_of: dict[int, float] = {}

    recorded = cfg.recorded_delays_s

    def jitter(index: int) -> float:  # the same jitter for frame i whichever controller runs
        if recorded:
            return recorded[index % len(recorded)] - cfg.pipeline_delay_s
        while len(jitter_of) <= index:
            later = cfg.jitter_change_at_s is not None and len(jitter_of) * period >= cfg.jitter_change_at_s
            size = cfg.jitter_later_s if later else cfg.jitter_s
            if cfg.jitter_model == "uniform":
                jitter_of[len(jitter_of)] = rng.uniform(-size, size)
            else:
                jitter_of[len(jitter_of)] = rng.gauss(0.0, size)
        return jitter_of[index]

    # Events: (time, order, kind, payload).  Order breaks ties deterministically.
    events: list[tuple[float, int, str, Any]] = []
    order = 0

    def push(t: float, kind: str, payload: Any = None) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, (t, order, kind, payload))

    push(clock.next_timer(), "tick")
    push(display.next_vblank(0.0), "vblank")
    inbox: list[tuple[float, int]] = []  # frames decoded, not yet handed to the loop: (done, index)
    #: index → capture time (the picture's stamp), kept once handed over: its capture → screen time is taken
    #: when it shows (a picture overtaken by a later one may still show).
    captured: dict[int, float] = {}
    trace: list[tuple[float, float, float]] = []
    wait_until: float | None = None
    stall_end = None if cfg.stall_at_s is None else cfg.stall_at_s + cfg.stall_s
    presented_at: list[tuple[float, bool]] = []  # (time, repeated?) per refresh
    waits: list[tuple[float, float]] = []  # (time, on screen − ready)
    glass: list[tuple[float, float]] = []  # (time, on screen − capture)
    dropped_at: list[float] = []
    feedback = 0
    said_outrun = False

    def drain(now: float) -> None:
        while inbox and inbox[0][0] <= now:
            done, index = heapq.heappop(inbox)
            loop.frame_ready(index, done, captured.get(index))

    def decide(now: float) -> None:
        nonlocal wait_until, feedback, said_outrun
        drain(now)
        d = loop.poll(now)
        if isinstance(d, Wait):
            wait_until = d.until_s
            nxt = inbox[0][0] if inbox else math.inf
            push(min(nxt, d.until_s), "poll")
            return
        wait_until = None
        if isinstance(d, Present):
            presented_at.append((now, False))
            waits.append((now, d.on_screen_s - d.done_s))
            glass.append((now, d.on_screen_s - captured[d.frame]))
            if d.dropped:
                dropped_at.append(now)
            if controller != "none":
                feedback += 1
                push(now + cfg.return_delay_s, "feedback", d.phase_error_us)
        elif isinstance(d, Repeat):
            presented_at.append((now, True))
            if loop.auto is not None and not said_outrun:  # it says so only after misses or a wide tail
                said_outrun = loop.auto.state().wanted_margin_ms is not None

    while events:
        now, _, kind, payload = heapq.heappop(events)
        if now > cfg.duration_s:
            break
        if kind == "tick":
            tick = clock.handle_timer(now)
            if tick is not None and tick.encode:
                arrival = tick.due_s + cfg.pipeline_delay_s + jitter(tick.index)
                if cfg.stall_at_s is not None and stall_end is not None and cfg.stall_at_s <= arrival < stall_end:
                    arrival = stall_end
                heapq.heappush(inbox, (max(arrival, tick.due_s), tick.index))
                captured[tick.index] = tick.due_s
                if wait_until is not None and arrival < wait_until:  # the presenter wakes when it arrives
                    push(max(arrival, now), "poll")
                true_error = wrap_phase(
                    display.start_s + loop.offset_s - (tick.due_s + cfg.pipeline_delay_s), display.period_s
                )
                trace.append((tick.due_s, true_error, clock.rate_trim_ppm))
            push(clock.next_timer(), "tick")
        elif kind == "vblank":
            loop.vblank(now)
            decide(now)
            push(display.next_vblank(now), "vblank")
        elif kind == "poll":
            if wait_until is not None:
                decide(now)
        elif kind == "feedback":
            clock.feedback(1, payload, now)

    lock_s = _lock_time(trace, cfg.lock_threshold_s, after=0.0)
    recover_s = None
    if stall_end is not None:
        again = _lock_time(trace, cfg.lock_threshold_s, after=stall_end)
        recover_s = None if again is None else again - stall_end
    # Steady state: the second half of the run (and at least half a second after lock).
    settle_s = max(cfg.duration_s / 2, (lock_s or 0.0) + 0.5)
    settled = [e for t, e, _ in trace if t >= settle_s and not _in_stall(t, cfg)]
    if lock_s is None and controller != "none":
        settled = []
    after = lock_s if lock_s is not None else math.inf
    return PhaseSimResult(
        controller=controller,
        lock_s=lock_s,
        sigma_ms=statistics.pstdev(settled) * 1000 if len(settled) > 2 else None,
        mean_ms=statistics.fmean(settled) * 1000 if settled else None,
        max_abs_ms=max(abs(e) for e in settled) * 1000 if settled else None,
        recover_s=recover_s,
        wait_ms=statistics.median(w for t, w in waits if t >= settle_s) * 1000 if waits else None,
        glass_ms=_median_ms([g for t, g in glass if t > after]),
        offset_ms=loop.offset_s * 1000,
        margin_reversals=loop.auto.reversals if loop.auto is not None else 0,
        presented=loop.counters.presented,
        repeated_after_lock=sum(1 for t, rep in presented_at if rep and t > after and not _in_stall(t, cfg)),
        dropped_after_lock=sum(1 for t in dropped_at if t > after and not _in_stall(t, cfg)),
        feedback=feedback,
        trace=trace,
        repeats_at=[t for t, rep in presented_at if rep],
        said_outrun=said_outrun or (loop.auto is not None and loop.auto.state().wanted_margin_ms is not None),
    )


def _median_ms(values: list[float]) -> float | None:
    return statistics.median(values) * 1000 if values else None


def _in_stall(t: float, cfg: PhaseSimConfig) -> bool:
    """Within the stall or the second after it (recovery is measured separately)."""
    return cfg.stall_at_s is not None and cfg.stall_at_s <= t < cfg.stall_at_s + cfg.stall_s + 1.0


def _lock_time(
    trace: list[tuple[float, float, float]], threshold_s: float, *, after: float, hold_s: float = 1.0
) -> float | None:
    """First time ≥ ``after`` from which |error| stays below the threshold for ``hold_s``."""
    start: float | None = None
    for t, e, _ in trace:
        if t < after:
            continue
        if abs(e) >= threshold_s:
            start = None
            continue
        if start is None:
            start = t
        if t - start >= hold_s:
            return start
    return None


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    config: PhaseSimConfig


def standard_scenarios(duration_s: float = 10.0, seed: int = 1) -> list[Scenario]:
    """The traces the must-hold numbers use: 500 ppm skew and 2 ms jitter, plus load and a stall."""
    base = PhaseSimConfig(duration_s=duration_s, seed=seed)
    return [
        Scenario("500 ppm, jitter σ 2 ms", base),
        Scenario("-500 ppm, jitter σ 2 ms", replace(base, skew_ppm=-500.0, initial_phase=-0.45)),
        Scenario("59.94 Hz (1000 ppm), σ 2 ms", replace(base, skew_ppm=1000.0, initial_phase=0.3)),
        Scenario("load: ±3 ms encode/decode", replace(base, jitter_model="uniform", jitter_s=0.003)),
        Scenario("100 ms stall at 6 s", replace(base, stall_at_s=min(6.0, duration_s / 2), initial_phase=0.25)),
    ]


#: The automatic offset against the reference's fixed one: pipeline jitter σ, ms.
AUTO_JITTERS_MS = (0.5, 1.0, 2.0, 3.0)


def auto_offset_rows(duration_s: float = 60.0, seed: int = 1) -> list[dict[str, Any]]:
    """59.94 Hz display, pi controller: the offset the viewer finds against ``phase_locked=0&deadline=0.008``,
    per jitter: lock, the offset, ready → on screen (the latency the offset costs), repeats, margin reversals."""
    rows = []
    for jitter_ms in AUTO_JITTERS_MS:
        base = PhaseSimConfig(
            duration_s=duration_s, skew_ppm=1000.0, jitter_s=jitter_ms / 1000, initial_phase=0.3, seed=seed
        )
        for name, cfg in (("0 / 8 ms", base), ("auto", replace(base, auto_offset=True))):
            r = simulate(cfg, "pi")
            minutes = (duration_s - (r.lock_s or 0.0)) / 60
            rows.append(
                {
                    "jitter_ms": jitter_ms,
                    "offset": name,
                    "lock_s": r.lock_s,
                    "offset_ms": r.offset_ms,
                    "wait_ms": r.wait_ms,
                    "repeats_per_minute": r.repeated_after_lock / minutes if minutes > 0 else None,
                    "margin_reversals": r.margin_reversals,
                }
            )
    return rows


def _f(v: float | None, spec: str, unit: str = "") -> str:
    """A figure for the tables, "-" where there is none."""
    return "-" if v is None else format(v, spec) + unit


def format_auto_rows(rows: list[dict[str, Any]], duration_s: float) -> str:
    f = _f
    header = (
        f"{'jitter σ':>8} {'offset':>9} {'lock':>7} {'offset at end':>13} {'ready→screen':>12} "
        f"{'repeats/min':>11} {'reversals':>9}"
    )
    lines = [
        f"automatic offset vs the reference's 0 / 8 ms (59.94 Hz display, pi, {duration_s:g} s each)",
        header,
        "-" * len(header),
    ]
    for r in rows:
        lines.append(
            f"{r['jitter_ms']:>6g} ms {r['offset']:>9} {f(r['lock_s'], '.2f') + ' s':>7} "
            f"{f(r['offset_ms'], '+.1f') + ' ms':>13} {f(r['wait_ms'], '.1f') + ' ms':>12} "
            f"{f(r['repeats_per_minute'], '.1f'):>11} {r['margin_reversals']:>9}"
        )
    return "\n".join(lines)


#: The offset rules a recorded run is replayed through: the viewer's, and its 20 s window alone.
REPLAY_RULES = {
    "auto": AutoOffsetConfig(),
    "auto, window only": AutoOffsetConfig(stall_allowance_s=0.0),
}


def replay_rules(longer_waits_ms: tuple[float, ...] = ()) -> dict[str, AutoOffsetConfig]:
    """:data:`REPLAY_RULES`, and for each of ``longer_waits_ms`` the viewer's rule with the lock's wait on a fast
    display held that much longer than free-running's (``beyond_free_running_s``; the viewer's own holds it at
    free-running's): what spending part of the millisecond a lock may lose to free-running, where it cannot carry
    the rate, buys in repeats."""
    rules = dict(REPLAY_RULES)
    for ms in longer_waits_ms:
        rules[f"auto, wait +{ms:g} ms"] = AutoOffsetConfig(beyond_free_running_s=ms / 1000)
    return rules


#: The display a recorded run is replayed on when its row does not say (``bench latency`` rows carry theirs).
REPLAY_REFRESH_HZ = 59.94


class RecordedRun(NamedTuple):
    """One ``bench latency`` row's pictures: its name, each picture's capture → ready time (ms), and the
    refresh rate of the display it was shown on."""

    name: str
    ready_ms: list[float]
    refresh_hz: float = REPLAY_REFRESH_HZ


def recorded_runs(result: Any) -> list[RecordedRun]:
    """Each row's recorded capture → ready times (ms) from a ``bench latency --json`` result, a single stream's
    (``rows``) or several profiles' (``profiles``, each with its rows).  Every mode's pictures are the
    machine's: free-running and the reference's are replayed as well as the automatic."""
    if isinstance(result, dict) and isinstance(result.get("profiles"), list):
        named = [
            (f"{p.get('profile', '?')} {r.get('mode')}", r)
            for p in result["profiles"]
            if isinstance(p, dict) and isinstance(p.get("rows"), list)
            for r in p["rows"]
        ]
    elif isinstance(result, dict) and isinstance(result.get("rows"), list):
        named = [(str(r.get("mode")) if isinstance(r, dict) else "?", r) for r in result["rows"]]
    else:
        raise ValueError("not a `pyrofling bench latency --json` result (no rows)")
    runs = []
    for name, row in named:
        if not isinstance(row, dict) or not row.get("ready_ms"):
            continue
        ready, hz = row["ready_ms"], row.get("refresh_hz", REPLAY_REFRESH_HZ)
        if not isinstance(ready, list) or not all(isinstance(v, int | float) and math.isfinite(v) for v in ready):
            raise ValueError(f"the {name} row's ready_ms is not a list of times in ms")
        if not isinstance(hz, int | float) or not 1.0 <= hz <= 1000.0:
            raise ValueError(f"the {name} row's refresh_hz is not a display's refresh rate: {hz!r}")
        runs.append(RecordedRun(name, ready, float(hz)))
    if not runs:
        raise ValueError("its rows hold no recorded ready times (ready_ms): run `bench latency --json` again")
    return runs


def replay_rows(
    runs: list[RecordedRun], rules: dict[str, AutoOffsetConfig] | None = None, seed: int = 1
) -> list[dict[str, Any]]:
    """Each recorded run's pictures through free-running (the mailbox) and each offset rule, in the loop with
    the pi controller, on a display at the run's own refresh rate and a stream at that rate: repeats a minute
    (after lock), capture → on screen median and, for each rule, that median less free-running's."""
    rows = []
    for name, ready_ms, hz in runs:
        delays = tuple(ms / 1000 for ms in ready_ms)
        duration_s = len(delays) / hz
        base = PhaseSimConfig(
            host_fps=hz,
            duration_s=duration_s,
            skew_ppm=1000.0,
            pipeline_delay_s=statistics.median(delays),
            recorded_delays_s=delays,
            initial_phase=0.3,
            auto_offset=True,
            seed=seed,
        )
        free = simulate(replace(base, auto_offset=False, deadline_s=0.0), "none")
        free_glass = free.glass_ms
        rows.append(_replay_row(name, hz, len(delays), "free-running", free, duration_s, None))
        for rule, config in (rules or REPLAY_RULES).items():
            r = simulate(replace(base, auto_config=config), "pi")
            rows.append(_replay_row(name, hz, len(delays), rule, r, duration_s, free_glass))
    return rows


def _replay_row(
    name: str, hz: float, pictures: int, rule: str, r: PhaseSimResult, duration_s: float, free_glass: float | None
) -> dict[str, Any]:
    free = r.controller == "none"
    locked_s = 0.0 if free else r.lock_s
    minutes = (duration_s - (locked_s or 0.0)) / 60
    repeated = len(r.repeats_at) if free else r.repeated_after_lock
    return {
        "run": name,
        "refresh_hz": hz,
        "pictures": pictures,
        "rule": rule,
        "repeats_per_minute": repeated / minutes if locked_s is not None and minutes > 0 else None,
        "glass_ms": r.glass_ms,
        "minus_free_ms": None if free_glass is None or r.glass_ms is None else r.glass_ms - free_glass,
        "offset_ms": None if free else r.offset_ms,
        "said_outrun": r.said_outrun,
    }


def format_replay_rows(rows: list[dict[str, Any]]) -> str:
    f = _f
    header = (
        f"{'recorded run':<40} {'Hz':>7} {'pictures':>8} {'rule':<20} {'repeats/min':>11} {'capture→screen':>14} "
        f"{'− free':>9} {'offset':>9}  outrun"
    )
    lines = ["recorded pictures replayed through free-running and the offset rules (pi, each run's display)", header,
             "-" * len(header)]  # fmt: skip
    for r in rows:
        lines.append(
            f"{r['run']:<40} {r['refresh_hz']:>7.2f} {r['pictures']:>8} {r['rule']:<20} "
            f"{f(r['repeats_per_minute'], '.1f'):>11} {f(r['glass_ms'], '.2f', ' ms'):>14} "
            f"{f(r['minus_free_ms'], '+.2f', ' ms'):>9} {f(r['offset_ms'], '+.1f', ' ms'):>9}"
            + ("  said" if r["said_outrun"] else "")
        )
    for rule in dict.fromkeys(r["rule"] for r in rows):
        mine = [r for r in rows if r["rule"] == rule and r["repeats_per_minute"] is not None]
        if mine:
            rate = statistics.fmean(r["repeats_per_minute"] for r in mine)
            glass = statistics.fmean(r["glass_ms"] for r in mine if r["glass_ms"] is not None)
            behind = [r["minus_free_ms"] for r in mine if r["minus_free_ms"] is not None]
            label = f"mean of {len(mine)} runs"
            lines.append(
                f"{label:<40} {'':>7} {'':>8} {rule:<20} {rate:>11.2f} {glass:>11.2f} ms "
                f"{f(statistics.fmean(behind) if behind else None, '+.2f', ' ms'):>9}"
            )
    return "\n".join(lines)


def run(
    scenarios: list[Scenario], controllers: tuple[str, ...] = (*CONTROLLERS, "none"), phases: int = 8
) -> dict[str, Any]:
    """Each scenario from ``phases`` starting phases spread over a frame; worst and median lock."""
    rows = []
    for sc in scenarios:
        for name in controllers:
            results = []
            for i in range(phases):
                start = -0.5 + (i + 0.5) / phases if phases > 1 else sc.config.initial_phase
                results.append(simulate(replace(sc.config, initial_phase=start, seed=sc.config.seed + i), name))
            rows.append(_row(sc.name, name, results))
    return {"rows": rows}


def _row(scenario: str, controller: str, results: list[PhaseSimResult]) -> dict[str, Any]:
    locks = [r.lock_s for r in results]
    sigmas = [r.sigma_ms for r in results if r.sigma_ms is not None]
    recovers = [r.recover_s for r in results]
    return {
        "scenario": scenario,
        "controller": controller,
        "runs": len(results),
        "locked_runs": sum(1 for x in locks if x is not None),
        "lock_s_median": _median_or_none(locks),
        "lock_s_worst": None if any(x is None for x in locks) else max(x for x in locks if x is not None),
        "sigma_ms_median": statistics.median(sigmas) if sigmas else None,
        "sigma_ms_worst": max(sigmas) if sigmas else None,
        "max_abs_ms_worst": max((r.max_abs_ms for r in results if r.max_abs_ms is not None), default=None),
        # None when there was no stall, or when some run never locked again after it.
        "recover_s_worst": None if any(r is None for r in recovers) else max(r for r in recovers if r is not None),
        "repeated_after_lock": sum(r.repeated_after_lock for r in results),
        "dropped_after_lock": sum(r.dropped_after_lock for r in results),
        "results": [{k: v for k, v in asdict(r).items() if k != "trace"} for r in results],
    }


def _median_or_none(values: list[float | None]) -> float | None:
    """Median, counting never-locked runs as infinitely slow; None when most never locked."""
    ordered = sorted(math.inf if v is None else v for v in values)
    m = (
        ordered[len(ordered) // 2]
        if len(ordered) % 2
        else (ordered[len(ordered) // 2 - 1] + ordered[len(ordered) // 2]) / 2
    )
    return None if math.isinf(m) else m


def format_table(result: dict[str, Any]) -> str:
    def f(v: float | None, fmt: str, never: str = "never") -> str:
        return never if v is None else format(v, fmt)

    def secs(v: float | None, controller: str) -> str:
        if controller == "none":
            return "-"
        return "never" if v is None else f"{v:.2f} s"

    header = (
        f"{'scenario':30} {'controller':10} {'locked':>7} {'lock med':>9} {'lock worst':>10} "
        f"{'σ med':>7} {'σ worst':>8} {'|e| max':>8} {'recover':>8} {'rep':>4} {'drop':>5}"
    )
    lines = [header, "-" * len(header)]
    for r in result["rows"]:
        locked = "-" if r["controller"] == "none" else f"{r['locked_runs']}/{r['runs']}"
        lines.append(
            f"{r['scenario']:30} {r['controller']:10} {locked:>7} "
            f"{secs(r['lock_s_median'], r['controller']):>9} {secs(r['lock_s_worst'], r['controller']):>10} "
            f"{f(r['sigma_ms_median'], '.3f', '-'):>7} {f(r['sigma_ms_worst'], '.3f', '-'):>8} "
            f"{f(r['max_abs_ms_worst'], '.2f', '-'):>8} {f(r['recover_s_worst'], '.2f', '-'):>8} "
            f"{r['repeated_after_lock']:>4} {r['dropped_after_lock']:>5}"
        )
    lines.append(
        "lock: |true phase error| < 1 ms for 1 s (median and worst over the starting phases); σ: true phase error "
        "in the second half (ms); recover: after the stall; rep/drop: presentation repeats/drops after lock; "
        "none = free-running"
    )
    return "\n".join(lines)


def plot(duration_s: float, seed: int, path: str) -> None:
    """True phase error and rate trim over time on the headline trace, per controller."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg = replace(standard_scenarios(duration_s, seed)[0].config, initial_phase=0.45)
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 6), sharex=True)
    for name in (*CONTROLLERS, "none"):
        r = simulate(cfg, name)
        ts = [t for t, _, _ in r.trace]
        ax1.plot(ts, [e * 1000 for _, e, _ in r.trace], lw=0.8, label=name)
        ax2.plot(ts, [ppm for _, _, ppm in r.trace], lw=0.8, label=name)
    ax1.axhspan(-1, 1, color="green", alpha=0.08)
    ax1.set_ylabel("true phase error (ms)")
    ax1.set_title("500 ppm skew, 2 ms jitter, starting 0.45 frame off")
    ax1.legend()
    ax2.set_ylabel("host rate trim (ppm)")
    ax2.set_xlabel("time (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
