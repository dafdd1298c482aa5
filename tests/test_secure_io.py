"""A host with a password, real viewers on loopback: who gets media and the pad, and what crosses the wire."""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

import pytest
from support import TINY, run, start_host, until

from pyrofling.client.gamepad import GamepadConfig
from pyrofling.client.viewer import Viewer, ViewerConfig
from pyrofling.server.gamepad import RecordingPad
from pyrofling.server.host import Host
from pyrofling.wire import Cookie, GamepadState, KickFlags

SECRET = "correct-horse-battery"


async def sealed_host(pad: RecordingPad, **kwargs: Any) -> tuple[Host, asyncio.Task[Any]]:
    return await start_host(encoder=TINY, pad=pad, password=SECRET, **kwargs)


def viewer_for(host: Host, password: str | None, **kwargs: Any) -> Viewer:
    flags = KickFlags.VIDEO | KickFlags.GAMEPAD
    cfg = ViewerConfig(
        host="127.0.0.1",
        port=host.port or 0,
        flags=flags,
        gamepad=GamepadConfig(source="none"),
        password=password,
        **kwargs,
    )
    return Viewer(cfg)


def test_the_right_password_streams_sealed_and_drives_the_pad(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    pad = RecordingPad()

    async def scenario() -> tuple[Host, Viewer]:
        host, task = await sealed_host(pad)
        viewer = viewer_for(host, SECRET, duration_s=2.5)
        vtask = asyncio.create_task(viewer.run())
        await until(lambda: viewer.connection is not None and viewer.connection.streaming, 10)
        assert viewer.connection is not None and viewer.connection.session.encrypted
        assert viewer.gamepad is not None and viewer.gamepad.key("Z", True)
        await until(lambda: len(pad.reports()) >= 1, 5)
        await asyncio.wait_for(vtask, 15)
        host.stop()
        await asyncio.wait_for(task, 15)
        return host, viewer

    host, viewer = run(scenario)
    assert viewer.summary()["frames_shown"] >= 40 and viewer.summary()["reconnects"] == 0
    assert viewer.summary()["discarded"].get("sealed_forged", 0) == 0
    assert host.summary()["auth"] == {"required": True, "encrypt": True, "successes": 1, "failures": 0}
    assert pad.reports()[0] == [(1, 304, 1)]  # BTN_SOUTH pressed
    assert any("authenticated, datagrams sealed" in r.getMessage() for r in caplog.records)
    assert not any(SECRET in r.getMessage() for r in caplog.records)  # never logged
    assert SECRET not in repr(host.config) and SECRET not in repr(viewer.config)


def test_wrong_password_and_native_viewers_get_no_media_and_never_move_the_pad() -> None:
    pad = RecordingPad()

    async def scenario() -> tuple[Host, list[Viewer]]:
        host, task = await sealed_host(pad)
        wrong = viewer_for(host, "not-the-password")
        native = viewer_for(host, None, extensions=False, reconnect=False, duration_s=2.0)
        tasks = [asyncio.create_task(v.run()) for v in (wrong, native)]
        await asyncio.wait_for(tasks[0], 10)  # a wrong password ends the viewer: no reconnect storm
        await asyncio.wait_for(tasks[1], 10)
        host.stop()
        await asyncio.wait_for(task, 15)
        return host, [wrong, native]

    host, (wrong, native) = run(scenario)
    assert wrong.auth_failure == "the host refused the password" and wrong.summary()["connects"] == 1
    assert native.summary()["datagrams"] == 0 and native.summary()["frames_shown"] == 0
    assert host.stats.datagrams_sent == 0  # not one media datagram, not even a ping reply
    assert pad.reports() == []
    assert host.summary()["auth"]["failures"] == 1


def test_spoofed_plaintext_states_from_the_viewers_address_do_not_move_the_pad() -> None:
    """An attacker on the path copies the encrypted viewer's address and cookie and sends plain UDP."""
    pad = RecordingPad()

    async def scenario() -> Host:
        host, task = await sealed_host(pad)
        viewer = viewer_for(host, SECRET)
        vtask = asyncio.create_task(viewer.run())
        await until(lambda: viewer.connection is not None and viewer.connection.streaming, 10)
        [conn] = host.sessions.connections

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as attacker:
            for _ in range(200):
                attacker.sendto(bytes(Cookie(conn.cookie)), ("127.0.0.1", host.port or 0))
                attacker.sendto(bytes(GamepadState(1, 0x7FF)), ("127.0.0.1", host.port or 0))
        await asyncio.sleep(0.3)
        viewer.stop()
        await asyncio.wait_for(vtask, 10)
        host.stop()
        await asyncio.wait_for(task, 15)
        return host

    host = run(scenario)
    discarded = host.summary()["discarded"]
    assert discarded.get("plaintext_refused", 0) + discarded.get("unknown_peer", 0) >= 400
    assert pad.reports() == []
