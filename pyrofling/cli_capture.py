"""CLI for game capture: ``pyrofling example-game`` and ``pyrofling bench capture``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pyrofling.cli_stream import _setup_logging, _whole_number


def add_example_game(sub: Any) -> None:
    from pyrofling.capture.client import SYNC_MODES

    p = sub.add_parser(
        "example-game",
        help="a small pyglet game that presents through the capture socket (host it with --source capture)",
        description=(
            "A small pyglet game streamed through the host's capture socket: steer the blue ball with the "
            "viewer's pad (in the viewer window: WASD or the arrows; Z or Space pulses it). It waits for a host "
            "and reconnects when the host restarts. Without a display it renders headless."
        ),
        epilog="Example: pyrofling host --source capture &  pyrofling example-game &  pyrofling view pyro://127.0.0.1",
    )
    p.add_argument("--width", type=_whole_number(16, 8192, "pixels", even=True), default=1280, help="default 1280")
    p.add_argument("--height", type=_whole_number(16, 8192, "pixels", even=True), default=720, help="default 720")
    p.add_argument(
        "--capture-socket", default=None, metavar="PATH", help="the host's capture socket (default: as the host's)"
    )
    p.add_argument(
        "--sync",
        choices=SYNC_MODES,
        default="fifo",
        help="fifo: the host's frame clock paces the game (default); mailbox: run free, the newest frame wins",
    )
    p.add_argument("--images", type=_whole_number(2, 16, "images"), default=3, help="shared images (default 3)")
    p.add_argument(
        "--frames-in-flight",
        type=_whole_number(1, 4, "frames"),
        default=1,
        help="fifo: presents waiting for the host before the game blocks (default 1, the lowest latency)",
    )
    view = p.add_mutually_exclusive_group()
    view.add_argument("--headless", action="store_true", help="no local window even with a display")
    view.add_argument("--window", action="store_true", help="a local window (needs a display)")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds (default: Ctrl-C)")
    p.add_argument(
        "--stamp",
        action="store_true",
        help="write a frame marker (pad sequence, present time) into each frame, for latency measurement",
    )
    p.add_argument("--stats-json", type=Path, default=None, help="write the game's statistics here on exit")
    p.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    p.set_defaults(func=run_example_game)


def run_example_game(args: argparse.Namespace) -> int:
    from pyrofling.capture.example_game import GameConfig, default_headless, run_game

    _setup_logging(args)
    headless = args.headless or (not args.window and default_headless())
    cfg = GameConfig(
        width=args.width,
        height=args.height,
        socket=args.capture_socket,
        sync=args.sync,
        images=args.images,
        frames_in_flight=args.frames_in_flight,
        headless=headless,
        duration_s=args.duration,
        stamp=args.stamp,
        stats_json=args.stats_json,
    )
    try:
        result = run_game(cfg)
    except Exception as exc:  # a GL or display problem: say what, not a traceback
        if type(exc).__module__.startswith("pyglet"):
            print(f"pyrofling example-game: cannot open a window: {exc} (try --headless)", file=sys.stderr)
            return 1
        raise
    if not args.quiet:
        print(
            json.dumps({k: v for k, v in result.items() if k != "present_times"}),
            file=sys.stderr,
        )
    return 0


def add_bench_capture(sub: Any) -> None:
    from pyrofling.cli_stream import _seconds

    p = sub.add_parser(
        "capture",
        help="game capture: frames encoded, the game's pacing, input to photon (the example game, end to end)",
        description=(
            "Runs a real host (--source capture), the example game presenting through the capture socket "
            "(headless, stamping each frame) and a phase-locked headless viewer whose synthetic pad changes every "
            "4 ms. Reports the share of game frames encoded, the game's frame interval while the host paces it "
            "(FIFO), and input to photon: a pad send to the decode of the first frame that shows the game's "
            "reaction. Same runs as 'bench input --cases game,game-immediate'."
        ),
        epilog="Example: pyrofling bench capture --duration 60",
    )
    p.add_argument("--duration", type=_seconds(5.0, 3600.0), default=20.0, help="seconds per run (default 20)")
    p.add_argument(
        "--cases",
        default="game,game-immediate",
        help="comma list: game (heartbeat encode), game-immediate (--immediate-encode); default both",
    )
    p.add_argument("--width", type=_whole_number(16, 8192, "pixels", even=True), default=1280, help="default 1280")
    p.add_argument("--height", type=_whole_number(16, 8192, "pixels", even=True), default=720, help="default 720")
    p.add_argument("--fps", type=_whole_number(1, 240, "fps"), default=60, help="default 60")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run_bench_capture)


def run_bench_capture(args: argparse.Namespace) -> int:
    from pyrofling.bench.input import InputBenchConfig, format_table, run, standard_scenarios

    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if any(not c.startswith("game") for c in cases):
        print("pyrofling bench capture: --cases takes game and game-immediate", file=sys.stderr)
        return 2
    try:
        scenarios = standard_scenarios(cases, jitter_ms=0.0, loss=0.0)
    except ValueError as exc:
        print(f"pyrofling bench capture: --cases: {exc}", file=sys.stderr)
        return 2
    cfg = InputBenchConfig(
        duration_s=args.duration, width=args.width, height=args.height, fps=args.fps, scenarios=scenarios
    )
    result = run(cfg, progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps(result) if args.json else format_table(result))
    ok = all(r.get("photon_samples") and r["capture"].get("encoded") for r in result["rows"])
    return 0 if ok else 1
