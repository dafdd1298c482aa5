"""Everything ``pyrofling host`` can be told: :class:`HostConfig`, its defaults what a person gets with no flags."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pyrofling.core.host.pacer import Pacer, make_pacer
from pyrofling.core.host.packetizer import Packetizer
from pyrofling.fec.planner import REFERENCE_RATIO, AdaptivePlanner, make_planner
from pyrofling.server.audio import AudioConfig
from pyrofling.server.encoder import EncoderConfig
from pyrofling.server.muxing import OutputConfig
from pyrofling.wire import AudioCodec, CodecParameters, ColorProfile, VideoCodec

DEFAULT_PORT = 9876


#: When a game's frame, or a frame of the host's own desktop, is encoded (``--encode-mode``).
ENCODE_MODES = ("immediate", "heartbeat")
#: The default for games and the desktop: input to photon with the example game starting its frames just in time
#: ('pyrofling bench capture', 720p60, loopback) measured lower with immediate encode (docs/games.md); the
#: desktop's frames too, with fewer encodes and more new pictures ('bench capture --sources', docs/headless.md).
DEFAULT_GAME_ENCODE = "immediate"


@dataclass(frozen=True, slots=True)
class HostConfig:
    """Everything ``pyrofling host`` can be told.  Defaults are what a person gets with no flags."""

    #: Where to listen: localhost (127.0.0.1 and ::1: this machine only), or an address (0.0.0.0, :: for all).
    bind: str = "localhost"
    port: int = DEFAULT_PORT  # 0: any free port (tests); TCP and UDP share it
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    #: ``--codec auto``: the codecs to choose from as viewers come and go, best first (the encoder starts with the
    #: first; protocol.md §7.15). Empty: ``encoder``'s codec, always.
    auto_codecs: tuple[VideoCodec, ...] = ()
    source: str = "scene"
    raw_format: str = "yuv420p"
    #: FEC planner for video: auto (adaptive for viewers that report their loss, tuned for the others), tuned,
    #: reference, adaptive, or none.
    fec: str = "auto"
    #: Repair blocks as a share of data blocks (0.25: the reference's ~25 % + 1).
    fec_ratio: float = REFERENCE_RATIO
    #: Overhead for key frames, which recovery from loss waits for (0: same as other frames).
    key_fec_ratio: float = 0.5
    #: Repair blocks for audio (the reference's rule: one XOR of the chunk), sent with the next chunk.
    audio_fec: bool = True
    #: Pacing cap per viewer, Mbit/s (0: unpaced, like the reference).
    max_rate_mbits: float = 200.0
    #: How the encoder's bitrate follows the viewers' links (core.congestion): player, lowest or fixed.
    #: ``encoder.bitrate_kbits`` is the ceiling, this the floor.
    rate_policy: str = "player"
    min_bitrate_kbits: int | None = None  # None: a tenth of the ceiling, at least 500 (``floor_kbits``)
    #: Stop after this many seconds (None: until Ctrl-C).
    duration_s: float | None = None
    stats_json: Path | None = None
    #: Rewrite ``stats_json`` this often while running (0: only on exit), for soak runs and dashboards.
    stats_interval_s: float = 0.0
    #: Seconds between status lines in the log (0: none).
    status_interval_s: float = 5.0
    #: Phase controller for the frame clock: pi (pyrofling's) or reference (PyroFling's).
    phase_controller: str = "pi"
    #: Which phase-locked viewers steer: leader (the longest-locked one) or sum (the reference).
    phase_policy: str = "leader"
    #: Heartbeat at fps × this; a frame is encoded on every n-th (a game at 120 Hz, a 60 Hz stream).
    client_rate_multiplier: int = 1
    #: Audio source and codec (source "none": video only).
    audio: AudioConfig = field(default_factory=AudioConfig)
    #: The virtual gamepad viewers drive: uinput (a warning and no pad without /dev/uinput) or none.
    virtual_pad: str = "uinput"
    #: Virtual pads: 1 (shared, as PyroFling) or up to 8, one per player in join order (protocol.md §7.12).
    pads: int = 1
    #: The virtual keyboard and mouse viewers drive (protocol.md §7.11): uinput (a warning and none without
    #: /dev/uinput) or none.
    virtual_input: str = "uinput"
    #: Write every keyboard and mouse update applied, with its time, as JSON lines (benches).
    input_trace: Path | None = None
    #: Write every state applied to the virtual pad, with its time, as JSON lines.
    gamepad_trace: Path | None = None
    #: Write a JSON line per encoded frame: when its tick was due, woke, was encoded and handed to the pacers.
    frame_trace: Path | None = None
    #: With source "x11": grab only this window (a title, part of one, or an id) instead of the whole screen.
    x11_window: str | None = None
    #: With source "headless": the program to run in the host's own desktop (a shell-like command line).
    run_command: str | None = None
    #: With source "wayland": the pointer drawn into the pictures ("embedded") or left out ("hidden").
    cursor: str = "embedded"
    #: With source "capture": the games' socket (None: $XDG_RUNTIME_DIR/pyrofling-capture).
    capture_socket: str | None = None
    #: With source "capture": also serve PyroFling's Vulkan layer on this socket (None: not served; the CLI
    #: serves $PYROFLING_SERVER or /tmp/pyrofling-socket unless told not to).
    layer_socket: str | None = None
    #: Refuse to start when ``layer_socket`` cannot be served (it was asked for by name), instead of a warning.
    layer_socket_required: bool = False
    #: Encode a game's frame the moment it is presented instead of on the next heartbeat (the CLI's default
    #: for games: DEFAULT_GAME_ENCODE).
    immediate_encode: bool = False
    #: A recording and/or an RTMP broadcast of the stream.
    outputs: OutputConfig = field(default_factory=OutputConfig)
    #: The secret viewers must prove they know (protocol.md §7.7); None: open to anyone, as the reference.
    password: str | None = field(default=None, repr=False)
    #: Admit only viewers that authenticate (paired ones, or with ``password``), even without a password.
    private: bool = False
    #: ``password`` is a one-time pairing code (good once, and for 10 minutes): each next code is made by the
    #: host and handed here with why the last one went (the CLI shows it on the terminal, never in the log).
    show_pairing_code: Callable[[str, str], None] | None = field(default=None, repr=False)
    #: Let viewers that did not authenticate type and move the mouse (without it only authenticated ones can).
    open_keyboard_mouse: bool = False
    #: Where this host keeps its id and its paired viewers (None: no pairing; the CLI gives the user's directory).
    pairing_dir: Path | None = None
    #: Serve the browser viewer on this port (``--web``; 0: any free port; None: no web viewer).
    web_port: int | None = None
    #: Serve it over HTTPS (None: when ``bind`` is not this machine only, or a certificate is given); with the
    #: certificate and key in these files (None: one the host makes and keeps in ``pairing_dir``).
    web_https: bool | None = None
    #: Offer browsers WebTransport (QUIC on UDP, the page's port number) for their media.
    web_transport: bool = True
    #: Each link admits one browser and the host shows the next (False: one link for the whole run).
    web_link_once: bool = True
    web_cert: Path | None = None
    web_key: Path | None = None
    #: The link a browser opens (with its token), and the certificate's fingerprint when HTTPS, go here (the CLI:
    #: the terminal, never the log).
    show_web_link: Callable[[str, str | None], None] | None = field(default=None, repr=False)

    def make_pacer(self) -> Pacer:
        """Each viewer's pacer: a token bucket at ``max_rate_mbits``, or none at 0 (bursts, as the reference)."""
        if self.max_rate_mbits <= 0:
            return make_pacer("none")
        return make_pacer("token-bucket", rate_bits_per_s=self.max_rate_mbits * 1e6)

    @property
    def floor_kbits(self) -> int:
        """The bitrate rate control never goes below: as told, else a tenth of the ceiling, at least 500 kbit/s."""
        ceiling = self.encoder.bitrate_kbits
        floor = self.min_bitrate_kbits if self.min_bitrate_kbits is not None else max(500, ceiling // 10)
        return min(ceiling, floor)

    def make_packetizer(self, cookie: int) -> Packetizer:
        """A new viewer's packetizer: its sequence numbers from its cookie, the FEC this host is told to send."""
        fixed = "tuned" if self.fec == "auto" else self.fec
        planner = make_planner(fixed, ratio=self.fec_ratio)
        key_planner = None
        if fixed != "none" and self.key_fec_ratio > self.fec_ratio:
            key_planner = make_planner(fixed, ratio=self.key_fec_ratio)
        audio_planner = make_planner("reference") if self.audio_fec else None
        packetizer = Packetizer.for_cookie(
            cookie, video_planner=planner, key_planner=key_planner, audio_planner=audio_planner
        )
        if self.fec == "auto":  # a viewer that reports its loss gets repair that follows it
            packetizer.planner_when_reported = AdaptivePlanner
        return packetizer

    def codec_parameters(
        self, video: VideoCodec, color: ColorProfile, audio: AudioCodec, audio_rate: int
    ) -> CodecParameters:
        """What every viewer is told of the stream (``audio_rate`` 0: no audio)."""
        return CodecParameters(
            video_codec=int(video),
            color_profile=int(color),
            audio_codec=int(audio) if audio_rate else 0,
            frame_rate_num=self.encoder.fps,
            frame_rate_den=1,
            width=self.encoder.width,
            height=self.encoder.height,
            channels=self.audio.channels if audio_rate else 0,
            rate=audio_rate,
        )

    def security_text(self, paired: int) -> str:
        """Who may join and what protects the stream, in words (``paired``: the viewers this host keeps)."""
        if self.password is None and not self.private:
            if self.open_keyboard_mouse and self.virtual_input != "none":
                who = "watch, take the pad and type"
            else:
                who = "watch and take the pad (keyboard and mouse: nobody; --open-keyboard-mouse lets them type)"
            open_text = f"open: anyone who reaches the port can {who}, nothing is sealed"
            if paired:
                open_text += f" ({paired} paired viewer(s) kept: run with --private to admit only them)"
            return open_text
        who = "the code or a pairing" if self.password is not None else "a pairing only"
        return f"viewers must prove {who} ({paired} paired); control, media and pad sealed with AES-GCM"
