"""The options each encoder is opened with: the host's low-delay settings for x264, x265, SVT-AV1 and NVENC,
then the person's own (``host --encoder-params``).  Pure: a config in, libavcodec's option names out."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pyrofling.core.color import HDR10_MASTERING
from pyrofling.core.slices import EARLY_PICTURE_BYTES, SMALL_SLICE_BYTES

if TYPE_CHECKING:
    from pyrofling.server.encoder import EncoderConfig

#: x264's largest QP change from one row of macroblocks to the next (and one frame to the next) before it
#: encodes the row again; its default is 4.
X264_QP_STEP = 12


def encoder_options(cfg: EncoderConfig) -> dict[str, str]:
    """libavcodec's options for ``cfg``'s encoder."""
    bitrate = cfg.bitrate_kbits * 1000
    vbv_kbits = max(1, round(cfg.bitrate_kbits * cfg.vbv_frames / cfg.fps))
    if "nvenc" in cfg.encoder:
        return {
            "preset": "p1",
            "tune": "ll",
            "rc": "cbr",
            "zerolatency": "1",
            "delay": "0",
            "intra-refresh": "1",
            "forced-idr": "1",
        }
    elif cfg.encoder == "libsvtav1":
        # SVT-AV1 has no intra refresh: low delay (a picture out for each in), its real-time mode, CBR (the
        # only rate control it has for low delay) over a buffer of one frame or 20 ms; key frames on demand
        # only (a viewer that lost a picture asks for one, rate-limited as for H.264), none periodic. Preset 12
        # (11): ~10 ms a 720p frame on 2 cores. One temporal layer: layered, every other 540p picture had 35-54
        # levels of error in a moving tile and 720p never went under 4 Mbit/s (docs/streaming.md).
        return {
            "preset": cfg.preset if cfg.preset.isdigit() else "12",
            "svtav1-params": "pred-struct=1:rc=2:rtc=1:keyint=-1:hierarchical-levels=0"
            + (
                f":enable-hdr=1:mastering-display={HDR10_MASTERING.svt()}:content-light={HDR10_MASTERING.cll()}"
                if cfg.hdr10
                else ""
            )
            + _extra(cfg),
            "bufsize": str(max(vbv_kbits * 1000, bitrate // 50)),  # SVT-AV1 takes no less than 20 ms
        }
    elif cfg.encoder == "libx265":
        return {
            "preset": cfg.preset,
            "tune": "zerolatency",
            "forced-idr": "1",
            "x265-params": f"intra-refresh=1:ref=1:bframes=0:vbv-maxrate={cfg.bitrate_kbits}:"
            f"vbv-bufsize={vbv_kbits}:log-level=error"
            + (f":hdr10=1:master-display={HDR10_MASTERING.x26x()}:max-cll={HDR10_MASTERING.cll()}" if cfg.hdr10 else "")
            + _extra(cfg),
        }
    else:
        # The VBV goes in through libavcodec's own maxrate/bufsize: libavcodec re-applies them to x264 before
        # every frame, and x264 only takes a new bitrate while the VBV stays on (x264-params would be reset).
        return {
            "preset": cfg.preset,
            "tune": "zerolatency",
            "intra-refresh": "1",
            "forced-idr": "1",
            "refs": "1",
            "maxrate": str(bitrate),
            "bufsize": str(vbv_kbits * 1000),
            # A row of macroblocks whose bits would lift the QP more than qpstep (x264's default 4) above
            # the row before is encoded again: under a one-frame VBV with grain in the picture that happened
            # on most frames (the test scene: 4.3 ms a 720p frame on one CPU, 3.5 with 12, frames still
            # under the VBV's size, the same PSNR; IDRs and cuts too).  See docs/streaming.md.
            "x264-params": f"nal-hrd=none:qpstep={X264_QP_STEP}"
            + (f":mastering-display={HDR10_MASTERING.x26x()}:cll={HDR10_MASTERING.cll()}" if cfg.hdr10 else "")
            + (f":slice-max-size={SMALL_SLICE_BYTES}" if large_pictures(cfg) else "")
            + _extra(cfg),
        }


def large_pictures(cfg: EncoderConfig) -> bool:
    """Whether the pictures average ``EARLY_PICTURE_BYTES`` or more at the bitrate asked: viewers decode those
    from their first slices, so the host cuts them small (3-4 % more bits, no more CPU; docs/streaming.md)."""
    return cfg.bitrate_kbits * 1000 / 8 / cfg.fps >= EARLY_PICTURE_BYTES


_PARAM = re.compile(r"[a-z0-9][a-z0-9_-]*=[^:=\s]+")


def check_encoder_params(encoder: str, params: str) -> None:
    """Raises ValueError unless ``params`` is ``key=value[:key=value…]`` for an encoder that takes them."""
    if encoder not in ("libx264", "libx265", "libsvtav1"):
        raise ValueError(f"--encoder-params goes with libx264, libx265 or libsvtav1, not {encoder}")
    bad = [item for item in params.split(":") if not _PARAM.fullmatch(item)]
    if bad:
        raise ValueError(
            f"--encoder-params: {bad[0]!r} is not key=value; give the encoder's own options as "
            "key=value:key=value (e.g. min-cu-size=8:sao=1 for libx265)"
        )


def _extra(cfg: EncoderConfig) -> str:
    return f":{cfg.params}" if cfg.params else ""
