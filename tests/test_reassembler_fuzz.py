"""100 000 random and mutated datagrams at the reassembler: it never raises, memory stays bounded."""

import random

from pyrofling.core.host.packetizer import MediaPacket, Packetizer
from pyrofling.core.viewer.reassembler import PacketReady, Reassembler, ReassemblerConfig
from pyrofling.fec import make_planner


def test_reassembler_never_raises_on_hostile_input() -> None:
    rng = random.Random(99)
    cfg = ReassemblerConfig(max_in_flight=8, max_packet_bytes=256 * 1024, max_buffered_bytes=1 << 20)
    r = Reassembler(cfg)
    p = Packetizer(video_planner=make_planner("tuned"))
    valid = [d for i in range(40) for d in p.packetize(MediaPacket(rng.randbytes(rng.randint(1, 9000)), i * 1000))]
    now = 0.0
    delivered = 0
    for i in range(100_000):
        base = bytearray(rng.choice(valid))
        kind = i % 4
        if kind == 0:
            data = bytes(rng.randbytes(rng.randint(0, 1100)))
        elif kind == 1:  # flip header bits: sequence numbers, sizes, flags, FEC fields
            for _ in range(rng.randint(1, 3)):
                j = rng.randrange(24)
                base[j] ^= 1 << rng.randrange(8)
            data = bytes(base)
        elif kind == 2:
            data = bytes(base[: rng.randrange(len(base) + 1)])
        else:
            data = bytes(base)  # a valid datagram, possibly duplicated or out of order
        now += 0.0001
        events = r.receive(data, now)
        delivered += sum(isinstance(e, PacketReady) for e in events)
        if i % 1000 == 0:
            r.handle_timer(now)
        assert r.buffered_bytes <= cfg.max_buffered_bytes
        assert r.in_flight(0) <= cfg.max_in_flight  # type: ignore[arg-type]
    assert r.datagrams == 100_000
    assert sum(r.discarded.values()) > 50_000
    assert delivered > 0
