"""Log lines a stranger can cause, held to a rate: a flood of connections must not become a flood of the log.

:class:`RateLimit` is a :class:`logging.Filter` put on the loggers whose lines a
stranger's connection can make (the web port's, the control port's, asyncio's
TLS and accept errors). Each kind of line (its logger and its message template)
passes ``burst`` at once and ``per_minute`` after that; the next line of that kind
to pass says how many were left out meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

#: Lines a stranger can cause, per kind: at once, and a minute after that.
BURST = 10
PER_MINUTE = 6


class RateLimit(logging.Filter):
    """Drops the lines of a kind beyond ``burst`` at once and ``per_minute`` after; counts what it dropped."""

    def __init__(
        self, *, burst: int = BURST, per_minute: float = PER_MINUTE, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.burst, self.rate_s, self.clock = burst, per_minute / 60.0, clock
        self._kinds: dict[tuple[str, object], tuple[float, float, int]] = {}  # tokens, when, dropped since
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        kind = (record.name, record.msg)
        now = self.clock()
        tokens, at, dropped = self._kinds.get(kind, (float(self.burst), now, 0))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate_s)
        if tokens < 1.0:
            self._kinds[kind] = (tokens, now, dropped + 1)
            self.dropped += 1
            return False
        if dropped:
            record.msg = f"{record.msg} ({dropped} more like this left out of the log)"
        self._kinds[kind] = (tokens - 1.0, now, 0)
        if len(self._kinds) > 1024:  # kinds are the code's own templates: this only guards against surprises
            self._kinds.pop(next(iter(self._kinds)))
        return True


def limit(*names: str) -> None:
    """Put one :class:`RateLimit` on each of these loggers (once: a second call adds none)."""
    for name in names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RateLimit) for f in logger.filters):
            logger.addFilter(RateLimit())
