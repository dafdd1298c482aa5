"""Audio codecs, the output ring and the player, with a fake output device (real-device tests: test_audio_jack)."""

from __future__ import annotations

import itertools
import threading
import time

import numpy as np
import pytest

from pyrofling.client.audio import AudioPlayer, AudioPlayerConfig, OutputRing, output_factory
from pyrofling.client.codecs import AudioDecoder, DecodeError
from pyrofling.clocks import VirtualClock
from pyrofling.core.viewer.clock_sync import HostClock
from pyrofling.server.audio import AudioChunk, AudioConfig, AudioEncoder, ToneSource, open_audio_source
from pyrofling.wire import AudioCodec

RATE = 48_000


#: Frames per callback of the fake output device.
BLOCK = 256


class FakeOutput:
    """An output device with a perfect clock: calls ``ring.fill`` every 256 frames, records what it played.

    :meth:`start` runs it on its own thread in real time; a test on a virtual clock leaves it unstarted and
    calls :meth:`fill_block` itself at each block's time."""

    def __init__(self, ring: OutputRing, rate: int, device: str | None) -> None:
        self.ring = ring
        self.rate = rate
        self.name = "fake output"
        self.played: list[np.ndarray] = []
        self.max_late_s = 0.0  # how late its thread came to a fill (a busy machine: it then catches up at once)
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        start = time.monotonic()
        k = 0
        while not self._halt.is_set():
            due = start + k * BLOCK / self.rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self.max_late_s = max(self.max_late_s, -delay)
            self.fill_block(due)
            k += 1

    def fill_block(self, due: float) -> None:
        """One callback at ``due``, its block heard two blocks later."""
        out = np.empty((BLOCK, self.ring.channels), np.float32)
        self.ring.fill(out, BLOCK, due + 2 * BLOCK / self.rate, due, False)
        if self.ring.callbacks > 1:
            self.played.append(out)

    def close(self) -> None:
        self._halt.set()
        self._thread.join(2)


def clock_sync() -> HostClock:
    return HostClock(0.0)  # same machine, same clock


# -- ring -----------------------------------------------------------------------------------------


def test_ring_copies_across_the_wrap_and_counts_an_underrun() -> None:
    clock = VirtualClock(50.0)
    ring = OutputRing(10, 1, fade_frames=2, clock=clock)
    assert ring.write(np.arange(8, dtype=np.float32)[:, None]) == 8
    out = np.full((6, 1), 9.0, np.float32)
    ring.fill(out, 6, 1.0, 0.9, False)
    assert not out.any()  # not playing yet (priming): silence, nothing read
    assert ring.read_pos == 0 and ring.latest_record(played=True) is None
    ring.playing = True
    ring.fill(out, 6, 1.1, 1.0, False)
    assert out[:, 0].tolist() == [0, 1, 2, 3, 4, 5]
    record = ring.latest_record(played=True)
    assert record == (0, 1.1, 1.0, 50.0)  # the callback stamps the player's clock as it runs
    assert ring.write(np.arange(10, 18, dtype=np.float32)[:, None]) == 8  # wraps: 6 + 2 free ... 10 total
    assert ring.write(np.ones((5, 1), np.float32)) == 0  # full
    ring.fill(out, 6, 1.2, 1.1, True)
    assert out[:, 0].tolist() == [6, 7, 10, 11, 12, 13]
    assert ring.device_xruns == 1
    out2 = np.full((6, 1), 5.0, np.float32)
    ring.fill(out2, 6, 1.3, 1.2, False)  # only 4 left: underrun
    assert out2[:, 0].tolist() == pytest.approx([14, 15, 16 * (2 / 3), 17 * (1 / 3), 0, 0])  # faded, then zeros
    assert ring.underruns == 1 and ring.underrun_frames == 2 and not ring.playing
    assert ring.level == 0 and ring.callbacks == 4
    assert len(ring.run_times_s()) == 4 and ring.max_run_s > 0


# -- codecs ---------------------------------------------------------------------------------------


def tone_chunks(config: AudioConfig, seconds: float) -> list[AudioChunk]:
    src = ToneSource(config)
    n = config.chunk_frames
    return [
        AudioChunk(src.tone.render(k * n / RATE, n, RATE), round(k * n / RATE * 1e6))
        for k in range(int(seconds * RATE / n))
    ]


def test_raw_s16le_round_trip_one_datagram_per_chunk() -> None:
    cfg = AudioConfig()
    enc = AudioEncoder(cfg, RATE)
    dec = AudioDecoder(AudioCodec.RAW_S16LE, RATE, 2)
    assert enc.codec == AudioCodec.RAW_S16LE
    for chunk in tone_chunks(cfg, 0.05):
        [packet] = enc.encode(chunk)
        assert len(packet.data) == 960 and packet.pts_us == chunk.pts_us  # ≤ 1024: one datagram
        assert np.abs(dec.decode(packet.data) - chunk.frames).max() < 1e-4
    with pytest.raises(DecodeError):
        dec.decode(b"\x00" * 5)


def test_opus_round_trip_is_low_delay_and_small() -> None:
    cfg = AudioConfig(codec="opus", click_period_s=0)
    enc = AudioEncoder(cfg, RATE)
    dec = AudioDecoder(AudioCodec.OPUS, RATE, 2)
    chunks = tone_chunks(cfg, 0.5)
    packets = [p for c in chunks for p in enc.encode(c)]
    assert len(packets) >= len(chunks) - 2  # one 5 ms frame per chunk, after the look-ahead
    assert max(len(p.data) for p in packets) < 200  # 128 kbit/s: 80 bytes per 5 ms
    assert all(b.pts_us > a.pts_us for a, b in itertools.pairwise(packets))
    decoded = np.concatenate([dec.decode(p.data) for p in packets])
    assert decoded.shape[1] == 2 and decoded.dtype == np.float32
    source = np.concatenate([c.frames for c in chunks])
    # Same loudness, and the same tone (correlation at the codec's delay).
    assert np.sqrt(np.mean(decoded[4800:, 0] ** 2)) == pytest.approx(np.sqrt(np.mean(source[:, 0] ** 2)), rel=0.1)
    best = max(
        float(np.corrcoef(decoded[4800:20000, 0], source[4800 - d : 20000 - d, 0])[0, 1]) for d in range(0, 480, 4)
    )
    assert best > 0.95


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"codec": "opus", "rate": 44_100}, "Opus needs a rate"),
        ({"codec": "opus", "chunk_ms": 3.0}, "Opus frames are"),
        ({"codec": "flac"}, "unknown audio codec"),
        ({"source": "mic"}, "unknown audio source"),
        ({"rate": 1000}, "out of range"),
        ({"channels": 6}, "mono or stereo"),
        ({"skew_ppm": 9000}, "±5000"),
    ],
)
def test_audio_config_errors_say_what_to_change(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        open_audio_source(AudioConfig(**kwargs))  # type: ignore[arg-type]


def test_no_audio_source() -> None:
    assert open_audio_source(AudioConfig(source="none")) is None


def test_unknown_output_backend() -> None:
    with pytest.raises(ValueError, match="choose from sounddevice, pyaudio"):
        output_factory("alsa")


# -- player ---------------------------------------------------------------------------------------


def play(player: AudioPlayer, chunks: list[AudioChunk], lose: set[int], *, codec: int = 3) -> None:
    """Feed chunks in real time, 5 ms apart (the device, if any, keeps its own time on its thread)."""
    enc = AudioEncoder(AudioConfig(), RATE)
    player.configure(codec, RATE, 2)
    start = time.monotonic()
    for k, chunk in enumerate(chunks):
        time.sleep(max(0.0, start + k * 0.005 - time.monotonic()))
        if k not in lose:
            for p in enc.encode(chunk):
                player.packet(p.data, p.pts_us, clock_sync())
    time.sleep(0.01)


class UnstartedOutput(FakeOutput):
    """The fake device with no thread of its own: the test calls each block at its virtual time."""

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass


def play_in_virtual_time(
    chunks: list[AudioChunk], lose: set[int], *, output: type[UnstartedOutput] = UnstartedOutput
) -> tuple[AudioPlayer, UnstartedOutput, VirtualClock]:
    """Chunks every 5 ms and a device callback every 256 frames on one virtual clock, in time order; the
    player has handled each chunk before time moves on. A lost chunk is reported as lost when the next arrives,
    as the reassembler reports it. Exact on any machine, however busy."""
    clock = VirtualClock()
    outputs: list[UnstartedOutput] = []

    def factory(ring: OutputRing, rate: int, device: str | None) -> UnstartedOutput:
        outputs.append(output(ring, rate, device))
        return outputs[-1]

    player = AudioPlayer(AudioPlayerConfig(), factory=factory, clock=clock)
    enc = AudioEncoder(AudioConfig(), RATE)
    player.configure(3, RATE, 2)
    assert player.idle(10.0) and outputs, player.error
    device = outputs[0]
    missing = 0
    blocks = 0
    for k, chunk in enumerate(chunks):
        fed_at = k * 0.005
        while blocks * BLOCK / RATE <= fed_at:  # the device's callbacks due by now come first
            clock.t = blocks * BLOCK / RATE
            device.fill_block(clock.t)
            blocks += 1
        clock.t = fed_at
        if k in lose:
            missing += 1
            continue
        if missing:
            player.lost(missing)
            missing = 0
        for p in enc.encode(chunk):
            player.packet(p.data, p.pts_us, clock_sync())
        assert player.idle(10.0)
    return player, device, clock


@pytest.mark.io
def test_lost_packets_are_concealed_without_a_click_and_cost_their_own_duration() -> None:
    chunks = tone_chunks(AudioConfig(click_period_s=0), 2.5)
    player, device, _ = play_in_virtual_time(chunks, lose={150, 200, 201, 300})
    try:
        underruns = player.ring.underruns if player.ring is not None else -1
        stats = player.stats
        assert stats.packets_lost == 4 and player.playout.concealed_frames == 4 * 240
        assert underruns == 0 and player.playout.primes == 1
        played = np.concatenate(device.played)[:, 0]
        steps = np.abs(np.diff(played))
        tone_step = 2 * np.pi * 440 / RATE * 0.2
        assert steps.max() < 4 * tone_step  # no discontinuity anywhere, including around the losses
        # Silence (the concealed stretches and the fades) is there, and only briefly.
        silent = np.abs(played) < 1e-3
        assert 100 < silent.sum() < 4 * 240 + 2000
        assert summary_ok(player)
    finally:
        player.close()


def summary_ok(player: AudioPlayer) -> bool:
    s = player.summary(settle_s=1.0)
    assert s["device"] == "fake output" and s["device_rate"] == RATE and s["stream_rate"] == RATE
    assert s["concealed_ms_per_loss"] == pytest.approx(5.0)
    assert s["buffered_ms_median"] == pytest.approx(30.0, abs=3.0)
    assert s["error"] is None
    return True


@pytest.mark.io
def test_player_without_an_output_device_disables_audio_and_keeps_going() -> None:
    def factory(ring: OutputRing, rate: int, device: str | None) -> FakeOutput:
        raise OSError("no audio output device")

    player = AudioPlayer(AudioPlayerConfig(), factory=factory)
    try:
        play(player, tone_chunks(AudioConfig(), 0.05), set())
    finally:
        player.close()
    assert player.error == "no audio output device"
    assert player.stats.packets == 0  # nothing decoded without a device
    # Once it knows, the network thread stops handing it packets at all (none queued, none dropped).
    before = player._queue.qsize()
    player.packet(b"\0" * 100, 0, HostClock())
    player.lost(3)
    assert player._queue.qsize() == before and player.stats.queue_overflows == 0


@pytest.mark.io
def test_unknown_audio_codec_from_the_host_leaves_audio_off() -> None:
    player = AudioPlayer(AudioPlayerConfig(), factory=lambda ring, rate, device: FakeOutput(ring, rate, device))
    try:
        player.configure(99, RATE, 2)
        assert player.error is not None and "codec 99" in player.error
        player.configure(int(AudioCodec.AAC), RATE, 2)  # known to the protocol, not decodable here
        assert player.idle(10.0)
    finally:
        player.close()
    assert player.error is not None and "not supported" in player.error


class _DroppedByTheServer(UnstartedOutput):
    """A device that stops calling back (as JACK does to a client it finds too slow) and whose close then
    waits for a callback that never comes."""

    def close(self) -> None:
        threading.Event().wait()  # forever


@pytest.mark.io
def test_an_output_that_stops_calling_back_is_reported_and_cannot_hold_up_close() -> None:
    player, _, clock = play_in_virtual_time(tone_chunks(AudioConfig(), 0.5), set(), output=_DroppedByTheServer)
    try:
        assert player.device_stalled_s() == 0.0  # it called back up to now
        clock.t += 0.05  # the server drops the client: no callback from here on
        assert player.device_stalled_s() == pytest.approx(0.05)
        clock.t += 0.3
        assert player.device_stalled_s() == pytest.approx(0.35)
    finally:
        player.close()  # returns although the output's close never does
    assert player.close_stuck and player.output is None
