"""Authentication and sealing for the AUTH and ENCRYPTION extensions (protocol.md §7.7); pure.

Two ways in. With the password or pairing code (``CODE``), host and viewer run
SPAKE2 (the ``spake2`` package, as magic-wormhole does): each sees only the
other's blinded message, so an impostor on either side gets one online guess
per connection and nothing it could test guesses against offline.  A viewer
that paired once (``PAIRED``) holds a 32-byte credential the host also stored;
the two mix it with a fresh X25519 exchange, so a credential that leaks later
does not open recorded sessions.

Either way the key material goes through HKDF with the hash of the whole
negotiation (both EXTENSIONS, the cookie, the challenge and the response, in
order, with the roles), so a bit changed on the path gives the two sides
different keys and the proofs fail.  From those keys: a proof per role, one
AES-256-GCM key per direction for datagrams and one per direction for the
control channel's records, and (when pairing) the new credential.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import secrets
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

NONCE_BYTES = 32
ID_BYTES = 16
PROOF_BYTES = 32
KEY_BYTES = 32
SHARE_BYTES = 32
TAG_BYTES = 16
COUNTER_BYTES = 8
#: What sealing adds to a datagram: its counter and the GCM tag.
SEAL_OVERHEAD = COUNTER_BYTES + TAG_BYTES
#: A sealed control record: its length (u16 LE), then the sealed message with its tag.
RECORD_HEAD = struct.Struct("<H")
REPLAY_WINDOW = 4096

#: SPAKE2's two roles: the viewer is side A, the host side B, so neither's message can be reflected as the other's.
VIEWER_IDENTITY = b"pyrofling viewer"
HOST_IDENTITY = b"pyrofling host"
_TRANSCRIPT = b"pyrofling v2 handshake"
_KEYS = b"pyrofling v2 keys"
_PAIRING = b"pyrofling v2 pairing credential"
_HOST_ID = b"pyrofling host id"
_HOST_SIGNATURE = b"pyrofling host signature"
HOST_KEY_BYTES = 32
SIGNATURE_BYTES = 64


PAIRING_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"  # no 0/o, 1/l/i: read aloud, typed by a friend


def pairing_code(random_below: Callable[[int], int] = secrets.randbelow) -> str:
    """Three groups of four, about 59 bits: far beyond online guessing at a few tries a minute."""
    chars = [PAIRING_ALPHABET[random_below(len(PAIRING_ALPHABET))] for _ in range(12)]
    return "-".join("".join(chars[i : i + 4]) for i in range(0, 12, 4))


class AuthError(Exception):
    """A proof, a key exchange or a sealed message did not check out; the text is the reason counted."""


class Transcript:
    """SHA-256 over every handshake message in the order it crossed the wire, each with its length."""

    def __init__(self, *messages: bytes) -> None:
        self._hash = hashlib.sha256(_TRANSCRIPT)
        for message in messages:
            self.add(message)

    def add(self, message: bytes) -> None:
        self._hash.update(struct.pack("<H", len(message)) + message)

    def digest(self) -> bytes:
        return self._hash.copy().digest()


class CodeExchange:
    """One side's SPAKE2 run with the password or pairing code (a new one per connection)."""

    def __init__(self, secret: str, *, host: bool) -> None:
        if not secret:
            raise ValueError("the secret is empty")
        # Loaded here: its group tables cost every host and viewer ~30 ms at start, most never pair or use a password.
        from spake2 import SPAKE2_A, SPAKE2_B  # type: ignore[import-untyped]

        side = SPAKE2_B if host else SPAKE2_A
        self._spake = side(secret.encode(), idA=VIEWER_IDENTITY, idB=HOST_IDENTITY)
        self.message: bytes = self._spake.start()

    def finish(self, their_message: bytes) -> bytes:
        """The shared key material; the same on both sides only when both used the same secret."""
        try:
            key: bytes = self._spake.finish(bytes(their_message))
        except Exception as exc:  # spake2 raises its own errors and ValueError for points off the group
            raise AuthError("pake_invalid") from exc
        return key


class ShareExchange:
    """A fresh X25519 key pair for a PAIRED handshake."""

    def __init__(self) -> None:
        self._private = X25519PrivateKey.generate()
        self.public: bytes = self._private.public_key().public_bytes_raw()

    def finish(self, their_public: bytes) -> bytes:
        try:
            return self._private.exchange(X25519PublicKey.from_public_bytes(bytes(their_public[:SHARE_BYTES])))
        except ValueError as exc:  # a low-order point: the result would be all zeros
            raise AuthError("share_invalid") from exc


def host_id_of(host_key: bytes) -> bytes:
    """A host's id is the hash of its public identity key: claiming an id means holding that key."""
    return hashlib.sha256(_HOST_ID + bytes(host_key)).digest()[:ID_BYTES]


class HostIdentity:
    """A host's lasting Ed25519 identity: its id, and a signature over each handshake it accepts, which no
    one else (a rogue host reusing the id it sends in the clear) can make."""

    def __init__(self, private: bytes | None = None) -> None:
        key = Ed25519PrivateKey.from_private_bytes(private) if private else Ed25519PrivateKey.generate()
        self._private = key
        self.public: bytes = key.public_key().public_bytes_raw()
        self.host_id = host_id_of(self.public)

    def private_bytes(self) -> bytes:
        """The raw 32-byte private key, for the host's pairing file (0600) only."""
        return self._private.private_bytes_raw()

    def sign(self, transcript: bytes, viewer_proof: bytes) -> bytes:
        return self._private.sign(_HOST_SIGNATURE + transcript + viewer_proof)


def check_host_signature(host_key: bytes, transcript: bytes, viewer_proof: bytes, signature: bytes) -> bool:
    """Whether the holder of ``host_key`` signed this handshake (a viewer checks it before trusting a host id)."""
    try:
        Ed25519PublicKey.from_public_bytes(bytes(host_key)).verify(
            bytes(signature), _HOST_SIGNATURE + transcript + viewer_proof
        )
    except (InvalidSignature, ValueError):
        return False
    return True


@dataclass(frozen=True, slots=True)
class HandshakeKeys:
    """Everything one handshake yields; each key for one purpose and one direction."""

    viewer_proof: bytes
    host_proof: bytes
    datagram_host_to_viewer: bytes
    datagram_viewer_to_host: bytes
    control_host_to_viewer: bytes
    control_viewer_to_host: bytes
    #: The credential both sides store when the viewer asked to pair.
    pairing: bytes = field(repr=False, default=b"")


def handshake_keys(material: bytes, transcript: bytes, method: int) -> HandshakeKeys:
    """HKDF over the exchange's key material, salted with the transcript hash: a changed byte, other keys."""
    okm = HKDF(algorithm=hashes.SHA256(), length=7 * KEY_BYTES, salt=transcript, info=_KEYS + bytes([method])).derive(
        material
    )
    k = [okm[i : i + KEY_BYTES] for i in range(0, len(okm), KEY_BYTES)]
    return HandshakeKeys(k[0], k[1], k[2], k[3], k[4], k[5], pairing=k[6])


def prove(key: bytes, transcript: bytes, extra: bytes = b"") -> bytes:
    return hmac.digest(key, transcript + extra, "sha256")


def check_proof(expected: bytes, got: bytes) -> bool:
    """Constant-time: how many bytes matched is not told by how long the comparison took."""
    return hmac.compare_digest(expected, got)


def paired_material(credential: bytes, shared: bytes) -> bytes:
    """PAIRED: the stored credential and the fresh X25519 secret; neither alone gives the keys."""
    return credential + shared


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


class ControlSealer:
    """Seals one direction of the control channel: ``length (u16 LE) ‖ AES-GCM(message) ‖ tag`` per record.

    TCP delivers records in order, so the counter is implicit: both sides count from 0 and a record dropped,
    repeated or moved on the path fails to open."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)
        self.counter = 0

    def seal(self, message: bytes) -> bytes:
        head = RECORD_HEAD.pack(len(message) + TAG_BYTES)
        record = head + self._aead.encrypt(_nonce(self.counter), message, head)
        self.counter += 1
        return record


class ControlOpener:
    """Opens the other direction's control records as they arrive, in order; raises :class:`AuthError`."""

    #: A record holds one message (at most 263 bytes) and its tag.
    MAX_RECORD_BYTES = 8 + 255 + TAG_BYTES

    def __init__(self, key: bytes, buffered: bytes = b"") -> None:
        self._aead = AESGCM(key)
        self.counter = 0
        self._buf = bytearray(buffered)

    def feed(self, data: bytes) -> None:
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def next(self) -> bytes | None:
        """The next whole record's message, or None until more bytes arrive."""
        buf = self._buf
        if len(buf) < RECORD_HEAD.size:
            return None
        (n,) = RECORD_HEAD.unpack_from(buf)
        if not TAG_BYTES < n <= self.MAX_RECORD_BYTES:
            raise AuthError("control_record_length")
        if len(buf) < RECORD_HEAD.size + n:
            return None
        head, body = bytes(buf[: RECORD_HEAD.size]), bytes(buf[RECORD_HEAD.size : RECORD_HEAD.size + n])
        del buf[: RECORD_HEAD.size + n]
        try:
            message = self._aead.decrypt(_nonce(self.counter), body, head)
        except InvalidTag:
            raise AuthError("control_forged") from None
        self.counter += 1
        return message


@functools.lru_cache(maxsize=4096)  # asked at every connection: a flood from a few addresses asks again and again
def limiter_key(address: str) -> str:
    """Whom a failure counts against: an IPv4 address, or an IPv6 /64 (one subscriber's whole prefix)."""
    ip = plain_ip(address)
    if ":" not in ip:
        return ip
    try:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    except ValueError:  # not an address at all
        return ip


def plain_ip(host: object) -> str:
    """An address as one spelling: an IPv4-mapped IPv6 address is its IPv4 one, zone ids dropped (a name that is
    no address stays as it is)."""
    text = str(host).split("%")[0]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return text
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


@dataclass(slots=True)
class FailureLimiter:
    """Wrong secrets, per address (IPv6: per /64) and in total.

    ``max_failures`` within ``window_s`` block an address for ``block_s``; ``global_max_failures`` within
    ``window_s`` from anywhere block every CODE attempt for ``global_block_s``, doubling (to
    ``max_global_block_s``) while the attack goes on.  A blocked address is never forgotten before its time is
    up: when the table is full of them, everyone is blocked instead.
    """

    max_failures: int = 5
    window_s: float = 60.0
    block_s: float = 60.0
    global_max_failures: int = 30
    global_block_s: float = 30.0
    max_global_block_s: float = 900.0
    #: Prefixes remembered at most (a flood of addresses cannot grow memory).
    max_addresses: int = 4096
    _failures: dict[str, list[float]] = field(default_factory=dict)
    _blocked_until: dict[str, float] = field(default_factory=dict)
    _recent: list[float] = field(default_factory=list)
    _global_until: float = float("-inf")
    _next_global_s: float = 0.0

    def blocked_for(self, address: str, now: float) -> float:
        """Seconds until ``address`` may try again (0: it may now)."""
        until = max(self._blocked_until.get(limiter_key(address), now), self._global_until)
        return max(0.0, until - now)

    def blocked(self, address: str, now: float) -> bool:
        return self.blocked_for(address, now) > 0

    def failed(self, address: str, now: float) -> float:
        """Record a wrong secret; returns how long the address is now blocked (0: not)."""
        key = limiter_key(address)
        recent = [t for t in self._failures.pop(key, []) if now - t < self.window_s]
        recent.append(now)
        self._failures[key] = recent
        while len(self._failures) > self.max_addresses:
            del self._failures[next(iter(self._failures))]
        self._recent = [t for t in self._recent if now - t < self.window_s] + [now]
        if len(self._recent) >= self.global_max_failures:
            self._block_everyone(now)
        if len(recent) >= self.max_failures:
            self._failures.pop(key, None)
            self._blocked_until = {k: t for k, t in self._blocked_until.items() if t > now}
            if len(self._blocked_until) >= self.max_addresses:
                self._block_everyone(now)
            else:
                self._blocked_until[key] = now + self.block_s
        return self.blocked_for(address, now)

    def _block_everyone(self, now: float) -> None:
        calm = now - self._global_until > self.max_global_block_s
        block = self.global_block_s if calm or not self._next_global_s else self._next_global_s
        self._global_until = now + block
        self._next_global_s = min(self.max_global_block_s, 2 * block)
        self._recent.clear()

    def succeeded(self, address: str) -> None:
        self._failures.pop(limiter_key(address), None)
