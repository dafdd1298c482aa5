"""What the host counts, and how it reports it: the status line a person reads, ``--stats-json`` for tools."""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from pyrofling.core.host.frame_clock import FrameClock
from pyrofling.core.samples import recent_samples, tail


@dataclass(slots=True)
class HostStats:
    frames_encoded: int = 0
    key_frames: int = 0
    idrs: int = 0
    bytes_encoded: int = 0
    #: Datagrams the sockets sent (repair, resends and queue drops are the sessions' MediaCounters).
    datagrams_sent: int = 0
    bytes_sent: int = 0
    send_errors: int = 0
    encode_errors: int = 0
    audio_chunks: int = 0
    audio_packets: int = 0
    audio_bytes: int = 0
    audio_encode_errors: int = 0
    #: Times ``--codec auto`` changed the codec, and the longest the encoder took to open anew, ms.
    codec_switches: int = 0
    codec_switch_open_max: float = 0.0
    encode_ms: deque[float] = field(default_factory=recent_samples)
    convert_ms: deque[float] = field(default_factory=recent_samples)
    render_ms: deque[float] = field(default_factory=recent_samples)

    def counters(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if not k.endswith("_ms")}

    def medians(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for name in ("encode_ms", "convert_ms", "render_ms"):
            values = getattr(self, name)
            out[f"{name}_median"] = statistics.median(values) if values else None
        return out


@dataclass(slots=True)
class StatusLine:
    """The host's periodic log line: rates since the previous one, and what steers the frame clock."""

    frames: int = 0
    bytes_encoded: int = 0
    at_s: float = 0.0

    def text(self, now: float, stats: HostStats, *, viewers: int, forced: int, skipped: int) -> str:
        dt = max(1e-6, now - self.at_s)
        recent = tail(stats.encode_ms, 120)
        line = (
            f"{(stats.frames_encoded - self.frames) / dt:.1f} fps, "
            f"{(stats.bytes_encoded - self.bytes_encoded) * 8 / dt / 1e6:.2f} Mbit/s encoded, "
            f"encode {statistics.median(recent) if recent else 0.0:.1f} ms, {viewers} viewer(s), "
            f"{forced} key frames forced, {skipped} skipped"
        )
        self.frames, self.bytes_encoded, self.at_s = stats.frames_encoded, stats.bytes_encoded, now
        return line


def phase_status(clock: FrameClock) -> str:
    if clock.leader is None and clock.policy == "leader":
        return "; frame clock free-running"
    steering = f"viewer {clock.leader}" if clock.policy == "leader" else "all viewers (sum)"
    return f"; frame clock locked to {steering} ({clock.controller.name}), rate {clock.rate_trim_ppm:+.0f} ppm"
