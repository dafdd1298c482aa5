"""The host's side of AUTH and ENCRYPTION (protocol.md §7.7): the challenge, the proofs, the keys, refusals.

Pure.  :class:`~pyrofling.core.host.sessions.HostSessions` hands it the EXTENSIONS
and AUTH_RESPONSE messages of a connection and what an unauthenticated one
sends; it answers with outputs and installs the connection's keys.  A host with
no code that is not private offers nothing, as the reference.

Each handshake binds everything said so far into its keys (the transcript), so a
negotiation bit changed on the path fails the proofs.  A wrong code counts
against the address's prefix and against a global budget
(:class:`~pyrofling.core.secure.FailureLimiter`); a paired viewer's credential
cannot be guessed, so a blocked address does not lock a paired friend out.
"""

from __future__ import annotations

import hmac
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from pyrofling.core.host.admission import ChallengeBudget
from pyrofling.core.host.state import (
    CloseConnection,
    Compute,
    HostHandshake,
    HostOutput,
    HostSessionConfig,
    LogLine,
    PairingCodeSpent,
    RemoteViewer,
    ViewerPaired,
)
from pyrofling.core.secure import (
    NONCE_BYTES,
    PROOF_BYTES,
    AuthError,
    CodeExchange,
    FailureLimiter,
    Opener,
    Sealer,
    ShareExchange,
    Transcript,
    check_proof,
    handshake_keys,
    paired_material,
    prove,
)
from pyrofling.wire import (
    AUTH_FLAG_PAIR,
    EXTENSIONS_VERSION,
    PAKE_MESSAGE_BYTES,
    AuthChallenge,
    AuthMethod,
    AuthResponse,
    AuthResult,
    AuthStatus,
    ControlMessage,
    Cookie,
    ExtensionFeature,
    Extensions,
    Kick,
    Nak,
    UnknownControl,
)

#: Granted together or not at all: a host with a secret never streams in the clear.
SEALED = ExtensionFeature.AUTH | ExtensionFeature.ENCRYPTION


@dataclass(frozen=True, slots=True)
class PairedViewer:
    name: str
    credential: bytes


class PairedViewers(Protocol):
    """The viewers this host has paired with (the shell's store; revoking one takes effect at its next try)."""

    def lookup(self, viewer_id: bytes) -> PairedViewer | None: ...


class NoPairedViewers:
    def lookup(self, viewer_id: bytes) -> PairedViewer | None:
        return None


def printable_name(raw: bytes) -> str:
    """A viewer's name as a log line may show it: UTF-8, no control characters, at most 32 bytes."""
    text = raw.rstrip(b"\0").decode("utf-8", "replace")
    return "".join(c for c in text if c.isprintable()) or "unnamed"


class HostAuth:
    """One host's authentication; ``discarded`` is the sessions' counter of what was refused, by reason."""

    def __init__(
        self,
        config: HostSessionConfig,
        discarded: Counter[str],
        *,
        random_bytes: Callable[[int], bytes],
        limiter: FailureLimiter | None = None,
        paired: PairedViewers | None = None,
        budget: ChallengeBudget | None = None,
    ) -> None:
        self.config = config
        self.discarded = discarded
        self._random_bytes = random_bytes
        #: Wrong codes per address prefix and in total.
        self.limiter = limiter or FailureLimiter()
        #: Challenges (the one expensive step before authentication) per address prefix and in total.
        self.budget = budget or ChallengeBudget()
        self._decoy: bytes | None = None
        self.paired = paired or NoPairedViewers()
        self.failures = 0
        self.successes = 0
        self.pairings = 0
        #: The code a CODE answer must prove now: the password, or the live one-time pairing code (None: used or
        #: expired, until the shell issues the next); its serial counts the codes issued.
        self.code = config.auth_secret
        self.code_serial = 0
        self._code_expires_at: float | None = None  # a one-time code's clock starts at its first sight of time

    def issue_code(self, code: str, now: float) -> None:
        """The next one-time pairing code (after :class:`PairingCodeSpent`), good for ``code_lifetime_s``."""
        self.code, self.code_serial = code, self.code_serial + 1
        self._code_expires_at = now + self.config.code_lifetime_s

    def _live_code(self, now: float) -> tuple[str | None, list[HostOutput]]:
        """The code a challenge made now takes, and a :class:`PairingCodeSpent` when a one-time code ran out."""
        if not self.config.one_time_code or self.code is None:
            return self.code, []
        if self._code_expires_at is None:
            self._code_expires_at = now + self.config.code_lifetime_s
        if now < self._code_expires_at:
            return self.code, []
        self._spend()
        return None, [PairingCodeSpent(f"it was not used within {self.config.code_lifetime_s / 60:g} minutes")]

    def _spend(self) -> None:
        self.code, self.code_serial = None, self.code_serial + 1

    def take_typed_code(self, code: str, who: str, now: float) -> tuple[bool, list[PairingCodeSpent]]:
        """The one-time pairing code typed into a browser's page (it came inside TLS, or on this machine's own
        loopback): True if it is the live one, which it then spends as a viewer's pairing does (a viewer's
        handshake under way with it fails).  The caller counts a wrong one against the address."""
        if not self.config.one_time_code:
            return False, []
        live, expired = self._live_code(now)
        out = [o for o in expired if isinstance(o, PairingCodeSpent)]
        if live is None or not hmac.compare_digest(code.encode(), live.encode()):
            return False, out
        self._spend()
        return True, [*out, PairingCodeSpent(f"{who} used it")]

    @property
    def required(self) -> bool:
        return self.config.auth_secret is not None or self.config.private

    def negotiate(self, conn: RemoteViewer, msg: Extensions, now: float) -> list[HostOutput]:
        """EXTENSIONS, once per connection: the grant, and the challenge when AUTH is granted — if the budget
        for challenges allows one now (else a "busy" AUTH_RESULT). An address blocked after wrong codes gets a
        challenge that takes paired viewers only: no PAKE is run for it."""
        if conn.negotiated:
            self.discarded["extensions_repeated"] += 1
            return [CloseConnection(conn.conn_id, "EXTENSIONS sent twice (one negotiation per connection)")]
        conn.negotiated = True
        offered = self.config.extensions | (SEALED if self.required else ExtensionFeature.NONE)
        granted = msg.feature_flags & offered
        if granted & SEALED != SEALED:
            granted &= ~SEALED  # not both: not at all (a host that requires them then refuses the viewer)
        if not granted & ExtensionFeature.AUTH and not self.config.open_keyboard_mouse:
            granted &= ~ExtensionFeature.KEYBOARD_MOUSE  # keys only from a viewer that will have authenticated
        conn.extensions = granted
        reply = Extensions(EXTENSIONS_VERSION, int(granted))
        out: list[HostOutput] = [conn.send(reply)]
        if not granted & ExtensionFeature.AUTH:
            return out
        address = str(conn.peer[0])
        wait = self.budget.take(address, now)
        if wait > 0:
            self.discarded["challenge_budget"] += 1
            return out + self._busy(conn, wait)
        transcript = Transcript(bytes(msg), bytes(Cookie(conn.cookie)), bytes(reply))
        secret, spent = self._live_code(now)
        out += spent
        if secret is None or self.limiter.blocked(address, now):
            return out + self._challenge(conn, transcript, None)
        code_secret = secret
        return out + self._compute(
            conn,
            partial(CodeExchange, code_secret, host=True),
            lambda code, _now: self._challenge(conn, transcript, code),
            now,
        )

    def _compute(
        self,
        conn: RemoteViewer,
        work: Callable[[], Any],
        then: Callable[[Any, float], list[HostOutput]],
        now: float,
    ) -> list[HostOutput]:
        """A PAKE step: at once, or handed to the shell to run off its loop (``crypto_off_loop``); what follows
        it is dropped if the connection closed meanwhile."""
        if not self.config.crypto_off_loop:
            return then(work(), now)
        return [Compute(work, lambda result, later: [] if conn.closed else then(result, later))]

    def _challenge(self, conn: RemoteViewer, transcript: Transcript, code: CodeExchange | None) -> list[HostOutput]:
        takes_code = self.config.auth_secret is not None
        pake_message = bytes(PAKE_MESSAGE_BYTES)
        if code is not None:
            pake_message = code.message
        elif takes_code:  # blocked, or the one-time code is spent: a CODE answer is told why; no PAKE runs
            pake_message = self._decoy_message()
        share = ShareExchange()
        methods = 1 << AuthMethod.PAIRED | (1 << AuthMethod.CODE if takes_code else 0)
        identity = self.config.identity
        challenge = AuthChallenge(
            identity.host_id,
            self._random_bytes(NONCE_BYTES),
            pake_message,
            share.public,
            methods,
            identity.public,
        )
        transcript.add(bytes(challenge))
        conn.handshake = HostHandshake(transcript, share, code, self.code_serial)
        return [conn.send(challenge)]

    def respond(self, conn: RemoteViewer, msg: AuthResponse, now: float) -> list[HostOutput]:
        hs = conn.handshake
        if hs is None or conn.authenticated:
            self.discarded["unexpected_auth"] += 1
            return [conn.send(Nak())]
        conn.handshake = None  # one response per challenge
        address = str(conn.peer[0])
        hs.transcript.add(msg.unproved())
        transcript = hs.transcript.digest()
        name = ""
        try:
            if msg.method == AuthMethod.CODE:
                wait = self.limiter.blocked_for(address, now)
                if wait > 0 and self.config.auth_secret is not None:
                    self.discarded["auth_blocked"] += 1
                    return self._blocked(conn, wait, f"{address} is blocked after repeated wrong codes")
                if self.config.one_time_code and (hs.code is None or hs.code_serial != self.code_serial):
                    return self._refuse(conn, "the pairing code was used or ran out: the host shows a new one")
                if hs.code is None and self.config.auth_secret is not None:  # the block ended meanwhile
                    return self._blocked(conn, 1.0, f"{address} was blocked when it was challenged")
                if hs.code is None:
                    return self._refuse(conn, "asked to use a code; this host takes paired viewers only")
                code, viewer_message, serial = hs.code, msg.viewer_message, hs.code_serial
                return self._compute(
                    conn,
                    partial(finish_code, code, viewer_message),
                    lambda material, later: self._check(conn, msg, transcript, material, "", address, later, serial),
                    now,
                )
            else:
                entry = self.paired.lookup(msg.viewer_id)
                if entry is None:
                    self.discarded["auth_unknown_pairing"] += 1
                    return self._refuse(
                        conn, f"unknown pairing {msg.viewer_id.hex()[:8]} (revoked, or paired elsewhere)"
                    )
                name = entry.name
                material = paired_material(entry.credential, hs.share.finish(msg.viewer_message))
        except AuthError as exc:
            self.discarded[str(exc)] += 1
            material = b""
        return self._check(conn, msg, transcript, material, name, address, now)

    def _check(
        self,
        conn: RemoteViewer,
        msg: AuthResponse,
        transcript: bytes,
        material: bytes | str,
        name: str,
        address: str,
        now: float,
        code_serial: int | None = None,
    ) -> list[HostOutput]:
        """The viewer's proof against the keys ``material`` gives: accepted (the keys installed), or refused.
        ``code_serial``: the one-time code the challenge was made with (another viewer may have used it since)."""
        if isinstance(material, str):  # the key exchange failed
            self.discarded[material] += 1
            material = b""
        keys = handshake_keys(material, transcript, msg.method) if material else None
        if keys is None or not check_proof(prove(keys.viewer_proof, transcript), msg.proof):
            return self._wrong(conn, msg, address, now)
        if self.config.one_time_code and code_serial is not None and code_serial != self.code_serial:
            return self._refuse(conn, "the pairing code was used meanwhile: the host shows a new one")
        pairing = msg.method == AuthMethod.CODE and msg.flags & AUTH_FLAG_PAIR
        if pairing and self.paired.lookup(msg.viewer_id) is not None:
            # Ids are random: a taken one is someone (who holds the code) trying to replace another's pairing.
            self.discarded["pairing_id_taken"] += 1
            return self._refuse(conn, f"asked to pair as {msg.viewer_id.hex()[:8]}, a viewer already paired")
        self.limiter.succeeded(address)
        self.successes += 1
        conn.authenticated = True
        conn.auth_method = AuthMethod(msg.method).name.lower()
        signature = self.config.identity.sign(transcript, msg.proof)
        out: list[HostOutput] = [
            conn.send(AuthResult(AuthStatus.ACCEPTED, 0, prove(keys.host_proof, transcript, msg.proof), signature))
        ]
        if msg.method == AuthMethod.CODE and self.config.one_time_code:
            self._spend()
            out.append(PairingCodeSpent(f"{conn.label} used it"))
        # Everything after AUTH_RESULT is sealed, both ways.
        conn.channel.seal_with(keys.control_host_to_viewer)
        conn.channel.open_with(keys.control_viewer_to_host)
        conn.sealer, conn.opener = Sealer(keys.datagram_host_to_viewer), Opener(keys.datagram_viewer_to_host)
        if pairing:
            name = printable_name(msg.name)
            self.pairings += 1
            out.append(ViewerPaired(bytes(msg.viewer_id), name, keys.pairing))
            out.append(
                LogLine(
                    conn.conn_id,
                    f"paired with {name!r} ({msg.viewer_id.hex()[:8]}): it joins without a code from now on",
                )
            )
        conn.paired_name = name
        how = f"paired viewer {name!r}" if msg.method == AuthMethod.PAIRED else "the code"
        out.append(LogLine(conn.conn_id, f"{conn.label} authenticated with {how}; control and datagrams sealed"))
        return out

    def _decoy_message(self) -> bytes:
        """A PAKE message for an address blocked after wrong codes, made once (from a random secret nobody
        knows): its viewer can still answer with CODE, and learn it is blocked, without a PAKE run for it."""
        if self._decoy is None:
            self._decoy = CodeExchange(self._random_bytes(16).hex(), host=True).message
        return self._decoy

    def _wrong(self, conn: RemoteViewer, msg: AuthResponse, address: str, now: float) -> list[HostOutput]:
        self.failures += 1
        if msg.method != AuthMethod.CODE:  # a credential cannot be guessed: no block, which would lock friends out
            return self._refuse(conn, "a paired viewer's proof did not check out")
        blocked = self.limiter.failed(address, now)
        if blocked > 0:
            return self._blocked(conn, blocked, f"{conn.label}: wrong code; {address} blocked for {blocked:.0f} s")
        return self._refuse(conn, "wrong code")

    def _refuse(self, conn: RemoteViewer, why: str) -> list[HostOutput]:
        return [
            conn.send(AuthResult(AuthStatus.REFUSED, 0, bytes(PROOF_BYTES))),
            LogLine(conn.conn_id, f"refused {conn.label}: {why}"),
            CloseConnection(conn.conn_id, "authentication failed"),
        ]

    def _blocked(self, conn: RemoteViewer, wait_s: float, why: str) -> list[HostOutput]:
        return [
            conn.send(AuthResult(AuthStatus.BLOCKED, _retry_ms(wait_s), bytes(PROOF_BYTES))),
            LogLine(conn.conn_id, why),
            CloseConnection(conn.conn_id, "blocked after repeated wrong codes"),
        ]

    def _busy(self, conn: RemoteViewer, wait_s: float) -> list[HostOutput]:
        """No challenge now (too many asked for from this prefix, or from everywhere): try again later. Not
        logged per connection (a flood would fill the log); ``discarded["challenge_budget"]`` counts them."""
        return [
            conn.send(AuthResult(AuthStatus.BLOCKED, _retry_ms(wait_s), bytes(PROOF_BYTES))),
            CloseConnection(conn.conn_id, "too many handshakes at once: told to try again"),
        ]

    def refuse(self, conn: RemoteViewer, msg: ControlMessage | UnknownControl) -> list[HostOutput]:
        """This host requires authentication and this connection has not passed it: NAK, no media, no pad."""
        self.discarded["unauthenticated_control"] += 1
        out: list[HostOutput] = [conn.send(Nak())]
        if isinstance(msg, Kick) and not conn.refusal_logged:
            conn.refusal_logged = True
            if conn.extensions & ExtensionFeature.AUTH:
                why = "it has not authenticated"
            else:
                why = (
                    "this host admits only viewers that authenticate and seal the stream, and this one cannot (a "
                    "native PyroFling viewer, an old pyrofling, or something on the path stripped the offer)"
                )
            out.append(LogLine(conn.conn_id, f"refused {conn.label}: {why}"))
        return out


def _retry_ms(wait_s: float) -> int:
    return min(2**32 - 1, int(wait_s * 1000) + 1)


def finish_code(code: CodeExchange, viewer_message: bytes) -> bytes | str:
    """The PAKE's key, or why not (counted on the loop, in :meth:`HostAuth._check`).  A module function, so
    that the shell can run it in another process."""
    try:
        return code.finish(viewer_message)
    except AuthError as exc:
        return str(exc)
