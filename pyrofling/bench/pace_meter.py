"""Is the machine itself running slow?  A fixed piece of work, timed every few milliseconds beside a bench.

On a shared or throttled machine every CPU can slow down at once for tens of
milliseconds: on one 16-CPU machine a pure-Python loop took 12–20 times its
usual CPU time in 30–130 ms spells every 1.5–2 s, on CPUs no pyrofling process
used, with nothing else running and no steal reported.  Such a spell stretches
every stage of a stream at once (encode, decode, the presenter), so a bench that
did not see it would blame the code.  This meter runs in its own process beside
the bench: a chunk of work of a fixed size every ``interval_s`` (about 2 % of a
CPU), its *CPU time* measured, so a chunk merely waiting for a CPU (the bench's
own load) does not count; only work that ran slower than it does does.

:func:`slow_spells` and :func:`summarize` are pure; :class:`PaceMeter` runs the
process (``python -m pyrofling.bench.pace_meter SECONDS OUT``).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: A chunk this many times its median CPU time ran on a slowed machine.
SLOW_FACTOR = 3.0
#: Slow chunks closer than this belong to one spell, seconds.
SPELL_GAP_S = 0.02
#: Work per chunk (loop turns; ~50–150 µs on current CPUs) and the pause between chunks.
CHUNK_TURNS = 1000
INTERVAL_S = 0.002


def _chunk() -> int:
    total = 0
    for i in range(CHUNK_TURNS):
        total += i * i
    return total


def measure(duration_s: float, interval_s: float = INTERVAL_S) -> list[tuple[float, float]]:
    """(monotonic start, CPU seconds) of each chunk, for ``duration_s``."""
    samples: list[tuple[float, float]] = []
    end = time.monotonic() + duration_s
    while (start := time.monotonic()) < end:
        cpu = time.thread_time()
        _chunk()
        samples.append((start, time.thread_time() - cpu))
        time.sleep(interval_s)
    return samples


def slow_spells(
    samples: list[tuple[float, float]], *, factor: float = SLOW_FACTOR, gap_s: float = SPELL_GAP_S
) -> list[tuple[float, float, float]]:
    """(start, end, worst factor) of each spell of chunks that took over ``factor`` × the median CPU time; a
    spell ends where no slow chunk follows within ``gap_s``.  A chunk's end is its start plus its CPU time."""
    if not samples:
        return []
    median = statistics.median(cpu for _, cpu in samples)
    if median <= 0:
        return []
    spells: list[list[float]] = []
    for start, cpu in samples:
        ratio = cpu / median
        if ratio <= factor:
            continue
        if spells and start - spells[-1][1] <= gap_s:
            spells[-1][1] = start + cpu
            spells[-1][2] = max(spells[-1][2], ratio)
        else:
            spells.append([start, start + cpu, ratio])
    return [(a, b, r) for a, b, r in spells]


def summarize(samples: list[tuple[float, float]], spells: list[tuple[float, float, float]]) -> dict[str, Any]:
    """Spells a minute, slow milliseconds a minute, the longest spell and the worst slow-down."""
    if not samples:
        return {"samples": 0, "spells": [], "spells_per_minute": None, "slow_ms_per_minute": None}
    seconds = max(samples[-1][0] - samples[0][0], 1e-9)
    slow_s = sum(b - a for a, b, _ in spells)
    return {
        "samples": len(samples),
        "seconds": seconds,
        "chunk_cpu_us_median": 1e6 * statistics.median(cpu for _, cpu in samples),
        "spells": [(round(a, 4), round(b, 4), round(r, 1)) for a, b, r in spells],
        "spells_per_minute": 60 * len(spells) / seconds,
        "slow_ms_per_minute": 60_000 * slow_s / seconds,
        "longest_spell_ms": 1000 * max((b - a for a, b, _ in spells), default=0.0),
        "worst_factor": max((r for _, _, r in spells), default=1.0),
    }


def overlaps(start: float | None, end: float | None, spells: list[tuple[float, float, float]] | list[Any]) -> bool:
    """Whether [start, end] (monotonic seconds) met any spell."""
    if start is None or end is None:
        return False
    return any(a < end and b > start for a, b, *_ in spells)


class PaceMeter:
    """The meter in its own process for ``duration_s``; :meth:`result` waits for it and reads what it found."""

    def __init__(self, duration_s: float, out: Path) -> None:
        self.out = out
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "pyrofling.bench.pace_meter", f"{duration_s:g}", str(out)],
            stdout=subprocess.DEVNULL,
        )

    @property
    def pid(self) -> int:
        return self._proc.pid

    def stop(self) -> None:
        """End it early (it writes what it has measured)."""
        if self._proc.poll() is None:
            self._proc.terminate()

    def result(self, timeout_s: float = 10.0) -> dict[str, Any] | None:
        try:
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
            return None
        try:
            return dict(json.loads(self.out.read_text()))
        except (OSError, ValueError):
            return None


def main(argv: list[str]) -> int:
    import signal

    duration_s, out = float(argv[0]), Path(argv[1])
    samples: list[tuple[float, float]] = []

    def write() -> None:
        out.write_text(json.dumps(summarize(samples, slow_spells(samples))))

    def on_term(_sig: int, _frame: Any) -> None:
        write()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    # At the idle class it never takes a CPU from the host or the viewer it sits beside (at the normal class it
    # woke every 2 ms onto whichever CPU, theirs included); its chunks are timed by their CPU time, which a wait
    # for a CPU does not change.
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    end = time.monotonic() + duration_s
    while time.monotonic() < end:  # in pieces, each written, so that a stop keeps what was measured
        samples += measure(min(1.0, end - time.monotonic()))
        write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
