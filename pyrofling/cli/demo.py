"""``pyrofling demo``: a host and a viewer on this machine, optionally through the loss simulator."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from pyrofling.cli.options import (
    add_logging_options,
    add_stream_size_options,
    fraction,
    refuse,
    run_time,
    setup_logging,
)
from pyrofling.client.display import display_problem


def add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="a host and a viewer on this machine, optionally through a lossy network",
        description=(
            "Start a host with the test scene and a viewer on loopback (a window if there is a display, headless "
            "otherwise), optionally through the loss simulator, and print live statistics."
        ),
        epilog="Example: pyrofling demo --loss 2% --duration 20   |   pyrofling demo --ge (bursty loss, ~5 %)",
    )
    p.add_argument("--loss", type=fraction("loss rate", upper=1.0, upper_ok=False), default=0.0, help="i.i.d. "
                   "datagram loss between them (e.g. 2%%)")  # fmt: skip
    p.add_argument("--ge", action="store_true", help="bursty (Gilbert-Elliott) loss of about 5%% instead of --loss")
    p.add_argument("--duration", type=run_time, default=None, help="stop after this many seconds (default: Ctrl-C)")
    p.add_argument("--headless", action="store_true", help="no window even if a display exists")
    p.add_argument(
        "--game",
        action="store_true",
        help="stream the example game through the capture socket instead of the test scene: your key presses "
        "in the viewer window (WASD/arrows, Z) steer its ball (headless: a synthetic pad does)",
    )
    add_stream_size_options(p)
    p.add_argument("--json", action="store_true", help="print the final statistics as JSON")
    add_logging_options(p)
    p.set_defaults(func=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    from pyrofling.bench.stream import StreamScenario, format_live, format_table, run_scenario, summarize

    setup_logging(args, default=logging.WARNING)  # the live line is the output
    if args.ge and args.loss:
        return refuse("demo", "--ge brings its own bursty loss (about 5 %): give --loss or --ge, not both")
    window = not args.headless and bool(os.environ.get("DISPLAY"))
    if window:
        problem = display_problem()
        if problem:
            return refuse("demo", f"{problem}; use --headless to run without a window")
    scenario = StreamScenario(
        width=args.width,
        height=args.height,
        fps=args.fps,
        bitrate_kbits=args.bitrate_kbits,
        duration_s=args.duration,
        loss=args.loss,
        ge=args.ge,
        window=window,
        game=args.game,
        # The demo's own window plays the example game: let it type (the host listens on loopback only).
        host_args=("--open-keyboard-mouse",) if args.game else (),
    )
    print(
        f"pyrofling demo: host {'example game ' if args.game else ''}"
        f"{args.width}x{args.height}@{args.fps} {args.bitrate_kbits} kbit/s -> "
        f"{'window' if window else 'headless viewer'}"
        + (f" through netsim ({'GE bursts' if args.ge else f'{args.loss:.1%} loss'})" if args.loss or args.ge else "")
        + ("" if args.duration else "; Ctrl-C to stop"),
        file=sys.stderr,
    )
    result = run_scenario(scenario, live=None if args.json else format_live)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(format_table([summarize(result)]))
    return 0 if result["viewers"][0].get("frames_shown") else 1
