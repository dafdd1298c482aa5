"""``pyrofling bench keyframes``: how sharp a forced IDR is, at each size and bitrate.

Every viewer gets every IDR the host forces, whoever asked for it (a player's loss, a browser starting, a
spectator through Janus): one encode. The VBV holds an IDR to one frame's bits, so it is never late; what it can
cost is sharpness. This encodes the test scene with the host's encoder settings, forces an IDR every ``every``
frames, decodes each picture and measures it against the scene's own rendering as the players' judge does (the
worst tile's mean luma error, :mod:`pyrofling.core.viewer.picture_quality`): an IDR, the picture after it, and
the pictures in between, against the judge's clean threshold.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any

from pyrofling.bench.codecs import through_codec
from pyrofling.core.scene import TestScene
from pyrofling.core.viewer.picture_quality import CLEAN_TILE_ERROR, tile_error
from pyrofling.server.encoder import EncoderConfig, VideoEncoder

#: (width, height, kbit/s): the spectators bench's default, 360p and 720p at the bitrates people stream them.
DEFAULT_CASES = ((320, 180, 800), (640, 360, 2000), (640, 360, 3000), (1280, 720, 6000), (1280, 720, 10000))
#: Pictures before the first forced IDR: the stream's own first IDR and intra refresh settle.
SETTLE_FRAMES = 40


def parse_case(text: str) -> tuple[int, int, int]:
    """``WIDTHxHEIGHT@KBITS`` (e.g. ``640x360@2000``)."""
    try:
        size, kbits = text.split("@")
        width, height = size.lower().split("x")
        case = int(width), int(height), int(kbits)
    except ValueError:
        raise ValueError(f"{text!r}: give WIDTHxHEIGHT@KBITS, e.g. 640x360@2000") from None
    if min(case) <= 0 or case[0] % 2 or case[1] % 2:
        raise ValueError(f"{text!r}: even width and height and a positive bitrate")
    return case


def measure(
    width: int, height: int, kbits: int, *, fps: int = 60, idrs: int = 19, every: int = 20, threads: int | None = None
) -> dict[str, Any]:
    """Encode and decode ``SETTLE_FRAMES + idrs * every`` pictures of the scene, an IDR forced every ``every``;
    ``threads``: the encoder's slice threads (None: the host's default)."""
    config = EncoderConfig(width=width, height=height, fps=fps, bitrate_kbits=kbits)
    encoder = VideoEncoder(config if threads is None else replace(config, threads=threads))
    rows = TestScene(width, height).structured_rows()
    frames = SETTLE_FRAMES + idrs * every
    forced = set(range(SETTLE_FRAMES, frames, every))
    errors: dict[int, float] = {}
    sizes: dict[int, int] = {}
    for step in through_codec(encoder, frames, force=forced):
        sizes[step.index] = sum(len(p.data) for p in step.packets)
        for decoded, source in step.decoded:
            errors[step.index] = tile_error(decoded, source, rows)
    idr = [errors[i] for i in sorted(forced) if i in errors]
    after = [errors[i + 1] for i in sorted(forced) if i + 1 in errors]
    between = [
        e for i, e in errors.items() if i >= SETTLE_FRAMES - every // 2 and i not in forced and i - 1 not in forced
    ]
    budget = kbits * 1000 / 8 / fps
    return {
        "width": width,
        "height": height,
        "bitrate_kbits": kbits,
        "idrs": len(idr),
        "idr_error_median": statistics.median(idr) if idr else None,
        "idr_error_max": max(idr, default=None),
        "idrs_not_clean": sum(e > CLEAN_TILE_ERROR for e in idr),
        "after_error_max": max(after, default=None),
        "after_not_clean": sum(e > CLEAN_TILE_ERROR for e in after),
        "between_error_median": statistics.median(between) if between else None,
        "between_error_max": max(between, default=None),
        "idr_size_of_budget_max": max(sizes[i] for i in forced) / budget,
    }


def run_keyframes_bench(
    cases: tuple[tuple[int, int, int], ...] = DEFAULT_CASES, *, idrs: int = 19, progress: Any = None
) -> dict[str, Any]:
    say = progress or (lambda _line: None)
    rows = []
    for width, height, kbits in cases:
        say(f"{width}x{height} at {kbits} kbit/s: {idrs} IDRs ...")
        rows.append(measure(width, height, kbits, idrs=idrs))
    return {"threshold": CLEAN_TILE_ERROR, "rows": rows}


def format_table(result: dict[str, Any]) -> str:
    def cell(value: float | None, spec: str = ".1f") -> str:
        return "-" if value is None else format(value, spec)

    lines = [
        f"{'stream':<22}{'IDR error med':>14}{'max':>7}{'not clean':>11}{'next max':>10}{'not clean':>11}"
        f"{'between med':>13}{'max':>7}{'IDR size/frame':>16}"
    ]
    for r in result["rows"]:
        lines.append(
            f"{r['width']}x{r['height']} {r['bitrate_kbits']} kbit/s".ljust(22)
            + f"{cell(r['idr_error_median']):>14}{cell(r['idr_error_max']):>7}"
            f"{r['idrs_not_clean']:>8}/{r['idrs']:<2}{cell(r['after_error_max']):>10}{r['after_not_clean']:>8}/"
            f"{r['idrs']:<2}{cell(r['between_error_median'], '.2f'):>13}{cell(r['between_error_max']):>7}"
            f"{cell(r['idr_size_of_budget_max'], '.2f'):>16}"
        )
    lines.append(
        f"error: the worst 64x64 tile's mean luma error against the scene, as the players' judge reads it (clean up to "
        f"{result['threshold']:g}); next: the picture after each IDR; between: the others; IDR size/frame: the "
        f"largest IDR against bitrate/fps (the VBV's one frame)"
    )
    return "\n".join(lines)
