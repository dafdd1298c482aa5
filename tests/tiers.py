"""The quick tier's guard: a test that is not marked ``io`` may not open a network socket, start a thread or start
a process, so ``./scripts/test --quick`` (``-m "not io and not slow"``) runs only pure and virtual-time tests.

A test that does (or uses a fixture that starts a server) and is not marked fails at teardown, naming what it
touched. (asyncio's own loop opens a Unix socket pair: that is allowed, so a test may run a loop in virtual
time.) With ``PYROFLING_TIER_LOG=path`` nothing fails: each test's node id, what it touched and how long it took
are written there instead, as JSON lines.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

NETWORK_FAMILIES = {socket.AF_INET, socket.AF_INET6, -1}  # -1: socket.socket()'s default, AF_INET
#: Fixtures that start a server for the module or the test (before this guard looks): their tests are io.
IO_FIXTURES = {"xvfb", "x_server", "jack"}


@pytest.fixture(autouse=True)
def _quick_tests_touch_no_io(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    log = os.environ.get("PYROFLING_TIER_LOG")
    if request.node.get_closest_marker("io") is not None and not log:
        yield
        return
    touched = {f"uses the {name} fixture (a server process)" for name in IO_FIXTURES & set(request.fixturenames)}
    socket_init, thread_start, popen_init = socket.socket.__init__, threading.Thread.start, subprocess.Popen.__init__

    def opened_socket(self: socket.socket, family: Any = -1, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("fileno") is None and (len(args) < 3 or args[2] is None) and family in NETWORK_FAMILIES:
            touched.add("opened a network socket")
        socket_init(self, family, *args, **kwargs)

    def started_thread(self: threading.Thread) -> None:
        touched.add("started a thread")
        thread_start(self)

    def started_process(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
        touched.add("started a process")
        popen_init(self, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "__init__", opened_socket)
    monkeypatch.setattr(threading.Thread, "start", started_thread)
    monkeypatch.setattr(subprocess.Popen, "__init__", started_process)
    started = time.monotonic()
    yield
    if log:
        with open(log, "a") as out:
            out.write(json.dumps({"test": request.node.nodeid, "touched": sorted(touched),
                                  "s": round(time.monotonic() - started, 3)}) + "\n")  # fmt: skip
    elif touched:
        pytest.fail(
            f"this test {' and '.join(sorted(touched))} but is not marked io: mark it @pytest.mark.io (or its module "
            "with pytestmark), as the quick tier runs only tests that touch no socket, thread or process",
            pytrace=False,
        )
