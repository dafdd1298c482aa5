"""The struct-record base every fixed-size message builds on (TCP control, UDP control, capture).

A record is a frozen ``@dataclass(slots=True)`` whose fields, in order, are the
payload packed with ``PAYLOAD`` (no ``PAYLOAD``: an empty payload).  Both
protocols frame records their own way — a type word in front (protocol.md §2),
a 32-byte header in front (protocol.md §8) — and spell it the same:
``payload()`` / ``parse_payload(data)`` for the payload alone, ``encode(…)`` for
the whole message as it goes on the wire.
"""

from __future__ import annotations

import struct
from typing import ClassVar, Self

from pyrofling.wire.errors import Buffer, LengthError, TruncatedError


class Record:
    """Base of fixed-size messages; subclasses are dataclasses and set ``PAYLOAD``."""

    PAYLOAD: ClassVar[struct.Struct | None] = None
    __match_args__: ClassVar[tuple[str, ...]] = ()  # the payload's field order; dataclass fills it in

    @classmethod
    def record_name(cls) -> str:
        """How errors name this message (its type's name on the wire)."""
        return cls.__name__

    @classmethod
    def payload_bytes(cls) -> int:
        return cls.PAYLOAD.size if cls.PAYLOAD is not None else 0

    def payload(self) -> bytes:
        """The payload: the dataclass fields, in order, packed with ``PAYLOAD``."""
        if self.PAYLOAD is None:
            return b""
        return self.PAYLOAD.pack(*(getattr(self, name) for name in self.__match_args__))

    @classmethod
    def check_length(cls, data: Buffer) -> None:
        want = cls.payload_bytes()
        if len(data) != want:
            raise (TruncatedError if len(data) < want else LengthError)(
                f"{cls.record_name()} payload is {len(data)} bytes, expected {want}"
            )

    @classmethod
    def parse_payload(cls, data: Buffer) -> Self:
        """Build the record from exactly its payload bytes, then :meth:`check` its values."""
        cls.check_length(data)
        record = cls() if cls.PAYLOAD is None else cls(*cls.PAYLOAD.unpack(data))
        record.check()
        return record

    def check(self) -> None:
        """Raise FieldError for values the protocol does not allow (nothing to check by default)."""
