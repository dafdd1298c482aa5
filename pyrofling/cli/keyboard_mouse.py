"""Keyboard and mouse flags for ``host`` and ``view`` (protocol.md §7.11)."""

from __future__ import annotations

import argparse

from pyrofling.cli.options import number, output_file
from pyrofling.client.keyboard_mouse import INPUT_SOURCES, InputConfig
from pyrofling.core.input.keyboard_mouse import INPUT_HELP
from pyrofling.server.input_devices import INPUT_KINDS


def add_host_input_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "keyboard and mouse",
        "pyrofling viewers that ask may type and move a virtual keyboard and mouse here, one player at a time: the "
        "first to send has them, Ctrl+Alt+Home takes them over, and every key is let go when that player leaves, "
        "loses focus or goes silent. Python games get them through the capture socket.",
    )
    g.add_argument(
        "--virtual-input",
        choices=INPUT_KINDS,
        default="uinput",
        help="uinput: a virtual keyboard, mouse and pointer (needs write access to /dev/uinput; without it the host "
        "warns and streams on); portal: with --source wayland, the desktop's own, through its RemoteDesktop portal "
        "(the desktop asks the person to allow remote interaction, at each start where its portal cannot remember "
        "it); none: ignore keys and the mouse (default uinput; --source headless uses its desktop's own)",
    )
    g.add_argument(
        "--open-keyboard-mouse",
        action="store_true",
        help="let viewers that did not authenticate type and move the mouse: on an open host, anyone who reaches "
        "the port, every user of this machine included (by default only viewers that proved a password or "
        "pairing can)",
    )
    g.add_argument("--input-trace", type=output_file(), default=None, metavar="FILE", help=argparse.SUPPRESS)


def add_view_input_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("keyboard and mouse", INPUT_HELP + ".")
    g.add_argument(
        "--no-keyboard-mouse",
        action="store_true",
        help="never send keys or the mouse to the game (the window's keys stay a pad)",
    )
    g.add_argument(
        "--input-source",
        choices=INPUT_SOURCES,
        default="window",
        help="window: the window's keys and mouse (default); sweep: a synthetic player, for tests and benchmarks "
        "(works headless)",
    )
    g.add_argument(
        "--input-interval-ms", type=number(1.0, 1000.0, "ms"), default=4.0, help=argparse.SUPPRESS
    )  # the sweep's pace
    g.add_argument("--input-log", type=output_file(), default=None, metavar="FILE", help=argparse.SUPPRESS)


def input_config(args: argparse.Namespace) -> InputConfig | None:
    """None: no keyboard or mouse (turned off, or headless without the sweep: no window to read)."""
    if args.no_keyboard_mouse or (args.headless and args.input_source == "window"):
        return None
    cfg = InputConfig(source=args.input_source, sweep_interval_ms=args.input_interval_ms, send_log=args.input_log)
    cfg.check()
    return cfg
