"""When a datagram really arrived: the kernel's receive timestamp, on the monotonic clock.

The viewer's event loop reads datagrams when it gets to them; a decode, a garbage collection or a statistics
write can hold it for milliseconds, and every datagram read afterwards would look that much later.  The host's
rate control reads the link's queue from arrival times (protocol.md §7.10), so a busy viewer would look like a
congested link.  Linux stamps each datagram as it is received; ``SIOCGSTAMP`` right after reading it returns
that stamp (wall clock), which this maps to the monotonic clock the rest of the viewer uses.  Where the ioctl
is not available it says so once and the read time is used.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import socket
import struct
import time

log = logging.getLogger(__name__)

#: Linux: the receive time of the last datagram read from the socket (struct timeval).
SIOCGSTAMP = 0x8906
_TIMEVAL = struct.Struct("@ll")


class ArrivalClock:
    """``now()`` right after each datagram is read from ``sock``: when the kernel received it."""

    def __init__(self, sock: socket.socket) -> None:
        self.fd = sock.fileno()
        self.kernel = True
        self._buf = bytearray(_TIMEVAL.size)
        # The first ask turns stamping on for the socket (nothing read yet: ENOENT); a few datagrams later every
        # one is stamped as it arrives.  (SO_TIMESTAMP would not do: it hands the stamp to recvmsg only.)
        with contextlib.suppress(OSError):
            fcntl.ioctl(self.fd, SIOCGSTAMP, self._buf)

    def now(self) -> float:
        read_s = time.monotonic()
        if not self.kernel:
            return read_s
        try:
            fcntl.ioctl(self.fd, SIOCGSTAMP, self._buf)
        except OSError as exc:
            self.kernel = False
            log.debug("no kernel receive timestamps (%s): arrival times are read times", exc)
            return read_s
        sec, usec = _TIMEVAL.unpack(self._buf)
        # Wall minus monotonic from two reads side by side: a thread preempted between ``read_s`` and a later wall
        # read would move the stamp back by as long as it waited (1.6 ms once on a loaded machine).
        wall, mono = time.time(), time.monotonic()
        stamp = sec + usec / 1e6 - (wall - mono)
        # Never later than it was read, and a wall-clock step cannot send it far back.
        return stamp if read_s - 1.0 < stamp <= read_s else read_s
