"""Datagrams handed to the kernel in runs it segments (Linux's UDP generic segmentation offload, ``UDP_SEGMENT``,
4.18+; Python names it from 3.12): a run of datagrams of one size to one address goes in one call, and the kernel
(the network card, where it can) cuts it into the same datagrams. A 1080p60 frame is about 35 datagrams; each
call costs the host's event loop more than the bytes it copies."""

from __future__ import annotations

import socket
import struct
from collections.abc import Sequence

from pyrofling.core.host.state import Address, SendDatagram

SOL_UDP, UDP_SEGMENT = socket.IPPROTO_UDP, getattr(socket, "UDP_SEGMENT", 103)
#: The kernel's limits for one such call: segments, and bytes (a datagram's largest payload).
GSO_MAX_SEGMENTS, GSO_MAX_BYTES = 64, 65_000


def segment_size(run: list[bytes]) -> bytes:
    """The control message's value for a run: its datagrams' size (all but a shorter last one)."""
    return struct.pack("=H", len(run[0]))


def segment_runs(datagrams: Sequence[SendDatagram]) -> list[tuple[Address, list[bytes]]]:
    """The datagrams in order, as runs the kernel can segment: one address, one size but for a shorter last one,
    at most :data:`GSO_MAX_SEGMENTS` and :data:`GSO_MAX_BYTES`."""
    runs: list[tuple[Address, list[bytes]]] = []
    size = total = 0
    for d in datagrams:
        n = len(d.data)
        if runs:
            addr, run = runs[-1]
            if (
                addr == d.address
                and n <= size
                and len(run[-1]) == size
                and len(run) < GSO_MAX_SEGMENTS
                and total + n <= GSO_MAX_BYTES
            ):
                run.append(d.data)
                total += n
                continue
        runs.append((d.address, [d.data]))
        size = total = n
    return runs
