"""Games that start their frame just in time (pure, fake clock), and the capture client doing it against a host."""

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest
from support import run, start_host, stop_host

from pyrofling.capture import CaptureClient
from pyrofling.core.just_in_time import JustInTime, JustInTimeConfig
from pyrofling.server.encoder import EncoderConfig
from pyrofling.server.gamepad import RecordingPad

PERIOD = 1 / 60


def play(jit: JustInTime, frames: int, work_s: float, *, start_s: float = 0.0, beat: int = 0) -> tuple[float, int]:
    """A game whose frame takes ``work_s``, presenting just before each heartbeat (every PERIOD from 0)."""
    now = start_s
    for _ in range(frames):
        jit.frame_started(now)
        now += work_s
        jit.presenting(now)
        beat += 1
        beat_s = beat * PERIOD
        now = jit.completed(beat_s, beat=beat, headroom_s=PERIOD, period_s=PERIOD)
    return now, beat


def test_it_starts_at_once_until_it_knows_the_game() -> None:
    jit = JustInTime()
    jit.frame_started(0.0)
    jit.presenting(0.004)
    assert jit.completed(PERIOD, beat=1, headroom_s=PERIOD, period_s=PERIOD) == PERIOD
    assert jit.lead_s is None


def test_a_quick_game_starts_its_frame_just_before_the_next_heartbeat() -> None:
    jit = JustInTime()
    play(jit, 40, 0.004)
    lead = jit.lead_s
    assert lead is not None and lead == pytest.approx(0.004 * 1.1 + 0.0015)
    start = jit.completed(41 * PERIOD, beat=41, headroom_s=PERIOD, period_s=PERIOD)
    assert start == pytest.approx(42 * PERIOD - lead)  # the next beat minus the frame and a margin
    assert jit.stats.delayed > 0 and jit.stats.late_presents == 0


def test_a_present_that_missed_its_heartbeat_widens_the_margin_for_a_while() -> None:
    cfg = JustInTimeConfig()
    jit = JustInTime(cfg)
    now, beat = play(jit, 40, 0.004)
    before = jit.lead_s
    assert before is not None
    jit.completed(now + 2 * PERIOD, beat=beat + 2, headroom_s=PERIOD, period_s=PERIOD)  # completed a beat late
    assert jit.stats.late_presents == 1
    assert jit.lead_s == pytest.approx(before + cfg.late_step_s)
    jit.completed(now + 20.0, beat=beat + 3, headroom_s=PERIOD, period_s=PERIOD)  # ten seconds later: forgotten
    assert jit.lead_s == pytest.approx(before)


def test_a_game_as_slow_as_the_stream_or_a_host_without_headroom_starts_at_once() -> None:
    slow = JustInTime()
    play(slow, 40, 0.016)
    assert slow.completed(1.0, beat=100, headroom_s=PERIOD, period_s=PERIOD) == 1.0
    quick = JustInTime()
    play(quick, 40, 0.002)
    assert quick.completed(1.0, beat=100, headroom_s=0.0, period_s=PERIOD) == 1.0  # e.g. an older host


@pytest.mark.io
def test_a_game_just_in_time_reads_its_input_later_and_still_makes_its_heartbeats(tmp_path: Path) -> None:
    """Against a real host: FrameComplete's headroom delays the game's next frame, and every present is completed."""
    path = str(tmp_path / "cap.sock")
    results: dict[str, list[float]] = {}

    def game(name: str, just_in_time: bool) -> None:
        client = CaptureClient(160, 120, path=path, just_in_time=just_in_time, reconnect_s=0.05)
        gaps = []
        try:
            for _ in range(150):
                frame = client.acquire(timeout=2.0)
                frame.array[:] = 100
                client.present(frame)
                returned = client.stats.present_times[-1]
                complete = client._complete  # when the host's FrameComplete for it came
                if client.connected and complete is not None:
                    gaps.append(returned - complete[0])
        finally:
            results[name] = gaps
            results[name + " delayed"] = [float(client.stats.frames_delayed)]
            results[name + " completes"] = [float(client.stats.frame_completes)]
            client.close()

    async def scenario() -> None:
        encoder = EncoderConfig(width=160, height=120, fps=60, bitrate_kbits=500)
        host, task = await start_host(encoder=encoder, pad=RecordingPad(), source="capture", capture_socket=path)
        for name, jit in (("at once", False), ("just in time", True)):
            thread = threading.Thread(target=game, args=(name, jit))
            thread.start()
            await asyncio.get_running_loop().run_in_executor(None, thread.join, 30)
        await stop_host(host, task)

    run(scenario)
    # Every present of both games was completed by a heartbeat of the host's.
    assert results["at once completes"] == results["just in time completes"] == [150.0]
    # At once: control back as soon as FrameComplete came, never held. Just in time: most frames held back by the
    # headroom the host reported (how close to the next heartbeat they land is the capture bench's to measure).
    assert results["at once delayed"] == [0.0] and results["just in time delayed"][0] >= 50
    assert np.median(results["just in time"][30:]) > np.median(results["at once"][30:])
