"""``host --codec auto``: the codecs this machine encodes in time at the stream's size, judged before streaming.

A codec whose encoder cannot keep up is given up while streaming too (:meth:`CodecChoice.encoded`), but only
after :data:`~pyrofling.core.host.codec_choice.PACE_FRAMES` late pictures: a viewer then sees a second of
them for each codec tried (at 1080p60 on a 16-CPU machine AV1 and then HEVC: freezes of up to 317 ms).  So
before the host starts, each codec but the last of the preference (H.264, the one every viewer decodes, is
kept whatever it costs) encodes a few pictures of the test scene at the stream's size and bitrate, and one
whose median is more than the same share of a frame is left out.  The scene's film grain (a third of the
picture) makes its pictures hard ones: a game's may well encode faster, and a codec left out here is not tried
later in the run.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from pyrofling.core.host.codec_choice import PACE_SHARE, keeps_pace, median_s
from pyrofling.core.scene import TestScene
from pyrofling.server.config import HostConfig
from pyrofling.server.encoder import EncoderConfig, VideoEncoder, encoder_for
from pyrofling.wire import VIDEO_CODEC_NAMES, VideoCodec

log = logging.getLogger(__name__)

#: Pictures each codec encodes to be judged (after the first: its key frame and the encoder's start).
PICTURES = 8


def encode_times(config: EncoderConfig, pictures: int = PICTURES) -> list[float]:
    """Seconds each of ``pictures`` pictures of the test scene took to encode with ``config`` (the first, a key
    frame as the encoder starts, not counted)."""
    scene = TestScene(config.width, config.height)
    encoder = VideoEncoder(config)
    times: list[float] = []
    try:
        for i in range(pictures + 1):
            frame = scene.render(i, 0)
            t0 = time.perf_counter()
            encoder.encode_array(frame, i * 1_000_000 // max(1, config.fps))
            if i:
                times.append(time.perf_counter() - t0)
    finally:
        encoder.close()
    return times


def codecs_that_keep_pace(config: HostConfig) -> HostConfig:
    """``config`` with the codecs of ``--codec auto`` that keep pace here (the encoder set to the first of them);
    unchanged without ``--codec auto``, with one codec to choose from, or a size the scene cannot draw."""
    codecs, enc = config.auto_codecs, config.encoder
    if len(codecs) < 2:
        return config
    try:
        TestScene(enc.width, enc.height)
    except ValueError:
        return config
    period_s = 1 / max(1, enc.fps)
    kept: list[VideoCodec] = []
    for codec in codecs[:-1]:
        try:
            times = encode_times(replace(enc, encoder=encoder_for(codec, enc.encoder)))
        except ValueError as exc:  # it does not open at these settings: left out
            log.info("--codec auto: %s left out: %s", VIDEO_CODEC_NAMES[codec], exc)
            continue
        if keeps_pace(times, period_s):
            kept.append(codec)
        else:
            log.info("--codec auto: %s takes %.1f ms a %dx%d picture here, more than the %.1f ms it may at %d fps: "
                     "left out", VIDEO_CODEC_NAMES[codec], median_s(times) * 1000, enc.width, enc.height,
                     PACE_SHARE * period_s * 1000, enc.fps)  # fmt: skip
    kept.append(codecs[-1])
    if tuple(kept) == codecs:
        return config
    return replace(config, auto_codecs=tuple(kept), encoder=replace(enc, encoder=encoder_for(kept[0], enc.encoder)))
