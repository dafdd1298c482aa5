"""What the host's options cost, against a baseline in the same run: ``outputs`` and ``security``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from pyrofling.cli.bench.common import (
    Sub,
    add_common,
    bench_parser,
    loss_rate,
    print_result,
    progress,
    setup,
)
from pyrofling.cli.options import (
    add_stream_size_options,
    choice_list,
    number,
    refuse,
    whole_number,
)
from pyrofling.core.host.congestion import RATE_POLICIES

if TYPE_CHECKING:
    from pyrofling.bench.stream import StreamScenario


def _comparison(
    sub: Sub, name: str, help: str, description: str, example: str, modes: tuple[str, ...], default: tuple[str, ...]
) -> None:
    """outputs and security: a baseline and variants of a real host + headless viewer, taking turns."""
    p = bench_parser(sub, name, help, description, example)
    add_common(p, duration_s=(2.0, 3600.0, 15.0))
    p.add_argument("--rounds", type=whole_number(1, 50, "rounds"), default=2, help="runs per mode (default 2)")
    p.add_argument("--modes", type=choice_list(modes), default=default, help=f"comma list of {', '.join(modes)}")
    add_stream_size_options(p)
    p.add_argument("--preset", default="ultrafast")


def _run_comparison(
    args: argparse.Namespace,
    name: str,
    check_modes: Callable[[list[str]], str | None],
    run: Callable[..., dict[str, Any]],
    table: Callable[[dict[str, Any]], str],
    show: bool = True,
) -> dict[str, Any] | None:
    """Run the modes in turn and print the comparison; None (after saying why) when the modes do not fit."""
    setup(args)
    problem = check_modes(list(args.modes))
    if problem:
        refuse(f"bench {name}", problem)
        return None
    result = run(_base_scenario(args), list(args.modes), args.rounds, progress=progress)
    if show:
        print_result(args, result, table)
    return result


def _base_scenario(args: argparse.Namespace, **extra: Any) -> StreamScenario:
    """The stream every mode (or attack) runs: the size, rate, preset and duration the flags give."""
    from pyrofling.bench.stream import StreamScenario

    return StreamScenario(
        width=args.width,
        height=args.height,
        fps=args.fps,
        bitrate_kbits=args.bitrate_kbits,
        duration_s=args.duration,
        preset=args.preset,
        **extra,
    )


def add_outputs(sub: Sub) -> None:
    from pyrofling.bench.outputs import DEFAULT_MODES, MODES

    _comparison(
        sub,
        "outputs",
        "what --record and --broadcast cost: host CPU and direct viewers' latency, against no outputs",
        "Run a real host and a headless viewer with no outputs (plain), and with --record and/or --broadcast to "
        "a real nginx-rtmp started on loopback, the modes taking turns. Report each mode's median host CPU and "
        "capture-to-decoded latency next to plain's, packets the outputs dropped, and whether the recording "
        "decodes to every frame muxed. Needs nginx and libnginx-mod-rtmp for broadcast modes; own-encoder gives "
        "the broadcast its own 3 Mbit/s encode.",
        "pyrofling bench outputs --duration 30 --rounds 3 --modes plain,record,broadcast,both",
        tuple(MODES),
        tuple(DEFAULT_MODES),
    )
    sub.choices["outputs"].set_defaults(func=_run_outputs)


def _run_outputs(args: argparse.Namespace) -> int:
    from pyrofling.bench.outputs import check_modes, format_table, run_outputs_bench

    result = _run_comparison(args, "outputs", check_modes, run_outputs_bench, format_table)
    if result is None:
        return 2
    return 1 if any(m["recording_errors"] or m["output_failures"] for m in result["modes"]) else 0


def add_security(sub: Sub) -> None:
    from pyrofling.bench.attacks import ATTACKS
    from pyrofling.bench.security import DEFAULT_MODES, MODES

    _comparison(
        sub,
        "security",
        "what authentication and sealing cost: host and viewer CPU, latency and handshake time, against open",
        "Run a real host and a headless viewer with no secret (open), with a password (sealed: SPAKE2, then the "
        "control channel and every datagram AES-GCM) and with a stored pairing (paired: pinned keys), the modes "
        "taking turns. Report median host and viewer CPU and capture-to-decoded latency next to open's, then time "
        "--handshakes handshakes per way in (open, password, pinned keys) on loopback.",
        "pyrofling bench security --width 1920 --height 1080 --bitrate-kbits 20000 --rounds 3; "
        "pyrofling bench security --attacks all --attacks-only",
        tuple(MODES),
        tuple(DEFAULT_MODES),
    )
    p = sub.choices["security"]
    p.add_argument(
        "--attacks",
        type=lambda text: ATTACKS if text == "all" else choice_list(ATTACKS)(text),
        default=(),
        metavar="LIST",
        help="then play a stranger who reaches the port, beside a stream with a password: burst (32 KB of "
        "EXTENSIONS a second), flood (8 s of handshakes from 8 addresses), spray (8 s of random datagrams, 64,000 a "
        "second from 8 addresses), idle (136 silent "
        "connections), reflect (a cookie sent from a victim's address; bytes both ways, open, password and "
        "private hosts); a friend joins during each. At the web port (host --web), a friend's browser coming back "
        "with its pass each second: web-origin (another site's page opens WebSockets and guesses the password), "
        "web-quic (2,000 forged QUIC Initials a second), web-tls (675 TLS handshakes a second from one address), "
        "web-idle (175 silent connections a second held 10 s, the host at ulimit -n 1024). 'all' for every one",
    )
    p.add_argument(
        "--handshakes",
        type=whole_number(0, 1000, "handshakes"),
        default=20,
        help="handshakes timed per way in, at the pace the host admits one address (default 20; 0: none)",
    )
    p.add_argument("--attacks-only", action="store_true", help="with --attacks: skip the cost comparison")
    p.add_argument(
        "--pin-cpus",
        action="store_true",
        help="with --attacks: host, viewer and attacker each on a third of the CPUs, so the attacker's own work "
        "does not take the host's CPU; with two CPUs, the host on one and the viewer on the other, which the "
        "attacker shares at nice 19",
    )
    p.set_defaults(func=_run_security)


def _run_security(args: argparse.Namespace) -> int:
    from pyrofling.bench.attacks import format_table as attack_table
    from pyrofling.bench.attacks import run_attack_bench
    from pyrofling.bench.security import check_modes, format_table, run_security_bench

    if args.attacks_only and not args.attacks:
        return refuse("bench security", "--attacks-only needs --attacks LIST (or --attacks all)")
    ok = True
    result: dict[str, Any] | None = None
    if not args.attacks_only:
        # With --json and --attacks, one document holds both: {"costs": ..., "attacks": ...}.
        show = not (args.json and args.attacks)
        run = partial(run_security_bench, handshakes=args.handshakes)
        result = _run_comparison(args, "security", check_modes, run, format_table, show=show)
        if result is None:
            return 2
        ok = all(m["sealed_runs"] >= m["runs"] for m in result["modes"] if m["mode"] != "open")
    if args.attacks:
        setup(args)
        attacked = run_attack_bench(_base_scenario(args, pin_cpus=args.pin_cpus), list(args.attacks), progress=progress)
        if args.json and result is not None:
            print_result(args, {"costs": result, "attacks": attacked}, attack_table)
        else:
            print_result(args, attacked, attack_table)
        ok = ok and all(r["reconnects"] == 0 for r in attacked["attacks"])
        ok = ok and all(m["bytes_to_victim"] <= 3 * m["bytes_from_victim"] for m in attacked["reflect"])
    return 0 if ok else 1


def add_browser(sub: Sub) -> None:
    p = bench_parser(
        sub,
        "browser",
        "a headless Chromium watching host --web beside a pyrofling viewer: good refreshes, latency, host CPU",
        "Run pyrofling host --web with the test scene, a headless pyrofling viewer (--check-scene) and Debian's "
        "Chromium opening the host's link; the page reads the frame marker of the picture on screen at every "
        "refresh and times capture -> drawn. Then the same host with two pyrofling viewers, for the host's CPU "
        "with a browser against a second viewer (one encode either way). With --loss or --ge the browser and the "
        "viewer each go through netsim with that loss (the page's WebSocket is piped, its WebTransport datagrams "
        "impaired). Needs chromium (scripts/setup).",
        "pyrofling bench browser --duration 30   |   --loss 2%   |   --ge   |   --transport websocket",
    )
    add_common(p, duration_s=(5.0, 3600.0, 30.0))
    add_stream_size_options(p)
    p.add_argument("--preset", default="ultrafast")
    p.add_argument("--loss", type=loss_rate, default=0.0, help="i.i.d. datagram loss host->browser and viewer (2%%)")
    p.add_argument("--ge", action="store_true", help="Gilbert-Elliott burst loss (about 5%% in bursts) instead")
    p.add_argument(
        "--rate-mbits",
        type=number(0.1, 10_000.0, "Mbit/s"),
        default=0.0,
        help="a bottleneck host->browser and host->viewer (netsim --rate-mbits), to see the rate control follow it",
    )
    p.add_argument(
        "--rate-policy",
        choices=RATE_POLICIES,
        default=None,
        help="the host's --rate-policy (default: the host's own, player)",
    )
    p.add_argument(
        "--transport",
        choices=("webtransport", "websocket"),
        default="webtransport",
        help="what carries the browser's pictures: webtransport (the host's default: QUIC streams, one per "
        "picture) or websocket (host --no-web-transport: TCP)",
    )
    p.add_argument(
        "--cpu-baseline",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="then run the host with two pyrofling viewers, for its CPU with a browser against a second viewer "
        "(default); --no-cpu-baseline skips that run",
    )
    p.add_argument(
        "--browser-priority",
        choices=("raised", "normal"),
        default="raised",
        help="raised (default): Chromium's threads get the raised priority the host and the viewer give their "
        "own, where the system allows, as if the browser had a machine of its own; normal: left below them, "
        "which on a small machine measures the scheduler more than the page",
    )
    p.add_argument(
        "--audio-codec",
        choices=("raw", "opus"),
        default=None,
        help="the host's --audio-codec for every run (default: the host's own, raw PCM); the page decodes Opus with "
        "WebCodecs' AudioDecoder",
    )
    p.add_argument(
        "--surface",
        choices=("video", "canvas"),
        default="video",
        help="where the page shows its pictures: video (its own choice where the browser can feed a <video> the "
        "decoded frames) or canvas (its fallback elsewhere, drawn on the page's main thread)",
    )
    p.set_defaults(func=_run_browser)


def _run_browser(args: argparse.Namespace) -> int:
    from pyrofling.bench.browser import format_table, run_browser_bench
    from pyrofling.bench.chromium import find_chromium

    setup(args)
    if find_chromium() is None:
        return refuse("bench browser", "no Chromium found: install Debian's chromium (./scripts/setup does)")
    policy = ("--rate-policy", args.rate_policy) if args.rate_policy else ()
    sound = ("--audio-codec", args.audio_codec) if args.audio_codec else ()
    base = _base_scenario(args, loss=args.loss, ge=args.ge, rate_mbits=args.rate_mbits, host_args=policy + sound)
    result = run_browser_bench(
        base,
        transport=args.transport,
        cpu_baseline=args.cpu_baseline,
        raise_browser=args.browser_priority == "raised",
        surface=args.surface,
        progress=progress,
    )
    print_result(args, result, format_table)
    return 0 if result["browser"].get("frames_drawn") else 1


def add_spectators(sub: Sub) -> None:
    p = bench_parser(
        sub,
        "spectators",
        "N headless WebRTC spectators through a real Janus beside a player: good refreshes, latency, host CPU",
        "Start Debian's Janus in a network namespace of its own, pyrofling host --spectators with the test scene "
        "and a headless pyrofling viewer (the player, judging every refresh), then N aiortc spectators watching "
        "through Janus over WebRTC, all joining at once, spread over one process per CPU. Each spectator reads "
        "the frame marker of every picture it decodes: its first picture after asking, capture -> decoded, and "
        "the refreshes a screen at the stream's rate would have shown, judged as the player's are. Twice: with "
        "one spectator and with N, for the host's CPU and the player's figures with N against one. Needs janus "
        "and iproute2 (scripts/setup), root for the namespace, and pip install 'pyrofling[spectators]'.",
        "pyrofling bench spectators --spectators 20 --janus-restart   |   --width 640 --height 360 "
        "--bitrate-kbits 2000",
    )
    add_common(p, duration_s=(10.0, 3600.0, 20.0))
    # A spectator's WebRTC stack in Python decodes every picture (about 9 % of a core each at 640x360): 20 of them
    # at 320x180 are what the 2-core machine carries beside the host (docs/spectators.md).
    add_stream_size_options(p, size=(320, 180), bitrate_kbits=800)
    p.add_argument("--preset", default="ultrafast")
    p.add_argument("--spectators", type=whole_number(1, 1000, "spectators"), default=20, help="how many (default 20)")
    p.add_argument(
        "--processes",
        type=whole_number(1, 256, "processes"),
        default=None,
        help="the spectators' processes (default: one per CPU); each is one Python, one core at most",
    )
    p.add_argument(
        "--sound",
        action="store_true",
        help="the spectators take the sound too (Janus sends it; aiortc decodes it, about as much CPU again as "
        "the pictures at 360p); by default they take the pictures only",
    )
    p.add_argument(
        "--janus-restart",
        action="store_true",
        help="then a third run with the N spectators in which Janus is killed 4 s after they join and started "
        "again 2 s later: the player's longest freeze, and how soon every spectator has a picture again",
    )
    p.add_argument(
        "--edge",
        action="store_true",
        help="publish into an origin Janus that feeds an edge Janus (a second namespace, a link of their own; "
        "host --spectators-edge), the spectators' processes taking turns between them: the edge's added latency",
    )
    p.add_argument(
        "--spectator-loss",
        type=loss_rate,
        default=0.0,
        help="then a run in which this share (2%%) of what Janus sends the spectators is lost on the way (nftables, "
        "on the namespace's link): what the SFU path repairs (NACK, key frames) and what it costs the player",
    )
    p.add_argument(
        "--browsers",
        type=whole_number(0, 20, "pages"),
        default=0,
        help="also, in the runs with N spectators, this many headless Chromium pages (the spectators' page, "
        "spectate.html) watching beside them, judged apart: capture -> shown, and a browser's own loss repair",
    )
    p.add_argument(
        "--rounds",
        type=whole_number(1, 20, "rounds"),
        default=2,
        help="the runs with one and with N spectators take turns this many times (default 2), the host's CPU "
        "compared by their medians: the first run after Janus starts tends to cost the host more",
    )
    p.set_defaults(func=_run_spectators)


def _run_spectators(args: argparse.Namespace) -> int:
    from pyrofling.bench import janus, netns
    from pyrofling.bench.spectators import Restart, format_table, run_spectators_bench
    from pyrofling.bench.webrtc_spectator import INSTALL_HINT

    setup(args)
    for reason in (janus.missing(), netns.missing()):
        if reason is not None:
            return refuse("bench spectators", reason)
    try:
        import aiortc  # noqa: F401
    except ImportError:
        return refuse("bench spectators", f"the headless spectators need aiortc: {INSTALL_HINT}")
    base = _base_scenario(args, host_args=("--audio-codec", "opus"))
    result = run_spectators_bench(
        base,
        spectators=args.spectators,
        processes=args.processes,
        sound=args.sound,
        restart=Restart() if args.janus_restart else None,
        edge=args.edge,
        loss=args.spectator_loss,
        browsers=args.browsers,
        rounds=args.rounds,
        progress=progress,
    )
    print_result(args, result, format_table)
    return 0 if all(run["overall"]["watched"] == run["spectators_asked"] for run in result["runs"]) else 1
