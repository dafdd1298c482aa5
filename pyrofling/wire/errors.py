"""One error hierarchy for everything a peer can send.

Parsers check lengths before they unpack, so nothing but :class:`ProtocolError`
(a ``ValueError``) ever escapes them, and ``reason`` names the counter a shell
files the drop under.
"""

from __future__ import annotations

from typing import ClassVar, TypeAlias

#: Anything a datagram or message may arrive as.
Buffer: TypeAlias = bytes | bytearray | memoryview


class ProtocolError(ValueError):
    """Peer data that does not follow protocol.md.  ``reason`` is a short counter name."""

    reason: ClassVar[str] = "protocol_error"


class TruncatedError(ProtocolError):
    """Fewer bytes than the structure needs."""

    reason = "truncated"


class LengthError(ProtocolError):
    """A length that is not the one the message type requires, or is out of range."""

    reason = "bad_length"


class BadMagicError(ProtocolError):
    """Magic bits that are not PyroFling's (a control type word, a capture header)."""

    reason = "bad_magic"


class UnknownMessageError(ProtocolError):
    """A well-formed type word with an id this side does not know."""

    reason = "unknown_type"


class FieldError(ProtocolError):
    """A field value outside what protocol.md allows."""

    reason = "bad_field"
