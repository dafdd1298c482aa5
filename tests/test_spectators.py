"""Spectators through a real Janus (Debian's, started by the tests on loopback): the host publishes its one encode
into a mountpoint it creates and removes, Janus going away costs the players nothing, a wrong key or an absent
Janus is one line, and a flood of key-frame requests forces two IDRs a second at most.

A spectator's browser (headless Chromium and the spectators' page) watches over WebRTC through a Janus in a
network namespace of the test's own: ICE gathers nothing on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import run, start_host, stop_host, until

from pyrofling.bench import janus as janus_server
from pyrofling.bench import netns
from pyrofling.bench.browser_spectators import serve_pages
from pyrofling.bench.chromium import Chromium, find_chromium
from pyrofling.bench.janus import JanusServer
from pyrofling.client.viewer import Viewer, ViewerConfig
from pyrofling.core.host.spectators import Phase
from pyrofling.server.audio import AudioConfig
from pyrofling.server.host import Host
from pyrofling.server.muxing import OutputConfig
from pyrofling.server.spectators import Spectators

pytestmark = pytest.mark.io


@pytest.fixture
def janus(tmp_path: Path) -> Iterator[JanusServer]:
    reason = janus_server.missing()
    if reason is not None:  # CI installs it (scripts/setup): there a missing Janus is a failure
        (pytest.fail if os.environ.get("CI") else pytest.skip)(reason)
    with JanusServer(tmp_path / "janus", admin_key="the-plugins-key") as server:
        yield server


def test_a_janus_that_ends_at_start_is_started_once_more_and_its_status_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A real Janus, its first process killed as soon as it is started (as one was found ended after making its
    # certificate on a loaded machine): the second start answers.
    reason = janus_server.missing()
    if reason is not None:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(reason)
    started: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def popen_killing_the_first(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        proc = real_popen(*args, **kwargs)
        if not started:
            proc.kill()
            proc.wait(10)
        started.append(proc)
        return proc

    monkeypatch.setattr(janus_server.subprocess, "Popen", popen_killing_the_first)
    with caplog.at_level(logging.WARNING), JanusServer(tmp_path / "janus", admin_key="the-plugins-key") as server:
        assert len(started) == 2 and server.proc is started[1] and server.proc.poll() is None
    assert "janus exited at start (status -9); starting it once more" in caplog.text


def spectators_of(host: Host) -> Spectators:
    spectators = host.destinations.spectators
    assert spectators is not None
    return spectators


async def publishing_host(url: str, *, spectators_edges: tuple[str, ...] = (), **config: Any) -> tuple[Host, Any]:
    outputs = OutputConfig(spectators=url, spectators_admin_key=config.pop("admin_key", "the-plugins-key"),
                           spectators_edges=spectators_edges)  # fmt: skip
    return await start_host(outputs=outputs, virtual_pad="none", audio=AudioConfig(source="tone", codec="opus"),
                            **config)  # fmt: skip


def test_the_host_publishes_its_stream_and_sound_into_a_mountpoint_and_removes_it_when_it_stops(
    janus: JanusServer,
) -> None:
    async def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        host, task = await publishing_host(janus.url)
        viewer = Viewer(ViewerConfig(host="127.0.0.1", port=host.port or 0, duration_s=60))
        watching = asyncio.create_task(viewer.run())
        spectators = spectators_of(host)
        await until(lambda: spectators.core.phase is Phase.PUBLISHING, 20)
        mountpoint, secret = spectators.mountpoint, spectators.secret
        assert mountpoint is not None
        # Janus stamps a mountpoint's media when it is created: a second later, only what came since is recent.
        await until(lambda: spectators.stats["video_packets"] > 60 and spectators.stats["audio_packets"] > 100, 20)
        await asyncio.sleep(1.0)
        during = await asyncio.to_thread(janus.info, mountpoint.id, secret)
        await until(lambda: viewer.video.stats.frames_shown >= 60 or watching.done(), 30)
        viewer.stop()
        await asyncio.wait_for(watching, 10)
        summary = spectators.summary()
        await stop_host(host, task)
        after = await asyncio.to_thread(janus.info, mountpoint.id, secret)
        return during, after, summary, viewer.summary()

    during, after, summary, viewer = run(scenario, timeout_s=90)
    media = {m["type"]: m for m in during["info"]["media"]}
    assert media["video"]["codec"] == "h264" and media["audio"]["codec"] == "opus"
    assert media["video"]["fmtp"].startswith("profile-level-id=") and "packetization-mode=1" in media["video"]["fmtp"]
    assert media["video"]["age_ms"] < 500 and media["audio"]["age_ms"] < 500  # both arriving
    assert during["info"]["is_private"] and during["info"]["secret"]  # not listed; edited only with its secret
    assert after.get("error_code") == 455  # removed when the host stopped: no such mountpoint
    assert summary["mountpoints_created"] == 1 and summary["keyframes_forced"] >= 1 and summary["send_errors"] == 0
    assert viewer["frames_shown"] >= 60 and viewer["reconnects"] == 0 and viewer["packets_lost_video"] == 0


def test_janus_killed_mid_stream_is_one_line_the_players_never_notice_and_the_host_publishes_again(
    janus: JanusServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pyrofling.server.spectators")

    async def scenario() -> tuple[int, int, dict[str, Any], dict[str, Any], dict[str, Any]]:
        host, task = await publishing_host(janus.url)
        viewer = Viewer(ViewerConfig(host="127.0.0.1", port=host.port or 0, duration_s=120))
        watching = asyncio.create_task(viewer.run())
        spectators = spectators_of(host)
        await until(lambda: spectators.core.phase is Phase.PUBLISHING and viewer.video.stats.frames_shown > 10, 20)
        shown, encoded = viewer.video.stats.frames_shown, host.stats.frames_encoded
        assert spectators.mountpoint is not None
        first_id = spectators.mountpoint.id
        await asyncio.to_thread(janus.kill)
        await until(lambda: spectators.core.phase is Phase.WAITING, 15)  # noticed by its keepalive
        await asyncio.sleep(2.0)  # down for a while: tries, silently
        shown_during = viewer.video.stats.frames_shown - shown
        encoded_during = host.stats.frames_encoded - encoded
        await asyncio.to_thread(janus.start)
        await until(lambda: spectators.core.phase is Phase.PUBLISHING, 20)
        mountpoint = spectators.mountpoint
        assert mountpoint is not None and mountpoint.id == first_id  # the spectators' link still holds
        await until(lambda: spectators.stats["video_packets"] > 0, 5)
        await asyncio.sleep(1.0)
        info = await asyncio.to_thread(janus.info, mountpoint.id, spectators.secret)
        viewer.stop()
        await asyncio.wait_for(watching, 10)
        summary = spectators.summary()
        await stop_host(host, task)
        return shown_during, encoded_during, info, summary, viewer.summary()

    shown_during, encoded_during, info, summary, viewer = run(scenario, timeout_s=120)
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.endswith("spectators")]
    assert len(said) == 1 and said[0].startswith(f"spectators: lost {janus.url}") and "goes on" in said[0], said
    back = [r.getMessage() for r in caplog.records if "Janus is back" in r.getMessage()]
    assert len(back) == 1, [r.getMessage() for r in caplog.records]
    assert summary["outages"] == 1 and summary["mountpoints_created"] == 2
    assert {m["type"]: m["age_ms"] < 500 for m in info["info"]["media"]} == {"video": True, "audio": True}
    # The players: the same connection throughout, and the pictures kept coming while Janus was gone.
    assert viewer["reconnects"] == 0 and viewer["packets_lost_video"] == 0
    assert encoded_during > 30 and shown_during >= 0.8 * encoded_during, (shown_during, encoded_during)
    print(f"Janus down: the player showed {shown_during} of the {encoded_during} pictures encoded meanwhile")


def test_a_wrong_admin_key_is_one_line_at_start_and_nothing_more_is_asked(
    janus: JanusServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pyrofling.server.spectators")

    async def scenario() -> tuple[Phase, dict[str, Any], dict[str, Any]]:
        host, task = await publishing_host(janus.url, admin_key="a-guess")
        viewer = Viewer(ViewerConfig(host="127.0.0.1", port=host.port or 0, duration_s=60))
        watching = asyncio.create_task(viewer.run())
        spectators = spectators_of(host)
        await until(lambda: spectators.core.phase is Phase.REFUSED, 20)
        await until(lambda: viewer.video.stats.frames_shown >= 30 or watching.done(), 30)
        viewer.stop()
        await asyncio.wait_for(watching, 10)
        phase, summary = spectators.core.phase, spectators.summary()
        await stop_host(host, task)
        return phase, summary, viewer.summary()

    phase, summary, viewer = run(scenario, timeout_s=90)
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.endswith("spectators")]
    assert said == [f"spectators: {janus.url} refused the mountpoint (Unauthorized (wrong admin_key)); the players' "
                    "stream goes on without spectators"]  # fmt: skip
    assert phase is Phase.REFUSED and summary["mountpoints_created"] == 0 and summary["video_packets"] == 0
    assert viewer["frames_shown"] >= 30 and viewer["reconnects"] == 0


def test_no_janus_at_the_address_is_one_line_and_the_stream_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pyrofling.server.spectators")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/janus"

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        host, task = await publishing_host(url)
        viewer = Viewer(ViewerConfig(host="127.0.0.1", port=host.port or 0, duration_s=60))
        watching = asyncio.create_task(viewer.run())
        spectators = spectators_of(host)
        await until(lambda: spectators.core.phase is Phase.WAITING, 20)
        await asyncio.sleep(3.0)  # several tries, none said
        await until(lambda: viewer.video.stats.frames_shown >= 30 or watching.done(), 30)
        viewer.stop()
        await asyncio.wait_for(watching, 10)
        summary = spectators.summary()
        await stop_host(host, task)
        return summary, viewer.summary()

    summary, viewer = run(scenario, timeout_s=90)
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.endswith("spectators")]
    assert len(said) == 1 and said[0].startswith(f"spectators: cannot reach {url} (") and "trying again" in said[0]
    assert summary["phase"] == "waiting" and summary["mountpoints_created"] == 0
    assert viewer["frames_shown"] >= 30 and viewer["reconnects"] == 0


def test_a_flood_of_key_frame_requests_at_the_publishers_port_forces_two_idrs_a_second_at_most(
    janus: JanusServer,
) -> None:
    """Janus relays its spectators' PLI/FIR to the publisher; anyone who finds its port can send them too. Either
    way a thousand requests in two seconds cost the players four or five IDRs, not a thousand."""

    async def scenario() -> tuple[int, int, dict[str, Any]]:
        host, task = await publishing_host(janus.url)
        spectators = spectators_of(host)
        await until(lambda: spectators.core.phase is Phase.PUBLISHING, 20)
        assert spectators._sock is not None
        port = spectators._sock.getsockname()[1]
        await asyncio.sleep(1.2)  # past the interval of the key frame the new mountpoint got
        forced_before = host.keyframes.forced
        pli = struct.pack("!BBHII", 0x81, 206, 2, 1, 2)
        loop = asyncio.get_running_loop()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as attacker:
            start = loop.time()
            for i in range(1000):
                attacker.sendto(pli if i % 10 else b"\x80\x01junk", ("127.0.0.1", port))
                if i % 50 == 0:
                    await asyncio.sleep(max(0.0, start + i / 500 - loop.time()))
        await until(lambda: spectators.core.keyframes_asked > 0, 5)
        await asyncio.sleep(1.2)  # a request that waited for its turn is answered at its turn
        forced = host.keyframes.forced - forced_before
        summary = spectators.summary()
        await stop_host(host, task)
        return forced, summary["rtcp_bad"], summary

    forced, bad, summary = run(scenario, timeout_s=90)
    assert 1 <= forced <= 6, summary  # two a second at most over ~2 s, whatever the number of requests
    assert bad > 0 and summary["keyframes_asked"] > forced  # junk counted and dropped; most requests folded
    print(f"1,000 datagrams at the publisher's port in ~2 s: {forced} key frames forced, {bad} junk dropped")


def test_a_browser_watches_through_janus_over_webrtc_and_watches_again_when_janus_comes_back(tmp_path: Path) -> None:
    """Janus in a namespace of its own (a second host on the veth), the host and a spectator's Chromium on this
    side: the page asks Janus to watch the mountpoint, Janus asks the host for a key frame, and pictures come.
    Then Janus is killed and started again: the host creates its mountpoint again under the same id, the page
    joins again by itself, and pictures come again."""
    _need(None if find_chromium() else "no Chromium")

    async def scenario(ns: netns.Namespace, janus: JanusServer) -> dict[str, Any]:
        server, port = serve_pages(ns.outside)
        host, task = await publishing_host(janus.url)
        loop = asyncio.get_running_loop()
        try:
            spectators = spectators_of(host)
            await until(lambda: spectators.core.phase is Phase.PUBLISHING, 20)
            assert spectators.mountpoint is not None
            first_id, asked_before = spectators.mountpoint.id, spectators.core.keyframes_asked
            link = f"http://{ns.outside}:{port}/spectate.html#janus={janus.url}&id={first_id}&judge=1"
            async with Chromium(extra_args=("--disable-features=WebRtcHideLocalIpsWithMdns",)) as browser:
                page = await browser.open(link)
                seen: dict[str, Any] = {}

                async def drawn(at_least: int) -> None:
                    for _ in range(300):
                        seen.update(await page.evaluate("window.spectator") or {})
                        if int(seen.get("framesDrawn", 0)) >= at_least or seen.get("error") is not None:
                            return
                        await asyncio.sleep(0.1)

                await drawn(60)
                first = dict(seen)
                shown = await page.evaluate("window.spectator.pictures")
                asked_on_join = spectators.core.keyframes_asked - asked_before
                await asyncio.to_thread(janus.kill)
                await asyncio.sleep(2.0)
                frames_while_down = int((await page.evaluate("window.spectator"))["framesDrawn"])
                await asyncio.to_thread(janus.start)
                back_at = loop.time()
                await drawn(frames_while_down + 1)
                again_s = loop.time() - back_at  # to its first picture since (polled every 0.1 s)
                await drawn(frames_while_down + 30)
            return {"first": first, "again": dict(seen), "again_s": again_s, "asked_on_join": asked_on_join,
                    "shown": shown, "first_id": first_id, "summary": spectators.summary(),
                    "frames_while_down": frames_while_down}  # fmt: skip
        finally:
            await stop_host(host, task)
            server.shutdown()

    with netns.Namespace() as ns, JanusServer(tmp_path / "janus", admin_key="the-plugins-key", netns=ns) as janus:
        r = run(lambda: scenario(ns, janus), timeout_s=150)
    first, again, summary = r["first"], r["again"], r["summary"]
    assert first.get("error") is None and first["state"] == "connected", first
    assert first["framesDrawn"] >= 60 and first["firstPictureMs"] is not None
    # judge=1: the page read the frame marker of the pictures it showed (marker.js), in order.
    ids = [frame_id for _, frame_id, _ in r["shown"]]
    assert len(ids) >= 30 and sum(i >= 0 for i in ids) >= 0.9 * len(ids), ids[:20]
    readable = [i for i in ids if i >= 0]
    assert all(b >= a for a, b in itertools.pairwise(readable)), readable
    # Janus relayed the spectator's join as a PLI to where the host's sender reports came from: the host heard it.
    assert r["asked_on_join"] > 0
    # Janus back: the same mountpoint id (the spectators' link still holds), the page joined again, pictures came.
    assert summary["mountpoints_created"] == 2 and summary["mountpoint"] == r["first_id"]
    assert again["joins"] >= 2 and again["framesDrawn"] >= r["frames_while_down"] + 30, again
    print(f"spectator: first picture {first['firstPictureMs']:.0f} ms after the page opened; Janus back, "
          f"a picture again {r['again_s']:.2f} s after it answered")  # fmt: skip


def test_webrtc_spectators_joining_at_once_each_get_an_entry_point_and_every_picture_after_it_whole(
    tmp_path: Path,
) -> None:
    """Three of ``bench spectators``' own spectators (aiortc) watch through Janus in a namespace, joining at the
    same moment. Janus asks the host for a key frame once for all of them; the host answers at once and once more
    after, for those whose connection came up later. Every spectator gets an entry point, and from its first
    picture on every picture decodes with its frame marker readable, in order."""
    _need(None if _has_aiortc() else "aiortc is not installed")
    from pyrofling.bench.webrtc_spectator import SpectatorLog, judge_spectator, spectate

    async def scenario(janus: JanusServer) -> tuple[list[SpectatorLog], dict[str, Any]]:
        host, task = await publishing_host(janus.url)
        try:
            spectators = spectators_of(host)
            await until(lambda: spectators.core.phase is Phase.PUBLISHING and spectators.mountpoint is not None, 20)
            assert spectators.mountpoint is not None
            logs = [SpectatorLog() for _ in range(3)]
            await asyncio.gather(*(spectate(janus.url, spectators.mountpoint.id, 4.0, log) for log in logs))
            return logs, spectators.summary()
        finally:
            await stop_host(host, task)

    with netns.Namespace() as ns, JanusServer(tmp_path / "janus", admin_key="the-plugins-key", netns=ns) as janus:
        logs, summary = run(lambda: scenario(janus), timeout_s=90)
    for log in logs:
        assert log.error is None and log.steps.get("connected") is not None, log.error
        ids = [frame_id for _, frame_id, _ in log.pictures]
        # Pictures came (at least 10 of the 4 s: three aiortc decoders on a loaded 2-core machine drew 17 once),
        # every marker readable; the judgement is of each picture, not of the machine's speed.
        assert len(ids) >= 10 and min(ids) >= 0, ids[:10]
        assert all(b > a for a, b in itertools.pairwise(ids)), ids  # in order, none twice
        judged = judge_spectator(log, fps=30)
        assert judged["unreadable"] == 0 and judged["first_picture_s"] > 0
    assert summary["keyframes_asked"] >= 1 and summary["keyframes_forced"] >= 2  # the mountpoint's, then theirs
    print("spectators' first pictures: " + ", ".join(f"{judge_spectator(log, 30)['first_picture_s']:.2f} s"
                                                     for log in logs))  # fmt: skip


def _has_aiortc() -> bool:
    import importlib.util

    return importlib.util.find_spec("aiortc") is not None


def test_an_origin_feeds_an_edge_and_spectators_on_both_get_every_picture_through_the_same_link(
    tmp_path: Path,
) -> None:
    """Two Janus in two namespaces, joined by a link of their own: the host joins the origin's room as its remote
    publisher, and the origin forwards to a mountpoint of the same id on itself and on the edge. A spectator on
    each gets an entry point (its key-frame request travels edge → origin → host) and every picture after it,
    whole and in order; when the host stops, the room and both mountpoints are gone."""
    _need(None if _has_aiortc() else "aiortc is not installed")
    from pyrofling.bench.webrtc_spectator import SpectatorLog, spectate

    async def scenario(origin: JanusServer, edge: JanusServer) -> dict[str, Any]:
        host, task = await publishing_host(origin.url, spectators_edges=(edge.url,))
        try:
            spectators = spectators_of(host)
            await until(lambda: spectators.core.phase is Phase.PUBLISHING and spectators.mountpoint is not None, 20)
            assert spectators.mountpoint is not None
            mountpoint, secret = spectators.mountpoint.id, spectators.secret
            logs = [SpectatorLog(), SpectatorLog()]
            watching = zip((origin, edge), logs, strict=True)
            await asyncio.gather(*(spectate(j.url, mountpoint, 4.0, log) for j, log in watching))
            summary = spectators.summary()
        finally:
            await stop_host(host, task)
        gone = [await asyncio.to_thread(j.info, mountpoint, secret) for j in (origin, edge)]
        return {"logs": logs, "summary": summary, "gone": gone}

    with origin_and_edge(tmp_path) as (origin, edge):
        r = run(lambda: scenario(origin, edge), timeout_s=90)
    for where, log in zip(("origin", "edge"), r["logs"], strict=True):
        ids = [frame_id for _, frame_id, _ in log.pictures]
        assert log.error is None and len(ids) >= 30 and min(ids) >= 0, (where, log.error, ids[:10])
        assert all(b > a for a, b in itertools.pairwise(ids)), (where, ids)
    assert r["summary"]["keyframes_asked"] >= 1  # a spectator's request came back through the chain
    assert [g.get("error_code") for g in r["gone"]] == [455, 455]  # no mountpoint left on either


def test_an_edge_killed_mid_stream_is_that_edges_outage_alone_and_is_fed_again_when_it_is_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The edge is killed while a spectator watches each Janus: the origin's spectator goes on getting pictures,
    the host says so in one line; the edge is started again, the host makes its mountpoint again (one line),
    and the edge's spectator, joining again by itself, gets pictures again."""
    _need(None if _has_aiortc() else "aiortc is not installed")
    from pyrofling.bench.webrtc_spectator import SpectatorLog, spectate

    caplog.set_level(logging.INFO, logger="pyrofling.server.spectators")

    async def scenario(origin: JanusServer, edge: JanusServer) -> dict[str, Any]:
        host, task = await publishing_host(origin.url, spectators_edges=(edge.url,))
        loop = asyncio.get_running_loop()
        try:
            spectators = spectators_of(host)
            await until(lambda: spectators.edges.up() == [edge.url] and spectators.mountpoint is not None, 20)
            assert spectators.mountpoint is not None
            logs = [SpectatorLog(), SpectatorLog()]
            watching = [asyncio.create_task(spectate(j.url, spectators.mountpoint.id, 60.0, log, rejoin=True))
                        for j, log in zip((origin, edge), logs, strict=True)]  # fmt: skip
            await until(lambda: all(len(log.pictures) >= 10 for log in logs), 20)
            await asyncio.to_thread(edge.kill)
            killed = loop.time()
            await until(lambda: spectators.edges.up() == [], 15)  # noticed by its keepalive
            await asyncio.sleep(1.5)
            origin_during = sum(1 for t, _, _ in logs[0].pictures if t > killed)
            await asyncio.to_thread(edge.start)
            back = loop.time()  # the spectators' stamps are the same monotonic clock
            await until(lambda: any(t > back for t, _, _ in logs[1].pictures), 20)
            for w in watching:
                w.cancel()
            summary = spectators.summary()
        finally:
            await stop_host(host, task)
        return {"origin_during": origin_during, "summary": summary}

    with origin_and_edge(tmp_path) as (origin, edge):
        r = run(lambda: scenario(origin, edge), timeout_s=120)
    said = [rec.getMessage() for rec in caplog.records if rec.name.endswith("spectators")]
    lost, back = [m for m in said if "lost the edge" in m], [m for m in said if "is back, fed" in m]
    assert len(lost) == 1 and lost[0].startswith(f"spectators: lost the edge {edge.url} ("), said
    assert back == [f"spectators: the edge {edge.url} is back, fed by the origin again"], said
    assert r["origin_during"] >= 20, r  # the origin's spectator kept its pictures while the edge was away
    assert r["summary"]["edges"][edge.url] == {"phase": "up", "outages": 1}
    assert r["summary"]["outages"] == 0  # the origin never stopped publishing


def _need(*more: str | None) -> None:
    """Janus, a namespace and ``more``: CI installs all of them and runs as root, so there a missing one fails."""
    for reason in (janus_server.missing(), netns.missing(), *more):
        if reason is not None:
            (pytest.fail if os.environ.get("CI") else pytest.skip)(reason)


@contextlib.contextmanager
def origin_and_edge(tmp_path: Path) -> Iterator[tuple[JanusServer, JanusServer]]:
    """An origin Janus (streaming and VideoRoom) and an edge, each in a namespace, joined by a link of their own."""
    with netns.Namespace() as a, netns.Namespace() as b:
        a.link(b)
        origin = JanusServer(
            tmp_path / "origin", admin_key="the-plugins-key", netns=a, plugins=("streaming", "videoroom")
        )
        with origin, JanusServer(tmp_path / "edge", admin_key="the-plugins-key", netns=b) as edge:
            yield origin, edge
