"""Benches of the media around the picture: ``audio``, ``input`` (pads), ``capture`` (games) and ``keyframes``
(how sharp a forced IDR is)."""

from __future__ import annotations

import argparse
from typing import Any

from pyrofling.cli.bench.common import (
    Sub,
    add_common,
    bench_parser,
    draw_plot,
    print_result,
    progress,
    setup,
)
from pyrofling.cli.options import (
    add_stream_size_options,
    choice_list,
    fraction,
    number,
    refuse,
)


def add_audio(sub: Sub) -> None:
    from pyrofling.bench.audio import CASES, STANDARD_CASES
    from pyrofling.core.viewer.audio_control import RATE_CONTROLLERS

    p = bench_parser(
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
    add_common(p, duration_s=(5.0, 3600.0, 60.0), plot=True)
    p.add_argument(
        "--controllers",
        type=choice_list(RATE_CONTROLLERS),
        default=("drift",),
        help=f"comma list of {', '.join(RATE_CONTROLLERS)} (default drift; add reference to compare)",
    )
    p.add_argument(
        "--cases",
        type=choice_list(CASES),
        default=STANDARD_CASES,
        help="comma list: fast/slow (host clock +/-500 ppm, with jitter), loss (2%%), loopback (default: those four), "
        "loss5 (5%%)",
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

    setup(args)
    cfg = AudioBenchConfig(
        duration_s=args.duration,
        target_ms=args.target_ms,
        codec=args.codec,
        rows=standard_rows(args.controllers, jitter_ms=args.jitter_ms, cases=args.cases),
        start_jack=not args.no_jack,
    )
    try:
        result = run(cfg, progress=progress)
    except JackUnavailable as exc:
        return refuse("bench audio", f"{exc}; or pass --no-jack to use this machine's sound", 1)
    print_result(args, result, format_table)
    return draw_plot("bench audio", args.plot, lambda: plot(result, str(args.plot)))


def add_input(sub: Sub) -> None:
    from pyrofling.bench.input import CASES

    p = bench_parser(
        sub,
        "input",
        "input latency: a viewer's gamepad send to the host's virtual pad, and to the game's reaction on screen",
        "Runs a real host streaming its test scene and a real client (a headless viewer decoding the stream, "
        "or the gamepad-only client) whose synthetic pad changes on every send, on loopback and through "
        "netsim with jitter and loss on the viewer->host direction. Each state is timed from the client's "
        "send to the host's write to the virtual pad (one monotonic clock for both processes).",
        "pyrofling bench input --duration 30 --json",
    )
    add_common(p, duration_s=(2.0, 3600.0, 10.0))
    p.add_argument(
        "--cases",
        type=choice_list(CASES),
        default=("loopback", "netsim"),
        help="comma list: loopback, netsim (default both): the pad; keys, keys-netsim: keys and the mouse (a "
        "headless viewer's synthetic player → the virtual keyboard and mouse); keys-headless: the same keys into the "
        "host's own headless desktop, to a program there that shows how many it received (input to photon); game, "
        "game-immediate: stream the "
        "example game through the capture socket and also time input to photon (pad send to the decoded frame "
        "showing it)",
    )
    p.add_argument("--client", choices=("view", "gamepad"), default="view", help="which client sends (default view)")
    p.add_argument("--jitter-ms", type=number(0.0, 100.0, "ms"), default=5.0, help="netsim jitter (default 5)")
    p.add_argument("--loss", type=fraction("loss rate", upper=0.5), default=0.01, help="netsim loss (default 1%%)")
    add_stream_size_options(p)
    p.set_defaults(func=_run_input)


def add_capture(sub: Sub) -> None:
    from pyrofling.bench.capture_sources import SIZES, SOURCES
    from pyrofling.bench.input import GAME_CASES

    p = bench_parser(
        sub,
        "capture",
        "game capture: frames encoded, the game's pacing, input to photon (the example game, end to end)",
        "Runs a real host (--source capture), the example game presenting through the capture socket "
        "(headless, stamping each frame) and a phase-locked headless viewer whose synthetic pad changes every "
        "4 ms. Reports the share of game frames encoded, the game's frame interval while the host paces it "
        "(FIFO), and input to photon: a pad send to the decode of the first frame that shows the game's "
        "reaction, for heartbeat and immediate encode, each with the game starting its frames at once and just "
        "in time for the heartbeat. Same runs as 'bench input --cases game,game-immediate,game-jit,...'. Then "
        "what reading a frame of PyroFling's Vulkan layer costs the host (import, copy to host memory) at 720p "
        "and 1080p, with the Python stand-in layer on this machine's Vulkan driver. With --sources, the host's "
        "picture sources side by side (the test scene, an X11 screen, the host's own headless desktop) at 720p and "
        "1080p: new pictures a second at a viewer, capture to encoded, drawn to decoded, host CPU per frame.",
        "pyrofling bench capture --duration 60; pyrofling bench capture --sources scene,x11,headless --duration 15",
    )
    add_common(p, duration_s=(5.0, 3600.0, 20.0))
    p.add_argument(
        "--cases",
        type=choice_list(GAME_CASES),
        default=GAME_CASES,
        help="comma list: game (heartbeat encode), game-immediate (immediate encode), and the same with the game "
        "starting each frame just in time for the heartbeat: game-jit, game-immediate-jit (default all four)",
    )
    p.add_argument(
        "--readback-frames",
        type=int,
        default=200,
        help="frames per size for the Vulkan layer readback table (default 200; 0 skips it)",
    )
    p.add_argument("--only-readback", action="store_true", help="only the Vulkan layer readback table")
    p.add_argument(
        "--sources",
        type=choice_list(SOURCES),
        default=(),
        help="comma list of picture sources to measure side by side instead of the game cases: scene, x11 (an Xvfb "
        "screen), headless (the host's own desktop); the same OpenGL program draws for x11 and headless",
    )
    p.add_argument(
        "--sizes",
        type=choice_list(tuple(SIZES)),
        default=("720p", "1080p"),
        help="with --sources: comma list of 360p, 720p, 1080p (default 720p,1080p), at --fps",
    )
    add_stream_size_options(p)
    p.set_defaults(func=_run_capture, client="view", jitter_ms=0.0, loss=0.0)


def _run_capture(args: argparse.Namespace) -> int:
    """The game cases, then the Vulkan layer readback table; with --json, one document with both."""
    from pyrofling.bench.input import format_table as input_table
    from pyrofling.server.vulkan_import import vulkan_problem

    if args.readback_frames < 0 or (args.only_readback and args.readback_frames == 0):
        return refuse("bench capture", "--readback-frames must be at least 1 with --only-readback (0 skips it)")
    setup(args)
    if args.sources:
        return _run_sources(args)
    result: dict[str, Any] = {"rows": []}
    ok = True
    if not args.only_readback:
        result, ok = _input_result(args)
    if args.readback_frames:
        problem = vulkan_problem()
        if problem is None:
            from pyrofling.bench.vulkan_readback import run

            result["vulkan_readback"] = run(args.readback_frames, progress=progress)
            ok = ok and all(r["frames_wrong"] == 0 for r in result["vulkan_readback"]["rows"])
        else:
            progress(f"Vulkan layer readback: skipped: {problem}")
            ok = ok and not args.only_readback

    def table(result: dict[str, Any]) -> str:
        from pyrofling.bench.vulkan_readback import format_table as readback_table

        parts = [input_table(result)] if result["rows"] else []
        if "vulkan_readback" in result:
            parts.append(readback_table(result["vulkan_readback"]))
        return "\n\n".join(parts)

    print_result(args, result, table)
    return 0 if ok else 1


def _run_sources(args: argparse.Namespace) -> int:
    from pyrofling.bench.capture_sources import SIZES, format_table, run

    sizes = [SIZES[s] for s in args.sizes]
    result = run(args.sources, sizes, args.fps, args.duration, progress=progress)
    print_result(args, result, format_table)
    return 0 if result["rows"] and all(r["new_pictures_per_s"] > 0 for r in result["rows"]) else 1


def _run_input(args: argparse.Namespace) -> int:
    from pyrofling.bench.input import format_table

    setup(args)
    result, ok = _input_result(args)
    print_result(args, result, format_table)
    return 0 if ok else 1


def _input_result(args: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    from pyrofling.bench.input import InputBenchConfig, run, standard_scenarios

    cfg = InputBenchConfig(
        duration_s=args.duration,
        client=args.client,
        width=args.width,
        height=args.height,
        fps=args.fps,
        scenarios=standard_scenarios(list(args.cases), jitter_ms=args.jitter_ms, loss=args.loss),
    )
    result = run(cfg, progress=progress)
    rows = result["rows"]
    games = [r for r in rows if "capture" in r]
    ok = all(r["applied"] for r in rows) and all(r.get("photon_samples") and r["capture"].get("encoded") for r in games)
    return result, bool(ok)


def add_keyframes(sub: Sub) -> None:
    p = bench_parser(
        sub,
        "keyframes",
        "how sharp a forced IDR is at each size and bitrate, as the players' judge reads it",
        "Encodes the test scene with the host's encoder settings, forces an IDR every 20 pictures (whoever asks "
        "for one, a player's loss, a browser or a spectator, every viewer gets it), decodes each picture and "
        "measures it against the scene's own rendering as the players' judge does: the IDRs, the pictures after "
        "them and the rest, against the clean threshold; and the largest IDR against one frame's bits.",
        "pyrofling bench keyframes --cases 320x180@800,1280x720@10000",
    )
    add_common(p, duration_s=None)
    p.add_argument(
        "--cases",
        default=None,
        help="comma list of WIDTHxHEIGHT@KBITS (default 320x180@800,640x360@2000,640x360@3000,1280x720@6000,"
        "1280x720@10000)",
    )
    p.add_argument("--idrs", type=number(1, 200), default=19, help="IDRs forced per case (default 19)")
    p.set_defaults(func=_run_keyframes)


def _run_keyframes(args: argparse.Namespace) -> int:
    from pyrofling.bench.keyframes import DEFAULT_CASES, format_table, parse_case, run_keyframes_bench

    setup(args)
    try:
        cases = tuple(parse_case(c) for c in args.cases.split(",")) if args.cases else DEFAULT_CASES
    except ValueError as exc:
        return refuse("bench keyframes", f"--cases {exc}")
    print_result(args, run_keyframes_bench(cases, idrs=int(args.idrs), progress=progress), format_table)
    return 0


#: The codecs ``bench codecs`` measures, by the names ``host --codec`` takes.
CODECS = ("h264", "hevc", "av1")


def add_codecs(sub: Sub) -> None:
    p = bench_parser(
        sub,
        "codecs",
        "H.264, HEVC and AV1 with the host's encoder settings: speed, CPU and quality against bitrate",
        "Encodes the test scene with the host's encoder for each codec (libx264, libx265, libsvtav1) at 720p60 "
        "and 1080p60 and a set of bitrates, decodes every packet with the viewer's decoder and measures each "
        "picture's luma PSNR against the scene's own; reports encode median and p99, the encoder's CPU a frame, "
        "decode median and PSNR, and the bits HEVC and AV1 need for H.264's quality at 10 (720p) and 20 "
        "(1080p) Mbit/s.",
        "pyrofling bench codecs --heights 720 --frames 120 --plot codecs.png",
    )
    add_common(p, duration_s=None, plot=True)
    p.add_argument("--codecs", type=choice_list(CODECS), default=CODECS,
                   help="comma list of h264, hevc, av1 (default all three)")  # fmt: skip
    p.add_argument("--heights", type=choice_list(("720", "1080")), default=("720", "1080"),
                   help="comma list of 720, 1080 (default both)")  # fmt: skip
    p.add_argument("--frames", type=number(20, 3600), default=120, help="pictures a case (default 120)")
    p.add_argument("--content", choices=("scene", "game"), default="scene",
                   help="what is encoded: the test scene (default), or the example game's pictures (its numpy "
                        "renderer, the ball steered in circles), at lower bitrates too, RGBA converted as the "
                        "host converts a game's (the conversion's time and CPU reported)")  # fmt: skip
    p.add_argument("--preset", action="append", default=[], type=codec_setting, metavar="CODEC=PRESET",
                   help="a codec's preset other than the host's, e.g. hevc=superfast or av1=10 (repeat for "
                        "each)")  # fmt: skip
    p.add_argument("--params", action="append", default=[], type=codec_setting, metavar="CODEC=KEY=VALUE[:...]",
                   help="a codec's encoder options after the host's (as host --encoder-params), e.g. "
                        "hevc=min-cu-size=8:sao=1 (repeat for each)")  # fmt: skip
    p.add_argument("--ge", type=number(0.0, 600.0, "seconds"), default=0.0, metavar="SECONDS",
                   help="also stream each codec at each size's reference bitrate through the Gilbert-Elliott "
                        "bursts for this long (bench stream --ge, the test scene): good refreshes, freezes, "
                        "pictures the host skipped (default 0: not run)")  # fmt: skip
    p.set_defaults(func=_run_codecs)


def codec_setting(text: str) -> tuple[str, str]:
    """``CODEC=VALUE`` for one of h264, hevc, av1."""
    codec, _, value = text.partition("=")
    if codec not in CODECS or not value:
        raise argparse.ArgumentTypeError(f"{text!r}: give CODEC=VALUE with CODEC one of h264, hevc, av1")
    return codec, value


def add_codec_switch(sub: Sub) -> None:
    p = bench_parser(
        sub,
        "codec-switch",
        "what host --codec auto costs the viewer watching when a viewer that decodes less joins and leaves",
        "Two runs with host --codec auto and a viewer judging every refresh: a second viewer joins and leaves, "
        "decoding only H.264 in the first run (the host turns the stream to H.264 at once, and back to AV1 5 s "
        "after it left), every codec in the second (no switch: a join's own cost). Reports the first viewer's "
        "good, stale and corrupt refreshes and freezes, the changes it followed, the second viewer's codec and "
        "first picture, the host's switches and how long its encoder took to open anew.",
        "pyrofling bench codec-switch --width 1280 --height 720",
    )
    add_common(p, duration_s=None)
    p.add_argument("--width", type=number(160, 3840), default=1280, help="default 1280")
    p.add_argument("--height", type=number(120, 2160), default=720, help="default 720")
    p.add_argument("--fps", type=number(10, 240), default=60, help="default 60")
    p.add_argument("--bitrate-kbits", type=number(300, 200_000), default=10_000, help="default 10000")
    p.set_defaults(func=_run_codec_switch)


def _run_codec_switch(args: argparse.Namespace) -> int:
    from pyrofling.bench.codec_switch import SwitchCase, format_table, run_switch_bench

    setup(args)
    case = SwitchCase(width=int(args.width) // 2 * 2, height=int(args.height) // 2 * 2, fps=int(args.fps),
                      bitrate_kbits=int(args.bitrate_kbits))  # fmt: skip
    print_result(args, run_switch_bench(case, progress=progress), format_table)
    return 0


def _run_codecs(args: argparse.Namespace) -> int:
    from pyrofling.bench.codecs import CodecSettings, format_table, plot, run_codecs_bench

    presets, params = dict(args.preset), dict(args.params)
    settings = {c: CodecSettings(presets.get(c), params.get(c, "")) for c in CODECS}
    for codec, chosen in settings.items():
        try:
            chosen.config(codec)
        except ValueError as exc:
            raise SystemExit(f"bench codecs: {codec}: {exc}") from None
    setup(args)
    result = run_codecs_bench(tuple(args.codecs), tuple(int(h) for h in args.heights), frames=int(args.frames),
                              content=args.content, settings=settings, ge_s=float(args.ge),
                              progress=progress)  # fmt: skip
    print_result(args, result, format_table)
    return draw_plot("bench codecs", args.plot, lambda: plot(result, str(args.plot)))
