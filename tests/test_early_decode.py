"""Early decoding: a picture's first slices handed to the decoder while the rest of it is on its way.

The reassembler's parts (pure, with datagrams from the host's packetizer), the connection's gate on them, and
FFmpeg's H.264 decoder fed the parts of real x264 pictures: the same pictures as decoded whole, and a picture
begun and then lost that does not stop the decoder for good.
"""

from __future__ import annotations

import random
import threading
from typing import Any

import numpy as np
import pytest

from pyrofling.client.display import HeadlessDisplay
from pyrofling.core.host.packetizer import MediaPacket, Packetizer
from pyrofling.core.slices import EARLY_PICTURE_BYTES
from pyrofling.core.viewer.reassembler import (
    PacketPart,
    PacketReady,
    PacketsLost,
    Reassembler,
    ReassemblyEvent,
)
from pyrofling.fec import make_planner

START = b"\x00\x00\x00\x01"


def _nal_stream(rng: random.Random, sizes: list[int]) -> bytes:
    """Annex B: NAL units of these sizes after 4-byte start codes, their bytes free of 00 00 (as emulation
    prevention keeps real ones)."""
    out = []
    for size in sizes:
        body = bytes(rng.randrange(1, 256) for _ in range(size))
        out.append(START + body)
    return b"".join(out)


def _packetizer(planner: str = "none") -> Packetizer:
    return Packetizer(video_seq=100, video_planner=make_planner(planner))


def _parts(events: list[ReassemblyEvent]) -> list[PacketPart]:
    return [e for e in events if isinstance(e, PacketPart)]


def _ready(events: list[ReassemblyEvent]) -> list[PacketReady]:
    return [e for e in events if isinstance(e, PacketReady)]


def test_the_next_packet_comes_in_parts_that_end_where_a_nal_unit_begins() -> None:
    rng = random.Random(3)
    p = _packetizer()
    first = _nal_stream(rng, [500])
    picture = _nal_stream(rng, [3000, 6000, 2500, 9000, 700, 5000])
    r = Reassembler()
    r.early_part_bytes = 4096
    events: list[ReassemblyEvent] = []
    for d in p.packetize(MediaPacket(first, 0)):
        events += r.receive(d, 0.0)
    for d in p.packetize(MediaPacket(picture, 16_667)):
        events += r.receive(d, 0.01)
    parts, ready = _parts(events), _ready(events)
    assert [e.data for e in ready] == [first, picture]
    assert parts and all(e.seq == ready[1].seq and e.pts_us == 16_667 for e in parts)
    # In order, each following the last, each at least the asked bytes, each ending before a start code.
    starts = [e.start for e in parts]
    assert starts == [0] + [e.start + len(e.data) for e in parts[:-1]]
    for e in parts:
        end = e.start + len(e.data)
        assert len(e.data) >= 4096
        assert picture[end - 1 : end + 3] == START  # the code's leading zero stays with the NAL before it
    # The last NAL unit is never handed out early: its end is known only once the packet is whole.
    fed = parts[-1].start + len(parts[-1].data)
    assert b"".join(e.data for e in parts) == picture[:fed]
    assert fed <= picture.rindex(START) + 1
    # A part is handed out once, before the packet it belongs to is delivered.
    assert events.index(parts[-1]) < events.index(ready[1])


def test_no_parts_unless_asked_and_none_for_a_packet_with_one_nal_unit() -> None:
    rng = random.Random(4)
    p = _packetizer()
    packets = [_nal_stream(rng, [300]), _nal_stream(rng, [5000, 9000]), _nal_stream(rng, [20_000])]
    datagrams = [p.packetize(MediaPacket(data, i * 16_667)) for i, data in enumerate(packets)]
    off, on = Reassembler(), Reassembler()
    on.early_part_bytes = 4096
    seen_off: list[ReassemblyEvent] = []
    seen_on: list[ReassemblyEvent] = []
    for ds in datagrams:
        for d in ds:
            seen_off += off.receive(d, 0.0)
            seen_on += on.receive(d, 0.0)
    assert not _parts(seen_off)
    parts = _parts(seen_on)
    assert [(e.seq, e.start, len(e.data)) for e in parts] == [
        (101, 0, 5005)
    ]  # up to the next code (its leading zero with it); none of the 20 KB NAL unit
    assert [e.data for e in _ready(seen_on)] == [e.data for e in _ready(seen_off)] == packets


def test_only_packets_as_large_as_asked_come_in_parts() -> None:
    """A small picture arrives at once and decodes faster whole: parts only for packets of
    ``early_packet_bytes`` or more, told by the first datagram's header (the packet's size)."""
    rng = random.Random(9)
    p = _packetizer()
    packets = [
        _nal_stream(rng, [300]),
        _nal_stream(rng, [5000, 5000, 5000]),  # 15 KB: below
        _nal_stream(rng, [6000, 6000, 6000, 6000]),  # 24 KB: at
        _nal_stream(rng, [5000, 5000, 5000]),
    ]
    sizes = [len(x) for x in packets]
    r = Reassembler()
    r.early_part_bytes, r.early_packet_bytes = 4096, sizes[2]
    events: list[ReassemblyEvent] = []
    for i, data in enumerate(packets):
        for d in p.packetize(MediaPacket(data, i * 16_667)):
            events += r.receive(d, i * 0.016)
    assert {e.seq for e in _parts(events)} == {102}
    assert [e.data for e in _ready(events)] == packets  # every packet still delivered whole
    r.early_packet_bytes = sizes[2] + 1  # one byte more than the largest: none
    for i, data in enumerate(packets):
        assert not _parts([e for d in p.packetize(MediaPacket(data, (i + 4) * 16_667)) for e in r.receive(d, 1.0)])


def test_a_packet_behind_an_incomplete_one_waits_and_a_gap_stops_its_parts_until_filled() -> None:
    """The decoder must have pictures in order: no part of a packet while an older one may still come; and a
    part is only the packet's leading blocks in hand, so a lost block holds the parts back until it is there."""
    rng = random.Random(5)
    p = _packetizer()
    first = _nal_stream(rng, [300])
    older = _nal_stream(rng, [6000, 6000, 6000])
    newer = _nal_stream(rng, [6000, 6000, 6000])
    d0, d1, d2 = (p.packetize(MediaPacket(x, i * 16_667)) for i, x in enumerate((first, older, newer)))
    r = Reassembler()
    r.early_part_bytes = 4096
    events: list[ReassemblyEvent] = []
    for d in d0:
        events += r.receive(d, 0.0)
    for d in d1[:-1]:  # the older packet all but its last block
        events += r.receive(d, 0.001)
    for d in d2[:10]:
        events += r.receive(d, 0.002)
    assert {e.seq for e in _parts(events)} == {101}  # the newer packet waits behind the older
    events += r.receive(d1[-1], 0.003)  # the older completes and is delivered: the newer goes on in parts
    gap = 12
    for i, d in enumerate(d2[10:], start=10):
        if i != gap:
            events += r.receive(d, 0.004)
    newer_parts = [e for e in _parts(events) if e.seq == 102]
    assert newer_parts and all(e.start + len(e.data) <= gap * 1024 for e in newer_parts)
    events += r.receive(d2[gap], 0.005)  # the lost block arrives (a resend): the packet completes
    assert [e.data for e in _ready(events)] == [first, older, newer]


def test_a_packet_given_up_after_its_parts_is_counted_lost_and_the_next_starts_afresh() -> None:
    rng = random.Random(6)
    p = _packetizer()
    pictures = [_nal_stream(rng, [300])] + [_nal_stream(rng, [5000, 5000, 5000]) for _ in range(2)]
    datagrams = [p.packetize(MediaPacket(x, i * 16_667)) for i, x in enumerate(pictures)]
    r = Reassembler()
    r.early_part_bytes = 4096
    events: list[ReassemblyEvent] = []
    for d in datagrams[0] + datagrams[1][:-2] + datagrams[2]:
        events += r.receive(d, 0.0)
    events += r.handle_timer(1.0)  # past the deadline: the middle one is given up
    lost = [e for e in events if isinstance(e, PacketsLost)]
    assert [(e.count, e.before_seq) for e in lost] == [(1, 102)]
    assert [e.data for e in _ready(events)] == [pictures[0], pictures[2]]
    assert {e.seq for e in _parts(events)} == {101}  # the last came whole behind the gap: delivered, no parts


def test_parts_survive_fuzzed_and_repair_datagrams_without_raising() -> None:
    rng = random.Random(7)
    p = _packetizer("tuned")
    r = Reassembler()
    r.early_part_bytes = 1024
    pictures = [_nal_stream(rng, [rng.randint(100, 3000) for _ in range(rng.randint(1, 8))]) for _ in range(40)]
    got: list[ReassemblyEvent] = []
    for i, pic in enumerate(pictures):
        ds = p.packetize(MediaPacket(pic, i * 16_667))
        rng.shuffle(ds)
        for d in ds:
            if rng.random() < 0.1:  # flipped or cut: refused, counted, never fatal
                d = bytes(b ^ 0xFF if rng.random() < 0.05 else b for b in d)[: rng.randint(0, len(d))]
            got += r.receive(d, i * 0.016)
    got += r.handle_timer(10.0)
    for part in _parts(got):
        assert part.start >= 0 and part.data
    delivered = {e.seq: e.data for e in _ready(got)}
    for part in _parts(got):
        if part.seq in delivered:  # a delivered packet's parts are its own bytes
            assert delivered[part.seq][part.start : part.start + len(part.data)] == part.data


def test_the_connection_hands_out_parts_only_after_the_first_key_frame() -> None:
    from test_viewer_connection import IDR, Pair

    from pyrofling.core.viewer.connection import DecodeVideo, DecodeVideoPart

    rng = random.Random(8)
    pair = Pair(early_part_bytes=4096)
    slices = _nal_stream(rng, [5000, 5000, 5000])
    got = pair.receive(pair.media(b"\x00\x00\x00\x01\x41" + slices, 1_000, 0.1), 0.1)
    assert got == []  # before the key frame nothing goes to the decoder, not even parts
    key = IDR + slices
    got = pair.receive(pair.media(key, 17_000, 0.12), 0.12)
    parts = [o for o in got if isinstance(o, DecodeVideoPart)]
    [whole] = [o for o in got if isinstance(o, DecodeVideo)]
    assert parts == []  # the key frame came in parts that had no key frame before them to decode after
    p_frame = b"\x00\x00\x00\x01\x41" + slices
    got = pair.receive(pair.media(p_frame, 34_000, 0.13), 0.13)
    parts = [o for o in got if isinstance(o, DecodeVideoPart)]
    [whole] = [o for o in got if isinstance(o, DecodeVideo)]
    assert parts and all(o.seq == whole.seq and o.pts_us == 34_000 for o in parts)
    assert whole.data == p_frame and p_frame.startswith(b"".join(o.data for o in parts))


# -- FFmpeg's decoder fed in parts ---------------------------------------------------------------


class _Pictures:
    """The presenter's end of the pipeline: the pictures it would show."""

    def __init__(self) -> None:
        self.got: list[Any] = []
        self.lock = threading.Lock()

    def submit(self, picture: Any) -> None:
        with self.lock:
            self.got.append(picture)


class _Arrays(HeadlessDisplay):
    """A display that keeps each picture's pixels."""

    def prepare(self, frame: Any) -> Any:
        return frame.to_ndarray()


def _encoded(count: int) -> list[bytes]:
    """x264 pictures of the test scene in slices of at most 1,000 bytes (several a picture at 320x240)."""
    from pyrofling.core.scene import TestScene
    from pyrofling.server.encoder import EncoderConfig, VideoEncoder

    enc = VideoEncoder(
        EncoderConfig(width=320, height=240, fps=60, bitrate_kbits=2000, threads=1, params="slice-max-size=1000")
    )
    scene = TestScene(320, 240)
    out = [p.data for i in range(count) for p in enc.encode_array(scene.render(i, i * 16_667), i * 16_667)]
    enc.close()
    return out


def _through_pipeline(
    access_units: list[bytes],
    *,
    early: bool,
    lose: int | None = None,
    halve: int | None = None,
    queued_first: bool = False,
) -> tuple[list[Any], dict[str, Any]]:
    """Each access unit packetized, reassembled (unit ``lose``'s last block lost; unit ``halve`` sent as a
    packet of its first half, as if damaged or forged) and decoded; ``queued_first``: everything queued before
    the decode thread starts (a thread behind the datagrams)."""
    from pyrofling.client.video import VideoPipeline
    from pyrofling.core.viewer.clock_sync import HostClock
    from pyrofling.core.viewer.connection import DecodeVideo, DecodeVideoPart
    from pyrofling.wire import VideoCodec

    shown = _Pictures()
    errors: list[int] = []
    pipeline = VideoPipeline(
        shown,  # type: ignore[arg-type]
        _Arrays(),
        on_decode_error=lambda: errors.append(1),
        decode_threads=2,
        early_decode=early,
        max_queue=len(access_units) + 1,
    )
    if not queued_first:
        pipeline.start()
    p = _packetizer()
    r = Reassembler()
    r.early_part_bytes = 400 if early else None
    clock = HostClock()
    events: list[ReassemblyEvent] = []
    for i, au in enumerate(access_units):
        if i == halve:
            au = au[: len(au) // 2]
        ds = p.packetize(MediaPacket(au, i * 16_667, key_frame=i == 0))
        if i == lose:
            ds = ds[:-1]
        for d in ds:
            events += r.receive(d, i * 0.016)
    events += r.handle_timer(100.0)
    for e in events:
        if isinstance(e, PacketPart):
            pipeline.offer_part(DecodeVideoPart(e.data, e.pts_us, e.seq, e.start))
        elif isinstance(e, PacketReady):
            assert pipeline.offer(DecodeVideo(e.data, e.pts_us, True, 0.0, VideoCodec.H264, 0.0, e.seq), clock, 1, 0)
    if queued_first:
        pipeline.start()
    pipeline.close(timeout_s=60)
    return shown.got, {**pipeline.summary(), "decode_errors_told": len(errors)}


@pytest.mark.io  # real x264 and FFmpeg
def test_pictures_decoded_from_their_parts_are_the_pictures_decoded_whole() -> None:
    aus = _encoded(20)
    assert min(au.count(b"\x00\x00\x01") for au in aus[1:]) >= 3  # slices to part with
    whole, _ = _through_pipeline(aus, early=False)
    early, stats = _through_pipeline(aus, early=True)
    assert len(whole) == len(early) == 20
    assert all(np.array_equal(a.prepared, b.prepared) for a, b in zip(whole, early, strict=True))
    assert [p.pts_us for p in early] == [i * 16_667 for i in range(20)]
    assert stats["pictures_decoded_early"] == 19  # all but the first (no packet before it to order it after)
    assert stats["parts_decoded"] >= 19 * 2 and stats["parts_abandoned"] == 0


@pytest.mark.io
def test_parts_queued_behind_one_another_go_to_the_decoder_together() -> None:
    """A decode thread behind the datagrams finds a picture's parts queued: fed in one call, FFmpeg decodes
    their slices on its threads together; the pictures are the same."""
    aus = _encoded(20)
    whole, _ = _through_pipeline(aus, early=False)
    early, stats = _through_pipeline(aus, early=True, queued_first=True)
    assert all(np.array_equal(a.prepared, b.prepared) for a, b in zip(whole, early, strict=True))
    assert len(early) == 20 and stats["pictures_decoded_early"] == 19
    assert stats["part_feeds"] == 19 < stats["parts_decoded"]  # one call a picture for its parts


@pytest.mark.io
def test_a_picture_begun_in_parts_and_lost_does_not_stop_the_decoder() -> None:
    """FFmpeg's H.264 decoder fed parts gives no picture ever again once one is left unfinished (not even at a
    key frame): the pipeline resets it when the packet it began is lost, so the pictures after it still come."""
    aus = _encoded(12)
    pictures, stats = _through_pipeline(aus, early=True, lose=5)
    assert stats["parts_abandoned"] == 1 and stats["decoder_resets"] == 1
    assert stats["decode_errors_told"] >= 1  # its references went with it: the connection asks for a key frame
    assert [p.pts_us for p in pictures] == [i * 16_667 for i in range(12) if i != 5]


@pytest.mark.io
def test_a_complete_packet_holding_half_a_picture_does_not_stop_the_decoder() -> None:
    """On an open session a packet can come whole but wrong (forged or damaged blocks): one holding only part of
    a picture leaves FFmpeg's decoder, fed in parts, waiting for the rest for good.  The pipeline resets it."""
    aus = _encoded(12)
    pictures, stats = _through_pipeline(aus, early=True, halve=5)
    assert stats["decoder_resets"] == 1 and stats["decode_errors_told"] >= 1
    assert [p.pts_us for p in pictures] == [i * 16_667 for i in range(12) if i != 5]


def test_parts_wait_for_no_one_and_do_not_take_a_whole_packets_place() -> None:
    from pyrofling.client.video import VideoPipeline
    from pyrofling.core.viewer.clock_sync import HostClock
    from pyrofling.core.viewer.connection import DecodeVideo, DecodeVideoPart
    from pyrofling.wire import VideoCodec

    pipeline = VideoPipeline(_Pictures(), _Arrays(), on_decode_error=lambda: None, max_queue=2, early_decode=True)  # type: ignore[arg-type]
    part = DecodeVideoPart(b"\0\0\1\x65", 0, 1, 0)
    assert all(pipeline.offer_part(part) for _ in range(20))  # not started: they queue, and take no place
    packet = DecodeVideo(b"\0\0\1\x65", 0, True, 0.0, VideoCodec.H264, 0.0, 1)
    assert pipeline.offer(packet, HostClock(), 1, 0.0) and pipeline.offer(packet, HostClock(), 1, 0.0)
    assert not pipeline.offer(packet, HostClock(), 1, 0.0)  # two whole packets wait: the third is refused
    assert not pipeline.offer_part(part)  # and a part is not worth queueing behind them
    off = VideoPipeline(_Pictures(), _Arrays(), on_decode_error=lambda: None)  # type: ignore[arg-type]
    assert not off.offer_part(part)


def test_early_decoding_is_asked_for_and_taken_only_where_it_can_work() -> None:
    from pyrofling.cli import build_parser
    from pyrofling.cli.view import viewer_config

    def config(*flags: str) -> Any:
        return viewer_config(build_parser("view").parse_args(["view", "127.0.0.1", *flags]))

    assert config("--decode-threads", "2", "--early-decode").decodes_early
    assert config("--decode-threads", "2", "--early-decode").early_part_bytes == 4096
    # By default on where the viewer decodes on 4 threads or more; asked for or refused either way.
    assert not config("--decode-threads", "2").decodes_early and config("--decode-threads", "4").decodes_early
    assert config("--decode-threads", "2").early_part_bytes is None
    assert not config("--decode-threads", "8", "--no-early-decode").decodes_early
    # Only pictures large enough to take long to arrive, unless told otherwise (0: every one).
    assert config("--early-decode").early_decode_bytes == EARLY_PICTURE_BYTES == 24_000
    assert config("--early-decode", "--early-decode-bytes", "0").early_decode_bytes == 0
    with pytest.raises(SystemExit):
        config("--early-decode-bytes", "-1")
    # One thread takes each part as long as a picture; intra-refresh recovery would show the reset's damage.
    assert not config("--decode-threads", "1", "--early-decode").decodes_early
    assert not config("--decode-threads", "2", "--early-decode", "--recovery", "intra-refresh").decodes_early


@pytest.mark.io  # a real host and two real viewers on loopback
def test_a_viewer_decodes_early_only_the_pictures_as_large_as_it_was_told(tmp_path: Any) -> None:
    """The flag reaches the viewer's reassembler: two viewers of one host whose pictures come in several
    slices, one decoding early every picture of 1,000 bytes or more, the other at the default (24 KB: none of
    these 320x240 pictures)."""
    from faults import HostProcess, ViewerProcess, kill, wait_for

    host = HostProcess(tmp_path, "--encoder-params", "slice-max-size=500", fps=30, bitrate_kbits=3000)
    early = large_only = None
    try:
        flags = ("--early-decode", "--decode-threads", "2")
        early = ViewerProcess(tmp_path, host.port, *flags, "--early-decode-bytes", "1000", name="early")
        large_only = ViewerProcess(tmp_path, host.port, *flags, name="large-only")
        wait_for(lambda: early.shown() >= 60 and large_only.shown() >= 60, 60, "60 pictures shown by each viewer")
        early.stop()
        large_only.stop()
        host.stop()
    finally:
        kill(early, large_only, host)
    st, default = early.stats(), large_only.stats()
    assert st["parts_decoded"] > st["pictures_decoded_early"] >= 30, st
    assert st["parts_abandoned"] == 0 and st["decode_errors"] == 0
    assert default["parts_decoded"] == default["pictures_decoded_early"] == 0, default
    assert default["frames_shown"] >= 60
