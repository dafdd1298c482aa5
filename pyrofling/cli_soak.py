"""``pyrofling bench soak``: a host and viewers left running, watched for leaks and errors."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pyrofling.cli_stream import _seconds, _whole_number, add_stream_size_options


def _duration(text: str) -> float:
    """Seconds, or minutes / hours with an m / h suffix (30m, 1.5h)."""
    scale = {"s": 1.0, "m": 60.0, "h": 3600.0}.get(text[-1:].lower())
    number = text[:-1] if scale is not None else text
    seconds = _seconds(0.01, 1e6)(number) * (scale or 1.0)
    if not 10.0 <= seconds <= 7 * 24 * 3600:
        raise argparse.ArgumentTypeError(f"{text} is out of range: from 10 s to a week (e.g. 600, 30m, 2h)")
    return seconds


def add_bench_soak(sub: Any) -> None:
    p = sub.add_parser(
        "soak",
        help="host + 3 viewers (one through bursty loss) for a long run: memory, CPU, frames lost, errors",
        description=(
            "Run a real host (test scene and tone, password and sealed datagrams), one headless viewer through "
            "netsim with bursty loss and the others direct, all playing audio into a JACK dummy server, for the "
            "chosen time. Every --sample seconds print each process's resident memory and CPU; at the end report "
            "memory against its value after warm-up, frames shown and lost, freezes, reconnects, and errors "
            "(early exits, encode/decode/send errors, reconnects, warnings in any log). Exit status 1 when "
            "memory moved more than --memory-bound or anything went wrong."
        ),
        epilog="Example: pyrofling bench soak --duration 30m   (the check a release must pass)",
    )
    p.add_argument("--duration", type=_duration, default=1800.0, help="how long: seconds or 30m, 2h (default 30m)")
    p.add_argument(
        "--sample", type=_seconds(1.0, 3600.0), default=None, help="seconds between samples (default: 60 per run)"
    )
    p.add_argument(
        "--warmup",
        type=_seconds(0.0, 3600.0),
        default=None,
        help="seconds before the memory baseline (default: 2 min, or a fifth of short runs)",
    )
    p.add_argument(
        "--memory-bound", type=_seconds(0.1, 100.0, unit="percent"), default=5.0, help="± percent (default 5)"
    )
    p.add_argument("--viewers", type=_whole_number(1, 16, "viewers"), default=3, help="viewers (default 3)")
    p.add_argument(
        "--loss",
        type=_seconds(0.0, 0.5, unit="loss fraction"),
        default=0.0,
        help="i.i.d. loss for the first viewer (default: Gilbert-Elliott bursts, ~5 %%)",
    )
    p.add_argument("--no-audio", action="store_true", help="no audio (no JACK server needed)")
    p.add_argument("--open", action="store_true", help="no password, no sealed datagrams (an open host)")
    add_stream_size_options(p)
    p.set_defaults(bitrate_kbits=6000)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run_bench_soak)


def run_bench_soak(args: argparse.Namespace) -> int:
    from pyrofling.bench.jack import JackUnavailable
    from pyrofling.bench.soak import SoakConfig, format_table, run_soak

    duration = args.duration
    cfg = SoakConfig(
        duration_s=duration,
        width=args.width,
        height=args.height,
        fps=args.fps,
        bitrate_kbits=args.bitrate_kbits,
        viewers=args.viewers,
        loss=args.loss,
        sample_s=args.sample if args.sample is not None else max(1.0, min(60.0, duration / 60)),
        warmup_s=args.warmup if args.warmup is not None else min(120.0, duration / 5),
        memory_bound_pct=args.memory_bound,
        audio=not args.no_audio,
        secure=not args.open,
    )
    print(
        f"pyrofling bench soak: {duration / 60:.1f} min, a sample every {cfg.sample_s:g} s "
        f"(memory baseline after {cfg.warmup_s:g} s)",
        file=sys.stderr,
        flush=True,
    )
    try:
        result = run_soak(cfg, progress=lambda text: print(text, file=sys.stderr, flush=True))
    except JackUnavailable as exc:
        print(f"pyrofling bench soak: {exc}; or run with --no-audio", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1) if args.json else format_table(result))
    return 0 if result["ok"] else 1
