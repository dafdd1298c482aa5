"""``pyrofling bench codec-switch``: what ``host --codec auto`` costs the viewer already watching when a viewer that
decodes less joins, and when it leaves.

Two runs of ``bench stream``'s scenario with ``host --codec auto`` (the first viewer judging every refresh against
the scene): a second viewer joins at ``join_s`` and leaves at ``leave_s``; in one run it decodes only H.264 (the
host turns the one encode to H.264 at its KICK, then back to the best codec :data:`HOLD_S` after it left), in the
other it decodes everything (no switch: what a join costs anyway, its forced key frame). Per run: the first viewer's
good, stale and corrupt refreshes, freezes and the longest, the codec changes it followed, decode errors; the
second viewer's codec and its connect → first picture; the host's switches and the longest the encoder took to open
anew.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pyrofling.bench.stream import StreamScenario, run_scenario, summarize
from pyrofling.core.host.codec_choice import HOLD_S


@dataclass(frozen=True, slots=True)
class SwitchCase:
    width: int = 1280
    height: int = 720
    fps: int = 60
    bitrate_kbits: int = 10_000
    join_s: float = 3.0
    leave_s: float = 6.0

    @property
    def duration_s(self) -> float:
        """Long enough for the best codec to come back after the leave, and a few seconds of it."""
        return self.leave_s + HOLD_S + 3.0


def _second_viewer(case: SwitchCase, codecs: str, out: Path) -> Any:
    """Joins at ``join_s`` after the viewers started, watches until ``leave_s``; returns its statistics."""

    def run(host_port: int, _host_pid: int) -> dict[str, Any]:
        time.sleep(case.join_s)
        cmd = [sys.executable, "-m", "pyrofling", "view", f"pyro://127.0.0.1:{host_port}", "-q", "--headless",
               "--no-audio", "--codecs", codecs, "--duration", str(case.leave_s - case.join_s),
               "--stats-json", str(out)]  # fmt: skip
        subprocess.run(cmd, timeout=case.leave_s + 60, check=False)
        try:
            data: dict[str, Any] = json.loads(out.read_text())
        except (OSError, ValueError):
            return {}
        return data

    return run


def run_switch_bench(case: SwitchCase, progress: Any = None) -> dict[str, Any]:
    say = progress or (lambda _line: None)
    rows = []
    for codecs, what in (("h264", "joins decoding only H.264"), ("h264,hevc,av1", "joins decoding every codec")):
        say(f"{case.width}x{case.height}@{case.fps}, --codec auto: a second viewer {what} at {case.join_s:g} s, "
            f"leaves at {case.leave_s:g} s ...")  # fmt: skip
        scenario = StreamScenario(width=case.width, height=case.height, fps=case.fps, bitrate_kbits=case.bitrate_kbits,
                                  duration_s=case.duration_s, host_args=("--codec", "auto", "--no-audio"),
                                  view_args=("--no-audio",))  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="pyrofling-switch-") as tmp:
            raw = run_scenario(scenario, alongside=_second_viewer(case, codecs, Path(tmp) / "second.json"),
                               timeout_s=case.duration_s + 60)  # fmt: skip
        row = summarize(raw)
        first = raw["viewers"][0] if raw["viewers"] else {}
        second = raw.get("alongside") or {}
        host = raw["host"]
        rows.append({
            "second_viewer": what,
            "good_refreshes_pct": row["good_refreshes_pct"],
            "refreshes": row["refreshes"],
            "stale_refreshes": row["stale_refreshes"],
            "corrupt_refreshes": row["corrupt_refreshes"],
            "freezes": row["freezes"],
            "longest_freeze_ms": row["longest_freeze_ms"],
            "codec_changes_followed": first.get("codec_changes", 0),
            "decode_errors": first.get("decode_errors", 0),
            "first_viewer_codec_at_end": first.get("video_codec"),
            "second_viewer_codec": second.get("video_codec"),
            "second_viewer_first_picture_ms": (second.get("connect_to_first_frame_ms") or [None])[0],
            "second_viewer_frames_shown": second.get("frames_shown", 0),
            "host_switches": host.get("codec_switches", 0),
            "encoder_open_max_ms": host.get("codec_switch_open_max", 0.0),
            "host_cpu_pct": row["host_cpu_pct"],
        })  # fmt: skip
    return {"case": _case(case), "rows": rows}


def _case(case: SwitchCase) -> dict[str, Any]:
    return asdict(case) | {"duration_s": case.duration_s}


def format_table(result: dict[str, Any]) -> str:
    c = result["case"]
    lines = [
        f"{c['width']}x{c['height']}@{c['fps']} {c['bitrate_kbits'] / 1000:g} Mbit/s, host --codec auto; a second "
        f"viewer from {c['join_s']:g} to {c['leave_s']:g} s, {c['duration_s']:g} s in all",
        f"{'second viewer':<28}{'good %':>8}{'stale':>7}{'corrupt':>9}{'freezes (longest)':>19}{'followed':>10}"
        f"{'switches':>10}{'open ms':>9}{'second: codec, 1st picture':>28}",
    ]
    for r in result["rows"]:
        first_ms = r["second_viewer_first_picture_ms"]
        second = f"{r['second_viewer_codec'] or '-'}, {first_ms:.0f} ms" if first_ms is not None else "-"
        lines.append(
            f"{r['second_viewer']:<28}{r['good_refreshes_pct'] or 0:>8.2f}{r['stale_refreshes']:>7}"
            f"{r['corrupt_refreshes']:>9}{r['freezes']:>10} ({r['longest_freeze_ms'] or 0:.0f} ms)"
            f"{r['codec_changes_followed']:>10}{r['host_switches']:>10}{r['encoder_open_max_ms']:>9.0f}{second:>28}"
        )
    return "\n".join(lines)
