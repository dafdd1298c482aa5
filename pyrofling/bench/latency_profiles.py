"""``pyrofling bench latency --profiles``: the same bench at several stream sizes and display rates in one run.

Each profile (``1280x720@144/143.86:20000``: size, the stream's frames a second, the viewer's refresh rate and the
bitrate) runs every mode of :mod:`pyrofling.bench.latency` in turn, its traces (``--trace``) in a folder of its
own; a summary then sets, profile by profile, the automatic lock against free-running: glass-to-glass medians,
repeats a minute after the lock, what the pictures' ready times were (median and the tail the lock must cover),
and the host's CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pyrofling.bench.latency import LatencyBenchConfig, format_table, run

#: What the issue's rows compare: 720p60, 720p144 and 1080p120 (the viewer's display 1/1.001 slower).
DEFAULT_PROFILES = ("1280x720@60:10000", "1280x720@144:20000", "1920x1080@120:30000")


@dataclass(frozen=True, slots=True)
class Profile:
    width: int
    height: int
    fps: int
    refresh_hz: float
    bitrate_kbits: int

    @property
    def label(self) -> str:
        return f"{self.width}x{self.height}@{self.fps} on {self.refresh_hz:g} Hz, {self.bitrate_kbits / 1000:g} Mbit/s"

    @property
    def folder(self) -> str:
        return f"{self.width}x{self.height}-{self.fps}"


def parse_profile(text: str) -> Profile:
    """``WIDTHxHEIGHT@FPS[/HZ][:KBITS]``: the display at ``HZ`` (default the stream's rate / 1.001, as real
    displays run), ``KBITS`` default 10000."""
    try:
        rest, _, kbits = text.partition(":")
        size, _, rate = rest.partition("@")
        width, height = (int(v) for v in size.lower().split("x"))
        fps_text, _, hz = rate.partition("/")
        fps = int(fps_text)
        profile = Profile(width, height, fps, float(hz) if hz else round(fps / 1.001, 2), int(kbits or 10_000))
    except ValueError:
        raise ValueError(f"{text!r}: give WIDTHxHEIGHT@FPS[/HZ][:KBITS], e.g. 1280x720@144/143.86:20000") from None
    if min(profile.width, profile.height, profile.fps, profile.bitrate_kbits) <= 0 or profile.refresh_hz <= 0:
        raise ValueError(f"{text!r}: sizes, rates and the bitrate must be positive")
    if profile.width % 2 or profile.height % 2:
        raise ValueError(f"{text!r}: the width and height must be even (4:2:0)")
    return profile


def run_profiles(
    cfg: LatencyBenchConfig, profiles: list[Profile], *, progress: Callable[[str], None] = lambda _s: None
) -> dict[str, Any]:
    results = []
    for profile in profiles:
        progress(f"== {profile.label} ==")
        trace = None
        if cfg.trace_dir is not None:
            folder = Path(cfg.trace_dir) / profile.folder
            folder.mkdir(parents=True, exist_ok=True)
            trace = str(folder)
        one = replace(cfg, width=profile.width, height=profile.height, fps=profile.fps,
                      refresh_hz=profile.refresh_hz, bitrate_kbits=profile.bitrate_kbits, trace_dir=trace)  # fmt: skip
        results.append({"profile": profile.label, **run(one, progress=progress)})
    return {"profiles": results, "summary": [summary(r) for r in results]}


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """Automatic against free-running in one profile's run."""
    rows = {r["mode"]: r for r in result["rows"]}
    free, auto = rows.get("free"), rows.get("auto")
    better = None
    if free and auto and free.get("glass_ms_median") is not None and auto.get("glass_ms_median") is not None:
        better = auto["glass_ms_median"] - free["glass_ms_median"]
    return {
        "profile": result["profile"],
        "free_glass_ms": free.get("glass_ms_median") if free else None,
        "free_repeated": free.get("repeated") if free else None,
        "free_dropped": free.get("dropped") if free else None,
        "auto_glass_ms": auto.get("glass_ms_median") if auto else None,
        "auto_repeats_per_minute": auto.get("repeats_per_minute") if auto else None,
        "auto_minus_free_ms": better,
        "decoded_ms_median": (auto or free or {}).get("decoded_ms_median"),
        "ready_ms_median": (auto or {}).get("ready_ms_median"),
        "ready_ms_tail": (auto or {}).get("ready_ms_tail"),
        "host_cpu_pct": (auto or free or {}).get("host_cpu_pct"),
        "host_cpu_by_thread_pct": (auto or free or {}).get("host_cpu_by_thread_pct") or {},
        "viewer_cpu_by_thread_pct": (auto or free or {}).get("viewer_cpu_by_thread_pct") or {},
        "late_pictures": (auto or {}).get("late_pictures"),
        "auto_said_outrun": bool((auto or {}).get("said_outrun")),
    }


def _f(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def format_profiles(result: dict[str, Any]) -> str:
    parts = [f"== {r['profile']}\n{format_table(r)}" for r in result["profiles"]]
    head = (
        f"{'profile':<44}{'free glass (repeats, drops)':>30}{'auto glass':>12}{'/min':>8}{'auto - free':>13}"
        f"{'decoded':>9}{'ready..tail':>13}{'host CPU':>10}"
    )
    lines = [head, "-" * len(head)]
    for s in result["summary"]:
        free = f"{_f(s['free_glass_ms'], '.1f')} ms ({_f(s['free_repeated'], 'd')}, {_f(s['free_dropped'], 'd')})"
        lines.append(
            f"{s['profile']:<44}{free:>30}{_f(s['auto_glass_ms'], '.1f') + ' ms':>12}"
            f"{_f(s['auto_repeats_per_minute'], '.1f'):>8}{_f(s['auto_minus_free_ms'], '+.1f') + ' ms':>13}"
            f"{_f(s['decoded_ms_median'], '.1f') + ' ms':>9}"
            f"{_f(s['ready_ms_median'], '.1f') + '..' + _f(s['ready_ms_tail'], '.1f'):>13}"
            f"{_f(s['host_cpu_pct'], '.0f') + ' %':>10}"
        )
    outrun = [s["profile"] for s in result["summary"] if s.get("auto_said_outrun")]
    if outrun:
        said = (
            "the lock said the pictures' ready times spread wider than it can spare, or that it kept missing at "
            "the wait it can spare (a line in the viewer's log)"
        )
        lines += ["", f"{said} at: " + "; ".join(outrun)]
    for side in ("host", "viewer"):
        key = f"{side}_cpu_by_thread_pct"
        if any(s.get(key) for s in result["summary"]):
            split = [f"  {s['profile']}: {format_thread_split(s.get(key) or {})}" for s in result["summary"]]
            lines += ["", f"the {side}'s CPU by thread (a core = 100 %):", *split]
    return "\n\n".join(parts) + "\n\nautomatic against free-running, profile by profile:\n" + "\n".join(lines)


#: The host's and the viewer's threads by what they do (:class:`pyrofling.runtime.ThreadCpu`'s names).
THREAD_LABELS = {
    "MainThread": "event loop",
    "native": "codec threads",
    "pyrofling-encode": "encode",
    "pyrofling-audio-tone": "audio",
    "pyrofling-heartbeat": "heartbeat",
    "pyrofling-decode": "decode",
    "pyrofling-present": "presenter",
    "pyrofling-audio": "audio out",
}


def format_thread_split(pct: dict[str, float]) -> str:
    """``encode 16 %, codec threads 53 %, …``, largest first; threads under 0.5 % summed as "other"."""
    named = sorted(((THREAD_LABELS.get(n, n), v) for n, v in pct.items()), key=lambda kv: -kv[1])
    shown = [f"{label} {v:.0f} %" for label, v in named if v >= 0.5]
    rest = sum(v for _, v in named if v < 0.5)
    return ", ".join(shown + ([f"other {rest:.1f} %"] if rest else [])) or "-"
