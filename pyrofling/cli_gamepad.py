"""Gamepad flags for ``host`` and ``view``, ``pyrofling gamepad`` and ``pyrofling bench input``."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

from pyrofling.cli_stream import _install_stop, _seconds, _setup_logging
from pyrofling.core.gamepad import KEYBOARD_HELP

log = logging.getLogger("pyrofling")

OWNERSHIP_HELP = (
    "The host has one virtual pad. The first player to send drives it; another takes it over by pressing "
    "Mode (Home on the keyboard) or Start+Select+L1+R1."
)


def add_host_gamepad_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("gamepad", "Viewers' pads drive one virtual gamepad here. " + OWNERSHIP_HELP)
    g.add_argument(
        "--virtual-pad",
        choices=("uinput", "none"),
        default="uinput",
        help="uinput: a virtual pad games and Steam see as a controller (needs write access to /dev/uinput; "
        "without it the host warns and streams on); none: ignore gamepad input (default uinput)",
    )
    g.add_argument(
        "--gamepad-trace",
        type=Path,
        default=None,
        metavar="FILE",
        help="write every state applied to the virtual pad, with its time and events, as JSON lines",
    )


def add_view_gamepad_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "gamepad",
        "The first gamepad plugged in here (read with evdev; plug it in at any time) is sent to the host "
        "every 4 ms and at once on every change; without one, the window's keys work as a pad. " + KEYBOARD_HELP
        + ". " + OWNERSHIP_HELP,
    )  # fmt: skip
    add_client_gamepad_options(g)
    g.add_argument("--no-gamepad", action="store_true", help="send no gamepad input")


def add_client_gamepad_options(g: Any) -> None:
    g.add_argument(
        "--gamepad-source",
        choices=("evdev", "sweep"),
        default="evdev",
        help="evdev: the first physical pad (default); sweep: a synthetic pad whose left stick circles once a "
        "second, for tests and benchmarks",
    )
    g.add_argument(
        "--gamepad-interval-ms",
        type=_seconds(1.0, 1000.0, unit="ms"),
        default=4.0,
        help="send the state at least this often (default 4, as PyroFling)",
    )
    g.add_argument("--gamepad-log", type=Path, default=None, metavar="FILE", help=argparse.SUPPRESS)
    # Benches: every decoded frame's marker and time, to time a pad change to the picture showing it.
    g.add_argument("--marker-log", type=Path, default=None, metavar="FILE", help=argparse.SUPPRESS)


def gamepad_config(args: argparse.Namespace) -> Any:
    from pyrofling.client.gamepad import GamepadConfig
    from pyrofling.core.gamepad import SenderConfig

    if getattr(args, "no_gamepad", False):
        return None
    cfg = GamepadConfig(
        source=args.gamepad_source,
        sender=SenderConfig(interval_s=args.gamepad_interval_ms / 1000),
        send_log=args.gamepad_log,
    )
    cfg.check()
    return cfg


# --------------------------------------------------------------------------------------------
# pyrofling gamepad
# --------------------------------------------------------------------------------------------


def add_gamepad(sub: Any) -> None:
    p = sub.add_parser(
        "gamepad",
        help="play on a host without watching: send this machine's gamepad only",
        description=(
            "Join a pyrofling or PyroFling host as a controller: asks for the gamepad only (no video or audio), "
            "sends the first pad plugged in here every 4 ms and on every change, keeps the connection alive and "
            "reconnects when the host goes away. " + OWNERSHIP_HELP
        ),
        epilog="Example: pyrofling gamepad 192.168.1.20:9876",
    )
    p.add_argument("uri", help="HOST:PORT or pyro://HOST:PORT")
    add_client_gamepad_options(p.add_argument_group("gamepad"))
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds (default: Ctrl-C)")
    p.add_argument("--no-reconnect", action="store_true", help="exit when the host goes away")
    p.add_argument(
        "--native", action="store_true", help="do not ask for pyrofling extensions (behave like a native client)"
    )
    p.add_argument("--stats-json", type=Path, default=None, help="write counters here on exit")
    p.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    from pyrofling.cli_stream import add_viewer_security_options

    add_viewer_security_options(p)
    p.set_defaults(func=run_gamepad)


def run_gamepad(args: argparse.Namespace) -> int:
    from pyrofling.cli_stream import viewer_password
    from pyrofling.client.uri import parse_uri
    from pyrofling.client.viewer import Viewer, ViewerConfig
    from pyrofling.wire import KickFlags

    _setup_logging(args)
    try:
        uri = parse_uri(args.uri)
        cfg = ViewerConfig(
            host=uri.host,
            port=uri.port,
            flags=KickFlags.GAMEPAD,
            gamepad=gamepad_config(args),
            extensions=not args.native,
            password=viewer_password(args),
            require_auth=args.require_auth,
            duration_s=args.duration,
            reconnect=not args.no_reconnect,
            stats_json=args.stats_json,
        )
    except ValueError as exc:
        print(f"pyrofling gamepad: {exc}", file=sys.stderr)
        return 2

    async def main() -> int:
        viewer = Viewer(cfg)
        _install_stop(asyncio.get_running_loop(), viewer.stop)
        stats = await viewer.run()
        pad = viewer.gamepad.summary() if viewer.gamepad is not None else {}
        log.info("sent %d gamepad states; %s", pad.get("states_sent", 0), pad.get("pad") or "no pad")
        return 0 if stats.sessions_streaming else 1

    return asyncio.run(main())


# --------------------------------------------------------------------------------------------
# bench input
# --------------------------------------------------------------------------------------------


def add_bench_input(sub: Any) -> None:
    p = sub.add_parser(
        "input",
        help="input latency: a viewer's gamepad send to the host's virtual pad, and to the game's reaction on screen",
        description=(
            "Runs a real host streaming its test scene and a real client (a headless viewer decoding the stream, "
            "or the gamepad-only client) whose synthetic pad changes on every send, on loopback and through "
            "netsim with jitter and loss on the viewer->host direction. Each state is timed from the client's "
            "send to the host's write to the virtual pad (one monotonic clock for both processes)."
        ),
        epilog="Example: pyrofling bench input --duration 30 --json",
    )
    p.add_argument("--duration", type=_seconds(2.0, 3600.0), default=10.0, help="seconds per run (default 10)")
    p.add_argument(
        "--cases",
        default="loopback,netsim",
        help="comma list: loopback, netsim (default both); game, game-immediate: stream the example game "
        "through the capture socket and also time input to photon (pad send to the decoded frame showing it)",
    )
    p.add_argument("--client", choices=("view", "gamepad"), default="view", help="which client sends (default view)")
    p.add_argument("--jitter-ms", type=_seconds(0.0, 100.0, unit="ms"), default=5.0, help="netsim jitter (default 5)")
    p.add_argument("--loss", type=_seconds(0.0, 0.5, unit="(probability)"), default=0.01, help="netsim loss (0.01)")
    p.add_argument("--width", type=int, default=1280, help="stream width (default 1280)")
    p.add_argument("--height", type=int, default=720, help="stream height (default 720)")
    p.add_argument("--fps", type=int, default=60, help="stream frame rate (default 60)")
    p.add_argument("--json", action="store_true", help="print the result as JSON (with samples)")
    p.set_defaults(func=run_bench_input)


def run_bench_input(args: argparse.Namespace) -> int:
    from pyrofling.bench.input import InputBenchConfig, format_table, run, standard_scenarios

    try:
        cases = [c.strip() for c in args.cases.split(",") if c.strip()]
        scenarios = standard_scenarios(cases, jitter_ms=args.jitter_ms, loss=args.loss)
    except ValueError as exc:
        print(f"pyrofling bench input: --cases: {exc}", file=sys.stderr)
        return 2
    cfg = InputBenchConfig(
        duration_s=args.duration,
        client=args.client,
        width=args.width,
        height=args.height,
        fps=args.fps,
        scenarios=scenarios,
    )
    result = run(cfg, progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps(result) if args.json else format_table(result))
    return 0 if all(r["applied"] for r in result["rows"]) else 1
