"""``pyrofling host``: its flags, the HostConfig they make, and running it."""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from pyrofling.capture.paths import default_layer_socket
from pyrofling.cli.gamepad import add_host_gamepad_options
from pyrofling.cli.keyboard_mouse import add_host_input_options
from pyrofling.cli.options import (
    CODEC_FLAGS,
    PASSWORD_ENV,
    add_logging_options,
    add_pairing_dir_option,
    add_stream_size_options,
    add_thread_priority_option,
    fraction,
    given_password,
    install_stop,
    number,
    output_file,
    pairing_dir,
    port_number,
    refuse,
    run_time,
    secret_file,
    setup_logging,
    whole_number,
)
from pyrofling.core.host.codec_choice import DEFAULT_PREFERENCE
from pyrofling.core.host.congestion import RATE_POLICIES
from pyrofling.core.host.frame_clock import CONTROLLERS, POLICIES
from pyrofling.fec.planner import PLANNERS
from pyrofling.files import write_private
from pyrofling.runtime import tune_for_latency
from pyrofling.server.audio import AUDIO_SOURCES, AudioConfig
from pyrofling.server.config import DEFAULT_GAME_ENCODE, DEFAULT_PORT, ENCODE_MODES, HostConfig
from pyrofling.server.encoder import X26X_PRESETS, EncoderConfig, available_encoders, encoder_for
from pyrofling.server.host import Host
from pyrofling.server.muxing import OutputConfig
from pyrofling.server.sources import check_source
from pyrofling.wire import VideoCodec

log = logging.getLogger(__name__)

#: The sources whose pictures come on their own (a game's present, a desktop's frame): --encode-mode applies.
PRESENTING_SOURCES = ("capture", "headless", "wayland")
#: The Janus streaming plugin's admin_key for --spectators, where it has one (kept out of the process list).
SPECTATORS_ADMIN_KEY_ENV = "PYROFLING_JANUS_ADMIN_KEY"


def add_host(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "host",
        help="host a stream (the built-in test scene by default)",
        description=(
            "Host a low-latency stream on one port (TCP control + UDP media), wire-compatible with PyroFling. "
            "One encode is fanned out to every viewer, each with its own FEC and pacing."
        ),
        epilog="Example: pyrofling host --port 9876 --width 1280 --height 720 --fps 60 --bitrate-kbits 10000",
    )
    p.add_argument("--port", type=port_number, default=DEFAULT_PORT, help=f"TCP and UDP port (default {DEFAULT_PORT})")
    p.add_argument(
        "--bind",
        default="localhost",
        help="address to listen on (default localhost: 127.0.0.1 and ::1, this machine only; 0.0.0.0 or :: to "
        "open it to the network)",
    )
    p.add_argument(
        "--source",
        default="scene",
        help="scene (built-in test scene, default); capture (games presenting through the capture socket, see "
        "pyrofling.capture and pyrofling example-game); x11[:DISPLAY] (grab an X11 screen, e.g. x11::0); "
        "headless (a desktop of the host's own, with no screen, at --width x --height: give --run); "
        "wayland (the GNOME or KDE desktop you sit at, through its screen-sharing portal: it asks which monitor "
        "once, and remembers); file:PATH (raw frames, looped) or rawvideo (raw frames on stdin)",
    )
    p.add_argument(
        "--cursor",
        choices=("embedded", "hidden"),
        default=None,
        help="with --source wayland: draw the pointer into the pictures (embedded, default) or leave it out",
    )
    p.add_argument(
        "--run",
        default=None,
        metavar="COMMAND",
        help="with --source headless: the program to start in the desktop (a game, steam, a terminal), e.g. "
        '--run "vkcube"; the stream ends when it does',
    )
    p.add_argument(
        "--raw-format", choices=("yuv420p", "rgb24"), default="yuv420p", help="pixel format of raw input frames"
    )
    p.add_argument(
        "--window",
        default=None,
        metavar="TITLE|ID",
        help="with --source x11: grab only this window, named by its title (or a unique part of it, any case) "
        "or its id (0x… as xwininfo prints it), instead of the whole screen",
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
        "--layer-socket",
        default=None,
        metavar="PATH",
        help="where Vulkan games running PyroFling's capture layer (PYROFLING=1) connect (default "
        "$PYROFLING_SERVER or /tmp/pyrofling-socket, as the layer looks; README 'Games')",
    )
    g.add_argument(
        "--no-layer-socket", action="store_true", help="do not serve PyroFling's layer (pyrofling games only)"
    )
    g.add_argument(
        "--encode-mode",
        choices=ENCODE_MODES,
        default=None,
        help="when a game's frame is encoded: immediate (the moment it is presented; heartbeats still pace the "
        f"game) or heartbeat (on the next heartbeat, as the reference); default {DEFAULT_GAME_ENCODE}, which "
        "measures better with games that start their frames just in time ('pyrofling bench capture')",
    )
    g.add_argument("--immediate-encode", action="store_true", help="the same as --encode-mode immediate")
    _add_video_options(p)
    _add_network_options(p)
    _add_audio_options(p)
    add_host_gamepad_options(p)
    add_host_input_options(p)
    _add_security_options(p)
    _add_output_options(p)
    p.add_argument("--duration", type=run_time, default=None, help="stop after this many seconds (default: Ctrl-C)")
    p.add_argument("--stats-json", type=output_file(), default=None, help="write host statistics here on exit")
    add_thread_priority_option(p)
    p.add_argument(
        "--frame-trace",
        type=output_file(),
        default=None,
        metavar="FILE",
        help="write a JSON line per encoded frame: when its tick was due, woke, was encoded and sent (with a "
        "viewer's --frame-trace, shows where late pictures lose time: 'pyrofling bench latency --trace')",
    )
    p.add_argument(
        "--stats-interval",
        type=number(0.0, 3600.0),
        default=0.0,
        help="also rewrite --stats-json every this many seconds",
    )
    add_logging_options(p)
    p.set_defaults(func=run_host)


def _add_video_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("video")
    add_stream_size_options(g)
    g.add_argument(
        "--encoder",
        default="libx264",
        help="libx264 (default; H.264), libx265 (HEVC), libsvtav1 (AV1: key frames in place of intra refresh; "
        "its --preset is a number, 0-13, default 12), or h264_nvenc, hevc_nvenc, av1_nvenc where an NVIDIA GPU "
        "is present; bench codecs compares them",
    )
    g.add_argument(
        "--codec",
        choices=(*CODEC_FLAGS, "auto"),
        default=None,
        help="the codec on the wire, made with libx264, libx265 or libsvtav1 (their NVENC twins with an --encoder "
        "of NVENC); auto: the one with the fewest bits for the picture (AV1, then HEVC, then H.264) that every "
        "viewer watching decodes and this machine encodes in time, changed as viewers come and go (a pyrofling "
        "viewer and the --web page say what they decode; a native PyroFling viewer holds the codec it joined "
        "with; not with --record, --broadcast or --spectators); default: --encoder's",
    )
    g.add_argument(
        "--preset", default="ultrafast", help=f"x264/x265 preset: {', '.join(X26X_PRESETS)} (default ultrafast)"
    )
    g.add_argument("--ten-bit", action="store_true", help="encode 10-bit 4:2:0")
    g.add_argument(
        "--encoder-params",
        default="",
        metavar="KEY=VALUE[:KEY=VALUE...]",
        help="the software encoder's own options after the host's, as x264/x265/SVT-AV1 take them, e.g. "
        "min-cu-size=8:sao=1 (libx265: flat game colour in fewer bits, for about twice the encode time); not "
        "with --codec auto",
    )
    g.add_argument(
        "--encoder-threads",
        type=whole_number(0, 64, "threads"),
        default=None,
        help="threads encoding slices of each frame (default: one per CPU the host may use, at most 8; 0: the "
        "codec's own choice)",
    )
    g.add_argument(
        "--refresh-s",
        type=number(0.0, 60.0, above_low=True),
        default=1.0,
        help="intra-refresh period, seconds (default 1; heals loss)",
    )


def _add_network_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("network")
    g.add_argument(
        "--fec",
        type=fraction("FEC ratio", zero_ok=False, upper=4.0),
        default=0.25,
        metavar="RATIO",
        help="repair overhead (default 0.25 = 25%%)",
    )
    g.add_argument("--no-fec", action="store_true", help="send no repair blocks (video or audio)")
    g.add_argument(
        "--no-audio-fec",
        action="store_true",
        help="send no audio repair blocks (by default each audio chunk is sent a second time, with the next one; "
        "native viewers ignore it)",
    )
    g.add_argument(
        "--fec-planner",
        choices=("auto", *PLANNERS),
        default="auto",
        help="how repair blocks are chosen: auto (default) follows the loss a pyrofling viewer reports "
        "(adaptive) and uses tuned for viewers that do not report (native ones); or one for every viewer",
    )
    g.add_argument(
        "--rate-policy",
        choices=RATE_POLICIES,
        default="player",
        help="how the bitrate follows the viewers' links (pyrofling viewers report them; --bitrate-kbits is the "
        "ceiling): player (default) — the link of the viewer whose pad drives the virtual pad, else the first "
        "viewer's (spectators on narrower links are told why their picture suffers); lowest — the narrowest "
        "link of all; fixed — always --bitrate-kbits, as PyroFling",
    )
    g.add_argument(
        "--min-bitrate-kbits",
        type=whole_number(100, 10_000_000, "kbit/s"),
        default=None,
        metavar="KBITS",
        help="the floor rate control never goes below (default a tenth of --bitrate-kbits, at least 500)",
    )
    g.add_argument(
        "--max-rate-mbits",
        type=number(0.0, 100_000.0, "Mbit/s"),
        default=200.0,
        help="pace each viewer's datagrams to this rate, Mbit/s (default 200; 0 = bursts, like the reference)",
    )
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
        type=whole_number(1, 8, "heartbeats per frame"),
        default=1,
        metavar="N",
        help="run the heartbeat at fps x N and encode every N-th beat (a game at 120 Hz, a stream at 60; default 1)",
    )


def _add_audio_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "audio",
        "Audio is captured in short chunks stamped with the video clock and sent as soon as each is captured.",
    )
    g.add_argument(
        "--audio",
        choices=AUDIO_SOURCES,
        default=None,
        help="tone: a 440 Hz test tone with a click every second, for timing (default with the test scene); "
        "device: a capture device (see --audio-device); game: what the streamed game sends through the capture "
        "socket (--source capture); desktop: what the programs of the host's own desktop play, into a sound card "
        "of its own (default with --source headless); none: no audio (default with other sources)",
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
        "--audio-rate", type=whole_number(8000, 192_000, "Hz"), default=48_000, help="sample rate (default 48000)"
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
        type=number(1.0, 100.0, "ms"),
        default=5.0,
        help="chunk (Opus frame) length in ms: shorter is lower latency, more packets (default 5: one datagram)",
    )
    g.add_argument("--opus-kbits", type=whole_number(6, 510, "kbit/s"), default=128, help="Opus bitrate (default 128)")
    g.add_argument(
        "--audio-skew-ppm",
        type=number(-5000.0, 5000.0, "ppm"),
        default=0.0,
        metavar="PPM",
        help="run the test tone's clock this many ppm fast (negative: slow), to exercise the viewer's drift control",
    )


def _add_security_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "security",
        "Without any of these anyone who reaches the port can watch and take the pad, as with PyroFling: fine on a "
        "trusted LAN. With one, a viewer must prove the code through a PAKE (nothing on the wire to test guesses "
        "against) or a stored pairing, and everything after the handshake is sealed with AES-GCM: control, "
        "pictures, sound, pad. Native PyroFling viewers cannot connect then. Wrong codes block the address (an IPv6 "
        "/64) after 5 a minute, and every code attempt after 30 a minute from anywhere.",
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
        help="make up a random code, shown on this terminal (never in the log): a friend pairs with it once "
        "(pyrofling pair, or typed into the --web page) and joins without it from then on. Each code works once "
        "and for 10 minutes; the host then shows the next",
    )
    g.add_argument(
        "--pairing-code-file",
        type=secret_file,
        default=None,
        metavar="FILE",
        help="with --pairing-code: write the code to FILE (readable by you alone) instead of the terminal, for "
        "scripts (pyrofling pair --code-file FILE reads it)",
    )
    g.add_argument(
        "--private",
        action="store_true",
        help="admit paired viewers only (no code taken); list and revoke them with pyrofling paired",
    )
    add_pairing_dir_option(g)


def _add_output_options(p: argparse.ArgumentParser) -> None:
    w = p.add_argument_group(
        "browser viewer",
        "Watch from a browser, nothing installed: the same encode, over WebTransport (QUIC, UDP) where the browser "
        "has it, else a WebSocket.",
    )
    w.add_argument(
        "--web",
        nargs="?",
        const=-1,
        default=None,
        type=port_number,
        metavar="PORT",
        help="also serve a page that plays the stream in a browser (Chromium, Chrome, Edge; WebCodecs), on PORT "
        "(default: the host's port + 1). The host prints a link with a key made for this run; only a page "
        "opened from it gets the stream. On this machine only over plain HTTP; with --bind to the network over "
        "HTTPS (a certificate the host makes and keeps, its fingerprint printed beside the link, or --web-cert)",
    )
    w.add_argument(
        "--web-https",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="serve the page over HTTPS (default: when --bind opens the host to the network, or with --web-cert); "
        "--no-web-https keeps plain HTTP, on 127.0.0.1 only",
    )
    w.add_argument(
        "--web-transport",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="send the browsers' pictures over WebTransport (HTTP/3 on UDP, the page's port number): a lost packet "
        "holds back one picture, not every one behind it (default); --no-web-transport keeps them on the WebSocket",
    )
    w.add_argument(
        "--web-link",
        choices=("once", "run"),
        default="once",
        help="once (default): each link admits one browser (its tab reconnects by itself) and the host then shows "
        "the next link, so a link that leaks later opens nothing; run: one link for the whole run, for everyone "
        "who has it",
    )
    w.add_argument("--web-cert", type=Path, default=None, metavar="CERT.pem", help="your certificate for the page")
    w.add_argument("--web-key", type=Path, default=None, metavar="KEY.pem", help="its private key")
    w.add_argument(
        "--web-link-file",
        type=secret_file,
        default=None,
        metavar="FILE",
        help="write the browser link (it carries the key) to FILE, readable by you only, instead of the terminal",
    )
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
        type=whole_number(100, 200_000, "kbit/s"),
        default=None,
        metavar="N",
        help="give the broadcast its own H.264 encoder at this bitrate, with a normal GOP (costs a second "
        "encode; default: send the viewers' packets as they are)",
    )
    g.add_argument(
        "--broadcast-keyint",
        type=number(0.1, 20.0),
        default=2.0,
        metavar="S",
        help="key frame interval of the broadcast's own encoder, seconds (default 2, what CDNs ask for)",
    )
    g.add_argument(
        "--broadcast-audio-kbits",
        type=whole_number(32, 512, "kbit/s"),
        default=160,
        metavar="N",
        help="AAC bitrate of the broadcast (default 160)",
    )
    g.add_argument(
        "--spectators",
        default=None,
        metavar="URL",
        help="also publish the stream (H.264, and its sound where it is Opus) as RTP into a Janus SFU, whose HTTP "
        "API is at URL (http://HOST:8088/janus): the host creates a mountpoint with a secret of its own, keeps it "
        "and removes it when it stops; spectators watch through Janus, never through the host's ports; if Janus "
        "goes away the players' stream goes on and the host publishes again when it is back; "
        f"${SPECTATORS_ADMIN_KEY_ENV}: the streaming plugin's admin_key, where it has one (docs/spectators.md)",
    )
    g.add_argument(
        "--spectators-id",
        type=whole_number(1, 2**53, "id"),
        default=None,
        metavar="N",
        help="the mountpoint's id on Janus (default: one Janus chooses, shown at start)",
    )
    g.add_argument(
        "--spectators-edge",
        action="append",
        default=[],
        metavar="URL",
        help="an edge Janus (its HTTP API) that the --spectators Janus feeds, for more spectators than one Janus "
        "carries; repeat for more. The origin then needs its VideoRoom plugin too: the host joins a room there "
        "and the origin forwards to a mountpoint of the same id on itself and on each edge (docs/spectators.md)",
    )


# --------------------------------------------------------------------------------------------
# Flags → HostConfig
# --------------------------------------------------------------------------------------------


def _floor_kbits(args: argparse.Namespace) -> int | None:
    """The floor asked for (None: HostConfig's default), checked against the ceiling."""
    floor: int | None = args.min_bitrate_kbits
    if floor is not None and floor > args.bitrate_kbits:
        raise ValueError(f"--min-bitrate-kbits {floor} is above --bitrate-kbits {args.bitrate_kbits} (the ceiling)")
    return floor


def _auto_codecs(args: argparse.Namespace) -> tuple[VideoCodec, ...]:
    """``--codec auto``'s choice, best first, of the codecs whose encoder this machine opens."""
    if args.codec != "auto":
        return ()
    have = set(available_encoders())
    codecs = tuple(c for c in DEFAULT_PREFERENCE if encoder_for(c, args.encoder) in have)
    if not codecs:
        raise ValueError(f"--codec auto: none of the encoders it chooses from opens here (have: {', '.join(have)})")
    return codecs


def _encoder_name(args: argparse.Namespace, auto_codecs: tuple[VideoCodec, ...]) -> str:
    """The encoder the host starts with: ``--encoder``'s, or the one of ``--codec`` (auto: its best)."""
    if args.codec is None:
        return str(args.encoder)
    codec = auto_codecs[0] if auto_codecs else CODEC_FLAGS[args.codec]
    if args.encoder not in ("libx264", "h264_nvenc") and EncoderConfig(encoder=args.encoder).video_codec != codec:
        raise ValueError(f"--encoder {args.encoder} does not make {args.codec}: give one of them")
    return encoder_for(codec, args.encoder)


def host_config(args: argparse.Namespace) -> HostConfig:
    """The host the flags describe; ValueError saying what to change when they do not fit together."""
    check_source(args.source)
    if args.run is not None and args.source != "headless":
        raise ValueError("--run goes with --source headless: the program to start in the host's own desktop")
    auto_codecs = _auto_codecs(args)
    encoder = EncoderConfig(
        encoder=_encoder_name(args, auto_codecs),
        width=args.width,
        height=args.height,
        fps=args.fps,
        bitrate_kbits=args.bitrate_kbits,
        preset=args.preset,
        ten_bit=args.ten_bit,
        refresh_s=args.refresh_s,
        params=args.encoder_params,
        **({} if args.encoder_threads is None else {"threads": args.encoder_threads}),
    )
    if args.encoder_params and auto_codecs:
        raise ValueError("--encoder-params is for one encoder: give --codec h264, hevc or av1 with it, not auto")
    encoder.check()
    if (args.immediate_encode or args.encode_mode) and args.source not in PRESENTING_SOURCES:
        flag = "--immediate-encode" if args.immediate_encode else "--encode-mode"
        raise ValueError(f"{flag} applies to games (--source capture) and desktops (--source headless or wayland)")
    if args.virtual_input == "portal" and args.source != "wayland":
        raise ValueError("--virtual-input portal goes with --source wayland (the portal of the desktop you share)")
    if args.cursor is not None and args.source != "wayland":
        raise ValueError("--cursor goes with --source wayland (the pointer of the desktop you share)")
    if args.immediate_encode and args.encode_mode == "heartbeat":
        raise ValueError("--immediate-encode contradicts --encode-mode heartbeat: give one of them")
    mode = "immediate" if args.immediate_encode else (args.encode_mode or DEFAULT_GAME_ENCODE)
    if args.window is not None and not (args.source == "x11" or args.source.startswith("x11:")):
        raise ValueError("--window picks a window to grab: it needs --source x11[:DISPLAY]")
    if (args.layer_socket or args.no_layer_socket) and args.source != "capture":
        raise ValueError("--layer-socket / --no-layer-socket apply to games (--source capture)")
    if args.layer_socket and args.no_layer_socket:
        raise ValueError("--layer-socket contradicts --no-layer-socket: give one of them")
    layer_socket = None
    if args.source == "capture" and not args.no_layer_socket:
        layer_socket = args.layer_socket or default_layer_socket()
    if auto_codecs and _output_config(args).enabled:
        raise ValueError(
            "--codec auto changes the codec as viewers come and go, which a recording, a broadcast or the "
            "spectators' stream cannot follow: name one codec (--codec h264, hevc or av1)"
        )
    return HostConfig(
        bind=args.bind,
        port=args.port,
        encoder=encoder,
        auto_codecs=auto_codecs,
        source=args.source,
        raw_format=args.raw_format,
        fec="none" if args.no_fec else args.fec_planner,
        fec_ratio=args.fec,
        audio_fec=not (args.no_fec or args.no_audio_fec),
        max_rate_mbits=args.max_rate_mbits,
        rate_policy=args.rate_policy,
        min_bitrate_kbits=_floor_kbits(args),
        phase_controller=args.phase_controller,
        phase_policy=args.phase_policy,
        client_rate_multiplier=args.client_rate_multiplier,
        audio=_audio_config(args),
        duration_s=args.duration,
        stats_json=args.stats_json,
        stats_interval_s=args.stats_interval,
        virtual_pad=args.virtual_pad,
        pads=args.pads,
        virtual_input=args.virtual_input,
        input_trace=args.input_trace,
        frame_trace=args.frame_trace,
        gamepad_trace=args.gamepad_trace,
        capture_socket=args.capture_socket,
        layer_socket=layer_socket,
        x11_window=args.window,
        run_command=args.run,
        layer_socket_required=bool(args.layer_socket),
        immediate_encode=args.source in PRESENTING_SOURCES and mode == "immediate",
        cursor=args.cursor or "embedded",
        outputs=_output_config(args),
        password=_host_password(args),
        show_pairing_code=_pairing_code_shower(args) if args.pairing_code else None,
        private=args.private,
        open_keyboard_mouse=args.open_keyboard_mouse,
        pairing_dir=pairing_dir(args),
        web_port=_web_port(args),
        web_https=args.web_https,
        web_transport=args.web_transport,
        web_link_once=args.web_link == "once",
        web_cert=args.web_cert,
        web_key=args.web_key,
        show_web_link=_web_link_shower(args.web_link_file, once=args.web_link == "once"),
    )


def _web_port(args: argparse.Namespace) -> int | None:
    if args.web is None:
        flags = {"--web-link-file": args.web_link_file, "--web-cert": args.web_cert, "--web-key": args.web_key}
        given = [f for f, v in {**flags, "--web-https": args.web_https}.items() if v is not None]
        if given:
            raise ValueError(f"{', '.join(given)} goes with --web")
        return None
    if (args.web_cert is None) != (args.web_key is None):
        raise ValueError("--web-cert and --web-key go together (the certificate and its private key)")
    for path in (args.web_cert, args.web_key):
        if path is not None and not path.is_file():
            raise ValueError(f"{path}: no such file (give the PEM certificate and key for the page)")
    if args.web == -1:  # --web alone: next to the host's port
        return args.port + 1 if args.port else 0
    return int(args.web)


def _web_link_shower(file: Path | None, *, once: bool) -> Callable[[str, str | None], None]:
    return lambda link, fingerprint: _show_web_link(link, fingerprint, file, once=once)


def _show_web_link(link: str, fingerprint: str | None, file: Path | None, *, once: bool = False) -> None:
    """The link carries the stream's key: to ``file`` (0600; the fingerprint on its second line), else the person
    (the terminal, else standard output); never to the log."""
    if file is not None:
        try:
            write_private(file, (link + "\n" + (f"{fingerprint}\n" if fingerprint else "")).encode())
        except OSError as exc:  # the name was swapped for a link, say, after the check at start: not written
            log.error("the browser link was not written: %s", exc)
        return
    text = f"watch in a browser: {link}\n"
    if once:
        text += "  it admits one browser (whose tab may reload); the next link is shown here once it has\n"
    if fingerprint:
        text += (
            f"  the page's certificate (SHA-256): {fingerprint}\n"
            "  if the browser warns about it, check that it shows this fingerprint before going on\n"
        )
    _tell_person(text)


def _audio_config(args: argparse.Namespace) -> AudioConfig:
    source = args.audio
    if args.no_audio:
        source = "none"
    elif source is None:
        source = "device" if args.audio_device else {"scene": "tone", "headless": "desktop"}.get(args.source, "none")
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
    if source == "desktop" and args.source != "headless":
        raise ValueError("--audio desktop records the host's own desktop: it needs --source headless")
    return cfg


def _output_config(args: argparse.Namespace) -> OutputConfig:
    cfg = OutputConfig(
        record=args.record,
        broadcast=args.broadcast,
        broadcast_bitrate_kbits=args.broadcast_bitrate_kbits,
        broadcast_keyint_s=args.broadcast_keyint,
        broadcast_audio_kbits=args.broadcast_audio_kbits,
        spectators=args.spectators,
        spectators_admin_key=os.environ.get(SPECTATORS_ADMIN_KEY_ENV) or None,
        spectators_id=args.spectators_id,
        spectators_edges=tuple(args.spectators_edge),
    )
    cfg.check()
    return cfg


def _host_password(args: argparse.Namespace) -> str | None:
    """The secret the host requires, from --password, $PYROFLING_PASSWORD or a new pairing code."""
    from pyrofling.core.secure import pairing_code

    password = given_password(args)
    if args.pairing_code_file is not None and not args.pairing_code:
        raise ValueError("--pairing-code-file goes with --pairing-code")
    if args.pairing_code:
        if password:
            raise ValueError(f"--pairing-code makes up a secret: drop --password (and ${PASSWORD_ENV})")
        password = pairing_code()
        _pairing_code_shower(args)(password, "")
    if password is not None and len(password) < 6:
        raise ValueError("the password is too short: use at least 6 characters, or --pairing-code")
    return password


def _pairing_code_shower(args: argparse.Namespace) -> Callable[[str, str], None]:
    file, web = args.pairing_code_file, args.web is not None
    return lambda code, why: _show_pairing_code(code, why, file, web=web)


def _show_pairing_code(code: str, why: str, file: Path | None, *, web: bool = False) -> None:
    """The code goes to the person, not to the log (stderr is the log, and often a file): to ``file`` (0600),
    else the controlling terminal, else standard output. ``why``: why the last code went ("" at start)."""
    if file is not None:
        try:
            write_private(file, (code + "\n").encode())
        except OSError as exc:
            log.error("the pairing code was not written: %s", exc)
            return
        print(f"pairing code written to {file}", file=sys.stderr, flush=True)
        return
    if why:
        text = f"the pairing code {why}; the next one: {code} (once, within 10 minutes)\n"
    else:
        text = (
            f"pairing code: {code} (works once, within 10 minutes; then the next is shown here)\n"
            "  a friend pairs once with: pyrofling pair pyro://HOST:PORT (it asks for the code)\n"
            "  (or watches this time only: pyrofling view pyro://HOST:PORT, with the code in $PYROFLING_PASSWORD)\n"
        )
        if web:
            text += "  or types it into the browser's page (the web link without its #t=…): that browser is kept\n"
    _tell_person(text)


def _tell_person(text: str) -> None:
    """A secret for the person at the host: the controlling terminal, else standard output (a service, a
    script); never stderr, which is the log and often a file."""
    try:
        with open("/dev/tty", "w") as tty:
            tty.write(text)
            return
    except OSError:
        pass
    sys.stdout.write(text)
    sys.stdout.flush()


def run_host(args: argparse.Namespace) -> int:
    setup_logging(args)
    tune_for_latency(thread_priority=args.thread_priority == "auto")
    try:
        cfg = host_config(args)
    except ValueError as exc:
        return refuse("host", str(exc))

    async def main() -> int:
        host = Host(cfg)
        install_stop(asyncio.get_running_loop(), host.stop)
        try:
            await host.run()
        except (OSError, ValueError) as exc:
            return refuse("host", _why(exc, cfg), 1)
        return 0

    return asyncio.run(main())


def _why(exc: Exception, cfg: HostConfig) -> str:
    """The host could not start: in one line, with what to try."""
    if isinstance(exc, OSError) and exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
        hint = {errno.EADDRINUSE: "; is another host running? choose another --port"}.get(exc.errno, "")
        return f"cannot listen on {cfg.bind} port {cfg.port}: {(exc.strerror or str(exc)).lower()}{hint}"
    return str(exc) or type(exc).__name__
