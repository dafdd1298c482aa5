"""A real headless Chromium, driven through the DevTools protocol, for the browser viewer's tests and bench.

Debian's ``chromium`` (installed by ``scripts/setup``) started with
``--remote-debugging-port=0``; it prints the DevTools WebSocket it listens on,
and this opens a page and evaluates JavaScript in it over that socket (the
``websockets`` client the host's web viewer already depends on).  No driver
binary, no browser download.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

#: Where Debian puts it, then other names it goes by.
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome")
_LISTENING = re.compile(r"DevTools listening on (ws://\S+)")


def find_chromium() -> str | None:
    for name in CANDIDATES:
        path = shutil.which(name)
        if path is not None:
            return path
    return None


class Chromium:
    """``async with Chromium() as browser: page = await browser.open(url); await page.evaluate("1 + 1")``."""

    def __init__(self, executable: str | None = None, *, extra_args: tuple[str, ...] = ()) -> None:
        path = executable or find_chromium()
        if path is None:
            raise FileNotFoundError("no Chromium found: install Debian's chromium (scripts/setup does)")
        self._path = path
        self._extra = extra_args
        # Its helper processes may still write there for a moment after it exits.
        self._profile = tempfile.TemporaryDirectory(prefix="pyrofling-chromium-", ignore_cleanup_errors=True)
        self._proc: subprocess.Popen[bytes] | None = None
        self._ws: ClientConnection | None = None
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._raised: set[int] = set()

    @property
    def profile_dir(self) -> str:
        """Its user data directory, removed when it ends."""
        return self._profile.name

    async def __aenter__(self) -> Chromium:
        self._proc = subprocess.Popen(
            [
                self._path,
                "--headless=new",
                "--no-sandbox",  # root in a container has no user namespace sandbox
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                "--autoplay-policy=no-user-gesture-required",
                "--remote-debugging-port=0",
                f"--user-data-dir={self._profile.name}",
                *self._extra,
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            # Its singleton socket's directory goes in TMPDIR, and one killed at the end leaves it there: in the
            # profile, it goes with it.
            env={**os.environ, "TMPDIR": self._profile.name},
            start_new_session=True,  # its helpers in one group, to end with it
        )
        url = await asyncio.wait_for(asyncio.to_thread(self._devtools_url), 30)
        self._ws = await connect(url, max_size=None)
        self._reader = asyncio.create_task(self._read())
        return self

    def _devtools_url(self) -> str:
        assert self._proc is not None and self._proc.stderr is not None
        for raw in self._proc.stderr:
            found = _LISTENING.search(raw.decode(errors="replace"))
            if found:
                return found.group(1)
        raise RuntimeError(f"Chromium exited ({self._proc.wait()}) before it listened for DevTools")

    async def __aexit__(self, *_exc: object) -> None:
        if self._ws is not None:
            with contextlib.suppress(Exception):  # asks it to close its helpers and profile in order
                await asyncio.wait_for(self.send("Browser.close"), 5)
            await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
        if self._proc is not None:
            self._proc.terminate()
            try:
                await asyncio.wait_for(asyncio.to_thread(self._proc.wait), 10)
            except TimeoutError:
                self._proc.kill()
                self._proc.wait()
            # Helpers that outlive the browser wrote into the profile after it was removed (a directory left in
            # /tmp per run): none of the group may run once the profile goes.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)
        self._profile.cleanup()

    async def _read(self) -> None:
        assert self._ws is not None
        with contextlib.suppress(Exception):
            async for message in self._ws:
                msg = json.loads(message)
                waiter = self._waiting.pop(msg.get("id", -1), None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(msg)

    async def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> Any:
        """One DevTools command; its result (an error raises)."""
        assert self._ws is not None
        msg_id = next(self._ids)
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[msg_id] = waiter
        command: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session is not None:
            command["sessionId"] = session
        await self._ws.send(json.dumps(command))
        reply = await asyncio.wait_for(waiter, 30)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def raise_priority(self, by: int) -> int:
        """Lower the nice value of every thread of this browser's processes by ``-by`` (each keeps Chromium's own
        order between its threads: display-critical ones stay above the rest), once per thread; call again for
        threads started since.  How many threads were raised; 0 where the system refuses (no CAP_SYS_NICE)."""
        assert self._proc is not None
        raised = 0
        for tid in _threads_of_tree(self._proc.pid):
            if tid in self._raised:
                continue
            try:
                os.setpriority(os.PRIO_PROCESS, tid, max(-20, os.getpriority(os.PRIO_PROCESS, tid) + by))
            except OSError:  # refused, or the thread ended
                continue
            self._raised.add(tid)
            raised += 1
        return raised

    async def open(self, url: str, *, window: bool = False) -> Page:
        """A page at ``url``; ``window``: in a window of its own (shown, as the only tab there: a tab behind
        another gets no video frames drawn)."""
        target = await self.send("Target.createTarget", {"url": url, **({"newWindow": True} if window else {})})
        attached = await self.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
        return Page(self, attached["sessionId"])


def _threads_of_tree(root: int) -> list[int]:
    """The thread ids of ``root`` and every process below it (Linux /proc; none elsewhere)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry))
    tids: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        with contextlib.suppress(OSError):
            tids.extend(int(t) for t in os.listdir(f"/proc/{pid}/task"))
        todo.extend(children.get(pid, ()))
    return tids


class Page:
    def __init__(self, browser: Chromium, session: str) -> None:
        self.browser = browser
        self.session = session

    async def evaluate(self, expression: str) -> Any:
        """The expression's value (JSON-able), awaited if it is a promise."""
        result = await self.browser.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            self.session,
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"page: {result['exceptionDetails'].get('text')}: {expression}")
        return result["result"].get("value")

    async def key(self, key: str, code: str, key_code: int) -> None:
        """A key pressed and released, as a person would (DevTools input events)."""
        for kind in ("keyDown", "keyUp"):
            await self.browser.send(
                "Input.dispatchKeyEvent",
                {"type": kind, "key": key, "code": code, "windowsVirtualKeyCode": key_code},
                self.session,
            )
