"""``pyrofling bench outputs``: what recording and broadcasting cost the host and its direct viewers.

Each run is a real host (test scene with its tone) and a real headless viewer
(:mod:`pyrofling.bench.stream`). A run with no outputs is the baseline. The
other runs add ``--record``, ``--broadcast`` to a real nginx-rtmp that the
bench starts on loopback, or both. The modes take turns round by round, so a
change in the machine's load falls on all of them alike. The report gives
each mode's median host CPU and viewer latency next to the baseline's. It
also checks the recording: the file is decoded and its frames counted.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import av

from pyrofling.bench import nginx
from pyrofling.bench.stream import StreamScenario, cell, median_of, run_scenario, summarize

#: Mode → what it adds to the host's command line ({rec} and {url} filled in per run).
MODES: dict[str, tuple[str, ...]] = {
    "plain": (),
    "record": ("--record", "{rec}"),
    "broadcast": ("--broadcast", "{url}"),
    "both": ("--record", "{rec}", "--broadcast", "{url}"),
    "own-encoder": ("--record", "{rec}", "--broadcast", "{url}", "--broadcast-bitrate-kbits", "3000"),
}
DEFAULT_MODES = ("plain", "both")


def check_modes(modes: list[str]) -> str | None:
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        return f"unknown mode(s) {', '.join(unknown)}: choose from {', '.join(MODES)}"
    if "plain" not in modes:
        return "the modes must include plain, the baseline the others are compared with"
    if any("{url}" in " ".join(MODES[m]) for m in modes):
        return nginx.missing()
    return None


def count_frames(path: Path) -> dict[str, Any]:
    """Decode a recording: its video frames, the time of the last one, and its seconds of audio."""
    frames, end_s, audio_s = 0, 0.0, 0.0
    try:
        with av.open(str(path)) as c:
            for frame in c.decode(*c.streams):
                if isinstance(frame, av.VideoFrame):
                    frames += 1
                    end_s = max(end_s, float(frame.time or 0.0))
                elif isinstance(frame, av.AudioFrame):
                    audio_s += frame.samples / frame.sample_rate
    except (av.FFmpegError, OSError) as exc:
        return {"error": str(exc)}
    return {"frames": frames, "video_s": end_s, "audio_s": audio_s}


def run_outputs_bench(
    base: StreamScenario,
    modes: list[str],
    rounds: int,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Run every mode ``rounds`` times, in turn; returns per-run rows and per-mode medians."""
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="pyrofling-bench-outputs-") as tmp_name:
        tmp = Path(tmp_name)
        server = nginx.NginxRtmp(tmp / "nginx") if any("{url}" in " ".join(MODES[m]) for m in modes) else None
        if server is not None:
            server.start()
        try:
            for r in range(rounds):
                for mode in modes:
                    rec = tmp / f"{mode}-{r}.mkv"
                    url = server.url(f"{mode}{r}") if server is not None else ""
                    args = tuple(a.format(rec=rec, url=url) for a in MODES[mode])
                    progress(f"round {r + 1}/{rounds}: {mode} ({base.duration_s:g} s)")
                    raw = run_scenario(replace(base, host_args=args))
                    row = summarize(raw)
                    row["mode"] = mode
                    row["round"] = r + 1
                    row["outputs"] = raw["host"].get("outputs", [])
                    elapsed = raw["host"].get("elapsed_s") or 1.0
                    row["output_cpu_pct"] = 100 * sum(o.get("cpu_s", 0.0) for o in row["outputs"]) / elapsed
                    if "--record" in args:
                        row["recording"] = count_frames(rec)
                        rec.unlink(missing_ok=True)
                    runs.append(row)
        finally:
            if server is not None:
                server.stop()
    return {"scenario": base.label(), "modes": summarize_modes(runs, modes), "runs": runs}


def summarize_modes(runs: list[dict[str, Any]], modes: list[str]) -> list[dict[str, Any]]:
    out = []
    for mode in modes:
        rows = [r for r in runs if r["mode"] == mode]
        outputs = [o for r in rows for o in r.get("outputs", [])]
        recordings = [r["recording"] for r in rows if "recording" in r]
        out.append(
            {
                "mode": mode,
                "runs": len(rows),
                "host_cpu_pct": median_of([r["host_cpu_pct"] for r in rows]),
                "output_cpu_pct": median_of([r["output_cpu_pct"] for r in rows]),
                "latency_ms_median": median_of([r["latency_ms_median"] for r in rows]),
                "latency_ms_p95": median_of([r["latency_ms_p95"] for r in rows]),
                "shown_of_expected_pct": median_of([r["shown_of_expected_pct"] for r in rows]),
                "max_freeze_ms": max((r["max_freeze_ms"] for r in rows), default=0.0),
                "frames_sent": sum(r["frames_sent"] for r in rows),
                "output_dropped": sum(o.get("dropped", 0) for o in outputs),
                "output_failures": sum(o.get("failures", 0) for o in outputs),
                "broadcast_packets": sum(o.get("video_packets", 0) for o in outputs if o["kind"] == "broadcast"),
                "recorded_frames": sum(r.get("frames", 0) for r in recordings),
                "recorded_packets": sum(o.get("video_packets", 0) for o in outputs if o["kind"] == "recording"),
                "recording_errors": [r["error"] for r in recordings if "error" in r],
            }
        )
    plain = next(m for m in out if m["mode"] == "plain")
    for m in out:
        if m is plain:
            continue
        if plain["host_cpu_pct"] and m["host_cpu_pct"] is not None:
            m["extra_cpu_pct"] = 100 * (m["host_cpu_pct"] / plain["host_cpu_pct"] - 1)
            # The outputs' threads timed on their own: the same question without the run-to-run noise.
            m["output_cpu_share_pct"] = 100 * (m["output_cpu_pct"] or 0.0) / plain["host_cpu_pct"]
        if plain["latency_ms_median"] is not None and m["latency_ms_median"] is not None:
            m["extra_latency_ms"] = m["latency_ms_median"] - plain["latency_ms_median"]
    return out


def format_table(result: dict[str, Any]) -> str:
    lines = [
        f"{result['scenario']}; medians over {result['modes'][0]['runs']} run(s) per mode",
        f"{'mode':<12} {'host CPU %':>10} {'vs plain':>9} {'outputs':>8} {'latency med/p95 ms':>19} {'Δ latency':>10} "
        f"{'shown %':>8} {'max freeze':>11} {'recorded':>16} {'dropped':>8} {'failures':>8}",
    ]
    for m in result["modes"]:
        extra = m.get("extra_cpu_pct")
        share = m.get("output_cpu_share_pct")
        dlat = m.get("extra_latency_ms")
        recorded = (
            f"{m['recorded_frames']}/{m['recorded_packets']}" if m["recorded_packets"] or m["recorded_frames"] else "—"
        )
        lines.append(
            f"{m['mode']:<12} {cell(m['host_cpu_pct']):>10} {'—' if extra is None else f'{extra:+.1f} %':>9} "
            f"{'—' if share is None else f'{share:+.1f} %':>8} "
            f"{cell(m['latency_ms_median'], '.2f') + ' / ' + cell(m['latency_ms_p95'], '.2f'):>19} "
            f"{'—' if dlat is None else f'{dlat:+.2f} ms':>10} {cell(m['shown_of_expected_pct']):>8} "
            f"{cell(m['max_freeze_ms'], '.0f') + ' ms':>11} {recorded:>16} {m['output_dropped']:>8} "
            f"{m['output_failures']:>8}"
        )
    lines.append(
        "vs plain: host process CPU against plain's (includes run-to-run noise); outputs: CPU of the output "
        "threads alone, as a share of plain's host CPU"
    )
    lines.append("recorded: frames decoded from the file / packets the host muxed (equal: nothing lost)")
    for m in result["modes"]:
        for err in m["recording_errors"]:
            lines.append(f"recording of {m['mode']} failed to decode: {err}")
    return "\n".join(lines)
