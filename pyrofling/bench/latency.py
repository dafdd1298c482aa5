"""``pyrofling bench latency``: glass-to-glass latency and frame pacing, locked against free-running.

One run per mode, back to back, each a real ``pyrofling host`` (test scene) and a
real headless ``pyrofling view`` on loopback (or through ``pyrofling netsim``):

* ``free`` — no phase lock: the newest picture at each refresh of the viewer's clock;
* ``reference`` — phase-locked at the given offset and deadline (the reference's recommended
  ``phase_locked=0.0&deadline=0.008`` by default), host steered by PyroFling's controller;
* ``pi`` — the same offset and deadline, host steered by pyrofling's controller;
* ``auto`` — phase-locked at the offset the viewer finds itself (its default), pyrofling's controller.

With ``jitter_sigma_ms`` two more runs of ``auto`` go through ``pyrofling netsim``:
with a fixed delay of four σ, then the same delay varying with that σ, so the cost
of the jitter alone is their difference.

The viewer's refresh clock runs at ``--refresh-hz`` (59.94 by default: the
59.94-against-60 case users of other systems complain about) and ``--skew-ppm``.
Glass-to-glass is the time from the host's capture (stamped in the picture's
frame marker) to the refresh at which the picture is on screen, on the one clock
host and viewer share on this machine (``view --host-on-this-machine``: through
netsim, the pings' estimate of the host's clock would be off by half its one-way
delay).

Every row also says how far the pictures' *ready* times (capture → decoded and
prepared at the viewer) spread, and from that the lowest glass-to-glass any
phase-locked viewer could reach on those pictures at the chosen repeat rate
(:func:`lock_bound`): a lock shows every picture at the same capture-to-refresh
time, so that time must cover all but the allowed share of ready times, plus the
last moment before a refresh at which the presenter still takes a picture for it
(:data:`LAST_MOMENT_MS`).  Free-running waits half a refresh on average instead, so a lock
beats it on the median only where that tail is within about half a refresh of
the median ready time.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from pyrofling.bench.frame_trace import (
    STARTUP_S,
    attribute,
    collector_runs,
    format_attribution,
    join,
    read_lines,
    share_tail,
)
from pyrofling.bench.pace_meter import SLOW_FACTOR, overlaps
from pyrofling.bench.stream import StreamScenario, run_scenario, split_cpus
from pyrofling.core.slices import SMALL_SLICE_BYTES
from pyrofling.core.viewer.phase_offset import AutoOffsetConfig

#: /proc/stat's "cpu" line: user nice system idle iowait irq softirq steal (in ticks).
_PROC_STAT = Path("/proc/stat")

MODES = ("free", "reference", "pi", "auto")


#: Free-running has no lock to wait for; its pictures count for the lock bound from this far into the run.
FREE_WARMUP_S = 1.0

#: How long before a refresh the presenter still takes a picture for it (``PresentationLoop.wait_s`` with the
#: automatic offset waits until then): a picture ready by then is shown at that refresh, a later one repeats
#: the last.  The lock bound charges this, not the viewer's learnt flip margin (where its deadline sits:
#: earlier on a machine whose presenter wakes late, while the presenter still waits to this): replayed in the
#: loop at fixed margins, 33 recorded runs' pictures were all in time from their latest ready time + 0.9 ms
#: (the median; half of them 0.5–1.1), not + the 1.5 ms flip margin they ran with.
LAST_MOMENT_MS = AutoOffsetConfig().min_flip_margin_s * 1000


@dataclass(frozen=True, slots=True)
class LatencyBenchConfig:
    duration_s: float = 20.0
    width: int = 1280
    height: int = 720
    fps: int = 60
    bitrate_kbits: int = 10_000
    refresh_hz: float = 59.94
    skew_ppm: float = 0.0
    offset_s: float = 0.0
    deadline_s: float = 0.008
    loss: float = 0.0
    jitter_ms: float = 0.0
    #: Also run ``auto`` through netsim with a delay of 4 σ, fixed and then varying with this σ (ms).
    jitter_sigma_ms: float = 0.0
    #: ``auto``: the repeats a minute the viewer aims for (its --repeats-per-minute).
    auto_repeats_per_minute: float = 0.5
    modes: tuple[str, ...] = MODES
    #: Write both ends' frame traces here and say where the late pictures lost their time.
    trace_dir: str | None = None
    #: Split each mode's time into this many runs, the modes taking turns (a noisy machine weighs on all alike).
    rounds: int = 1
    #: Host side and viewer each on their own CPUs (:attr:`StreamScenario.pin_cpus`).
    pin_cpus: bool = False
    #: Also run ``auto`` with ``--thread-priority normal`` on both ends.
    also_normal_priority: bool = False
    #: Also run ``free`` and ``auto`` with early decoding: the viewer with ``--early-decode``, x264's slices at
    #: most ``early_slice_bytes`` (``slice-max-size``; 0: the host's own slices, one per thread).
    also_early_decode: bool = False
    early_slice_bytes: int = SMALL_SLICE_BYTES  # the host's own for large pictures
    #: Also run ``free`` and ``auto`` with whole pictures only: the viewer with ``--no-early-decode``, the host's
    #: slices one a thread (``slice-max-size=0``), as before large pictures were decoded early by default.
    also_whole_pictures: bool = False
    #: The host's ``--encoder-threads`` (None: its default, one slice thread per CPU it may use, at most 8).
    encoder_threads: int | None = None
    #: The host's ``--max-rate-mbits``, its pacer's ceiling (None: its default).
    max_rate_mbits: float | None = None
    #: The viewer's ``--decode-threads`` (None: its default, one per CPU it may use, at most 8).
    decode_threads: int | None = None
    #: A phase error whose 0.5 s mean stays within this for 2 s counts as locked (or within three times those
    #: means' own noise, if more: :func:`lock_threshold`).
    lock_threshold_ms: float = 1.0
    seed: int = 1


def scenario_for(
    cfg: LatencyBenchConfig, mode: str, *, delay_ms: float = 0.0, delay_sigma_ms: float = 0.0
) -> StreamScenario:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    # One machine, one clock: the capture stamps need no estimate (netsim's one-way delay would skew it by half).
    view_args = [
        "--refresh-hz",
        f"{cfg.refresh_hz:g}",
        "--refresh-skew-ppm",
        f"{cfg.skew_ppm:g}",
        "--host-on-this-machine",
    ]
    host_args: list[str] = []
    if cfg.encoder_threads is not None:
        host_args += ["--encoder-threads", str(cfg.encoder_threads)]
    elif cfg.pin_cpus and len(split_cpus().host) == 1:
        host_args += ["--encoder-threads", "1"]  # a second slice thread on the same CPU only takes turns
    if cfg.max_rate_mbits is not None:
        host_args += ["--max-rate-mbits", f"{cfg.max_rate_mbits:g}"]
    if cfg.decode_threads is not None:
        view_args += ["--decode-threads", str(cfg.decode_threads)]
    if mode == "free":
        view_args += ["--phase-locked", "off"]
    elif mode == "auto":
        view_args += ["--phase-locked", "auto", "--repeats-per-minute", f"{cfg.auto_repeats_per_minute:g}"]
        host_args += ["--phase-controller", "pi"]
    else:
        view_args += ["--phase-locked", f"{cfg.offset_s:g}", "--deadline", f"{cfg.deadline_s:g}"]
        host_args += ["--phase-controller", mode]
    return StreamScenario(
        delay_ms=delay_ms,
        delay_sigma_ms=delay_sigma_ms,
        width=cfg.width,
        height=cfg.height,
        fps=cfg.fps,
        bitrate_kbits=cfg.bitrate_kbits,
        duration_s=cfg.duration_s,
        loss=cfg.loss,
        jitter_ms=cfg.jitter_ms,
        seed=cfg.seed,
        host_args=tuple(host_args),
        view_args=tuple(view_args),
        pin_cpus=cfg.pin_cpus,
        pace_meter=True,
        check_scene=False,  # timing only: the check would be timed with the picture
    )


def runs(cfg: LatencyBenchConfig) -> list[tuple[str, str, StreamScenario]]:
    """(row label, mode, scenario) for every run, in order."""
    out = [(mode, mode, scenario_for(cfg, mode)) for mode in cfg.modes]
    if cfg.jitter_sigma_ms > 0:
        sigma = cfg.jitter_sigma_ms
        delay = round(4 * sigma, 1)
        out.append((f"auto +{delay:g}ms", "auto", scenario_for(cfg, "auto", delay_ms=delay)))
        out.append(
            (f"auto +{delay:g}±{sigma:g}", "auto", scenario_for(cfg, "auto", delay_ms=delay, delay_sigma_ms=sigma))
        )
    if cfg.also_early_decode:
        for mode in ("free", "auto"):
            if mode in cfg.modes:
                one = scenario_for(cfg, mode)
                slices = cfg.early_slice_bytes
                early = replace(
                    one,
                    host_args=(*one.host_args, *(("--encoder-params", f"slice-max-size={slices}") if slices else ())),
                    view_args=(*one.view_args, "--early-decode"),
                )
                out.append((f"{mode} early", mode, early))
    if cfg.also_whole_pictures:
        for mode in ("free", "auto"):
            if mode in cfg.modes:
                one = scenario_for(cfg, mode)
                whole = replace(
                    one,
                    host_args=(*one.host_args, "--encoder-params", "slice-max-size=0"),
                    view_args=(*one.view_args, "--no-early-decode"),
                )
                out.append((f"{mode} whole", mode, whole))
    if cfg.also_normal_priority:
        auto = scenario_for(cfg, "auto")
        normal = ("--thread-priority", "normal")
        out.append(
            (
                "auto normal prio",
                "auto",
                replace(auto, host_args=(*auto.host_args, *normal), view_args=(*auto.view_args, *normal)),
            )
        )
    return out


def run(cfg: LatencyBenchConfig, *, progress: Callable[[str], None] = lambda _s: None) -> dict[str, Any]:
    """Every mode for ``duration_s`` in all; with ``rounds`` > 1 the modes take turns in shorter runs, so a
    machine whose load changes over minutes weighs on each mode alike, and each mode's runs are pooled."""
    plan = runs(cfg)
    slice_cfg = replace(cfg, duration_s=cfg.duration_s / cfg.rounds)
    per_mode: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in plan}
    joined: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in plan}
    collector: dict[str, tuple[list[tuple[float, float, int]], list[tuple[float, float, int]]]] = {
        label: ([], []) for label, _, _ in plan
    }
    slow: dict[str, list[Any]] = {label: [] for label, _, _ in plan}
    for round_ in range(cfg.rounds):
        for label, mode, scenario in plan:
            turn = f" (round {round_ + 1} of {cfg.rounds})" if cfg.rounds > 1 else ""
            progress(f"running {label} for {slice_cfg.duration_s:g} s{turn} ...")
            scenario = replace(scenario, duration_s=slice_cfg.duration_s)
            traces = None
            if cfg.trace_dir is not None:
                name = "".join(c if c.isalnum() else "-" for c in label) + (f"-{round_ + 1}" if cfg.rounds > 1 else "")
                traces = (Path(cfg.trace_dir) / f"{name}-host.jsonl", Path(cfg.trace_dir) / f"{name}-view.jsonl")
                scenario = replace(
                    scenario,
                    host_args=(*scenario.host_args, "--frame-trace", str(traces[0])),
                    view_args=(*scenario.view_args, "--frame-trace", str(traces[1])),
                )
            before = machine_cpu()
            raw = run_scenario(scenario)
            row = summarize(mode, raw, slice_cfg, label=label)
            row.update(cpu_shares(before, machine_cpu()))
            per_mode[label].append(row)
            if traces is not None and mode != "free":  # free-running has no deadline to be late for
                host_lines, view_lines = read_lines(traces[0]), read_lines(traces[1])
                joined[label] += join(host_lines, view_lines)
                collector[label][0].extend(collector_runs(host_lines))
                collector[label][1].extend(collector_runs(view_lines))
                slow[label].extend((raw.get("machine_pace") or {}).get("spells", []))
            progress(format_row(per_mode[label][-1]))
    rows = [pool(per_mode[label]) for label, _, _ in plan]
    for row in rows:
        if joined[row["mode"]]:
            share = repeat_share(cfg.auto_repeats_per_minute, cfg.refresh_hz)
            host_gc, viewer_gc = collector[row["mode"]]
            row["late_pictures"] = attribute(
                joined[row["mode"]],
                tail_share=share,
                host_gc=host_gc,
                viewer_gc=viewer_gc,
                machine_slow=slow[row["mode"]],
            )
    result: dict[str, Any] = {"config": asdict(cfg), "rows": rows}
    if cfg.pin_cpus:  # as they were split here: the table may be printed from this JSON on another machine
        result["cpus"] = {side: sorted(cpus) for side, cpus in asdict(split_cpus()).items()}
    return result


def machine_cpu() -> list[int] | None:
    """The whole machine's CPU ticks so far (None where /proc/stat is not there)."""
    try:
        fields = _PROC_STAT.read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    return [int(v) for v in fields[1:9]] if fields and fields[0] == "cpu" and len(fields) >= 9 else None


def cpu_shares(before: list[int] | None, after: list[int] | None) -> dict[str, float | None]:
    """The machine's busy and stolen share between two :func:`machine_cpu` readings, %.  Stolen: time the
    hypervisor gave this machine's CPUs to others (a shared cloud machine); every stage's tail grows with it,
    so it says how far a run's repeats are the machine's."""
    if before is None or after is None:
        return {"machine_busy_pct": None, "machine_steal_pct": None}
    d = [b - a for a, b in zip(before, after, strict=True)]
    total = sum(d)
    if total <= 0:
        return {"machine_busy_pct": None, "machine_steal_pct": None}
    idle = d[3] + d[4]
    return {"machine_busy_pct": 100 * (total - idle - d[7]) / total, "machine_steal_pct": 100 * d[7] / total}


def pool(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One mode's runs as one row: counts added, latency samples pooled, repeats a minute over all locked time."""
    if len(parts) == 1:
        return parts[0]
    row = dict(parts[-1])  # the offset, trim and traces at the end of the last run
    for key in ("frames_encoded", "host_skipped", "presented", "repeated", "missed_deadlines", "dropped"):
        row[key] = sum(p[key] for p in parts)
    for key in ("pictures_decoded_early", "parts_decoded", "part_feeds"):
        row[key] = sum(p.get(key, 0) for p in parts)
    row["packets_lost"] = sum(p["packets_lost"] for p in parts)
    if row["presentation"] != "free":
        row["repeated_after_lock"] = sum(p["repeated_after_lock"] or 0 for p in parts)
        minutes = sum(p["minutes_locked"] or 0.0 for p in parts)
        row["minutes_locked"] = minutes
        row["repeats_per_minute"] = row["repeated_after_lock"] / minutes if minutes else None
        locks = [p["lock_s"] for p in parts if p["lock_s"] is not None]
        row["lock_s"] = statistics.median(locks) if len(locks) == len(parts) else None
        sigmas = [p["phase_sigma_ms"] for p in parts if p["phase_sigma_ms"] is not None]
        row["phase_sigma_ms"] = statistics.fmean(sigmas) if sigmas else None
    glass = [g for p in parts for g in p["glass_ms"]]
    row["glass_ms"] = glass
    for q, key in ((50, "glass_ms_median"), (5, "glass_ms_p5"), (95, "glass_ms_p95"), (99, "glass_ms_p99")):
        row[key] = _pct(glass, q)
    row["ready_ms"] = [r for p in parts for r in p["ready_ms"]]
    startup = [p["startup_ready_ms_max"] for p in parts if p.get("startup_ready_ms_max") is not None]
    row["startup_ready_ms_max"] = max(startup) if startup else None
    row["startup_repeats"] = sum(p.get("startup_repeats", 0) for p in parts)
    row["flip_margin_ms"] = max(p["flip_margin_ms"] for p in parts)
    row.update(lock_bound(row["ready_ms"], row["refresh_hz"] or 60.0, row["bound_repeats_per_minute"], LAST_MOMENT_MS))
    decoded = [p["decoded_ms_median"] for p in parts if p["decoded_ms_median"] is not None]
    row["decoded_ms_median"] = statistics.median(decoded) if decoded else None
    for key in ("machine_busy_pct", "machine_steal_pct", "machine_slow_ms_per_min", "machine_spells_per_min"):
        shares = [p[key] for p in parts if p.get(key) is not None]
        row[key] = statistics.fmean(shares) if shares else None
    for key in ("host_cpu_by_thread_pct", "viewer_cpu_by_thread_pct"):
        names = {name for p in parts for name in p.get(key, {})}
        row[key] = {name: statistics.fmean(p.get(key, {}).get(name, 0.0) for p in parts) for name in names}
    cpu = [p["host_cpu_pct"] for p in parts if p.get("host_cpu_pct") is not None]
    row["host_cpu_pct"] = statistics.fmean(cpu) if cpu else None
    worst = [p["machine_worst_factor"] for p in parts if p.get("machine_worst_factor") is not None]
    row["machine_worst_factor"] = max(worst) if worst else None
    if row["presentation"] != "free":
        counted = [p["repeats_in_slow_spells"] for p in parts if p.get("repeats_in_slow_spells") is not None]
        row["repeats_in_slow_spells"] = sum(counted) if len(counted) == len(parts) else None
    row["said_outrun"] = any(p.get("said_outrun") for p in parts)
    row["rounds"] = len(parts)
    return row


def summarize(mode: str, raw: dict[str, Any], cfg: LatencyBenchConfig, *, label: str | None = None) -> dict[str, Any]:
    v = raw["viewers"][0] if raw["viewers"] else {}
    host = raw["host"]
    pres = v.get("presentation") or {}
    trace = [(float(t), int(e)) for t, e in pres.get("phase_trace", [])]
    glass = pres.get("glass_ms", [])
    threshold_ms = lock_threshold(trace, cfg.lock_threshold_ms) if mode != "free" else None
    lock_s = lock_time(trace, threshold_ms) if threshold_ms is not None else None
    after = lock_s if lock_s is not None else math.inf
    # The pictures whose repeats count: after lock (free-running: after its first second).
    since = (lock_s or 0.0) if mode != "free" else FREE_WARMUP_S
    # The start-up (the decoder's first pictures queue while it starts) is stated apart, not folded into the tail.
    ready = [ms for t, ms in pres.get("ready_trace", []) if t >= max(since, STARTUP_S)]
    startup_ready = [ms for t, ms in pres.get("ready_trace", []) if t < STARTUP_S]
    settled = [e / 1000 for t, e in trace if t >= after + 0.5]
    repeats = pres.get("repeat_times", [])
    # Repeats count once locked and past the start-up (stated apart: the decoder's first pictures queue).
    counted_from = max(after, STARTUP_S)
    # ... and while pictures still came: the refresh after the host's last picture (the run ends) is no hitch.
    stream_end = max((t for t, _ in pres.get("ready_trace", [])), default=math.inf)
    repeats = [t for t in repeats if t <= stream_end]
    after_lock = sum(1 for t in repeats if t > counted_from) if mode != "free" else None
    minutes_locked = (cfg.duration_s - counted_from) / 60 if mode != "free" and lock_s is not None else None
    auto = pres.get("auto_offset") or {}
    pace = raw.get("machine_pace") or {}
    spells = pace.get("spells", [])
    started = pres.get("started_s")
    # A repeat is the machine's when a slow spell met the life of the picture it waited for (a glass time back).
    window_s = (_pct(glass, 95) or 1000 / 60) / 1000
    in_spells = (
        sum(1 for t in repeats if t > counted_from and overlaps(started + t - window_s, started + t, spells))
        if mode != "free" and started is not None and pace
        else None
    )
    # A viewer that asked its host for half the rate (protocol.md §7.16): the run from the ask on, on its own.
    asked_s, before = pres.get("picture_rate_asked_s"), pres.get("glass_samples_before_ask")
    half: dict[str, Any] = {"half_rate_at_s": asked_s, "half_rate_back_at_s": pres.get("picture_rate_back_s")}
    if asked_s is not None and before is not None:
        # Its repeats from a second after the ask (the new encoder's key frame, the cadence taking hold).
        settled_from, minutes = asked_s + 1.0, (cfg.duration_s - asked_s - 1.0) / 60
        half["glass_ms_median_at_half"] = _pct(glass[before:], 50)
        half["repeats_per_minute_at_half"] = (
            sum(1 for t in repeats if t > settled_from) / minutes if minutes > 0 else None
        )
    return {
        "mode": label or mode,
        "presentation": mode,
        **half,
        "frames_encoded": host.get("frames_encoded", 0),
        "host_skipped": host.get("frames_skipped", 0),
        "presented": pres.get("presented", 0),
        "repeated": pres.get("repeated", 0),
        "missed_deadlines": pres.get("missed_deadlines", 0),
        "dropped": pres.get("dropped", 0),
        "repeated_after_lock": after_lock,
        "minutes_locked": minutes_locked,
        "repeats_per_minute": (after_lock / minutes_locked) if after_lock is not None and minutes_locked else None,
        "offset_ms": pres.get("offset_ms"),
        "deadline_ms": pres.get("deadline_ms"),
        "auto_margin_ms": auto.get("margin_ms"),
        "auto_p99_late_ms": auto.get("p99_late_ms"),
        "auto_stall_late_ms": auto.get("stall_late_ms"),
        "auto_reversals": auto.get("reversals"),
        "lock_s": lock_s,
        "lock_threshold_ms": threshold_ms,
        "phase_sigma_ms": statistics.pstdev(settled) if len(settled) > 2 else None,
        "phase_sigma_free_ms": statistics.pstdev([e / 1000 for _, e in trace]) if len(trace) > 2 else None,
        "glass_ms_median": _pct(glass, 50),
        "glass_ms_p5": _pct(glass, 5),
        "glass_ms_p95": _pct(glass, 95),
        "glass_ms_p99": _pct(glass, 99),
        "decoded_ms_median": v.get("latency_ms_median"),
        # Early decoding: the pictures begun from their parts, the parts, and the decoder calls that took them.
        "pictures_decoded_early": v.get("pictures_decoded_early", 0),
        "parts_decoded": v.get("parts_decoded", 0),
        "part_feeds": v.get("part_feeds", 0),
        "bound_repeats_per_minute": cfg.auto_repeats_per_minute,
        "flip_margin_ms": _flip_margin_ms(auto),
        "last_moment_ms": LAST_MOMENT_MS,
        **lock_bound(ready, cfg.refresh_hz, cfg.auto_repeats_per_minute, LAST_MOMENT_MS),
        "startup_ready_ms_max": max(startup_ready) if startup_ready else None,
        "startup_repeats": sum(1 for t in repeats if t <= STARTUP_S),
        "packets_lost": v.get("packets_lost_video", 0),
        "host_cpu_pct": 100 * host.get("cpu_s", 0) / max(host.get("elapsed_s", 1), 1e-6),
        "host_cpu_by_thread_pct": _thread_pct(host),
        "viewer_cpu_pct": 100 * v.get("cpu_s", 0) / max(v.get("elapsed_s", 1), 1e-6),
        "viewer_cpu_by_thread_pct": _thread_pct(v),
        "rate_trim_ppm": host.get("rate_trim_ppm"),
        "phase_reacquisitions": host.get("phase_reacquisitions"),
        "machine_slow_ms_per_min": pace.get("slow_ms_per_minute"),
        "machine_spells_per_min": pace.get("spells_per_minute"),
        "machine_worst_factor": pace.get("worst_factor"),
        "repeats_in_slow_spells": in_spells,
        "refresh_hz": pres.get("refresh_hz"),
        "said_outrun": bool(pres.get("said_outrun")),
        "phase_trace": trace,
        "glass_ms": glass,
        "ready_ms": ready,
    }


def _flip_margin_ms(auto: dict[str, Any]) -> float:
    """The flip margin the viewer learnt (auto), else its starting one: where its deadline sits before a refresh
    (the automatic margin is measured back from there)."""
    learnt = auto.get("flip_margin_ms")
    return float(learnt) if learnt is not None else AutoOffsetConfig().flip_margin_s * 1000


def repeat_share(repeats_per_minute: float, refresh_hz: float) -> float:
    """The share of refreshes that may repeat."""
    return repeats_per_minute / (60 * refresh_hz)


def lock_bound(
    ready_ms: list[float], refresh_hz: float, repeats_per_minute: float, last_moment_ms: float
) -> dict[str, float | None]:
    """The ready times' median, the one that only ``repeats_per_minute`` pictures exceed (:func:`rate_tail`),
    and the lowest glass-to-glass median a phase lock could reach with them at that repeat rate (that tail plus
    ``last_moment_ms``: a locked viewer shows every picture at one capture-to-refresh time, and a picture not
    ready that long before its refresh repeats the last one)."""
    if not ready_ms:
        return {"ready_ms_median": None, "ready_ms_tail": None, "ready_ms_latest": None, "lock_bound_ms": None}
    tail = rate_tail(ready_ms, repeat_share(repeats_per_minute, refresh_hz))
    return {
        "ready_ms_median": sorted(ready_ms)[len(ready_ms) // 2],
        "ready_ms_tail": tail,
        "ready_ms_latest": max(ready_ms),
        "lock_bound_ms": tail + last_moment_ms,
    }


#: The latest pictures an extrapolated tail is fitted to: this share of the run, and at least this many.
TAIL_FIT_SHARE = 0.01
TAIL_FIT_MIN = 20


def rate_tail(values: list[float], share: float) -> float:
    """The value that only ``share`` of ``values`` exceed.

    Where the run holds at least one value at that share (N × share ≥ 1), the run's own order statistic
    (:func:`share_tail`), as for a run too short to fit (fewer than twice ``TAIL_FIT_MIN``).  Where it holds
    fewer, its latest value is a single draw from around that quantile, and a short run's falls short of it.
    The tail is then extrapolated from the latest ``TAIL_FIT_SHARE`` of the run as an exponential tail over the
    value just below them (peaks over a threshold: the mean excess β gives the quantile at ``share`` as
    threshold + β × ln(their share / share)).  For a Gaussian spread at half a repeat a minute, that errs above
    the quantile: by 0.14 σ on a minute's pictures, varying ±0.22 σ from run to run (the latest picture: ±0.32
    σ), and by 0.2 σ on 20 s's (where the latest falls 0.35 σ short).  Never below the second-latest value: two
    values beyond the rest are a stall that a lock must cover whatever a fit to the others says."""
    ordered = sorted(values)
    n = len(ordered)
    k = max(TAIL_FIT_MIN, round(n * TAIL_FIT_SHARE))
    if n * share >= 1 - 1e-9 or n < 2 * k:
        return share_tail(ordered, share)
    threshold = ordered[n - k - 1]
    beta = sum(ordered[n - k :]) / k - threshold
    return max(threshold + beta * math.log(k / n / share), ordered[-2])


def lock_threshold(trace: list[tuple[float, int]], floor_ms: float, window_s: float = 0.5) -> float:
    """How far a locked phase error's ``window_s`` means stray: three times their own noise, or ``floor_ms`` if
    more.  Through a link whose delay varies by σ 3 ms each picture's measured error varies by 3–5 ms and a
    half-second's mean by about 0.8 ms, so the mean of a locked phase left a fixed 1 ms every few windows and
    "locked for 2 s" waited for a lucky spell: up to 20 s into the σ 3 ms rows, the repeats before it left out.
    The noise is the errors' (σ from their median absolute deviation, past the start-up), the share of it one
    error carries to the next (ρ, their lag-1 correlation: 0.2–0.4 measured) taken into the mean's."""
    errors = [e / 1000 for t, e in trace if t >= STARTUP_S]
    span_s = trace[-1][0] - STARTUP_S if trace else 0.0
    if len(errors) < 60 or span_s <= 0:
        return floor_ms
    middle = statistics.median(errors)
    sigma = 1.4826 * statistics.median(abs(e - middle) for e in errors)
    spread = [e - middle for e in errors]
    var = statistics.fmean(d * d for d in spread)
    carried = statistics.fmean(a * b for a, b in itertools.pairwise(spread))
    rho = min(0.9, max(0.0, carried / var)) if var > 0 else 0.0
    per_window = len(errors) / span_s * window_s
    return max(floor_ms, 3 * sigma * math.sqrt((1 + rho) / (1 - rho) / per_window))


def lock_time(
    trace: list[tuple[float, int]], threshold_ms: float, window_s: float = 0.5, hold_s: float = 2.0
) -> float | None:
    """First time from which the phase error's ``window_s`` means stay within the threshold for ``hold_s``."""
    if not trace:
        return None
    windows: dict[int, list[int]] = {}
    for t, e in trace:
        windows.setdefault(int(t / window_s), []).append(e)
    start: float | None = None
    for w in sorted(windows):
        mean_ms = statistics.fmean(windows[w]) / 1000
        if abs(mean_ms) >= threshold_ms:
            start = None
            continue
        if start is None:
            start = w * window_s
        if (w + 1) * window_s - start >= hold_s:
            return start
    return None


def _thread_pct(stats: dict[str, Any]) -> dict[str, float]:
    """A host's or viewer's CPU by thread (its statistics' ``cpu_by_thread_s``) as percent of one core."""
    elapsed_s = max(stats.get("elapsed_s", 1), 1e-6)
    return {name: 100 * s / elapsed_s for name, s in stats.get("cpu_by_thread_s", {}).items()}


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q / 100))]


def _f(v: float | None, fmt: str, none: str = "-") -> str:
    return none if v is None else format(v, fmt)


HEADER = (
    f"{'mode':16} {'presented':>9} {'repeated':>8} {'after lock':>10} {'/min':>5} {'dropped':>7} {'lock':>7} "
    f"{'offset':>7} {'σ phase':>8} {'glass med':>9} {'p5..p95':>13} {'decoded':>8} {'ready..tail':>12} "
    f"{'bound':>8} {'trim':>9} {'steal':>6} {'slow/min':>9} {'in slow':>7}"
)


def format_row(r: dict[str, Any]) -> str:
    band = f"{_f(r['glass_ms_p5'], '.1f')}..{_f(r['glass_ms_p95'], '.1f')}"
    lock = "-" if r["presentation"] == "free" else ("never" if r["lock_s"] is None else f"{r['lock_s']:.1f} s")
    offset = "-" if r["presentation"] == "free" else _f(r["offset_ms"], "+.1f")
    return (
        f"{r['mode']:16} {r['presented']:>9} {r['repeated']:>8} {_f(r['repeated_after_lock'], 'd'):>10} "
        f"{_f(r['repeats_per_minute'], '.1f'):>5} {r['dropped']:>7} {lock:>7} {offset:>7} "
        f"{_f(r['phase_sigma_ms'], '.2f'):>8} {_f(r['glass_ms_median'], '.1f') + ' ms':>9} {band:>13} "
        f"{_f(r['decoded_ms_median'], '.1f') + ' ms':>8} "
        f"{_f(r.get('ready_ms_median'), '.1f') + '..' + _f(r.get('ready_ms_tail'), '.1f'):>12} "
        f"{_f(r.get('lock_bound_ms'), '.1f') + ' ms':>8} {_f(r['rate_trim_ppm'], '+.0f') + ' ppm':>9} "
        f"{_f(r.get('machine_steal_pct'), '.1f') + ' %':>6} "
        f"{_f(r.get('machine_slow_ms_per_min'), '.0f') + ' ms':>9} {_f(r.get('repeats_in_slow_spells'), 'd'):>7}"
    )


def format_table(result: dict[str, Any]) -> str:
    c = result["config"]
    net = "loopback"
    if c["loss"] or c["jitter_ms"]:
        net = f"netsim (loss {c['loss']:.1%}, jitter 0..{c['jitter_ms']:g} ms)"
    skew = f" {c['skew_ppm']:+g} ppm" if c["skew_ppm"] else ""
    if c.get("pin_cpus"):
        cpus = result.get("cpus") or asdict(split_cpus())
        net += f", host on CPU {_cpu_list(cpus['host'])} and viewer on CPU {_cpu_list(cpus['viewers'])}"
        if c.get("jitter_sigma_ms") and set(cpus["relay"]) != set(cpus["host"]):
            net += f", netsim's relay on CPU {_cpu_list(cpus['relay'])}"
    lines = [
        f"{c['height']}p{c['fps']} {c['bitrate_kbits'] / 1000:g} Mbit/s, viewer refresh {c['refresh_hz']:g} Hz{skew}, "
        f"{net}, {c['duration_s']:g} s per mode"
        + (f" in {c['rounds']} turns" if c.get("rounds", 1) > 1 else "")
        + f"; reference and pi: offset {c['offset_s'] * 1000:+g} ms, "
        f"deadline {c['deadline_s'] * 1000:g} ms; auto: found by the viewer",
        HEADER,
        "-" * len(HEADER),
    ]
    lines += [format_row(r) for r in result["rows"]]
    startup = [
        f"{r['mode']} {r['startup_ready_ms_max']:.1f} ms, {r.get('startup_repeats', 0)} repeated"
        for r in result["rows"]
        if r.get("startup_ready_ms_max")
    ]
    if startup:
        lines.append(
            f"start-up (the first {STARTUP_S:g} s, left out of after lock, /min, ready..tail and bound): the slowest "
            "picture's capture -> ready, and refreshes repeated: " + "; ".join(startup)
        )
    halved = [
        f"{r['mode']} asked the host for half the rate at {r['half_rate_at_s']:.1f} s: from then "
        + _f(r.get("glass_ms_median_at_half"), ".1f")
        + " ms"
        + ", "
        + _f(r.get("repeats_per_minute_at_half"), ".1f")
        + " repeats a minute (from a second after)"
        + (
            f"; it asked for the full rate again at {r['half_rate_back_at_s']:.1f} s, half having cost it glass time"
            if r.get("half_rate_back_at_s") is not None
            else ""
        )
        for r in result["rows"]
        if r.get("half_rate_at_s") is not None
    ]
    lines += halved
    early = [
        f"{r['mode']} {r['pictures_decoded_early']} of {r['frames_encoded']} pictures, "
        f"{r['parts_decoded']} parts in {r['part_feeds']} decoder calls"
        for r in result["rows"]
        if r.get("pictures_decoded_early")
    ]
    if early:
        lines.append("decoded early (begun from their parts): " + "; ".join(early))
    verdict = bound_verdict(result["rows"])
    if verdict:
        lines += ["", verdict]
    traced = [r for r in result["rows"] if "late_pictures" in r]
    if traced:
        lines.append("")
        lines += [format_attribution(r["mode"], r["late_pictures"]) for r in traced]
    lines.append(
        "lock: when the phase error's half-second means came within "
        f"{c.get('lock_threshold_ms', 1.0):g} ms (or three times their own noise) for 2 s; "
        "repeated: refreshes that showed the previous picture again (after lock, /min: once locked and past the "
        f"first {STARTUP_S:g} s); offset: the phase offset "
        "at the end, ms; glass: capture -> on screen; decoded: capture -> decoded; σ phase: measured phase error "
        "after lock; ready..tail: capture -> ready to show, median and the time only the auto repeat rate of pictures "
        f"exceed (where the run holds fewer than one such picture, extrapolated from its latest {TAIL_FIT_SHARE:.0%}); "
        "bound: the lowest glass median any phase lock could reach on those pictures at that rate (tail + "
        f"{LAST_MOMENT_MS:g} ms, the presenter's last moment before a refresh); trim: host frame clock vs "
        "nominal; auto +Dms±S: through netsim, delay D ms varying with σ S; "
        "steal: the machine's CPU time its hypervisor gave to others during the run (every stage's tail grows "
        "with it); slow/min: how long a minute the whole machine ran slow (a fixed piece of work took over "
        f"{SLOW_FACTOR:g}× its usual CPU time, timed beside the run); in slow: repeats after lock whose picture "
        "was on its way during such a spell"
    )
    return "\n".join(lines)


def _cpu_list(cpus: Iterable[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def bound_verdict(rows: list[dict[str, Any]]) -> str:
    """Whether any phase offset could have beaten free-running's median at the auto repeat rate in this run:
    the auto row's bound (its own pictures) against the free row's measured median."""
    free = next((r for r in rows if r["mode"] == "free"), None)
    auto = next((r for r in rows if r["mode"] == "auto"), None)
    if free is None or auto is None or free["glass_ms_median"] is None or auto.get("lock_bound_ms") is None:
        return ""
    rate = auto["bound_repeats_per_minute"]
    gap = auto["lock_bound_ms"] - free["glass_ms_median"]
    said = (
        f"no phase offset could give both on these pictures ({gap:.1f} ms short)"
        if gap > 0
        else f"an offset could give both ({-gap:.1f} ms to spare)"
    )
    repeats = f"{rate:g} repeat{'' if rate == 1 else 's'}"
    verdict = (
        f"lock bound: at most {repeats} a minute needs auto's glass median >= {auto['lock_bound_ms']:.1f} ms "
        f"(its pictures' tail {auto['ready_ms_tail']:.1f} ms + the presenter's last moment); free-running's median is "
        f"{free['glass_ms_median']:.1f} ms: {said}"
    )
    traced = auto.get("late_pictures")
    if gap > 0 and traced and traced.get("stage_tail_ms"):
        # What the margin may be to stay at free-running's median, against the stage that alone took the most.
        budget = free["glass_ms_median"] - auto["ready_ms_median"] - auto.get("last_moment_ms", LAST_MOMENT_MS)
        med = traced["stage_median_ms"]
        over, stage = max((t - med[n], n) for n, t in traced["stage_tail_ms"].items() if n in med)
        verdict += (
            f"\n  at free-running's median a lock's margin over the median ready time is at most {budget:.1f} ms; "
            f"at that rate the {stage} alone ran {over:.1f} ms over its median"
        )
    return verdict


def plot(result: dict[str, Any], path: str) -> None:
    """Phase error over time and the glass-to-glass distribution per mode (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.5))
    for r in result["rows"]:
        trace = r["phase_trace"]
        if trace:
            ax1.plot([t for t, _ in trace], [e / 1000 for _, e in trace], ".", ms=1.5, label=r["mode"], alpha=0.6)
        glass = sorted(r["glass_ms"])
        if glass:
            label = f"{r['mode']} (median {r['glass_ms_median']:.1f} ms)"
            ax2.plot(glass, [i / len(glass) for i in range(len(glass))], label=label)
    ax1.set_xlabel("time (s)")
    ax1.set_ylabel("phase error (ms, + = picture early)")
    ax1.set_title("phase error at the viewer")
    ax1.axhline(0, color="grey", lw=0.5)
    ax1.legend(markerscale=8)
    ax2.set_xlabel("capture -> on screen (ms)")
    ax2.set_ylabel("share of frames")
    ax2.set_title("glass-to-glass latency (CDF)")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
