"""The host's side of AUTH and ENCRYPTION (protocol.md §7.7): the challenge, the proofs, the keys, refusals.

Pure.  :class:`~pyrofling.core.host_session.HostSessions` hands it the EXTENSIONS
and AUTH_RESPONSE messages of a connection and what an unauthenticated one
sends; it answers with outputs and fills in the connection's keys.  Without a
secret (``auth_key`` None) it offers nothing, as the reference.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from pyrofling.core.host_state import CloseConnection, HostOutput, HostSessionConfig, LogLine, RemoteViewer, SendControl
from pyrofling.core.secure import (
    NONCE_BYTES,
    PROOF_BYTES,
    FailureLimiter,
    Opener,
    Sealer,
    check_proof,
    host_proof,
    session_keys,
    viewer_proof,
)
from pyrofling.wire import (
    EXTENSIONS_VERSION,
    AuthChallenge,
    AuthResponse,
    AuthResult,
    ControlMessage,
    ExtensionFeature,
    Extensions,
    Kick,
    Nak,
    UnknownControl,
)


class HostAuth:
    """One host's authentication; ``discarded`` is the sessions' counter of what was refused, by reason."""

    def __init__(
        self,
        config: HostSessionConfig,
        discarded: Counter[str],
        *,
        random_bytes: Callable[[int], bytes],
        limiter: FailureLimiter | None = None,
    ) -> None:
        self.config = config
        self.discarded = discarded
        self._random_bytes = random_bytes
        #: Failed authentications per address.
        self.limiter = limiter or FailureLimiter()
        self.failures = 0
        self.successes = 0

    @property
    def required(self) -> bool:
        return self.config.auth_key is not None

    def negotiate(self, conn: RemoteViewer, msg: Extensions) -> list[HostOutput]:
        offered = self.config.extensions
        if self.required:
            offered |= ExtensionFeature.AUTH
            if self.config.encrypt:
                offered |= ExtensionFeature.ENCRYPTION
        granted = msg.feature_flags & offered
        if not granted & ExtensionFeature.AUTH:
            granted &= ~ExtensionFeature.ENCRYPTION  # keys come from the authentication
        conn.extensions = granted
        out: list[HostOutput] = [SendControl(conn.conn_id, bytes(Extensions(EXTENSIONS_VERSION, int(granted))))]
        if granted & ExtensionFeature.AUTH:
            conn.host_nonce = self._random_bytes(NONCE_BYTES)
            challenge = AuthChallenge(
                self.config.auth_salt,
                conn.host_nonce,
                self.config.scrypt_log2_n,
                1 if granted & ExtensionFeature.ENCRYPTION else 0,
            )
            out.append(SendControl(conn.conn_id, bytes(challenge)))
        return out

    def respond(self, conn: RemoteViewer, msg: AuthResponse, now: float) -> list[HostOutput]:
        key = self.config.auth_key
        if key is None or conn.host_nonce is None or conn.authenticated:
            self.discarded["unexpected_auth"] += 1
            return [SendControl(conn.conn_id, bytes(Nak()))]
        address = str(conn.peer[0])
        refused = bytes(AuthResult(0, bytes(PROOF_BYTES)))
        if self.limiter.blocked(address, now):
            self.discarded["auth_blocked"] += 1
            return [
                SendControl(conn.conn_id, refused),
                CloseConnection(conn.conn_id, f"{address} is blocked after repeated wrong secrets"),
            ]
        nonce = conn.host_nonce
        conn.host_nonce = None  # one response per challenge
        if not check_proof(viewer_proof(key, conn.cookie, nonce, msg.viewer_nonce), msg.proof):
            self.failures += 1
            blocked = self.limiter.failed(address, now)
            note = f"; {address} blocked for {self.limiter.block_s:g} s" if blocked else ""
            return [
                SendControl(conn.conn_id, refused),
                LogLine(conn.conn_id, f"{conn.label}: wrong secret{note}"),
                CloseConnection(conn.conn_id, "authentication failed"),
            ]
        self.limiter.succeeded(address)
        self.successes += 1
        conn.authenticated = True
        encrypted = bool(conn.extensions & ExtensionFeature.ENCRYPTION)
        if encrypted:
            keys = session_keys(key, conn.cookie, nonce, msg.viewer_nonce)
            conn.sealer, conn.opener = Sealer(keys.host_to_viewer), Opener(keys.viewer_to_host)
        proof = host_proof(key, conn.cookie, nonce, msg.viewer_nonce)
        return [
            SendControl(conn.conn_id, bytes(AuthResult(1, proof))),
            LogLine(conn.conn_id, f"{conn.label} authenticated" + (", datagrams sealed" if encrypted else "")),
        ]

    def refuse(self, conn: RemoteViewer, msg: ControlMessage | UnknownControl) -> list[HostOutput]:
        """This host has a secret and this connection has not proved it knows it: NAK, no media, no pad."""
        self.discarded["unauthenticated_control"] += 1
        out: list[HostOutput] = [SendControl(conn.conn_id, bytes(Nak()))]
        if isinstance(msg, Kick) and not conn.refusal_logged:
            conn.refusal_logged = True
            if conn.extensions & ExtensionFeature.AUTH:
                why = "it has not authenticated"
            else:
                why = (
                    "this host needs a password and the viewer cannot authenticate (a native PyroFling viewer, "
                    "or an old pyrofling); run the host without --password only on a trusted network"
                )
            out.append(LogLine(conn.conn_id, f"refused {conn.label}: {why}"))
        return out
