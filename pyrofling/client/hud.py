"""The viewer window's overlay (V): what it says, and its graphs (pyglet shapes in a batch of their own)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import pyglet

HUD_KEYS = (
    ("frames_shown", "frames decoded"),
    ("packets_lost_video", "packets lost"),
    ("packets_recovered", "FEC recovered"),
    ("keyframe_requests", "key-frame requests"),
    ("reconnects", "reconnects"),
)
GRAPH_W, GRAPH_H = 300, 46
REFERENCE_FRAME_MS = 1000 / 60  # graphs are scaled in 60 Hz frames, like the reference's


def presentation_line(pres: dict[str, Any]) -> str:
    """How pictures are timed: free-running, or locked at which offset (and, automatic, for what margin)."""
    mode = pres.get("mode")
    if mode in (None, "free"):
        return "free-running: the newest picture at each refresh"
    if mode == "deadline":
        return f"waiting up to {pres.get('deadline_ms', 0):.1f} ms for each picture (not locked)"
    text = f"phase-locked, offset {pres.get('offset_ms', 0):+.1f} ms, deadline {pres.get('deadline_ms', 0):.1f} ms"
    auto = pres.get("auto_offset")
    if mode == "auto" and auto is not None:
        p99 = auto.get("p99_late_ms")
        found = f"margin {auto['margin_ms']:.1f} ms" + (f" for p99 lateness {p99:.1f} ms" if p99 is not None else "")
        text += f" (auto: {found})" if auto.get("learning") else " (auto: learning)"
    return text


def fps_text(s: dict[str, Any], fps: float) -> str:
    pres = s.get("presentation", {})
    hz = pres.get("refresh_hz")
    refresh = f" at {hz:.2f} Hz ({pres.get('refresh_clock')})" if hz else ""
    return f"{fps:.1f} fps presented{refresh}, received {s.get('received_mbits', 0):.2f} Mbit/s"


def hud_lines(s: dict[str, Any], params: Any, fps: float, audio: dict[str, Any] | None) -> list[str]:
    """The overlay's text from the viewer's live summary ``s``; ``params``: the stream's CODEC_PARAMETERS (None
    before it); ``audio``: the player's live figures (None: no audio)."""

    def ms(name: str) -> str:
        v = s.get(name)
        return "-" if v is None else f"{v:.1f} ms"

    pres = s.get("presentation", {})
    lines = []
    if params is not None:
        lines.append(f"{params.width}x{params.height} @ {params.frame_rate_num} fps")
    lines.append(fps_text(s, fps))
    if s.get("stream_rate"):
        lines.append(s["stream_rate"])
    security = s.get("security") or {}
    if security.get("text"):
        lines.append(security["text"])
    km = s.get("keyboard_mouse")
    if km is not None and km.get("available"):
        lines.append(
            "keyboard and mouse: pointer captured (Ctrl+Alt+Z lets go; Ctrl+Alt+V/F/Q for the window)"
            if km.get("captured")
            else "keyboard and mouse: click the picture to play with them"
        )
    lines.append(
        f"repeated {pres.get('repeated', 0)}, missed deadline {pres.get('missed_deadlines', 0)}, "
        f"dropped {pres.get('dropped', 0)}"
    )
    lines.append(presentation_line(pres))
    lines += [f"{label}: {s.get(k, 0)}" for k, label in HUD_KEYS]
    lines.append(f"decode {ms('decode_ms_median')}, capture->on screen {ms('glass_ms_median')}")
    lines.append(f"ping {ms('rtt_ms')}, longest freeze {s.get('max_freeze_ms', 0):.0f} ms")
    if audio is not None:
        if audio["error"]:
            lines.append(f"audio: {audio['error']}")
        elif audio["buffered_ms"] is not None:
            latency = "-" if audio["latency_ms"] is None else f"{audio['latency_ms']:.0f} ms"
            lines.append(
                f"audio {audio['buffered_ms']:.1f} ms buffered (target {audio['target_ms']:.0f}), speed "
                f"{audio['speed_ppm']:+.0f} ppm, underruns {audio['underruns']}, click latency {latency}"
            )
    pad = s.get("gamepad")
    if pad is not None:
        host_pad = f", {pad['host_pad']} on the host" if pad.get("host_pad") else ""
        lines.append(f"gamepad: {pad['pad'] or 'window keys'}{host_pad}, {pad['states_sent']} states sent")
    return lines


class HudGraphs:
    """150-sample graphs under the text, scaled in 60 Hz frames like the reference's HUD."""

    def __init__(self) -> None:
        self.batch = pyglet.graphics.Batch()
        self.shapes: list[Any] = []

    def update(self, series: list[tuple[str, list[float], float, float]], top: float) -> None:
        for shape in self.shapes:
            shape.delete()
        self.shapes = []
        for i, (name, values, low, high) in enumerate(series):
            self._graph(name, values, 10, top - (i + 1) * (GRAPH_H + 22), low, high)

    def _graph(self, name: str, values: Sequence[float], x0: float, y0: float, low: float, high: float) -> None:
        b = self.batch
        self.shapes.append(pyglet.shapes.Rectangle(x0, y0, GRAPH_W, GRAPH_H, color=(0, 0, 0, 150), batch=b))
        if low < 0 < high:  # the zero line
            zy = y0 + GRAPH_H * (0 - low) / (high - low)
            self.shapes.append(pyglet.shapes.Line(x0, zy, x0 + GRAPH_W, zy, color=(90, 90, 90), batch=b))
        avg = statistics.fmean(values) if values else 0.0
        self.shapes.append(
            pyglet.text.Label(
                f"{name}: {avg:.2f}" + ("" if high == 1.0 else " ms"),
                x=x0,
                y=y0 + GRAPH_H + 3,
                font_size=10,
                color=(200, 255, 200, 255),
                batch=b,
            )
        )
        if len(values) < 2:
            return
        step = GRAPH_W / max(1, len(values) - 1)
        points = []
        for j, v in enumerate(values):
            f = min(1.0, max(0.0, (v - low) / (high - low)))
            points.append((x0 + j * step, y0 + f * GRAPH_H))
        self.shapes.append(pyglet.shapes.MultiLine(*points, thickness=1.5, color=(80, 255, 80, 255), batch=b))
