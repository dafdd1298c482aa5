"""HDR10: the PQ curve, the tone mapping an SDR screen gets, and the encoders' 10-bit BT.2020 PQ streams with their
mastering metadata, decoded back by the viewer's decoders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from av.sidedata.sidedata import Type as SideData

from pyrofling.client.codecs import VideoDecoder, luma
from pyrofling.client.pictures import ScreenPictures, is_hdr10_frame
from pyrofling.core.color import (
    AVCOL_PRI_BT2020,
    AVCOL_SPC_BT2020_NCL,
    AVCOL_TRC_SMPTE2084,
    HDR10_MASTERING,
    SDR_WHITE_NITS,
    ToneMapper,
    bt2390_eetf,
    is_hdr10,
    nits_to_pq,
    pq_to_nits,
    sdr_to_pq16,
)
from pyrofling.server.encoder import EncoderConfig, VideoEncoder, available_encoders
from pyrofling.server.muxing import StreamInfo
from pyrofling.server.recorder import Recorder
from pyrofling.wire import ColorProfile, VideoCodec

# -- the curves ------------------------------------------------------------------------------------------


def test_pq_is_st_2084() -> None:
    assert nits_to_pq(10_000) == pytest.approx(1.0)
    assert nits_to_pq(100) == pytest.approx(0.5081, abs=1e-4)  # ST 2084's table
    assert nits_to_pq(1000) == pytest.approx(0.7518, abs=1e-4)
    assert float(pq_to_nits(0.0)) == 0.0
    nits = np.geomspace(0.001, 10_000, 200)
    assert np.allclose(pq_to_nits(nits_to_pq(nits)), nits, rtol=1e-9)


def test_the_roll_off_keeps_what_fits_and_takes_the_sources_peak_to_the_targets() -> None:
    codes = np.linspace(0, 1, 2001)
    out = bt2390_eetf(codes, 1000, SDR_WHITE_NITS)
    assert np.all(np.diff(out) >= 0)  # never inverts an edge
    assert out[0] == 0.0
    assert float(pq_to_nits(bt2390_eetf(nits_to_pq(1000), 1000, 203))) == pytest.approx(203, rel=1e-6)
    dim = nits_to_pq(np.array([1.0, 20.0, 60.0]))  # below the knee: unchanged
    assert np.allclose(bt2390_eetf(dim, 1000, 203), dim)
    assert float(pq_to_nits(bt2390_eetf(nits_to_pq(400), 1000, 203))) < 203
    assert np.allclose(bt2390_eetf(dim, 100, 203), dim)  # a target that holds the source: the identity


def test_sdr_content_in_hdr10_comes_back_where_the_curve_leaves_it_alone() -> None:
    greys = np.arange(0, 176, 7, dtype=np.uint8)  # below the knee (about 90 nits, sRGB ~185)
    picture = np.stack([greys] * 3, axis=-1)[None]
    back = ToneMapper().to_srgb8(sdr_to_pq16(picture))[0]
    assert np.abs(back.astype(int) - picture[0].astype(int)).max() <= 1
    colours = np.array([[[180, 40, 30], [30, 150, 60], [40, 50, 170]]], np.uint8)  # saturated, not bright
    assert np.abs(ToneMapper().to_srgb8(sdr_to_pq16(colours)).astype(int) - colours).max() <= 2


def test_brighter_sources_show_brighter_and_every_code_value_maps() -> None:
    tone = ToneMapper()
    ramp = (np.arange(0, 65536, 16, dtype=np.uint16)[:, None] * np.ones(3, np.uint16))[None]
    out = tone.to_srgb8(ramp)[0, :, 0].astype(int)
    assert out.shape == (4096,) and np.all(np.diff(out) >= 0) and out[0] == 0 and out[-1] == 255
    rng = np.random.default_rng(7)
    noise = rng.integers(0, 65536, (64, 48, 3), dtype=np.uint16)
    mapped = tone.to_srgb8(noise)
    assert mapped.dtype == np.uint8 and mapped.shape == (64, 48, 3)


def test_the_profiles_that_are_hdr10_and_the_metadata_in_the_encoders_syntax() -> None:
    assert {p for p in ColorProfile if is_hdr10(p)} == {
        ColorProfile.BT2020_PQ_LIMITED_LEFT_420,
        ColorProfile.BT2020_PQ_FULL_CENTER_420,
        ColorProfile.BT2020_PQ_FULL_444,
    }
    # The BT.2020 display at 1,000 nits as x265's documentation writes it.
    assert HDR10_MASTERING.x26x() == "G(8500,39850)B(6550,2300)R(35400,14600)WP(15635,16450)L(10000000,1)"
    assert HDR10_MASTERING.cll() == "1000,400"


# -- the encoders and decoders ---------------------------------------------------------------------------

HDR10_ENCODERS = [e for e in ("libx265", "libsvtav1", "libx264") if e in available_encoders()]
CODECS = {"libx265": VideoCodec.H265, "libsvtav1": VideoCodec.AV1, "libx264": VideoCodec.H264}


def packed_grey(code: int, width: int = 64, height: int = 64) -> np.ndarray:
    word = code | code << 10 | code << 20 | 3 << 30
    return np.full((height, width), word, "<u4").view(np.uint8).reshape(height, width, 4)


@pytest.mark.parametrize("encoder", HDR10_ENCODERS)
def test_an_hdr10_source_is_encoded_10_bit_bt2020_pq_with_its_mastering_metadata(encoder: str) -> None:
    enc = VideoEncoder(EncoderConfig(encoder=encoder, width=64, height=64, fps=30, bitrate_kbits=500, threads=1))
    assert enc.color_profile == ColorProfile.BT709_FULL_CENTER_420
    released = []
    packets = []
    for n in range(4):
        packets += enc.encode_shared(
            packed_grey(600), n * 33_333, pixel_format="x2bgr10le", hdr10=True, on_read=lambda: released.append(1)
        )
    packets += enc.flush()
    assert enc.config.hdr10 and enc.pix_fmt == "yuv420p10le" and len(released) == 4
    assert enc.color_profile == ColorProfile.BT2020_PQ_FULL_CENTER_420
    decoder = VideoDecoder(CODECS[encoder], threads=1)
    frames = [f for p in packets for f in decoder.decode(p.data, p.pts_us)]
    assert frames and decoder.errors == 0
    frame = frames[-1]
    assert (frame.format.name, frame.colorspace, frame.color_primaries, frame.color_trc) == (
        "yuv420p10le", AVCOL_SPC_BT2020_NCL, AVCOL_PRI_BT2020, AVCOL_TRC_SMPTE2084,
    )  # fmt: skip
    assert is_hdr10_frame(frame)
    assert {SideData.MASTERING_DISPLAY_METADATA, SideData.CONTENT_LIGHT_LEVEL} <= {
        sd.type for sd in frames[0].side_data
    }
    y = np.frombuffer(memoryview(frame.planes[0]), "<u2").reshape(64, -1)[:, :64]
    assert abs(int(np.median(y)) - 600) <= 4  # grey keeps its code value (full range, R = G = B)
    assert abs(int(np.median(luma(frame)[:, :64])) - 150) <= 1  # the frame markers' 8 bits of it
    shown = np.frombuffer(ScreenPictures().rgb24(frame, 64, 64), np.uint8).reshape(64, 64, 3)
    grey16 = np.full((1, 1, 3), 600 << 6 | 600 >> 4, np.uint16)
    assert np.abs(shown.astype(int) - ToneMapper().to_srgb8(grey16).astype(int)).max() <= 3


def test_the_stream_follows_its_source_into_hdr10_and_back_with_a_key_frame_each_time() -> None:
    enc = VideoEncoder(EncoderConfig(encoder="libx265", width=64, height=64, fps=30, bitrate_kbits=500, threads=1))
    sdr = np.full((64, 64, 4), 128, np.uint8)
    decoder = VideoDecoder(VideoCodec.H265, threads=1)
    seen = []
    for n, (pixels, fmt, hdr10) in enumerate([(sdr, "bgra", False), (packed_grey(500), "x2bgr10le", True)] * 2):
        for packet in enc.encode_shared(pixels, n * 33_333, pixel_format=fmt, hdr10=hdr10):
            frames = decoder.decode(packet.data, packet.pts_us)
            seen += [(packet.idr, is_hdr10_frame(f), f.format.name.endswith("10le")) for f in frames]
    assert [s for s in seen if s[0]] == seen  # each change of colour starts with a key frame
    assert [s[1:] for s in seen] == [(False, False), (True, True)] * 2  # SDR in 8 bits, HDR10 in 10
    assert decoder.errors == 0


def test_an_sdr_picture_is_shown_as_swscale_gives_it() -> None:
    frame = av.VideoFrame.from_ndarray(np.full((16, 16, 3), (200, 30, 90), np.uint8), format="rgb24")
    yuv = frame.reformat(format="yuv420p", dst_colorspace=1, dst_color_range=2)
    shown = np.frombuffer(ScreenPictures().rgb24(yuv, 16, 16), np.uint8).reshape(16, 16, 3)
    assert not is_hdr10_frame(yuv) and np.abs(shown.astype(int) - (200, 30, 90)).max() <= 3


@pytest.mark.io
def test_a_recording_of_an_hdr10_stream_keeps_its_colour_and_mastering_metadata(tmp_path: Path) -> None:
    """The recorder copies the packets: the file's stream says BT.2020 PQ, its pictures carry the metadata."""
    enc = VideoEncoder(EncoderConfig(encoder="libx265", width=64, height=64, fps=30, bitrate_kbits=500, threads=1))
    recorder = Recorder(tmp_path / "hdr10.mkv", StreamInfo(width=64, height=64, fps=30, video_codec=VideoCodec.H265))
    recorder.start()
    try:
        for n in range(10):
            for packet in enc.encode_shared(packed_grey(600), n * 33_333, pixel_format="x2bgr10le", hdr10=True):
                recorder.push(("video", packet))
    finally:
        recorder.close()
    assert recorder.stats.failures == 0 and recorder.stats.video_packets == 10
    with av.open(str(tmp_path / "hdr10.mkv")) as container:
        stream = container.streams.video[0].codec_context
        assert (stream.pix_fmt, stream.colorspace, stream.color_primaries, stream.color_trc) == (
            "yuv420p10le", AVCOL_SPC_BT2020_NCL, AVCOL_PRI_BT2020, AVCOL_TRC_SMPTE2084,
        )  # fmt: skip
        frames = list(container.decode(video=0))
    assert len(frames) == 10
    side_data: Any = frames[0].side_data  # (PyAV's stubs say its items are str; they are SideData)
    assert {SideData.MASTERING_DISPLAY_METADATA, SideData.CONTENT_LIGHT_LEVEL} <= {sd.type for sd in side_data}
