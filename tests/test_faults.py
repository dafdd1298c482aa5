"""Hostile input and faults against real ``pyrofling host`` and ``pyrofling view`` processes on loopback.

Each test runs the processes a person would run, attacks or breaks something, and checks that the
host and the viewers go on: nothing crashes, the counters say what was dropped, memory stays flat,
and the streams that should go on do.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from faults import (
    HostileRelay,
    HostProcess,
    NetsimProcess,
    ViewerProcess,
    hostile_viewer_datagrams,
    kill,
    mutate,
    rss_mb,
    udp_drops,
    udp_unread_bytes,
    wait_for,
)
from support import SMALL, run, start_host, stop_host, until

from pyrofling.client.viewer import Viewer, ViewerConfig
from pyrofling.core.host.sessions import HostSessionConfig
from pyrofling.server import host as host_module
from pyrofling.server.host import Host
from pyrofling.server.sources import SceneSource
from pyrofling.wire import Again, Hello, Kick, KickFlags, MessageId, Nak, type_word_wide

#: Every test here streams, serves or plays through real sockets, threads or processes (not the quick tier).
pytestmark = pytest.mark.io

#: The floods: 7 s of them at the host (60,000 a second), 10 s at a viewer (40,000).  A leak of 16 bytes a
#: datagram (less than any Python object kept per datagram costs) would show as 6 MB.  (A million and 100,000
#: until the suite had to answer in five minutes: the same findings, two and a half times the time.)
DATAGRAMS = 400_000
TCP_MESSAGES = 40_000


def _send_paced(
    sock: socket.socket, address: tuple[str, int], pool: list[bytes], count: int, rate: float, pid: int
) -> None:
    """``count`` datagrams from ``pool`` at about ``rate`` a second, waiting while more than a quarter of a
    megabyte sits unread in process ``pid``'s receive buffers: the parser is tested, not the kernel buffer (on a
    busy shared machine the host reads slower than the flood comes, and the kernel dropped a quarter)."""
    start = time.monotonic()
    n = len(pool)
    for i in range(count):
        sock.sendto(pool[i % n], address)
        if i % 500 == 499:
            waited = time.monotonic()
            while udp_unread_bytes(pid) > 256 * 1024 and time.monotonic() - waited < 1.0:
                time.sleep(0.002)
            start += time.monotonic() - waited  # the pace starts again from here, not with a burst
            ahead = (i + 1) / rate - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)


def _tcp_flood(port: int, total: int, rng: random.Random) -> dict[str, int]:
    """``total`` framed messages over many connections: unknown ids, early KICKs, repeated HELLOs, each of
    which the host answers and goes on; every fifth connection then ends in a message of a known id with the
    wrong length and every seventh in garbage (the host closes those).  Half read none of the host's replies
    until they have sent everything. Each connection comes from its own loopback address (127.0.0.2 on): the
    host admits a few connections at once per address and closes faster ones unread, which is another test's
    subject."""
    sent = connections = cut_off = 0
    while sent < total:
        connections += 1
        source = (f"127.0.{1 + connections // 250}.{2 + connections % 250}", 0)
        messages = [bytes(Hello())]
        for _ in range(rng.randrange(1000, 5000)):
            kind = rng.randrange(3)
            if kind == 0:  # a well-framed message of an id nobody knows: NAK
                messages.append(_framed(rng.randrange(UNASSIGNED_ID, 64), rng.randbytes(rng.randrange(0, 32))))
            elif kind == 1:
                messages.append(bytes(Kick(KickFlags(rng.randrange(8)))))  # before the UDP cookie: not yet
            else:
                messages.append(bytes(Hello()))
        if connections % 5 == 0:
            messages.append(_framed(1, rng.randbytes(rng.randrange(1, 24))))  # HELLO carries no payload
        elif connections % 7 == 0:
            messages.append(rng.randbytes(64))
        with socket.create_connection(("127.0.0.1", port), timeout=5, source_address=source) as s:
            s.settimeout(5)
            for k in range(0, len(messages), 64):
                group = messages[k : k + 64]
                try:
                    s.sendall(b"".join(group))
                except OSError:
                    cut_off += 1
                    break
                sent += len(group)
                if connections % 2 == 0:
                    _drain(s)
            # Hang up only once the host has read everything (closing with replies unread would reset it).
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_WR)
                while s.recv(65536):
                    pass
    return {"messages": sent, "connections": connections, "cut_off": cut_off}


#: The first control message id nobody has assigned yet (protocol.md §7.2 reserves 32-63 for extensions).
UNASSIGNED_ID = max(MessageId) + 1


def _framed(message_id: int, payload: bytes) -> bytes:
    """One control message as the native build frames it (protocol.md §2.2): an 8-byte type word, the payload."""
    return struct.pack("<Q", type_word_wide(message_id, len(payload))) + payload


def _drain(s: socket.socket) -> None:
    s.setblocking(False)
    try:
        while s.recv(65536):
            pass
    except (BlockingIOError, OSError):
        pass
    finally:
        s.setblocking(True)
        s.settimeout(5)


@pytest.mark.realtime  # paced by the clock, the live stream judged as it runs
def test_400k_hostile_datagrams_and_40k_tcp_messages_at_a_running_host(tmp_path: Path) -> None:
    rng = random.Random(1)
    host = HostProcess(tmp_path)
    viewer = None
    try:
        viewer = ViewerProcess(tmp_path, host.port)
        wait_for(lambda: viewer.shown() > 30, 30, "the viewer showing frames")
        pool = hostile_viewer_datagrams(rng, 50_000)
        tcp_result: dict[str, int] = {}
        tcp = threading.Thread(target=lambda: tcp_result.update(_tcp_flood(host.port, TCP_MESSAGES, rng)))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            _send_paced(s, ("127.0.0.1", host.port), pool, DATAGRAMS // 10, 60_000, host.proc.pid)
            rss_before = rss_mb(host.proc)
            shown_before, encoded_before = viewer.shown(), host.encoded()
            tcp.start()
            _send_paced(s, ("127.0.0.1", host.port), pool, DATAGRAMS - DATAGRAMS // 10, 60_000, host.proc.pid)
            tcp.join(120)
            assert not tcp.is_alive()
            shown_during, encoded_during = viewer.shown() - shown_before, host.encoded() - encoded_before
        time.sleep(1.0)
        rss_after = rss_mb(host.proc)
        drops = udp_drops(host.proc.pid)
        assert host.proc.poll() is None and viewer.proc.poll() is None
        vcode, verr = viewer.stop()
        code, err = host.stop()
        stats = host.stats()  # as the host wrote them on its way out
        viewer_stats = viewer.stats()
    finally:
        kill(host, viewer)
    discarded = stats["discarded"]
    udp_counted = sum(v for k, v in discarded.items() if not k.startswith("tcp_") and "_limit" not in k)
    udp_counted -= discarded.get("unexpected_control", 0)  # NAKed TCP messages count there too
    # Every datagram is either counted under a reason or was dropped by the kernel before the host read it.
    # The kernel's drops also take some of the real viewer's own datagrams (loss reports, NACKs, pings).
    own = sum(viewer_stats.get(k, 0) for k in ("loss_reports_sent", "nacks_sent", "rate_feedbacks_sent")) + 10
    assert DATAGRAMS * 0.999 <= udp_counted + drops <= DATAGRAMS + own, (discarded, drops, own)
    assert udp_counted >= DATAGRAMS * 0.95, "the host's parser, not the kernel, must see the flood"
    assert tcp_result["messages"] >= TCP_MESSAGES
    # The host read every message of every connection it did not close for a protocol error.
    assert stats["control_messages"] >= TCP_MESSAGES * 0.9, (stats["control_messages"], tcp_result)
    assert discarded["unexpected_control"] >= TCP_MESSAGES / 4  # unknown ids: NAKed and counted
    assert discarded["tcp_bad_length"] + discarded["tcp_bad_magic"] >= tcp_result["connections"] // 5
    assert rss_after <= rss_before * 1.05, (rss_before, rss_after)
    # The real viewer kept streaming all through the flood: it showed what the host encoded meanwhile.
    assert encoded_during > 100 and shown_during >= 0.8 * encoded_during, (shown_during, encoded_during)
    assert code == 0 and vcode == 0, err + verr
    vstats = viewer.stats()
    assert vstats["reconnects"] == 0 and vstats["packets_lost_video"] == 0
    assert "Traceback" not in err and "Traceback" not in verr


def _hostile_control(rng: random.Random) -> bytes:
    """Well-framed messages a streaming viewer has no use for: unknown ids, NAK, AGAIN."""
    kind = rng.randrange(3)
    if kind == 0:
        return _framed(rng.randrange(UNASSIGNED_ID, 64), rng.randbytes(rng.randrange(0, 32)))
    return bytes(Nak()) if kind == 1 else bytes(Again())


@pytest.mark.realtime  # paced at 40,000 a second by the clock, the live stream judged as it runs
@pytest.mark.parametrize("sealed", [True, False], ids=["sealed", "open"])
def test_400k_hostile_datagrams_and_40k_control_messages_at_a_running_viewer(tmp_path: Path, sealed: bool) -> None:
    """From the path between host and viewer: mutated copies of the host's own datagrams, random bytes, and
    (open) control messages slipped into the TCP stream.  Sealed, every datagram is refused and the picture is
    untouched (a message slipped into the sealed control channel ends that connection: test_secure_io);
    open, the reassembler and decoder see the damage and the viewer recovers from it."""
    rng = random.Random(2)
    secret = ("--password", "fault-test-secret")
    host = HostProcess(tmp_path, *(secret if sealed else ()))
    relay = HostileRelay(host.port)
    viewer = None
    try:
        viewer = ViewerProcess(tmp_path, relay.port, *(secret if sealed else ()))
        wait_for(lambda: viewer.shown() > 30 and len(relay.recent) > 50, 30, "the viewer showing frames")
        injected = control = 0
        rss_before = None
        rss_trace: list[float] = []
        shown_before, encoded_before = viewer.shown(), host.encoded()
        assert relay.viewer_udp is not None
        start = time.monotonic()
        while injected < DATAGRAMS:
            batch = []
            for i in range(2000):
                if i % 3 == 0:
                    batch.append(rng.randbytes(rng.choice((0, 4, 12, 24, 40, 300, 1048, 1400))))
                else:
                    batch.append(mutate(rng, rng.choice(relay.recent)))
            for data in batch:
                relay.front.sendto(data, relay.viewer_udp)
            injected += len(batch)
            hostile = b"".join(_hostile_control(rng) for _ in range(250))
            if not sealed and control < TCP_MESSAGES and relay.inject_control(hostile):
                control += 250
            if rss_before is None and injected >= DATAGRAMS // 10:
                rss_before = rss_mb(viewer.proc)
            if injected % 100_000 == 0:
                rss_trace.append(round(rss_mb(viewer.proc), 1))
            ahead = injected / 40_000 - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)
        shown_during, encoded_during = viewer.shown() - shown_before, host.encoded() - encoded_before
        time.sleep(1.0)
        shown_after, encoded_after = viewer.shown(), host.encoded()
        time.sleep(2.0)
        # Frames shown and encoded in the 2 s after the attack.
        recovered, encoded_since = viewer.shown() - shown_after, host.encoded() - encoded_after
        drops = udp_drops(viewer.proc.pid)
        rss_after = rss_mb(viewer.proc)
        assert viewer.proc.poll() is None and host.proc.poll() is None
        vcode, verr = viewer.stop()
        code, err = host.stop()
    finally:
        kill(viewer, host)
        relay.close()
    stats = viewer.stats()
    discarded = stats["discarded"]
    # Sealed, the attack changes nothing.  Open, the viewer has to take what comes: in about one run in six
    # the host stopped hearing its PROGRESS under the flood and closed it after 15 s, and it came back.
    assert stats["reconnects"] <= (0 if sealed else 1), verr
    if not sealed:
        assert control >= TCP_MESSAGES and discarded["control_ignored"] >= TCP_MESSAGES
    # No leak: 16 bytes kept per datagram would be 6.4 MB.  The statistics' windows (two minutes of samples each)
    # go on filling while the attack lasts: 2-4 MB in 25 s of it, and 5 % of the viewer failed one full-suite run.
    assert rss_before is not None and rss_after <= rss_before + 5.0, (rss_before, rss_after, rss_trace)
    # The viewer shows again what the host encodes (45 of 61 in the 2 s once on a loaded machine: the viewer's
    # pace there, not the attack's; a viewer that the attack broke shows none).
    assert encoded_since > 20 and recovered >= 0.6 * encoded_since, (recovered, encoded_since, verr[-1500:])
    if sealed:
        # The stream's own datagrams discarded as stale (a repair not needed, a packet already given up on: the
        # flood delays the viewer) are not refusals.
        own = ("control_ignored", "unneeded_repair", "late", "gave_up_packet")
        refused = sum(v for k, v in discarded.items() if k not in own)
        # Every injected datagram was refused unopened, or dropped by the kernel before the viewer read it (its
        # drops also take some of the host's own datagrams: they bound only from below), and nothing else was.
        assert refused + drops >= DATAGRAMS * 0.999 and refused <= DATAGRAMS * 1.001, (discarded, drops)
        # Most were read and refused, not dropped unread: over 80 % in four runs alone on the 2-core machine that
        # runs Python at half speed, 76 % in one beside the rest of the suite.
        assert refused >= DATAGRAMS * 0.6
        # Nothing forged got in.  A packet can still be lost when the flood fills the kernel's buffer and it
        # drops the host's own datagrams with the forged ones (FEC repairs most, a key frame the rest).
        assert stats["decode_errors"] == 0
        assert stats["packets_lost_video"] == 0 or drops > 0, (stats["packets_lost_video"], drops)
        # It kept streaming through the flood. How much of it depends on the machine: the refusals, the flood's
        # own making and the relay share two cores with the stream. 80 % and more on the 2-core machine these
        # tests were written on; 67-74 % in four runs on a later one that runs Python at half its speed (before
        # and after this file's last change alike).
        assert shown_during >= 0.6 * encoded_during, (shown_during, encoded_during)
    else:
        assert sum(discarded.values()) - discarded["control_ignored"] >= DATAGRAMS * 0.3, discarded
    assert vcode == 0 and code == 0, verr + err
    assert "Traceback" not in verr + err


# -- in-process: connection floods, silence, sustained loss, a bad frame -------------------------


def test_a_hundred_connections_at_once_are_bounded_and_silent_ones_are_freed() -> None:
    """100 connection attempts at once from one address, most of which never speak: the host keeps at most
    its pending limit of them (closing the rest at once, those past its rate for one address before a word),
    frees the silent ones after its keep-alive, and the viewer streams on."""

    async def scenario() -> dict[str, Any]:
        host, task = await start_host(
            virtual_pad="none",
        )
        host.sessions.config = replace(host.sessions.config, keepalive_timeout_s=2.0)
        port = host.port or 0
        viewer = Viewer(ViewerConfig(host="127.0.0.1", port=port, duration_s=6.0))
        vtask = asyncio.create_task(viewer.run())
        await until(lambda: viewer.video.stats.frames_shown > 10, 15)
        shown_before = viewer.summary()["frames_shown"]
        results = await asyncio.gather(
            *(asyncio.open_connection("127.0.0.1", port) for _ in range(100)), return_exceptions=True
        )
        streams = [r for r in results if not isinstance(r, BaseException)]
        await asyncio.sleep(0.3)
        tracked = len(host.sessions.connections)
        closed_at_once = 0
        for reader, _writer in streams:  # refused ones read EOF at once
            with contextlib.suppress(TimeoutError):
                closed_at_once += await asyncio.wait_for(reader.read(1), 0.05) == b""
        # Silent: nothing said, so the keep-alive frees them (2 s here, 15 s by default).
        await asyncio.sleep(2.6)
        still_open = len(host.sessions.connections)
        freed = 0
        for reader, _writer in streams:
            with contextlib.suppress(TimeoutError, ConnectionError):
                freed += await asyncio.wait_for(reader.read(1), 1.0) == b""
        for _reader, writer in streams:
            writer.close()
        # A new viewer still gets in and streams: it is stopped after 20 pictures, not after a time (one that ran
        # 1.5 s showed 14 on a loaded CI machine).
        late = Viewer(ViewerConfig(host="127.0.0.1", port=port))
        late_task = asyncio.create_task(late.run())
        with contextlib.suppress(TimeoutError):
            await until(lambda: late.video.stats.frames_shown >= 20 or late_task.done(), 20)
        late.stop()
        await asyncio.wait_for(late_task, 15)
        await asyncio.wait_for(vtask, 20)
        await stop_host(host, task)
        return dict(
            streams=len(streams), tracked=tracked, closed_at_once=closed_at_once, still_open=still_open,
            freed=freed, viewer=viewer.summary(), shown_during=viewer.summary()["frames_shown"] - shown_before,
            late=late.summary(), discarded=dict(host.sessions.discarded), timed_out=host.sessions.timed_out,
        )  # fmt: skip

    r = run(scenario, 60)
    assert r["streams"] == 100  # the kernel's backlog took them all
    pending_limit = HostSessionConfig().max_pending_per_address
    kept = r["tracked"] - 1  # besides the viewer: at most the pending limit, from one address
    assert 0 < kept <= pending_limit
    refused = r["discarded"].get("pending_limit", 0) + r["discarded"].get("connection_rate", 0)  # too many/fast
    assert refused == 100 - kept and r["closed_at_once"] >= 100 - kept
    assert r["timed_out"] == kept and r["still_open"] == 1 and r["freed"] == 100
    # The streaming viewer never went without a picture: at 30 fps, fewer than 8 frames (250 ms) in a row unshown.
    assert r["viewer"]["reconnects"] == 0 and r["viewer"]["max_unshown_frames"] < 8
    assert r["late"]["sessions_streaming"] == 1 and r["late"]["frames_shown"] >= 20


def test_sustained_bursty_loss_of_ten_percent_never_freezes_the_picture_for_15_frames(tmp_path: Path) -> None:
    """Gilbert–Elliott loss averaging 10 % (bursts of ~7 datagrams at 80 % loss) for 15 s at 60 fps, host,
    netsim and viewer each in its own process as a person runs them."""
    host = HostProcess(tmp_path, fps=60, bitrate_kbits=1500)
    netsim = viewer = None
    try:
        netsim = NetsimProcess(tmp_path, host.port, "--ge", "0.02,0.14,0.8", "--seed", "3")
        viewer = ViewerProcess(tmp_path, netsim.port, duration_s=15)
        viewer.proc.wait(timeout=60)
        verr = viewer.proc.communicate(timeout=10)[1].decode(errors="replace")
        net = netsim.stop()
        host.stop()
    finally:
        kill(viewer, netsim, host)
    down = net["down"]
    assert 0.07 <= down["dropped"] / max(1, down["received"]) <= 0.13, down
    st = viewer.stats()
    # Repaired, not waited out: FEC alone does not cover bursts this long, resends (or a key frame) did the rest.
    assert st["packets_rebuilt_by_fec"] > 0 and st["packets_rebuilt_by_resend"] > 0, st
    # Counted on the stream, not the clock (a busy machine stretches time, not this): never 15 frames (250 ms
    # at 60 fps) in a row that the viewer did not show.
    assert st["max_unshown_frames"] < 15, st["max_unshown_frames"]
    # Of the frames the host sent this viewer (each a video packet, complete or lost), it showed three in four.
    sent = st["packets_video"] + st["packets_lost_video"]
    assert st["reconnects"] == 0 and sent > 300 and st["frames_shown"] >= 0.75 * sent, (st["frames_shown"], sent)
    assert "Traceback" not in verr, verr
    print(f"bursty 10 %: longest run unshown {st['max_unshown_frames']} frames, concealed {st['frames_concealed']}")


class _GlitchySource:
    """The test scene, except one frame comes out a row short: a capture glitch the encoder cannot take."""

    pixel_format = "yuv420p"

    def __init__(self, width: int, height: int, bad_index: int) -> None:
        self.scene = SceneSource(width, height)
        self.bad_index = bad_index

    def read(self, index: int, capture_us: int) -> Any:
        frame = self.scene.read(index, capture_us)
        return frame[:-1] if index == self.bad_index else frame  # a row short: not a yuv420p picture

    def close(self) -> None:
        pass


def test_an_encoder_error_on_one_frame_costs_that_frame_and_the_stream_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def glitchy(*_args: Any, **_kwargs: Any) -> _GlitchySource:
        return _GlitchySource(SMALL.width, SMALL.height, 45)

    monkeypatch.setattr(host_module, "open_host_source", glitchy)

    async def scenario() -> tuple[Host, Viewer]:
        host, task = await start_host(
            virtual_pad="none",
        )
        viewer = Viewer(ViewerConfig(host="127.0.0.1", port=host.port or 0, duration_s=4.0))
        await viewer.run()
        await stop_host(host, task)
        return host, viewer

    host, viewer = run(scenario, 60)
    assert host.stats.encode_errors == 1
    assert host.keyframes.forced_for_loss >= 1  # the frame after the bad one is a key frame
    st = viewer.summary()
    sent = st["packets_video"] + st["packets_lost_video"]
    assert st["reconnects"] == 0 and st["decode_errors"] == 0
    assert sent > 60 and st["frames_shown"] >= 0.85 * sent and st["max_unshown_frames"] < 8
