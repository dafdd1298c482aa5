"""The heartbeat thread on a virtual clock: it wakes exactly at each of the frame clock's ticks, never early,
stamps each frame with that time, and a tick that comes while the encoder is still busy is skipped and counted.

Virtual time moves only when the heartbeat waits, so the encoder (real libx264, real executor) always takes
"no time" on the clock however long it takes on the machine: the ticks are exact on any machine.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import av
import pytest
from support import until

from pyrofling.clocks import SYSTEM_CLOCK, VirtualClock
from pyrofling.core.host.encode_schedule import EncodeSchedule
from pyrofling.core.host.frame_clock import FrameClock
from pyrofling.core.host.keyframes import KeyframePolicy
from pyrofling.server.encoder import EncodedVideo, EncoderConfig, VideoEncoder
from pyrofling.server.heartbeat import Heartbeat
from pyrofling.server.sources import SceneSource
from pyrofling.server.stats import HostStats

#: Every test here streams, serves or plays through real sockets, threads or processes (not the quick tier).
pytestmark = pytest.mark.io

FPS = 60
START_S = 100.0


class _Trace(io.StringIO):
    def close(self) -> None:  # keep the lines readable after the heartbeat closes its trace
        pass


def test_the_heartbeat_wakes_exactly_at_each_tick_and_stamps_frames_with_it() -> None:
    time_source = VirtualClock(START_S)
    frame_clock = FrameClock(fps=FPS, start_s=START_S)
    schedule = EncodeSchedule(1.0 / FPS)
    trace = _Trace()
    sent: list[EncodedVideo] = []

    async def scenario() -> None:
        done = asyncio.Event()

        def on_packets(packets: list[EncodedVideo]) -> None:
            sent.extend(packets)
            if len(sent) >= 20:
                done.set()

        with ThreadPoolExecutor(max_workers=1) as executor:
            heartbeat = Heartbeat(
                clock=frame_clock,
                schedule=schedule,
                keyframes=KeyframePolicy(),
                encoder=VideoEncoder(EncoderConfig(width=160, height=96, fps=FPS, bitrate_kbits=300)),
                executor=executor,
                stats=HostStats(),
                source=SceneSource(160, 96),
                on_packets=on_packets,
                on_source_end=done.set,
                frame_trace=trace,
                time_source=time_source,
            )
            heartbeat.start(asyncio.get_running_loop())
            await asyncio.wait_for(done.wait(), 30)
            await heartbeat.stop()

    asyncio.run(scenario())
    lines = [json.loads(line) for line in trace.getvalue().splitlines()]
    frames = [line for line in lines if "gc" not in line]  # a collector run is a line of its own
    assert len(frames) >= 20
    period = 1.0 / FPS
    for frame in frames:
        assert frame["woke"] == frame["due"]  # woken at the tick itself, never early, never late
        ticks = (frame["due"] - START_S) / period
        assert abs(ticks - round(ticks)) < 1e-6  # on the frame clock's grid
        assert frame["capture_us"] == int(frame["woke"] * 1_000_000)  # the frame carries the tick's time
    dues = [f["due"] for f in frames]
    assert dues == sorted(set(dues))  # each tick encoded once at most, in order
    # Every tick up to the last encoded one either encoded a frame or was skipped (and counted) while the
    # encoder was busy: nothing is lost without a count.
    last_tick = round((dues[-1] - START_S) / period)
    assert len(frames) + schedule.skipped >= last_tick + 1
    assert [p.pts_us for p in sent[: len(frames)]] == [f["capture_us"] for f in frames]


def test_a_real_time_encoder_that_fills_its_cpu_is_stepped_down_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np
    import numpy.typing as npt

    from pyrofling.runtime import THREAD_PRIORITIES

    # The system's side, recorded: what matters here is when the heartbeat asks for the step down.
    stepped: list[str] = []
    monkeypatch.setitem(THREAD_PRIORITIES.granted, "encoder", "real-time")

    def step_down(role: str) -> int:
        stepped.append(role)
        return 1

    monkeypatch.setattr(THREAD_PRIORITIES, "step_down", step_down)

    class SlowSource(SceneSource):
        """Each frame takes 30 ms to produce: the encode thread busy nine tenths of the time at 60 frames a
        second (every other tick finds it busy and is skipped)."""

        def read(self, index: int, capture_us: int) -> npt.NDArray[np.uint8]:
            threading.Event().wait(0.03)
            return super().read(index, capture_us)

    async def scenario() -> Heartbeat:
        with ThreadPoolExecutor(max_workers=1) as executor:
            heartbeat = _scene_heartbeat(executor, SlowSource(160, 96), lambda packets: None)
            heartbeat.start(asyncio.get_running_loop())
            for _ in range(300):  # up to 30 s on a loaded machine; about half a second of encodes is enough
                if stepped:
                    break
                await asyncio.sleep(0.1)
            for _ in range(5):  # and a while after: it was asked once
                await asyncio.sleep(0.1)
            await heartbeat.stop()
            return heartbeat

    heartbeat = asyncio.run(scenario())
    assert stepped == ["encoder"]
    assert heartbeat.encoder_share.share_at_step_down is not None and heartbeat.encoder_share.share_at_step_down > 0.5


def _scene_heartbeat(executor: ThreadPoolExecutor, source: SceneSource, on_packets: Callable[[Any], None]) -> Heartbeat:
    """A heartbeat on the system clock encoding ``source`` at 160x96."""
    return Heartbeat(
        clock=FrameClock(fps=FPS, start_s=SYSTEM_CLOCK.now()),
        schedule=EncodeSchedule(1.0 / FPS),
        keyframes=KeyframePolicy(),
        encoder=VideoEncoder(EncoderConfig(width=160, height=96, fps=FPS, bitrate_kbits=300)),
        executor=executor,
        stats=HostStats(),
        source=source,
        on_packets=on_packets,
        on_source_end=lambda: None,
    )


@pytest.mark.io
def test_a_frame_being_encoded_when_the_heartbeat_stops_is_still_sent_before_stop_returns() -> None:
    """Stopping mid-encode: the frame's packets reach the host's outputs before ``stop`` returns, so a recording
    closed after it holds every frame the encoder made (it once held one frame fewer)."""
    reading, release, sent = threading.Event(), threading.Event(), list[Any]()

    class HeldSource(SceneSource):
        def read(self, index: int, capture_us: int) -> Any:
            reading.set()
            release.wait(30)  # this frame is still being made when stop() is called
            return super().read(index, capture_us)

    async def scenario() -> int:
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(max_workers=1) as executor:
            heartbeat = _scene_heartbeat(executor, HeldSource(160, 96), sent.append)
            heartbeat.start(loop)
            await loop.run_in_executor(None, reading.wait, 30)
            stopping = asyncio.create_task(heartbeat.stop())
            await until(lambda: heartbeat._halt.is_set(), 10)  # stop has begun: no more ticks
            release.set()
            await asyncio.wait_for(stopping, 30)
            return len(sent)

    sent_by_stop = asyncio.run(scenario())
    assert sent_by_stop == len(sent) >= 1  # the frame being made when stop came was sent before it returned


@pytest.mark.io
def test_a_ticks_encode_starts_in_the_same_turn_of_the_loop_not_the_next() -> None:
    """The encode thread has the frame before the tick's callback returns: it once started as a task, whose first
    step waited for the loop's next turn, behind whatever else was ready then."""
    reading = threading.Event()
    started_in_turn: list[bool] = []
    sent: list[Any] = []

    class WatchedSource(SceneSource):
        def read(self, index: int, capture_us: int) -> Any:
            reading.set()
            return super().read(index, capture_us)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(max_workers=1) as executor:
            heartbeat = _scene_heartbeat(executor, WatchedSource(160, 96), sent.append)
            tick = heartbeat._on_tick

            def on_tick(woke: float) -> None:
                tick(woke)
                if not started_in_turn:  # the loop blocked here: only what this callback started can run
                    started_in_turn.append(reading.wait(10))

            heartbeat._on_tick = on_tick  # type: ignore[method-assign]
            heartbeat.start(loop)
            await until(lambda: len(sent) >= 3, 30)
            await heartbeat.stop()

    asyncio.run(scenario())
    assert started_in_turn == [True]


@pytest.mark.io
def test_an_encode_asked_for_after_the_encode_thread_stopped_starts_nothing_and_holds_nothing() -> None:
    async def scenario() -> tuple[bool, bool]:
        executor = ThreadPoolExecutor(max_workers=1)
        heartbeat = _scene_heartbeat(executor, SceneSource(160, 96), lambda packets: None)
        executor.shutdown(wait=True)
        heartbeat._encode(SYSTEM_CLOCK.now(), None)
        sent = heartbeat._encoding
        return heartbeat.schedule.encoding, sent is not None and sent.done()

    encoding, sent = asyncio.run(scenario())
    assert not encoding and sent  # the next tick may encode; a stop waits for nothing


class _Desktop:
    """A desktop's frames as the headless source gives them: they come on their own thread, when the clock's
    schedule says, and :meth:`read` hands over the newest with the time it came."""

    pixel_format = "yuv420p"

    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._fresh = False
        self._came_s: float | None = None
        self._frame_came: Callable[[], None] | None = None
        self.captured_s: float | None = None
        self.sent: list[float] = []

    def notify_frames(self, callback: Callable[[], None]) -> None:
        self._frame_came = callback

    def send(self) -> None:
        with self._lock:
            self._fresh, self._came_s = True, self._clock.now()
            self.sent.append(self._clock.now())
        assert self._frame_came is not None
        self._frame_came()

    def has_new(self) -> bool:
        with self._lock:
            return self._fresh

    def read(self, index: int, capture_us: int) -> av.VideoFrame:
        with self._lock:
            self._fresh, self.captured_s = False, self._came_s
        return av.VideoFrame(160, 96, "yuv420p")

    def close(self) -> None:
        pass


def _encodes(trace: _Trace) -> list[dict[str, Any]]:
    return [e for e in map(json.loads, trace.getvalue().splitlines()) if "gc" not in e]


def test_with_immediate_encode_a_desktops_frames_are_encoded_as_they_come_and_a_still_one_only_repeated() -> None:
    """Each frame a desktop sends while the encoder is free is encoded (traced with the time it came), without
    waiting for a tick; with none coming, the picture is encoded again only once the schedule's repeat interval has
    passed since the last encode."""
    time_source = VirtualClock(START_S)
    schedule = EncodeSchedule(1.0 / FPS, immediate=True)
    desktop = _Desktop(time_source)
    trace = _Trace()
    still_s = 0.25

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(max_workers=1) as executor:
            heartbeat = Heartbeat(
                clock=FrameClock(fps=FPS, start_s=START_S),
                schedule=schedule,
                keyframes=KeyframePolicy(),
                encoder=VideoEncoder(EncoderConfig(width=160, height=96, fps=FPS, bitrate_kbits=300)),
                executor=executor,
                stats=HostStats(),
                source=desktop,
                on_packets=lambda packets: None,
                on_source_end=lambda: None,
                frame_trace=trace,
                time_source=time_source,
            )
            heartbeat.start(loop)
            for _ in range(10):  # a frame, and the next once it is encoded
                desktop.send()
                await until(lambda: any(e["captured"] == desktop.sent[-1] for e in _encodes(trace)), 10)
            last = time_source.now()
            await until(lambda: time_source.now() > last + still_s, 10)
            await heartbeat.stop()

    asyncio.run(scenario())
    encodes = _encodes(trace)
    assert len(desktop.sent) == 10
    repeat_s = schedule.repeat_after_periods / FPS
    for before, after in itertools.pairwise(encodes):
        if after["captured"] == before["captured"]:  # the same picture again: only after the repeat interval
            assert after["woke"] - before["woke"] >= repeat_s - 1e-9
    still = [e for e in encodes if e["woke"] > desktop.sent[-1]]
    assert still and all(e["captured"] == desktop.sent[-1] for e in still)
    assert len(still) <= (still[-1]["woke"] - desktop.sent[-1]) / repeat_s + 1
