"""``pyrofling bench codecs``: H.264, HEVC and AV1 with the host's encoder settings, at a set of bitrates.

For each codec, size and bitrate: the test scene (or the example game's pictures, ``content="game"``) encoded
by :class:`~pyrofling.server.encoder.VideoEncoder` (the host's low-delay settings: libx264 and libx265 with intra
refresh, libsvtav1 in its real-time low-delay mode), each packet decoded by the viewer's decoder, and every
picture measured against its source's: the luma PSNR. The game's pictures are RGBA, as a game presents them,
and go through the host's capture path (:meth:`~pyrofling.server.encoder.VideoEncoder.encode_shared`): their
colour conversion is part of the encode. Reported: the bitrate reached, encode median and 99th percentile, the
encoder's CPU a frame, the conversion's time and CPU (the game's), decode median, PSNR; and, per size, the
bitrate at which HEVC and AV1 reach H.264's PSNR at its reference bitrate (interpolated between the bitrates
measured, in log bitrate), as a share of H.264's.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Container, Iterator
from dataclasses import dataclass, replace
from typing import Any

import av
import numpy as np
import numpy.typing as npt
from av.video.reformatter import VideoReformatter

from pyrofling.capture.example_game import NumpyCanvas, World
from pyrofling.client.codecs import VideoDecoder, luma
from pyrofling.core.input.pad import STICK_MAX, PadState
from pyrofling.core.scene import TestScene
from pyrofling.server.encoder import EncodedVideo, EncoderConfig, VideoEncoder
from pyrofling.wire import GamepadButton

#: Codec → the host's encoder for it.
ENCODERS = {"h264": "libx264", "hevc": "libx265", "av1": "libsvtav1"}
#: Per height: the bitrates tried (kbit/s), and H.264's reference among them.
BITRATES = {720: ((2000, 4000, 6000, 10000), 10000), 1080: ((4000, 8000, 12000, 20000), 20000)}
#: The example game (flat shapes on black) needs far fewer bits for the same PSNR: lower rates around the same
#: reference, so the others' share of H.264's bits falls within what was measured.
GAME_BITRATES = {720: ((500, 1000, 2000, 4000, 10000), 10000), 1080: ((1000, 2000, 4000, 8000, 20000), 20000)}
CONTENTS = ("scene", "game")


class ScenePictures:
    """The test scene as the host's scene source draws it (yuv420p); ``rows``: its structured rows (no film grain
    or counter), for a second PSNR."""

    #: What :meth:`picture` gives: what the encoder takes, so nothing is converted (the host's scene path).
    pixel_format = "yuv420p"

    def __init__(self, width: int, height: int, fps: int) -> None:
        self._scene = TestScene(width, height)
        self.rows: list[tuple[int, int]] | None = self._scene.structured_rows()
        #: The CPU the last :meth:`reference` took to convert its picture (none here).
        self.convert_cpu_s: float | None = None

    def picture(self, index: int, pts_us: int) -> npt.NDArray[np.uint8]:
        return self._scene.render(index, pts_us)

    def reference(self, picture: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
        """The yuv420p picture the decoded one is measured against: the scene's own."""
        return picture


class GamePictures:
    """The example game (its numpy renderer: the GL one's grid and balls) with the player's ball steered round in
    circles and A pressed each second: RGBA, as a game presents it, for the encoder to convert as the host does
    (BT.709, full range), its conversion part of each picture's encode."""

    rows: list[tuple[int, int]] | None = None
    pixel_format = "rgba"

    def __init__(self, width: int, height: int, fps: int) -> None:
        self._world, self._canvas, self._fps = World(width, height), NumpyCanvas(width, height), fps
        self._rgba = np.zeros((height, width, 4), np.uint8)
        # One converter kept, as the encoder keeps its own (a new one sets swscale up again: ~1 ms a 720p picture).
        self._reformatter = VideoReformatter()
        self.convert_cpu_s: float | None = None

    def picture(self, index: int, pts_us: int) -> npt.NDArray[np.uint8]:
        turn = 2 * math.pi * index / (3 * self._fps)  # a circle every 3 s
        pad = PadState(
            buttons=int(GamepadButton.SOUTH) if index % self._fps == 0 else 0,
            lx=round(STICK_MAX * 0.8 * math.cos(turn)),
            ly=round(STICK_MAX * 0.8 * math.sin(turn)),
        )
        self._world.step(pad, 1 / self._fps)
        self._canvas.draw(self._rgba, self._world)
        return self._rgba.copy()

    def reference(self, picture: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
        """The picture in yuv420p as the encoder converts it (the same swscale call, its CPU in
        :attr:`convert_cpu_s`): what the decoded picture is measured against."""
        cpu = time.process_time()
        frame = self._reformatter.reformat(av.VideoFrame.from_numpy_buffer(picture, format="rgba"),
                                           format="yuv420p", dst_colorspace=1, dst_color_range=2)  # fmt: skip
        self.convert_cpu_s = time.process_time() - cpu
        return np.ascontiguousarray(frame.to_ndarray())


#: Pictures before measuring: the first key frame and the rate control settle.
SETTLE = 10


def psnr(decoded: np.ndarray, source: np.ndarray, rows: list[tuple[int, int]] | None = None) -> float:
    """Luma PSNR, over ``rows`` only where given (the scene's structured rows: without its film grain, which is
    noise by design, or its frame counter)."""
    spans = rows if rows is not None else [(0, source.shape[0])]
    diff = np.concatenate([(decoded[a:b].astype(np.int32) - source[a:b].astype(np.int32)).ravel() for a, b in spans])
    mse = float(np.mean(diff * diff))
    return 99.0 if mse == 0 else 10 * math.log10(255 * 255 / mse)


@dataclass(frozen=True, slots=True)
class Passage:
    """One picture of the test scene through the host's encoder and the viewer's decoder."""

    index: int
    packets: list[EncodedVideo]
    encode_cpu_s: float  # the process's CPU while encoding it (the encoder's threads too; its conversion, if any)
    #: The conversion to yuv420p alone, for pictures that need one (the game's RGBA): its wall time in the encode,
    #: and its CPU when the same swscale call made the picture's reference.
    convert_s: float | None
    convert_cpu_s: float | None
    decode_s: list[float]  # each packet's decode
    #: Each picture the decoder gave back meanwhile: its luma, cut to the stream's size, and the scene's.
    decoded: list[tuple[np.ndarray, np.ndarray]]


def through_codec(
    encoder: VideoEncoder, frames: int, *, force: Container[int] = (), content: str = "scene"
) -> Iterator[Passage]:
    """The scene's (or the game's) pictures ``0 .. frames - 1`` through ``encoder`` (an IDR forced at the indices
    in ``force``) and the viewer's decoder for its codec, a :class:`Passage` each; the encoder's stream is ended
    after."""
    cfg = encoder.config
    decoder = VideoDecoder(cfg.video_codec)
    scene = pictures_of(content, cfg.width, cfg.height, cfg.fps)
    sources: dict[int, np.ndarray] = {}
    try:
        for i in range(frames):
            pts = i * 1_000_000 // cfg.fps
            picture = scene.picture(i, pts)
            sources[pts] = scene.reference(picture)[: cfg.height].copy()
            converted = scene.pixel_format != ScenePictures.pixel_format  # what a source of the host's draws
            cpu = time.process_time()
            if converted:  # a game's pixels, as the host's capture path hands them over
                packets = encoder.encode_shared(
                    picture, pts, pixel_format=scene.pixel_format, force_keyframe=i in force
                )
            else:
                packets = encoder.encode_array(picture.copy(), pts, force_keyframe=i in force)
            encode_cpu_s = time.process_time() - cpu
            convert_s = max((p.convert_s for p in packets), default=None) if converted else None
            decode_s, decoded = [], []
            for packet in packets:
                t = time.perf_counter()
                pictures = decoder.decode(packet.data, packet.pts_us)
                decode_s.append(time.perf_counter() - t)
                for frame in pictures:
                    source = sources.pop(int(frame.pts), None) if frame.pts is not None else None
                    if source is not None:
                        decoded.append((luma(frame)[: cfg.height, : cfg.width], source[:, : cfg.width]))
            yield Passage(i, packets, encode_cpu_s, convert_s, scene.convert_cpu_s, decode_s, decoded)
    finally:
        encoder.close()


def pictures_of(content: str, width: int, height: int, fps: int) -> ScenePictures | GamePictures:
    if content not in CONTENTS:
        raise ValueError(f"unknown content {content!r}: choose one of {', '.join(CONTENTS)}")
    return GamePictures(width, height, fps) if content == "game" else ScenePictures(width, height, fps)


@dataclass(frozen=True, slots=True)
class CodecSettings:
    """A codec's settings other than the host's defaults (``bench codecs --preset``/``--params``)."""

    preset: str | None = None
    params: str = ""

    def config(self, codec: str, **fields: Any) -> EncoderConfig:
        config = EncoderConfig(encoder=ENCODERS[codec], params=self.params, **fields)
        if self.preset is not None:
            config = replace(config, preset=self.preset)
        config.check()
        return config

    def label(self) -> str:
        return " ".join(x for x in (self.preset and f"preset {self.preset}", self.params) if x) or "the host's"


def measure(
    codec: str,
    width: int,
    height: int,
    kbits: int,
    *,
    frames: int = 120,
    fps: int = 60,
    content: str = "scene",
    settings: CodecSettings = CodecSettings(),
) -> dict[str, Any]:
    config = settings.config(codec, width=width, height=height, fps=fps, bitrate_kbits=kbits)
    rows = pictures_of(content, width, height, fps).rows
    encode_ms: list[float] = []
    decode_ms: list[float] = []
    quality: list[float] = []
    structured: list[float] = []
    sizes: list[int] = []
    convert_ms: list[float] = []
    convert_cpu_s = 0.0
    cpu_s = 0.0
    for step in through_codec(VideoEncoder(config), frames, content=content):
        if step.index < SETTLE:
            continue
        cpu_s += step.encode_cpu_s
        if step.convert_s is not None:
            convert_ms.append(step.convert_s * 1000)
        convert_cpu_s += step.convert_cpu_s or 0.0
        encode_ms += [p.encode_s * 1000 for p in step.packets]
        sizes += [len(p.data) for p in step.packets]
        decode_ms += [s * 1000 for s in step.decode_s]
        for decoded, source in step.decoded:
            quality.append(psnr(decoded, source))
            if rows is not None:
                structured.append(psnr(decoded, source, rows))
    measured = max(1, frames - SETTLE)
    ordered = sorted(encode_ms)
    return {
        "codec": codec,
        "content": content,
        "encoder": config.encoder,
        "preset": config.preset,
        "params": config.params,
        "width": width,
        "height": height,
        "bitrate_kbits": kbits,
        "reached_kbits": sum(sizes) * 8 * fps / measured / 1000,
        "encode_ms_median": statistics.median(encode_ms) if encode_ms else None,
        "encode_ms_p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else None,
        "encode_cpu_ms": 1000 * cpu_s / measured,
        # A game's RGBA converted to the encoder's yuv420p before each encode: in encode_cpu_ms, not encode_ms_*.
        "convert_ms_median": statistics.median(convert_ms) if convert_ms else None,
        "convert_cpu_ms": 1000 * convert_cpu_s / measured if convert_ms else None,
        "decode_ms_median": statistics.median(decode_ms) if decode_ms else None,
        "psnr_db": statistics.mean(quality) if quality else None,
        "psnr_structured_db": statistics.mean(structured) if structured else None,
        "pictures_measured": len(quality),
    }


def bits_for_quality(rows: list[dict[str, Any]], target_db: float, key: str = "psnr_db") -> float | None:
    """The bitrate (kbit/s, reached) at which these rows' PSNR (``key``) reaches ``target_db``, interpolated in
    log bitrate between the two measured around it (None: outside what was measured)."""
    points = sorted((r["reached_kbits"], r[key]) for r in rows if r[key] is not None)
    for (k0, q0), (k1, q1) in itertools.pairwise(points):
        if min(q0, q1) <= target_db <= max(q0, q1) and q1 != q0:
            share = (target_db - q0) / (q1 - q0)
            return math.exp(math.log(k0) + share * (math.log(k1) - math.log(k0)))
    return None


#: What a GE run reports, from ``bench stream``'s row.
GE_KEYS = ("good_refreshes_pct", "stale_refreshes", "corrupt_refreshes", "longest_freeze_ms", "max_freeze_ms",
           "packets_lost_after_fec", "frames_skipped_by_host")  # fmt: skip


def through_ge_bursts(
    codec: str, width: int, height: int, kbits: int, duration_s: float, settings: CodecSettings = CodecSettings()
) -> dict[str, Any]:
    """The codec streamed through the Gilbert–Elliott bursts for ``duration_s``: ``pyrofling bench stream --ge``
    as a person runs it, a process of its own (the host, netsim and the viewer in theirs), with this codec's
    settings; its row's refresh and freeze figures."""
    config = settings.config(codec, width=width, height=height, bitrate_kbits=kbits)
    argv = [sys.executable, "-m", "pyrofling", "bench", "stream", "--ge", "--json", "--duration", f"{duration_s:g}",
            "--width", str(width), "--height", str(height), "--bitrate-kbits", str(kbits),
            "--encoder", config.encoder, "--preset", config.preset]  # fmt: skip
    if config.params:
        argv += ["--encoder-params", config.params]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=duration_s + 120)
    if proc.returncode != 0:
        raise RuntimeError(f"bench stream --ge for {codec} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    row = json.loads(proc.stdout)["rows"][0]
    return {"codec": codec, "width": width, "height": height, "bitrate_kbits": kbits, "duration_s": duration_s,
            **{k: row.get(k) for k in GE_KEYS}}  # fmt: skip


def run_codecs_bench(
    codecs: tuple[str, ...] = ("h264", "hevc", "av1"),
    heights: tuple[int, ...] = (720, 1080),
    *,
    frames: int = 120,
    content: str = "scene",
    settings: dict[str, CodecSettings] | None = None,
    ge_s: float = 0.0,
    progress: Any = None,
) -> dict[str, Any]:
    say = progress or (lambda _line: None)
    chosen = {codec: (settings or {}).get(codec, CodecSettings()) for codec in codecs}
    rows: list[dict[str, Any]] = []
    equal: list[dict[str, Any]] = []
    bursts: list[dict[str, Any]] = []
    # The streams first, each in processes of its own, while this one has run no encoder yet.
    for height, codec in itertools.product(heights if ge_s > 0 else (), codecs):
        width, reference = height * 16 // 9, BITRATES[height][1]
        say(f"{codec} {width}x{height} at {reference} kbit/s through the GE bursts for {ge_s:g} s ...")
        bursts.append(through_ge_bursts(codec, width, height, reference, ge_s, chosen[codec]))
    for height in heights:
        width = height * 16 // 9
        bitrates, reference = (GAME_BITRATES if content == "game" else BITRATES)[height]
        for codec in codecs:
            for kbits in bitrates:
                say(f"{codec} {width}x{height} at {kbits} kbit/s ({content}) ...")
                rows.append(measure(codec, width, height, kbits, frames=frames, content=content,
                                    settings=chosen[codec]))  # fmt: skip
        base = next((r for r in rows if r["codec"] == "h264" and r["height"] == height
                     and r["bitrate_kbits"] == reference), None)  # fmt: skip
        if base is None:
            continue
        for codec in codecs:
            if codec == "h264":
                continue
            mine = [r for r in rows if r["codec"] == codec and r["height"] == height]
            for key in ("psnr_db", "psnr_structured_db"):
                if base[key] is None:
                    continue
                needed = bits_for_quality(mine, base[key], key)
                equal.append({"codec": codec, "height": height, "measure": key, "h264_kbits": base["reached_kbits"],
                              "h264_db": base[key], "kbits": needed,
                              "share": needed / base["reached_kbits"] if needed is not None else None})  # fmt: skip
    named = {codec: chosen[codec].label() for codec in codecs}
    return {"frames": frames, "content": content, "settings": named, "rows": rows, "equal_quality": equal,
            "ge_bursts": bursts}  # fmt: skip


def _f(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_table(result: dict[str, Any]) -> str:
    head = (
        f"{'codec':<6}{'size':>11}{'kbit/s':>8}{'reached':>9}{'encode med':>12}{'p99':>8}{'CPU/frame':>11}"
        f"{'convert (CPU)':>16}{'decode med':>12}{'PSNR dB':>9}{'no grain':>10}"
    )
    lines = [head, "-" * len(head)]
    for r in result["rows"]:
        convert = "-"
        if r.get("convert_ms_median") is not None:
            convert = f"{r['convert_ms_median']:.1f} ({_f(r.get('convert_cpu_ms'), '.1f')}) ms"
        lines.append(
            f"{r['codec']:<6}{str(r['width']) + 'x' + str(r['height']):>11}{r['bitrate_kbits']:>8}"
            f"{_f(r['reached_kbits'], '.0f'):>9}{_f(r['encode_ms_median'], '.1f') + ' ms':>12}"
            f"{_f(r['encode_ms_p99'], '.1f') + ' ms':>8}{_f(r['encode_cpu_ms'], '.1f') + ' ms':>11}"
            f"{convert:>16}{_f(r['decode_ms_median'], '.1f') + ' ms':>12}{_f(r['psnr_db'], '.2f'):>9}"
            f"{_f(r['psnr_structured_db'], '.2f'):>10}"
        )
    for e in result["equal_quality"]:
        lines.append(
            f"{e['codec']} at {e['height']}p reaches H.264's {e['h264_db']:.2f} dB "
            f"{'(the whole picture)' if e['measure'] == 'psnr_db' else '(without the grain)'} "
            f"({e['h264_kbits']:.0f} kbit/s) "
            f"at {_f(e['kbits'], '.0f')} kbit/s: {_f(None if e['share'] is None else 100 * e['share'], '.0f')} % of "
            "H.264's bits" + ("" if e["kbits"] is not None else " (outside the bitrates measured)")
        )
    for b in result.get("ge_bursts", []):
        lines.append(
            f"{b['codec']} {b['width']}x{b['height']} at {b['bitrate_kbits']} kbit/s through the GE bursts "
            f"({b['duration_s']:g} s, the test scene): {_f(b['good_refreshes_pct'], '.2f')} % good refreshes "
            f"({b['stale_refreshes']} stale, {b['corrupt_refreshes']} corrupt), longest freeze "
            f"{_f(b['longest_freeze_ms'], '.0f')} ms, {b['packets_lost_after_fec']} packets lost after repair, "
            f"{b['frames_skipped_by_host']} pictures the host skipped"
        )
    game = result.get("content") == "game"
    changed = {codec: label for codec, label in result.get("settings", {}).items() if label != "the host's"}
    if changed:
        lines.append("settings other than the host's: " + "; ".join(f"{c} {label}" for c, label in changed.items()))
    lines.append(
        f"{result['frames']} pictures of {'the example game' if game else 'the test scene'} a case (the first "
        f"{SETTLE} left out); encode: the host's encoder settings (but those named above), one call a picture; "
        "CPU/frame: the process's CPU while encoding (its threads too); PSNR: luma against the source's own picture"
        + (
            " (its RGBA converted as the host converts a game's: BT.709, full range); convert: that conversion's "
            "median time before the encode and its CPU a frame (in CPU/frame, not in the encode's times)"
            if game
            else ", whole and over its rows without film grain or the counter"
        )
    )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: str) -> None:
    """PSNR against the bitrate reached, a panel per size, a line per codec; whole picture solid, without the
    grain dashed (needs matplotlib)."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heights = sorted({r["height"] for r in result["rows"]})
    fig, axes = plt.subplots(1, len(heights), figsize=(6.5 * len(heights), 4.5), squeeze=False)
    for ax, height in zip(axes[0], heights, strict=True):
        for codec in dict.fromkeys(r["codec"] for r in result["rows"]):
            rows = sorted((r for r in result["rows"] if r["codec"] == codec and r["height"] == height),
                          key=lambda r: r["reached_kbits"])  # fmt: skip
            kbits = [r["reached_kbits"] / 1000 for r in rows]
            (line,) = ax.plot(kbits, [r["psnr_db"] for r in rows], "o-", label=f"{codec}, whole picture")
            ax.plot(kbits, [r["psnr_structured_db"] for r in rows], "s--", color=line.get_color(),
                    label=f"{codec}, without the grain")  # fmt: skip
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.xaxis.set_minor_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("bitrate reached (Mbit/s)")
        ax.set_ylabel("luma PSNR (dB)")
        ax.set_title(f"{height}p60, {'the example game' if result.get('content') == 'game' else 'the test scene'}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
