"""The ``pyrofling`` command line: one module per command family, the shared flags in :mod:`.options`.

Commands: ``host`` and ``view`` (:mod:`.host`, :mod:`.view`), ``gamepad`` (:mod:`.gamepad`),
``pair`` and ``paired`` (:mod:`.pair`), ``demo`` (:mod:`.demo`), ``example-game`` (:mod:`.game`),
``netsim`` (:mod:`.netsim`) and
``bench fec|stream|latency|phase|audio|input|capture|outputs|security|soak`` (:mod:`.bench`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pyrofling import __version__
from pyrofling.cli.bench import add_bench
from pyrofling.cli.demo import add_demo
from pyrofling.cli.game import add_example_game
from pyrofling.cli.gamepad import add_gamepad
from pyrofling.cli.host import add_host
from pyrofling.cli.netsim import add_netsim
from pyrofling.cli.pair import add_pair
from pyrofling.cli.view import add_view


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pyrofling",
        description="Low-latency game streaming, wire-compatible with PyroFling. "
        "Start with: pyrofling host   and, in another terminal: pyrofling view pyro://127.0.0.1",
    )
    parser.add_argument("--version", action="version", version=f"pyrofling {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more detail (-vv: debugging)")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in (add_host, add_view, add_pair, add_gamepad, add_demo, add_example_game, add_netsim, add_bench):
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
