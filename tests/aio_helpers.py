"""Helpers for tests that drive real asyncio hosts and viewers: every wait has a timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


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
