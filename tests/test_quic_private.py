"""qh3's private names, in one adapter: all there with the qh3 we hold, and a qh3 without one is named at start
while the browsers keep their WebSocket."""

from __future__ import annotations

import asyncio
import logging

import pytest
from qh3.asyncio import QuicConnectionProtocol
from support import SMALL, run, start_host, stop_host

from pyrofling.server import quic_private


async def _missing() -> list[str]:
    return quic_private.missing()


def test_the_qh3_we_hold_has_every_private_name_the_browsers_webtransport_uses() -> None:
    assert asyncio.run(_missing()) == []


def test_each_name_gone_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(QuicConnectionProtocol, "_transmit_soon")

    class SenderWithoutPending:  # qh3's sender is built in Rust: a stand-in that lacks the one name
        def __init__(self, **_: object) -> None:
            pass

    monkeypatch.setattr(quic_private, "QuicStreamSender", SenderWithoutPending)
    assert asyncio.run(_missing()) == ["QuicConnectionProtocol._transmit_soon", "QuicStreamSender._pending"]


@pytest.mark.io
def test_a_qh3_without_them_leaves_browsers_on_their_websocket_said_in_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delattr(QuicConnectionProtocol, "_process_events")
    caplog.set_level(logging.WARNING, logger="pyrofling.server.web")

    async def scenario() -> tuple[bool, bool]:
        host, task = await start_host(encoder=SMALL, web_port=0, virtual_pad="none")
        try:
            assert host.web is not None
            return host.web.transport is None, host.web.viewers.webtransport_cert is None
        finally:
            await stop_host(host, task)

    assert run(scenario, timeout_s=30) == (True, True)  # no WebTransport offered: the page uses its WebSocket
    said = [r.getMessage() for r in caplog.records if r.name == "pyrofling.server.web"]
    assert len(said) == 1 and "lacks QuicConnectionProtocol._process_events" in said[0], said
