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
duration exceeded that stage's median by the most.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

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
            row.update({k: h[k] for k in ("due", "woke", "loop", "encoded", "queued") if k in h})
            if row.get("capture") is not None and "queued" in h:
                row["sent_local"] = row["capture"] + (h["queued"] - h["woke"])
        rows.append(row)
    return rows


def share_tail(values: list[float], share: float) -> float:
    """The value that only ``share`` of ``values`` exceed: of N, N × share may be above it (with fewer than one
    allowed, the largest: what one run can show)."""
    ordered = sorted(values)
    allowed = math.floor(len(ordered) * share + 1e-9)
    return ordered[max(0, len(ordered) - 1 - allowed)]


def attribute(rows: list[dict[str, Any]], *, close_ms: float = 1.0, tail_share: float = 1 / 3600) -> dict[str, Any]:
    """Count late pictures per stage to blame, with the stages' medians and the late ones' mean excess; and
    each stage's own tail: the duration only ``tail_share`` of pictures exceed (the allowed repeat rate's share
    of refreshes), which a phase offset's margin would have to cover for that stage alone."""
    durations: dict[str, list[float]] = {name: [] for name, _, _ in STAGES}
    for r in rows:
        for name, a, b in STAGES:
            if r.get(a) is not None and r.get(b) is not None:
                durations[name].append((r[b] - r[a]) * 1000)
    medians = {name: statistics.median(v) for name, v in durations.items() if v}
    late = [r for r in rows if r.get("missed") or r["late"] * 1000 > (r["deadline"] - r["offset"]) * 1000 - close_ms]
    blame: dict[str, int] = {}
    excess: dict[str, list[float]] = {}
    for r in late:
        worst, worst_excess = "host phase", 0.0
        for name, a, b in STAGES:
            if name in medians and r.get(a) is not None and r.get(b) is not None:
                extra = (r[b] - r[a]) * 1000 - medians[name]
                if extra > worst_excess:
                    worst, worst_excess = name, extra
        blame[worst] = blame.get(worst, 0) + 1
        excess.setdefault(worst, []).append(worst_excess)
    return {
        "pictures": len(rows),
        "late": len(late),
        "missed": sum(1 for r in rows if r.get("missed")),
        "stage_median_ms": medians,
        "stage_p99_ms": {n: sorted(v)[int(len(v) * 0.99)] for n, v in durations.items() if v},
        "tail_share": tail_share,
        "stage_tail_ms": {n: share_tail(v, tail_share) for n, v in durations.items() if v},
        "blame": dict(sorted(blame.items(), key=lambda kv: -kv[1])),
        "blame_excess_ms": {k: statistics.fmean(v) for k, v in excess.items()},
    }


def format_attribution(label: str, a: dict[str, Any]) -> str:
    lines = [
        f"{label}: {a['late']} late pictures of {a['pictures']} ({a['missed']} missed their refresh); blamed on:",
    ]
    for stage, n in a["blame"].items():
        lines.append(f"  {stage:20} {n:4}  (+{a['blame_excess_ms'][stage]:.1f} ms over its median)")
    med, p99 = a["stage_median_ms"], a["stage_p99_ms"]
    medians = ", ".join(f"{n} {med[n]:.2f}/{p99[n]:.2f}" for n, _, _ in STAGES if n in med)
    lines.append(f"  stage median/p99 ms: {medians}")
    tails = a.get("stage_tail_ms")
    if tails:
        over = sorted(((tails[n] - med[n], n) for n in tails if n in med), reverse=True)
        said = ", ".join(f"{n} +{ms:.1f}" for ms, n in over if ms >= 0.05)
        lines.append(f"  1 picture in {1 / a['tail_share']:.0f} ran over its median by more than (ms): {said}")
    return "\n".join(lines)
