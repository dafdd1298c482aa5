"""The host's side of its players' input (protocol.md §7.6, §7.11–§7.13); pure.

Which virtual pad each player drives (one shared pad as the reference, or one
each), who types and moves the mouse, everything let go when a player leaves or
goes quiet, and rumble sent back to the pad's player.
:class:`~pyrofling.core.host.sessions.HostSessions` hands it the KICKs, states and
departures of its connections; it answers with outputs, as
:class:`~pyrofling.core.host.auth.HostAuth` does.
"""

from __future__ import annotations

from collections import Counter

from pyrofling.core.host.state import (
    BROWSER_CONN_IDS,
    BrowserRumble,
    GamepadInput,
    HostOutput,
    KeyboardMouseInput,
    LogLine,
    RemoteViewer,
)
from pyrofling.core.input.keyboard_mouse import InputRouter, InputVerdict
from pyrofling.core.input.pad import GamepadRouter, PadVerdict
from pyrofling.core.input.pad.rumble import RumbleCommand
from pyrofling.core.input.pad.slots import PadSlots
from pyrofling.wire import ExtensionFeature, GamepadState, InputState, KickFlags, PadAssigned, Player, Rumble


class HostPlayers:
    """Pads, keyboard and mouse of one host; ``discarded`` is the sessions' counter of what was refused."""

    def __init__(self, discarded: Counter[str], *, pads: int = 1) -> None:
        self.discarded = discarded
        #: Which pad each player drives (§7.12), and each pad's router; pad 1 is the shared one.
        self.pads = PadSlots(pads)
        self.gamepads: dict[int, GamepadRouter] = {1: GamepadRouter()}
        #: Who types and moves the mouse (§7.11).
        self.input = InputRouter()
        #: The connection whose pad states were applied last (rate control's "player").
        self.pad_holder: int | None = None
        self.rumbles_sent = 0

    def router(self, pad: int) -> GamepadRouter:
        return self.gamepads.setdefault(pad, GamepadRouter())

    # -- from the control channel -------------------------------------------------------------

    def player(self, conn: RemoteViewer, msg: Player) -> bool:
        """PLAYER: who this connection is, across reconnects; False when PADS was not negotiated."""
        if not conn.extensions & ExtensionFeature.PADS:
            return False
        conn.player_token = msg.token
        return True

    def kick(self, conn: RemoteViewer, flags: KickFlags) -> None:
        """Every KICK: as the reference, one asking for the gamepad frees the (shared) pad for the next sender;
        likewise for the keyboard and mouse."""
        if flags & KickFlags.GAMEPAD:
            self.router(self.pads.pad_of(conn.conn_id) or 1).reset_ownership()
        if flags & KickFlags.KEYBOARD_MOUSE and conn.extensions & ExtensionFeature.KEYBOARD_MOUSE:
            self.input.reset_ownership()

    def joined(self, conn: RemoteViewer, now: float) -> list[HostOutput]:
        """The connection plays (KICKed for the gamepad): its pad, in join order (kept across a reconnect), or
        the shared pad 1; a pyrofling viewer is told which."""
        if self.pads.pad_of(conn.conn_id) is not None:
            return []
        token = conn.player_token if conn.extensions & ExtensionFeature.PADS else None
        pad = self.pads.join(conn.conn_id, token, now)
        out: list[HostOutput] = []
        if self.pads.pads > 1:
            text = f"{conn.label} plays pad {pad}" if pad else f"{conn.label}: all {self.pads.pads} pads are taken"
            out.append(LogLine(conn.conn_id, text))
        if conn.extensions & ExtensionFeature.PADS:
            out.append(conn.send(PadAssigned(pad or 0, self.pads.pads)))
        return out

    def left(self, conn: RemoteViewer) -> list[HostOutput]:
        """The connection is gone: what it held is let go, its pad waits for it a while."""
        out: list[HostOutput] = []
        pad = self.pads.pad_of(conn.conn_id) or 1
        release = self.router(pad).connection_closed(conn.conn_id)
        self.pads.left(conn.conn_id, conn.last_alive_s)
        if self.pad_holder == conn.conn_id:
            self.pad_holder = None
        if release is not None:
            out.append(GamepadInput(release, pad))
        let_go = self.input.connection_closed(conn.conn_id)
        if let_go is not None:
            out.append(KeyboardMouseInput(let_go))
        return out

    # -- from the datagrams -------------------------------------------------------------------

    def gamepad(self, conn: RemoteViewer, msg: GamepadState) -> list[HostOutput]:
        if not conn.flags & KickFlags.GAMEPAD:
            self.discarded["gamepad_not_requested"] += 1
            return []
        conn.gamepad_states += 1
        pad = self.pads.pad_of(conn.conn_id)
        if pad is None:
            self.discarded["gamepad_no_pad"] += 1  # every pad is taken
            return []
        verdict, update = self.router(pad).offer(conn.conn_id, msg)
        if verdict is not PadVerdict.APPLIED or update is None:
            self.discarded[f"gamepad_{verdict.value}"] += 1
            return []
        out: list[HostOutput] = [GamepadInput(update, pad)]
        if self.pad_holder != conn.conn_id:
            self.pad_holder = conn.conn_id
            how = "took the gamepad over" if update.took_over else "has the gamepad"
            out.append(LogLine(conn.conn_id, f"{conn.label} {how}"))
        return out

    def keyboard_mouse(self, conn: RemoteViewer, msg: InputState, now: float) -> list[HostOutput]:
        """Keys and the mouse: only from a viewer that negotiated them (granted only once it authenticates, unless
        the host opened them) and asked for them in its KICK."""
        if not conn.extensions & ExtensionFeature.KEYBOARD_MOUSE or not conn.flags & KickFlags.KEYBOARD_MOUSE:
            self.discarded["input_not_requested"] += 1
            return []
        conn.input_states += 1
        previous = self.input.owner
        verdict, update = self.input.offer(conn.conn_id, msg, now)
        if verdict is not InputVerdict.APPLIED or update is None:
            self.discarded[f"input_{verdict.value}"] += 1
            return []
        out: list[HostOutput] = [KeyboardMouseInput(update)]
        if previous != conn.conn_id:
            how = "took the keyboard and mouse over" if update.took_over else "has the keyboard and mouse"
            out.append(LogLine(conn.conn_id, f"{conn.label} {how}"))
        return out

    # -- from the games ------------------------------------------------------------------------

    def rumble(self, pad: int, command: RumbleCommand, connections: dict[int, RemoteViewer]) -> list[HostOutput]:
        """A game asked pad ``pad``'s motors for ``command``: the pad's player is told, over its (sealed) control
        channel, if it negotiated RUMBLE."""
        router = self.gamepads.get(pad)
        holder = router.owner if router is not None and router.owner is not None else self.pads.player_of(pad)
        conn = connections.get(holder) if holder is not None else None
        if conn is None or not conn.extensions & ExtensionFeature.RUMBLE:
            self.discarded["rumble_no_player"] += 1
            return []
        self.rumbles_sent += 1
        if conn.is_browser:  # the page plays it on its pad (the Gamepad API's vibration)
            browser = conn.conn_id - BROWSER_CONN_IDS
            return [BrowserRumble(browser, command.strong, command.weak, command.duration_ms)]
        conn.rumble_seq = (conn.rumble_seq + 1) & 0xFFFF
        return [conn.send(Rumble(pad, 0, command.strong, command.weak, command.duration_ms, conn.rumble_seq))]

    # -- time ----------------------------------------------------------------------------------

    def next_timer(self) -> float | None:
        return self.input.next_timer()

    def handle_timer(self, now: float) -> list[HostOutput]:
        silent = self.input.handle_timer(now)  # the owner held keys and went quiet: let go rather than hold them
        return [KeyboardMouseInput(silent)] if silent is not None else []
