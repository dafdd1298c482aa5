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
