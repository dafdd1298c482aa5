"""Interpreter settings for the processes that keep time (host, viewer, example game).

Measured with ``pyrofling bench latency --trace`` on a 2-core machine running host
and viewer together; both are per process and cost nothing measurable:

* **gc.freeze()** once everything is imported: the cyclic collector's full
  collections walked every module object each time, and stopped the whole
  process for 15–50 ms a few times a minute (each one a repeated refresh or
  more).  Frozen, the objects made at start-up are skipped: 2–5 ms.
* **Thread priorities** (:class:`ThreadPriorities`): the threads whose wake-up
  is the beat (the host's heartbeat, the viewer's presenter) ask for real-time
  scheduling, the host's encoder and the viewer's decoder for real-time below
  them (nothing else of their process takes their CPU mid-frame; each steps
  down where it needs most of a CPU, :mod:`pyrofling.core.cpu_share`), the
  event loops for a raised one, so another program's burst of work does not
  push a picture past its refresh.  Where the system refuses (an
  unprivileged user without an rtprio or nice limit), they run as before and
  one line says so.
* **Nothing imported mid-stream**: ``np.percentile``'s first call imports
  ``numpy.ma`` (8 ms here, the interpreter lock held), and the viewer's
  automatic offset first calls it 2 s into every stream, on the presenter
  thread; such modules are imported here instead (:data:`IMPORTED_ON_FIRST_USE`).
* **A 1 ms GIL switch interval** (Python's default is 5 ms): a thread that wakes
  (the presenter at its deadline, the event loop with a datagram, the decoder
  with a picture) waits for the GIL at most that long while another thread runs
  Python code.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from pyrofling.core.cpu_share import CpuShare

T = TypeVar("T")

log = logging.getLogger(__name__)

SWITCH_INTERVAL_S = 0.001

#: SCHED_FIFO priority for the beat threads: low among real-time ones (1..99), above every ordinary thread.
REALTIME_PRIORITY = 10
#: ... and for the threads that carry a frame and run real-time: below the beat, so that the heartbeat and the
#: presenter still wake on time in the middle of a frame's work; each its own, so that one stepping down
#: (:meth:`ThreadPriorities.step_down`) finds its own threads and the codec's that it started, and no other.
WORKER_PRIORITIES = {"encoder": 5, "decoder": 4}
#: Nice value for the threads that carry a frame (ordinary threads run at 0).
RAISED_NICE = -10
#: Which of our threads asks for what: the beat threads wake briefly and must wake on time; the others do
#: a frame's worth of work and must not wait behind another program.
THREAD_ROLES = {
    "heartbeat": "real-time",
    "presenter": "real-time",
    # The event loop and the sound took the encoder's CPU three times a frame where they share one, and a frame's
    # encode took 2-3 ms longer at its tail; real-time, nothing of ours preempts it (but the heartbeat).  The
    # same for the decoder (but the presenter).  Both step down where they need most of their CPU (cpu_share).
    "encoder": "real-time",
    "decoder": "real-time",
    "event loop": "raised",
    # Recording and broadcasting (the broadcast's own encoder among them) keep a CDN's pace, seconds behind: an
    # ordinary priority, though the raised event loop starts them and a thread inherits its starter's.
    "output": "normal",
}


class CollectorPauses:
    """Every run of the cyclic collector in this process, timed (``time.monotonic``), for the frame traces:
    a late picture whose life overlaps one was stopped by it."""

    def __init__(self, keep: int = 4096) -> None:
        self._done: deque[dict[str, Any]] = deque(maxlen=keep)
        self._started: float | None = None
        self.installed = False

    def install(self) -> None:
        if not self.installed:
            gc.callbacks.append(self._callback)
            self.installed = True

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        now = time.monotonic()
        if phase == "start":
            self._started = now
        elif self._started is not None:
            self._done.append(
                {"gc": info["generation"], "start": self._started, "end": now, "collected": info["collected"]}
            )
            self._started = None

    def drain(self) -> list[dict[str, Any]]:
        """The pauses since the last call (oldest first).  Two traces in one process (a host and a viewer) may
        drain at once: each run goes to one of them."""
        out = []
        while True:
            try:
                out.append(self._done.popleft())
            except IndexError:
                return out


_SCHEDSTAT = "/proc/thread-self/schedstat"


def thread_schedstat() -> tuple[float, float, int] | None:
    """The calling thread's time on a CPU and waiting in the run queue for one, s, and how many times it was
    put on a CPU (Linux; None elsewhere)."""
    try:
        with open(_SCHEDSTAT, "rb") as f:
            on_cpu, waiting, runs = f.read().split()
    except (OSError, ValueError):
        return None
    return int(on_cpu) / 1e9, int(waiting) / 1e9, int(runs)


class ThreadCpu:
    """CPU seconds each thread of this process has used, by its Python name (a pool's numbered workers summed
    under one name); threads Python did not start (a codec's slice and analysis threads) summed as ``"native"``.
    A thread that has ended keeps the figure it had when last read: read it now and then (each statistics
    write), and before threads are ended on purpose (an encoder replaced: :attr:`VideoEncoder.before_reopen`), so
    that one ending before the end is counted. Counted from when this was made (not the imports before it).
    Empty where the system does not say (not Linux). Read from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the statistics read it on the event loop, an encoder's reopen on its thread
        self._seen: dict[int, tuple[str, float]] = {}  # native id: (name, CPU s since this was made, at the last read)
        self._ended: dict[str, float] = {}
        self._before = {tid: s for tid in _own_threads() if (s := _thread_cpu_s(tid)) is not None}

    def read(self) -> dict[str, float]:
        with self._lock:
            return self._read()

    def _read(self) -> dict[str, float]:
        names = {t.native_id: t.name.rstrip("0123456789").rstrip("_-") or t.name for t in threading.enumerate()}
        for tid in _own_threads():
            on_cpu_s = _thread_cpu_s(tid)
            if on_cpu_s is None:  # ended meanwhile
                continue
            on_cpu_s -= self._before.get(tid, 0.0)
            before = self._seen.get(tid)
            if before is not None and on_cpu_s < before[1]:  # the id went to a new thread
                self._ended[before[0]] = self._ended.get(before[0], 0.0) + before[1]
                before = None
            # A Python thread that is finishing has left threading's list before the system's: it keeps its name.
            name = names.get(tid, before[0] if before is not None else "native")
            self._seen[tid] = (name, on_cpu_s)
        out = dict(self._ended)
        for name, seconds in self._seen.values():
            out[name] = out.get(name, 0.0) + seconds
        return out


def _thread_cpu_s(tid: int) -> float | None:
    try:
        with open(f"/proc/self/task/{tid}/schedstat", "rb") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class CodecThreadTimes:
    """The time on a CPU and waiting for one of this process's threads that Python did not start (a codec's
    slice threads, which the encode thread waits for), per thread, ns: read before and after a call to see
    whether they waited for a CPU in it.  Each thread's schedstat file is kept open and read again from its
    start (1 µs a read where opening it each time is ten), for the life of the process.  Use from one thread."""

    def __init__(self) -> None:
        self._files: dict[int, int] = {}

    def read(self) -> dict[int, tuple[int, int]]:
        python = {t.native_id for t in threading.enumerate()}
        native = set(_own_threads()) - python
        for gone in self._files.keys() - native:
            os.close(self._files.pop(gone))
        out = {}
        for tid in native:
            fd = self._files.get(tid)
            try:
                if fd is None:
                    fd = self._files[tid] = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
                on_cpu, waiting, _ = os.pread(fd, 128, 0).split()
            except (OSError, ValueError):  # it ended meanwhile
                continue
            out[tid] = (int(on_cpu), int(waiting))
        return out


def codec_threads_spent(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]) -> dict[str, float]:
    """What the codec threads did between two :meth:`CodecThreadTimes.read`: their CPU time and run-queue wait,
    s, summed, the longest wait of one, and how many of them ran."""
    spent = [(a[0] - b[0], a[1] - b[1]) for tid, a in after.items() if (b := before.get(tid)) is not None]
    ran = [(cpu, wait) for cpu, wait in spent if cpu > 0 or wait > 0]
    return {
        "cpu": sum(cpu for cpu, _ in ran) / 1e9,
        "runq": sum(wait for _, wait in ran) / 1e9,
        "runq_max": max((wait for _, wait in ran), default=0) / 1e9,
        "threads": len(ran),
    }


def timed_on_thread(
    fn: Callable[..., T], *args: Any, codec: CodecThreadTimes | None = None
) -> tuple[T, dict[str, Any]]:
    """``fn(*args)``, and where its thread's wall time went: on a CPU, waiting for one (another thread or
    process had it), and the rest blocked (the GIL, a lock, I/O, threads it waits for); and ``switches``, how
    many times it was taken off its CPU meanwhile and put back.  With ``codec``, also ``codec``: what the
    codec's own threads spent meanwhile (:func:`codec_threads_spent`): whether the threads it blocked on
    waited for a CPU."""
    codec_before = codec.read() if codec is not None else None
    # The CPU time from the thread's CPU clock, not the schedstat file: the file's figure is brought up to date
    # only at a scheduler tick or a switch, so it reads short for a thread that has run since (x264 on one CPU:
    # 1 ms a frame read as "blocked" that was on a CPU).  The run-queue wait in it is current while it runs.
    t0, cpu0, before = time.monotonic(), time.thread_time(), thread_schedstat()
    out = fn(*args)
    wall, cpu, after = time.monotonic() - t0, time.thread_time() - cpu0, thread_schedstat()
    if before is None or after is None:
        return out, {"wall": wall}
    runq, switches = after[1] - before[1], after[2] - before[2]
    spent: dict[str, Any] = {
        "wall": wall,
        "cpu": cpu,
        "runq": runq,
        "blocked": max(0.0, wall - cpu - runq),
        "switches": switches,
    }
    if codec is not None and codec_before is not None:
        spent["codec"] = codec_threads_spent(codec_before, codec.read())
    return out, spent


class ThreadPriorities:
    """Set the calling thread's priority for its role (:data:`THREAD_ROLES`), as far as the system allows,
    and remember what each role got for :meth:`summary`."""

    def __init__(self) -> None:
        #: Off until :func:`tune_for_latency` turns it on: a program that embeds a host or a viewer keeps its
        #: threads as they are.
        self.enabled = False
        self.granted: dict[str, str] = {}
        self._lock = threading.Lock()
        #: The nice value of the thread that made this (the process's own, at import): what "normal" roles get.
        self.base_nice = _nice(threading.get_native_id())

    def apply(self, role: str) -> str:
        """Call on the thread itself; what it got: "real-time", "raised" or "normal" ("inherited": it could not
        go back to normal and keeps what the thread that started it had)."""
        if not self.enabled:
            return "normal"
        want = THREAD_ROLES[role]
        tid = threading.get_native_id()
        got = "normal"
        if want == "normal":
            got = "normal" if _try(lambda: self._make_ordinary(tid)) else "inherited"
        elif want == "real-time" and _try(
            lambda: os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(_realtime_priority(role)))
        ):
            got = "real-time"
        elif want in ("real-time", "raised") and _try(lambda: os.setpriority(os.PRIO_PROCESS, tid, RAISED_NICE)):
            got = "raised"
        with self._lock:
            self.granted[role] = got
        return got

    def step_down(self, role: str) -> int:
        """Every thread of this process at ``role``'s real-time priority (the role's own and those it started,
        a codec's slice threads) back to the raised priority, or the process's own where raising is refused:
        for a real-time thread that needs too much of its CPU.  How many threads it moved."""
        priority = _realtime_priority(role)
        moved = 0
        for tid in _own_threads():
            try:
                if os.sched_getscheduler(tid) != os.SCHED_FIFO or os.sched_getparam(tid).sched_priority != priority:
                    continue
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))  # lowering: always allowed
            except OSError:  # the thread ended meanwhile
                continue
            moved += 1
            try:
                os.setpriority(os.PRIO_PROCESS, tid, RAISED_NICE)
            except OSError:
                with contextlib.suppress(OSError):
                    self._make_ordinary(tid)
        with self._lock:
            self.granted[role] = "raised (stepped down from real-time)"
        return moved

    def worked(self, role: str, share: CpuShare, started_s: float, finished_s: float) -> None:
        """After each piece of ``role``'s work (a frame's encode or decode): a real-time worker whose work now fills
        too much of its CPU (:class:`~pyrofling.core.cpu_share.CpuShare`) steps down, and a warning says so."""
        if self.granted.get(role) != "real-time" or not share.worked(started_s, finished_s):
            return  # not real-time (refused, stepped down, or priorities left alone): nothing to watch
        moved = self.step_down(role)
        log.warning(
            "the %s needed more than half of its CPU (%.1f %% of the last second): it and its codec threads (%d in "
            "all) step down from real-time to a raised priority, so that the event loop and the sound keep their "
            "turns on that CPU",
            role,
            100 * (share.share_at_step_down or 0.0),
            moved,
        )

    def _make_ordinary(self, tid: int) -> None:
        """Back to the ordinary class and the process's nice value (a lower priority: always allowed)."""
        if os.sched_getscheduler(tid) != os.SCHED_OTHER:
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
        if self.base_nice is not None and _nice(tid) != self.base_nice:
            os.setpriority(os.PRIO_PROCESS, tid, self.base_nice)

    def summary(self) -> str:
        """One line: what each role asked for and got."""
        with self._lock:
            granted = dict(self.granted)
        if not self.enabled:
            return "thread priorities: left as they are (--thread-priority normal, or not asked for)"
        parts = [f"{role} {got}" for role, got in granted.items()]
        # A role that asks for less than it had ("normal") is never refused a privilege.
        refused = [
            role
            for role, got in granted.items()
            if THREAD_ROLES[role] != "normal" and got != THREAD_ROLES[role] and "stepped down" not in got
        ]
        hint = (
            "; not granted for "
            + ", ".join(refused)
            + " (needs CAP_SYS_NICE or an rtprio/nice limit: see docs/streaming.md)"
            if refused
            else ""
        )
        return "thread priorities: " + ", ".join(parts) + hint


def _realtime_priority(role: str) -> int:
    return WORKER_PRIORITIES.get(role, REALTIME_PRIORITY)


def _own_threads() -> list[int]:
    """The native ids of this process's threads (Linux; none elsewhere)."""
    try:
        return [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        return []


def _nice(tid: int) -> int | None:
    try:
        return os.getpriority(os.PRIO_PROCESS, tid)
    except (OSError, AttributeError):
        return None


def _try(change: Callable[[], None]) -> bool:
    try:
        change()
    except (OSError, AttributeError):  # refused, or a platform without the call
        return False
    return True


#: This process's threads' priorities.
THREAD_PRIORITIES = ThreadPriorities()

#: This process's collector runs (recorded once :func:`tune_for_latency` ran).
COLLECTOR_PAUSES = CollectorPauses()


#: Modules that the libraries we call import on their first use, which would otherwise come mid-stream.
IMPORTED_ON_FIRST_USE = ("numpy.ma", "concurrent.futures.thread")


def tune_for_latency(*, thread_priority: bool = True) -> None:
    """Call once the program has imported what it needs and before it starts streaming; ``thread_priority``:
    raise the timing threads' priorities (:class:`ThreadPriorities`) where the system allows."""
    THREAD_PRIORITIES.enabled = thread_priority
    for name in IMPORTED_ON_FIRST_USE:
        importlib.import_module(name)
    gc.collect()
    gc.freeze()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    COLLECTOR_PAUSES.install()
