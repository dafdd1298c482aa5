"""Test tone, click detection, concealment fades and PCM packing (pure, numpy only)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyrofling.core.audio_signal import (
    CLICK_LEVEL,
    TONE_LEVEL,
    ClickDetector,
    ClickTone,
    fade_in,
    fade_out,
    fade_out_from,
    from_s16le,
    to_s16le,
)

RATE = 48_000


def render_seconds(tone: ClickTone, start_s: float, seconds: float, rate: float, chunk: int = 240) -> np.ndarray:
    blocks = []
    n = 0
    while n < seconds * rate:
        blocks.append(tone.render(start_s + n / rate, chunk, rate))
        n += chunk
    return np.concatenate(blocks)


def test_tone_clicks_on_whole_seconds_of_the_capture_clock() -> None:
    tone = ClickTone(2)
    audio = render_seconds(tone, 99.7, 2.0, RATE)
    onsets = ClickDetector(RATE // 4).feed(audio, 0)
    # Clicks at 100.0 and 101.0 s: 0.3 s and 1.3 s after the first frame.
    assert onsets == [round(0.3 * RATE), round(1.3 * RATE)]
    assert tone.clicks == 2
    assert np.abs(audio).max() == pytest.approx(CLICK_LEVEL)
    assert audio.shape[1] == 2 and np.array_equal(audio[:, 0], audio[:, 1])


def test_tone_is_continuous_across_chunks_and_follows_the_real_rate() -> None:
    rate = RATE * (1 + 500e-6)  # a clock 500 ppm fast: clicks land at the skewed sample positions
    tone = ClickTone(1, click_period_s=0.5)
    audio = render_seconds(tone, 0.1, 1.0, rate, chunk=97)
    quiet = audio[: round(0.39 * rate), 0]
    assert np.abs(np.diff(quiet)).max() < 2 * np.pi * 440 / rate * TONE_LEVEL * 1.01  # no seam between chunks
    onsets = ClickDetector(RATE // 4).feed(audio, 0)
    assert onsets == [int(np.ceil(0.4 * rate - 1e-9)), int(np.ceil(0.9 * rate - 1e-9))]


def test_click_detector_works_across_blocks_with_a_refractory_period() -> None:
    d = ClickDetector(100)
    block = np.zeros((60, 1), np.float32)
    block[50] = 0.9
    block[55] = -0.9
    assert d.feed(block, 1000) == [1050]
    nxt = np.zeros((60, 1), np.float32)
    nxt[10] = 0.9  # 1070: within 100 frames of 1050
    nxt[59] = 0.9  # 1119: still within
    assert d.feed(nxt, 1060) == []
    later = np.zeros((60, 1), np.float32)
    later[0] = 0.6
    assert d.feed(later, 1150) == [1150]
    assert d.feed(np.full((5, 1), 0.5, np.float32), 2000) == []  # below the threshold


def test_concealment_fades_from_the_last_sample_without_a_step() -> None:
    last = np.array([0.8, -0.4], np.float32)
    out = fade_out_from(last, 240, 120)
    assert out.shape == (240, 2) and out.dtype == np.float32
    steps = np.abs(np.diff(np.concatenate([last[None, :], out]), axis=0))
    assert steps.max() <= 0.8 / 120 + 1e-6  # the largest step is one slice of the ramp
    assert not out[120:].any()
    short = fade_out_from(last, 50, 120)  # shorter than the fade: a steeper ramp, still ending in silence
    assert short[-1, 0] == 0 and np.abs(np.diff(short[:, 0])).max() <= 0.8 / 50 + 1e-6
    assert fade_out_from(last, 0, 120).shape == (0, 2)


def test_fade_in_and_fade_out_in_place() -> None:
    block = np.ones((100, 2), np.float32)
    fade_in(block, 10)
    assert block[0, 0] == pytest.approx(0.1) and block[9, 1] == pytest.approx(1.0) and block[50, 0] == 1.0
    block = np.ones((4, 1), np.float32)
    fade_out(block)
    assert block[:, 0].tolist() == pytest.approx([0.75, 0.5, 0.25, 0.0])
    empty = np.zeros((0, 2), np.float32)
    fade_in(empty, 10)
    fade_out(empty)


def test_s16le_round_trip_and_clipping() -> None:
    frames = np.array([[0.0, 1.0], [-1.0, 0.5], [2.0, -3.0]], np.float32)
    data = to_s16le(frames)
    assert len(data) == 12
    assert np.frombuffer(data, "<i2").tolist() == [0, 32767, -32767, 16384, 32767, -32767]
    back = from_s16le(data, 2)
    assert back.dtype == np.float32 and back.shape == (3, 2)
    assert back[1, 1] == pytest.approx(0.5, abs=1e-4)


@pytest.mark.parametrize("length", [1, 2, 3, 5, 7])
def test_s16le_rejects_partial_frames(length: int) -> None:
    with pytest.raises(ValueError, match="not a whole number of 2-channel S16 frames"):
        from_s16le(b"\x00" * length, 2)


def test_s16le_rejects_zero_channels() -> None:
    with pytest.raises(ValueError):
        from_s16le(b"\x00\x00", 0)


@given(st.binary(max_size=4096), st.integers(min_value=1, max_value=2))
def test_s16le_fuzz(data: bytes, channels: int) -> None:
    try:
        out = from_s16le(data, channels)
    except ValueError:
        assert len(data) % (2 * channels)
        return
    assert out.shape == (len(data) // (2 * channels), channels)
    assert np.abs(out).max(initial=0.0) <= 1.0
