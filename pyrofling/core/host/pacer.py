"""Send pacing: cap the instantaneous send rate so a frame is not one burst.

The reference hands a whole frame to the kernel at once and relies on ``tc fq``
for pacing; bursts overflow shallow router queues and cause exactly the
clustered loss FEC handles worst.  pyrofling paces in user space.

Pure: the sender asks :meth:`Pacer.next_send_time` for the next datagram's size,
sends it once ``now`` reaches that time, then calls :meth:`Pacer.on_sent`.
:class:`PacedQueue` wraps that loop for a shell that just pushes datagrams.  A
packet's repair datagrams may be pushed still to compute (the packetizer's
``LaterDatagram``): they are computed when the first is due, on a turn of their
own, once the data before them has been handed out.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyrofling.core.host.packetizer import Datagram

#: IPv4 + UDP header bytes a datagram costs on the wire beyond its payload.
UDP_OVERHEAD_BYTES = 28
#: Default cap: 4x a 50 Mbit/s stream, so a 50 Mbit/s frame leaves in about a quarter of a 60 Hz frame.
DEFAULT_RATE_BITS_PER_S = 200_000_000
#: Default burst: 16 full datagrams go out back to back before pacing applies.
DEFAULT_BURST_BYTES = 16 * 1076
#: A paced queue wakes its sender for this many datagrams at a time where the bucket holds them: a wake-up of the
#: host's event loop costs more than the sends it makes. The last datagram of a frame still leaves when it would
#: have one at a time (when the bucket has its bytes); those before it go at most seven sends' time later (0.3 ms
#: at the default ceiling). Eight against four, 720p30 at 20 Mbit/s on the 2-core machine (a wake costs a thread
#: there 0.2-0.3 ms of CPU however little it does): the host's event loop 15.0 -> 12.5-13.0 % of a core.
WAKE_BATCH = 8


class Pacer(Protocol):
    """Decides when the next datagram may leave."""

    name: str

    def next_send_time(self, now: float, size_bytes: int) -> float:
        """Earliest time a datagram of ``size_bytes`` may be sent (≤ now: send it now)."""
        ...

    def on_sent(self, now: float, size_bytes: int) -> None:
        """A datagram of ``size_bytes`` was sent at ``now``."""
        ...


class TokenBucketPacer:
    """Token bucket: ``rate_bits_per_s`` sustained, ``burst_bytes`` back to back.

    Sizes are charged with the IP/UDP overhead so the cap is the wire rate.
    """

    name = "token-bucket"

    def __init__(
        self, *, rate_bits_per_s: float = DEFAULT_RATE_BITS_PER_S, burst_bytes: int = DEFAULT_BURST_BYTES
    ) -> None:
        if rate_bits_per_s <= 0:
            raise ValueError("pacing rate must be positive")
        if burst_bytes < 1500:
            raise ValueError("burst must hold at least one full datagram (1500 bytes)")
        #: The rate it was made with; :meth:`set_rate` moves the current one (rate control), never above this.
        self.configured_bits_per_s = rate_bits_per_s
        self.rate_bytes_per_s = rate_bits_per_s / 8.0
        self.burst_bytes = float(burst_bytes)
        self.configured_burst_bytes = burst_bytes
        self._tokens = float(burst_bytes)
        self._updated: float | None = None

    def set_rate(self, rate_bits_per_s: float) -> None:
        """Pace at this rate from now on (at most the configured one).  Below it the burst shrinks to what the
        rate sends in 10 ms, 8 datagrams at most (a narrow link's queue is shallow) and 3 at least (an ordinary
        frame still leaves back to back)."""
        rate = max(1.0, min(rate_bits_per_s, self.configured_bits_per_s))
        self.rate_bytes_per_s = rate / 8.0
        if rate < self.configured_bits_per_s:
            burst = min(8 * 1076, max(3 * 1076, rate / 8 * 0.010))
            self.burst_bytes = float(min(self.configured_burst_bytes, burst))
        else:
            self.burst_bytes = float(self.configured_burst_bytes)
        self._tokens = min(self._tokens, self.burst_bytes)

    def _refill(self, now: float) -> None:
        if self._updated is not None and now > self._updated:
            self._tokens = min(self.burst_bytes, self._tokens + (now - self._updated) * self.rate_bytes_per_s)
        if self._updated is None or now > self._updated:
            self._updated = now

    def next_send_time(self, now: float, size_bytes: int) -> float:
        self._refill(now)
        # A datagram that costs more than the bucket holds (a weighted one, a small burst) goes once it is full,
        # into debt: otherwise it would wait forever.
        need = min(size_bytes + UDP_OVERHEAD_BYTES, self.burst_bytes)
        if self._tokens >= need:
            return now
        return now + (need - self._tokens) / self.rate_bytes_per_s

    def on_sent(self, now: float, size_bytes: int) -> None:
        self._refill(now)
        # Tokens may go negative when a caller sends early; the debt delays what follows.
        self._tokens -= size_bytes + UDP_OVERHEAD_BYTES


class UnpacedPacer:
    """Everything leaves at once, as the reference does (for comparison)."""

    name = "none"

    def next_send_time(self, now: float, size_bytes: int) -> float:
        return now

    def on_sent(self, now: float, size_bytes: int) -> None:
        pass


def make_pacer(name: str, *, rate_bits_per_s: float = DEFAULT_RATE_BITS_PER_S) -> Pacer:
    if name in ("token-bucket", "tb"):
        return TokenBucketPacer(rate_bits_per_s=rate_bits_per_s)
    if name == "none":
        return UnpacedPacer()
    raise ValueError(f"unknown pacer {name!r}; choose token-bucket or none")


class PacedQueue:
    """A bounded FIFO of datagrams released by a :class:`Pacer`.

    The shell pushes datagrams, calls :meth:`pop_due` at ``now`` and sends what it
    returns, then sleeps until :meth:`next_timer`.  When ``max_queued_bytes``
    would be exceeded the newest datagrams are refused (counted in ``dropped``):
    a sender that cannot keep up must not build unbounded latency.
    """

    def __init__(
        self,
        pacer: Pacer,
        *,
        max_queued_bytes: int = 4 * 1024 * 1024,
        on_sent: Callable[[Any, float, int], None] | None = None,
        seal: Callable[[bytes], bytes] | None = None,
        seal_overhead: int = 0,
    ) -> None:
        self.pacer = pacer
        #: Applied to each datagram as it leaves (protocol.md §7.7), which makes it ``seal_overhead`` bytes longer.
        self.seal = seal
        self.seal_overhead = seal_overhead
        self.max_queued_bytes = max_queued_bytes
        #: Told (tag, now, size) for each datagram pushed with a tag as it leaves (rate control's send times).
        self.on_sent = on_sent
        self._queue: deque[tuple[Datagram, Any, float]] = deque()
        self._queued_bytes = 0
        self.dropped = 0
        self.sent = 0

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    def push(self, datagrams: Sequence[Datagram], *, tag: Any = None, weight: float = 1.0) -> int:
        """Queue datagrams in order; returns how many were refused for lack of room.  ``weight``: each costs the
        pacer that many times its size (a key frame paced slower than the rest)."""
        refused = 0
        for d in datagrams:
            size = len(d) + self.seal_overhead
            if self._queued_bytes + size > self.max_queued_bytes:
                refused += 1
                continue
            self._queue.append((d, tag, weight))
            self._queued_bytes += size
        self.dropped += refused
        return refused

    def pop_due(self, now: float) -> list[bytes]:
        """Datagrams that may be sent at ``now``, in order (already charged to the pacer).  Repair still to
        compute waits for the next call when datagrams come before it: they leave first."""
        out: list[bytes] = []
        queue, pacer = self._queue, self.pacer
        while queue:
            cost = self._cost(queue[0])  # once a datagram: this runs for every one the host sends
            if pacer.next_send_time(now, cost) > now:
                break
            head, tag, _ = queue[0]
            if isinstance(head, bytes):
                d = head
            elif out and not head.computed:
                break  # what is ready leaves first; the repair is computed on the next call
            else:
                d = head.datagram()
            queue.popleft()
            self._queued_bytes -= len(d) + self.seal_overhead
            pacer.on_sent(now, cost)
            if self.seal is not None:
                d = self.seal(d)
            if tag is not None and self.on_sent is not None:
                self.on_sent(tag, now, len(d))
            out.append(d)
        self.sent += len(out)
        return out

    def next_timer(self, now: float) -> float | None:
        """When the next :data:`WAKE_BATCH` datagrams (or all that wait, if fewer; as many as the pacer's bucket
        holds, if fewer still) may go together, or None when the queue is empty."""
        if not self._queue:
            return None
        head = self._queue[0]
        if not isinstance(head[0], bytes) and not head[0].computed:  # repair to compute: as soon as its first may go
            return self.pacer.next_send_time(now, self._cost(head))
        room = getattr(self.pacer, "burst_bytes", math.inf)
        together = 0
        for entry in itertools.islice(self._queue, WAKE_BATCH):
            cost = self._cost(entry) + UDP_OVERHEAD_BYTES
            if together and together + cost > room:
                break
            together += cost
        return self.pacer.next_send_time(now, together - UDP_OVERHEAD_BYTES)

    def _cost(self, entry: tuple[Datagram, Any, float]) -> int:
        return round((len(entry[0]) + self.seal_overhead) * entry[2])
