"""The ``pyrofling`` command line: one module per command family, the shared flags in :mod:`.options`.

Commands: ``host`` and ``view`` (:mod:`.host`, :mod:`.view`), ``gamepad`` (:mod:`.gamepad`),
``pair`` and ``paired`` (:mod:`.pair`), ``demo`` (:mod:`.demo`), ``example-game`` (:mod:`.game`),
``netsim`` (:mod:`.netsim`) and
``bench fec|stream|latency|phase|audio|input|capture|outputs|security|browser|spectators|soak`` (:mod:`.bench`).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import importlib
import os
import sys
from collections.abc import Sequence

from pyrofling import __version__

#: Each command's module and the function that adds its parser, in the order ``--help`` lists them. A command's
#: module is imported only when that command runs (or ``--help`` lists them all): ``pyrofling netsim`` loads no
#: codec, ``pyrofling view`` no host, so each process starts in a fraction of the time.
COMMANDS: dict[str, tuple[str, str]] = {
    "host": ("pyrofling.cli.host", "add_host"),
    "view": ("pyrofling.cli.view", "add_view"),
    "pair": ("pyrofling.cli.pair", "add_pair"),
    "paired": ("pyrofling.cli.pair", "add_pair"),
    "gamepad": ("pyrofling.cli.gamepad", "add_gamepad"),
    "demo": ("pyrofling.cli.demo", "add_demo"),
    "example-game": ("pyrofling.cli.game", "add_example_game"),
    "netsim": ("pyrofling.cli.netsim", "add_netsim"),
    "bench": ("pyrofling.cli.bench", "add_bench"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or, given a known ``command``, only that command's part of it."""
    parser = argparse.ArgumentParser(
        prog="pyrofling",
        description="Low-latency game streaming, wire-compatible with PyroFling. "
        "Start with: pyrofling host   and, in another terminal: pyrofling view pyro://127.0.0.1",
    )
    parser.add_argument("--version", action="version", version=f"pyrofling {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more detail (-vv: debugging)")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    added = set()
    for name, (module, add) in COMMANDS.items():
        if (command is None or name == command) and (module, add) not in added:
            getattr(importlib.import_module(module), add)(sub)
            added.add((module, add))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # pyrofling does no linear algebra: numpy's BLAS need not start a thread a core, which costs each command
    # ~0.1 s of CPU at start (a quarter of numpy's import) and leaves idle threads beside the encoder's.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # A crash inside a native library (FFmpeg, PortAudio, GL) prints each thread's Python stack on stderr:
    # where it happened, for a bug report, instead of a bare "Segmentation fault".
    if not faulthandler.is_enabled() and sys.stderr is not None:
        with contextlib.suppress(ValueError, OSError, AttributeError):  # a stderr with no file descriptor
            faulthandler.enable()
    argv = sys.argv[1:] if argv is None else list(argv)
    named = next((a for a in argv if not a.startswith("-")), None)  # the global flags take no value
    parser = build_parser(named if named in COMMANDS else None)
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
