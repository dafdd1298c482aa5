"""A cascade's edges, each on its own (``host --spectators-edge``): pure, times in, outputs out.

The origin's room and mountpoint are :class:`~pyrofling.core.host.spectators.SpectatorsCore`'s; each edge (a
mountpoint on the edge, fed by a forwarder on the origin) is made once the origin publishes, and lives its own
life after that:

* **An edge that goes away is that edge's business.** A failed keepalive says so in one line, the origin's
  forwarder to it is dropped, and it is made again with backoff (``retry_min_s`` doubling to ``retry_max_s``)
  until it answers, without another word; then one line says it is back. The origin and the other edges go on.
* **One that is not there at start** is one line, then tried the same way.
* **The origin gone takes every edge with it** (their forwarders were the origin's): once the origin publishes
  again, every edge is made again.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TypeAlias

from pyrofling.core.host.recording import Backoff
from pyrofling.core.host.spectators import Say, SpectatorsConfig


class EdgePhase(enum.Enum):
    IDLE = "idle"  # the origin is not publishing: nothing to feed it from
    MAKING = "making"  # its mountpoint and forwarder asked for
    UP = "up"
    WAITING = "waiting"  # gone, or never answered: tried again at its retry time


@dataclass(frozen=True, slots=True)
class CreateEdge:
    """Create the edge's mountpoint and the origin's forwarder to it."""

    edge: str


@dataclass(frozen=True, slots=True)
class DropEdge:
    """Stop the origin's forwarder to an edge that went away (its mountpoint went with it)."""

    edge: str


EdgesOutput: TypeAlias = CreateEdge | DropEdge | Say


@dataclass(slots=True)
class _Edge:
    backoff: Backoff
    phase: EdgePhase = EdgePhase.IDLE
    retry_at: float | None = None
    up_since: float | None = None
    said: bool = False  # its outage (or absence) was said: nothing more until it is back
    outages: int = 0


class EdgesCore:
    """Every edge's state; the shell reports what happened (origin up or down, an edge made, an edge failed)."""

    def __init__(self, edges: tuple[str, ...], config: SpectatorsConfig | None = None) -> None:
        cfg = config or SpectatorsConfig()
        self._edges = {e: _Edge(Backoff(initial_s=cfg.retry_min_s, max_s=cfg.retry_max_s)) for e in edges}

    def origin_up(self, now: float) -> list[EdgesOutput]:
        """The origin publishes (again): make every edge."""
        del now
        out: list[EdgesOutput] = []
        for name, edge in self._edges.items():
            edge.phase, edge.retry_at = EdgePhase.MAKING, None
            out.append(CreateEdge(name))
        return out

    def origin_down(self) -> None:
        """The origin went away: its forwarders with it; nothing to make until it is back."""
        for edge in self._edges.values():
            edge.phase, edge.retry_at, edge.up_since = EdgePhase.IDLE, None, None

    def created(self, name: str, now: float) -> list[EdgesOutput]:
        edge = self._edges.get(name)
        if edge is None or edge.phase is not EdgePhase.MAKING:
            return []  # the origin went away meanwhile: made again when it is back
        back = edge.said
        edge.phase, edge.up_since, edge.said = EdgePhase.UP, now, False
        return [Say(f"spectators: the edge {name} is back, fed by the origin again")] if back else []

    def failed(self, name: str, now: float, reason: str) -> list[EdgesOutput]:
        """Making the edge failed, or its keepalive did."""
        edge = self._edges.get(name)
        if edge is None or edge.phase in (EdgePhase.IDLE, EdgePhase.WAITING):
            return []
        out: list[EdgesOutput] = []
        if edge.phase is EdgePhase.UP:
            edge.outages += 1
            out.append(DropEdge(name))
        if not edge.said:
            edge.said = True
            what = "lost" if edge.phase is EdgePhase.UP else "cannot reach"
            out.append(Say(f"spectators: {what} the edge {name} ({reason}); the origin and the other edges go on, "
                           "feeding it again when it is back", warning=True))  # fmt: skip
        edge.phase, edge.retry_at = EdgePhase.WAITING, edge.backoff.failed(now, edge.up_since)
        edge.up_since = None
        return out

    def timer(self, now: float) -> list[EdgesOutput]:
        out: list[EdgesOutput] = []
        for name, edge in self._edges.items():
            if edge.phase is EdgePhase.WAITING and edge.retry_at is not None and now >= edge.retry_at:
                edge.phase, edge.retry_at = EdgePhase.MAKING, None
                out.append(CreateEdge(name))
        return out

    def next_timer(self) -> float | None:
        return min((e.retry_at for e in self._edges.values() if e.retry_at is not None), default=None)

    def up(self) -> list[str]:
        """The edges being fed now."""
        return [name for name, edge in self._edges.items() if edge.phase is EdgePhase.UP]

    def summary(self) -> dict[str, dict[str, object]]:
        return {name: {"phase": e.phase.value, "outages": e.outages} for name, e in self._edges.items()}
