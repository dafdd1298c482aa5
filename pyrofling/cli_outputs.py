"""``pyrofling bench outputs`` and ``bench security``: what recording, broadcasting and sealing cost.

Both run a baseline and variants of a real host + headless viewer, the modes taking turns round by round.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from pyrofling.cli_stream import _seconds, _whole_number, add_stream_size_options


def _add_comparison_options(p: argparse.ArgumentParser, modes: list[str], default: tuple[str, ...], note: str) -> None:
    p.add_argument("--duration", type=_seconds(2.0, 3600.0), default=15.0, help="seconds per run (default 15)")
    p.add_argument("--rounds", type=_whole_number(1, 50, "rounds"), default=2, help="runs per mode (default 2)")
    p.add_argument(
        "--modes",
        default=",".join(default),
        help=f"comma-separated, from {', '.join(modes)} (default {','.join(default)}){note}",
    )
    add_stream_size_options(p)
    p.add_argument("--preset", default="ultrafast")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def _run_comparison(
    args: argparse.Namespace,
    name: str,
    check_modes: Callable[[list[str]], str | None],
    run: Callable[..., dict[str, Any]],
    format_table: Callable[[dict[str, Any]], str],
) -> dict[str, Any] | None:
    """Parse the modes, run them, print the table or JSON; None (after saying why) when the modes are wrong."""
    from pyrofling.bench.stream import StreamScenario

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    problem = check_modes(modes)
    if problem:
        print(f"pyrofling bench {name}: {problem}", file=sys.stderr)
        return None
    base = StreamScenario(
        width=args.width,
        height=args.height,
        fps=args.fps,
        bitrate_kbits=args.bitrate_kbits,
        duration_s=args.duration,
        preset=args.preset,
    )
    result = run(base, modes, args.rounds, progress=lambda text: print(text, file=sys.stderr, flush=True))
    print(json.dumps(result, indent=1) if args.json else format_table(result))
    return result


def add_bench_outputs(sub: Any) -> None:
    from pyrofling.bench.outputs import DEFAULT_MODES, MODES

    p = sub.add_parser(
        "outputs",
        help="what --record and --broadcast cost: host CPU and direct viewers' latency, against no outputs",
        description=(
            "Run a real host and a headless viewer with no outputs (plain), and with --record and/or --broadcast "
            "to a real nginx-rtmp started on loopback, the modes taking turns. Report each mode's median host "
            "CPU and capture-to-decoded latency next to plain's, packets the outputs dropped, and whether the "
            "recording decodes to every frame muxed. Needs nginx and libnginx-mod-rtmp for broadcast modes."
        ),
        epilog="Example: pyrofling bench outputs --duration 30 --rounds 3 --modes plain,record,broadcast,both",
    )
    _add_comparison_options(p, list(MODES), DEFAULT_MODES, "; own-encoder gives the broadcast its own 3 Mbit/s encode")
    p.set_defaults(func=run_bench_outputs)


def run_bench_outputs(args: argparse.Namespace) -> int:
    from pyrofling.bench.outputs import check_modes, format_table, run_outputs_bench

    result = _run_comparison(args, "outputs", check_modes, run_outputs_bench, format_table)
    if result is None:
        return 2
    failed = any(m["recording_errors"] or m["output_failures"] for m in result["modes"])
    return 1 if failed else 0


def add_bench_security(sub: Any) -> None:
    from pyrofling.bench.security import DEFAULT_MODES, MODES

    p = sub.add_parser(
        "security",
        help="what --password and sealed datagrams cost: host and viewer CPU and latency, against an open host",
        description=(
            "Run a real host and a headless viewer with no secret (open), with a password (sealed: "
            "authenticated, AES-GCM on every datagram) and with a password and --no-encrypt (auth-only), the "
            "modes taking turns. Report median host and viewer CPU and capture-to-decoded latency next to open's."
        ),
        epilog="Example: pyrofling bench security --width 1920 --height 1080 --bitrate-kbits 20000 --rounds 3",
    )
    _add_comparison_options(p, list(MODES), DEFAULT_MODES, "")
    p.set_defaults(func=run_bench_security)


def run_bench_security(args: argparse.Namespace) -> int:
    from pyrofling.bench.security import check_modes, format_table, run_security_bench

    result = _run_comparison(args, "security", check_modes, run_security_bench, format_table)
    if result is None:
        return 2
    authenticated = all(m["authenticated"] >= m["runs"] for m in result["modes"] if m["mode"] != "open")
    return 0 if authenticated else 1
