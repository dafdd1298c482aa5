"""``pyrofling view``: its flags, the ViewerConfig they make, and watching in a window or headless."""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any

from pyrofling.cli.gamepad import add_view_gamepad_options, gamepad_config
from pyrofling.cli.keyboard_mouse import add_view_input_options, input_config
from pyrofling.cli.options import (
    CODEC_FLAGS,
    add_logging_options,
    add_thread_priority_option,
    add_viewer_security_options,
    exit_now,
    install_stop,
    leave_if_workers_linger,
    number,
    output_file,
    pairing_dir,
    refuse,
    run_time,
    setup_logging,
    viewer_password,
    whole_number,
)
from pyrofling.client.audio import AUDIO_BACKENDS, AudioPlayerConfig
from pyrofling.client.config import ViewerConfig
from pyrofling.client.display import display_problem
from pyrofling.client.uri import PyroUri, parse_uri
from pyrofling.client.viewer import Viewer
from pyrofling.core.slices import EARLY_PICTURE_BYTES
from pyrofling.core.viewer.audio_control import RATE_CONTROLLERS
from pyrofling.core.viewer.phase_offset import AutoOffsetConfig
from pyrofling.core.viewer.presentation import PresentationConfig
from pyrofling.runtime import tune_for_latency
from pyrofling.wire import KickFlags, VideoCodec

log = logging.getLogger("pyrofling")

#: Offsets and deadlines the presentation loop takes, seconds.
OFFSET_RANGE = (-0.1, 0.1)
DEADLINE_RANGE = (0.0, 0.1)


def add_view(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "view",
        help="watch a stream from a pyrofling or PyroFling host",
        description=(
            "Connect to a host, reassemble and decode its stream and show it in a window (or count frames with "
            "--headless). Keys in the window: V toggles the statistics overlay, F toggles full screen, Esc quits; "
            "the keyboard pad's keys are listed under 'gamepad'; with a host that takes keys and the mouse, a click "
            "captures the pointer for the game (see 'keyboard and mouse'). A viewer that had a stream follows its host "
            "through restarts; one that cannot reach the host says why and stops."
        ),
        epilog="Example: pyrofling view pyro://127.0.0.1:9876   (IPv6: pyro://[::1]:9876)",
    )
    p.add_argument("uri", help="pyro://HOST:PORT[?phase_locked=S&deadline=S] or HOST:PORT")
    p.add_argument("--headless", action="store_true", help="decode and count frames, no window")
    _add_presentation_options(p)
    _add_audio_options(p)
    add_view_gamepad_options(p)
    add_view_input_options(p)
    add_viewer_security_options(p)
    p.add_argument("--duration", type=run_time, default=None, help="stop after this many seconds")
    p.add_argument("--no-reconnect", action="store_true", help="exit when the host goes away instead of reconnecting")
    p.add_argument(
        "--native", action="store_true", help="do not ask for pyrofling extensions (behave like a native viewer)"
    )
    p.add_argument(
        "--stats-json", type=output_file(), default=None, help="write counters and latency samples here on exit"
    )
    p.add_argument(
        "--stats-interval",
        type=number(0.0, 3600.0),
        default=0.0,
        help="also rewrite --stats-json this often, s (counters, and medians of the last 10 s; the samples only at "
        "the end)",
    )
    p.add_argument(
        "--recovery",
        choices=("key-frame", "intra-refresh"),
        default="key-frame",
        help="after a loss nothing repaired: ask for a key frame and hold the last whole picture until it comes "
        "(key-frame, default), or ask for nothing and show the damaged pictures until intra refresh heals them",
    )
    p.add_argument(
        "--no-resend",
        action="store_true",
        help="do not ask the host to send missing datagrams again (NACK); to measure FEC on its own",
    )
    p.add_argument(
        "--codecs",
        type=codec_list,
        default=None,
        help="the video codecs to tell a host that chooses its codec (host --codec auto) this viewer decodes, e.g. "
        "h264 or h264,av1 (default: every one it can: h264, hevc, av1)",
    )
    p.add_argument(
        "--decode-threads",
        type=whole_number(1, 64, "threads"),
        default=None,
        help="threads decoding slices of each picture (default: one per CPU this viewer may use, at most 8)",
    )
    p.add_argument(
        "--early-decode",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="start decoding each large H.264 picture (--early-decode-bytes) on its first slices while the rest "
        "arrives (with two decode threads or more and --recovery key-frame). Default: on where the viewer decodes "
        "on 4 threads or more (a 1080p60 picture decoded 0.6-0.8 ms sooner with the host's small slices, which it "
        "makes for such pictures by itself; docs/streaming.md)",
    )
    p.add_argument(
        "--early-decode-bytes",
        type=whole_number(0, 10**8, "bytes"),
        default=EARLY_PICTURE_BYTES,
        metavar="N",
        help=f"with --early-decode, decode early only pictures of at least N bytes (default {EARLY_PICTURE_BYTES:,}: "
        "about a millisecond of datagrams behind the host's 200 Mbit/s pacer); smaller ones come whole. 0: every "
        "picture",
    )
    p.add_argument(
        "--check-scene",
        action="store_true",
        help="for benches against a host showing the test scene: compare every picture with the scene's own "
        "frame and judge each display refresh as good, corrupt or stale (quality in --stats-json)",
    )
    p.add_argument(
        "--host-on-this-machine",
        action="store_true",
        help="for benches: the host runs on this machine, so its capture stamps are on our clock as they are "
        "(capture -> screen times then need no estimate from pings, which a one-way delay, as netsim adds, skews "
        "by half of it)",
    )
    p.add_argument(
        "--screenshot", type=output_file(".png"), default=None, help="window mode: save the window to this PNG on exit"
    )
    add_logging_options(p)
    p.set_defaults(func=run_view)


def display_option(text: str) -> tuple[int, int, float]:
    """``WxH`` or ``WxH@HZ``, as --display takes it."""
    size, _, hz = text.partition("@")
    try:
        width, height = (int(v) for v in size.lower().split("x"))
        rate = float(hz) if hz else 0.0
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a display: give WxH or WxH@HZ, e.g. 1920x1080@60") from None
    if not (16 <= width <= 16384 and 16 <= height <= 16384 and 0 <= rate <= 1000):
        raise argparse.ArgumentTypeError(f"{text!r}: a display of 16..16384 pixels a side, at 0..1000 Hz")
    return width, height, rate


def _add_presentation_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "presentation",
        "Phase lock steers the host's frame clock so pictures finish decoding just before this display refreshes: "
        "smooth pacing at low latency. By default the viewer finds the offset and deadline itself, from when "
        "pictures are ready against its refresh (shown in the statistics overlay). The reference's URI "
        "parameters keep their meaning (pyro://HOST:PORT?phase_locked=0.0&deadline=0.008: a fixed offset; "
        "deadline alone: wait for pictures, no lock). These flags override the URI.",
    )
    g.add_argument(
        "--phase-locked",
        type=phase_lock_choice,
        default=None,
        metavar="auto|off|OFFSET",
        help="auto (the default): lock to this display at an offset found automatically; OFFSET: pictures "
        "should be done OFFSET seconds after each refresh (the reference's phase_locked); off: free-running, "
        "the newest picture at each refresh",
    )
    g.add_argument(
        "--repeats-per-minute",
        type=number(0.01, 600.0, "repeats a minute"),
        default=0.5,
        metavar="N",
        help="auto: choose the offset so that about N refreshes a minute miss their picture (default 0.5: most "
        "minutes none, about one in ten two or more); "
        "more gives lower latency, fewer a steadier picture at a higher latency",
    )
    g.add_argument(
        "--deadline",
        type=number(*DEADLINE_RANGE),
        default=None,
        metavar="SECONDS",
        help="with a fixed OFFSET, or alone (no lock): wait at most this long after a refresh for the next "
        "picture, else repeat the last (default 0: off; auto finds its own)",
    )
    g.add_argument(
        "--display",
        type=display_option,
        default=None,
        metavar="WxH[@HZ]",
        help="tell the host this display (e.g. 1920x1080@60): a host streaming a desktop of its own makes it this "
        "size (default: the window's size, and no display with --headless)",
    )
    g.add_argument(
        "--refresh-hz",
        type=number(1.0, 1000.0, "Hz"),
        default=None,
        help="run a software display clock at this rate, e.g. 59.94 (default: the display's, else the stream's)",
    )
    add_thread_priority_option(g)
    g.add_argument(
        "--frame-trace",
        type=output_file(),
        default=None,
        metavar="FILE",
        help="write a JSON line per refresh that showed a new picture or missed its deadline, and per picture "
        "dropped: when the picture arrived, was decoded, ready and seen by the presenter, and how late against its "
        "target (to find where late pictures lose time)",
    )
    g.add_argument(
        "--picture-rate",
        choices=("auto", "full"),
        default="auto",
        help="auto (default): on a display of 80 Hz or more, when this machine (or the host, or the link) cannot "
        "bring each picture in time for the automatic lock and more than 1 refresh in 100 repeats over 10 s, ask "
        "the host for half the display's rate, each picture shown two refreshes (a pyrofling host makes it; "
        "once, until the viewer restarts), and ask for the full rate again 7 s later if half brought the "
        "pictures to the screen more than 1 ms later; full: never ask",
    )
    g.add_argument(
        "--refresh-skew-ppm",
        type=number(-50_000.0, 50_000.0, "ppm"),
        default=0.0,
        metavar="PPM",
        help="run the display clock this many ppm slow (negative: fast), to see the lock at work",
    )


def _add_audio_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "audio",
        "Audio is held at a small buffer target by playing it a fraction of a percent faster or slower "
        "(inaudible), so the host's and this machine's clocks never drift apart and nothing pops.",
    )
    g.add_argument("--no-audio", action="store_true", help="do not ask for audio")
    g.add_argument(
        "--audio-target-ms",
        type=number(5.0, 500.0, "ms"),
        default=30.0,
        help="audio held ahead of the speaker, device latency included (default 30): lower is less delay, "
        "higher survives more network jitter",
    )
    g.add_argument(
        "--audio-device", default=None, metavar="NAME", help="output device (name or index; default: the default)"
    )
    g.add_argument(
        "--audio-backend",
        choices=AUDIO_BACKENDS,
        default="sounddevice",
        help="sounddevice (default) or pyaudio where it is installed",
    )
    g.add_argument(
        "--audio-controller",
        choices=RATE_CONTROLLERS,
        default="drift",
        help="drift: pyrofling's (learns the clock skew, holds the target with little rate wobble); "
        "reference: PyroFling's proportional rule (default drift)",
    )


# --------------------------------------------------------------------------------------------
# Flags → ViewerConfig
# --------------------------------------------------------------------------------------------


def phase_lock_choice(text: str) -> float | str:
    """``auto``, ``off`` or an offset in seconds (the reference's ``phase_locked``)."""
    if text in ("auto", "off"):
        return text
    try:
        return number(*OFFSET_RANGE)(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc}; or 'auto' (the default) or 'off'") from None


def presentation_config(args: argparse.Namespace, uri: PyroUri) -> PresentationConfig:
    """The flags win over the URI's ``phase_locked`` and ``deadline``; both are checked here.

    Neither given: the automatic offset.  ``deadline`` alone keeps the reference's meaning (FIFO, no lock).
    """
    choice = args.phase_locked
    if choice == "auto" or (choice is None and uri.phase_locked is None and uri.deadline_s is None
                            and args.deadline is None):  # fmt: skip
        if args.deadline is not None:
            raise ValueError("--deadline goes with a fixed --phase-locked OFFSET; 'auto' finds its own deadline")
        return PresentationConfig.automatic(AutoOffsetConfig(misses_per_minute=args.repeats_per_minute))
    offset = None if choice == "off" else (choice if choice is not None else uri.phase_locked)
    deadline = args.deadline if args.deadline is not None else uri.deadline_s
    assert not isinstance(offset, str)
    if offset is not None and not OFFSET_RANGE[0] <= offset <= OFFSET_RANGE[1]:
        raise ValueError(f"phase_locked={offset:g} is out of range: an offset in seconds, -0.1..0.1 (e.g. 0.0)")
    if deadline is not None and not DEADLINE_RANGE[0] <= deadline <= DEADLINE_RANGE[1]:
        raise ValueError(f"deadline={deadline:g} is out of range: seconds, 0..0.1 (e.g. 0.008)")
    return PresentationConfig(
        phase_locked=offset is not None, offset_s=offset or 0.0, deadline_s=max(0.0, deadline or 0.0)
    )


def viewer_config(args: argparse.Namespace) -> ViewerConfig:
    uri = parse_uri(args.uri)
    audio = None
    if not args.no_audio:
        audio = AudioPlayerConfig(
            target_s=args.audio_target_ms / 1000,
            controller=args.audio_controller,
            backend=args.audio_backend,
            device=args.audio_device,
        )
    gamepad = gamepad_config(args)
    flags = KickFlags.VIDEO
    if audio is not None:
        flags |= KickFlags.AUDIO
    if gamepad is not None:
        flags |= KickFlags.GAMEPAD
    keyboard_mouse = input_config(args)
    if keyboard_mouse is not None:
        flags |= KickFlags.KEYBOARD_MOUSE
    threads = {} if args.decode_threads is None else {"decode_threads": args.decode_threads}
    return ViewerConfig(
        **threads,
        flags=flags,
        audio=audio,
        gamepad=gamepad,
        keyboard_mouse=keyboard_mouse,
        presentation=presentation_config(args, uri),
        refresh_hz=args.refresh_hz,
        refresh_skew_ppm=args.refresh_skew_ppm,
        picture_rate=args.picture_rate,
        display=args.display,
        host=uri.host,
        port=uri.port,
        extensions=not args.native,
        password=viewer_password(args),
        allow_open_host=args.allow_open_host,
        pairing_dir=pairing_dir(args),
        duration_s=args.duration,
        reconnect=not args.no_reconnect,
        stats_json=args.stats_json,
        stats_interval_s=args.stats_interval,
        marker_log=args.marker_log,
        frame_trace=args.frame_trace,
        check_scene=args.check_scene,
        early_decode=args.early_decode,
        early_decode_bytes=args.early_decode_bytes,
        host_on_this_machine=args.host_on_this_machine,
        recovery=args.recovery,
        resends=not args.no_resend,
        video_codecs=args.codecs,
    )


def codec_list(text: str) -> frozenset[VideoCodec]:
    """``h264,av1`` -> the codecs; argparse's error names what is wrong."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in CODEC_FLAGS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"{text!r}: name codecs from {', '.join(CODEC_FLAGS)}, comma-separated")
    return frozenset(CODEC_FLAGS[n] for n in names)


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


def run_view(args: argparse.Namespace) -> int:
    setup_logging(args)
    tune_for_latency(thread_priority=args.thread_priority == "auto")
    try:
        cfg = viewer_config(args)
    except ValueError as exc:
        return refuse("view", str(exc))
    if args.headless:
        viewer, _summary = asyncio.run(_headless(cfg))
    else:
        problem = display_problem()
        if problem:
            return refuse("view", f"{problem}; use --headless to watch without a window")
        from pyrofling.client.window import watch_in_window  # pyglet: only once a display is known to work

        viewer = watch_in_window(cfg, screenshot=args.screenshot)
    return finish(viewer, "view")


async def _headless(cfg: ViewerConfig) -> tuple[Viewer, dict[str, Any]]:
    viewer = Viewer(cfg)
    install_stop(asyncio.get_running_loop(), viewer.stop)
    return viewer, await viewer.run()


def finish(viewer: Viewer, command: str) -> int:
    """After the viewer stopped: a summary line, or why it never streamed; the exit status."""
    status = 0
    if viewer.streamed:
        s = viewer.summary(live=True)
        log.info(
            "shown %d frames (%d concealed), %d packets lost after FEC, longest freeze %.0f ms, %d reconnects",
            s["frames_shown"],
            s["frames_concealed"],
            s["packets_lost_video"],
            s["max_freeze_ms"],
            s["reconnects"],
        )
        if viewer.failure:
            log.warning("stopped: %s", viewer.failure)
    else:
        status = refuse(command, viewer.failure or "stopped before the stream started", 1)
    if viewer.audio is not None and viewer.audio.close_stuck:
        exit_now(status)  # PortAudio's exit handler would wait for the stuck device forever
    leave_if_workers_linger(status, log)
    return status
