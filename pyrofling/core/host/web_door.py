"""Who may open a connection to the host's web port, and which requests it answers (pure; seconds are the caller's).

The web port (``host --web``) serves the page and the browsers' WebSocket on TCP, over
TLS when it faces the network. Before any of that, every connection costs the host an
accept and a descriptor, and over HTTPS a TLS handshake (an ECDSA signature and a key
exchange, about a millisecond of the loop that paces media). :class:`WebDoor` decides at
the accept, before a byte is read, as the control port's admission does
(:mod:`pyrofling.core.host.admission`):

* **New connections** are held to a budget per address prefix (an IPv4 address, an IPv6
  /64) and one for the whole host, with a reserve for prefixes that asked for nothing
  lately (:class:`~pyrofling.core.host.admission.ChallengeBudget`'s rules): a page load
  and its WebSocket fit at once, a reload too, and a prefix opening connections as fast as
  it can gets a few a second; the rest are closed unread.
* **Open connections** are capped per prefix and in total, below the host's descriptor
  limit (the shell sizes ``max_open`` from it), with room beyond the total for a prefix
  that holds none: one address holding silent connections cannot take a friend's place,
  nor the host's descriptors.

:func:`request_refusal` then reads the request line's path and its ``Host`` and
``Origin`` headers: the WebSocket is opened only by the page's own origin (a page on
another site the person visits cannot open it, guess the password through it or take a
friend's waiting slot), and over plain HTTP, which listens on this machine's loopback
only, only under this machine's names (a site that rebinds its name to 127.0.0.1 is
answered nothing).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyrofling.core.host.admission import ChallengeBudget
from pyrofling.core.secure import limiter_key

#: The names this machine's own browser reaches a loopback-only page by.
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


@dataclass(slots=True)
class WebDoorConfig:
    """The web port's limits. Rates are connections a second, bursts connections."""

    #: New connections per prefix: a page load opens up to seven (the page, its scripts, the WebSocket), and a
    #: page on another site in the same browser may be opening a few a second meanwhile.
    per_prefix_rate_s: float = 8.0
    per_prefix_burst: int = 32
    #: New connections for the whole host, and a reserve for prefixes that asked for nothing lately.
    total_rate_s: float = 50.0
    total_burst: int = 100
    reserve_rate_s: float = 20.0
    reserve_burst: int = 24
    #: Connections open at once from one prefix (eight browsers watch at most; each holds one).
    per_prefix_open: int = 16
    #: Connections open at once in all (the shell lowers it to fit the descriptor limit), and how many more a
    #: prefix that holds none may still open.
    max_open: int = 256
    reserve_open: int = 16


@dataclass(slots=True)
class WebDoorCounters:
    admitted: int = 0
    #: Closed unread at the accept, by why.
    refused: dict[str, int] = field(default_factory=dict)

    def refuse(self, why: str) -> None:
        self.refused[why] = self.refused.get(why, 0) + 1


class WebDoor:
    """The shell asks :meth:`admit` at each accept (before TLS, before reading) and says :meth:`closed` when an
    admitted connection's socket closes."""

    def __init__(self, config: WebDoorConfig | None = None) -> None:
        self.config = cfg = config or WebDoorConfig()
        self.counters = WebDoorCounters()
        self._budget = ChallengeBudget(
            per_prefix_rate_s=cfg.per_prefix_rate_s,
            per_prefix_burst=cfg.per_prefix_burst,
            total_rate_s=cfg.total_rate_s,
            total_burst=cfg.total_burst,
            reserve_rate_s=cfg.reserve_rate_s,
            reserve_burst=cfg.reserve_burst,
        )
        self._open: dict[str, int] = {}
        self.open_total = 0

    def admit(self, address: str, now: float) -> str | None:
        """None: the connection may go on (it counts as open until :meth:`closed`); else why it is closed."""
        cfg, prefix = self.config, limiter_key(address)
        held = self._open.get(prefix, 0)
        if held >= cfg.per_prefix_open:
            self.counters.refuse("prefix_open")
            return "too many connections open from this address"
        if self.open_total >= cfg.max_open + (cfg.reserve_open if held == 0 else 0):
            self.counters.refuse("host_open")
            return "too many connections open"
        if self._budget.take(address, now) > 0:
            self.counters.refuse("rate")
            return "connections opened too fast"
        self._open[prefix] = held + 1
        self.open_total += 1
        self.counters.admitted += 1
        return None

    def closed(self, address: str) -> None:
        prefix = limiter_key(address)
        held = self._open.get(prefix, 0)
        if held <= 0:
            return
        if held == 1:
            del self._open[prefix]
        else:
            self._open[prefix] = held - 1
        self.open_total -= 1

    def summary(self) -> dict[str, object]:
        return {"admitted": self.counters.admitted, "refused": dict(self.counters.refused), "open": self.open_total}


def max_open_for(descriptor_limit: int, in_use: int, *, wanted: int = 256, spare: int = 128) -> int:
    """Connections the web port may hold within the process's descriptor limit: half of what is left once
    ``spare`` is kept for everything else (the control port, files, a friend's viewer), at least 16."""
    return max(16, min(wanted, (descriptor_limit - in_use - spare) // 2))


def request_refusal(
    path: str, host: str | None, origin: str | None, *, scheme: str, port: int, loopback_only: bool
) -> tuple[str, str] | None:
    """Why a request to the web port is answered 403, as (a counter's name, the words); None: it is served.

    ``host``, ``origin``: the request's headers (None: absent). ``scheme``: "http" or "https", as served.
    ``loopback_only``: plain HTTP on this machine's loopback, where only this machine's names are answered.

    A WebSocket at ``/stream`` must come from the page's own origin: browsers always send ``Origin`` on a
    WebSocket and a page cannot change it, so another site's page is refused before it is read. (A program that
    is not a browser may send no ``Origin``, or any: it is not a page the person visits, and the proof decides.)
    """
    if host is None:
        return "host_name", "no Host header"
    default = (scheme, port) in (("http", 80), ("https", 443))  # a browser leaves out a scheme's own port
    names = {f"{name}:{port}" for name in LOOPBACK_NAMES} | (set(LOOPBACK_NAMES) if default else set())
    if loopback_only and host.lower() not in names:
        return "host_name", f"this page answers to 127.0.0.1:{port} only"
    if path.split("?", 1)[0] != "/stream" or origin is None:
        return None
    if origin.lower() != f"{scheme}://{host.lower()}":
        return "foreign_origin", "the stream opens only from the host's own page"
    return None
