"""Authentication and sealed datagrams for the AUTH and ENCRYPTION extensions (protocol.md §7.7); pure.

The secret (a password or the pairing code a host prints) never crosses the
wire. Both sides stretch it with scrypt and the host's salt into a key ``K``.
The host computes it once per run, a viewer once per connection. Each side
then proves it knows ``K`` with an HMAC over both nonces and the connection's
cookie. A proof cannot be replayed on another connection, and a proof the host
sent cannot be passed off as the viewer's. The host compares in constant time.

With ENCRYPTION, HKDF turns ``K``, the nonces and the cookie into one AES-256-GCM
key per direction. Each datagram is sealed under a 64-bit counter that the
sender never reuses, so a nonce never repeats. The receiver keeps a window of
counters it has seen and refuses a replay.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

NONCE_BYTES = 32
SALT_BYTES = 16
PROOF_BYTES = 32
KEY_BYTES = 32
TAG_BYTES = 16
COUNTER_BYTES = 8
#: What sealing adds to a datagram: its counter and the GCM tag.
SEAL_OVERHEAD = COUNTER_BYTES + TAG_BYTES
#: scrypt cost: 2**14 × 8 × 128 bytes = 16 MiB and ~50 ms, once per connection. It makes guessing a short
#: pairing code from a recorded handshake slow; the host's limit on failed attempts stops guessing online.
SCRYPT_LOG2_N = 14
SCRYPT_R = 8
REPLAY_WINDOW = 4096

_VIEWER_PROOF = b"pyrofling v1 viewer proof"
_HOST_PROOF = b"pyrofling v1 host proof"
_KEYS = b"pyrofling v1 datagram keys"


PAIRING_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"  # no 0/o, 1/l/i: read aloud, typed by a friend


def pairing_code(random_below: Callable[[int], int] = secrets.randbelow) -> str:
    """Three groups of four, about 59 bits: far beyond online guessing at a few tries a minute per address."""
    chars = [PAIRING_ALPHABET[random_below(len(PAIRING_ALPHABET))] for _ in range(12)]
    return "-".join("".join(chars[i : i + 4]) for i in range(0, 12, 4))


class AuthError(Exception):
    """A proof or a sealed datagram did not check out."""


def derive_key(secret: str, salt: bytes, log2_n: int = SCRYPT_LOG2_N) -> bytes:
    """The long-term key both sides hold: scrypt(secret, salt)."""
    if not secret:
        raise ValueError("the secret is empty")
    if not 10 <= log2_n <= 15:  # a hostile host must not make a viewer spend a gigabyte
        raise ValueError(f"scrypt cost 2**{log2_n} is out of range 2**10..2**15")
    return hashlib.scrypt(secret.encode(), salt=salt, n=1 << log2_n, r=SCRYPT_R, p=1, maxmem=1 << 26, dklen=KEY_BYTES)


def _transcript(cookie: int, host_nonce: bytes, viewer_nonce: bytes) -> bytes:
    return struct.pack("<Q", cookie) + host_nonce + viewer_nonce


def viewer_proof(key: bytes, cookie: int, host_nonce: bytes, viewer_nonce: bytes) -> bytes:
    return hmac.digest(key, _VIEWER_PROOF + _transcript(cookie, host_nonce, viewer_nonce), "sha256")


def host_proof(key: bytes, cookie: int, host_nonce: bytes, viewer_nonce: bytes) -> bytes:
    return hmac.digest(key, _HOST_PROOF + _transcript(cookie, host_nonce, viewer_nonce), "sha256")


def check_proof(expected: bytes, got: bytes) -> bool:
    """Constant-time: how many bytes matched is not told by how long the comparison took."""
    return hmac.compare_digest(expected, got)


@dataclass(frozen=True, slots=True)
class SessionKeys:
    host_to_viewer: bytes
    viewer_to_host: bytes


def session_keys(key: bytes, cookie: int, host_nonce: bytes, viewer_nonce: bytes) -> SessionKeys:
    """One AES-256-GCM key per direction, fresh for every connection."""
    okm = HKDF(
        algorithm=hashes.SHA256(),
        length=2 * KEY_BYTES,
        salt=host_nonce + viewer_nonce,
        info=_KEYS + struct.pack("<Q", cookie),
    ).derive(key)
    return SessionKeys(okm[:KEY_BYTES], okm[KEY_BYTES:])


def _nonce(counter: int) -> bytes:
    return b"\x00\x00\x00\x00" + counter.to_bytes(8, "big")


class Sealer:
    """Seals one direction's datagrams: ``counter (u64 LE) ‖ AES-GCM(plaintext) ‖ tag``."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)
        self.counter = 0

    def seal(self, plaintext: bytes, aad: bytes = b"") -> bytes:
        self.counter += 1  # from 1, never reused: 2**64 datagrams is beyond any session
        head = self.counter.to_bytes(COUNTER_BYTES, "little")
        return head + self._aead.encrypt(_nonce(self.counter), plaintext, head + aad)


@dataclass(slots=True)
class ReplayWindow:
    """Which counters were already accepted: everything below the window, and a bitmap within it."""

    size: int = REPLAY_WINDOW
    highest: int = 0
    _seen: int = field(default=0, repr=False)  # bit i: highest - i was accepted

    def check(self, counter: int) -> str | None:
        """Why ``counter`` must be refused (without recording it), or None."""
        if counter <= 0:
            return "bad_counter"
        if counter > self.highest:
            return None
        age = self.highest - counter
        if age >= self.size:
            return "too_old"
        if self._seen >> age & 1:
            return "replayed"
        return None

    def accept(self, counter: int) -> None:
        if counter > self.highest:
            shift = counter - self.highest
            self._seen = ((self._seen << shift) | 1) & ((1 << self.size) - 1) if shift < self.size else 1
            self.highest = counter
        else:
            self._seen |= 1 << (self.highest - counter)


class Opener:
    """Opens the other direction's sealed datagrams; raises :class:`AuthError` saying why it refused."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)
        self.window = ReplayWindow()

    def open(self, data: bytes, aad: bytes = b"") -> bytes:
        if len(data) < SEAL_OVERHEAD:
            raise AuthError("sealed_truncated")
        head = bytes(data[:COUNTER_BYTES])
        counter = int.from_bytes(head, "little")
        why = self.window.check(counter)
        if why is not None:
            raise AuthError(why)
        try:
            plaintext = self._aead.decrypt(_nonce(counter), bytes(data[COUNTER_BYTES:]), head + aad)
        except InvalidTag:
            raise AuthError("sealed_forged") from None
        self.window.accept(counter)  # only once it is known genuine: forgeries cannot move the window
        return plaintext


@dataclass(slots=True)
class FailureLimiter:
    """Failed authentications per address: ``max_failures`` within ``window_s``, then ``block_s`` of refusals."""

    max_failures: int = 5
    window_s: float = 60.0
    block_s: float = 60.0
    _failures: dict[str, list[float]] = field(default_factory=dict)
    _blocked_until: dict[str, float] = field(default_factory=dict)
    #: Addresses remembered at most; the oldest are forgotten first (a flood of addresses cannot grow memory).
    max_addresses: int = 4096

    def blocked(self, address: str, now: float) -> bool:
        until = self._blocked_until.get(address)
        if until is None:
            return False
        if now >= until:
            del self._blocked_until[address]
            return False
        return True

    def failed(self, address: str, now: float) -> bool:
        """Record a failure; returns whether the address is now blocked."""
        recent = [t for t in self._failures.get(address, []) if now - t < self.window_s]
        recent.append(now)
        self._failures.pop(address, None)
        self._failures[address] = recent
        while len(self._failures) > self.max_addresses:
            del self._failures[next(iter(self._failures))]
        if len(recent) >= self.max_failures:
            self._blocked_until[address] = now + self.block_s
            self._failures.pop(address, None)
            while len(self._blocked_until) > self.max_addresses:
                del self._blocked_until[next(iter(self._blocked_until))]
            return True
        return False

    def succeeded(self, address: str) -> None:
        self._failures.pop(address, None)
