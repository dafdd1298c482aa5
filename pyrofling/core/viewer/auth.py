"""The viewer's side of AUTH and ENCRYPTION (protocol.md §7.7): which way in, the response, the host's proof.

Pure.  :class:`~pyrofling.core.viewer.session.ViewerSession` starts it when the
host grants both bits, hands it AUTH_CHALLENGE and AUTH_RESULT, and installs the
keys it returns; :class:`AuthFailed` says, in words, why not.  The transcript is
the same the host keeps (:mod:`pyrofling.core.host.auth`): what either side saw
differently gives other keys, and the proofs fail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pyrofling.core.secure import (
    ID_BYTES,
    NONCE_BYTES,
    AuthError,
    CodeExchange,
    HandshakeKeys,
    ShareExchange,
    Transcript,
    check_host_signature,
    check_proof,
    handshake_keys,
    host_id_of,
    paired_material,
    prove,
)
from pyrofling.wire import (
    AUTH_FLAG_PAIR,
    AuthChallenge,
    AuthMethod,
    AuthResponse,
    AuthResult,
    AuthStatus,
    Cookie,
    Extensions,
)


@dataclass(frozen=True, slots=True)
class HostCredential:
    """What a viewer keeps after pairing with a host (protocol.md §7.7)."""

    host_id: bytes
    viewer_id: bytes
    credential: bytes = field(repr=False)


class AuthFailed(Exception):
    """The handshake cannot go on; ``str()`` is the reason for the person at the viewer."""

    def __init__(self, reason: str, retry_after_s: float = 0.0) -> None:
        super().__init__(reason)
        #: The host said it blocks this address for this long (unauthenticated: maybe forged).
        self.retry_after_s = retry_after_s


class ViewerAuth:
    """One connection's handshake, from the host's EXTENSIONS to its AUTH_RESULT."""

    def __init__(
        self,
        offer: Extensions,
        cookie: int,
        grant: Extensions,
        *,
        secret: str | None,
        credentials: tuple[HostCredential, ...],
        pair_as: str | None,
        random_bytes: Callable[[int], bytes],
        expected_host_id: bytes | None = None,
    ) -> None:
        self._secret, self._credentials, self._pair_as = secret, credentials, pair_as
        #: The host this viewer paired with at this address: no other is accepted here.
        self._expected = expected_host_id
        self._host_key = b""
        self._random_bytes = random_bytes
        self._transcript = Transcript(bytes(offer), bytes(Cookie(cookie)), bytes(grant))
        self._pending: tuple[HandshakeKeys, bytes, bytes, HostCredential | None] | None = None
        #: "code" or "paired", once it has answered the challenge.
        self.method = ""

    @property
    def answered(self) -> bool:
        return self._pending is not None

    def respond(self, challenge: AuthChallenge) -> AuthResponse:
        """The answer to the host's challenge, with this viewer's proof."""
        self._transcript.add(bytes(challenge))
        if host_id_of(challenge.host_key) != challenge.host_id:
            raise AuthFailed("the host's id is not its key's: an impostor, or changed on the path")
        if self._expected is not None and challenge.host_id != self._expected and self._pair_as is None:
            raise AuthFailed(
                f"the host at this address is not the one this viewer paired with here (it is "
                f"{challenge.host_id.hex()[:8]}, the pairing is with {self._expected.hex()[:8]}): someone else "
                "answers at this address, or that host was set up anew (then pair again: pyrofling pair)"
            )
        self._host_key = bytes(challenge.host_key)
        paired = next((c for c in self._credentials if c.host_id == challenge.host_id), None)
        takes_code = bool(challenge.methods & 1 << AuthMethod.CODE)
        flags, name, viewer_id = 0, bytes(32), bytes(ID_BYTES)
        try:
            if paired is not None and self._pair_as is None and challenge.methods & 1 << AuthMethod.PAIRED:
                method, share = AuthMethod.PAIRED, ShareExchange()
                viewer_id, message = paired.viewer_id, share.public + b"\0"
                material = paired_material(paired.credential, share.finish(challenge.host_share))
            elif self._secret and takes_code:
                method, code = AuthMethod.CODE, CodeExchange(self._secret, host=False)
                message = code.message
                if self._pair_as is not None:
                    flags, viewer_id = AUTH_FLAG_PAIR, self._random_bytes(ID_BYTES)
                    name = self._pair_as.encode()[:32].ljust(32, b"\0")
                material = code.finish(challenge.pake_message)
            elif not takes_code:
                raise AuthFailed(
                    "this host admits paired viewers only, and this viewer has not paired with it: ask its owner "
                    "for a pairing code (pyrofling host --pairing-code) and run pyrofling pair"
                )
            else:
                raise AuthFailed(
                    "this host needs a password or pairing code: pyrofling view … --password CODE, or pair once "
                    "with pyrofling pair"
                )
        except AuthError as exc:
            raise AuthFailed(f"the host's key exchange is unusable ({exc}): not the host you meant?") from None
        nonce = self._random_bytes(NONCE_BYTES)
        unproved = AuthResponse(int(method), flags, viewer_id, nonce, message, name, bytes(32))
        self._transcript.add(unproved.unproved())
        digest = self._transcript.digest()
        keys = handshake_keys(material, digest, method)
        proof = prove(keys.viewer_proof, digest)
        credential = HostCredential(challenge.host_id, viewer_id, keys.pairing) if flags & AUTH_FLAG_PAIR else None
        self._pending = (keys, digest, proof, credential)
        self.method = method.name.lower()
        return AuthResponse(int(method), flags, viewer_id, nonce, message, name, proof)

    def result(self, msg: AuthResult) -> tuple[HandshakeKeys, HostCredential | None]:
        """The keys once the host has proved the same transcript, and the credential to keep when pairing."""
        assert self._pending is not None
        keys, digest, proof, credential = self._pending
        self._pending = None
        if msg.status == AuthStatus.BLOCKED:
            wait = msg.retry_after_ms / 1000
            raise AuthFailed(f"the host blocks this address for {wait:.0f} s after repeated wrong codes", wait)
        if msg.status != AuthStatus.ACCEPTED:
            if self.method == "paired":
                raise AuthFailed(
                    "the host no longer knows this viewer's pairing (revoked?): pair again with pyrofling pair"
                )
            raise AuthFailed(
                "the host refused the code: check the password, or ask for the pairing code the host shows now "
                "(each works once, within 10 minutes)"
            )
        if not check_proof(prove(keys.host_proof, digest, proof), msg.proof):
            raise AuthFailed("the host could not prove the handshake: an impostor, or changed on the path")
        if not check_host_signature(self._host_key, digest, proof, msg.signature):
            raise AuthFailed("the host could not prove it holds its identity key: an impostor using its id")
        return keys, credential
