"""The ``pyrofling`` command line.

Subcommands:
  host          host a stream (the test scene by default)
  view          watch a stream (window, or --headless)
  demo          a host and a viewer on this machine, optionally through loss
  bench fec     packet-loss recovery and FEC throughput (table, --json, --plot)
  bench stream  host + viewers end to end: frames, loss, CPU, latency
  bench latency glass-to-glass latency and pacing, phase-locked vs free-running
  bench phase   the phase loop simulated: pyrofling's controller vs the reference
  netsim        a loss-simulating relay to put between a host and its viewers
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import sys
from collections.abc import Sequence
from typing import Any

from pyrofling import __version__, cli_capture, cli_gamepad, cli_outputs, cli_soak, cli_stream

log = logging.getLogger("pyrofling")


def _host_port(text: str, *, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """``HOST:PORT``, ``[V6]:PORT`` or ``PORT`` → (host, port)."""
    t = text.strip()
    host = default_host
    if t.startswith("["):
        end = t.find("]")
        if end < 0 or not t[end + 1 :].startswith(":"):
            raise argparse.ArgumentTypeError(f"{text!r}: write IPv6 addresses as [ADDR]:PORT")
        host, port_text = t[1:end], t[end + 2 :]
    elif t.count(":") == 1:
        host, port_text = t.split(":")
    elif ":" in t:
        raise argparse.ArgumentTypeError(f"{text!r}: write IPv6 addresses as [ADDR]:PORT")
    else:
        port_text = t
    try:
        port = int(port_text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: the port must be a number, e.g. 127.0.0.1:9000") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: port {port} is out of range 0..65535")
    return host or default_host, port


def _probability(text: str) -> float:
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a probability (use 0.01 or 1%)") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not between 0 and 1")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give whole numbers separated by commas, e.g. 20,100") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give positive whole numbers, e.g. 20,100")
    return values


def _ge(text: str) -> tuple[float, float, float]:
    parts = text.split(",")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"{text!r}: give GOOD_TO_BAD,BAD_TO_GOOD,LOSS_WHEN_BAD, e.g. 0.01,0.3,0.5")
    a, b, c = (_probability(p) for p in parts)
    return a, b, c


# --------------------------------------------------------------------------------------------
# bench fec
# --------------------------------------------------------------------------------------------


def _add_bench_fec(sub: Any) -> None:
    from pyrofling.bench.fec import STANDARD_KS, STANDARD_LOSS

    p = sub.add_parser(
        "fec",
        help="packet-loss recovery and throughput of the FEC codec",
        description=(
            "Measure how many frames survive packet loss with no FEC, the reference PyroFling FEC "
            "(planner and peeling decoder), pyrofling's tuned planner and decoder, and, with the "
            "'compare' extra installed, zfec (Reed-Solomon, the best possible at the same overhead) "
            "and raptorq; plus encode/decode throughput."
        ),
        epilog=(
            "Loss models: n=K (exactly K of the frame's packets lost), data=K (K data packets, all "
            "repair received), iid:P (each packet lost with probability P, e.g. iid:1%%), ge or "
            "ge:GB,BG,LOSS (Gilbert-Elliott bursts over a continuous stream; default 0.01,0.3,0.5). "
            "Example: pyrofling bench fec --k 100 --loss iid:5%%,ge --trials 20000"
        ),
    )
    p.add_argument("--quick", action="store_true", help="fewer trials and frames: finishes in under a minute")
    p.add_argument(
        "--k", type=_int_list, default=STANDARD_KS, metavar="K,...", help="data blocks per frame (default: %(default)s)"
    )
    p.add_argument(
        "--loss", default=",".join(STANDARD_LOSS), metavar="MODEL,...", help="loss models (default: %(default)s)"
    )
    p.add_argument("--ratio", type=float, default=0.25, help="redundancy: repair blocks = K*RATIO+1 (default 0.25)")
    p.add_argument("--repair", type=int, default=None, metavar="F", help="fixed repair block count instead of --ratio")
    p.add_argument("--trials", type=_positive_int, default=None, help="frames per K and loss model (default 4000)")
    p.add_argument("--peer-trials", type=_positive_int, default=None, help="frames for zfec/raptorq (default 1000)")
    p.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    p.add_argument(
        "--sweep-degrees",
        type=_int_list,
        default=(),
        metavar="D,...",
        help="also compare these XOR degrees at the same repair count (how the tuned planner was chosen)",
    )
    p.add_argument("--no-compare", action="store_true", help="skip zfec and raptorq even if installed")
    p.add_argument("--no-throughput", action="store_true", help="skip the throughput measurement")
    p.add_argument("--json", action="store_true", help="print one JSON object with a 'rows' list instead of a table")
    p.add_argument("--plot", metavar="FILE.png", help="also draw recovery curves (needs the 'plot' extra)")
    p.set_defaults(func=_run_bench_fec)


def _run_bench_fec(args: argparse.Namespace) -> int:
    from pyrofling.bench.fec import FecBenchConfig, LossSpec, format_table, plot, run

    # "ge:a,b,c" contains commas: its three parameters stay together.
    specs = []
    parts = args.loss.split(",")
    i = 0
    try:
        while i < len(parts):
            if parts[i].strip().lower().startswith("ge:"):
                specs.append(LossSpec.parse(",".join(parts[i : i + 3])))
                i += 3
            else:
                if parts[i].strip():
                    specs.append(LossSpec.parse(parts[i]))
                i += 1
    except ValueError as exc:
        print(f"pyrofling bench fec: {exc}", file=sys.stderr)
        return 2
    if args.plot:
        # The plot's recovery curves need exact loss counts 1..8.
        have = {int(spec.value) for spec in specs if spec.kind == "n"}
        specs = [LossSpec("n", float(n)) for n in range(1, 9) if n not in have] + specs
        specs.sort(key=lambda spec: (spec.kind != "n", spec.value if spec.kind == "n" else 0))
    losses = tuple(specs)
    if args.repair is not None and args.repair < 0:
        print("pyrofling bench fec: --repair must be 0 or more", file=sys.stderr)
        return 2
    if not 0 < args.ratio <= 4:
        print("pyrofling bench fec: --ratio must be in (0, 4], e.g. 0.25 for the reference's overhead", file=sys.stderr)
        return 2
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("pyrofling bench fec: --plot needs matplotlib: pip install 'pyrofling[plot]'", file=sys.stderr)
            return 2
    quick = args.quick
    cfg = FecBenchConfig(
        ks=args.k,
        losses=losses,
        ratio=args.ratio,
        repair_blocks=args.repair,
        trials=args.trials or (1000 if quick else 4000),
        peer_trials=args.peer_trials or (200 if quick else 1000),
        seed=args.seed,
        compare=not args.no_compare,
        throughput=not args.no_throughput,
        throughput_frames=60 if quick else 300,
        sweep_degrees=args.sweep_degrees,
    )
    result = run(cfg)
    if args.plot:
        plot(result, args.plot)
        result["plot"] = args.plot
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(format_table(result))
        if args.plot:
            print(f"Plot written to {args.plot}")
    return 0


# --------------------------------------------------------------------------------------------
# netsim
# --------------------------------------------------------------------------------------------

_IMPAIRMENTS = (
    ("loss", _probability, "i.i.d. loss probability, e.g. 0.01 or 1%%"),
    ("ge", _ge, "Gilbert-Elliott burst loss GOOD_TO_BAD,BAD_TO_GOOD,LOSS_WHEN_BAD, e.g. 0.01,0.3,0.5"),
    ("trace", str, "replay a loss trace file (0/1 per datagram, 1 = lost, cycled)"),
    ("delay-ms", float, "added one-way delay, ms"),
    ("jitter-ms", float, "uniform extra delay 0..N ms (datagrams may overtake)"),
    ("reorder", _probability, "probability a datagram is held back so later ones pass it"),
    ("reorder-ms", float, "how long a reordered datagram is held back, ms (default 2)"),
    ("duplicate", _probability, "probability a datagram is delivered twice"),
    ("rate-mbits", float, "bottleneck rate, Mbit/s (default unlimited)"),
    ("queue-kbytes", float, "bottleneck queue size, KiB; tail drop beyond it (default 256)"),
)


def _add_netsim(sub: Any) -> None:
    p = sub.add_parser(
        "netsim",
        help="loss-simulating relay between a host and its viewers",
        description=(
            "Relay a pyrofling/PyroFling session through simulated network impairments. Point the viewer "
            "at the relay's address instead of the host's. TCP control traffic passes unchanged; UDP is "
            "impaired per direction: options apply to the host->viewer (media) direction, --up-OPTION to "
            "viewer->host. Every impairment is seeded and reproducible."
        ),
        epilog="Example: pyrofling netsim --upstream 127.0.0.1:9876 --listen 127.0.0.1:9877 --loss 2%% --jitter-ms 3",
    )
    p.add_argument("--upstream", type=_host_port, required=True, metavar="HOST:PORT", help="the host to relay to")
    p.add_argument(
        "--listen",
        type=_host_port,
        default=("127.0.0.1", 0),
        metavar="HOST:PORT",
        help="where viewers connect (default 127.0.0.1 on a free port; loopback unless you say otherwise)",
    )
    for prefix in ("", "up-"):
        for name, kind, text in _IMPAIRMENTS:
            p.add_argument(f"--{prefix}{name}", type=kind, default=None, help=argparse.SUPPRESS if prefix else text)
    p.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds (default: Ctrl-C)")
    p.add_argument("--json", action="store_true", help="print the final report as JSON")
    p.set_defaults(func=_run_netsim)


def _impairment_from(args: argparse.Namespace, prefix: str) -> Any:
    from pyrofling.netsim.models import ImpairmentConfig

    def get(name: str) -> Any:
        return getattr(args, (prefix + name).replace("-", "_"))

    if get("trace"):
        from pathlib import Path

        if not Path(get("trace")).is_file():
            raise ValueError(f"--{prefix}trace {get('trace')}: no such file")
    return ImpairmentConfig(
        loss=get("loss") or 0.0,
        gilbert_elliott=get("ge"),
        loss_trace=get("trace"),
        delay_s=(get("delay-ms") or 0.0) / 1000,
        jitter_s=(get("jitter-ms") or 0.0) / 1000,
        reorder=get("reorder") or 0.0,
        reorder_delay_s=(get("reorder-ms") if get("reorder-ms") is not None else 2.0) / 1000,
        duplicate=get("duplicate") or 0.0,
        rate_bits_per_s=(get("rate-mbits") or 0.0) * 1e6,
        queue_bytes=int((get("queue-kbytes") or 256) * 1024),
    )


def format_netsim_report(report: dict[str, Any]) -> str:
    lines = [
        f"netsim {report['listen']} -> {report['upstream']}: {report['tcp_connections']} TCP connections, "
        f"{report['udp_clients']} UDP clients"
    ]
    head = (
        f"{'direction':<16}{'received':>10}{'forwarded':>11}{'dropped':>9}{'(queue)':>9}"
        f"{'duplicated':>12}{'reordered':>11}"
    )
    lines.append(head)
    for name, key in (("host -> viewer", "down"), ("viewer -> host", "up")):
        s = report[key]
        lines.append(
            f"{name:<16}{s['received']:>10}{s['forwarded']:>11}{s['dropped']:>9}{s['dropped_queue']:>9}"
            f"{s['duplicated']:>12}{s['reordered']:>11}"
        )
    return "\n".join(lines)


def _run_netsim(args: argparse.Namespace) -> int:
    from pyrofling.netsim.relay import NetsimRelay, RelayConfig

    try:
        down = _impairment_from(args, "")
        up = _impairment_from(args, "up_")
    except ValueError as exc:
        print(f"pyrofling netsim: {exc}", file=sys.stderr)
        return 2
    cfg = RelayConfig(
        upstream_host=args.upstream[0],
        upstream_port=args.upstream[1],
        listen_host=args.listen[0],
        listen_port=args.listen[1],
        down=down,
        up=up,
        seed=args.seed,
    )

    async def main() -> dict[str, Any]:
        relay = NetsimRelay(cfg)
        try:
            host, port = await relay.start()
        except OSError as exc:
            raise SystemExit(f"pyrofling netsim: cannot listen on {cfg.listen_host}:{cfg.listen_port}: {exc}") from exc
        print(
            f"netsim: viewers connect to {host}:{port}, relayed to {cfg.upstream_host}:{cfg.upstream_port}",
            file=sys.stderr,
            flush=True,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=args.duration)
        await relay.close()
        return relay.report()

    report = asyncio.run(main())
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(format_netsim_report(report))
    return 0


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pyrofling",
        description="Low-latency game streaming, wire-compatible with PyroFling.",
    )
    parser.add_argument("--version", action="version", version=f"pyrofling {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    cli_stream.add_host(sub)
    cli_stream.add_view(sub)
    cli_stream.add_demo(sub)
    cli_gamepad.add_gamepad(sub)
    cli_capture.add_example_game(sub)
    bench = sub.add_parser("bench", help="measure pyrofling (FEC recovery and speed, end-to-end streaming)")
    bench_sub = bench.add_subparsers(dest="bench", metavar="BENCH")
    bench_sub.required = True
    _add_bench_fec(bench_sub)
    cli_stream.add_bench_stream(bench_sub)
    cli_stream.add_bench_latency(bench_sub)
    cli_stream.add_bench_phase(bench_sub)
    cli_stream.add_bench_audio(bench_sub)
    cli_gamepad.add_bench_input(bench_sub)
    cli_capture.add_bench_capture(bench_sub)
    cli_outputs.add_bench_outputs(bench_sub)
    cli_outputs.add_bench_security(bench_sub)
    cli_soak.add_bench_soak(bench_sub)
    _add_netsim(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
