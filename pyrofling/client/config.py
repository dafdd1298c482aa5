"""Everything ``pyrofling view`` and ``pyrofling gamepad`` can be told: :class:`ViewerConfig`."""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field, replace
from pathlib import Path

from pyrofling.client.audio import AudioPlayerConfig
from pyrofling.client.codecs import accepts_parts, default_decode_threads
from pyrofling.client.gamepad import GamepadConfig
from pyrofling.client.keyboard_mouse import InputConfig
from pyrofling.core.slices import EARLY_PICTURE_BYTES
from pyrofling.core.viewer.auth import HostCredential
from pyrofling.core.viewer.connection import EARLY_PART_BYTES
from pyrofling.core.viewer.presentation import PresentationConfig
from pyrofling.core.viewer.reassembler import ReassemblerConfig
from pyrofling.core.viewer.session import ViewerSessionConfig
from pyrofling.pairing import PairingStoreError, ViewerPairings
from pyrofling.wire import ExtensionFeature, KickFlags, VideoCodec

#: The viewer decodes large pictures early by default where it decodes on this many threads or more.
EARLY_DECODE_THREADS = 4

log = logging.getLogger(__name__)


def display_mode(width: int, height: int, refresh_hz: float) -> tuple[int, int, int]:
    """A display as VIEWER_DISPLAY carries it: pixels, and the refresh rate in mHz."""
    return int(width), int(height), round(refresh_hz * 1000)


@dataclass(frozen=True, slots=True)
class ViewerConfig:
    """Everything ``pyrofling view`` (and ``pyrofling gamepad``) can be told."""

    host: str
    port: int
    flags: KickFlags = KickFlags.VIDEO
    #: Ask for pyrofling extensions (explicit key-frame requests); off = behave like a native viewer.
    extensions: bool = True
    #: The host's password or pairing code (protocol.md §7.7).
    password: str | None = field(default=None, repr=False)
    #: Watch a host that does not authenticate even with a password or a pairing for it (unsealed: a bad idea).
    allow_open_host: bool = False
    #: Pairings kept here are used and new ones stored here (None: none; the CLI gives the user's directory).
    pairing_dir: Path | None = None
    #: Ask the host to pair with this viewer under this name (``password`` is then the pairing code).
    pair_as: str | None = None
    #: Stop after this many seconds (None: until Ctrl-C or the window closes).
    duration_s: float | None = None
    #: Follow the host through restarts once it has streamed (a viewer that never got a stream stops at once).
    reconnect: bool = True
    stats_json: Path | None = None
    reassembler: ReassemblerConfig = field(default_factory=ReassemblerConfig)
    #: Slice threads of the video decoder (default: one per CPU this viewer may use, at most 8).
    decode_threads: int = field(default_factory=default_decode_threads)
    #: Complete packets waiting for the decoder; beyond this the viewer is falling behind.
    max_decode_queue: int = 8
    #: Start decoding an H.264 picture of at least ``early_decode_bytes`` on its first slices while the rest is
    #: on its way (with two decode threads or more, and ``recovery="key-frame"``: a picture begun and then lost
    #: resets the decoder's references).  None: where the viewer decodes on 4 threads or more (measured on 7;
    #: on one CPU the parts took longer than the whole picture; docs/streaming.md).
    early_decode: bool | None = None
    #: With ``early_decode``, only pictures of at least this many bytes are decoded from their parts: a smaller
    #: one arrives in well under a millisecond behind the pacer, and its slices fed one at a time take longer
    #: than the whole picture on the decoder's threads (docs/streaming.md).  0: every picture.
    early_decode_bytes: int = EARLY_PICTURE_BYTES
    #: After a loss, pictures wait for the key frame that repairs them; once the picture has been still this
    #: long, show the decoder's concealed pictures instead (intra refresh heals them).  None: wait, frozen.
    conceal_after_ms: float | None = 100.0
    #: After a loss nothing repaired: ``key-frame`` asks for one (the picture stays still until it comes, at most
    #: ``conceal_after_ms``); ``intra-refresh`` asks for nothing and shows what the decoder makes of the damage
    #: until the intra-refresh wave has passed (the bench compares them).
    recovery: str = "key-frame"
    #: Ask for missing datagrams (NACK) when the host offers it; False measures FEC alone.
    resends: bool = True
    #: Seconds to wait for the TCP connection.
    connect_timeout_s: float = 5.0
    #: Rewrite ``stats_json`` this often while running (0: only on exit), for live displays.
    stats_interval_s: float = 0.0
    #: Phase lock and deadline (URI ``phase_locked=…&deadline=…``; default: locked, the offset found automatically).
    presentation: PresentationConfig = field(default_factory=PresentationConfig.automatic)
    #: Refresh rate of the software display clock (None: the display's, else the stream's).
    refresh_hz: float | None = None
    #: The display to tell the host, width, height and refresh rate in Hz (0: unknown), for a host that makes its
    #: own desktop at the viewer's size (protocol.md §7.14); the window tells its own when it has one. None: say
    #: nothing.
    display: tuple[int, int, float] | None = None
    #: Run the software display clock this many ppm slow (negative: fast), to show locking.
    refresh_skew_ppm: float = 0.0
    #: ``auto``: on a display of 80 Hz or more, when the pictures come too unevenly for the automatic lock and
    #: the latest repeat often, ask the host for half the display's rate (protocol.md §7.16); ``full``: never.
    picture_rate: str = "auto"
    #: Audio playback (None: no audio; the AUDIO bit in ``flags`` asks the host for it).
    audio: AudioPlayerConfig | None = None
    #: The pad to send (None: none; the GAMEPAD bit in ``flags`` tells the host to expect it).
    gamepad: GamepadConfig | None = None
    #: Keys and the mouse (None: none; the KEYBOARD_MOUSE bit in ``flags`` asks the host for them).
    keyboard_mouse: InputConfig | None = None
    #: Who plays: drawn once, the same for every reconnect of this viewer (a host with a pad per player gives
    #: its pad back, protocol.md §7.12).
    player_token: int = field(default_factory=lambda: secrets.randbits(64), repr=False)
    #: Write each decoded frame's marker (id, capture time) and decode time here, as JSON lines (benches).
    marker_log: Path | None = None
    #: Write a JSON line per refresh that showed a new picture or missed its deadline, with when the picture
    #: passed each stage (arrival, decode, ready) and how late it was against its target (diagnosis, benches).
    frame_trace: Path | None = None
    #: Compare every picture with the built-in test scene and judge each refresh: good, corrupt or stale (benches).
    check_scene: bool = False
    #: The host runs on this machine: its clock is ours (capture stamps map as they are, not through pings).
    host_on_this_machine: bool = False
    #: The video codecs to tell a host that chooses its codec (protocol.md §7.15); None: every one this viewer
    #: decodes.
    video_codecs: frozenset[VideoCodec] | None = None

    @property
    def conceal_after_s(self) -> float | None:
        """When damaged pictures are shown: at once when intra refresh is to heal them, else after a still spell."""
        if self.recovery == "intra-refresh":
            return 0.0
        return None if self.conceal_after_ms is None else self.conceal_after_ms / 1000

    @property
    def decodes_early(self) -> bool:
        """Whether pictures are decoded from their parts (``early_decode`` where it can work)."""
        asked = self.decode_threads >= EARLY_DECODE_THREADS if self.early_decode is None else self.early_decode
        return asked and accepts_parts(VideoCodec.H264, self.decode_threads) and self.recovery == "key-frame"

    @property
    def early_part_bytes(self) -> int | None:
        """The least bytes of a part for the connection to hand out, or None (no parts)."""
        return EARLY_PART_BYTES if self.decodes_early else None

    @property
    def address(self) -> str:
        """The host as typed, host:port (what a pairing remembers it by)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def session_config(self) -> ViewerSessionConfig:
        credentials: tuple[HostCredential, ...] = ()
        paired_here = None
        if self.pairing_dir is not None:
            store = ViewerPairings(self.pairing_dir)
            try:
                credentials, paired_here = store.credentials(), store.host_at(self.address)
            except PairingStoreError as exc:
                log.warning("pairings: %s; joining without them", exc)
        cfg = ViewerSessionConfig(
            flags=self.flags,
            secret=self.password,
            credentials=credentials,
            paired_host_id=paired_here,
            pair_as=self.pair_as,
            allow_open_host=self.allow_open_host,
            player_token=self.player_token,
            request_key_frames=self.recovery == "key-frame",
            host_clock_offset_s=0.0 if self.host_on_this_machine else None,
            display=None if self.display is None else display_mode(*self.display),
            video_codecs=self.video_codecs if self.video_codecs is not None else _decodable(),
        )
        if not self.resends:
            cfg = replace(cfg, extensions=cfg.extensions & ~ExtensionFeature.NACK)
        return cfg if self.extensions else replace(cfg, extensions=ExtensionFeature.NONE)


def _decodable() -> frozenset[VideoCodec]:
    from pyrofling.client.codecs import decodable_codecs  # PyAV: only once a session starts

    return decodable_codecs()
