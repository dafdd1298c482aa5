"""What work a stranger can make the host do before it has authenticated (pure; seconds are the caller's).

An AUTH_CHALLENGE costs the host a PAKE message and a key share, about 4 ms of pure Python: the one expensive
step anyone who reaches the port can ask for. :class:`ChallengeBudget` holds it to a token bucket per address
prefix (an IPv4 address, an IPv6 /64) and one for the whole host, both consulted before the work is done, so a
burst or a flood costs a bounded share of a core however it arrives; what a refused challenge gets instead is a
"busy, try again in …" reply (protocol.md §7.7).

Before that, every connection costs the host an accept, a cookie and a few writes, about 0.3 ms of the loop that
paces media: :class:`ConnectionBudget` holds each prefix to a few new connections a second, checked when the
connection opens, so a prefix that connects thousands of times a second is closed before anything is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyrofling.core.secure import limiter_key


@dataclass(slots=True)
class TokenBucket:
    """``rate_per_s`` tokens a second, at most ``burst`` saved up."""

    rate_per_s: float
    burst: float
    tokens: float
    at_s: float

    @classmethod
    def full(cls, rate_per_s: float, burst: float, now: float) -> TokenBucket:
        return cls(rate_per_s, burst, burst, now)

    def _refill(self, now: float) -> None:
        if now > self.at_s:
            self.tokens = min(self.burst, self.tokens + (now - self.at_s) * self.rate_per_s)
            self.at_s = now

    def available(self, now: float) -> bool:
        self._refill(now)
        return self.tokens >= 1.0

    def take(self) -> None:
        """Spend one token (after :meth:`available` said there is one)."""
        self.tokens -= 1.0

    def wait_s(self, now: float) -> float:
        """Seconds until a token is there (0: now)."""
        self._refill(now)
        return max(0.0, (1.0 - self.tokens) / self.rate_per_s)

    def is_full(self, now: float) -> bool:
        self._refill(now)
        return self.tokens >= self.burst


@dataclass(slots=True)
class ChallengeBudget:
    """Challenges per address prefix and in total: ``take`` before the work, which happens only if it says 0.

    The defaults give a viewer's few reconnects room at once and hold one prefix to two challenges a second. The
    host makes 10 a second with 4 at once (a handshake's two PAKE steps are about 10 ms of Python: a tenth of a
    core, and never a run of them long enough to hold up a frame), whatever number of prefixes ask; and keeps
    5 a second for prefixes that have asked for nothing lately (their bucket is full), so a flood from a few
    addresses that takes every ordinary challenge still leaves room for a friend.
    """

    per_prefix_rate_s: float = 2.0
    per_prefix_burst: int = 6
    total_rate_s: float = 10.0
    total_burst: int = 4
    reserve_rate_s: float = 5.0
    reserve_burst: int = 5
    #: Prefixes remembered at most; full buckets are forgotten first (a new one starts full anyway).
    max_prefixes: int = 4096
    granted: int = 0
    refused: int = 0
    _total: TokenBucket | None = None
    _reserve: TokenBucket | None = None
    _prefixes: dict[str, TokenBucket] = field(default_factory=dict)

    def take(self, address: str, now: float) -> float:
        """0 when a challenge may be made for ``address`` now (its tokens spent); else seconds to wait."""
        total = self._total
        if total is None:
            total = self._total = TokenBucket.full(self.total_rate_s, self.total_burst, now)
        reserve = self._reserve
        if reserve is None:
            reserve = self._reserve = TokenBucket.full(self.reserve_rate_s, self.reserve_burst, now)
        key = limiter_key(address)
        bucket = self._prefixes.get(key)
        if bucket is None:
            if len(self._prefixes) >= self.max_prefixes:
                self._forget_full(now)
            if len(self._prefixes) >= self.max_prefixes:  # every prefix is busy: only the total is left
                self.refused += 1
                return max(total.wait_s(now), 1.0 / self.total_rate_s)
            bucket = self._prefixes[key] = TokenBucket.full(self.per_prefix_rate_s, self.per_prefix_burst, now)
        fresh = bucket.is_full(now)  # asked for nothing lately
        if not bucket.available(now):
            self.refused += 1
            return bucket.wait_s(now)
        if total.available(now):
            total.take()
        elif fresh and reserve.available(now):
            reserve.take()
        else:
            bucket.take()  # asking counts: a prefix refused again and again is never "fresh" for the reserve
            self.refused += 1
            return total.wait_s(now)
        bucket.take()
        self.granted += 1
        return 0.0

    def _forget_full(self, now: float) -> None:
        self._prefixes = {k: b for k, b in self._prefixes.items() if not b.is_full(now)}


@dataclass(slots=True)
class ConnectionBudget:
    """New connections per address prefix: a viewer's reconnects and a few friends behind one NAT fit at once;
    a prefix opening connections as fast as it can is held to ``per_prefix_rate_s``."""

    per_prefix_rate_s: float = 4.0
    per_prefix_burst: int = 8
    max_prefixes: int = 4096
    _prefixes: dict[str, TokenBucket] = field(default_factory=dict)

    def take(self, prefix: str, now: float) -> bool:
        """Whether a connection from ``prefix`` (:func:`~pyrofling.core.secure.limiter_key`) may open now."""
        bucket = self._prefixes.get(prefix)
        if bucket is None:
            if len(self._prefixes) >= self.max_prefixes:
                self._prefixes = {k: b for k, b in self._prefixes.items() if not b.is_full(now)}
            if len(self._prefixes) >= self.max_prefixes:
                return True  # TCP proved each of these addresses: the other limits still hold them
            bucket = self._prefixes[prefix] = TokenBucket.full(self.per_prefix_rate_s, self.per_prefix_burst, now)
        if not bucket.available(now):
            return False
        bucket.take()
        return True
