"""``pyrofling netsim``: a loss-simulating relay to put between a host and its viewers."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyrofling.cli.options import (
    add_logging_options,
    gilbert_elliott,
    host_port,
    install_stop,
    number,
    outages,
    probability,
    refuse,
    run_time,
    setup_logging,
)
from pyrofling.netsim.models import ImpairmentConfig, LinkChange, TraceLoss
from pyrofling.netsim.relay import NetsimRelay, RelayConfig


def _trace(text: str) -> tuple[bool, ...]:
    """A loss trace file, read now: its flags."""
    path = Path(text)
    try:
        return TraceLoss.parse(path.read_text(), name=text)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text}: cannot read the loss trace ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _schedule(text: str) -> tuple[LinkChange, ...]:
    try:
        return LinkChange.parse_schedule(text, name="--schedule")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _schedule_file(text: str) -> tuple[LinkChange, ...]:
    """A schedule file, read now: its steps (one per line)."""
    try:
        return LinkChange.parse_schedule(Path(text).read_text(), name=text)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text}: cannot read the schedule ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_IMPAIRMENTS: tuple[tuple[str, Callable[[str], Any], str], ...] = (
    ("loss", probability, "i.i.d. loss probability, e.g. 0.01 or 1%%"),
    ("ge", gilbert_elliott, "Gilbert-Elliott burst loss GOOD_TO_BAD,BAD_TO_GOOD,LOSS_WHEN_BAD, e.g. 0.01,0.3,0.5"),
    (
        "outage",
        outages,
        "link outages MEAN_S,MIN_MS[,MAX_MS]: everything dropped for MIN..MAX ms, starting every "
        "MEAN_S seconds on average (Wi-Fi-like), e.g. 2,10",
    ),
    ("trace", _trace, "replay a loss trace file (0/1 per datagram, 1 = lost, cycled)"),
    ("delay-ms", number(0.0, 10_000.0, "ms"), "added one-way delay, ms"),
    ("jitter-ms", number(0.0, 10_000.0, "ms"), "uniform extra delay 0..N ms (datagrams may overtake)"),
    (
        "delay-sigma-ms",
        number(0.0, 1_000.0, "ms"),
        "Gaussian delay variation around --delay-ms, σ in ms, as a queue makes it (bursts share it, order "
        "kept); give --delay-ms about 3 σ or more, e.g. --delay-ms 12 --delay-sigma-ms 3",
    ),
    ("reorder", probability, "probability a datagram is held back so later ones pass it"),
    ("reorder-ms", number(0.0, 10_000.0, "ms"), "how long a reordered datagram is held back, ms (default 2)"),
    ("duplicate", probability, "probability a datagram is delivered twice"),
    ("rate-mbits", number(0.0, 100_000.0, "Mbit/s", above_low=True), "bottleneck rate, Mbit/s (default unlimited)"),
    ("queue-kbytes", number(1.0, 1_000_000.0, "KiB"), "bottleneck queue size, KiB; tail drop beyond it (default 256)"),
    (
        "queue-ms",
        number(1.0, 100_000.0, "ms"),
        "bottleneck queue as time at the current rate (bytes follow the rate), instead of --queue-kbytes",
    ),
    (
        "schedule",
        _schedule,
        "how the link changes over time: steps 'T KEY=VALUE ...' separated by ';', T in seconds from the "
        "start; keys rate-mbits (0 = unlimited), delay-ms, jitter-ms, delay-sigma-ms, loss, queue-kbytes, queue-ms. "
        "E.g. '10 rate-mbits=4; 30 rate-mbits=10'",
    ),
    ("schedule-file", _schedule_file, "the same steps from a file, one per line ('#' comments)"),
)


def add_netsim(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "netsim",
        help="loss-simulating relay between a host and its viewers",
        description=(
            "Relay a pyrofling/PyroFling session through simulated network impairments. Point the viewer "
            "at the relay's address instead of the host's. TCP control traffic passes unchanged; UDP is "
            "impaired per direction: options apply to the host->viewer (media) direction, --up-OPTION to "
            "viewer->host. Every impairment is seeded and reproducible."
        ),
        epilog="Example: pyrofling netsim --upstream 127.0.0.1:9876 --listen 127.0.0.1:9877 --loss 2% --jitter-ms 3",
    )
    p.add_argument("--upstream", type=host_port, required=True, metavar="HOST:PORT", help="the host to relay to")
    p.add_argument(
        "--listen",
        type=host_port,
        default=("127.0.0.1", 0),
        metavar="HOST:PORT",
        help="where viewers connect (default 127.0.0.1 on a free port; loopback unless you say otherwise)",
    )
    for prefix in ("", "up-"):
        for name, kind, text in _IMPAIRMENTS:
            p.add_argument(f"--{prefix}{name}", type=kind, default=None, help=argparse.SUPPRESS if prefix else text)
    p.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    p.add_argument("--duration", type=run_time, default=None, help="stop after this many seconds (default: Ctrl-C)")
    p.add_argument("--json", action="store_true", help="print the final report as JSON")
    p.add_argument(
        "--record-drops",
        action="store_true",
        help="list in the report which host->viewer datagrams were dropped (their order on the link, from 0): two "
        "runs with one seed drop the same ones",
    )
    add_logging_options(p)
    p.set_defaults(func=run_netsim)


def impairment(args: argparse.Namespace, prefix: str) -> ImpairmentConfig:
    def get(name: str) -> Any:
        return getattr(args, (prefix + name).replace("-", "_"))

    return ImpairmentConfig(
        loss=get("loss") or 0.0,
        gilbert_elliott=get("ge"),
        loss_trace=get("trace"),
        outages=get("outage"),
        delay_s=(get("delay-ms") or 0.0) / 1000,
        jitter_s=(get("jitter-ms") or 0.0) / 1000,
        delay_sigma_s=(get("delay-sigma-ms") or 0.0) / 1000,
        reorder=get("reorder") or 0.0,
        reorder_delay_s=(get("reorder-ms") if get("reorder-ms") is not None else 2.0) / 1000,
        duplicate=get("duplicate") or 0.0,
        rate_bits_per_s=(get("rate-mbits") or 0.0) * 1e6,
        queue_bytes=int((get("queue-kbytes") or 256) * 1024),
        queue_s=get("queue-ms") / 1000 if get("queue-ms") is not None else None,
        schedule=(get("schedule") or ()) + (get("schedule-file") or ()),
    )


def format_report(report: dict[str, Any]) -> str:
    lines = [
        f"netsim {report['listen']} -> {report['upstream']}: {report['tcp_connections']} TCP connections, "
        f"{report['udp_clients']} UDP clients"
    ]
    lines.append(
        f"{'direction':<16}{'received':>10}{'forwarded':>11}{'dropped':>9}{'(queue)':>9}{'(outage)':>10}"
        f"{'duplicated':>12}{'reordered':>11}"
    )
    for name, key in (("host -> viewer", "down"), ("viewer -> host", "up")):
        s = report[key]
        lines.append(
            f"{name:<16}{s['received']:>10}{s['forwarded']:>11}{s['dropped']:>9}{s['dropped_queue']:>9}"
            f"{s['dropped_outage']:>10}{s['duplicated']:>12}{s['reordered']:>11}"
        )
    for name, key in (("host -> viewer", "down"), ("viewer -> host", "up")):
        for at_s, text in report.get("schedule_applied", {}).get(key, []):
            lines.append(f"{name} link changed at {at_s:.2f} s: {text.split(': ', 1)[1]}")
    return "\n".join(lines)


def run_netsim(args: argparse.Namespace) -> int:
    setup_logging(args)
    for prefix in ("", "up_"):
        if getattr(args, prefix + "schedule") and getattr(args, prefix + "schedule_file"):
            return refuse("netsim", f"give --{prefix.replace('_', '-')}schedule or --{prefix.replace('_', '-')}"
                          "schedule-file, not both", 2)  # fmt: skip
    cfg = RelayConfig(
        upstream_host=args.upstream[0],
        upstream_port=args.upstream[1],
        listen_host=args.listen[0],
        listen_port=args.listen[1],
        down=impairment(args, ""),
        up=impairment(args, "up_"),
        seed=args.seed,
        record_drops=args.record_drops,
    )

    async def main() -> dict[str, Any] | None:
        relay = NetsimRelay(cfg)
        try:
            host, port = await relay.start()
        except OSError as exc:
            refuse("netsim", f"cannot listen on {cfg.listen_host}:{cfg.listen_port}: {exc.strerror or exc}", 1)
            return None
        print(
            f"netsim: viewers connect to {host}:{port}, relayed to {cfg.upstream_host}:{cfg.upstream_port}",
            file=sys.stderr,
            flush=True,
        )
        stop = asyncio.Event()
        install_stop(asyncio.get_running_loop(), stop.set)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=args.duration)
        await relay.close()
        return relay.report()

    report = asyncio.run(main())
    if report is None:
        return 1
    print(json.dumps(report, indent=1) if args.json else format_report(report))
    return 0
