"""Gamepad flags for ``host`` and ``view``, and ``pyrofling gamepad`` (a controller that does not watch).

``host`` takes its flags from here too: the viewer's modules are imported where they run, not at the top (they
would be a third of a host's start)."""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import TYPE_CHECKING

from pyrofling.cli.options import (
    add_logging_options,
    add_viewer_security_options,
    install_stop,
    number,
    output_file,
    pairing_dir,
    refuse,
    run_time,
    setup_logging,
    viewer_password,
    whole_number,
)

if TYPE_CHECKING:
    from pyrofling.client.gamepad import GamepadConfig

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
        type=output_file(),
        default=None,
        metavar="FILE",
        help="write every state applied to the virtual pad, with its time and events, as JSON lines",
    )
    g.add_argument(
        "--pads",
        type=whole_number(1, 8, "pads"),
        default=1,
        help="1: one pad everyone shares, as PyroFling (default); N: a pad per player, up to N, in join order, kept "
        "for a player who reconnects within 30 s (native viewers share pad 1)",
    )


def add_view_gamepad_options(p: argparse.ArgumentParser) -> None:
    from pyrofling.core.input.pad import KEYBOARD_HELP

    g = p.add_argument_group(
        "gamepad",
        "The first gamepad plugged in here (read with evdev; plug it in at any time) is sent to the host "
        "every 4 ms and at once on every change; without one, the window's keys work as a pad. " + KEYBOARD_HELP
        + ". " + OWNERSHIP_HELP,
    )  # fmt: skip
    _add_client_gamepad_options(g)
    g.add_argument("--no-gamepad", action="store_true", help="send no gamepad input")


def _add_client_gamepad_options(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--gamepad-source",
        choices=("evdev", "sweep"),
        default="evdev",
        help="evdev: the first physical pad (default); sweep: a synthetic pad whose left stick circles once a "
        "second, for tests and benchmarks",
    )
    g.add_argument(
        "--gamepad-interval-ms",
        type=number(1.0, 1000.0, "ms"),
        default=4.0,
        help="send the state at least this often (default 4, as PyroFling)",
    )
    g.add_argument("--gamepad-log", type=output_file(), default=None, metavar="FILE", help=argparse.SUPPRESS)
    g.add_argument("--rumble-log", type=output_file(), default=None, metavar="FILE", help=argparse.SUPPRESS)
    # Benches: every decoded frame's marker and time, to time a pad change to the picture showing it.
    g.add_argument("--marker-log", type=output_file(), default=None, metavar="FILE", help=argparse.SUPPRESS)


def gamepad_config(args: argparse.Namespace) -> GamepadConfig | None:
    from pyrofling.client.gamepad import GamepadConfig
    from pyrofling.core.input.pad import PadSenderConfig

    if getattr(args, "no_gamepad", False):
        return None
    cfg = GamepadConfig(
        source=args.gamepad_source,
        sender=PadSenderConfig(interval_s=args.gamepad_interval_ms / 1000),
        send_log=args.gamepad_log,
        rumble_log=args.rumble_log,
    )
    cfg.check()
    return cfg


def add_gamepad(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "gamepad",
        help="play on a host without watching: send this machine's gamepad only",
        description=(
            "Join a pyrofling or PyroFling host as a controller: asks for the gamepad only (no video or audio), "
            "sends the first pad plugged in here every 4 ms and on every change, keeps the connection alive and "
            "follows the host when it restarts. " + OWNERSHIP_HELP
        ),
        epilog="Example: pyrofling gamepad 192.168.1.20:9876",
    )
    p.add_argument("uri", help="HOST:PORT or pyro://HOST:PORT")
    _add_client_gamepad_options(p.add_argument_group("gamepad"))
    p.add_argument("--duration", type=run_time, default=None, help="stop after this many seconds (default: Ctrl-C)")
    p.add_argument("--no-reconnect", action="store_true", help="exit when the host goes away")
    p.add_argument(
        "--native", action="store_true", help="do not ask for pyrofling extensions (behave like a native client)"
    )
    p.add_argument("--stats-json", type=output_file(), default=None, help="write counters here on exit")
    add_viewer_security_options(p)
    add_logging_options(p)
    p.set_defaults(func=run_gamepad)


def run_gamepad(args: argparse.Namespace) -> int:
    from pyrofling.client.config import ViewerConfig
    from pyrofling.client.uri import parse_uri
    from pyrofling.client.viewer import Viewer
    from pyrofling.wire import KickFlags

    setup_logging(args)
    try:
        uri = parse_uri(args.uri)
        cfg = ViewerConfig(
            host=uri.host,
            port=uri.port,
            flags=KickFlags.GAMEPAD,
            gamepad=gamepad_config(args),
            extensions=not args.native,
            password=viewer_password(args),
            allow_open_host=args.allow_open_host,
            pairing_dir=pairing_dir(args),
            duration_s=args.duration,
            reconnect=not args.no_reconnect,
            stats_json=args.stats_json,
        )
    except ValueError as exc:
        return refuse("gamepad", str(exc))

    async def main() -> int:
        viewer = Viewer(cfg)
        install_stop(asyncio.get_running_loop(), viewer.stop)
        summary = await viewer.run()
        pad = summary.get("gamepad") or {}
        log.info("sent %d gamepad states; %s", pad.get("states_sent", 0), pad.get("pad") or "no pad")
        if not viewer.streamed:
            return refuse("gamepad", viewer.failure or "no connection", 1)
        return 0

    return asyncio.run(main())
