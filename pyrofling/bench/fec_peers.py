"""The codecs pyrofling's FEC is compared with, when the ``compare`` extra is installed.

zfec is Reed–Solomon, an MDS code: the best any code can do at the same overhead.
raptorq is RFC 6330, a fountain code like ours but with near-MDS recovery.  Both
are optional: :func:`peers_available` says which are here.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from typing import Any


def peers_available() -> dict[str, bool]:
    return {name: importlib.util.find_spec(name) is not None for name in ("zfec", "raptorq")}


class Zfec:
    def __init__(self) -> None:
        import zfec

        self._zfec = zfec
        self._encoders: dict[tuple[int, int], Any] = {}
        self._decoders: dict[tuple[int, int], Any] = {}

    def encoder(self, k: int, m: int) -> Any:
        key = (k, m)
        if key not in self._encoders:
            self._encoders[key] = self._zfec.Encoder(k, m)
        return self._encoders[key]

    def decoder(self, k: int, m: int) -> Any:
        key = (k, m)
        if key not in self._decoders:
            self._decoders[key] = self._zfec.Decoder(k, m)
        return self._decoders[key]

    def encode(self, blocks: list[bytes], f: int) -> list[bytes]:
        k = len(blocks)
        return list(self.encoder(k, k + f).encode(blocks, list(range(k, k + f))))

    def decode(self, k: int, f: int, received: list[tuple[int, bytes]]) -> bytes | None:
        if len(received) < k:
            return None
        first = received[:k]
        out = self.decoder(k, k + f).decode([b for _, b in first], [i for i, _ in first])
        return b"".join(out)


class Raptorq:
    def __init__(self) -> None:
        import raptorq

        self._rq = raptorq

    def encode(self, frame: bytes, symbol_bytes: int, f: int) -> list[bytes]:
        return list(self._rq.Encoder.with_defaults(frame, symbol_bytes).get_encoded_packets(f))

    def decode(self, frame_bytes: int, symbol_bytes: int, packets: Iterable[bytes]) -> bytes | None:
        dec = self._rq.Decoder.with_defaults(frame_bytes, symbol_bytes)
        for p in packets:
            out = dec.decode(p)
            if out is not None:
                return bytes(out)
        return None
