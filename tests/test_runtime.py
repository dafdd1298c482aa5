"""The interpreter and thread settings of the processes that keep time: collector runs recorded, where a thread's
time went, and thread priorities granted or refused cleanly."""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest

from pyrofling import runtime
from pyrofling.runtime import (
    RAISED_NICE,
    CodecThreadTimes,
    CollectorPauses,
    ThreadPriorities,
    thread_schedstat,
    timed_on_thread,
)
from pyrofling.server.encoder import EncoderConfig, VideoEncoder

T = TypeVar("T")


def on_thread(fn: Callable[[], T]) -> T:
    """``fn`` on a thread of its own (priorities stick to a thread: the test's own is left alone)."""
    out: list[T] = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join(30)
    assert out, "the thread did not finish"
    return out[0]


def test_every_collector_run_is_recorded_with_its_generation_and_drained_once() -> None:
    pauses = CollectorPauses()
    pauses.install()
    try:
        gc.collect(1)
        gc.collect()
    finally:
        gc.callbacks.remove(pauses._callback)
    runs = pauses.drain()
    assert [r["gc"] for r in runs] == [1, 2]
    assert all(r["end"] >= r["start"] for r in runs)
    assert pauses.drain() == []


@pytest.mark.io
@pytest.mark.skipif(thread_schedstat() is None, reason="no /proc/thread-self/schedstat on this system")
def test_a_threads_wall_time_splits_into_cpu_waiting_and_blocked() -> None:
    def spin() -> int:
        end, n = time.thread_time() + 0.05, 0
        while time.thread_time() < end:  # 50 ms of CPU, however long the machine makes it take
            n += 1
        return n

    _, busy = on_thread(lambda: timed_on_thread(spin))
    _, asleep = on_thread(lambda: timed_on_thread(time.sleep, 0.05))
    assert busy["cpu"] >= 0.045 and busy["cpu"] + busy["runq"] > busy["blocked"]
    assert asleep["blocked"] >= 0.045 and asleep["cpu"] < asleep["blocked"]
    assert set(busy) == {"wall", "cpu", "runq", "blocked", "switches"}
    assert asleep["switches"] >= 1  # asleep, it left its CPU and came back


@pytest.mark.io
@pytest.mark.skipif(thread_schedstat() is None, reason="no /proc/thread-self/schedstat on this system")
def test_work_that_never_blocks_does_not_read_as_blocked() -> None:
    # Real threads on the real kernel: what is tested is the kernel's own accounting, which no fake clock has.
    work_s = 0.003

    def work() -> None:  # spins on the wall clock, touching nothing that would bring the CPU time up to date
        end = time.perf_counter() + work_s
        while time.perf_counter() < end:
            pass

    def many() -> list[float]:
        out = []
        for _ in range(30):
            time.sleep(0.001)  # each run starts fresh on a CPU, as an encode does
            out.append(timed_on_thread(work)[1]["blocked"])
        return sorted(out)

    blocked = on_thread(many)
    assert blocked[len(blocked) // 2] < work_s / 10  # the old reading: about half the work


@pytest.mark.io
def test_thread_priorities_are_left_alone_unless_turned_on() -> None:
    p = ThreadPriorities()
    before = os.getpriority(os.PRIO_PROCESS, 0)
    assert on_thread(lambda: p.apply("encoder")) == "normal"
    assert p.granted == {} and os.getpriority(os.PRIO_PROCESS, 0) == before


def test_a_refused_real_time_request_falls_back_to_a_raised_priority_then_to_normal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []

    def refuse_realtime(*_a: object) -> None:
        calls.append("fifo")
        raise PermissionError("not allowed")

    def accept_nice(*_a: object) -> None:
        calls.append("nice")

    monkeypatch.setattr(runtime.os, "sched_setscheduler", refuse_realtime)
    monkeypatch.setattr(runtime.os, "setpriority", accept_nice)
    p = ThreadPriorities()
    p.enabled = True
    assert p.apply("presenter") == "raised" and calls == ["fifo", "nice"]
    assert p.apply("event loop") == "raised" and calls == ["fifo", "nice", "nice"]  # never asks real-time for it

    def refuse_nice(*_a: object) -> None:
        raise PermissionError("not allowed")

    monkeypatch.setattr(runtime.os, "setpriority", refuse_nice)
    assert p.apply("heartbeat") == "normal"
    line = p.summary()
    assert "presenter raised, event loop raised, heartbeat normal" in line
    assert "not granted for presenter, heartbeat" in line and "CAP_SYS_NICE" in line


@pytest.mark.io
def test_a_granted_priority_is_the_threads_own() -> None:
    p = ThreadPriorities()
    p.enabled = True

    def raise_and_read() -> tuple[str, int]:
        got = p.apply("event loop")
        return got, os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    got, nice = on_thread(raise_and_read)
    # Whatever this system grants, the thread has what the summary says (root here: raised; a user: normal).
    assert (got, nice) in (("raised", RAISED_NICE), ("normal", os.getpriority(os.PRIO_PROCESS, 0)))
    assert p.summary().startswith(f"thread priorities: event loop {got}")


@pytest.mark.io
def test_the_encoder_runs_real_time_below_the_beat_and_steps_down_with_the_threads_it_started() -> None:
    p = ThreadPriorities()
    p.enabled = True
    stop, ready = threading.Event(), threading.Barrier(4, timeout=30)
    tids: dict[str, int] = {}
    got: dict[str, str] = {}

    def codec_thread() -> None:  # started by the encoder, as x264 starts its slice threads: inherits its priority
        tids["slice"] = threading.get_native_id()
        ready.wait()
        stop.wait(30)

    def encoder() -> None:
        got["encoder"] = p.apply("encoder")
        tids["encoder"] = threading.get_native_id()
        slice_thread = threading.Thread(target=codec_thread)
        slice_thread.start()
        stop.wait(30)
        slice_thread.join(30)

    def other(role: str) -> None:  # the heartbeat, and a decoder (a viewer in the same process)
        got[role] = p.apply(role)
        tids[role] = threading.get_native_id()
        ready.wait()
        stop.wait(30)

    threads = [threading.Thread(target=encoder)] + [
        threading.Thread(target=other, args=(role,)) for role in ("heartbeat", "decoder")
    ]
    for t in threads:
        t.start()
    try:
        ready.wait()
        if set(got.values()) != {"real-time"}:
            pytest.skip(f"this system refuses real-time scheduling (got {got}): nothing to step down")

        def policy(name: str) -> tuple[int, int]:
            tid = tids[name]
            return os.sched_getscheduler(tid), os.sched_getparam(tid).sched_priority

        assert policy("heartbeat") == (os.SCHED_FIFO, runtime.REALTIME_PRIORITY)
        # Below the heartbeat, which must still wake on time mid-encode; the codec's thread has it too.
        assert policy("encoder") == policy("slice") == (os.SCHED_FIFO, runtime.WORKER_PRIORITIES["encoder"])
        assert policy("decoder") == (os.SCHED_FIFO, runtime.WORKER_PRIORITIES["decoder"])
        assert max(runtime.WORKER_PRIORITIES.values()) < runtime.REALTIME_PRIORITY
        assert p.step_down("encoder") == 2
        for name in ("encoder", "slice"):
            assert policy(name) == (os.SCHED_OTHER, 0)
            assert os.getpriority(os.PRIO_PROCESS, tids[name]) == RAISED_NICE
        assert policy("heartbeat") == (os.SCHED_FIFO, runtime.REALTIME_PRIORITY)  # the beat keeps real time
        assert policy("decoder") == (os.SCHED_FIFO, runtime.WORKER_PRIORITIES["decoder"])  # and the other worker
        line = p.summary()
        assert "encoder raised (stepped down from real-time)" in line and "not granted" not in line
    finally:
        stop.set()
        for t in threads:
            t.join(30)


@pytest.mark.io
def test_an_output_thread_started_by_a_raised_thread_goes_back_to_the_processs_priority() -> None:
    # A thread inherits the nice value of the thread that starts it: the raised event loop starts the recording
    # and broadcast threads, and a broadcast's own encoder must not compete with the stream's at its priority.
    p = ThreadPriorities()
    p.enabled = True

    def loop_starts_an_output() -> tuple[int | None, str, int] | None:
        if p.apply("event loop") != "raised":
            return None

        def output() -> tuple[int | None, str, int]:
            inherited = runtime._nice(threading.get_native_id())
            return inherited, p.apply("output"), os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

        return on_thread(output)

    seen = on_thread(loop_starts_an_output)
    if seen is None:
        pytest.skip("this system refuses a raised priority (not root, no CAP_SYS_NICE): no thread inherits one")
    inherited, got, nice = seen
    assert inherited == RAISED_NICE
    assert (got, nice) == ("normal", p.base_nice)
    line = p.summary()
    assert "event loop raised, output normal" in line and "not granted" not in line


STREAM_AND_LIST_IMPORTS = """
import asyncio, sys, threading
sys.path.insert(0, sys.argv[1])  # the tests' folder, for their support module
from support import start_host, stop_host
from pyrofling.client.config import ViewerConfig
from pyrofling.client.viewer import Viewer
from pyrofling.runtime import tune_for_latency
from pyrofling.server.encoder import EncoderConfig

tune_for_latency(thread_priority=False)

async def main():
    host, task = await start_host(encoder=EncoderConfig(width=160, height=120, fps=60, bitrate_kbits=300))
    viewer = Viewer(ViewerConfig(host="127.0.0.1", port=host.port or 0, duration_s=4.5))
    loaded = {}
    def first_picture():
        while viewer.presenter.stats.presented == 0:
            threading.Event().wait(0.002)
        loaded["at_first_picture"] = set(sys.modules)
    watcher = threading.Thread(target=first_picture, daemon=True)
    watcher.start()
    await viewer.run()
    loaded["at_end"] = set(sys.modules)
    await stop_host(host, task)
    print("PRESENTED", viewer.presenter.stats.presented)
    print("IMPORTED", sorted(loaded["at_end"] - loaded["at_first_picture"]))

asyncio.run(asyncio.wait_for(main(), 60))
"""


@pytest.mark.io
def test_a_stream_imports_nothing_once_its_first_picture_is_shown() -> None:
    """An import mid-stream holds the interpreter lock for milliseconds (numpy.ma: 8 ms, 2 s into every stream,
    when the automatic offset first took a percentile): a fresh interpreter tuned as the commands are streams
    4.5 s, past that point, and lists what it imported after its first picture."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", STREAM_AND_LIST_IMPORTS, str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    presented = int(out.split("PRESENTED ")[1].split()[0])
    assert presented > 150  # past the automatic offset's first percentile (120 pictures)
    assert "IMPORTED []" in out, out


def _x264_frames(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(7)  # noise: every slice has work to do
    return [rng.integers(0, 256, (240 * 3 // 2, 320), dtype=np.uint8) for _ in range(n)]


@pytest.mark.io
@pytest.mark.skipif(thread_schedstat() is None, reason="no /proc/thread-self/schedstat on this system")
def test_the_codecs_own_threads_are_counted_and_pythons_are_not() -> None:
    # Real x264 slice threads (started by the codec, not by Python) beside a Python thread that spins meanwhile.
    def run() -> tuple[set[int], set[int], list[dict[str, float]]]:
        times = CodecThreadTimes()
        before = set(times.read())
        encoder = VideoEncoder(EncoderConfig(width=320, height=240, fps=30, threads=2))
        stop = threading.Event()
        spinner = threading.Thread(target=_spin_until, args=(stop,), daemon=True)
        spinner.start()
        spent = []
        try:
            for i, frame in enumerate(_x264_frames(20)):
                spent.append(timed_on_thread(encoder.encode_array, frame, i * 33_333, codec=times)[1]["codec"])
            return set(times.read()) - before, {t.native_id for t in threading.enumerate() if t.native_id}, spent
        finally:
            stop.set()
            spinner.join(10)
            encoder.close()

    codec, python, spent = on_thread(run)
    assert len(codec) >= 2 and not codec & python  # x264's two slice threads (and its own), no Python thread
    assert all(set(s) == {"cpu", "runq", "runq_max", "threads"} for s in spent)
    assert sum(s["cpu"] for s in spent) > 0.001  # the slices' work, done on x264's threads
    assert max(s["threads"] for s in spent) >= 2


@pytest.mark.io
@pytest.mark.skipif(thread_schedstat() is None, reason="no /proc/thread-self/schedstat on this system")
def test_slice_threads_that_share_one_cpu_with_a_busy_thread_are_seen_waiting_for_it() -> None:
    # x264's threads inherit the affinity of the thread that opens the encoder: all on one CPU, with a spinner.
    cpu = min(os.sched_getaffinity(0))

    def run() -> list[dict[str, float]]:
        os.sched_setaffinity(0, {cpu})
        encoder = VideoEncoder(EncoderConfig(width=320, height=240, fps=30, threads=2))
        times, spent = CodecThreadTimes(), []
        stop = threading.Event()
        spinner = threading.Thread(target=_spin_until, args=(stop,), daemon=True)
        spinner.start()
        try:
            for i, frame in enumerate(_x264_frames(20)):
                spent.append(timed_on_thread(encoder.encode_array, frame, i * 33_333, codec=times)[1]["codec"])
        finally:
            stop.set()
            spinner.join(10)
            encoder.close()
        return spent

    spent = on_thread(run)
    assert sum(s["runq"] for s in spent) > 0.001
    assert all(s["runq_max"] <= s["runq"] for s in spent)


def _spin_until(stop: threading.Event) -> None:
    while not stop.is_set():  # on a CPU all along (x264's threads need no GIL to be kept waiting by it)
        pass
