"""``pyrofling host``, ``pyrofling view`` and ``pyrofling demo``: argument parsing and wiring."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyrofling.fec.planner import PLANNERS

log = logging.getLogger("pyrofling")


def _whole_number(low: int, high: int, unit: str, *, even: bool = False) -> Callable[[str], int]:
    """An argparse type for a whole number of ``unit`` in ``low..high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of {unit}") from None
        if not low <= value <= high or (even and value % 2):
            parity = ", even" if even else ""
            raise argparse.ArgumentTypeError(f"{value} {unit} is out of range {low}..{high}{parity}")
        return value

    return parse


def _share(*, what: str, zero_ok: bool, upper: float, upper_ok: bool, example: str) -> Callable[[str], float]:
    """An argparse type for a fraction written as 0.25 or 25%, bounded by 0 and ``upper``."""

    def parse(text: str) -> float:
        t = text.strip()
        try:
            value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {what} (use {example})") from None
        above_low = value >= 0 if zero_ok else value > 0
        below_high = value <= upper if upper_ok else value < upper
        if not (above_low and below_high):
            low = "at least 0" if zero_ok else "above 0"
            high = f"at most {upper:g}" if upper_ok else f"below {upper:g}"
            raise argparse.ArgumentTypeError(f"{text!r}: the {what} must be {low} and {high}")
        return value

    return parse


_kbits = _whole_number(1, 10_000_000, "kbit/s")
_dimension = _whole_number(64, 8192, "pixels", even=True)
_fps = _whole_number(1, 240, "fps")
_multiplier = _whole_number(1, 8, "heartbeats per frame")
_ratio = _share(what="FEC ratio", zero_ok=False, upper=4.0, upper_ok=True, example="0.25 or 25%")
_loss = _share(what="loss rate", zero_ok=True, upper=1.0, upper_ok=False, example="0.02 or 2%")


def _setup_logging(args: argparse.Namespace) -> None:
    level = logging.INFO if not args.quiet else logging.WARNING
    if args.verbose:
        level = logging.DEBUG
    logging.getLogger("pyrofling").setLevel(level)


def add_video_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("video")
    g.add_argument("--width", type=_dimension, default=1280, help="frame width (default 1280)")
    g.add_argument("--height", type=_dimension, default=720, help="frame height (default 720)")
    g.add_argument("--fps", type=_fps, default=60, help="frames per second (default 60)")
    g.add_argument("--bitrate-kbits", type=_kbits, default=10_000, help="video bitrate, kbit/s (default 10000)")
    g.add_argument(
        "--encoder",
        default="libx264",
        help="libx264 (default), libx265, h264_nvenc or hevc_nvenc where an NVIDIA GPU is present",
    )
    g.add_argument("--preset", default="ultrafast", help="x264/x265 preset (default ultrafast)")
    g.add_argument("--ten-bit", action="store_true", help="encode 10-bit 4:2:0")
    g.add_argument("--encoder-threads", type=int, default=2, help="encoder threads (default 2)")
    g.add_argument("--refresh-s", type=float, default=1.0, help="intra-refresh period, seconds (default 1; heals loss)")


def add_stream_size_options(p: argparse.ArgumentParser) -> None:
    """Picture size, rate and bitrate for the commands that start a host for you (demo, benches)."""
    p.add_argument("--width", type=_dimension, default=1280, help="frame width (default 1280)")
    p.add_argument("--height", type=_dimension, default=720, help="frame height (default 720)")
    p.add_argument("--fps", type=_fps, default=60, help="frames per second (default 60)")
    p.add_argument("--bitrate-kbits", type=_kbits, default=10_000, help="video bitrate, kbit/s (default 10000)")


def add_host_options(p: argparse.ArgumentParser) -> None:
    from pyrofling.server.host import DEFAULT_PORT

    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP and UDP port (default {DEFAULT_PORT})")
    p.add_argument(
        "--bind",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1, this machine only; 0.0.0.0 or :: to open it up)",
    )
    p.add_argument(
        "--source",
        default="scene",
        help="scene (built-in test scene, default); capture (games presenting through the capture socket, see "
        "pyrofling.capture and pyrofling example-game); x11[:DISPLAY] (grab an X11 screen, e.g. x11::0); "
        "file:PATH (raw frames, looped) or rawvideo (raw frames on stdin)",
    )
    g = p.add_argument_group("game capture (--source capture)")
    g.add_argument(
        "--capture-socket",
        default=None,
        metavar="PATH",
        help="the Unix socket games connect to (default $XDG_RUNTIME_DIR/pyrofling-capture, or "
        "$PYROFLING_CAPTURE_SOCKET; games read the same variable)",
    )
    g.add_argument(
        "--immediate-encode",
        action="store_true",
        help="encode a game's frame the moment it is presented instead of on the next heartbeat "
        "(up to a frame less latency; heartbeats still pace the game)",
    )
    p.add_argument(
        "--raw-format", choices=("yuv420p", "rgb24"), default="yuv420p", help="pixel format of raw input frames"
    )
    add_video_options(p)
    g = p.add_argument_group("network")
    g.add_argument("--fec", type=_ratio, default=0.25, metavar="RATIO", help="repair overhead (default 0.25 = 25%%)")
    g.add_argument("--no-fec", action="store_true", help="send no repair blocks")
    g.add_argument(
        "--fec-planner", choices=PLANNERS, default="tuned", help="how repair blocks are chosen (default tuned)"
    )
    g.add_argument(
        "--max-rate-mbits",
        type=float,
        default=200.0,
        help="pace each viewer's datagrams to this rate, Mbit/s (default 200; 0 = bursts, like the reference)",
    )
    from pyrofling.core.frame_clock import CONTROLLERS, POLICIES

    g = p.add_argument_group("frame clock (steered by phase-locked viewers)")
    g.add_argument(
        "--phase-controller",
        choices=CONTROLLERS,
        default="pi",
        help="pi: pyrofling's (locks faster, jitters less); reference: PyroFling's sign-only nudge (default pi)",
    )
    g.add_argument(
        "--phase-policy",
        choices=POLICIES,
        default="leader",
        help="with several phase-locked viewers: leader follows the first one (the others cannot all be locked "
        "when their displays differ); sum adds their offsets like the reference (default leader)",
    )
    g.add_argument(
        "--client-rate-multiplier",
        type=_multiplier,
        default=1,
        metavar="N",
        help="run the heartbeat at fps x N and encode every N-th beat (a game at 120 Hz, a stream at 60; default 1)",
    )
    add_host_audio_options(p)


def add_host_audio_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "audio",
        "Audio is captured in short chunks stamped with the video clock and sent as soon as each is captured.",
    )
    g.add_argument(
        "--audio",
        choices=("tone", "device", "game", "none"),
        default=None,
        help="tone: a 440 Hz test tone with a click every second, for timing (default with the test scene); "
        "device: a capture device (see --audio-device); game: what the streamed game sends through the capture "
        "socket (--source capture); none: no audio (default with other sources)",
    )
    g.add_argument(
        "--audio-device",
        default=None,
        metavar="NAME",
        help="capture from this device (name or index from 'python -m sounddevice', e.g. a PipeWire/Pulse "
        "monitor or a JACK port); implies --audio device",
    )
    g.add_argument("--no-audio", action="store_true", help="send no audio")
    g.add_argument(
        "--audio-rate", type=_whole_number(8000, 192_000, "Hz"), default=48_000, help="sample rate (default 48000)"
    )
    g.add_argument(
        "--audio-codec",
        choices=("raw", "opus"),
        default="raw",
        help="raw: S16LE PCM as PyroFling sends it (native viewers play it); opus: low-delay Opus, about a tenth "
        "of the bandwidth and 2.5 ms more delay (default raw)",
    )
    g.add_argument(
        "--audio-chunk-ms",
        type=float,
        default=5.0,
        help="chunk (Opus frame) length in ms: shorter is lower latency, more packets (default 5: one datagram)",
    )
    g.add_argument("--opus-kbits", type=_whole_number(6, 510, "kbit/s"), default=128, help="Opus bitrate (default 128)")
    g.add_argument(
        "--audio-skew-ppm",
        type=_seconds(-5000.0, 5000.0, unit="ppm"),
        default=0.0,
        metavar="PPM",
        help="run the test tone's clock this many ppm fast (negative: slow), to exercise the viewer's drift control",
    )


def audio_config(args: argparse.Namespace) -> Any:
    from pyrofling.server.audio import AudioConfig

    source = args.audio
    if args.no_audio:
        source = "none"
    elif source is None:
        source = "device" if args.audio_device else ("tone" if args.source == "scene" else "none")
    cfg = AudioConfig(
        source=source,
        device=args.audio_device,
        rate=args.audio_rate,
        codec=args.audio_codec,
        chunk_ms=args.audio_chunk_ms,
        opus_kbits=args.opus_kbits,
        skew_ppm=args.audio_skew_ppm,
    )
    cfg.check()
    if source == "game" and args.source != "capture":
        raise ValueError("--audio game takes audio from games: it needs --source capture")
    return cfg


def host_config(args: argparse.Namespace, **overrides: Any) -> Any:
    from pyrofling.server.encoder import EncoderConfig
    from pyrofling.server.host import HostConfig
    from pyrofling.server.sources import check_source

    check_source(args.source)
    encoder = EncoderConfig(
        encoder=args.encoder,
        width=args.width,
        height=args.height,
        fps=args.fps,
        bitrate_kbits=args.bitrate_kbits,
        preset=args.preset,
        ten_bit=args.ten_bit,
        threads=args.encoder_threads,
        refresh_s=args.refresh_s,
    )
    values: dict[str, Any] = dict(
        bind=args.bind,
        port=args.port,
        encoder=encoder,
        source=args.source,
        raw_format=args.raw_format,
        fec="none" if args.no_fec else args.fec_planner,
        fec_ratio=args.fec,
        max_rate_mbits=args.max_rate_mbits,
        phase_controller=args.phase_controller,
        phase_policy=args.phase_policy,
        client_rate_multiplier=args.client_rate_multiplier,
        audio=audio_config(args),
        duration_s=getattr(args, "duration", None),
        stats_json=getattr(args, "stats_json", None),
        stats_interval_s=getattr(args, "stats_interval", 0.0),
        virtual_pad=getattr(args, "virtual_pad", "uinput"),
        gamepad_trace=getattr(args, "gamepad_trace", None),
        capture_socket=getattr(args, "capture_socket", None),
        immediate_encode=getattr(args, "immediate_encode", False),
        outputs=output_config(args),
        password=host_password(args),
        encrypt=not getattr(args, "no_encrypt", False),
    )
    if values["immediate_encode"] and values["source"] != "capture":
        raise ValueError("--immediate-encode applies to games (--source capture)")
    values.update(overrides)
    return HostConfig(**values)


PASSWORD_ENV = "PYROFLING_PASSWORD"


def _given_password(args: argparse.Namespace) -> str | None:
    """--password, else $PYROFLING_PASSWORD (which keeps the secret out of the process list)."""
    return getattr(args, "password", None) or os.environ.get(PASSWORD_ENV) or None


def add_host_security_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "security",
        "Without a secret anyone who reaches the port can watch and take the pad, as with PyroFling: fine on a "
        "trusted LAN. With one, viewers must prove they know it (it never crosses the network) and their "
        "datagrams are sealed with AES-GCM; native PyroFling viewers cannot connect then.",
    )
    g.add_argument(
        "--password",
        default=None,
        metavar="SECRET",
        help=f"require this secret from viewers (or set ${PASSWORD_ENV}, which keeps it out of the process list)",
    )
    g.add_argument(
        "--pairing-code",
        action="store_true",
        help="require a fresh random code, printed once at start (not logged): give it to your friends",
    )
    g.add_argument(
        "--no-encrypt",
        action="store_true",
        help="authenticate viewers but send media in the clear (saves a little CPU; anyone on the path can watch)",
    )


def host_password(args: argparse.Namespace) -> str | None:
    """The secret the host requires, from --password, $PYROFLING_PASSWORD or a new pairing code."""
    from pyrofling.core.secure import pairing_code

    password = _given_password(args)
    if getattr(args, "pairing_code", False):
        if password:
            raise ValueError(f"--pairing-code makes up a secret: drop --password (and ${PASSWORD_ENV})")
        password = pairing_code()
        print(
            f"pairing code: {password}\n  viewers join with: pyrofling view pyro://HOST:PORT --password {password}",
            file=sys.stderr,
            flush=True,
        )
    if getattr(args, "no_encrypt", False) and not password:
        raise ValueError("--no-encrypt applies with a secret (--password or --pairing-code)")
    if password is not None and len(password) < 6:
        raise ValueError("the password is too short: use at least 6 characters, or --pairing-code")
    return password


def add_output_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "recording and broadcasting",
        "Both take the packets already encoded for the viewers (no second encode) and never delay them.",
    )
    g.add_argument(
        "--record",
        type=Path,
        default=None,
        metavar="FILE.mkv",
        help="also record the stream, with its audio, to this Matroska file; it is finished when the host "
        "stops (Ctrl-C, SIGTERM), and a crash loses at most the last second",
    )
    g.add_argument(
        "--broadcast",
        default=None,
        metavar="URL",
        help="also send the stream to an RTMP ingest (rtmp://HOST/APP/KEY or rtmps://…: nginx-rtmp, a CDN, "
        "Twitch, YouTube…) as H.264 + AAC; reconnects on its own if the server goes away",
    )
    g.add_argument(
        "--broadcast-bitrate-kbits",
        type=_whole_number(100, 200_000, "kbit/s"),
        default=None,
        metavar="N",
        help="give the broadcast its own H.264 encoder at this bitrate, with a normal GOP (costs a second "
        "encode; default: send the viewers' packets as they are)",
    )
    g.add_argument(
        "--broadcast-keyint",
        type=_seconds(0.1, 20.0),
        default=2.0,
        metavar="S",
        help="key frame interval of the broadcast's own encoder, seconds (default 2, what CDNs ask for)",
    )
    g.add_argument(
        "--broadcast-audio-kbits",
        type=_whole_number(32, 512, "kbit/s"),
        default=160,
        metavar="N",
        help="AAC bitrate of the broadcast (default 160)",
    )


def output_config(args: argparse.Namespace) -> Any:
    from pyrofling.server.outputs import OutputConfig

    cfg = OutputConfig(
        record=getattr(args, "record", None),
        broadcast=getattr(args, "broadcast", None),
        broadcast_bitrate_kbits=getattr(args, "broadcast_bitrate_kbits", None),
        broadcast_keyint_s=getattr(args, "broadcast_keyint", 2.0),
        broadcast_audio_kbits=getattr(args, "broadcast_audio_kbits", 160),
    )
    cfg.check()
    return cfg


def _install_stop(loop: asyncio.AbstractEventLoop, stop: Any) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop)


# --------------------------------------------------------------------------------------------
# host
# --------------------------------------------------------------------------------------------


def add_host(sub: Any) -> None:
    p = sub.add_parser(
        "host",
        help="host a stream (the built-in test scene by default)",
        description=(
            "Host a low-latency stream on one port (TCP control + UDP media), wire-compatible with PyroFling. "
            "One encode is fanned out to every viewer, each with its own FEC and pacing."
        ),
        epilog="Example: pyrofling host --port 9876 --width 1280 --height 720 --fps 60 --bitrate-kbits 10000",
    )
    add_host_options(p)
    from pyrofling.cli_gamepad import add_host_gamepad_options  # it imports helpers from here

    add_host_gamepad_options(p)
    add_host_security_options(p)
    add_output_options(p)
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds (default: Ctrl-C)")
    p.add_argument("--stats-json", type=Path, default=None, help="write host statistics here on exit")
    p.add_argument(
        "--stats-interval", type=float, default=0.0, help="also rewrite --stats-json every this many seconds"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    p.set_defaults(func=run_host)


def run_host(args: argparse.Namespace) -> int:
    from pyrofling.server.host import Host

    _setup_logging(args)
    try:
        cfg = host_config(args)
    except ValueError as exc:
        print(f"pyrofling host: {exc}", file=sys.stderr)
        return 2

    async def main() -> int:
        host = Host(cfg)
        _install_stop(asyncio.get_running_loop(), host.stop)
        try:
            await host.run()
        except (OSError, ValueError) as exc:
            print(f"pyrofling host: {exc}", file=sys.stderr)
            return 1
        return 0

    return asyncio.run(main())


# --------------------------------------------------------------------------------------------
# view
# --------------------------------------------------------------------------------------------


def add_view(sub: Any) -> None:
    p = sub.add_parser(
        "view",
        help="watch a stream from a pyrofling or PyroFling host",
        description=(
            "Connect to a host, reassemble and decode its stream and show it in a window (or count frames with "
            "--headless). Keys in the window: V toggles the statistics overlay, F toggles full screen, Esc quits; "
            "the keyboard pad's keys are listed under 'gamepad'."
        ),
        epilog="Example: pyrofling view pyro://127.0.0.1:9876   (IPv6: pyro://[::1]:9876)",
    )
    p.add_argument("uri", help="pyro://HOST:PORT[?phase_locked=S&deadline=S] or HOST:PORT")
    p.add_argument("--headless", action="store_true", help="decode and count frames, no window")
    add_presentation_options(p)
    add_view_audio_options(p)
    from pyrofling.cli_gamepad import add_view_gamepad_options  # it imports helpers from here

    add_view_gamepad_options(p)
    add_viewer_security_options(p)
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--no-reconnect", action="store_true", help="exit when the host goes away instead of reconnecting")
    p.add_argument(
        "--native", action="store_true", help="do not ask for pyrofling extensions (behave like a native viewer)"
    )
    p.add_argument("--stats-json", type=Path, default=None, help="write counters and latency samples here on exit")
    p.add_argument(
        "--stats-interval", type=float, default=0.0, help="also rewrite --stats-json every this many seconds"
    )
    p.add_argument("--screenshot", type=Path, default=None, help="window mode: save the window to this PNG on exit")
    p.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    p.set_defaults(func=run_view)


def add_presentation_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "presentation",
        "Phase lock steers the host's frame clock so pictures finish decoding just as this display refreshes: "
        "smooth pacing at low latency. Recommended: --phase-locked 0 --deadline 0.008 "
        "(or pyro://HOST:PORT?phase_locked=0.0&deadline=0.008). These flags override the URI.",
    )
    g.add_argument(
        "--phase-locked",
        type=_seconds(-0.1, 0.1),
        default=None,
        metavar="OFFSET",
        help="lock to this display; pictures should be done OFFSET seconds after each refresh (default: off)",
    )
    g.add_argument(
        "--deadline",
        type=_seconds(0.0, 0.1),
        default=None,
        metavar="SECONDS",
        help="wait at most this long after a refresh for the next picture, else repeat the last (default 0: off)",
    )
    g.add_argument(
        "--refresh-hz",
        type=_seconds(1.0, 1000.0, unit="Hz"),
        default=None,
        help="run a software display clock at this rate, e.g. 59.94 (default: the display's, else the stream's)",
    )
    g.add_argument(
        "--refresh-skew-ppm",
        type=_seconds(-50_000.0, 50_000.0, unit="ppm"),
        default=0.0,
        metavar="PPM",
        help="run the display clock this many ppm slow (negative: fast), to see the lock at work",
    )


def add_view_audio_options(p: argparse.ArgumentParser) -> None:
    from pyrofling.client.audio import AUDIO_BACKENDS
    from pyrofling.core.audio_control import RATE_CONTROLLERS

    g = p.add_argument_group(
        "audio",
        "Audio is held at a small buffer target by playing it a fraction of a percent faster or slower "
        "(inaudible), so the host's and this machine's clocks never drift apart and nothing pops.",
    )
    g.add_argument("--no-audio", action="store_true", help="do not ask for audio")
    g.add_argument(
        "--audio-target-ms",
        type=_seconds(5.0, 500.0, unit="ms"),
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


def audio_player_config(args: argparse.Namespace) -> Any:
    from pyrofling.client.audio import AudioPlayerConfig

    if args.no_audio:
        return None
    return AudioPlayerConfig(
        target_s=args.audio_target_ms / 1000,
        controller=args.audio_controller,
        backend=args.audio_backend,
        device=args.audio_device,
    )


def _seconds(low: float, high: float, *, unit: str = "seconds") -> Callable[[str], float]:
    """An argparse type for a number of ``unit`` in ``low..high``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of {unit}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value:g} {unit} is out of range {low:g}..{high:g}")
        return value

    return parse


def presentation_config(args: argparse.Namespace, uri: Any) -> Any:
    from pyrofling.core.presentation import PresentationConfig

    offset = args.phase_locked if args.phase_locked is not None else uri.phase_locked
    deadline = args.deadline if args.deadline is not None else uri.deadline_s
    if offset is not None and not -0.1 <= offset <= 0.1:
        raise ValueError(f"phase_locked={offset:g} is out of range: an offset in seconds, -0.1..0.1 (e.g. 0.0)")
    if deadline is not None and not 0.0 <= deadline <= 0.1:
        raise ValueError(f"deadline={deadline:g} is out of range: seconds, 0..0.1 (e.g. 0.008)")
    return PresentationConfig(
        phase_locked=offset is not None, offset_s=offset or 0.0, deadline_s=max(0.0, deadline or 0.0)
    )


def add_viewer_security_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("security")
    g.add_argument(
        "--password",
        default=None,
        metavar="SECRET",
        help=f"the host's password or pairing code, if it asks for one (or set ${PASSWORD_ENV})",
    )
    g.add_argument(
        "--require-auth",
        action="store_true",
        help="connect only to a host that proves it knows the password (refuses an open or impostor host)",
    )


def viewer_password(args: argparse.Namespace) -> str | None:
    password = _given_password(args)
    if getattr(args, "require_auth", False) and not password:
        raise ValueError("--require-auth needs the password (--password or $PYROFLING_PASSWORD)")
    if password is not None and getattr(args, "native", False):
        raise ValueError("--native viewers cannot authenticate: drop --native to use a password")
    return password


def viewer_config(args: argparse.Namespace) -> Any:
    from pyrofling.cli_gamepad import gamepad_config
    from pyrofling.client.uri import parse_uri
    from pyrofling.client.viewer import ViewerConfig
    from pyrofling.wire import KickFlags

    uri = parse_uri(args.uri)
    audio = audio_player_config(args)
    gamepad = gamepad_config(args)
    flags = KickFlags.VIDEO
    if audio is not None:
        flags |= KickFlags.AUDIO
    if gamepad is not None:
        flags |= KickFlags.GAMEPAD
    return ViewerConfig(
        flags=flags,
        audio=audio,
        gamepad=gamepad,
        presentation=presentation_config(args, uri),
        refresh_hz=args.refresh_hz,
        refresh_skew_ppm=args.refresh_skew_ppm,
        host=uri.host,
        port=uri.port,
        extensions=not args.native,
        password=viewer_password(args),
        require_auth=getattr(args, "require_auth", False),
        duration_s=args.duration,
        reconnect=not args.no_reconnect,
        stats_json=args.stats_json,
        stats_interval_s=args.stats_interval,
        marker_log=getattr(args, "marker_log", None),
    )


def run_view(args: argparse.Namespace) -> int:
    _setup_logging(args)
    try:
        cfg = viewer_config(args)
    except ValueError as exc:
        print(f"pyrofling view: {exc}", file=sys.stderr)
        return 2
    if args.headless:
        return _view_headless(cfg)
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        print(
            "pyrofling view: no display (DISPLAY is not set); use --headless, or run under a desktop", file=sys.stderr
        )
        return 2
    return view_in_window(cfg, screenshot=args.screenshot)


def _view_headless(cfg: Any) -> int:
    from pyrofling.client.viewer import Viewer

    async def main() -> int:
        viewer = Viewer(cfg)
        _install_stop(asyncio.get_running_loop(), viewer.stop)
        stats = await viewer.run()
        log.info(
            "shown %d frames, %d lost packets, %d reconnects",
            stats.frames_shown,
            stats.packets_lost_video,
            stats.reconnects,
        )
        rc = 0 if stats.sessions_streaming else 1
        if viewer.audio is not None and viewer.audio.close_stuck:
            _exit_now(rc)  # PortAudio's exit handler would wait for the stuck device forever
        return rc

    return asyncio.run(main())


def _exit_now(rc: int) -> None:
    """Leave without exit handlers (the statistics are already written)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


def view_in_window(cfg: Any, *, screenshot: Path | None = None, title: str = "pyrofling") -> int:
    """pyglet and the presenter own the main thread; the viewer's event loop runs in a second one."""
    from pyrofling.client.viewer import Viewer
    from pyrofling.client.window import ViewerWindow

    window = ViewerWindow(title=title)
    viewer = Viewer(cfg, display=window, run_presenter=False)
    window.stats_source = viewer
    window.gamepad = viewer.gamepad
    stop = viewer.presenter_stop
    result: dict[str, int] = {}

    def network() -> None:
        try:
            stats = asyncio.run(viewer.run())
            result["rc"] = 0 if stats.sessions_streaming else 1
        finally:
            stop.set()

    def close_requested() -> None:
        viewer.stop()
        stop.set()

    thread = threading.Thread(target=network, name="pyrofling-network", daemon=True)
    thread.start()
    window.on_close_requested = close_requested
    with contextlib.suppress(KeyboardInterrupt):
        viewer.presenter.run(stop)
    viewer.stop()
    window.close(screenshot=screenshot)
    thread.join(10)
    rc = result.get("rc", 1)
    if viewer.audio is not None and viewer.audio.close_stuck:
        _exit_now(rc)
    return rc


# --------------------------------------------------------------------------------------------
# demo
# --------------------------------------------------------------------------------------------


def add_demo(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="a host and a viewer on this machine, optionally through a lossy network",
        description=(
            "Start a host with the test scene and a viewer on loopback (a window if there is a display, headless "
            "otherwise), optionally through the loss simulator, and print live statistics."
        ),
        epilog="Example: pyrofling demo --loss 2%% --duration 20",
    )
    p.add_argument("--loss", type=_loss, default=0.0, help="i.i.d. datagram loss between them (e.g. 2%%)")
    p.add_argument("--ge", action="store_true", help="bursty (Gilbert-Elliott) loss instead of i.i.d.")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds (default: Ctrl-C)")
    p.add_argument("--headless", action="store_true", help="no window even if a display exists")
    p.add_argument(
        "--game",
        action="store_true",
        help="stream the example game through the capture socket instead of the test scene: your key presses "
        "in the viewer window (WASD/arrows, Z) steer its ball (headless: a synthetic pad does)",
    )
    add_stream_size_options(p)
    p.add_argument("--json", action="store_true", help="print the final statistics as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    p.set_defaults(func=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    from pyrofling.bench.stream import StreamScenario, format_live, format_table, run_scenario, summarize

    args.verbose = 0
    args.quiet = True  # the live line is the output
    _setup_logging(args)
    window = not args.headless and bool(os.environ.get("DISPLAY"))
    scenario = StreamScenario(
        width=args.width,
        height=args.height,
        fps=args.fps,
        bitrate_kbits=args.bitrate_kbits,
        duration_s=args.duration,
        loss=args.loss,
        ge=args.ge,
        window=window,
        game=args.game,
    )
    print(
        f"pyrofling demo: host {'example game ' if args.game else ''}"
        f"{args.width}x{args.height}@{args.fps} {args.bitrate_kbits} kbit/s -> "
        f"{'window' if window else 'headless viewer'}"
        + (f" through netsim ({'GE bursts' if args.ge else f'{args.loss:.1%} loss'})" if args.loss or args.ge else "")
        + ("" if args.duration else "; Ctrl-C to stop"),
        file=sys.stderr,
    )
    result = run_scenario(scenario, live=None if args.json else format_live)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(format_table([summarize(result)]))
    return 0 if result["viewers"][0].get("frames_shown") else 1


# --------------------------------------------------------------------------------------------
# bench stream
# --------------------------------------------------------------------------------------------


def add_bench_stream(sub: Any) -> None:
    p = sub.add_parser(
        "stream",
        help="host + headless viewer(s), optionally through netsim: frames, loss, CPU, latency",
        description=(
            "Run a real host (test scene) and real headless viewers as separate processes, optionally through "
            "the loss simulator, and report frames sent/shown, loss before and after FEC, key frames forced, "
            "bitrate, CPU per process and capture-to-decoded latency read from the decoded pixels."
        ),
        epilog=(
            "Examples: pyrofling bench stream --duration 60 | pyrofling bench stream --loss 2%% | "
            "pyrofling bench stream --ge | pyrofling bench stream --viewers 1,4 | "
            "pyrofling bench stream --width 1920 --height 1080 --bitrate-kbits 20000"
        ),
    )
    p.add_argument("--duration", type=float, default=10.0, help="seconds per run (default 10)")
    add_stream_size_options(p)
    p.add_argument("--encoder", default="libx264")
    p.add_argument("--preset", default="ultrafast")
    p.add_argument("--loss", type=_loss, default=0.0, help="i.i.d. datagram loss host->viewer (e.g. 2%%)")
    p.add_argument("--ge", action="store_true", help="Gilbert-Elliott burst loss (about 5%% in bursts)")
    p.add_argument("--viewers", default="1", help="viewers per run; a list (1,4) runs each and reports the cost")
    p.add_argument("--fec-planner", choices=PLANNERS, default="tuned")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true", help="print rows as JSON (with the raw statistics)")
    p.set_defaults(func=run_bench_stream)


def run_bench_stream(args: argparse.Namespace) -> int:
    from pyrofling.bench.stream import StreamScenario, add_extra_viewer_cost, format_table, run_scenario, summarize

    try:
        counts = [int(x) for x in args.viewers.split(",")]
    except ValueError:
        print(f"pyrofling bench stream: --viewers {args.viewers!r}: give numbers like 1 or 1,4", file=sys.stderr)
        return 2
    if any(c < 1 or c > 16 for c in counts):
        print("pyrofling bench stream: --viewers must be between 1 and 16", file=sys.stderr)
        return 2
    rows = []
    raws = []
    for n in counts:
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
        print(f"running {sc.label()} for {args.duration:g} s ...", file=sys.stderr, flush=True)
        raw = run_scenario(sc)
        row = summarize(raw)
        row["_scenario"] = sc
        rows.append(row)
        raws.append(raw)
    add_extra_viewer_cost(rows)
    for row in rows:
        del row["_scenario"]
    if args.json:
        print(json.dumps({"rows": rows, "raw": raws}, indent=1))
    else:
        print(format_table(rows))
    return 0


# --------------------------------------------------------------------------------------------
# bench latency / bench phase
# --------------------------------------------------------------------------------------------


def add_bench_latency(sub: Any) -> None:
    from pyrofling.bench.latency import MODES

    p = sub.add_parser(
        "latency",
        help="glass-to-glass latency and frame pacing: phase-locked (both controllers) vs free-running",
        description=(
            "Runs a real host (test scene) and a headless viewer per mode, back to back: free-running, phase-locked "
            "with the reference controller, phase-locked with pyrofling's. The viewer's display clock runs at "
            "--refresh-hz (59.94 by default, against the host's 60). Reports presented/repeated/dropped frames, "
            "lock time, phase error and glass-to-glass latency (capture stamp in the picture -> on screen)."
        ),
        epilog="Example: pyrofling bench latency --duration 60 --refresh-hz 59.94 --plot latency.png",
    )
    p.add_argument("--duration", type=_seconds(1.0, 3600.0), default=20.0, help="seconds per mode (default 20)")
    add_stream_size_options(p)
    p.add_argument("--refresh-hz", type=_seconds(1.0, 1000.0, unit="Hz"), default=59.94)
    p.add_argument(
        "--skew-ppm", type=_seconds(-50_000.0, 50_000.0, unit="ppm"), default=0.0, help="viewer clock skew on top"
    )
    p.add_argument("--offset", type=_seconds(-0.1, 0.1), default=0.0, help="phase_locked offset, s (default 0)")
    p.add_argument("--deadline", type=_seconds(0.0, 0.1), default=0.008, help="deadline, s (default 0.008)")
    p.add_argument("--loss", type=_loss, default=0.0, help="i.i.d. loss through netsim (e.g. 1%%)")
    p.add_argument("--jitter-ms", type=_seconds(0.0, 100.0, unit="ms"), default=0.0, help="netsim jitter 0..N ms")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma list of {', '.join(MODES)} (default all)")
    p.add_argument("--json", action="store_true", help="print the result as JSON (with traces)")
    p.add_argument("--plot", metavar="FILE.png", help="phase error over time and latency CDF (needs matplotlib)")
    p.set_defaults(func=run_bench_latency)


def run_bench_latency(args: argparse.Namespace) -> int:
    from pyrofling.bench.latency import MODES, LatencyBenchConfig, format_table, plot, run

    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        print(f"pyrofling bench latency: --modes takes {', '.join(MODES)}; got {args.modes!r}", file=sys.stderr)
        return 2
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
        modes=modes,
    )
    result = run(cfg, progress=lambda line: print(line, file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps(result))
    else:
        print(format_table(result))
    return _write_plot("bench latency", args.plot, lambda: plot(result, args.plot)) if args.plot else 0


def add_bench_phase(sub: Any) -> None:
    p = sub.add_parser(
        "phase",
        help="the phase loop simulated with a fake clock: pi vs reference controller vs free-running",
        description=(
            "Simulates host frame clock, pipeline jitter and the viewer's presentation loop with the real pure "
            "objects and a fake clock, from several starting phases per scenario (500 ppm skew, 2 ms jitter, "
            "59.94 Hz, +-3 ms load, a 100 ms stall). Deterministic: the same seed gives the same numbers."
        ),
        epilog="Example: pyrofling bench phase --duration 10 --phases 8 --plot phase.png",
    )
    p.add_argument("--duration", type=_seconds(2.0, 600.0), default=10.0, help="simulated seconds per run")
    p.add_argument("--phases", type=_whole_number(1, 64, "phases"), default=8, help="starting phases per scenario")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true")
    p.add_argument("--plot", metavar="FILE.png", help="the headline trace per controller (needs matplotlib)")
    p.set_defaults(func=run_bench_phase)


def run_bench_phase(args: argparse.Namespace) -> int:
    from pyrofling.bench.phase import format_table, plot, run, standard_scenarios

    result = run(standard_scenarios(args.duration, args.seed), phases=args.phases)
    print(json.dumps(result) if args.json else format_table(result))
    return _write_plot("bench phase", args.plot, lambda: plot(args.duration, args.seed, args.plot)) if args.plot else 0


def add_bench_audio(sub: Any) -> None:
    from pyrofling.core.audio_control import RATE_CONTROLLERS

    p = sub.add_parser(
        "audio",
        help="audio buffer control, underruns, rate wobble and end-to-end latency through a real audio clock",
        description=(
            "Runs a real host (test scene + click tone with a skewed clock), netsim where the run has jitter or "
            "loss, and a headless viewer playing into a JACK dummy server the bench starts. Default runs: "
            "+500 and -500 ppm skew with 0..5 ms jitter, 2%% loss, and plain loopback, per controller. Reports "
            "buffered audio, underruns, playback speed (mean/max |speed-1|, wobble), click-timed end-to-end latency, "
            "A/V offset and concealment per lost packet."
        ),
        epilog="Example: pyrofling bench audio --duration 60 --controllers drift,reference --plot audio.png",
    )
    p.add_argument("--duration", type=_seconds(5.0, 3600.0), default=60.0, help="seconds per run (default 60)")
    p.add_argument(
        "--controllers",
        default="drift",
        help=f"comma list of {', '.join(RATE_CONTROLLERS)} (default drift; add reference to compare)",
    )
    p.add_argument(
        "--cases",
        default="fast,slow,loss,loopback",
        help="comma list: fast/slow (host clock +/-500 ppm, with jitter), loss (2%%), loopback (default all)",
    )
    p.add_argument("--jitter-ms", type=_seconds(0.0, 50.0, unit="ms"), default=5.0, help="jitter of the skew runs")
    p.add_argument("--target-ms", type=_seconds(5.0, 500.0, unit="ms"), default=30.0, help="viewer buffer target")
    p.add_argument("--codec", choices=("raw", "opus"), default="raw", help="audio codec (default raw)")
    p.add_argument(
        "--no-jack",
        action="store_true",
        help="play into this machine's default output instead of a JACK dummy server started for the bench",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON (with traces)")
    p.add_argument("--plot", metavar="FILE.png", help="buffer, speed and latency CDF per run (needs matplotlib)")
    p.set_defaults(func=run_bench_audio)


def run_bench_audio(args: argparse.Namespace) -> int:
    from pyrofling.bench.audio import AudioBenchConfig, format_table, plot, run, standard_rows
    from pyrofling.bench.jack import JackUnavailable
    from pyrofling.core.audio_control import RATE_CONTROLLERS

    controllers = tuple(c.strip() for c in args.controllers.split(",") if c.strip())
    if not controllers or any(c not in RATE_CONTROLLERS for c in controllers):
        choices = ", ".join(RATE_CONTROLLERS)
        print(f"pyrofling bench audio: --controllers takes {choices}; got {args.controllers!r}", file=sys.stderr)
        return 2
    try:
        rows = standard_rows(
            controllers, jitter_ms=args.jitter_ms, cases=tuple(c.strip() for c in args.cases.split(",") if c.strip())
        )
    except ValueError as exc:
        print(f"pyrofling bench audio: --cases: {exc}", file=sys.stderr)
        return 2
    cfg = AudioBenchConfig(
        duration_s=args.duration,
        target_ms=args.target_ms,
        codec=args.codec,
        rows=rows,
        start_jack=not args.no_jack,
    )
    try:
        result = run(cfg, progress=lambda line: print(line, file=sys.stderr, flush=True))
    except JackUnavailable as exc:
        print(f"pyrofling bench audio: {exc}; or pass --no-jack to use this machine's sound", file=sys.stderr)
        return 1
    print(json.dumps(result) if args.json else format_table(result))
    return _write_plot("bench audio", args.plot, lambda: plot(result, args.plot)) if args.plot else 0


def _write_plot(command: str, path: str, draw: Callable[[], None]) -> int:
    """Run a --plot drawing; matplotlib is an optional extra, so say how to get it."""
    try:
        draw()
    except ImportError:
        print(f"pyrofling {command}: --plot needs matplotlib: pip install 'pyrofling[plot]'", file=sys.stderr)
        return 1
    print(f"plot written to {path}", file=sys.stderr)
    return 0
