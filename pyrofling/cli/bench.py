"""``pyrofling bench …``: each benchmark's flags; the benchmarks themselves live in :mod:`pyrofling.bench`.

Every bench prints a table (``--json`` for tools) and says what it runs on stderr
while it runs; a ``--plot`` path is checked before the runs start.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeAlias

from pyrofling.cli.options import (
    add_logging_options,
    add_stream_size_options,
    choice_list,
    duration,
    fraction,
    int_list,
    number,
    output_file,
    refuse,
    setup_logging,
    whole_number,
)
from pyrofling.fec.planner import PLANNERS

Sub: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
_loss = fraction("loss rate", upper=1.0, upper_ok=False)


def add_bench(sub: Sub) -> None:
    bench = sub.add_parser("bench", help="measure pyrofling: FEC, streaming, latency, audio, input, outputs, soak")
    benches = bench.add_subparsers(dest="bench", metavar="BENCH")
    benches.required = True
    for add in (_fec, _stream, _latency, _phase, _audio, _input, _capture, _outputs, _security, _soak):
        add(benches)


def _parser(sub: Sub, name: str, help: str, description: str, example: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, description=description, epilog=f"Example: {example}")
    add_logging_options(p)
    return p


def _common(p: argparse.ArgumentParser, *, duration_s: tuple[float, float, float] | None, plot: bool = False) -> None:
    """--duration (low, high, default), --json and, where the bench draws, --plot."""
    if duration_s is not None:
        low, high, default = duration_s
        p.add_argument(
            "--duration", type=number(low, high), default=default, help=f"seconds per run (default {default:g})"
        )
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    if plot:
        p.add_argument("--plot", type=output_file(".png"), metavar="FILE.png", help="also draw it (needs matplotlib)")


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _print(args: argparse.Namespace, result: Any, table: Callable[[Any], str]) -> None:
    print(json.dumps(result, indent=1) if args.json else table(result))


def _plot(command: str, path: Path | None, draw: Callable[[], None]) -> int:
    """Draw a --plot; matplotlib is an optional extra, so say how to get it."""
    if path is None:
        return 0
    try:
        draw()
    except ImportError:
        return refuse(command, "--plot needs matplotlib: pip install 'pyrofling[plot]'", 1)
    _progress(f"plot written to {path}")
    return 0


def _setup(args: argparse.Namespace) -> None:
    setup_logging(args, default=logging.WARNING)


# --------------------------------------------------------------------------------------------
# bench fec
# --------------------------------------------------------------------------------------------


def _fec(sub: Sub) -> None:
    from pyrofling.bench.fec import STANDARD_KS, STANDARD_LOSS

    p = _parser(
        sub,
        "fec",
        "packet-loss recovery and throughput of the FEC codec",
        "Measure how many frames survive packet loss with no FEC, the reference PyroFling FEC (planner and "
        "peeling decoder), pyrofling's tuned planner and decoder, and, with the 'compare' extra installed, zfec "
        "(Reed-Solomon, the best possible at the same overhead) and raptorq; plus encode/decode throughput. "
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
    p.add_argument("--no-throughput", action="store_true", help="skip the throughput measurement")
    _common(p, duration_s=None, plot=True)
    p.set_defaults(func=_run_fec)


def _run_fec(args: argparse.Namespace) -> int:
    from pyrofling.bench.fec import FecBenchConfig, LossSpec, format_table, plot, run

    _setup(args)
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
        throughput=not args.no_throughput,
        throughput_frames=60 if args.quick else 300,
        sweep_degrees=args.sweep_degrees,
    )
    result = run(cfg)
    if args.plot:
        plot(result, args.plot)
        result["plot"] = str(args.plot)
    _print(args, result, format_table)
    if args.plot and not args.json:
        _progress(f"plot written to {args.plot}")
    return 0


# --------------------------------------------------------------------------------------------
# Real processes: stream, latency, audio, input, capture, outputs, security, soak
# --------------------------------------------------------------------------------------------


def _stream(sub: Sub) -> None:
    p = _parser(
        sub,
        "stream",
        "host + headless viewer(s), optionally through netsim: frames, loss, CPU, latency",
        "Run a real host (test scene) and real headless viewers as separate processes, optionally through the "
        "loss simulator, and report frames sent/shown, loss before and after FEC, key frames forced, bitrate, "
        "CPU per process and capture-to-decoded latency read from the decoded pixels.",
        "pyrofling bench stream --duration 60 --ge   |   --viewers 1,4   |   --width 1920 --height 1080",
    )
    _common(p, duration_s=(1.0, 3600.0, 10.0))
    add_stream_size_options(p)
    p.add_argument("--encoder", default="libx264")
    p.add_argument("--preset", default="ultrafast")
    p.add_argument("--loss", type=_loss, default=0.0, help="i.i.d. datagram loss host->viewer (e.g. 2%%)")
    p.add_argument("--ge", action="store_true", help="Gilbert-Elliott burst loss (about 5%% in bursts)")
    p.add_argument(
        "--viewers", type=int_list, default=(1,), help="viewers per run; a list (1,4) runs each and reports the cost"
    )
    p.add_argument("--fec-planner", choices=PLANNERS, default="tuned")
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(func=_run_stream)


def _run_stream(args: argparse.Namespace) -> int:
    from pyrofling.bench.stream import StreamScenario, add_extra_viewer_cost, format_table, run_scenario, summarize

    _setup(args)
    if any(n > 16 for n in args.viewers):
        return refuse("bench stream", "--viewers must be between 1 and 16")
    if args.ge and args.loss:
        return refuse("bench stream", "--ge brings its own bursty loss (about 5 %): give --loss or --ge, not both")
    rows, raws = [], []
    for n in args.viewers:
        sc = StreamScenario(
            width=args.width,
            height=args.height,
            fps=args.fps,
            bitrate_kbits=args.bitrate_kbits,
            duration_s=args.duration,
            loss=args.loss,
            ge=args.ge,
            viewers=n,
            fec=args.fec_planner,
            encoder=args.encoder,
            preset=args.preset,
            seed=args.seed,
        )
        _progress(f"running {sc.label()} for {args.duration:g} s ...")
        raw = run_scenario(sc)
        rows.append({**summarize(raw), "_scenario": sc})
        raws.append(raw)
    add_extra_viewer_cost(rows)
    for row in rows:
        del row["_scenario"]
    print(json.dumps({"rows": rows, "raw": raws}, indent=1) if args.json else format_table(rows))
    return 0


def _latency(sub: Sub) -> None:
    from pyrofling.bench.latency import MODES

    p = _parser(
        sub,
        "latency",
        "glass-to-glass latency and frame pacing: phase-locked (both controllers) vs free-running",
        "Runs a real host (test scene) and a headless viewer per mode, back to back: free-running, phase-locked "
        "with the reference controller, phase-locked with pyrofling's. The viewer's display clock runs at "
        "--refresh-hz (59.94 by default, against the host's 60). Reports presented/repeated/dropped frames, "
        "lock time, phase error and glass-to-glass latency (capture stamp in the picture -> on screen).",
        "pyrofling bench latency --duration 60 --refresh-hz 59.94 --plot latency.png",
    )
    _common(p, duration_s=(1.0, 3600.0, 20.0), plot=True)
    add_stream_size_options(p)
    p.add_argument("--refresh-hz", type=number(1.0, 1000.0, "Hz"), default=59.94)
    p.add_argument("--skew-ppm", type=number(-50_000.0, 50_000.0, "ppm"), default=0.0, help="viewer clock skew")
    p.add_argument("--offset", type=number(-0.1, 0.1), default=0.0, help="phase_locked offset, s (default 0)")
    p.add_argument("--deadline", type=number(0.0, 0.1), default=0.008, help="deadline, s (default 0.008)")
    p.add_argument("--loss", type=_loss, default=0.0, help="i.i.d. loss through netsim (e.g. 1%%)")
    p.add_argument("--jitter-ms", type=number(0.0, 100.0, "ms"), default=0.0, help="netsim jitter 0..N ms")
    p.add_argument("--modes", type=choice_list(MODES), default=MODES, help=f"comma list of {', '.join(MODES)}")
    p.set_defaults(func=_run_latency)


def _run_latency(args: argparse.Namespace) -> int:
    from pyrofling.bench.latency import LatencyBenchConfig, format_table, plot, run

    _setup(args)
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
        modes=args.modes,
    )
    result = run(cfg, progress=_progress)
    _print(args, result, format_table)
    return _plot("bench latency", args.plot, lambda: plot(result, str(args.plot)))


def _phase(sub: Sub) -> None:
    p = _parser(
        sub,
        "phase",
        "the phase loop simulated with a fake clock: pi vs reference controller vs free-running",
        "Simulates host frame clock, pipeline jitter and the viewer's presentation loop with the real pure "
        "objects and a fake clock, from several starting phases per scenario (500 ppm skew, 2 ms jitter, "
        "59.94 Hz, +-3 ms load, a 100 ms stall). Deterministic: the same seed gives the same numbers.",
        "pyrofling bench phase --duration 10 --phases 8 --plot phase.png",
    )
    _common(p, duration_s=(2.0, 600.0, 10.0), plot=True)
    p.add_argument("--phases", type=whole_number(1, 64, "phases"), default=8, help="starting phases per scenario")
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(func=_run_phase)


def _run_phase(args: argparse.Namespace) -> int:
    from pyrofling.bench.phase import format_table, plot, run, standard_scenarios

    _setup(args)
    result = run(standard_scenarios(args.duration, args.seed), phases=args.phases)
    _print(args, result, format_table)
    return _plot("bench phase", args.plot, lambda: plot(args.duration, args.seed, str(args.plot)))


def _audio(sub: Sub) -> None:
    from pyrofling.bench.audio import CASES
    from pyrofling.core.audio_control import RATE_CONTROLLERS

    p = _parser(
        sub,
        "audio",
        "audio buffer control, underruns, rate wobble and end-to-end latency through a real audio clock",
        "Runs a real host (test scene + click tone with a skewed clock), netsim where the run has jitter or "
        "loss, and a headless viewer playing into a JACK dummy server the bench starts. Default runs: +500 and "
        "-500 ppm skew with 0..5 ms jitter, 2% loss, and plain loopback, per controller. Reports buffered audio, "
        "underruns, playback speed (mean/max |speed-1|, wobble), click-timed end-to-end latency, A/V offset and "
        "concealment per lost packet.",
        "pyrofling bench audio --duration 60 --controllers drift,reference --plot audio.png",
    )
    _common(p, duration_s=(5.0, 3600.0, 60.0), plot=True)
    p.add_argument(
        "--controllers",
        type=choice_list(RATE_CONTROLLERS),
        default=("drift",),
        help=f"comma list of {', '.join(RATE_CONTROLLERS)} (default drift; add reference to compare)",
    )
    p.add_argument(
        "--cases",
        type=choice_list(CASES),
        default=CASES,
        help="comma list: fast/slow (host clock +/-500 ppm, with jitter), loss (2%%), loopback (default all)",
    )
    p.add_argument("--jitter-ms", type=number(0.0, 50.0, "ms"), default=5.0, help="jitter of the skew runs")
    p.add_argument("--target-ms", type=number(5.0, 500.0, "ms"), default=30.0, help="viewer buffer target")
    p.add_argument("--codec", choices=("raw", "opus"), default="raw", help="audio codec (default raw)")
    p.add_argument(
        "--no-jack",
        action="store_true",
        help="play into this machine's default output instead of a JACK dummy server started for the bench",
    )
    p.set_defaults(func=_run_audio)


def _run_audio(args: argparse.Namespace) -> int:
    from pyrofling.bench.audio import AudioBenchConfig, format_table, plot, run, standard_rows
    from pyrofling.bench.jack import JackUnavailable

    _setup(args)
    cfg = AudioBenchConfig(
        duration_s=args.duration,
        target_ms=args.target_ms,
        codec=args.codec,
        rows=standard_rows(args.controllers, jitter_ms=args.jitter_ms, cases=args.cases),
        start_jack=not args.no_jack,
    )
    try:
        result = run(cfg, progress=_progress)
    except JackUnavailable as exc:
        return refuse("bench audio", f"{exc}; or pass --no-jack to use this machine's sound", 1)
    _print(args, result, format_table)
    return _plot("bench audio", args.plot, lambda: plot(result, str(args.plot)))


def _input(sub: Sub) -> None:
    from pyrofling.bench.input import CASES

    p = _parser(
        sub,
        "input",
        "input latency: a viewer's gamepad send to the host's virtual pad, and to the game's reaction on screen",
        "Runs a real host streaming its test scene and a real client (a headless viewer decoding the stream, "
        "or the gamepad-only client) whose synthetic pad changes on every send, on loopback and through "
        "netsim with jitter and loss on the viewer->host direction. Each state is timed from the client's "
        "send to the host's write to the virtual pad (one monotonic clock for both processes).",
        "pyrofling bench input --duration 30 --json",
    )
    _common(p, duration_s=(2.0, 3600.0, 10.0))
    p.add_argument(
        "--cases",
        type=choice_list(CASES),
        default=("loopback", "netsim"),
        help="comma list: loopback, netsim (default both); game, game-immediate: stream the example game "
        "through the capture socket and also time input to photon (pad send to the decoded frame showing it)",
    )
    p.add_argument("--client", choices=("view", "gamepad"), default="view", help="which client sends (default view)")
    p.add_argument("--jitter-ms", type=number(0.0, 100.0, "ms"), default=5.0, help="netsim jitter (default 5)")
    p.add_argument("--loss", type=fraction("loss rate", upper=0.5), default=0.01, help="netsim loss (default 1%%)")
    add_stream_size_options(p)
    p.set_defaults(func=_run_input)


def _capture(sub: Sub) -> None:
    p = _parser(
        sub,
        "capture",
        "game capture: frames encoded, the game's pacing, input to photon (the example game, end to end)",
        "Runs a real host (--source capture), the example game presenting through the capture socket "
        "(headless, stamping each frame) and a phase-locked headless viewer whose synthetic pad changes every "
        "4 ms. Reports the share of game frames encoded, the game's frame interval while the host paces it "
        "(FIFO), and input to photon: a pad send to the decode of the first frame that shows the game's "
        "reaction. Same runs as 'bench input --cases game,game-immediate'.",
        "pyrofling bench capture --duration 60",
    )
    _common(p, duration_s=(5.0, 3600.0, 20.0))
    p.add_argument(
        "--cases",
        type=choice_list(("game", "game-immediate")),
        default=("game", "game-immediate"),
        help="comma list: game (heartbeat encode), game-immediate (--immediate-encode); default both",
    )
    add_stream_size_options(p)
    p.set_defaults(func=_run_input, client="view", jitter_ms=0.0, loss=0.0)


def _run_input(args: argparse.Namespace) -> int:
    from pyrofling.bench.input import InputBenchConfig, format_table, run, standard_scenarios

    _setup(args)
    cfg = InputBenchConfig(
        duration_s=args.duration,
        client=args.client,
        width=args.width,
        height=args.height,
        fps=args.fps,
        scenarios=standard_scenarios(list(args.cases), jitter_ms=args.jitter_ms, loss=args.loss),
    )
    result = run(cfg, progress=_progress)
    _print(args, result, format_table)
    rows = result["rows"]
    games = [r for r in rows if "capture" in r]
    ok = all(r["applied"] for r in rows) and all(r.get("photon_samples") and r["capture"].get("encoded") for r in games)
    return 0 if ok else 1


def _comparison(
    sub: Sub, name: str, help: str, description: str, example: str, modes: tuple[str, ...], default: tuple[str, ...]
) -> None:
    """outputs and security: a baseline and variants of a real host + headless viewer, taking turns."""
    p = _parser(sub, name, help, description, example)
    _common(p, duration_s=(2.0, 3600.0, 15.0))
    p.add_argument("--rounds", type=whole_number(1, 50, "rounds"), default=2, help="runs per mode (default 2)")
    p.add_argument("--modes", type=choice_list(modes), default=default, help=f"comma list of {', '.join(modes)}")
    add_stream_size_options(p)
    p.add_argument("--preset", default="ultrafast")


def _run_comparison(args: argparse.Namespace, name: str, check_modes: Any, run: Any, table: Any) -> Any:
    from pyrofling.bench.stream import StreamScenario

    _setup(args)
    problem = check_modes(list(args.modes))
    if problem:
        refuse(f"bench {name}", problem)
        return None
    base = StreamScenario(
        width=args.width,
        height=args.height,
        fps=args.fps,
        bitrate_kbits=args.bitrate_kbits,
        duration_s=args.duration,
        preset=args.preset,
    )
    result = run(base, list(args.modes), args.rounds, progress=_progress)
    _print(args, result, table)
    return result


def _outputs(sub: Sub) -> None:
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


def _security(sub: Sub) -> None:
    from pyrofling.bench.security import DEFAULT_MODES, MODES

    _comparison(
        sub,
        "security",
        "what --password and sealed datagrams cost: host and viewer CPU and latency, against an open host",
        "Run a real host and a headless viewer with no secret (open), with a password (sealed: authenticated, "
        "AES-GCM on every datagram) and with a password and --no-encrypt (auth-only), the modes taking turns. "
        "Report median host and viewer CPU and capture-to-decoded latency next to open's.",
        "pyrofling bench security --width 1920 --height 1080 --bitrate-kbits 20000 --rounds 3",
        tuple(MODES),
        tuple(DEFAULT_MODES),
    )
    sub.choices["security"].set_defaults(func=_run_security)


def _run_security(args: argparse.Namespace) -> int:
    from pyrofling.bench.security import check_modes, format_table, run_security_bench

    result = _run_comparison(args, "security", check_modes, run_security_bench, format_table)
    if result is None:
        return 2
    return 0 if all(m["authenticated"] >= m["runs"] for m in result["modes"] if m["mode"] != "open") else 1


def _soak(sub: Sub) -> None:
    p = _parser(
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
    _common(p, duration_s=None)
    p.set_defaults(func=_run_soak)


def _run_soak(args: argparse.Namespace) -> int:
    from pyrofling.bench.jack import JackUnavailable
    from pyrofling.bench.soak import SoakConfig, format_table, run_soak

    _setup(args)
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
    _progress(
        f"pyrofling bench soak: {cfg.duration_s / 60:.1f} min, a sample every {cfg.sample_s:g} s "
        f"(memory baseline after {cfg.warmup_s:g} s)"
    )
    try:
        result = run_soak(cfg, progress=_progress)
    except JackUnavailable as exc:
        return refuse("bench soak", f"{exc}; or run with --no-audio")
    _print(args, result, format_table)
    return 0 if result["ok"] else 1
