"""A real host and real viewers over real loopback sockets with real libx264 (small frames to stay fast)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
from dataclasses import replace
from typing import Any

import pytest
from support import SMALL, run, start_host, stop_host, until

from pyrofling.bench.stream import free_port
from pyrofling.client.viewer import Viewer, ViewerConfig
from pyrofling.netsim.models import ImpairmentConfig
from pyrofling.netsim.relay import NetsimRelay, RelayConfig
from pyrofling.server.audio import AudioConfig
from pyrofling.server.encoder import EncoderConfig
from pyrofling.server.host import Host
from pyrofling.wire import Hello, Kick, KickFlags, Nak, parse_control

#: Every test here streams, serves or plays through real sockets, threads or processes (not the quick tier).
pytestmark = pytest.mark.io


def watch_60_frames(encoder: EncoderConfig = SMALL) -> tuple[Host, Viewer]:
    """A host with this encoder and one viewer that watches until it has shown 60 pictures; both stopped."""

    async def scenario() -> tuple[Host, Viewer]:
        host, task = await start_host(encoder=encoder)
        viewer = Viewer(ViewerConfig(host="127.0.0.1", port=host.port or 0, duration_s=60))
        watching = asyncio.create_task(viewer.run())
        await until(lambda: viewer.video.stats.frames_shown >= 60 or watching.done(), 30)
        viewer.stop()
        await asyncio.wait_for(watching, 10)
        await stop_host(host, task)
        return host, viewer

    return run(scenario)


def test_host_to_viewer_end_to_end() -> None:
    host, viewer = watch_60_frames()
    st = viewer.summary()
    assert st["sessions_streaming"] == 1 and st["reconnects"] == 0
    assert st["frames_shown"] >= 60  # it watched until then, however long a loaded machine takes
    assert st["frames_hidden"] == 0 and st["decode_errors"] == 0 and st["packets_lost_video"] == 0
    assert st["markers_read"] == st["frames_decoded"]  # every picture carried its id through the codec
    # Capture → decoded on every frame once the first ping has mapped the host's clock (a loaded machine
    # may decode a few pictures before that reply comes).
    assert st["frames_shown"] - 15 <= len(st["latency_ms_samples"]) <= st["frames_shown"]
    assert all(0 < x < 1000 for x in st["latency_ms_samples"])
    assert host.stats.idrs >= 1 and host.keyframes.forced_for_join == 1
    assert host.keyframes.forced_for_loss == 0
    summary = viewer.summary()
    assert summary["connect_to_first_frame_ms"] and summary["rtt_ms"] is not None
    # Its CPU by thread: the event loop's and the decode thread's work kept after they stopped.
    by_thread = summary["cpu_by_thread_s"]
    assert by_thread["MainThread"] > 0 and by_thread["pyrofling-decode"] > 0


def test_through_netsim_with_loss_fec_recovers_and_key_frames_heal() -> None:
    async def scenario() -> tuple[Host, Viewer, dict[str, Any]]:
        host, task = await start_host()
        relay = NetsimRelay(
            RelayConfig(upstream_host="127.0.0.1", upstream_port=host.port or 0, down=ImpairmentConfig(loss=0.05))
        )
        _, port = await relay.start()
        viewer = Viewer(ViewerConfig(host="127.0.0.1", port=port, duration_s=3.0))
        await viewer.run()
        await relay.close()
        await stop_host(host, task)
        return host, viewer, relay.report()

    host, viewer, report = run(scenario)
    st = viewer.summary()
    assert report["down"]["dropped"] > 10
    # FEC rebuilt packets that lost datagrams; each lost datagram can cost at most one packet.
    assert 0 < viewer.summary()["packets_recovered"] <= report["down"]["dropped"]
    assert st["frames_shown"] >= 45
    # Whatever FEC could not rebuild was asked for and healed by a key frame.
    assert st["packets_lost_video"] == 0 or (st["keyframe_requests"] > 0 and host.keyframes.forced_for_loss > 0)


def test_through_a_narrow_link_the_host_lowers_the_bitrate_and_the_viewer_is_told() -> None:
    """A 3 Mbit/s stream into a 1.5 Mbit/s link (the relay's drop-tail queue holds 50 ms): the viewer's feedback
    brings the encoder down to what fits, pictures keep coming, and the viewer knows the bitrate and why."""

    async def scenario() -> tuple[Host, Viewer, dict[str, Any]]:
        host, task = await start_host(
            encoder=replace(SMALL, bitrate_kbits=3000), min_bitrate_kbits=300, audio=AudioConfig(source="none")
        )
        down = ImpairmentConfig(rate_bits_per_s=1.5e6, queue_s=0.05)
        relay = NetsimRelay(RelayConfig(upstream_host="127.0.0.1", upstream_port=host.port or 0, down=down))
        _, port = await relay.start()
        viewer = Viewer(ViewerConfig(host="127.0.0.1", port=port, duration_s=6.0))
        await viewer.run()
        await relay.close()
        summary = host.summary()
        await stop_host(host, task)
        return host, viewer, summary

    _, viewer, summary = run(scenario)
    st = viewer.summary()
    assert summary["rate"]["bitrate_changes"] >= 1
    trace = summary["rate"]["bitrate_trace"]
    assert min(kbits for _, kbits in trace) < 1500  # it went below the link
    # Within the link; on a loaded machine the in-process relay's queue can hold the estimate at the floor.
    assert st["stream_bitrate_kbits"] is not None and 300 <= st["stream_bitrate_kbits"] < 1500
    # Why, as the viewer was told: its link, or the host's floor exactly when the estimate sits there.
    at_floor = st["stream_bitrate_kbits"] == 300
    assert st["bitrate_decided_by"] == ("floor" if at_floor else "your_link")
    # Pictures keep coming at the end: every one of the last three seconds (the last may be a part of one) showed
    # some, and together at least half of 30 fps (a loaded machine's stall halved one second, once in a full run).
    late = st["timeline"][-3:]
    assert late and all(row["frames"] > 0 for row in late), late
    assert sum(row["frames"] for row in late) >= 15 * sum(row["seconds"] for row in late), late


def test_a_native_style_viewer_is_served_without_extensions() -> None:
    async def scenario() -> Viewer:
        host, task = await start_host()
        viewer = Viewer(ViewerConfig(host="127.0.0.1", port=host.port or 0, duration_s=1.5, extensions=False))
        await viewer.run()
        assert all(not c.extensions for c in host.sessions.connections)
        await stop_host(host, task)
        return viewer

    viewer = run(scenario)
    assert viewer.summary()["frames_shown"] >= 25


def test_four_viewers_each_get_the_full_stream() -> None:
    async def scenario() -> list[Viewer]:
        host, task = await start_host()
        viewers = [Viewer(ViewerConfig(host="127.0.0.1", port=host.port or 0)) for _ in range(4)]
        watching = [asyncio.create_task(v.run()) for v in viewers]
        # Until each has shown 60 pictures, not for a time: 2 s showed 37 of 60 once on a loaded machine.
        with contextlib.suppress(TimeoutError):
            await until(lambda: all(v.video.stats.frames_shown >= 60 for v in viewers), 30)
        for v in viewers:
            v.stop()
        await asyncio.wait_for(asyncio.gather(*watching), 15)
        await stop_host(host, task)
        assert host.sessions.connections_total == 4
        return viewers

    viewers = run(scenario)
    shown = [v.summary()["frames_shown"] for v in viewers]
    assert min(shown) >= 60, shown
    assert all(v.summary()["packets_lost_video"] == 0 for v in viewers)


def test_viewer_killed_mid_stream_is_reclaimed_by_the_host() -> None:
    async def scenario() -> Host:
        host, task = await start_host()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = subprocess.Popen(
            [sys.executable, "-m", "pyrofling", "view", f"pyro://127.0.0.1:{host.port}", "--headless", "-q"], env=env
        )
        try:
            await until(lambda: any(c.kicked for c in host.sessions.connections), 20)
            await asyncio.sleep(0.5)
            proc.send_signal(signal.SIGKILL)
            await until(lambda: not host.sessions.connections, 10)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(5)
        await stop_host(host, task)
        return host

    host = run(scenario)
    assert host.sessions.connections_total == 1 and not host.sessions.connections


def test_viewer_reconnects_when_the_host_restarts() -> None:
    port = free_port()

    async def scenario() -> Viewer:
        host, task = await start_host(port=port)
        viewer = Viewer(ViewerConfig(host="127.0.0.1", port=port))
        viewer_task = asyncio.create_task(viewer.run())
        await until(lambda: viewer.video.stats.frames_shown > 10, 15)
        await stop_host(host, task)
        shown_before = viewer.summary()["frames_shown"]
        host, task = await start_host(port=port)
        await until(lambda: viewer.video.stats.frames_shown > shown_before + 10, 20)
        viewer.stop()
        await asyncio.wait_for(viewer_task, 10)
        await stop_host(host, task)
        return viewer

    viewer = run(scenario)
    assert viewer.summary()["sessions_streaming"] == 2
    assert viewer.summary()["reconnects"] >= 1


def test_hostile_datagrams_and_control_messages_never_stop_the_host() -> None:
    rng = random.Random(7)

    async def scenario() -> tuple[Host, Viewer]:
        host, task = await start_host()
        port = host.port or 0
        viewer = Viewer(ViewerConfig(host="127.0.0.1", port=port, duration_s=3.0))
        viewer_task = asyncio.create_task(viewer.run())
        await until(lambda: viewer.video.stats.frames_shown > 5, 15)
        # Random and mutated UDP from an unknown peer.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            valid = bytes(Kick(KickFlags.VIDEO))
            for i in range(3000):
                if i % 2:
                    junk = bytearray(valid)
                    junk[rng.randrange(len(junk))] ^= 1 << rng.randrange(8)
                else:
                    junk = bytearray(rng.randbytes(rng.randrange(0, 1500)))
                s.sendto(bytes(junk), ("127.0.0.1", port))
                if i % 50 == 0:
                    await asyncio.sleep(0.002)  # let the host read: we test its parser, not the kernel's buffer
        # A control connection speaking garbage is closed; one speaking an unknown id gets NAK.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"\x12\x34\x56\x78" * 4)
        await writer.drain()
        assert await asyncio.wait_for(reader.read(100), 5) == b""  # closed by the host
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(bytes(Hello()) + bytes.fromhex("3c80 96ef 0000 0000"))  # HELLO, then id 60 (unknown)
        reply = await asyncio.wait_for(reader.readexactly(16 + 8), 5)
        assert parse_control(reply[16:]) == Nak()
        writer.close()
        await asyncio.wait_for(viewer_task, 20)
        await stop_host(host, task)
        return host, viewer

    host, viewer = run(scenario)
    assert sum(host.sessions.discarded.values()) >= 2700  # counted, not fatal
    assert host.sessions.discarded["unexpected_control"] == 1
    assert viewer.summary()["frames_shown"] >= 60  # the real viewer never noticed
    assert viewer.summary()["packets_lost_video"] == 0


@pytest.mark.parametrize("family", ["ipv6"])
def test_ipv6_loopback(family: str) -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("IPv6 loopback is not configured here")

    async def scenario() -> Viewer:
        host, task = await start_host(bind="::1")
        viewer = Viewer(ViewerConfig(host="::1", port=host.port or 0, duration_s=1.5))
        await viewer.run()
        await stop_host(host, task)
        return viewer

    assert run(scenario).summary()["frames_shown"] >= 25


@pytest.mark.realtime
def test_phase_locked_viewer_steers_the_host_frame_clock() -> None:
    """A viewer whose display runs 3000 ppm slow pulls the host's frame clock slower; a free one does not."""

    async def scenario() -> tuple[Host, Viewer, Viewer]:
        from pyrofling.core.viewer.presentation import PresentationConfig

        host, task = await start_host()
        port = host.port or 0
        locked = Viewer(
            ViewerConfig(
                host="127.0.0.1",
                port=port,
                presentation=PresentationConfig(phase_locked=True, deadline_s=0.02),
                refresh_hz=30.0,
                refresh_skew_ppm=3000,
            )
        )
        free = Viewer(  # free-running (the default is phase-locked, offset found automatically)
            ViewerConfig(host="127.0.0.1", port=port, refresh_hz=30.0, presentation=PresentationConfig())
        )
        watching = [asyncio.create_task(locked.run()), asyncio.create_task(free.run())]
        await asyncio.sleep(5.0)
        # And on until the trim shows (after 5 s it was 1,800-2,100 ppm alone, 470 once beside the whole suite).
        with contextlib.suppress(TimeoutError):
            await until(lambda: host.clock.rate_trim_ppm > 500, 20)
        # And until each has presented its hundred (the free one had 97 by then once, beside the whole suite).
        with contextlib.suppress(TimeoutError):
            await until(lambda: all(v.presenter.stats.presented >= 100 for v in (locked, free)), 20)
        locked.stop()
        free.stop()
        await asyncio.wait_for(asyncio.gather(*watching), 15)
        await stop_host(host, task)
        return host, locked, free

    host, locked, free = run(scenario)
    summary = host.summary()
    lp, fp = locked.summary()["presentation"], free.summary()["presentation"]
    assert lp["phase_offsets_sent"] >= 100 and fp["phase_offsets_sent"] == 0
    assert summary["phase_feedback"] >= lp["phase_offsets_sent"] - 5  # UDP on loopback: all but the last few
    assert summary["rate_trim_ppm"] > 500  # the host slowed down toward the viewer's display
    assert lp["presented"] >= 100 and fp["presented"] >= 100
    assert locked.summary()["glass_ms_median"] is not None
    # The final statistics give each stage's tail, the first 2 s apart.
    tails = lp["stage_tails"]
    assert tails["startup"]["pictures"] >= 30 and tails["pictures"] >= 50
    assert tails["pictures"] + tails["startup"]["pictures"] == lp["presented"]
    decode = tails["stages"]["decode"]
    assert 0 < decode["median_ms"] <= decode["p999_ms"] and decode["once_a_minute_ms"] >= decode["median_ms"]


def test_an_av1_stream_plays_end_to_end_its_codec_said_and_every_picture_read() -> None:
    """``--encoder libsvtav1``: the host says AV1 (codec id 3) in its stream parameters, the viewer decodes it
    with dav1d, every picture whole and carrying its id; a joining viewer starts at a key frame."""
    host, viewer = watch_60_frames(replace(SMALL, encoder="libsvtav1"))
    st = viewer.summary()
    assert st["sessions_streaming"] == 1 and st["frames_shown"] >= 60
    assert st["video_codec"] == "AV1"
    assert st["frames_hidden"] == 0 and st["decode_errors"] == 0 and st["packets_lost_video"] == 0
    assert st["markers_read"] == st["frames_decoded"]
    assert host.stats.idrs >= 1 and host.keyframes.forced_for_join == 1


def test_with_codec_auto_a_viewer_that_decodes_only_h264_turns_the_stream_and_its_leaving_brings_av1_back() -> None:
    """``host --codec auto``: the first viewer gets AV1; a second that decodes only H.264 gets H.264 from its first
    picture, and the first follows the change with every picture carrying its id; when the second leaves, AV1 comes
    back (after the hold, shortened here: the rule itself is tested in virtual time)."""
    from pyrofling.wire import VideoCodec

    def codec(viewer: Viewer) -> int | None:
        return viewer.codec_parameters.video_codec if viewer.codec_parameters is not None else None

    async def scenario() -> tuple[Host, Viewer, Viewer, list[int | None]]:
        auto = (VideoCodec.AV1, VideoCodec.H265, VideoCodec.H264)
        host, task = await start_host(encoder=replace(SMALL, encoder="libsvtav1"), auto_codecs=auto)
        assert host.sessions.codec_choice is not None
        host.sessions.codec_choice.hold_s = 0.5
        first = Viewer(ViewerConfig(host="127.0.0.1", port=host.port or 0, duration_s=60))
        watching = asyncio.create_task(first.run())
        await until(lambda: first.video.stats.frames_shown >= 20 or watching.done(), 30)
        seen = [codec(first)]
        second = Viewer(
            ViewerConfig(
                host="127.0.0.1", port=host.port or 0, duration_s=60, video_codecs=frozenset({VideoCodec.H264})
            )
        )
        joined = asyncio.create_task(second.run())
        await until(lambda: second.video.stats.frames_shown >= 20 or joined.done(), 30)
        shown = first.video.stats.frames_shown
        await until(lambda: first.video.stats.frames_shown >= shown + 20 or watching.done(), 30)
        seen.append(codec(first))
        second.stop()
        await asyncio.wait_for(joined, 10)
        await until(lambda: codec(first) == VideoCodec.AV1 or watching.done(), 30)
        shown = first.video.stats.frames_shown
        await until(lambda: first.video.stats.frames_shown >= shown + 20 or watching.done(), 30)
        seen.append(codec(first))
        first.stop()
        await asyncio.wait_for(watching, 10)
        await stop_host(host, task)
        return host, first, second, seen

    host, first, second, seen = run(scenario)
    assert seen == [VideoCodec.AV1, VideoCodec.H264, VideoCodec.AV1]
    assert first.codec_changes == 2 and host.stats.codec_switches == 2
    a, b = first.summary(), second.summary()
    assert b["video_codec"] == "H264" and second.codec_changes == 0  # H.264 from its very first picture
    for st in (a, b):
        assert st["sessions_streaming"] == 1 and st["reconnects"] == 0 and st["packets_lost_video"] == 0
        assert st["markers_read"] == st["frames_decoded"]  # every picture, either codec, carried its id
