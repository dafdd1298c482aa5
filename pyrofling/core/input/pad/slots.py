"""Which virtual pad each player drives (PADS, protocol.md §7.12); pure.

With one pad (the default) everyone shares pad 1 under the reference's rules.
With ``pads`` > 1, each player (a connection that KICKed for the gamepad and said
who it is with PLAYER) gets the lowest free pad, in join order, and keeps it: a
player whose connection ends keeps its pad reserved for ``grace_s``, and gets
the same one back when it reconnects with the same token.  Connections that
cannot say who they are (native viewers) share pad 1, as the reference expects,
under the reference's ownership rules there.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class PadSlots:
    pads: int = 1
    grace_s: float = 30.0
    #: conn_id → pad, for connections that play.
    _by_conn: dict[int, int] = field(default_factory=dict)
    #: pad → (token, reserved until): a player who left and may come back.
    _reserved: dict[int, tuple[int, float]] = field(default_factory=dict)
    _tokens: dict[int, int] = field(default_factory=dict)  # conn_id → token
    reconnects_kept: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.pads <= 16:
            raise ValueError(f"pads must be 1..16, not {self.pads}")

    def join(self, conn_id: int, token: int | None, now: float) -> int | None:
        """A connection KICKed for the gamepad: its pad (None: all are taken)."""
        if conn_id in self._by_conn:
            return self._by_conn[conn_id]
        if self.pads == 1 or token is None:
            self._by_conn[conn_id] = 1  # shared, as the reference
            return 1
        self._expire(now)
        for pad, (held_by, _) in list(self._reserved.items()):
            if held_by == token:  # back within the grace period: the same pad
                del self._reserved[pad]
                self.reconnects_kept += 1
                return self._take(conn_id, token, pad)
        taken = {p for c, p in self._by_conn.items() if c in self._tokens} | set(self._reserved)
        for pad in range(1, self.pads + 1):
            if pad not in taken:
                return self._take(conn_id, token, pad)
        return None

    def _take(self, conn_id: int, token: int, pad: int) -> int:
        self._by_conn[conn_id] = pad
        self._tokens[conn_id] = token
        return pad

    def left(self, conn_id: int, now: float) -> None:
        pad = self._by_conn.pop(conn_id, None)
        token = self._tokens.pop(conn_id, None)
        if pad is not None and token is not None:
            self._reserved[pad] = (token, now + self.grace_s)

    def player_of(self, pad: int) -> int | None:
        """The connection that holds ``pad`` as its own (None: nobody, or only sharers)."""
        return next((c for c, p in self._by_conn.items() if p == pad and c in self._tokens), None)

    def pad_of(self, conn_id: int) -> int | None:
        return self._by_conn.get(conn_id)

    def exclusive(self, conn_id: int) -> bool:
        """Whether this connection's pad is its own (a player with a token, more than one pad)."""
        return conn_id in self._tokens

    def _expire(self, now: float) -> None:
        for pad, (_, until) in list(self._reserved.items()):
            if now >= until:
                del self._reserved[pad]

    def summary(self, now: float) -> dict[str, object]:
        self._expire(now)
        return {
            "pads": self.pads,
            "players": {str(c): p for c, p in self._by_conn.items()},
            "reserved": sorted(self._reserved),
            "reconnects_kept": self.reconnects_kept,
        }
