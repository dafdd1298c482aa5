"""Bounded windows of measurements, so a host or viewer left running for days keeps flat memory.

Statistics keep the most recent samples (two minutes at 60 per second) rather than every one:
medians and percentiles over a long run then describe its recent past, and memory stops
growing once the windows are full (``pyrofling bench soak`` checks it stays flat after that).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable
from typing import Any, TypeVar

T = TypeVar("T")

#: Samples kept per statistic: two minutes at 60 a second (~230 kB of floats).
SAMPLES_KEPT = 7_200
#: Samples that live figures (a HUD, a statistics file rewritten every second) take their medians over: the
#: last 10 s at 60 a second.  Sorting every kept sample that often cost a viewer 2-4 ms of its event loop,
#: and its decode thread waited as long for the statistics' lock.
LIVE_SAMPLES = 600


def recent_samples(maxlen: int = SAMPLES_KEPT) -> deque[Any]:
    """An empty window of the last ``maxlen`` measurements (a dataclass field factory)."""
    return deque(maxlen=maxlen)


def tail(values: Iterable[T], n: int) -> list[T]:
    """The last ``n`` values in order, without copying the whole window."""
    if isinstance(values, deque | list):
        newest = list(itertools.islice(reversed(values), n))
        newest.reverse()
        return newest
    return list(values)[-n:]


def median_and_p95(values: Iterable[float]) -> tuple[float | None, float | None]:
    """The median and the 95th percentile (numpy's default, linear between the two nearest ranks) of ``values``,
    None for none: one sort, no arrays (``np.percentile`` on 600 live samples took 0.25 ms each, five of them a
    second on a viewer's event loop while its pictures waited)."""
    ordered = sorted(values)
    n = len(ordered)
    if not n:
        return None, None
    mid = n // 2
    median = ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    position = 0.95 * (n - 1)
    low = int(position)
    high = min(low + 1, n - 1)
    return float(median), float(ordered[low] + (ordered[high] - ordered[low]) * (position - low))
