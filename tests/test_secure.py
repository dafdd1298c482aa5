"""Authentication and sealed datagrams (protocol.md §7.7): the primitives, then host and viewer cores together."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyrofling.core.host_session import (
    CloseConnection,
    GamepadInput,
    HostSessionConfig,
    HostSessions,
    LogLine,
    SendControl,
    SendDatagram,
)
from pyrofling.core.keyframes import KeyframePolicy
from pyrofling.core.packetizer import Packetizer
from pyrofling.core.reassembler import ProgressCounters
from pyrofling.core.secure import (
    PAIRING_ALPHABET,
    SEAL_OVERHEAD,
    AuthError,
    FailureLimiter,
    Opener,
    ReplayWindow,
    Sealer,
    derive_key,
    host_proof,
    pairing_code,
    session_keys,
    viewer_proof,
)
from pyrofling.core.viewer_session import (
    ControlToHost,
    DatagramToHost,
    Phase,
    SessionFailed,
    ViewerSession,
    ViewerSessionConfig,
)
from pyrofling.wire import (
    AuthChallenge,
    AuthResponse,
    AuthResult,
    CodecParameters,
    ControlFramer,
    Cookie,
    ExtensionFeature,
    Extensions,
    GamepadState,
    Hello,
    Kick,
    KickFlags,
    Nak,
    Ping,
    PingReply,
    parse_control,
)

PARAMS = CodecParameters(1, 1, 0, 60, 1, 320, 240, 0, 0)
SALT = bytes(range(16))
FAST = 10  # scrypt 2**10 in tests: the same code, 16× cheaper
PEER = ("10.0.0.2", 40000)
UDP = ("10.0.0.2", 40001)

# -- primitives --------------------------------------------------------------------------------


def test_key_derivation_depends_on_secret_and_salt_and_refuses_hostile_costs() -> None:
    k = derive_key("correct horse", SALT, FAST)
    assert len(k) == 32 and k == derive_key("correct horse", SALT, FAST)
    assert k != derive_key("correct horsf", SALT, FAST)
    assert k != derive_key("correct horse", bytes(16), FAST)
    with pytest.raises(ValueError, match="empty"):
        derive_key("", SALT, FAST)
    with pytest.raises(ValueError, match="out of range"):
        derive_key("x" * 8, SALT, 24)  # a host asking a viewer for 2 GiB of scrypt


def test_proofs_are_bound_to_role_cookie_and_both_nonces() -> None:
    k = derive_key("secret12", SALT, FAST)
    hn, vn = b"h" * 32, b"v" * 32
    base = viewer_proof(k, 7, hn, vn)
    assert base != host_proof(k, 7, hn, vn)  # a host's proof cannot be reflected as a viewer's
    assert base != viewer_proof(k, 8, hn, vn)  # another connection's cookie
    assert base != viewer_proof(k, 7, b"H" * 32, vn)  # another challenge: no replay
    assert base != viewer_proof(k, 7, hn, b"V" * 32)
    keys = session_keys(k, 7, hn, vn)
    assert keys.host_to_viewer != keys.viewer_to_host and keys != session_keys(k, 8, hn, vn)


def test_sealed_datagrams_open_once_and_reject_tampering() -> None:
    key = bytes(32)
    sealer, opener = Sealer(key), Opener(key)
    first, second = sealer.seal(b"hello", aad=b"A"), sealer.seal(b"hello", aad=b"A")
    assert len(first) == 5 + SEAL_OVERHEAD and first != second  # nonces never repeat
    assert opener.open(second, aad=b"A") == b"hello"
    assert opener.open(first, aad=b"A") == b"hello"  # late but inside the window
    with pytest.raises(AuthError, match="replayed"):
        opener.open(first, aad=b"A")
    third = sealer.seal(b"hello", aad=b"A")
    with pytest.raises(AuthError, match="forged"):
        opener.open(third, aad=b"B")  # other associated data
    tampered = bytearray(third)
    tampered[-1] ^= 1
    with pytest.raises(AuthError, match="forged"):
        opener.open(bytes(tampered), aad=b"A")
    with pytest.raises(AuthError, match="truncated"):
        opener.open(third[:10])
    assert opener.open(third, aad=b"A") == b"hello"  # forgeries did not consume its counter
    with pytest.raises(AuthError, match="forged"):
        Opener(bytes([1] * 32)).open(sealer.seal(b"x"))  # another key


def test_replay_window_remembers_what_it_accepted() -> None:
    w = ReplayWindow(size=64)
    for c in (5, 3, 70):
        assert w.check(c) is None
        w.accept(c)
    assert w.check(5) == "too_old"  # 65 behind the highest
    assert w.check(70) == "replayed" and w.check(69) is None and w.check(0) == "bad_counter"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 300), max_size=200))
def test_replay_window_accepts_each_counter_at_most_once(counters: list[int]) -> None:
    w = ReplayWindow(size=32)
    accepted: list[int] = []
    for c in counters:
        if w.check(c) is None:
            w.accept(c)
            accepted.append(c)
    assert len(accepted) == len(set(accepted))
    # Anything never seen and within the window of the highest is still accepted.
    if accepted:
        top = max(accepted)
        for c in range(max(1, top - 31), top + 1):
            assert (w.check(c) is None) == (c not in accepted)


def test_failure_limiter_blocks_after_repeated_failures_then_forgives() -> None:
    lim = FailureLimiter(max_failures=3, window_s=60, block_s=30)
    assert not lim.failed("a", 0) and not lim.failed("a", 1)
    assert lim.failed("a", 2) and lim.blocked("a", 3) and not lim.blocked("b", 3)
    assert not lim.blocked("a", 33)  # the block expired
    assert not lim.failed("a", 100) and not lim.failed("a", 200)  # far apart: never blocked
    flood = FailureLimiter(max_addresses=10)
    for i in range(1000):
        flood.failed(f"10.0.{i // 256}.{i % 256}", 0)
    assert len(flood._failures) <= 10  # spoofed addresses cannot grow memory


def test_pairing_codes_are_readable_and_random() -> None:
    codes = {pairing_code() for _ in range(50)}
    assert len(codes) == 50
    for code in codes:
        groups = code.split("-")
        assert [len(g) for g in groups] == [4, 4, 4] and set("".join(groups)) <= set(PAIRING_ALPHABET)


# -- host core and viewer core, talking ----------------------------------------------------------


def host(secret: str | None = "hunter22", *, encrypt: bool = True) -> HostSessions:
    cfg = HostSessionConfig(encrypt=encrypt)
    if secret is not None:
        cfg = HostSessionConfig(
            encrypt=encrypt, auth_key=derive_key(secret, SALT, FAST), auth_salt=SALT, scrypt_log2_n=FAST
        )
    s = HostSessions(make_packetizer=Packetizer.for_cookie, keyframes=KeyframePolicy(), config=cfg)
    s.codec_parameters = PARAMS
    return s


class Pair:
    """One viewer core wired to a host core through their outputs, as the two shells would."""

    def __init__(self, hs: HostSessions, viewer: ViewerSessionConfig, conn_id: int = 1) -> None:
        self.hs, self.conn_id = hs, conn_id
        self.address = (UDP[0], UDP[1] + conn_id - 1)  # each viewer its own UDP port
        self.vs = ViewerSession(ProgressCounters(), viewer)
        self.framer = ControlFramer()
        self.to_host_udp: list[bytes] = []
        self.to_viewer_udp: list[bytes] = []
        self.host_logs: list[str] = []
        self.closed: list[str] = []
        self.pad_inputs: list[GamepadInput] = []
        self.failure: str | None = None
        hs.open(conn_id, PEER, 0xC0FFEE00 + conn_id, 0.0)

    def run(self, now: float = 0.0) -> Pair:
        pending = list(self.vs.start(now))
        while pending:
            out = pending.pop(0)
            if isinstance(out, ControlToHost):
                for msg in self.framer.feed(out.data):
                    self._host(self.hs.control(self.conn_id, msg, now), pending, now)
            elif isinstance(out, DatagramToHost):
                self.to_host_udp.append(out.data)
                self._host(self.hs.datagram(self.address, out.data, now), pending, now)
            elif isinstance(out, SessionFailed):
                self.failure = out.reason
        return self

    def _host(self, outputs: list[Any], pending: list[Any], now: float) -> None:
        for o in outputs:
            if isinstance(o, SendControl) and not self.closed:
                pending += self.vs.control(parse_control(o.data), now)
            elif isinstance(o, SendDatagram):
                self.to_viewer_udp.append(o.data)
            elif isinstance(o, LogLine):
                self.host_logs.append(o.text)
            elif isinstance(o, CloseConnection):
                self.closed.append(o.reason)
            elif isinstance(o, GamepadInput):
                self.pad_inputs.append(o)

    def udp(self, message: bytes, now: float = 0.1) -> None:
        data = self.vs.udp(message)
        self._host(self.hs.datagram(self.address, data, now), [], now)

    @property
    def conn(self) -> Any:
        return self.hs.connection(self.conn_id)


def test_right_secret_authenticates_both_ways_and_seals_every_datagram() -> None:
    p = Pair(host(), ViewerSessionConfig(flags=KickFlags.VIDEO | KickFlags.GAMEPAD, secret="hunter22")).run()
    assert p.failure is None and p.vs.phase == Phase.STREAMING
    assert p.vs.authenticated and p.conn.authenticated and p.conn.kicked and p.vs.encrypted
    assert p.hs.auth_successes == 1 and any("datagrams sealed" in line for line in p.host_logs)
    # The UDP cookie went sealed: never the plain 16-byte COOKIE, and the secret is nowhere on the wire.
    assert all(len(d) != 16 and b"hunter22" not in d for d in p.to_host_udp)
    assert p.conn.udp_address == UDP
    # A sealed ping gets a sealed reply the viewer opens.
    p.udp(bytes(Ping(3)))
    sealed_reply = p.to_viewer_udp[-1]
    reply = p.vs.open_datagram(sealed_reply)
    assert reply is not None and len(reply) == len(bytes(PingReply(3, 0))) == len(sealed_reply) - SEAL_OVERHEAD
    # Media for this viewer is sealed by the shell with conn.outgoing; the viewer opens it.
    media = b"\x01" * 100
    assert p.vs.open_datagram(p.conn.outgoing(media)) == media
    assert p.vs.open_datagram(media) is None and p.vs.refused["sealed_forged"] == 1  # plaintext refused


def test_a_plaintext_datagram_cannot_act_for_an_encrypted_viewer() -> None:
    p = Pair(host(), ViewerSessionConfig(flags=KickFlags.VIDEO | KickFlags.GAMEPAD, secret="hunter22")).run()
    state = GamepadState(1, 0, 0, 0, 0, 0, 0, 0x10)
    out = p.hs.datagram(UDP, bytes(state), 0.2)  # spoofed from the viewer's own address, in the clear
    assert out == [] and p.hs.discarded["plaintext_refused"] == 1
    p.udp(bytes(state))  # the real viewer, sealed
    assert len(p.pad_inputs) == 1
    replay = p.to_host_udp[0]
    assert p.hs.datagram(("6.6.6.6", 1), replay, 0.3) == [] and p.hs.discarded["replayed"] == 1
    assert p.conn.udp_address == UDP  # a replayed datagram did not move the stream


@pytest.mark.parametrize("secret", ["hunter23", None])
def test_wrong_or_missing_secret_gets_no_media_and_no_pad(secret: str | None) -> None:
    hs = host()
    p = Pair(hs, ViewerSessionConfig(flags=KickFlags.VIDEO | KickFlags.GAMEPAD, secret=secret)).run()
    assert p.failure is not None and p.vs.auth_failed
    assert "refused the password" in p.failure if secret else "needs a password" in p.failure
    assert not p.conn.kicked if p.conn is not None else True
    assert hs.video_targets(idr=True) == [] and hs.audio_targets() == []
    # Even knowing the cookie, nothing it sends over UDP binds, pings or moves the pad.
    cookie = 0xC0FFEE01
    for msg in (Cookie(cookie), Ping(1), GamepadState(1, 0, 0, 0, 0, 0, 0, 0xFF)):
        assert hs.datagram(UDP, bytes(msg), 0.5) == []
    assert p.pad_inputs == [] and hs.video_targets(idr=True) == []
    if secret:
        assert hs.auth_failures == 1 and p.closed == ["authentication failed"]


def test_a_native_viewer_is_refused_with_a_clear_log_line() -> None:
    hs = host()
    p = Pair(hs, ViewerSessionConfig(extensions=ExtensionFeature.NONE)).run()
    assert not p.conn.kicked and hs.video_targets(idr=True) == []
    assert any("native PyroFling viewer" in line for line in p.host_logs)
    # The reference viewer retries KICK: still NAK, and the line is logged once.
    out = hs.control(1, Kick(KickFlags.VIDEO), 0.1)
    assert [parse_control(o.data) for o in out if isinstance(o, SendControl)] == [Nak()]
    assert sum("native" in line for line in p.host_logs) == 1


def test_a_host_without_a_secret_stays_native_compatible() -> None:
    hs = host(None)
    native = Pair(hs, ViewerSessionConfig(extensions=ExtensionFeature.NONE), conn_id=1).run()
    ours = Pair(hs, ViewerSessionConfig(secret="anything1"), conn_id=2).run()
    assert native.conn.kicked and ours.conn.kicked
    assert not ours.vs.authenticated and not ours.vs.encrypted  # nothing to prove to an open host
    assert all(len(d) == 16 for d in native.to_host_udp + ours.to_host_udp)  # plain COOKIE datagrams


def test_a_viewer_that_requires_auth_refuses_an_open_host() -> None:
    p = Pair(host(None), ViewerSessionConfig(secret="hunter22", require_auth=True)).run()
    assert p.failure is not None and "did not authenticate" in p.failure and p.vs.auth_failed


def test_an_impostor_host_is_caught_by_its_proof() -> None:
    hs = host("hunter22")
    pair = Pair(hs, ViewerSessionConfig(secret="hunter22"))
    vs = pair.vs
    vs.start(0.0)
    vs.control(Cookie(0xC0FFEE01), 0.0)
    vs.control(Extensions(1, int(ExtensionFeature.AUTH | ExtensionFeature.KEYFRAME_REQUEST)), 0.0)
    out = vs.control(AuthChallenge(SALT, b"n" * 32, FAST, 0), 0.0)
    assert isinstance(out[0], ControlToHost) and isinstance(parse_control(out[0].data), AuthResponse)
    failed = vs.control(AuthResult(1, b"\x00" * 32), 0.0)  # "accepted", without knowing the key
    assert isinstance(failed[0], SessionFailed) and "could not prove" in failed[0].reason


def test_failed_attempts_get_an_address_blocked_even_with_the_right_secret_after() -> None:
    hs = host()
    hs.auth.limiter = FailureLimiter(max_failures=3, window_s=60, block_s=60)
    for i in range(3):
        Pair(hs, ViewerSessionConfig(secret="wrong-guess"), conn_id=10 + i).run(now=float(i))
    right = Pair(hs, ViewerSessionConfig(secret="hunter22"), conn_id=20).run(now=5.0)
    assert right.failure == "the host refused the password" and not right.conn.authenticated
    assert right.closed == ["10.0.0.2 is blocked after repeated wrong secrets"]
    assert hs.discarded["auth_blocked"] == 1 and hs.auth_failures == 3
    later = Pair(hs, ViewerSessionConfig(secret="hunter22"), conn_id=21).run(now=70.0)
    assert later.failure is None and later.conn.kicked  # the block expired


def test_a_connection_that_never_authenticates_is_closed() -> None:
    hs = host()
    hs.open(1, PEER, 99, 0.0)
    hs.control(1, Hello(), 0.0)
    assert hs.next_timer() == pytest.approx(10.0)
    out = hs.handle_timer(10.0)
    assert any(isinstance(o, CloseConnection) and "not authenticated" in o.reason for o in out)
    assert hs.connection(1) is None


def test_authenticated_but_not_encrypted_when_the_host_says_so() -> None:
    p = Pair(host(encrypt=False), ViewerSessionConfig(secret="hunter22")).run()
    assert p.vs.authenticated and not p.vs.encrypted and p.conn.kicked and p.conn.sealer is None
    assert all(len(d) == 16 for d in p.to_host_udp)


def test_random_datagrams_never_authenticate() -> None:
    """Sealed-looking garbage with a live cookie: all refused, none acted on, counters say why."""
    p = Pair(host(), ViewerSessionConfig(flags=KickFlags.VIDEO | KickFlags.GAMEPAD, secret="hunter22")).run()
    rng = random.Random(5)
    head = p.to_host_udp[0][:12]
    for n in itertools.islice(itertools.cycle(range(12, 80)), 20_000):
        data = head + rng.randbytes(n - 12)
        assert p.hs.datagram(UDP, data, 1.0) == []
    assert p.pad_inputs == []
    assert sum(p.hs.discarded.values()) == 20_000
