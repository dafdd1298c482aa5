"""``pyrofling example-game``: a small pyglet game streamed through the host's capture socket."""

from __future__ import annotations

import argparse
import json
import logging

from pyrofling.capture.client import SYNC_MODES
from pyrofling.cli.options import add_logging_options, output_file, refuse, run_time, setup_logging, whole_number

log = logging.getLogger("pyrofling")


def add_example_game(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    p.add_argument("--width", type=whole_number(16, 8192, "pixels", even=True), default=1280, help="default 1280")
    p.add_argument("--height", type=whole_number(16, 8192, "pixels", even=True), default=720, help="default 720")
    p.add_argument(
        "--capture-socket", default=None, metavar="PATH", help="the host's capture socket (default: as the host's)"
    )
    p.add_argument(
        "--sync",
        choices=SYNC_MODES,
        default="fifo",
        help="fifo: the host's frame clock paces the game (default); mailbox: run free, the newest frame wins",
    )
    p.add_argument("--images", type=whole_number(2, 16, "images"), default=3, help="shared images (default 3)")
    p.add_argument(
        "--frames-in-flight",
        type=whole_number(1, 4, "frames"),
        default=1,
        help="fifo: presents waiting for the host before the game blocks (default 1, the lowest latency)",
    )
    p.add_argument(
        "--just-in-time",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="fifo: start each frame as late as the game's frame time allows before the next heartbeat, not as "
        "soon as the host took the last one (the default: newer pad input, a frame sooner where the frame is "
        "short; a frame that takes most of a period starts at once anyway; see docs/games.md)",
    )
    view = p.add_mutually_exclusive_group()
    view.add_argument("--headless", action="store_true", help="no local window even with a display")
    view.add_argument("--window", action="store_true", help="a local window (needs a display)")
    p.add_argument(
        "--renderer",
        choices=("auto", "gl", "numpy"),
        default="auto",
        help="auto (default): OpenGL through pyglet where it loads, else the same game drawn with numpy (a "
        "server without Mesa; no window, no text); gl or numpy: that one",
    )
    p.add_argument("--duration", type=run_time, default=None, help="stop after this many seconds (default: Ctrl-C)")
    p.add_argument(
        "--stamp",
        action="store_true",
        help="write a frame marker (pad sequence, present time) into each frame, for latency measurement",
    )
    p.add_argument("--stats-json", type=output_file(), default=None, help="write the game's statistics here on exit")
    p.add_argument("--json", action="store_true", help="print the statistics as JSON on exit")
    add_logging_options(p)
    p.set_defaults(func=run_example_game)


def run_example_game(args: argparse.Namespace) -> int:
    from pyrofling.capture.example_game import GameConfig, default_headless, run_game
    from pyrofling.runtime import tune_for_latency

    setup_logging(args)
    tune_for_latency()
    headless = args.headless or (not args.window and default_headless())
    cfg = GameConfig(
        width=args.width,
        height=args.height,
        socket=args.capture_socket,
        sync=args.sync,
        images=args.images,
        frames_in_flight=args.frames_in_flight,
        just_in_time=args.just_in_time,
        headless=headless,
        duration_s=args.duration,
        stamp=args.stamp,
        stats_json=args.stats_json,
        renderer=args.renderer,
    )
    try:
        result = run_game(cfg)
    except ImportError as exc:
        if "GL" not in str(exc):
            raise
        return refuse(
            "example-game",
            f"--renderer gl draws with OpenGL, and {exc} (install Mesa's libraries: apt install libgl1 libegl1, "
            "or leave out --renderer: numpy draws it then)",
            1,
        )
    except Exception as exc:  # a GL or display problem: say what, not a traceback
        if type(exc).__module__.startswith("pyglet"):
            return refuse("example-game", f"cannot open a window: {exc} (try --headless)", 1)
        raise
    result.pop("present_times", None)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        log.info(
            "example-game: %d frames in %.1f s, %d presented to a host (%d connections), %d pad states received",
            result["frames"],
            result["elapsed_s"],
            result["presents"],
            result["connects"],
            result["gamepad_states"],
        )
    return 0
