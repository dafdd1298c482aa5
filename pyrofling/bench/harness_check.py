"""``pyrofling bench harness``: the test harness against ``bench stream``, on one model and seed, in one run.

Three runs one after the other: ``bench stream``'s own (its scenario, its summary), then
:func:`pyrofling.harness.run_stream` twice through the same link. It reports each one's good refreshes and the
difference in points, whether the three dropped the same datagrams (over those all three gave the link), and
what the harness runs left behind in this process (threads, descriptors, children): nothing, if it holds.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from pyrofling.bench.stream import run_scenario, summarize
from pyrofling.harness import Link, Stream, run_stream
from pyrofling.harness.resources import held_now, left_behind
from pyrofling.harness.runner import scenario_for


def same_drops(lists: list[tuple[int, ...]], on_link: list[int]) -> tuple[bool, int, int]:
    """(whether every list drops the same datagrams among the first ``min(on_link)``, how many that is, those
    datagrams)."""
    common = min(on_link) if on_link else 0
    cut = [tuple(i for i in drops if i < common) for drops in lists]
    return all(c == cut[0] for c in cut), len(cut[0]) if cut else 0, common


def run_harness_bench(stream: Stream, link: Link, progress: Any = None) -> dict[str, Any]:
    say = progress or (lambda _line: None)
    say(f"bench stream: {stream.label()} through {link.label()} ...")
    bench_raw = run_scenario(scenario_for(stream, link), timeout_s=stream.seconds + 60)
    bench_row = summarize(bench_raw)
    bench_down = (bench_raw.get("netsim") or {}).get("down") or {}
    before = held_now()
    harness = []
    for n in (1, 2):
        say(f"harness run {n}: the same ...")
        harness.append(run_stream(stream, link))
    leftovers = left_behind(before, held_now())
    good = [bench_row["good_refreshes_pct"] or 0.0] + [r.good_refreshes_pct for r in harness]
    drop_lists = [tuple(bench_down.get("dropped_at") or ())] + [r.dropped_datagrams for r in harness]
    on_link = [int(bench_down.get("received", 0))] + [r.datagrams_on_link or 0 for r in harness]
    same, dropped, common = same_drops(drop_lists, on_link)

    def row(run: str, good_pct: float, refreshes: int | None, on_link: int | None, lost: int,
            counts: tuple[int, int, int, int]) -> dict[str, Any]:  # fmt: skip
        # What the refreshes that were not good were, and whether a packet was lost for good behind them (a key
        # frame asked) or the machine alone held a picture back.
        stale, corrupt, packets_lost, keys = counts
        return {"run": run, "good_refreshes_pct": good_pct, "refreshes": refreshes, "datagrams_on_link": on_link,
                "datagrams_lost": lost, "stale_refreshes": stale, "corrupt_refreshes": corrupt,
                "packets_lost_after_fec": packets_lost, "key_frames_asked": keys}  # fmt: skip

    bench_counts = (
        int(bench_row["stale_refreshes"] or 0),
        int(bench_row["corrupt_refreshes"] or 0),
        int(bench_row["packets_lost_after_fec"] or 0),
        int(bench_row["keyframe_requests"] or 0),
    )
    rows = [row("bench stream", good[0], bench_row["refreshes"], on_link[0], len(drop_lists[0]), bench_counts)]
    for n, r in enumerate(harness, 1):
        counts = (r.stale_refreshes, r.corrupt_refreshes, r.packets_lost_after_fec, r.key_frames_asked)
        rows.append(
            row(f"harness {n}", r.good_refreshes_pct, r.refreshes, r.datagrams_on_link, r.datagrams_lost, counts)
        )
    return {
        "stream": asdict(stream),
        "link": asdict(link),
        "runs": rows,
        "harness_minus_bench_points": [g - good[0] for g in good[1:]],
        "same_drops": same,
        "drops_compared": dropped,
        "datagrams_compared": common,
        "left_behind": leftovers,
    }


def format_table(result: dict[str, Any]) -> str:
    lines = [
        f"{'run':<14}{'good refreshes %':>18}{'refreshes':>11}{'stale':>7}{'corrupt':>9}{'on the link':>13}"
        f"{'dropped':>9}{'lost after repair':>19}{'key frames asked':>18}"
    ]
    for run in result["runs"]:
        lines.append(
            f"{run['run']:<14}{run['good_refreshes_pct']:>18.2f}{run['refreshes'] or 0:>11}"
            f"{run['stale_refreshes']:>7}{run['corrupt_refreshes']:>9}"
            f"{run['datagrams_on_link'] or 0:>13}{run['datagrams_lost']:>9}"
            f"{run['packets_lost_after_fec']:>19}{run['key_frames_asked']:>18}"
        )
    diffs = ", ".join(f"{d:+.2f}" for d in result["harness_minus_bench_points"])
    lines.append(f"harness - bench stream: {diffs} points of good refreshes")
    lines.append(
        f"same datagrams dropped by all three over the first {result['datagrams_compared']} on the link: "
        f"{'yes' if result['same_drops'] else 'NO'} ({result['drops_compared']} dropped)"
    )
    left = result["left_behind"]
    lines.append("left behind by the harness runs: " + ("nothing" if not left else "; ".join(left)))
    return "\n".join(lines)
