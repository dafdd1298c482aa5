"""A phase within a frame period: what the host's frame clock and the viewer's presentation loop both fold."""

from __future__ import annotations

import math


def wrap_phase(error_s: float, period_s: float) -> float:
    """Fold a phase error into [-period/2, period/2): only the phase within a frame is meaningful."""
    return error_s - period_s * math.floor(error_s / period_s + 0.5)
