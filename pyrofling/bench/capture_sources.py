"""``pyrofling bench capture --sources``: what each of the host's picture sources delivers and costs.

For each source and size, a real host streams to a real headless viewer (``view
--headless --display WxH@FPS --marker-log``), and the same program draws the picture
wherever a program draws: ``pyrofling.bench.marker_window`` (a full-screen OpenGL
window whose frame marker counts its frames and carries its draw time), in an Xvfb
screen for ``x11``, in the host's own desktop for ``headless`` (mutter, Xwayland,
PipeWire); ``scene`` is the host's test scene, drawn by the host at each tick.

Measured over a window after a warm-up, all on one monotonic clock:

* new pictures a second at the viewer: distinct frame markers decoded (what a player sees change);
* frames encoded a second (the host encodes the newest picture at every tick, new or not);
* capture → encoded: from when the host had the picture (the desktop's frame arriving out of PipeWire; the grab or
  the render starting for the others) to the end of its encode, for each picture's first encode (host
  ``--frame-trace``);
* drawn → decoded: from the program drawing a picture (its marker's time) to the viewer decoding it;
* host CPU per encoded frame, and the CPU of what makes the pictures (the desktop's processes and the program, or
  Xvfb and the program), in % of one core.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pyrofling.bench.stream import _cli, _read_json, _wait_for_port, free_port, kill_leftovers, stop_processes

SOURCES = ("scene", "x11", "headless")
SIZES = {"360p": (640, 360), "720p": (1280, 720), "1080p": (1920, 1080)}
#: Seconds after the first decoded picture before measuring (the desktop, the program and the decoder settle).
WARMUP_S = 3.0
PROGRAM = [sys.executable, "-m", "pyrofling.bench.marker_window"]


@dataclass(frozen=True, slots=True)
class SourceCase:
    source: str
    width: int
    height: int
    fps: int

    @property
    def label(self) -> str:
        return f"{self.source} {self.width}x{self.height}@{self.fps}"


def cases(sources: Iterable[str], sizes: Iterable[tuple[int, int]], fps: int) -> list[SourceCase]:
    return [SourceCase(s, w, h, fps) for w, h in sizes for s in sources]


def tree_cpu_s(root: int) -> tuple[float, float]:
    """CPU seconds so far of ``root`` and, apart, of all its descendants (with their reaped children's)."""
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    used: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            parent[int(entry)] = int(fields[1])
            used[int(entry)] = sum(int(f) for f in fields[11:15]) / tick
    family, frontier = set(), [root]
    while frontier:
        pid = frontier.pop()
        children = [p for p, pp in parent.items() if pp == pid and p not in family]
        family.update(children)
        frontier.extend(children)
    own = used.get(root, 0.0)
    return own, sum(used.get(p, 0.0) for p in family)


def _x_display() -> int:
    return next(n for n in range(90, 200) if not Path(f"/tmp/.X11-unix/X{n}").exists())


def _wait(check: Callable[[], bool], timeout_s: float, what: str, procs: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{' '.join(map(str, p.args))!r} exited with {p.returncode} before {what}")  # type: ignore[arg-type]
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout_s:g} s")
        time.sleep(0.1)


def _markers(path: Path) -> list[dict[str, Any]]:
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                out.append(json.loads(line))
    return out


def run_one(case: SourceCase, duration_s: float, tmp: Path) -> dict[str, Any]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    port = free_port()
    trace, markers, host_json, view_json = (tmp / n for n in ("trace.jsonl", "markers.jsonl", "host.json", "view.json"))
    size = f"{case.width}x{case.height}"
    host_cmd = [*_cli(), "host", "-q", "--port", str(port), "--width", str(case.width), "--height",
                str(case.height), "--fps", str(case.fps), "--no-audio", "--frame-trace", str(trace),
                "--stats-json", str(host_json)]  # fmt: skip
    program = [*PROGRAM, "--fps", str(case.fps)]
    procs: list[subprocess.Popen[bytes]] = []
    makers: list[subprocess.Popen[bytes]] = []  # what draws, outside the host (x11)
    try:
        if case.source == "x11":
            display = f":{_x_display()}"
            xvfb = subprocess.Popen(["Xvfb", display, "-screen", "0", f"{size}x24", "-nolisten", "tcp"], env=env)
            makers.append(xvfb)
            _wait(lambda: Path(f"/tmp/.X11-unix/X{display[1:]}").exists(), 10, "X server", makers)
            makers.append(subprocess.Popen(program, env=dict(env, DISPLAY=display)))
            host_cmd += ["--source", f"x11:{display}"]
        elif case.source == "headless":
            host_cmd += ["--source", "headless", "--run", " ".join(program)]
            host_cmd += os.environ.get("PYROFLING_BENCH_HOST_ARGS", "").split()
        procs.append(subprocess.Popen(host_cmd, env=env))
        host = procs[0]
        _wait_for_port(port, host, timeout_s=30)
        view_cmd = [*_cli(), "view", f"127.0.0.1:{port}", "-q", "--headless", "--no-audio", "--allow-open-host",
                    "--display", f"{size}@{case.fps}", "--marker-log", str(markers), "--stats-json", str(view_json),
                    "--duration", str(duration_s + WARMUP_S + 20)]  # fmt: skip
        viewer = subprocess.Popen(view_cmd, env=env)
        procs.append(viewer)
        _wait(lambda: markers.exists() and markers.stat().st_size > 0, 30, "picture with a marker", procs + makers)
        time.sleep(WARMUP_S)
        t0, cpu0 = time.monotonic(), _cpu(host.pid, makers)
        time.sleep(duration_s)
        t1, cpu1 = time.monotonic(), _cpu(host.pid, makers)
        stop_processes([viewer], [viewer])
        stop_processes([host], [host])
    finally:
        kill_leftovers(procs + makers[::-1])  # the program before its X server
    return summarize(case, t0, t1, cpu0, cpu1, _markers(trace), _markers(markers), _read_json(view_json) or {})


def _cpu(host: int, makers: list[subprocess.Popen[bytes]]) -> tuple[float, float]:
    """(host, what draws the pictures): the host's own CPU seconds; its children's (the desktop) and the bench's
    own drawing processes' (Xvfb, the program)."""
    own, children = tree_cpu_s(host)
    drawing = children + sum(sum(tree_cpu_s(p.pid)) for p in makers)
    return own, drawing


def summarize(
    case: SourceCase,
    t0: float,
    t1: float,
    cpu0: tuple[float, float],
    cpu1: tuple[float, float],
    trace: list[dict[str, Any]],
    markers: list[dict[str, Any]],
    viewer: dict[str, Any],
) -> dict[str, Any]:
    span = t1 - t0
    encoded = [r for r in trace if "encoded" in r and t0 <= r["encoded"] < t1]
    firsts: dict[float, float] = {}  # each picture's first encode
    for r in encoded:
        if r.get("captured") is not None:
            firsts.setdefault(r["captured"], r["encoded"])
    to_encoded = [(e - c) * 1000 for c, e in firsts.items()]
    shown = [m for m in markers if t0 <= m["t"] < t1 and m.get("whole")]
    first_decode: dict[int, dict[str, Any]] = {}
    for m in shown:
        first_decode.setdefault(m["id"], m)
    drawn = [(m["t"] - m["capture"]) * 1000 for m in first_decode.values() if m.get("capture") is not None]
    frames = len(encoded)
    return {
        "label": case.label,
        "source": case.source,
        "width": case.width,
        "height": case.height,
        "fps": case.fps,
        "seconds": span,
        "new_pictures_per_s": len(first_decode) / span,
        "encoded_per_s": frames / span,
        "capture_to_encoded_ms_median": statistics.median(to_encoded) if to_encoded else None,
        "capture_to_encoded_ms_p99": float(np.percentile(to_encoded, 99)) if to_encoded else None,
        "drawn_to_decoded_ms_median": statistics.median(drawn) if drawn else None,
        "drawn_to_decoded_ms_p99": float(np.percentile(drawn, 99)) if drawn else None,
        "host_cpu_ms_per_frame": (cpu1[0] - cpu0[0]) * 1000 / frames if frames else None,
        "host_cpu_pct": 100 * (cpu1[0] - cpu0[0]) / span,
        "drawing_cpu_pct": 100 * (cpu1[1] - cpu0[1]) / span,
        "decode_errors": viewer.get("decode_errors"),
        "markers_torn": sum(1 for m in markers if not m.get("whole")),
    }


def unavailable(source: str) -> str | None:
    """Why a source cannot be measured on this machine (what to install), or None."""
    if source == "x11" and shutil.which("Xvfb") is None:
        return "no Xvfb (apt-get install xvfb)"
    if source == "headless":
        from pyrofling.core.host.headless import PROGRAMS

        missing = [name for name in PROGRAMS if shutil.which(name) is None]
        if missing:
            return f"no {', '.join(missing)} (scripts/setup installs the headless desktop's packages)"
    return None


def run(
    sources: Iterable[str],
    sizes: Iterable[tuple[int, int]],
    fps: int,
    duration_s: float,
    *,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    for case in cases(sources, sizes, fps):
        why = unavailable(case.source)
        if why is not None:
            skipped[case.source] = why
            continue
        if progress is not None:
            progress(f"sources: {case.label} for {duration_s:g} s ...")
        with tempfile.TemporaryDirectory(prefix="pyrofling-sources-") as tmp:
            rows.append(run_one(case, duration_s, Path(tmp)))
    return {"rows": rows, "skipped": skipped, "warmup_s": WARMUP_S, "cpus": os.cpu_count()}


def format_table(result: dict[str, Any]) -> str:
    def f(x: Any, spec: str = ".1f") -> str:
        return "-" if x is None else format(x, spec)

    lines = [
        f"Picture sources ({result['cpus']} CPUs; the same OpenGL program draws for x11 and headless; "
        f"{result['warmup_s']:g} s warm-up left out)",
        "source     size       new pictures/s  encoded/s  capture→encoded ms   drawn→decoded ms   host CPU      "
        "drawing CPU",
        "                                                  median    p99      median    p99      ms/frame  %    %",
    ]
    for r in result["rows"]:
        to_encoded = f"{f(r['capture_to_encoded_ms_median']):>6} {f(r['capture_to_encoded_ms_p99']):>6}"
        to_decoded = f"{f(r['drawn_to_decoded_ms_median']):>6} {f(r['drawn_to_decoded_ms_p99']):>6}"
        cpu = f"{f(r['host_cpu_ms_per_frame'], '.2f'):>7} {f(r['host_cpu_pct'], '.0f'):>4}"
        cpu += f" {f(r['drawing_cpu_pct'], '.0f'):>4}"
        lines.append(
            f"{r['source']:<10} {r['width']}x{r['height']:<5} {f(r['new_pictures_per_s']):>10}      "
            f"{f(r['encoded_per_s']):>6}     {to_encoded}    {to_decoded}    {cpu}"
        )
    for source, why in result["skipped"].items():
        lines.append(f"{source}: skipped: {why}")
    return "\n".join(lines)
