"""Serial-number arithmetic for the wire's wrapping counters (protocol.md §4.3).

Packet and subpacket sequence numbers are 14 bits on the wire, the gamepad and
ping sequences 16 bits.  Never compare two of them with a bare ``<``: use
:func:`seq_delta`, which gives the signed distance on the circle.
"""

from __future__ import annotations

SEQ14_BITS = 14
SEQ14_MASK = (1 << SEQ14_BITS) - 1
SEQ16_BITS = 16
SEQ16_MASK = (1 << SEQ16_BITS) - 1


def seq_delta(a: int, b: int, bits: int = SEQ14_BITS) -> int:
    """Signed distance ``a - b`` modulo ``2**bits``, in ``[-2**(bits-1), 2**(bits-1) - 1]``.

    Positive means ``a`` is newer than ``b``.  The half-way point (exactly
    ``2**(bits-1)`` apart) counts as older, as the reference does.
    """
    mask = (1 << bits) - 1
    d = (a - b) & mask
    return d if d <= mask >> 1 else d - (mask + 1)


def seq14_delta(a: int, b: int) -> int:
    """Signed distance between two 14-bit packet or subpacket sequence numbers (:func:`seq_delta` written out:
    the viewer works it out several times a datagram)."""
    d = (a - b) & SEQ14_MASK
    return d if d < 0x2000 else d - 0x4000


def seq16_delta(a: int, b: int) -> int:
    """Signed distance between two 16-bit gamepad or ping sequence numbers."""
    return seq_delta(a, b, SEQ16_BITS)


def seq14_add(a: int, n: int) -> int:
    """``a + n`` wrapped to 14 bits."""
    return (a + n) & SEQ14_MASK
