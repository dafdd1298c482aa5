"""Gamepad states from real clients over loopback to a real host, checked on the virtual pad's event record.

The host runs with a :class:`RecordingPad` in place of /dev/uinput (which this machine lacks);
everything between the client's key press and the pad write is the real code path.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from support import TINY, run, start_host, stop_host, until

from pyrofling.client.gamepad import GamepadConfig
from pyrofling.client.viewer import Viewer, ViewerConfig
from pyrofling.core.input.pad import ABS_X, BTN_EAST, BTN_SOUTH, BTN_WEST, EV_ABS, EV_KEY
from pyrofling.server.gamepad import RecordingPad
from pyrofling.server.host import Host
from pyrofling.wire import (
    CodecParameters,
    ControlFramer,
    Cookie,
    GamepadButton,
    GamepadState,
    Hello,
    Kick,
    KickFlags,
)

#: Every test here streams, serves or plays through real sockets, threads or processes (not the quick tier).
pytestmark = pytest.mark.io


async def stop(host: Host, task: asyncio.Task[Any], *clients: tuple[Viewer, asyncio.Task[Any]]) -> None:
    for viewer, vtask in clients:
        viewer.stop()
        await asyncio.wait_for(vtask, 10)
    await stop_host(host, task)


async def gamepad_client(host: Host) -> tuple[Viewer, asyncio.Task[Any]]:
    """``pyrofling gamepad``: KICK with only the GAMEPAD bit; the window's keyboard pad is the input."""
    cfg = ViewerConfig(
        host="127.0.0.1", port=host.port or 0, flags=KickFlags.GAMEPAD, gamepad=GamepadConfig(source="none")
    )
    viewer = Viewer(cfg)
    task = asyncio.create_task(viewer.run())
    await until(lambda: viewer.connection is not None and viewer.connection.streaming)
    return viewer, task


def key(viewer: Viewer, name: str, down: bool = True) -> None:
    assert viewer.gamepad is not None and viewer.gamepad.key(name, down)


def test_a_gamepad_client_drives_the_virtual_pad_and_lets_go_when_it_leaves() -> None:
    pad = RecordingPad()

    async def scenario() -> Host:
        host, task = await start_host(encoder=TINY, pad=pad)
        viewer, vtask = await gamepad_client(host)
        assert pad.reports() == []  # no input yet: nothing sent, nothing owned
        key(viewer, "Z")
        await until(lambda: len(pad.reports()) == 1)
        key(viewer, "D")
        await until(lambda: len(pad.reports()) == 2)
        key(viewer, "Z", False)
        await until(lambda: len(pad.reports()) == 3)
        await asyncio.sleep(0.05)  # states keep coming every 4 ms; unchanged ones write nothing
        assert len(pad.reports()) == 3
        [conn] = host.sessions.connections
        assert conn.flags == KickFlags.GAMEPAD and conn.gamepad_states >= 10
        assert host.stats.datagrams_sent == conn.pings  # a gamepad-only client gets ping replies, no media
        await stop(host, task, (viewer, vtask))
        return host

    host = run(scenario)
    assert pad.reports() == [
        [(EV_KEY, BTN_SOUTH, 1)],
        [(EV_ABS, ABS_X, 32767)],
        [(EV_KEY, BTN_SOUTH, 0)],
        [(EV_ABS, ABS_X, 0)],  # the owner left holding D: the host lets go
    ]
    summary = host.summary()["gamepad"]
    assert summary["pad"] == "recording pad" and summary["states_applied"] >= 10
    assert pad.closed


def test_hand_off_between_two_clients() -> None:
    pad = RecordingPad()

    async def scenario() -> Host:
        host, task = await start_host(encoder=TINY, pad=pad)
        a, a_task = await gamepad_client(host)
        b, b_task = await gamepad_client(host)
        key(a, "Z")  # A sends first: A owns
        await until(lambda: len(pad.reports()) == 1)
        a_conn = host.sessions.gamepad.owner
        key(b, "X")  # B is refused while A owns
        await until(lambda: host.sessions.discarded["gamepad_not_owner"] >= 5)
        assert len(pad.reports()) == 1
        key(b, "HOME")  # Mode takes the pad over; B's state has no South, so South is let go
        await until(lambda: len(pad.reports()) == 2)
        b_conn = host.sessions.gamepad.owner
        key(b, "HOME", False)
        key(b, "X", False)
        key(a, "Z", False)
        key(a, "C")  # A is refused now
        await asyncio.sleep(0.05)
        key(b, "X")
        await until(lambda: len(pad.reports()) == 4)
        assert host.sessions.gamepad.owner == b_conn != a_conn
        await stop(host, task, (a, a_task), (b, b_task))
        return host

    host = run(scenario)
    reports = pad.reports()
    assert reports[0] == [(EV_KEY, BTN_SOUTH, 1)]  # A
    assert reports[1] == [(EV_KEY, BTN_SOUTH, 0), (EV_KEY, BTN_EAST, 1)]  # B took over holding X (East) + Mode
    assert reports[2] == [(EV_KEY, BTN_EAST, 0)]  # B let go of everything
    assert reports[3] == [(EV_KEY, BTN_EAST, 1)]  # B again: A's West never reached the pad
    assert (EV_KEY, 0x133, 1) not in [e for r in reports for e in r]  # A's C key (West = BTN_X 0x133)
    assert host.summary()["gamepad"]["takeovers"] == 1


def test_a_gamepad_kick_clears_ownership_so_the_new_player_can_drive() -> None:
    pad = RecordingPad()

    async def scenario() -> Host:
        host, task = await start_host(encoder=TINY, pad=pad)
        a = RawClient(host.port or 0)
        await a.join(KickFlags.VIDEO | KickFlags.GAMEPAD)
        a.send(bytes(GamepadState(seq=1, buttons=GamepadButton.SOUTH)))
        await until(lambda: host.sessions.gamepad.owner is not None)
        a_conn = host.sessions.gamepad.owner
        b = RawClient(host.port or 0)
        b.send(bytes(GamepadState(seq=1, buttons=GamepadButton.EAST)))  # before joining: a stranger
        await until(lambda: host.sessions.discarded["unknown_peer"] >= 1)
        await b.join(KickFlags.GAMEPAD)
        assert host.sessions.gamepad.owner is None  # the KICK cleared it
        b.send(bytes(GamepadState(seq=2, buttons=GamepadButton.EAST)))  # no combo needed
        await until(lambda: host.sessions.gamepad.owner not in (None, a_conn))
        a.send(bytes(GamepadState(seq=2)))  # A is refused now
        await until(lambda: host.sessions.discarded["gamepad_not_owner"] == 1)
        a.close()
        b.close()
        await stop(host, task)
        return host

    host = run(scenario)
    assert pad.reports()[:2] == [[(EV_KEY, BTN_SOUTH, 1)], [(EV_KEY, BTN_SOUTH, 0), (EV_KEY, BTN_EAST, 1)]]
    assert host.summary()["gamepad"]["takeovers"] == 0


class RawClient:
    """A hand-rolled client: exact datagrams, including broken ones."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.connect(("127.0.0.1", port))
        self.udp.setblocking(False)
        self.writer: asyncio.StreamWriter | None = None

    async def join(self, flags: KickFlags) -> None:
        reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        framer = ControlFramer()
        self.writer.write(bytes(Hello()))
        [cookie] = framer.feed(await reader.read(64))
        assert isinstance(cookie, Cookie)
        for _ in range(100):
            self.udp.send(bytes(Cookie(cookie.cookie)))
            self.writer.write(bytes(Kick(flags)))
            replies = framer.feed(await asyncio.wait_for(reader.read(256), 5))
            if any(isinstance(r, CodecParameters) for r in replies):
                return
            await asyncio.sleep(0.01)
        raise AssertionError("never kicked")

    def send(self, data: bytes) -> None:
        self.udp.send(data)

    def close(self) -> None:
        self.udp.close()
        if self.writer is not None:
            self.writer.close()


def test_out_of_order_duplicate_and_malformed_states_never_reach_the_pad() -> None:
    pad = RecordingPad()

    async def scenario() -> Host:
        host, task = await start_host(encoder=TINY, pad=pad)
        client = RawClient(host.port or 0)
        await client.join(KickFlags.GAMEPAD)
        south = bytes(GamepadState(seq=10, buttons=GamepadButton.SOUTH))
        client.send(south)
        client.send(south)  # duplicate
        client.send(bytes(GamepadState(seq=10, buttons=GamepadButton.EAST)))  # same seq, other content
        client.send(bytes(GamepadState(seq=9, buttons=GamepadButton.NORTH)))  # reordered: older
        client.send(bytes(GamepadState(seq=10 - 0x8000 & 0xFFFF, buttons=GamepadButton.WEST)))  # half a circle back
        client.send(south[:-1])  # truncated
        client.send(south + b"\x00")  # one byte too long
        client.send(b"\xff" * 24)  # garbage of the right size
        client.send(bytes(GamepadState(seq=11, lx=5)))  # the next one: applied
        await until(lambda: host.sessions.gamepad.stats.applied == 2)
        await asyncio.sleep(0.05)
        client.close()
        await stop(host, task)
        return host

    host = run(scenario)
    assert pad.reports()[:2] == [[(EV_KEY, BTN_SOUTH, 1)], [(EV_KEY, BTN_SOUTH, 0), (EV_ABS, ABS_X, 5)]]
    assert all((EV_KEY, code, 1) not in r for r in pad.reports() for code in (BTN_EAST, BTN_WEST, 0x133))
    d = host.sessions.discarded
    assert d["gamepad_stale_seq"] == 4
    assert d["truncated"] + d["bad_length"] + d["bad_magic"] + d["unknown_type"] + d["malformed"] >= 3, dict(d)


def test_states_without_the_gamepad_bit_or_from_strangers_never_reach_the_pad() -> None:
    pad = RecordingPad()

    async def scenario() -> Host:
        host, task = await start_host(encoder=TINY, pad=pad)
        watcher = RawClient(host.port or 0)
        await watcher.join(KickFlags.VIDEO)  # a viewer that did not ask for the gamepad
        for seq in range(5):
            watcher.send(bytes(GamepadState(seq=seq, buttons=GamepadButton.SOUTH)))
        stranger = RawClient(host.port or 0)  # never said HELLO: an unbound address
        for seq in range(5):
            stranger.send(bytes(GamepadState(seq=seq, buttons=GamepadButton.EAST)))
        await until(lambda: host.sessions.discarded["gamepad_not_requested"] == 5)
        await until(lambda: host.sessions.discarded["unknown_peer"] >= 5)
        await asyncio.sleep(0.05)
        watcher.close()
        stranger.close()
        await stop(host, task)
        return host

    host = run(scenario)
    assert pad.events == [] and host.sessions.gamepad.stats.applied == 0
