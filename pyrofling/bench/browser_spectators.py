"""Spectators in headless Chromium for ``bench spectators --browsers N``: the spectators' page over WebRTC.

The page (``pyrofling/web/spectate.html``, ``judge=1``) is served from this side of the namespace's link, as any
static server beside Janus would serve it, and reads the frame marker of every picture it shows
(``requestVideoFrameCallback``); what it logs, on the wall clock, is mapped to this machine's monotonic clock (the
host's) and judged as an aiortc spectator's log is. A browser is the spectator that matters for loss: its
receiver asks for what it lost (NACK, RTX) and drops a picture it cannot complete, where aiortc's waits.
"""

from __future__ import annotations

import asyncio
import functools
import http.server
import threading
import time
from importlib import resources
from typing import Any

from pyrofling.bench.chromium import Chromium
from pyrofling.bench.webrtc_spectator import SpectatorLog
from pyrofling.core import frame_marker

#: ICE on the namespace's link needs the page's real addresses (not mDNS names); a muted video plays by itself;
#: no page is throttled for being out of sight.
CHROMIUM_ARGS = (
    "--disable-features=WebRtcHideLocalIpsWithMdns",
    "--autoplay-policy=no-user-gesture-required",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
    "--disable-background-timer-throttling",
)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *_args: Any) -> None:
        pass


def serve_pages(address: str) -> tuple[http.server.ThreadingHTTPServer, int]:
    """The pages' folder over HTTP on ``address`` (a thread; ``shutdown()`` when done) and its port."""
    folder = str(resources.files("pyrofling") / "web")
    server = http.server.ThreadingHTTPServer((address, 0), functools.partial(_Quiet, directory=folder))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, int(server.server_address[1])


def watch_in_browsers(links: list[str], seconds: float) -> list[SpectatorLog]:
    """Open each link in one headless Chromium, watch for ``seconds``, and return each page's log."""
    return asyncio.run(_watch(links, seconds))


async def _watch(links: list[str], seconds: float) -> list[SpectatorLog]:
    logs = [SpectatorLog() for _ in links]
    wall_minus_mono = time.time() - time.monotonic()  # the page's stamps are wall ms, the host's monotonic µs
    async with Chromium(extra_args=CHROMIUM_ARGS) as browser:
        pages = []
        for link, log in zip(links, logs, strict=True):
            log.asked_s = time.monotonic()
            pages.append(await browser.open(link, window=True))
        await asyncio.sleep(seconds)
        for page, log in zip(pages, logs, strict=True):
            seen = await page.evaluate("window.spectator") or {}
            log.error = seen.get("error") or (None if seen.get("pictures") else (
                f"no picture judged (the page {seen.get('state')}, {seen.get('framesDrawn')} drawn, its last error "
                f"{seen.get('lastError')})"))  # fmt: skip
            log.joins = [0.0] * int(seen.get("joins") or 0)
            log.rtp = {k: float(v) for k, v in (seen.get("rtp") or {}).items()}
            for wall_ms, frame_id, capture_us in seen.get("pictures") or []:
                shown = wall_ms / 1000 - wall_minus_mono
                if frame_id < 0:
                    log.pictures.append((shown, -1, None))
                    continue
                capture = frame_marker.unwrap_capture_us(int(capture_us), int(shown * 1_000_000)) / 1_000_000
                log.pictures.append((shown, int(frame_id), capture))
    return logs
