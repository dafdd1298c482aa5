"""Audio through a real audio clock: a JACK dummy server started by the test, played into with sounddevice.

Also a real host and viewer with audio over loopback.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import time
from collections.abc import Iterator

import numpy as np
import pytest

from pyrofling.bench.jack import JackUnavailable, dummy_jack
from pyrofling.bench.latency import cpu_shares, machine_cpu
from pyrofling.client.audio import AudioPlayer, AudioPlayerConfig
from pyrofling.client.audio.devices import reinitialize_portaudio
from pyrofling.client.viewer import Viewer, ViewerConfig
from pyrofling.core.viewer.audio_control import MAX_TRIM
from pyrofling.core.viewer.clock_sync import HostClock
from pyrofling.server.audio import AudioConfig, AudioEncoder, DeviceSource, ToneSource
from pyrofling.server.encoder import EncoderConfig
from pyrofling.server.host import Host, HostConfig
from pyrofling.wire import AudioCodec, KickFlags

RATE = 48_000
PERIOD_S = 256 / RATE


@pytest.fixture(scope="module")
def jack() -> Iterator[str]:
    if shutil.which("jackd") is None:
        pytest.skip("jackd is not installed (scripts/setup installs Debian's jackd2)")
    try:
        with dummy_jack(rate=RATE, period=256) as name:
            reinitialize_portaudio()
            yield name
    except JackUnavailable as exc:
        pytest.skip(str(exc))


def stream_tone(
    player: AudioPlayer, seconds: float, *, skew_ppm: float = 0.0, pause: tuple[float, float] = (0, 0)
) -> None:
    """The host's tone source and raw encoder, in this process, into the player; ``pause`` drops a stretch."""
    cfg = AudioConfig(skew_ppm=skew_ppm)
    enc = AudioEncoder(cfg, RATE)
    clock = HostClock(0.0)  # same machine, same clock
    start = time.monotonic()

    def sink(chunk: object) -> None:
        t = time.monotonic() - start
        if pause[0] <= t < pause[0] + pause[1]:
            return  # a network stall: nothing arrives, nothing is reported lost
        for p in enc.encode(chunk):  # type: ignore[arg-type]
            player.packet(p.data, p.pts_us, clock)

    source = ToneSource(cfg)
    player.configure(int(AudioCodec.RAW_S16LE), RATE, 2)
    source.start(sink)
    try:
        time.sleep(seconds)
    finally:
        source.close()


def test_playback_holds_the_target_on_a_real_audio_clock(jack: str) -> None:
    # A real clock on a shared 2-core machine: a run that a neighbour's burst of work disturbed is measured
    # again, up to three runs (a regression fails them all; every failed run's numbers, with the share of the
    # machine's CPU its hypervisor took meanwhile, are kept in the message).
    problems = []
    for _ in range(3):
        before = machine_cpu()
        problem = _playback_problem()
        if problem is None:
            return
        steal = cpu_shares(before, machine_cpu())["machine_steal_pct"]
        problems.append(f"{problem}, {steal if steal is not None else float('nan'):.0f} % stolen")
    if all(p.startswith(_SLOW_CLOCK) for p in problems):
        pytest.skip("; ".join(problems))
    pytest.fail("; ".join(problems))


#: How a run starts its problem when JACK's dummy driver, starved of CPU, lost time: its "clock" then ran further
#: from the source's than any sound card's (past what the player may trim, or in fits), and holding the target was
#: not on trial.
_SLOW_CLOCK = "JACK's dummy clock"
SKEW_PPM = 500


def _playback_problem() -> str | None:
    """Play 8 s of a tone from a source 500 ppm fast into JACK; what was wrong, or None."""
    player = AudioPlayer(AudioPlayerConfig(target_s=0.030))
    try:
        stream_tone(player, 8.0, skew_ppm=SKEW_PPM)
        ring = player.ring
        underruns = ring.underruns if ring else -1
        samples = list(player.readings.samples)
        callbacks = ring.records[: min(ring.callbacks, len(ring.records)), 3].copy() if ring else np.zeros(0)
    finally:
        player.close()
    assert player.error is None, player.error
    assert player.device_name is not None and "JACK" in player.device_name
    settled = [b for t, b, _s in samples if t >= 4.0]
    speeds = [s for t, _b, s in samples if t >= 4.0]
    if underruns != 0 or player.playout.primes != 1 or len(settled) <= 500:
        return f"{underruns} underruns, {player.playout.primes} primes, {len(settled)} settled readings"
    # Held at the target: half the readings within 2 ms, 95 % within one device period and a millisecond.
    # (A reading taken just as the device takes its next block is a whole period off; on a loaded 2-core
    # machine, with the feeding thread waking late, more readings land there.)
    dev = sorted(abs(b - 30.0) for b in settled)
    period_ms = PERIOD_S * 1000
    median, p95 = dev[len(dev) // 2], dev[int(0.95 * (len(dev) - 1))]
    if median > 2.0 or p95 > period_ms + 1.0:
        # The device's clock, past its start-up: blocks it asked for per second of ours, and how many of its
        # calls came more than half a period late, and its longest stall (a sound card's: none and none; a
        # starved dummy driver's: a few %, stalls of several periods, and it never catches up, so the buffer it
        # left high is still draining when the readings are judged).
        steady = callbacks[len(callbacks) // 10 :]
        device_speed = (len(steady) - 1) * PERIOD_S / (steady[-1] - steady[0])
        gaps = np.diff(steady) / PERIOD_S
        late, stall = float(np.mean(gaps > 1.5)), float(gaps.max())
        if abs((1 + SKEW_PPM * 1e-6) / device_speed - 1) > 0.8 * MAX_TRIM or late > 0.01 or stall > 3:
            # Not a clock the player is meant to follow: it must still keep the buffer under its skip threshold.
            ceiling_ms = (0.030 + AudioPlayerConfig().max_excess_s) * 1000 + 2 * period_ms  # a block, a reading
            assert max(settled) <= ceiling_ms, f"the buffer reached {max(settled):.1f} ms, over {ceiling_ms:.1f}"
            return (
                f"{_SLOW_CLOCK} ran {(device_speed - 1) * 100:+.2f} % (the player trims ±{MAX_TRIM * 100:.1f} %), "
                f"{late * 100:.1f} % of its calls late, once by {stall:.1f} periods"
            )
        return f"off the target by {median:.1f} ms (median), {p95:.1f} ms (95th percentile)"
    if max(abs(s - 1) for s in speeds) > 0.005 or statistics.mean(speeds) <= 1.0:
        return f"speed {min(speeds):.4f}..{max(speeds):.4f}, mean {statistics.mean(speeds):.5f}"
    # The clicks were found at the output and timed end to end: 5 ms chunks + the 30 ms buffer.
    latency = statistics.median(player.readings.latency_ms) if player.readings.latency_ms else 0.0
    if player.stats.clicks < 6 or not 30.0 <= latency <= 45.0:
        return f"{player.stats.clicks} clicks, latency {latency:.1f} ms"
    return None


def test_callback_never_blocks_even_when_the_producer_stalls(jack: str) -> None:
    """Run time of every callback through JACK, and callbacks keep their pace through a 300 ms stall."""
    player = AudioPlayer(AudioPlayerConfig())
    try:
        stream_tone(player, 3.0, pause=(1.5, 0.3))
        ring = player.ring
        assert ring is not None
        runs = ring.run_times_s()
        records = ring.records[: min(ring.callbacks, len(ring.records))].copy()
    finally:
        player.close()
    assert len(runs) > 400
    # Copying 256 frames takes microseconds; a lock or an allocation storm would show in the tail.
    assert float(np.median(runs)) < 200e-6
    assert float(np.percentile(runs, 99)) < 1e-3
    assert float(runs.max()) < PERIOD_S
    # The device kept calling back at its own pace through the stall (zero-filled, counted) ...
    local = records[:, 3]
    gaps = np.diff(local)
    assert float(np.median(gaps)) == pytest.approx(PERIOD_S, rel=0.1)
    assert ring.underruns >= 1
    # ... and playback started again, primed to the target, when audio came back.
    assert player.playout.primes == 2
    assert ring.playing


def test_capture_device_through_jack(jack: str) -> None:
    """The capture path reads JACK's dummy inputs (silence) in 5 ms chunks stamped on our clock."""
    source = DeviceSource(AudioConfig(source="device"))
    chunks: list[object] = []
    source.start(chunks.append)
    try:
        time.sleep(0.5)
    finally:
        source.close()
    assert len(chunks) >= 50
    first = chunks[0]
    assert first.frames.shape == (240, 2) and first.frames.dtype == np.float32  # type: ignore[attr-defined]
    pts = [c.pts_us for c in chunks]  # type: ignore[attr-defined]
    assert abs(pts[-1] / 1e6 - time.monotonic()) < 1.0
    assert statistics.median(np.diff(pts)) == pytest.approx(5000, rel=0.2)


SMALL = EncoderConfig(width=320, height=240, fps=30, bitrate_kbits=800)


@pytest.mark.parametrize("codec", ["raw", "opus"])
def test_host_to_viewer_with_audio(jack: str, codec: str) -> None:
    async def scenario() -> tuple[Host, Viewer]:
        host = Host(HostConfig(port=0, encoder=SMALL, status_interval_s=0, audio=AudioConfig(codec=codec)))
        task = asyncio.create_task(host.run())
        await asyncio.wait_for(host.ready.wait(), 15)
        viewer = Viewer(
            ViewerConfig(
                host="127.0.0.1",
                port=host.port or 0,
                duration_s=4.0,
                flags=KickFlags.VIDEO | KickFlags.AUDIO,
                audio=AudioPlayerConfig(),
            )
        )
        await asyncio.wait_for(viewer.run(), 30)
        host.stop()
        await asyncio.wait_for(task, 10)
        return host, viewer

    host, viewer = asyncio.run(scenario())
    assert viewer.codec_parameters is not None
    assert viewer.codec_parameters.audio_codec == (AudioCodec.RAW_S16LE if codec == "raw" else AudioCodec.OPUS)
    assert (viewer.codec_parameters.rate, viewer.codec_parameters.channels) == (RATE, 2)
    assert host.stats.audio_packets > 600 and host.stats.audio_encode_errors == 0
    summary = viewer.summary()
    audio = summary["audio"]
    assert audio["error"] is None
    assert audio["packets"] > 600 and audio["packets_lost"] == 0 and audio["decode_errors"] == 0
    assert audio["underruns"] <= 1  # the stream's end may run dry before the viewer stops
    assert audio["clicks"] >= 2
    extra = 0.0 if codec == "raw" else 10.0  # Opus look-ahead and decoder delay
    # The latency target is `bench audio`'s (separate processes: 37 ms). Here host, viewer and the audio
    # callback share one interpreter on a shared 2-core machine: quiet runs measure 40-58 ms, loaded ones up to
    # ~105 ms with the code of any recent commit. This bound catches a buffer that grows without limit or a
    # clock that is not followed, not a few ms.
    assert 30.0 <= audio["latency_ms_median"] <= 150.0 + extra
    assert summary["av_offset_ms"] is not None
