"""One TCP control connection's messages, in and out (protocol.md §3.1, §7.7); pure.

Plain PyroFling framing until the handshake hands it keys, sealed records
after: from then on a record that does not open (forged, flipped, dropped,
repeated or moved on the path) ends the connection, and nothing in the clear is
read.  The switch is exact: the bytes that follow the last plain message in the
same read are already read as records.
"""

from __future__ import annotations

from pyrofling.core.secure import ControlOpener, ControlSealer
from pyrofling.wire import ControlFramer, ControlMessage, LengthError, UnknownControl, parse_record_message


class ControlChannel:
    """Feed it what ``recv`` returned, take messages one by one with :meth:`next` (the handshake may switch
    to sealed records between two of them), and :meth:`encode` what to send."""

    def __init__(self, *, max_buffer_bytes: int = 4096) -> None:
        self._framer = ControlFramer(max_buffer_bytes=max_buffer_bytes)
        self._max_buffer_bytes = max_buffer_bytes
        self._opener: ControlOpener | None = None
        self._sealer: ControlSealer | None = None

    @property
    def sealed(self) -> bool:
        """Both directions are sealed."""
        return self._opener is not None and self._sealer is not None

    def feed(self, data: bytes) -> None:
        if self._opener is not None:
            self._opener.feed(data)
        else:
            self._framer.push(data)

    def next(self) -> ControlMessage | UnknownControl | None:
        """The next whole message, or None until more bytes arrive; raises ProtocolError or AuthError (close)."""
        if self._opener is None:
            msg = self._framer.next()
            if msg is None and self._framer.buffered > self._max_buffer_bytes:
                raise LengthError("control stream buffer overflow")
            return msg
        plain = self._opener.next()
        if plain is None:
            if self._opener.buffered > self._max_buffer_bytes:
                raise LengthError("control stream buffer overflow")
            return None
        return parse_record_message(plain)

    def open_with(self, key: bytes) -> None:
        """From the next message on, read sealed records under ``key`` (what is buffered included)."""
        self._opener = ControlOpener(key, self._framer.take_rest())

    def seal_with(self, key: bytes) -> None:
        """From now on, everything :meth:`encode` returns is a sealed record."""
        self._sealer = ControlSealer(key)

    def encode(self, message: ControlMessage) -> bytes:
        plain = bytes(message)
        return self._sealer.seal(plain) if self._sealer is not None else plain
