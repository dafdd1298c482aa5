"""Where late pictures lose their time: the host's and the viewer's frame traces joined.

The host (``--frame-trace``) writes a line per encoded frame: when its tick was
due, when the heartbeat thread woke, when the event loop ran it, when the encode
finished and when the packets went to the pacers, on the host's clock, with the
capture stamp put in the picture.  The viewer (``--frame-trace``) writes a line
per refresh that showed a new picture (when its first and last datagram came,
when it was queued for the decoder, decoded and ready, and how late against the
target) and per missed deadline.  Both carry the capture stamp, so each picture's
life is one row; times on the host's clock are only compared with each other, as
are the viewer's.

A picture is *late* when it missed its deadline (shown a refresh late) or came
within ``close_ms`` of it.  Each late picture is blamed on the stage whose
duration exceeded that stage's median by the most, and counted apart when a run
of either process's cyclic garbage collector (written into the traces too,
``{"gc": generation, "start", "end"}``) overlapped its life.  The first
``STARTUP_S`` of a run (the decoder and the lock settling) are reported on their
own, not in the tails.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pyrofling.core.viewer.stage_tails import share_tail

#: (name, start key, end key).  "pacer + network" runs from the hand-over to the pacers, mapped onto the
#: viewer's clock (its capture time through the clock sync, plus the host's own capture → hand-over), to the
#: first datagram's arrival.
STAGES: tuple[tuple[str, str, str], ...] = (
    ("heartbeat wake-up", "due", "woke"),
    ("host event loop", "woke", "loop"),
    ("encode", "loop", "encoded"),
    ("hand to pacers", "encoded", "queued"),
    ("pacer + network", "sent_local", "first_s"),
    ("datagram train", "first_s", "complete_s"),
    ("viewer receive", "complete_s", "queued_s"),
    ("decode queue", "queued_s", "decode_start_s"),
    ("decode", "decode_start_s", "decoded_s"),
    ("prepare", "decoded_s", "done"),
)


#: Pictures captured this soon after the first are the start-up, reported apart from the tails.
STARTUP_S = 2.0


def read_lines(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short when the process stopped
    return out


def join(host: list[dict[str, Any]], view: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A row per shown picture, host stages merged in; a picture shown after a miss gets ``missed`` and its
    true lateness (against the refresh it missed)."""
    by_capture = {h["capture_us"]: h for h in host if "capture_us" in h}
    rows = []
    missed_at: dict[str, Any] | None = None
    for v in view:
        if "gc" in v:  # a collector run, not a picture
            continue
        if v.get("dropped_picture"):  # decoded but never shown: a newer one was ready by the same refresh
            continue
        if v.get("miss"):
            missed_at = v
            continue
        row = dict(v)
        if missed_at is not None:
            row["missed"] = True
            row["late"] = v["done"] - (missed_at["vblank"] + missed_at["offset"])
            missed_at = None
        h = by_capture.get(v.get("capture_us"))
        if h is not None:
            row.update({k: h[k] for k in ("due", "woke", "loop", "encoded", "queued", "thread") if k in h})
            if row.get("capture") is not None and "queued" in h:
                row["sent_local"] = row["capture"] + (h["queued"] - h["woke"])
        rows.append(row)
    return rows


def collector_runs(lines: list[dict[str, Any]]) -> list[tuple[float, float, int]]:
    """(start, end, generation) of each collector run a trace recorded."""
    return [(line["start"], line["end"], line["gc"]) for line in lines if "gc" in line]


def split_startup(
    rows: list[dict[str, Any]], startup_s: float = STARTUP_S
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows after the start-up, and what the start-up's pictures did: how many, how many late, and the
    longest a picture queued between arriving and being decoded (the decoder's first pictures)."""
    captured = [r["capture"] for r in rows if r.get("capture") is not None]
    if not captured:
        return rows, {"pictures": 0, "late": 0, "worst_queue_ms": None}
    cut = min(captured) + startup_s
    early = [r for r in rows if r.get("capture") is not None and r["capture"] < cut]
    queues = [
        (r["decode_start_s"] - r["complete_s"]) * 1000
        for r in early
        if r.get("decode_start_s") is not None and r.get("complete_s") is not None
    ]
    return [r for r in rows if not (r.get("capture") is not None and r["capture"] < cut)], {
        "seconds": startup_s,
        "pictures": len(early),
        "late": sum(1 for r in early if _is_late(r, 1.0)),
        "worst_queue_ms": max(queues) if queues else None,
    }


def _is_late(r: dict[str, Any], close_ms: float) -> bool:
    return bool(r.get("missed")) or r["late"] * 1000 > (r["deadline"] - r["offset"]) * 1000 - close_ms


def _overlaps(start: float | None, end: float | None, runs: Sequence[tuple[float, float, int]]) -> bool:
    if start is None or end is None:
        return False
    return any(a < end and b > start for a, b, _ in runs)


def _split(samples: list[dict[str, Any]], average: Callable[[list[float]], float]) -> dict[str, float] | None:
    """The encode thread's wall time split (on a CPU, waiting for one, blocked), averaged, ms; how many times it
    was taken off its CPU meanwhile, and its codec threads' time on a CPU and waiting for one (traces from
    before lack them)."""
    if not samples:
        return None
    out = {k: average([s[k] * 1000 for s in samples]) for k in ("cpu", "runq", "blocked")}
    if all("switches" in s for s in samples):
        out["switches"] = average([float(s["switches"]) for s in samples])
    if all("codec" in s for s in samples):  # the slice threads it waited for: on a CPU, waiting for one
        for k in ("cpu", "runq", "runq_max"):
            out[f"codec_{k}"] = average([s["codec"][k] * 1000 for s in samples])
    return out


def collector_summary(runs: list[tuple[float, float, int]], seconds: float) -> dict[str, Any]:
    """How often the collector ran and how long it stopped the process, per generation."""
    out: dict[str, Any] = {}
    for gen in sorted({g for _, _, g in runs}):
        ms = sorted((b - a) * 1000 for a, b, g in runs if g == gen)
        out[str(gen)] = {
            "runs": len(ms),
            "per_minute": len(ms) * 60 / seconds if seconds > 0 else None,
            "median_ms": statistics.median(ms),
            "max_ms": ms[-1],
        }
    return out


def attribute(
    rows: list[dict[str, Any]],
    *,
    close_ms: float = 1.0,
    tail_share: float = 1 / 3600,
    host_gc: Sequence[tuple[float, float, int]] = (),
    viewer_gc: Sequence[tuple[float, float, int]] = (),
    startup_s: float = STARTUP_S,
    machine_slow: Sequence[Sequence[float]] | None = None,
) -> dict[str, Any]:
    """Count late pictures per stage to blame, with the stages' medians and the late ones' mean excess; and
    each stage's own tail: the duration only ``tail_share`` of pictures exceed (the allowed repeat rate's share
    of refreshes), which a phase offset's margin would have to cover for that stage alone.  The start-up is
    left out of all of it and reported as ``startup``; late pictures whose life a collector run overlapped
    are counted per process, and those whose life (capture to ready) met a spell when the whole machine ran
    slow (``machine_slow``: :mod:`~pyrofling.bench.pace_meter`'s spells) counted apart too."""
    rows, startup = split_startup(rows, startup_s)
    durations: dict[str, list[float]] = {name: [] for name, _, _ in STAGES}
    for r in rows:
        for name, a, b in STAGES:
            if r.get(a) is not None and r.get(b) is not None:
                durations[name].append((r[b] - r[a]) * 1000)
    medians = {name: statistics.median(v) for name, v in durations.items() if v}
    late = [r for r in rows if _is_late(r, close_ms)]
    in_gc = {
        "host": sum(1 for r in late if _overlaps(r.get("due"), r.get("queued"), host_gc)),
        "viewer": sum(1 for r in late if _overlaps(r.get("capture"), r.get("done"), viewer_gc)),
    }
    spells = [(a, b, 0) for a, b, *_ in machine_slow or ()]
    in_slow = sum(1 for r in late if _overlaps(r.get("capture"), r.get("done"), spells))
    captures = [r["capture"] for r in rows if r.get("capture") is not None]
    seconds = max(captures) - min(captures) if captures else 0.0
    blame: dict[str, int] = {}
    excess: dict[str, list[float]] = {}
    encode_late: list[dict[str, float]] = []  # the encode thread's time split, of pictures the encode made late
    for r in late:
        worst, worst_excess = "host phase", 0.0
        for name, a, b in STAGES:
            if name in medians and r.get(a) is not None and r.get(b) is not None:
                extra = (r[b] - r[a]) * 1000 - medians[name]
                if extra > worst_excess:
                    worst, worst_excess = name, extra
        blame[worst] = blame.get(worst, 0) + 1
        excess.setdefault(worst, []).append(worst_excess)
        if worst == "encode" and "cpu" in r.get("thread", {}):
            encode_late.append(r["thread"])
    encode_all = [r["thread"] for r in rows if "cpu" in r.get("thread", {})]
    return {
        "pictures": len(rows),
        "late": len(late),
        "missed": sum(1 for r in rows if r.get("missed")),
        "stage_median_ms": medians,
        "stage_p99_ms": {n: sorted(v)[int(len(v) * 0.99)] for n, v in durations.items() if v},
        "stage_p999_ms": {n: sorted(v)[int(len(v) * 0.999)] for n, v in durations.items() if v},
        "tail_share": tail_share,
        "stage_tail_ms": {n: share_tail(v, tail_share) for n, v in durations.items() if v},
        "blame": dict(sorted(blame.items(), key=lambda kv: -kv[1])),
        "blame_excess_ms": {k: statistics.fmean(v) for k, v in excess.items()},
        "encode_thread_ms": {
            "median": _split(encode_all, statistics.median),
            "late": _split(encode_late, statistics.fmean),
        },
        "late_in_collection": in_gc,
        "late_in_machine_slow": in_slow if machine_slow is not None else None,
        "collector": {
            "host": collector_summary(list(host_gc), seconds),
            "viewer": collector_summary(list(viewer_gc), seconds),
        },
        "startup": startup,
    }


def format_attribution(label: str, a: dict[str, Any]) -> str:
    lines = [
        f"{label}: {a['late']} late pictures of {a['pictures']} ({a['missed']} missed their refresh); blamed on:",
    ]
    for stage, n in a["blame"].items():
        lines.append(f"  {stage:20} {n:4}  (+{a['blame_excess_ms'][stage]:.1f} ms over its median)")
    med, p99 = a["stage_median_ms"], a["stage_p99_ms"]
    p999 = a.get("stage_p999_ms", p99)
    medians = ", ".join(f"{n} {med[n]:.2f}/{p99[n]:.2f}/{p999[n]:.2f}" for n, _, _ in STAGES if n in med)
    lines.append(f"  stage median/p99/p99.9 ms: {medians}")
    tails = a.get("stage_tail_ms")
    if tails:
        over = sorted(((tails[n] - med[n], n) for n in tails if n in med), reverse=True)
        said = ", ".join(f"{n} +{ms:.1f}" for ms, n in over if ms >= 0.05)
        lines.append(f"  1 picture in {1 / a['tail_share']:.0f} ran over its median by more than (ms): {said}")
    split = a.get("encode_thread_ms", {})
    if split.get("late"):
        m, late = split["median"], split["late"]
        lines.append(
            "  encode thread, median -> late pictures' mean (ms): on a CPU {:.1f} -> {:.1f}, waiting for a CPU "
            "{:.1f} -> {:.1f}, blocked (its slice threads, the GIL) {:.1f} -> {:.1f}".format(
                m["cpu"], late["cpu"], m["runq"], late["runq"], m["blocked"], late["blocked"]
            )
            + (
                ", taken off its CPU {:.1f} -> {:.1f} times".format(m["switches"], late["switches"])
                if "switches" in m and "switches" in late
                else ""
            )
        )
        if "codec_runq" in m and "codec_runq" in late and m["codec_cpu"] + late["codec_cpu"] > 0:  # x264 sliced
            lines.append(
                "  its codec threads, median -> late: on a CPU {:.1f} -> {:.1f} (all of them), waiting for a CPU "
                "{:.2f} -> {:.2f} (the longest one's wait {:.2f} -> {:.2f})".format(
                    m["codec_cpu"],
                    late["codec_cpu"],
                    m["codec_runq"],
                    late["codec_runq"],
                    m["codec_runq_max"],
                    late["codec_runq_max"],
                )
            )
    gc_late = a.get("late_in_collection")
    if gc_late is not None:
        runs = []
        for side in ("host", "viewer"):
            for gen, g in a["collector"][side].items():
                runs.append(f"{side} gen {gen} {g['runs']} ({g['median_ms']:.1f}/{g['max_ms']:.1f} ms)")
        lines.append(
            f"  late while the collector ran: host {gc_late['host']}, viewer {gc_late['viewer']}; "
            f"collector runs (median/max): {', '.join(runs) or 'none recorded'}"
        )
    if a.get("late_in_machine_slow") is not None:
        lines.append(
            f"  late while the whole machine ran slow (the pace meter's spells): {a['late_in_machine_slow']} of "
            f"{a['late']}"
        )
    start = a.get("startup")
    if start and start["pictures"]:
        worst = start["worst_queue_ms"]
        waited = f", longest wait for the decoder {worst:.1f} ms" if worst is not None else ""
        lines.append(
            f"  start-up (first {start['seconds']:g} s, left out above): {start['late']} late of {start['pictures']}"
            + waited
        )
    return "\n".join(lines)
