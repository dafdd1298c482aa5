"""Interpreter settings for the processes that keep time (host, viewer, example game).

Measured with ``pyrofling bench latency --trace`` on a 2-core machine running host
and viewer together; both are per process and cost nothing measurable:

* **gc.freeze()** once everything is imported: the cyclic collector's full
  collections walked every module object each time, and stopped the whole
  process for 15–50 ms a few times a minute (each one a repeated refresh or
  more).  Frozen, the objects made at start-up are skipped: 2–5 ms.
* **A 1 ms GIL switch interval** (Python's default is 5 ms): a thread that wakes
  (the presenter at its deadline, the event loop with a datagram, the decoder
  with a picture) waits for the GIL at most that long while another thread runs
  Python code.
"""

from __future__ import annotations

import gc
import sys

SWITCH_INTERVAL_S = 0.001


def tune_for_latency() -> None:
    """Call once the program has imported what it needs and before it starts streaming."""
    gc.collect()
    gc.freeze()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
