"""``pyrofling bench browser``: a headless Chromium watching ``host --web`` beside a pyrofling viewer.

Real processes, as :mod:`pyrofling.bench.stream` runs them: ``pyrofling host
--web`` with the test scene and one headless pyrofling viewer (``--check-scene``),
and, from this process, Debian's Chromium opening the host's link with
``judge=1``: the page reads the frame marker of the picture on screen at every
refresh (``requestAnimationFrame``) and keeps the capture → drawn time of every
picture it draws.  The refreshes are judged here as the viewer judges its own
(:class:`~pyrofling.core.viewer.picture_quality.RefreshQuality`: good when the
marker reads and the picture is at most two frames older than usual); the page
can see a wrong or stale picture, but not damage below the marker band, which
``--check-scene`` also catches.  Then the same host with two pyrofling viewers:
the host's CPU with a browser against with a second viewer (one encode either
way).

On a lossy scenario the viewer goes through ``pyrofling netsim`` as in ``bench
stream``, and the browser through a netsim relay of its own in this process,
in front of the page's port: its TCP (the page, the WebSocket) is piped as it
is, its UDP (WebTransport) suffers the same loss host → browser.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from pyrofling.bench.chromium import Chromium
from pyrofling.bench.input import read_jsonl
from pyrofling.bench.stream import DEFAULT_GE, StreamScenario, cell, run_scenario, summarize
from pyrofling.core.viewer.picture_quality import RefreshQuality
from pyrofling.netsim.models import ImpairmentConfig
from pyrofling.netsim.relay import NetsimRelay, RelayConfig
from pyrofling.runtime import RAISED_NICE

#: Seconds after the page's first picture left out of its figures (its decoder settling: on the 2-core machine
#: the first 0.5 s after it stalled once, every run), stated apart as the start-up.
WARMUP_S = 3.0


def judge_refreshes(refreshes: list[list[float]], clock_offset_ms: float, fps: float) -> dict[str, Any]:
    """The page's refresh log ([wall ms, frame id or −1, capture µs on the host's clock]) judged as the viewer
    judges its own refreshes."""
    quality = RefreshQuality(period_s=1 / fps)
    last_id: float | None = None
    for t_ms, frame_id, capture_us in refreshes:
        readable = frame_id >= 0
        capture_s = (capture_us / 1000 + clock_offset_ms) / 1000 if readable else None
        quality.refresh(t_ms / 1000, capture_s=capture_s, clean=readable, fresh=frame_id != last_id)
        last_id = frame_id
    quality.finish()
    return quality.summary()


#: Key presses the page sends after watching (a press and a release each), and the time between two.
KEY_PRESSES = 40
KEY_INTERVAL_S = 0.05
#: Then mouse moves, each by this much (the pointer is locked: the page sends the motion, the host writes it).
MOUSE_MOVES = 50
MOUSE_STEP = (3, 2)


def browser_watch(
    link_file: Path,
    duration_s: float,
    fps: float,
    impairment: ImpairmentConfig | None = None,
    seed: int = 1,
    *,
    raise_priority: bool = True,
    surface: str = "video",
) -> Callable[[int, int], dict[str, Any]]:
    """What runs beside the stream: Chromium opens the host's link and watches for ``duration_s``, then plays
    (a click to capture, then key presses), each dispatch timed on this machine's monotonic clock.  With
    ``impairment`` it opens the link through a netsim relay that does that to the UDP host → browser.

    ``raise_priority``: Chromium's threads get the raise the host and the viewer give their own
    (:data:`~pyrofling.runtime.RAISED_NICE`), where the system allows.  A browser cannot ask for it itself, and
    on a machine shared with a raised host and viewer it then measures the scheduler: on the 2-core machine, five
    runs each with the canvas page, a median of 87.97 % good refreshes left as it was, 99.15 % raised
    (docs/browser.md).

    ``surface``: "video" (the page's own choice where the browser has MediaStreamTrackGenerator) or "canvas"
    (its fallback, ``#surface=canvas``)."""

    def watch(_port: int, _pid: int) -> dict[str, Any]:
        return asyncio.run(_watch(link_file, duration_s, fps, impairment, seed, raise_priority, surface))

    return watch


def impairment_of(sc: StreamScenario) -> ImpairmentConfig | None:
    """What ``bench stream``'s netsim does to the viewer, for the browser's relay (None: loopback as it is)."""
    if not (sc.loss or sc.ge or sc.rate_mbits):
        return None
    return ImpairmentConfig(
        loss=sc.loss, gilbert_elliott=DEFAULT_GE if sc.ge else None, rate_bits_per_s=sc.rate_mbits * 1e6
    )


def input_latencies(dispatched: list[float], applied: list[dict[str, Any]]) -> list[float]:
    """ms from each key dispatched into the page to the host's first write of key events after it (the host's
    ``--input-trace``; states that changed nothing are not writes)."""
    writes = sorted(r["t"] for r in applied if r.get("events"))
    out: list[float] = []
    i = 0
    for t in dispatched:
        while i < len(writes) and writes[i] < t:
            i += 1
        if i < len(writes):
            out.append(1000 * (writes[i] - t))
            i += 1
    return out


async def _play(page: Any) -> tuple[list[float], list[int]]:
    """Capture the keyboard and mouse with a click on the picture, press and release A KEY_PRESSES times, then move
    the mouse MOUSE_MOVES times; the key events' dispatch times, and the motion dispatched in total."""
    send = page.browser.send
    click = {"x": 50, "y": 50, "button": "left", "clickCount": 1}
    await send("Input.dispatchMouseEvent", {"type": "mousePressed", **click}, page.session)
    await send("Input.dispatchMouseEvent", {"type": "mouseReleased", **click}, page.session)
    await asyncio.sleep(0.3)
    dispatched = []
    for i in range(2 * KEY_PRESSES):
        dispatched.append(time.monotonic())
        kind = "keyDown" if i % 2 == 0 else "keyUp"
        await send(
            "Input.dispatchKeyEvent", {"type": kind, "key": "a", "code": "KeyA", "windowsVirtualKeyCode": 65},
            page.session,
        )  # fmt: skip
        await asyncio.sleep(KEY_INTERVAL_S)
    for i in range(1, MOUSE_MOVES + 1):
        at = {"x": 50 + MOUSE_STEP[0] * i, "y": 50 + MOUSE_STEP[1] * i}
        await send("Input.dispatchMouseEvent", {"type": "mouseMoved", **at}, page.session)
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)  # the last state on its way
    return dispatched, [MOUSE_STEP[0] * MOUSE_MOVES, MOUSE_STEP[1] * MOUSE_MOVES]


async def _watch(
    link_file: Path,
    duration_s: float,
    fps: float,
    impairment: ImpairmentConfig | None,
    seed: int,
    raise_priority: bool,
    surface: str,
) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while not (link_file.exists() and link_file.read_text().strip()):
        if time.monotonic() > deadline:
            return {"error": "the host wrote no link"}
        await asyncio.sleep(0.05)
    link = link_file.read_text().strip() + "&judge=1" + ("&surface=canvas" if surface == "canvas" else "")
    relay = None
    if impairment is not None:
        page_url = urllib.parse.urlsplit(link)
        assert page_url.port is not None
        relay = NetsimRelay(RelayConfig("127.0.0.1", page_url.port, down=impairment, seed=seed))
        _, port = await relay.start()
        link = page_url._replace(netloc=f"127.0.0.1:{port}").geturl()
    try:
        result = await _watch_page(link, duration_s, fps, raise_priority)
    finally:
        if relay is not None:
            await relay.close()
    if relay is not None:
        result["netsim"] = relay.report()
    return result


async def _watch_page(link: str, duration_s: float, fps: float, raise_priority: bool) -> dict[str, Any]:
    async with Chromium() as browser:
        opened = time.monotonic()
        raised = browser.raise_priority(RAISED_NICE) if raise_priority else 0
        page = await browser.open(link)
        first_picture_s = None
        while time.monotonic() - opened < 20:
            if await page.evaluate("window.pyrofling ? window.pyrofling.stats.framesDrawn : 0"):
                first_picture_s = time.monotonic() - opened
                break
            await asyncio.sleep(0.02)
        if raise_priority:
            raised += browser.raise_priority(RAISED_NICE)
        await asyncio.sleep(WARMUP_S)
        if raise_priority:  # the page's renderer, its decoder and worker threads have started by now
            raised += browser.raise_priority(RAISED_NICE)
        await page.evaluate("window.pyrofling.stats.refreshes.length = 0; window.pyrofling.stats.latencyMs.length = 0")
        measured_s = max(1.0, duration_s - (time.monotonic() - opened) - 1.0)
        await asyncio.sleep(measured_s)
        stats: dict[str, Any] = await page.evaluate("window.pyrofling.stats")
        dispatched, moved = await _play(page)
        locked = await page.evaluate("document.pointerLockElement !== null")
        audio_clock = await page.evaluate("window.pyrofling.audioClock()")
    offset = stats.get("clockOffsetMs")
    refreshes = stats.get("refreshes", [])
    judged = judge_refreshes(refreshes, offset, fps) if offset is not None else {}
    first_s = refreshes[0][0] / 1000 if refreshes else 0.0
    latency = stats.get("latencyMs", [])
    return {
        "priority": {"raised": raise_priority, "threads_raised": raised},
        "keys_dispatched_at": dispatched,
        "mouse_dispatched": moved,
        "pointer_locked": locked,
        "audio_packets": stats.get("audioPackets"),
        "audio_clock_s": audio_clock,
        "first_picture_s": first_picture_s,
        "measured_s": measured_s,
        "state": stats.get("state"),
        "transport": stats.get("transport"),
        "transport_error": stats.get("transportError") or None,
        "units_out_of_order": stats.get("unitsOutOfOrder"),
        "keyframe_why": stats.get("keyframeWhy"),
        "max_decode_queue": stats.get("maxDecodeQueue"),
        # Pauses over 50 ms (ms since the page opened, length): pictures not arriving, or not drawn.
        "arrival_gaps": stats.get("arrivalGaps"),
        "draw_gaps": stats.get("drawGaps"),
        "frames_drawn": stats.get("framesDrawn"),
        "frames_received": stats.get("framesReceived"),
        "decode_errors": stats.get("decodeErrors"),
        "keyframe_requests": stats.get("keyframeRequests"),
        # Capture → presented (requestVideoFrameCallback) where the page shows its pictures on a <video>, capture
        # → drawn where on a canvas; on the page's clock, the host's timed to it by pings (the best round trip).
        "surface": stats.get("surface"),
        "host_clock_rtt_ms": stats.get("hostClockRttMs"),
        "latency_kind": stats.get("latencyKind"),
        "latency_ms_median": statistics.median(latency) if latency else None,
        "latency_ms_p95": sorted(latency)[int(len(latency) * 0.95)] if latency else None,
        "quality": {k: v for k, v in judged.items() if k not in ("freeze_log", "not_good_log")},
        # When the refreshes that were not good came, seconds into the measured part: a start, a burst, or spread.
        "not_good_at_s": [(round(t - first_s, 3), kind) for t, kind in judged.get("not_good_log", [])][:200],
    }


def run_browser_bench(
    base: StreamScenario,
    *,
    transport: str = "webtransport",
    cpu_baseline: bool = True,
    raise_browser: bool = True,
    surface: str = "video",
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """``transport``: "webtransport" (the host's default) or "websocket" (``--no-web-transport``);
    ``cpu_baseline``: then the host with two pyrofling viewers, for its CPU; ``raise_browser``: Chromium's
    threads raised as the host's and the viewer's are (:func:`browser_watch`)."""
    duration = base.duration_s or 30.0
    with tempfile.TemporaryDirectory(prefix="pyrofling-web-") as tmp:
        link_file, trace = Path(tmp) / "link", Path(tmp) / "input.jsonl"
        progress(f"a browser and a pyrofling viewer ({duration:g} s), then the page plays")
        web_args = ["--web", "0", "--web-link-file", str(link_file), "--input-trace", str(trace)]
        web_args += ["--pairing-dir", str(Path(tmp) / "pairings")]  # its browser is not remembered in yours
        if transport == "websocket":
            web_args.append("--no-web-transport")
        with_browser = run_scenario(
            replace(base, host_args=(*base.host_args, *web_args)),
            alongside=browser_watch(
                link_file,
                duration,
                base.fps,
                impairment_of(base),
                base.seed,
                raise_priority=raise_browser,
                surface=surface,
            ),
        )
        applied = read_jsonl(trace)
    viewer_row = summarize(with_browser)
    baseline: dict[str, Any] = {"host_cpu_pct": None, "frames_sent": None}
    if cpu_baseline:
        progress(f"two pyrofling viewers ({duration:g} s)")
        baseline = summarize(run_scenario(replace(base, viewers=2, loss=0.0, ge=False)))
    viewer = with_browser["viewers"][0] if with_browser["viewers"] else {}
    page = with_browser.get("alongside", {})
    keys = input_latencies(page.pop("keys_dispatched_at", []), applied)
    page["mouse"] = {
        "dispatched": page.pop("mouse_dispatched", None),
        "written": [sum(r["rel"][0] for r in applied if "rel" in r), sum(r["rel"][1] for r in applied if "rel" in r)],
        "pointer_locked": page.pop("pointer_locked", None),
    }
    page["keys"] = {
        "dispatched": 2 * KEY_PRESSES,
        "applied": len(keys),
        "p50_ms": _quantile(keys, 0.5),
        "p99_ms": _quantile(keys, 0.99),
    }
    return {
        "scenario": base.label(),
        "transport": transport,
        "browser": page,
        "viewer": {
            "good_refreshes_pct": viewer_row["good_refreshes_pct"],
            "longest_freeze_ms": viewer_row["longest_freeze_ms"],
            "latency_ms_median": viewer_row["latency_ms_median"],
            "glass_ms_median": viewer.get("glass_ms_median"),
        },
        "host_cpu_pct": {"browser_and_viewer": viewer_row["host_cpu_pct"], "two_viewers": baseline["host_cpu_pct"]},
        "host_web": with_browser["host"].get("web"),
        "host_rate": with_browser["host"].get("rate"),
        "frames_encoded": {"browser_and_viewer": viewer_row["frames_sent"], "two_viewers": baseline["frames_sent"]},
    }


def format_table(r: dict[str, Any]) -> str:
    page, viewer, cpu = r["browser"], r["viewer"], r["host_cpu_pct"]
    q = page.get("quality", {})
    web = r.get("host_web") or {}
    lines = [
        f"{r['scenario']}; headless Chromium (WebCodecs, pictures over {page.get('transport')}) beside a pyrofling "
        "viewer, then two pyrofling viewers on loopback",
        f"{'client':<18} {'good %':>7} {'longest freeze ms':>18} {'capture -> shown ms':>20}",
        f"{'browser':<18} {cell(q.get('good_refreshes_pct'), '.2f'):>7} {cell(q.get('longest_freeze_ms')):>18} "
        f"{cell(page.get('latency_ms_median'), '.1f'):>20}   ({page.get('latency_kind')} on a "
        f"{page.get('surface')}, the host's clock timed to ±{cell(_half(page.get('host_clock_rtt_ms')), '.2f')} ms; "
        f"{page.get('frames_drawn')} pictures, {page.get('decode_errors')} decode errors)",
        f"{'pyrofling viewer':<18} {cell(viewer.get('good_refreshes_pct'), '.2f'):>7} "
        f"{cell(viewer.get('longest_freeze_ms')):>18} {cell(viewer.get('glass_ms_median'), '.1f'):>20}   (on screen)",
        "",
        f"host CPU: {cell(cpu['browser_and_viewer'])} % with a browser and a viewer, {cell(cpu['two_viewers'])} % "
        f"with two viewers ({_ratio(cpu)}); frames encoded {r['frames_encoded']['browser_and_viewer']} and "
        f"{r['frames_encoded']['two_viewers']} (one encode each)",
        f"to the browser: {web.get('frames_sent')} units, {web.get('frames_skipped')} skipped, "
        f"{web.get('keyframe_requests')} key frames asked for; the page's decoder queue at most "
        f"{cell(page.get('max_decode_queue'), 'd')} pictures (it asks for a key frame beyond 15)",
    ]
    keys = page.get("keys", {})
    lines.append(
        f"keys from the page (DevTools key events -> the host's device writes): {keys.get('applied')} of "
        f"{keys.get('dispatched')} written, p50 {cell(keys.get('p50_ms'), '.2f')} ms, p99 "
        f"{cell(keys.get('p99_ms'), '.2f')} ms; sound: {page.get('audio_packets')} packets, the page's audio clock "
        f"at {cell(page.get('audio_clock_s'), '.1f')} s"
    )
    mouse = page.get("mouse") or {}
    lines.append(
        f"mouse from the page (pointer {'locked' if mouse.get('pointer_locked') else 'not locked'}): moved "
        f"{mouse.get('dispatched')} in {MOUSE_MOVES} moves, the host wrote {mouse.get('written')} (x, y)"
    )
    priority = page.get("priority") or {}
    lines.append(
        f"Chromium's threads: {priority.get('threads_raised')} raised as the host's and the viewer's are"
        if priority.get("raised")
        else "Chromium's threads: left as they were (--browser-priority normal), below the raised host and viewer"
    )
    lines.append(
        f"the page drew its first picture {cell(page.get('first_picture_s'), '.2f')} s after it opened; its figures "
        f"leave out the {WARMUP_S:g} s after that and cover {cell(page.get('measured_s'), '.1f')} s"
    )
    rate = r.get("host_rate") or {}
    if rate.get("rate_policy") not in (None, "fixed"):
        links = rate.get("links") or {}
        said = "; ".join(
            f"{name}: {link.get('video_kbits')} kbit/s for video, queue {cell(link.get('queue_delay_ms'), '.1f')} ms"
            for name, link in links.items()
        )
        lines.append(
            f"rate control ({rate['rate_policy']}): the encoder at {rate.get('bitrate_kbits')} kbit/s at the end, "
            f"{rate.get('bitrate_changes')} changes; links heard: {said or 'none'}"
        )
    down = (page.get("netsim") or {}).get("down")
    if down:
        lines.append(f"netsim host -> browser: {_netsim(down)}")
    if page.get("transport_error"):
        lines.append(f"the page's WebTransport failed: {page['transport_error']}")
    if page.get("error"):
        lines.append(f"browser: {page['error']}")
    return "\n".join(lines)


def _netsim(down: dict[str, Any]) -> str:
    received, lost = down.get("received", 0), down.get("dropped_loss", 0)
    share = f" ({100 * lost / received:.2f} %)" if received else ""
    return f"{received} datagrams, {lost} lost{share}"


def _quantile(values: list[float], q: float) -> float | None:
    return sorted(values)[min(len(values) - 1, int(len(values) * q))] if values else None


def _half(value: float | None) -> float | None:
    return value / 2 if value is not None else None


def _ratio(cpu: dict[str, float | None]) -> str:
    a, b = cpu["browser_and_viewer"], cpu["two_viewers"]
    return "—" if not a or not b else f"{100 * (a / b - 1):+.1f} %"
