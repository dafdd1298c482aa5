"""Helpers for the tests that drive real hosts and viewers in-process: every wait has a timeout.

(Process-level helpers for the fault tests are in ``faults.py``; fixtures shared by several files, such as
the X server, are in ``conftest.py``.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pyrofling.server.encoder import EncoderConfig
from pyrofling.server.gamepad import VirtualPad
from pyrofling.server.host import Host, HostConfig

T = TypeVar("T")

#: Small enough to keep a 2-core machine free, large enough for the frame marker and real motion.
SMALL = EncoderConfig(width=320, height=240, fps=30, bitrate_kbits=800)
#: For tests about control, pads and security, where the picture hardly matters.
TINY = EncoderConfig(width=160, height=120, fps=30, bitrate_kbits=300)


def run(coro: Callable[[], Awaitable[T]], timeout_s: float = 60.0) -> T:
    """Run a scenario on a fresh event loop, failing it after ``timeout_s``."""

    async def main() -> T:
        return await asyncio.wait_for(coro(), timeout_s)

    return asyncio.run(main())


async def until(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Wait until ``check()`` holds (TimeoutError after ``timeout_s``)."""

    async def poll() -> None:
        while not check():
            await asyncio.sleep(0.005)

    await asyncio.wait_for(poll(), timeout_s)


async def start_host(
    *, encoder: EncoderConfig = SMALL, pad: VirtualPad | None = None, port: int = 0, **config: Any
) -> tuple[Host, asyncio.Task[Any]]:
    """A host on a free port (no status lines), running until :func:`stop_host`."""
    host = Host(HostConfig(port=port, encoder=encoder, status_interval_s=0, **config), pad=pad)
    task = asyncio.create_task(host.run())
    await asyncio.wait_for(host.ready.wait(), 15)
    return host, task


async def stop_host(host: Host, task: asyncio.Task[Any]) -> None:
    host.stop()
    await asyncio.wait_for(task, 10)
