"""What the benches share: the parser of one bench, its common flags, progress lines and results."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeAlias

from pyrofling.cli.options import add_logging_options, fraction, number, output_file, refuse, setup_logging

Sub: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
loss_rate = fraction("loss rate", upper=1.0, upper_ok=False)


def bench_parser(sub: Sub, name: str, help: str, description: str, example: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, description=description, epilog=f"Example: {example}")
    add_logging_options(p)
    return p


def add_common(
    p: argparse.ArgumentParser, *, duration_s: tuple[float, float, float] | None, plot: bool = False
) -> None:
    """--duration (low, high, default), --json and, where the bench draws, --plot."""
    if duration_s is not None:
        low, high, default = duration_s
        p.add_argument(
            "--duration", type=number(low, high), default=default, help=f"seconds per run (default {default:g})"
        )
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    if plot:
        p.add_argument("--plot", type=output_file(".png"), metavar="FILE.png", help="also draw it (needs matplotlib)")


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def print_result(args: argparse.Namespace, result: Any, table: Callable[[Any], str]) -> None:
    print(json.dumps(result, indent=1) if args.json else table(result))


def draw_plot(command: str, path: Path | None, draw: Callable[[], None]) -> int:
    """Draw a --plot; matplotlib is an optional extra, so say how to get it."""
    if path is None:
        return 0
    try:
        draw()
    except ImportError:
        return refuse(command, "--plot needs matplotlib: pip install 'pyrofling[plot]'", 1)
    progress(f"plot written to {path}")
    return 0


def setup(args: argparse.Namespace) -> None:
    """Benches print tables: only warnings unless -v."""
    setup_logging(args, default=logging.WARNING)
