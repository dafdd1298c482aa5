"""Benches of the transport and the whole stream: ``fec``, ``stream``, ``latency``, ``phase``, ``soak``."""

from __future__ import annotations

import argparse
import json

from pyrofling.cli.bench.common import (
    Sub,
    add_common,
    bench_parser,
    draw_plot,
    loss_rate,
    print_result,
    progress,
    setup,
)
from pyrofling.cli.options import (
    add_stream_size_options,
    choice_list,
    duration,
    fraction,
    int_list,
    number,
    number_list,
    outages,
    output_dir,
    refuse,
    whole_number,
)
from pyrofling.fec.planner import PLANNERS


def add_fec(sub: Sub) -> None:
    from pyrofling.bench.fec import STANDARD_KS, STANDARD_LOSS

    p = bench_parser(
        sub,
        "fec",
        "packet-loss recovery and throughput of the FEC codec",
        "Measure how many frames survive packet loss with no FEC, the reference PyroFling FEC (planner and "
        "peeling decoder), pyrofling's tuned planner and decoder, the Reed-Solomon code two pyrofling peers "
        "negotiate (rs/pyrofling), plain zfec (Reed-Solomon in one code, the best possible at the same overhead) "
        "and, with the 'compare' extra installed, raptorq; plus encode/decode throughput. "
        "Loss models: n=K (exactly K of the frame's packets lost), data=K (K data packets, all repair received), "
        "iid:P (each packet lost with probability P, e.g. iid:1%), ge or ge:GB,BG,LOSS (Gilbert-Elliott bursts "
        "over a continuous stream; default 0.01,0.3,0.5).",
        "pyrofling bench fec --k 100 --loss iid:5%,ge --trials 20000",
    )
    p.add_argument("--quick", action="store_true", help="fewer trials and frames: finishes in under a minute")
    p.add_argument("--k", type=int_list, default=STANDARD_KS, metavar="K,...", help="data blocks per frame")
    p.add_argument("--loss", default=",".join(STANDARD_LOSS), metavar="MODEL,...", help="loss models")
    p.add_argument(
        "--ratio",
        type=fraction("ratio", zero_ok=False, upper=4.0),
        default=0.25,
        help="redundancy: repair blocks = K*RATIO+1 (default 0.25)",
    )
    p.add_argument("--repair", type=whole_number(0, 10_000, "blocks"), default=None, metavar="F", help="fixed F")
    p.add_argument("--trials", type=whole_number(1, 10**8, "trials"), default=None, help="frames per case (4000)")
    p.add_argument("--peer-trials", type=whole_number(1, 10**8, "trials"), default=None, help="for zfec/raptorq")
    p.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    p.add_argument(
        "--sweep-degrees",
        type=int_list,
        default=(),
        metavar="D,...",
        help="also compare these XOR degrees at the same repair count (how the tuned planner was chosen)",
    )
    p.add_argument("--no-compare", action="store_true", help="skip zfec and raptorq even if installed")
    p.add_argument(
        "--no-rs", action="store_true", help="skip the Reed-Solomon code (rs/pyrofling): near half of the run's time"
    )
    p.add_argument("--no-throughput", action="store_true", help="skip the throughput measurement")
    add_common(p, duration_s=None, plot=True)
    p.set_defaults(func=_run_fec)


def _run_fec(args: argparse.Namespace) -> int:
    from pyrofling.bench.fec import FecBenchConfig, LossSpec, run
    from pyrofling.bench.fec_report import format_table, plot

    setup(args)
    try:
        specs = LossSpec.parse_list(args.loss)
    except ValueError as exc:
        return refuse("bench fec", str(exc))
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return refuse("bench fec", "--plot needs matplotlib: pip install 'pyrofling[plot]'")
        # The plot's recovery curves need exact loss counts 1..8.
        have = {int(spec.value) for spec in specs if spec.kind == "n"}
        specs = [LossSpec("n", float(n)) for n in range(1, 9) if n not in have] + specs
        specs.sort(key=lambda spec: (spec.kind != "n", spec.value if spec.kind == "n" else 0))
    cfg = FecBenchConfig(
        ks=args.k,
        losses=tuple(specs),
        ratio=args.ratio,
        repair_blocks=args.repair,
        trials=args.trials or (1000 if args.quick else 4000),
        peer_trials=args.peer_trials or (200 if args.quick else 1000),
        seed=args.seed,
        compare=not args.no_compare,
        reed_solomon=not args.no_rs,
        throughput=not args.no_throughput,
        throughput_frames=60 if args.quick else 300,
        sweep_degrees=args.sweep_degrees,
    )
    result = run(cfg)
    if args.plot:
        plot(result, args.plot)
        result["plot"] = str(args.plot)
    print_result(args, result, format_table)
    if args.plot and not args.json:
        progress(f"plot written to {args.plot}")
    return 0


def add_loss_step(sub: Sub) -> None:
    p = bench_parser(
        sub,
        "loss-step",
        "how the redundancy follows a step in loss (0 -> 5%% -> 0), in simulated time",
        "Run the host's and the viewer's pure protocol code (adaptive FEC, loss reports, resends) through the "
        "netsim loss model with a fake clock: 12 s of stream in a few seconds, the same every run. Loss steps "
        "from 0 to --loss at 2 s and back to 0 at 6 s; reports the repair share of what was sent, the loss "
        "measured, what was resent, and how fast the repair rose and decayed.",
        "pyrofling bench loss-step --plot step.png",
    )
    add_common(p, duration_s=None, plot=True)
    p.add_argument("--loss", type=loss_rate, default=0.05, help="loss during the step (default 5%%)")
    p.add_argument("--planner", choices=PLANNERS, default="adaptive", help="FEC planner (default adaptive)")
    p.add_argument("--bitrate-kbits", type=whole_number(100, 1_000_000, "kbit/s"), default=10_000)
    p.add_argument("--delay-ms", type=number(0.0, 500.0, "ms"), default=2.0, help="one-way delay (default 2)")
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(func=_run_loss_step)


def _run_loss_step(args: argparse.Namespace) -> int:
    from pyrofling.bench.loss_step import StepConfig, format_table, plot, run

    setup(args)
    cfg = StepConfig(
        loss=args.loss,
        planner=args.planner,
        bitrate_kbits=args.bitrate_kbits,
        one_way_delay_s=args.delay_ms / 1000,
        seed=args.seed,
    )
    result = run(cfg)
    if args.plot and draw_plot("bench loss-step", args.plot, lambda: plot(result, str(args.plot))):
        return 1
    print_result(args, result, format_table)
    return 0


def add_adapt(sub: Sub) -> None:
    p = bench_parser(
        sub,
        "adapt",
        "the stream through a link that narrows and widens again: rate control against a fixed bitrate",
        "Run a real host, the netsim relay following a schedule of link rates (a drop-tail queue of --queue-ms "
        "at the current rate) and a headless viewer judging every refresh, once per policy: pyrofling (the "
        "bitrate follows the link) and reference (PyroFling's fixed bitrate: a native viewer, no reports). "
        "For each interval between link changes, counted from 2 s after the change: the encoder's bitrate, "
        "capture-to-decoded latency p50/p95, good refreshes and freezes; for a drop, how long until every "
        "second's p95 latency is within 20 ms of the first interval's; for a rise, how long until the encoder "
        "is back at the ceiling (--bitrate-kbits). --plot draws bitrate, capacity, latency and good refreshes "
        "over time.",
        "pyrofling bench adapt --plot adapt.png   |   --width 1920 --height 1080 --bitrate-kbits 20000 "
        "--schedule '0 rate-mbits=20; 10 rate-mbits=6; 30 rate-mbits=20'   |   --schedule none --loss 2%",
    )
    add_common(p, duration_s=(5.0, 3600.0, 45.0), plot=True)
    add_stream_size_options(p)
    p.add_argument(
        "--schedule",
        default="0 rate-mbits=10; 10 rate-mbits=4; 30 rate-mbits=10",
        help="netsim --schedule for the host->viewer link, or 'none' (default "
        "'0 rate-mbits=10; 10 rate-mbits=4; 30 rate-mbits=10')",
    )
    p.add_argument("--queue-ms", type=number(1.0, 10_000.0, "ms"), default=50.0, help="bottleneck queue (default 50)")
    p.add_argument("--loss", type=loss_rate, default=0.0, help="i.i.d. datagram loss host->viewer as well")
    p.add_argument(
        "--policy",
        type=choice_list(("pyrofling", "reference")),
        default=("pyrofling", "reference"),
        metavar="P,...",
        help="runs, in order (default pyrofling,reference)",
    )
    p.add_argument(
        "--audio-codec",
        choices=("opus", "raw"),
        default="opus",
        help="the host's audio (default opus: raw PCM alone is 1.5 Mbit/s, a third of a 4 Mbit/s link)",
    )
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(func=_run_adapt)


def _run_adapt(args: argparse.Namespace) -> int:
    from pyrofling.bench.adapt import AdaptConfig, format_table, plot, run
    from pyrofling.netsim.models import LinkChange

    setup(args)
    schedule = None if args.schedule.strip().lower() == "none" else args.schedule
    if schedule is not None:
        try:
            LinkChange.parse_schedule(schedule, name="--schedule")
        except ValueError as exc:
            return refuse("bench adapt", str(exc))
    cfg = AdaptConfig(
        width=args.width,
        height=args.height,
        fps=args.fps,
        ceiling_kbits=args.bitrate_kbits,
        schedule=schedule,
        queue_ms=args.queue_ms,
        loss=args.loss,
        duration_s=args.duration,
        policies=tuple(args.policy),
        audio_codec=args.audio_codec,
        seed=args.seed,
    )
    result = run(cfg, progress=progress)
    if args.plot and draw_plot("bench adapt", args.plot, lambda: plot(result, str(args.plot))):
        return 1
    print_result(args, result, format_table)
    return 0


def add_stream(sub: Sub) -> None:
    p = bench_parser(
        sub,
        "stream",
        "host + headless viewer(s), optionally through netsim: frames, loss, CPU, latency",
        "Run a real host (test scene) and real headless viewers as separate processes, optionally through the "
        "loss simulator, and report what the player saw at every display refresh (good: a clean picture of the "
        "scene at most 2 frames old; corrupt; stale; freezes), frames sent/shown, loss before and after FEC and "
        "resends, key frames forced, the bytes spent on repair and resends, bitrate, CPU per process and "
        "capture-to-decoded latency read from the decoded pixels.",
        "pyrofling bench stream --duration 60 --ge   |   --viewers 1,4   |   --width 1920 --height 1080",
    )
    add_common(p, duration_s=(1.0, 3600.0, 10.0))
    add_stream_size_options(p)
    p.add_argument("--encoder", default="libx264")
    p.add_argument("--preset", default="ultrafast")
    p.add_argument("--encoder-params", default="", metavar="KEY=VALUE[:KEY=VALUE...]",
                   help="the encoder's own options, as host --encoder-params")  # fmt: skip
    p.add_argument("--loss", type=loss_rate, default=0.0, help="i.i.d. datagram loss host->viewer (e.g. 2%%)")
    p.add_argument("--ge", action="store_true", help="Gilbert-Elliott burst loss (about 5%% in bursts)")
    p.add_argument(
        "--outage",
        type=outages,
        default=None,
        metavar="MEAN_S,MIN_MS[,MAX_MS]",
        help="link outages through netsim (Wi-Fi-like): everything dropped for MIN..MAX ms, every MEAN_S s on "
        "average, e.g. 2,10",
    )
    p.add_argument(
        "--delay-ms",
        type=number(0.0, 1000.0, "ms"),
        default=0.0,
        help="one-way delay added in each direction through netsim (2: a 4 ms round trip, like home Wi-Fi)",
    )
    p.add_argument(
        "--policy",
        type=choice_list(("pyrofling", "reference")),
        default=("pyrofling",),
        metavar="POLICY,...",
        help="pyrofling (default), reference (behave as PyroFling: its FEC plan, an IDR on every loss, no reports "
        "or resends), or both, run one after the other with the same seeds: pyrofling,reference",
    )
    p.add_argument(
        "--recovery",
        type=choice_list(("key-frame", "intra-refresh")),
        default=("key-frame",),
        metavar="MODE,...",
        help="the viewer's recovery after a loss nothing repaired: key-frame (default), intra-refresh, or both",
    )
    p.add_argument("--no-resend", action="store_true", help="viewers do not ask for resends (measure FEC alone)")
    p.add_argument(
        "--refresh-s",
        type=number(0.05, 10.0, "s"),
        default=None,
        help="the host's intra-refresh period, seconds (default: the host's, 1)",
    )
    p.add_argument(
        "--viewers", type=int_list, default=(1,), help="viewers per run; a list (1,4) runs each and reports the cost"
    )
    p.add_argument(
        "--fec-planner", choices=("auto", *PLANNERS), default="auto", help="the host's --fec-planner (default auto)"
    )
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(func=_run_stream)


def _run_stream(args: argparse.Namespace) -> int:
    from pyrofling.bench.stream import StreamScenario, add_extra_viewer_cost, format_table, run_scenario, summarize

    setup(args)
    if any(n > 16 for n in args.viewers):
        return refuse("bench stream", "--viewers must be between 1 and 16")
    if args.ge and args.loss:
        return refuse("bench stream", "--ge brings its own bursty loss (about 5 %): give --loss or --ge, not both")
    rows, raws = [], []
    runs = [(n, policy, rec) for policy in args.policy for rec in args.recovery for n in args.viewers]
    for n, policy, recovery in runs:
        if policy == "reference" and recovery != args.recovery[0]:
            continue  # the reference has one recovery: a key frame
        sc = StreamScenario(
            width=args.width,
            height=args.height,
            fps=args.fps,
            bitrate_kbits=args.bitrate_kbits,
            duration_s=args.duration,
            loss=args.loss,
            ge=args.ge,
            outages=args.outage,
            delay_ms=args.delay_ms,
            policy=policy,
            recovery=recovery,
            resends=not args.no_resend,
            refresh_s=args.refresh_s,
            viewers=n,
            fec=args.fec_planner,
            encoder=args.encoder,
            preset=args.preset,
            encoder_params=args.encoder_params,
            seed=args.seed,
        )
        progress(f"running {sc.label()} for {args.duration:g} s ...")
        raw = run_scenario(sc)
        rows.append({**summarize(raw), "_scenario": sc})
        raws.append(raw)
    add_extra_viewer_cost(rows)
    for row in rows:
        del row["_scenario"]
    print(json.dumps({"rows": rows, "raw": raws}, indent=1) if args.json else format_table(rows))
    return 0


def add_harness(sub: Sub) -> None:
    p = bench_parser(
        sub,
        "harness",
        "the test harness (pyrofling.harness) against bench stream on one link and seed",
        "Run bench stream's scenario, then the harness twice, through the same Gilbert-Elliott link (bench "
        "stream --ge's, about 5 % in bursts) with one seed; report each run's good refreshes, the harness's "
        "difference from bench stream in points, whether all three dropped the same datagrams, and whether the "
        "harness runs left a thread, descriptor or child process behind.",
        "pyrofling bench harness --duration 10 --seed 1",
    )
    add_common(p, duration_s=(1.0, 600.0, 10.0))
    add_stream_size_options(p)
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(func=_run_harness)


def _run_harness(args: argparse.Namespace) -> int:
    from pyrofling.bench.harness_check import format_table, run_harness_bench
    from pyrofling.harness import Link, Stream

    setup(args)
    try:
        stream = Stream(width=args.width, height=args.height, fps=args.fps, bitrate_kbits=args.bitrate_kbits,
                        seconds=args.duration)  # fmt: skip
    except ValueError as exc:
        return refuse("bench harness", str(exc))
    result = run_harness_bench(stream, Link.gilbert_elliott(seed=args.seed), progress)
    print_result(args, result, format_table)
    return 0 if result["same_drops"] and not result["left_behind"] else 1


def add_latency(sub: Sub) -> None:
    from pyrofling.bench.latency import MODES

    p = bench_parser(
        sub,
        "latency",
        "glass-to-glass latency and frame pacing: free-running, fixed offsets (both controllers), automatic offset",
        "Runs a real host (test scene) and a headless viewer per mode, back to back: free-running, phase-locked "
        "at --offset/--deadline (the reference's recommended 0/0.008) with the reference controller and with "
        "pyrofling's, and phase-locked at the offset the viewer finds itself (auto, the viewer's default). "
        "--jitter-sigma-ms adds two auto runs through netsim: a fixed delay of 4 sigma, then that delay varying "
        "with the sigma. The viewer's display clock runs at --refresh-hz (59.94 by default, against the host's "
        "60). Reports presented/repeated/dropped frames, repeats a minute after lock, lock time, the offset, "
        "phase error and glass-to-glass latency (capture stamp in the picture -> on screen). A run longer than "
        "two minutes is described by its last two (the viewer keeps two minutes of traces), its lock time then "
        "the start of those.",
        "pyrofling bench latency --duration 60 --jitter-sigma-ms 3 --plot latency.png",
    )
    add_common(p, duration_s=(1.0, 3600.0, 20.0), plot=True)
    add_stream_size_options(p)
    p.add_argument("--refresh-hz", type=number(1.0, 1000.0, "Hz"), default=59.94)
    p.add_argument("--skew-ppm", type=number(-50_000.0, 50_000.0, "ppm"), default=0.0, help="viewer clock skew")
    p.add_argument("--offset", type=number(-0.1, 0.1), default=0.0, help="phase_locked offset, s (default 0)")
    p.add_argument("--deadline", type=number(0.0, 0.1), default=0.008, help="deadline, s (default 0.008)")
    p.add_argument("--loss", type=loss_rate, default=0.0, help="i.i.d. loss through netsim (e.g. 1%%)")
    p.add_argument("--jitter-ms", type=number(0.0, 100.0, "ms"), default=0.0, help="netsim jitter 0..N ms")
    p.add_argument(
        "--jitter-sigma-ms",
        type=number(0.0, 20.0, "ms"),
        default=0.0,
        help="also run auto through netsim with a 4-sigma delay, fixed and then varying with this sigma (e.g. 3)",
    )
    p.add_argument("--modes", type=choice_list(MODES), default=MODES, help=f"comma list of {', '.join(MODES)}")
    p.add_argument(
        "--auto-repeats",
        type=number(0.01, 600.0, "repeats a minute"),
        default=0.5,
        metavar="N",
        help="auto: the repeats a minute the viewer aims for (its --repeats-per-minute; default 0.5, the viewer's)",
    )
    p.add_argument(
        "--encoder-threads",
        type=whole_number(1, 64, "threads"),
        default=None,
        help="the host's --encoder-threads, slice threads per frame (default: the host's own, one per CPU it may "
        "use, at most 8; 1 with --pin-cpus on a 2-CPU machine)",
    )
    p.add_argument(
        "--max-rate-mbits",
        type=number(0.0, 100_000.0, "Mbit/s"),
        default=None,
        help="the host's --max-rate-mbits, its pacer's ceiling (default: the host's, 200): what a frame's datagram "
        "train costs the latency on a faster link",
    )
    p.add_argument(
        "--decode-threads",
        type=whole_number(1, 64, "threads"),
        default=None,
        help="the viewer's --decode-threads, slice threads decoding each picture (default: the viewer's own, one "
        "per CPU it may use, at most 8)",
    )
    p.add_argument(
        "--rounds",
        type=whole_number(1, 100, "rounds"),
        default=1,
        help="split each mode's time into this many runs, the modes taking turns, and pool them (default 1): on "
        "a machine whose load changes over minutes every mode sees the same",
    )
    p.add_argument(
        "--trace",
        type=output_dir,
        default=None,
        metavar="DIR",
        help="write the host's and the viewer's frame traces here and say, per mode, which stage made the late "
        "pictures late",
    )
    p.add_argument(
        "--pin-cpus",
        action="store_true",
        help="run the host on half of this machine's CPUs and the viewer on the other half, as on two machines "
        "(on a small machine their threads otherwise take turns on the same cores; needs 2 CPUs); netsim's relay "
        "takes one of the viewer's CPUs where the viewer has four or more, else it runs beside the host",
    )
    p.add_argument(
        "--also-normal-priority",
        action="store_true",
        help="also run auto with --thread-priority normal on both ends: what the raised and real-time thread "
        "priorities buy, in the same run",
    )
    p.add_argument(
        "--also-early-decode",
        action="store_true",
        help="also run free and auto with early decoding: the viewer starting on each picture's first slices "
        "(view --early-decode; pictures of 24,000 bytes or more) from the host's slices of at most "
        "--early-slice-bytes, against whole pictures in the same run",
    )
    p.add_argument(
        "--also-whole-pictures",
        action="store_true",
        help="also run free and auto with whole pictures only (view --no-early-decode, the host's slices one a "
        "thread): what decoding large pictures early, the default on a viewer with 4 CPUs or more, buys",
    )
    p.add_argument(
        "--early-slice-bytes",
        type=whole_number(0, 1_000_000, "bytes"),
        default=None,
        metavar="N",
        help="with --also-early-decode, the host's largest slice (x264's slice-max-size; default 8,000: a 1080p "
        "picture of the test scene in about six); 0: the host's own (small where its pictures are large, else one "
        "a thread)",
    )
    p.add_argument(
        "--profiles",
        default=None,
        metavar="LIST",
        help="run the modes at each of these, one after another, and set automatic against free-running for each: "
        "a comma list of WIDTHxHEIGHT@FPS[/HZ][:KBITS] (the display at FPS/1.001 Hz unless HZ is given), or "
        "'default' for 1280x720@60:10000,1280x720@144:20000,1920x1080@120:30000; replaces the size, --fps, "
        "--refresh-hz and --bitrate-kbits",
    )
    p.set_defaults(func=_run_latency)


def _run_latency(args: argparse.Namespace) -> int:
    from pyrofling.bench.latency import LatencyBenchConfig, format_table, plot, run

    setup(args)
    cfg = LatencyBenchConfig(
        duration_s=args.duration,
        width=args.width,
        height=args.height,
        fps=args.fps,
        bitrate_kbits=args.bitrate_kbits,
        refresh_hz=args.refresh_hz,
        skew_ppm=args.skew_ppm,
        offset_s=args.offset,
        deadline_s=args.deadline,
        loss=args.loss,
        jitter_ms=args.jitter_ms,
        jitter_sigma_ms=args.jitter_sigma_ms,
        modes=args.modes,
        trace_dir=str(args.trace) if args.trace is not None else None,
        rounds=args.rounds,
        auto_repeats_per_minute=args.auto_repeats,
        pin_cpus=args.pin_cpus,
        also_normal_priority=args.also_normal_priority,
        also_early_decode=args.also_early_decode,
        also_whole_pictures=args.also_whole_pictures,
        **({} if args.early_slice_bytes is None else {"early_slice_bytes": args.early_slice_bytes}),
        encoder_threads=args.encoder_threads,
        max_rate_mbits=args.max_rate_mbits,
        decode_threads=args.decode_threads,
    )
    profiles = None
    if args.profiles is not None:
        from pyrofling.bench.latency_profiles import DEFAULT_PROFILES, parse_profile

        listed = DEFAULT_PROFILES if args.profiles == "default" else tuple(args.profiles.split(","))
        try:
            profiles = [parse_profile(text) for text in listed]
        except ValueError as exc:
            return refuse("bench latency", f"--profiles {exc}")
        if args.plot is not None:
            return refuse("bench latency", "--plot draws one profile's run: leave it out with --profiles")
    if cfg.pin_cpus:
        from pyrofling.bench.stream import split_cpus

        try:
            split_cpus()
        except ValueError as exc:
            return refuse("bench latency", f"--pin-cpus: {exc}")
    if profiles is not None:
        from pyrofling.bench.latency_profiles import format_profiles, run_profiles

        print_result(args, run_profiles(cfg, profiles, progress=progress), format_profiles)
        return 0
    result = run(cfg, progress=progress)
    print_result(args, result, format_table)
    return draw_plot("bench latency", args.plot, lambda: plot(result, str(args.plot)))


def add_phase(sub: Sub) -> None:
    p = bench_parser(
        sub,
        "phase",
        "the phase loop simulated with a fake clock: pi vs reference controller vs free-running",
        "Simulates host frame clock, pipeline jitter and the viewer's presentation loop with the real pure "
        "objects and a fake clock, from several starting phases per scenario (500 ppm skew, 2 ms jitter, "
        "59.94 Hz, +-3 ms load, a 100 ms stall), then the viewer's automatic offset against the reference's "
        "fixed 0 / 8 ms at four jitters (a minute each). Deterministic: the same seed gives the same numbers. "
        "With --replay, instead: a real run's recorded pictures (each one's capture -> ready time) through "
        "free-running, the viewer's offset rule and its 20 s window alone, in the same loop, on a display at the "
        "run's own refresh rate (each profile's, from a --profiles run).",
        "pyrofling bench phase --duration 10 --phases 8 --plot phase.png\n"
        "  pyrofling bench latency --modes free,auto --json > lat.json && pyrofling bench phase --replay lat.json",
    )
    add_common(p, duration_s=(2.0, 600.0, 10.0), plot=True)
    p.add_argument("--phases", type=whole_number(1, 64, "phases"), default=8, help="starting phases per scenario")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--replay",
        metavar="LATENCY.json",
        action="append",
        help="replay the pictures a `bench latency --json` run recorded (every mode's); repeat for more runs",
    )
    p.add_argument(
        "--longer-waits",
        metavar="MS,...",
        type=number_list(0.0, 5.0, "ms"),
        default=(),
        help="with --replay, also the viewer's rule with the lock's wait on a display of 80 Hz or more held this "
        "much longer than free-running's (its own holds it at free-running's): what each costs in latency and saves "
        "in repeats, e.g. 0.25,0.5,1",
    )
    p.set_defaults(func=_run_phase)


def _run_phase(args: argparse.Namespace) -> int:
    from pyrofling.bench.phase import auto_offset_rows, format_auto_rows, format_table, plot, run, standard_scenarios

    setup(args)
    if args.longer_waits and not args.replay:
        return refuse("bench phase", "--longer-waits goes with --replay LATENCY.json (it replays recorded pictures)")
    if args.replay:
        return _replay_phase(args)
    result = run(standard_scenarios(args.duration, args.seed), phases=args.phases)
    auto_s = max(60.0, args.duration)
    result["auto_offset"] = auto_offset_rows(auto_s, args.seed)
    print_result(args, result, lambda r: format_table(r) + "\n\n" + format_auto_rows(r["auto_offset"], auto_s))
    return draw_plot("bench phase", args.plot, lambda: plot(args.duration, args.seed, str(args.plot)))


def add_receive(sub: Sub) -> None:
    p = bench_parser(
        sub,
        "receive",
        "what one datagram costs the host's and the viewer's pure cores (no sockets, one thread)",
        "Joins a host's sessions and a viewer's connection in memory, as their shells join them, and streams "
        "pictures of bitrate/fps bytes through the host's pacer and FEC into the viewer: the microseconds a "
        "datagram of the host's packetizing and pacing, of the viewer's parse, reassembly and loss tracking, and of "
        "the viewer's next timer (asked after each). Medians over blocks of 100 pictures: it measures the Python on "
        "that path, without the event loops, system calls and codecs around it.",
        "pyrofling bench receive --bitrate-kbits 20000 --fps 60",
    )
    add_common(p, duration_s=None)
    p.add_argument("--bitrate-kbits", type=whole_number(100, 1_000_000, "kbit/s"), default=20_000)
    p.add_argument("--fps", type=whole_number(1, 1000, "fps"), default=60)
    p.add_argument("--frames", type=whole_number(100, 10**6, "frames"), default=3000, help="pictures (default 3000)")
    p.set_defaults(func=_run_receive)


def _run_receive(args: argparse.Namespace) -> int:
    from pyrofling.bench.receive_path import ReceivePathConfig, format_receive_path, run_receive_path

    setup(args)
    config = ReceivePathConfig(bitrate_kbits=args.bitrate_kbits, fps=args.fps, frames=args.frames)
    print_result(args, run_receive_path(config, progress=progress), format_receive_path)
    return 0


def _replay_phase(args: argparse.Namespace) -> int:
    from pyrofling.bench.phase import format_replay_rows, recorded_runs, replay_rows, replay_rules

    runs = []
    for i, path in enumerate(args.replay):
        try:
            with open(path, encoding="utf-8") as f:
                found = recorded_runs(json.load(f))
        except json.JSONDecodeError as exc:
            return refuse("bench phase", f"--replay {path}: not JSON ({exc})")
        except (OSError, ValueError) as exc:
            return refuse("bench phase", f"--replay {path}: {exc}")
        runs += [run._replace(name=f"{run.name} ({i + 1})") if len(args.replay) > 1 else run for run in found]
    progress(f"replaying {len(runs)} recorded runs ...")
    rows = replay_rows(runs, replay_rules(args.longer_waits), seed=args.seed)
    print_result(args, {"replay": rows}, lambda r: format_replay_rows(r["replay"]))
    return 0


def add_soak(sub: Sub) -> None:
    p = bench_parser(
        sub,
        "soak",
        "host + 3 viewers (one through bursty loss) for a long run: memory, CPU, frames lost, errors",
        "Run a real host (test scene and tone, password and sealed datagrams), one headless viewer through "
        "netsim with bursty loss and the others direct, all playing audio into a JACK dummy server, for the "
        "chosen time. Every --sample seconds print each process's resident memory and CPU; at the end report "
        "memory against its value after warm-up, frames shown and lost, freezes, reconnects, and errors (early "
        "exits, encode/decode/send errors, reconnects, warnings in any log). Exit status 1 when memory moved "
        "more than --memory-bound or anything went wrong.",
        "pyrofling bench soak --duration 30m   (the check a release must pass)",
    )
    p.add_argument(
        "--duration",
        type=duration(10.0, 7 * 24 * 3600.0, "from 10 s to a week"),
        default=1800.0,
        help="e.g. 600, 30m, 2h",
    )
    p.add_argument("--sample", type=number(1.0, 3600.0), default=None, help="seconds between samples (60 per run)")
    p.add_argument("--warmup", type=number(0.0, 3600.0), default=None, help="seconds before the memory baseline")
    p.add_argument("--memory-bound", type=number(0.1, 100.0, "percent"), default=5.0, help="± percent (default 5)")
    p.add_argument("--viewers", type=whole_number(1, 16, "viewers"), default=3, help="viewers (default 3)")
    p.add_argument(
        "--loss",
        type=fraction("loss rate", upper=0.5),
        default=0.0,
        help="i.i.d. loss for the first viewer (default: Gilbert-Elliott bursts, ~5 %%)",
    )
    p.add_argument("--no-audio", action="store_true", help="no audio (no JACK server needed)")
    p.add_argument("--open", action="store_true", help="no password, no sealed datagrams (an open host)")
    add_stream_size_options(p)
    p.set_defaults(bitrate_kbits=6000)
    add_common(p, duration_s=None)
    p.set_defaults(func=_run_soak)


def _run_soak(args: argparse.Namespace) -> int:
    from pyrofling.bench.jack import JackUnavailable
    from pyrofling.bench.soak import SoakConfig, format_table, run_soak

    setup(args)
    cfg = SoakConfig(
        duration_s=args.duration,
        width=args.width,
        height=args.height,
        fps=args.fps,
        bitrate_kbits=args.bitrate_kbits,
        viewers=args.viewers,
        loss=args.loss,
        sample_s=args.sample if args.sample is not None else max(1.0, min(60.0, args.duration / 60)),
        warmup_s=args.warmup if args.warmup is not None else min(120.0, args.duration / 5),
        memory_bound_pct=args.memory_bound,
        audio=not args.no_audio,
        secure=not args.open,
    )
    progress(
        f"pyrofling bench soak: {cfg.duration_s / 60:.1f} min, a sample every {cfg.sample_s:g} s "
        f"(memory baseline after {cfg.warmup_s:g} s)"
    )
    try:
        result = run_soak(cfg, progress=progress)
    except JackUnavailable as exc:
        return refuse("bench soak", f"{exc}; or run with --no-audio")
    print_result(args, result, format_table)
    return 0 if result["ok"] else 1
