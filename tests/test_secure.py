"""Security against someone on the path (protocol.md §7.7): the primitives, then host and viewer cores together
with an attacker between them who strips, flips, injects, reorders, replays and impersonates.

Each README security sentence has a test here (or in test_secure_io.py, over real sockets) that plays that
attacker and fails if the sentence is false.
"""

from __future__ import annotations

import itertools
import random
import secrets
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spake2 import SPAKE2_B  # type: ignore[import-untyped]

from pyrofling.core.host.auth import PairedViewer
from pyrofling.core.host.keyframes import KeyframePolicy
from pyrofling.core.host.packetizer import Packetizer
from pyrofling.core.host.sessions import (
    CloseConnection,
    GamepadInput,
    HostSessionConfig,
    HostSessions,
    KeyboardMouseInput,
    LogLine,
    SendControl,
    SendDatagram,
    ViewerPaired,
)
from pyrofling.core.host.state import Compute, PairingCodeSpent
from pyrofling.core.secure import (
    PAIRING_ALPHABET,
    SEAL_OVERHEAD,
    AuthError,
    CodeExchange,
    ControlOpener,
    ControlSealer,
    FailureLimiter,
    HostIdentity,
    Opener,
    ReplayWindow,
    Sealer,
    Transcript,
    handshake_keys,
    limiter_key,
    pairing_code,
    prove,
)
from pyrofling.core.viewer.auth import HostCredential
from pyrofling.core.viewer.connection import Reconnect
from pyrofling.core.viewer.reassembler import ProgressCounters
from pyrofling.core.viewer.session import (
    ControlToHost,
    DatagramToHost,
    Paired,
    Phase,
    SessionFailed,
    ViewerSession,
    ViewerSessionConfig,
)
from pyrofling.wire import (
    AuthChallenge,
    AuthMethod,
    AuthResponse,
    AuthResult,
    CodecParameters,
    ControlFramer,
    Cookie,
    ExtensionFeature,
    Extensions,
    GamepadState,
    Hello,
    InputState,
    Kick,
    KickFlags,
    Nak,
    PathChallenge,
    Ping,
    PingReply,
    Progress,
    RequestKeyframe,
    key_bitmap,
    parse_control,
)

PARAMS = CodecParameters(1, 1, 0, 60, 1, 320, 240, 0, 0)
PEER = ("10.0.0.2", 40000)
UDP = ("10.0.0.2", 40001)
SECRET = "hunter22"
HOST_IDENTITY = HostIdentity(bytes(range(32)))
HOST_ID = HOST_IDENTITY.host_id
PAD = KickFlags.VIDEO | KickFlags.GAMEPAD

# -- primitives --------------------------------------------------------------------------------


def test_every_transcript_byte_changes_every_key() -> None:
    t = Transcript()
    for part in (b"offer", b"cookie", b"grant"):
        t.add(part)
    keys = handshake_keys(b"m" * 32, t.digest(), AuthMethod.CODE)
    flipped = Transcript()
    for part in (b"offer", b"cookie", b"grang"):
        flipped.add(part)
    other = handshake_keys(b"m" * 32, flipped.digest(), AuthMethod.CODE)
    fields = ("viewer_proof", "host_proof", "datagram_host_to_viewer", "datagram_viewer_to_host")
    assert all(getattr(keys, f) != getattr(other, f) for f in (*fields, "control_host_to_viewer", "pairing"))
    assert keys.viewer_proof != other.viewer_proof and keys.control_host_to_viewer != other.control_host_to_viewer
    # The two roles' keys differ: a proof or a record cannot be reflected to its sender.
    assert len({keys.viewer_proof, keys.host_proof, keys.control_host_to_viewer, keys.control_viewer_to_host}) == 4
    # The method is bound too.
    assert handshake_keys(b"m" * 32, t.digest(), AuthMethod.PAIRED).viewer_proof != keys.viewer_proof


def test_the_pake_agrees_only_on_the_same_secret() -> None:
    host, viewer = CodeExchange(SECRET, host=True), CodeExchange(SECRET, host=False)
    assert host.finish(viewer.message) == viewer.finish(host.message)
    wrong = CodeExchange("hunter23", host=False)
    assert CodeExchange(SECRET, host=True).finish(wrong.message) != wrong.finish(
        CodeExchange(SECRET, host=True).message
    )
    with pytest.raises(AuthError):
        CodeExchange(SECRET, host=True).finish(b"\x00" * 33)  # not a group element
    with pytest.raises(AuthError):  # a reflected message (the host's own side) is refused
        h = CodeExchange(SECRET, host=True)
        h.finish(h.message)


def test_control_records_open_once_in_order_and_refuse_any_change() -> None:
    sealer = ControlSealer(b"k" * 32)
    records = [sealer.seal(bytes(m)) for m in (Kick(KickFlags.VIDEO), Progress(1, 2, 3, 4, 5), RequestKeyframe())]
    opener = ControlOpener(b"k" * 32)
    opener.feed(b"".join(records))
    assert [parse_control(opener.next() or b"") for _ in range(3)] == [
        Kick(KickFlags.VIDEO),
        Progress(1, 2, 3, 4, 5),
        RequestKeyframe(),
    ]
    assert opener.next() is None

    def fails(stream: bytes) -> str:
        o = ControlOpener(b"k" * 32)
        o.feed(stream)
        with pytest.raises(AuthError) as exc:
            while o.next() is not None:
                pass
        return str(exc.value)

    assert fails(records[1] + records[0]) == "control_forged"  # reordered
    assert fails(records[0] + records[0]) == "control_forged"  # replayed
    assert fails(records[1]) == "control_forged"  # one dropped
    flipped = bytearray(records[0])
    flipped[5] ^= 1
    assert fails(bytes(flipped)) == "control_forged"
    assert fails(b"\xff\xff" + b"x" * 40) == "control_record_length"
    assert fails(bytes(Kick(KickFlags.VIDEO))) in ("control_record_length", "control_forged")  # plaintext


def test_sealed_datagrams_open_once_and_reject_tampering() -> None:
    sealer, opener = Sealer(b"k" * 32), Opener(b"k" * 32)
    a, b = sealer.seal(b"first"), sealer.seal(b"second")
    assert opener.open(b) == b"second" and opener.open(a) == b"first"  # reordering is fine
    for bad, why in ((a, "replayed"), (a[:10], "sealed_truncated")):
        with pytest.raises(AuthError, match=why):
            opener.open(bad)
    tampered = bytearray(sealer.seal(b"third"))
    tampered[-1] ^= 1
    with pytest.raises(AuthError, match="sealed_forged"):
        opener.open(bytes(tampered))
    with pytest.raises(AuthError, match="sealed_forged"):
        Opener(b"j" * 32).open(sealer.seal(b"other key"))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 10_000), max_size=200))
def test_replay_window_accepts_each_counter_at_most_once(counters: list[int]) -> None:
    w, accepted = ReplayWindow(size=64), set()
    for c in counters:
        if w.check(c) is None:
            assert c not in accepted
            w.accept(c)
            accepted.add(c)


def test_the_limiter_counts_ipv6_by_prefix_and_never_forgets_a_block_early() -> None:
    assert limiter_key("2001:db8:1:2:aaaa::1") == limiter_key("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert limiter_key("2001:db8:1:3::1") != limiter_key("2001:db8:1:2::1")
    assert limiter_key("::ffff:10.0.0.2") == "10.0.0.2"
    lim = FailureLimiter(max_failures=3, global_max_failures=1000, max_addresses=8)
    for i in range(3):  # three addresses of one /64: one budget
        lim.failed(f"2001:db8:1:2::{i + 1}", now=float(i))
    assert lim.blocked_for("2001:db8:1:2::99", 3.0) == pytest.approx(59.0)  # blocked at the third, for 60 s
    assert not lim.blocked("2001:db8:1:3::1", 3.0)
    # A flood of failures from other addresses cannot push the block out.
    for i in range(200):
        lim.failed(f"10.1.{i // 250}.{i % 250}", now=4.0)
    assert lim.blocked("2001:db8:1:2::1", 10.0)
    assert not lim.blocked("2001:db8:1:2::1", 62.0)


def test_the_global_budget_blocks_every_code_attempt_and_backs_off() -> None:
    lim = FailureLimiter(max_failures=1000, global_max_failures=10, global_block_s=30, max_global_block_s=120)
    for i in range(10):
        lim.failed(f"10.0.{i}.1", now=0.0)
    assert lim.blocked_for("192.0.2.7", 0.0) == pytest.approx(30.0)  # a new address too
    assert not lim.blocked("192.0.2.7", 30.0)
    for i in range(10):
        lim.failed(f"10.1.{i}.1", now=31.0)
    assert lim.blocked_for("192.0.2.7", 31.0) == pytest.approx(60.0)  # the attack went on: twice as long
    for i in range(10):
        lim.failed(f"10.2.{i}.1", now=100.0)
    assert lim.blocked_for("192.0.2.7", 100.0) == pytest.approx(120.0)  # capped


def test_pairing_codes_are_readable_and_random() -> None:
    codes = {pairing_code() for _ in range(50)}
    assert len(codes) == 50
    for code in codes:
        groups = code.split("-")
        assert [len(g) for g in groups] == [4, 4, 4] and set("".join(groups)) <= set(PAIRING_ALPHABET)


# -- host core and viewer core, with someone on the path -----------------------------------------


class Book:
    """A host's paired viewers in memory (the shell's store in the real host)."""

    def __init__(self) -> None:
        self.viewers: dict[bytes, PairedViewer] = {}

    def lookup(self, viewer_id: bytes) -> PairedViewer | None:
        return self.viewers.get(viewer_id)


def host(
    secret: str | None = SECRET,
    *,
    private: bool = False,
    book: Book | None = None,
    identity: HostIdentity = HOST_IDENTITY,
    one_time_code: bool = False,
    crypto_off_loop: bool = False,
) -> HostSessions:
    cfg = HostSessionConfig(
        auth_secret=secret,
        private=private,
        identity=identity,
        one_time_code=one_time_code,
        crypto_off_loop=crypto_off_loop,
    )
    s = HostSessions(make_packetizer=Packetizer.for_cookie, keyframes=KeyframePolicy(), config=cfg, paired=book)
    s.codec_parameters = PARAMS
    return s


#: What the attacker may do to a message: return other bytes, or None to drop it.
Tamper = Callable[[str, bytes], bytes | None]


def untouched(direction: str, data: bytes) -> bytes | None:
    return data


class Link:
    """A viewer core wired to a host core through their outputs, as the two shells would, with ``tamper`` on the
    path seeing every TCP write ("tcp>" to the host, "tcp<" to the viewer) and datagram ("udp>", "udp<")."""

    def __init__(
        self,
        hs: HostSessions,
        viewer: ViewerSessionConfig,
        conn_id: int = 1,
        tamper: Tamper = untouched,
        random_bytes: Callable[[int], bytes] = secrets.token_bytes,
    ) -> None:
        self.hs, self.conn_id, self.tamper = hs, conn_id, tamper
        self.address = (UDP[0], UDP[1] + conn_id - 1)  # each viewer its own UDP port
        self.vs = ViewerSession(ProgressCounters(), viewer, random_bytes=random_bytes)
        self.tcp_to_host: list[bytes] = []
        self.tcp_to_viewer: list[bytes] = []
        self.to_host_udp: list[bytes] = []
        self.to_viewer_udp: list[bytes] = []
        self.viewer_opened: list[bytes] = []  # datagrams the viewer opened
        self.host_logs: list[str] = []
        self.closed: list[str] = []
        self.pad_inputs: list[GamepadInput | KeyboardMouseInput] = []
        self.viewer_paired: list[HostCredential] = []
        self.host_paired: list[ViewerPaired] = []
        self.codes_spent: list[str] = []
        self.computed = 0
        self.failure: str | None = None
        self.now = 0.0
        hs.open(conn_id, PEER, 0.0, cookie=0xC0FFEE00 + conn_id)

    def run(self, now: float = 0.0, until_s: float = 1.0) -> Link:
        """Start the viewer and let both sides talk (timers included) until it streams or fails."""
        self.now = now
        self.pump(self.vs.start(now))
        while self.vs.phase not in (Phase.STREAMING, Phase.FAILED) and self.now < now + until_s:
            due = self.vs.next_timer()
            if due is None:
                break
            self.now = max(self.now, due)
            self.pump(self.vs.handle_timer(self.now))
        return self

    def pump(self, outputs: list[Any]) -> None:
        pending = list(outputs)
        while pending:
            out = pending.pop(0)
            if isinstance(out, ControlToHost):
                data = self.tamper("tcp>", out.data)
                if data is not None and not self.closed:
                    self.tcp_to_host.append(data)
                    self._host(self.hs.tcp_received(self.conn_id, data, self.now), pending)
            elif isinstance(out, DatagramToHost):
                data = self.tamper("udp>", out.data)
                if data is not None:
                    self.to_host_udp.append(data)
                    self._host(self.hs.datagram(self.address, data, self.now), pending)
            elif isinstance(out, SessionFailed):
                self.failure = out.reason
            elif isinstance(out, Paired):
                self.viewer_paired.append(out.credential)

    def _host(self, outputs: list[Any], pending: list[Any]) -> None:
        for o in [*outputs, *self.hs.datagrams_to_send(self.now)]:
            if isinstance(o, SendControl) and not self.closed:
                data = self.tamper("tcp<", o.data)
                if data is not None:
                    self.tcp_to_viewer.append(data)
                    pending += self.vs.control_bytes(data, self.now)
            elif isinstance(o, SendDatagram):
                data = self.tamper("udp<", o.data)
                if data is None:
                    continue
                self.to_viewer_udp.append(data)
                if o.address == self.address:
                    plain = self.vs.open_datagram(data)
                    if plain is not None:
                        self.viewer_opened.append(plain)
                    answer = self.vs.path_challenge(plain) if plain is not None else None
                    pending += answer or []
            elif isinstance(o, LogLine):
                self.host_logs.append(o.text)
            elif isinstance(o, CloseConnection):
                self.closed.append(o.reason)
                self.hs.close(o.conn_id)  # as the shell does
            elif isinstance(o, GamepadInput | KeyboardMouseInput):
                self.pad_inputs.append(o)
            elif isinstance(o, ViewerPaired):
                self.host_paired.append(o)
            elif isinstance(o, PairingCodeSpent):
                self.codes_spent.append(o.why)
            elif isinstance(o, Compute):  # as the shell does, on its worker, then back here
                self.computed += 1
                self._host(o.then(o.work(), self.now), pending)

    def udp(self, message: bytes, now: float = 0.5) -> None:
        self.now = now
        self.pump([DatagramToHost(self.vs.udp(message))])

    def viewer_sends(self, outputs: list[Any], now: float = 0.5) -> None:
        self.now = now
        self.pump(outputs)

    @property
    def conn(self) -> Any:
        return self.hs.connection(self.conn_id)

    @property
    def streaming(self) -> bool:
        return self.vs.phase is Phase.STREAMING and self.conn is not None and self.conn.kicked


def parses_in_clear(data: bytes) -> bool:
    try:
        return bool(ControlFramer().feed(data))
    except Exception:
        return False


def sealed_ok(link: Link) -> None:
    assert link.failure is None and link.streaming, link.failure
    assert link.vs.authenticated and link.conn.authenticated and link.vs.encrypted and link.conn.sealer is not None
    assert link.conn.channel.sealed and link.vs.channel.sealed


def test_the_right_code_seals_control_and_datagrams_both_ways() -> None:
    link = Link(host(), ViewerSessionConfig(flags=PAD, secret=SECRET)).run()
    sealed_ok(link)
    assert any("control and datagrams sealed" in line for line in link.host_logs)
    # After AUTH_RESULT nothing on TCP parses as a message in the clear: it is all sealed records.
    results = [i for i, d in enumerate(link.tcp_to_viewer) if d[:8] == bytes(AuthResult(1, 0, bytes(32)))[:8]]
    assert len(results) == 1
    responses = [
        i
        for i, d in enumerate(link.tcp_to_host)
        if parses_in_clear(d)
        and d[:4] == bytes(AuthResponse(1, 0, bytes(16), bytes(32), bytes(33), bytes(32), bytes(32)))[:4]
    ]
    assert len(responses) == 1
    after = link.tcp_to_viewer[results[0] + 1 :] + link.tcp_to_host[responses[0] + 1 :]
    assert len(after) >= 2  # the KICK at least one way, CODEC_PARAMETERS the other
    for data in after:
        assert not parses_in_clear(data)
        assert data[:2] == (len(data) - 2).to_bytes(2, "little")  # a record: its length, then ciphertext
    # The secret is nowhere on the wire, and no datagram is a plain COOKIE.
    wire = b"".join(link.tcp_to_host + link.tcp_to_viewer + link.to_host_udp)
    assert SECRET.encode() not in wire and all(len(d) != 16 for d in link.to_host_udp)
    # The UDP address was bound only after it answered a PATH_CHALLENGE.
    assert link.conn.udp_address == UDP and link.conn.path_validations == 1 and link.vs.path_challenges == 1
    assert link.vs.kick_attempts == 1  # the KICK that came before the proof is answered by it, not at a retry
    link.udp(bytes(Ping(3)))
    reply = link.viewer_opened[-1]
    assert len(reply) == len(bytes(PingReply(3, 0))) == len(link.to_viewer_udp[-1]) - SEAL_OVERHEAD
    media = b"\x01" * 100
    assert link.vs.open_datagram(link.conn.outgoing(media)) == media
    assert link.vs.open_datagram(media) is None and link.vs.refused["sealed_forged"] == 1  # plaintext refused


def test_the_paced_queue_seals_as_datagrams_leave_so_a_deep_queue_never_looks_like_replay() -> None:
    link = Link(host(), ViewerSessionConfig(flags=PAD, secret=SECRET)).run()
    conn = link.conn
    queued = [bytes([i % 256]) * 1000 for i in range(3900)]  # a full queue (4 MiB)
    conn.paced.push(queued)
    assert conn.paced.queued_bytes == 3900 * (1000 + SEAL_OVERHEAD) and conn.paced.dropped == 0
    # While they wait, ping replies and resends go out at once, sealed then: 300 of them reach the viewer first.
    for i in range(300):
        assert link.vs.open_datagram(conn.outgoing(bytes(PingReply(i, 0)))) is not None
    opened, t = 0, 1.0
    while len(conn.paced):
        for d in (o.data for o in link.hs.datagrams_to_send(t)):
            assert len(d) == 1000 + SEAL_OVERHEAD
            opened += link.vs.open_datagram(d) is not None
        t += 0.01
    # Sealed as they left, their counters follow the pings': none is "too old" for the 4096 window.
    assert opened == 3900 and link.vs.refused == {}


# -- downgrades and changed negotiation --------------------------------------------------------


def flip_in(message_id: int, byte: int, bit: int, direction: str) -> Tamper:
    """Flip one bit of the first message ``message_id`` crossing in ``direction`` (in the clear, before keys)."""
    done = [False]

    def tamper(d: str, data: bytes) -> bytes | None:
        if d != direction or done[0]:
            return data
        try:
            msgs = ControlFramer().feed(data)
        except Exception:
            return data
        if len(msgs) == 1 and getattr(msgs[0], "ID", None) == message_id:
            done[0] = True
            out = bytearray(data)
            out[8 + byte] ^= 1 << bit
            return bytes(out)
        return data

    return tamper


@pytest.mark.parametrize(
    ("message_id", "byte", "bit", "direction"),
    [
        (32, 4, 2, "tcp>"),  # the viewer's offer loses ENCRYPTION
        (32, 4, 1, "tcp>"),  # ... or AUTH
        (32, 4, 4, "tcp>"),  # ... or NACK (not security at all: still bound)
        (32, 4, 3, "tcp<"),  # the host's grant loses LOSS_REPORTS
        (32, 4, 2, "tcp<"),  # ... or ENCRYPTION
        (4, 0, 0, "tcp<"),  # the cookie
        (34, 0, 0, "tcp<"),  # the host id
        (34, 20, 0, "tcp<"),  # the host nonce
        (34, 116, 0, "tcp<"),  # the methods
        (35, 0, 0, "tcp>"),  # the method
        (35, 4, 0, "tcp>"),  # the pair flag
        (35, 30, 0, "tcp>"),  # the viewer nonce
        (35, 130, 0, "tcp>"),  # the name
    ],
)
def test_any_changed_negotiation_bit_fails_loudly_on_both_sides(
    message_id: int, byte: int, bit: int, direction: str
) -> None:
    link = Link(host(), ViewerSessionConfig(flags=PAD, secret=SECRET), tamper=flip_in(message_id, byte, bit, direction))
    link.run()
    assert link.failure is not None and link.vs.phase is Phase.FAILED
    assert not link.vs.encrypted or not link.conn or not link.conn.kicked
    # Never a stream, sealed or not, and the host said why (or refused to go on).
    assert (link.hs.video_targets(idr=True) == [] and link.conn is None) or not link.conn.kicked
    assert link.closed or link.host_logs or link.conn is None or not link.conn.authenticated
    assert link.pad_inputs == []


def test_a_host_with_a_secret_never_streams_in_the_clear_even_to_a_viewer_that_offers_nothing() -> None:
    hs = host()
    for i, extensions in enumerate((ExtensionFeature.NONE, ExtensionFeature.KEYFRAME_REQUEST | ExtensionFeature.AUTH)):
        link = Link(hs, ViewerSessionConfig(flags=PAD, extensions=extensions), conn_id=i + 1).run()
        assert not link.conn.kicked and not link.conn.authenticated
        for msg in (Cookie(0xC0FFEE00 + i + 1), Ping(1), GamepadState(1, 0, 0, 0, 0, 0, 0, 0xFF)):
            assert hs.datagram(link.address, bytes(msg), 0.5) == []
    assert hs.video_targets(idr=True) == [] and hs.audio_targets() == []


@pytest.mark.parametrize("strip", ["offer", "grant", "whole offer"])
def test_a_viewer_with_a_secret_refuses_when_authentication_is_stripped(strip: str) -> None:
    def tamper(d: str, data: bytes) -> bytes | None:
        msgs = ControlFramer().feed(data) if data[:2] != b"\x00\x00" else []
        if msgs and isinstance(msgs[0], Extensions):
            no_auth = Extensions(1, msgs[0].features & ~0b110)
            if strip == "offer" and d == "tcp>":
                return bytes(no_auth)
            if strip == "grant" and d == "tcp<":
                return bytes(no_auth)
            if strip == "whole offer" and d == "tcp>":
                return None
        if strip == "whole offer" and d == "tcp<" and msgs and isinstance(msgs[0], Cookie):
            return data + bytes(Nak())  # "I am a native host, I do not know EXTENSIONS"
        return data

    link = Link(host(), ViewerSessionConfig(flags=PAD, secret=SECRET), tamper=tamper).run()
    assert link.failure is not None and link.vs.auth_failed and not link.vs.encrypted
    assert link.conn is None or not link.conn.kicked
    assert link.pad_inputs == [] and link.hs.video_targets(idr=True) == []


def test_a_password_does_not_connect_to_an_open_host_unless_told() -> None:
    refused = Link(host(None), ViewerSessionConfig(flags=PAD, secret=SECRET)).run()
    assert refused.failure is not None and "did not ask" in refused.failure and "--allow-open-host" in refused.failure
    assert not refused.conn.kicked
    told = Link(host(None), ViewerSessionConfig(flags=PAD, secret=SECRET, allow_open_host=True)).run()
    assert told.streaming and not told.vs.encrypted
    # A paired viewer knows the address is a paired host's: no open host there either.
    paired = Link(host(None), ViewerSessionConfig(flags=PAD, paired_host_id=HOST_ID)).run()
    assert paired.failure is not None and not paired.conn.kicked


def test_a_host_without_a_secret_stays_native_compatible() -> None:
    hs = host(None)
    native = Link(hs, ViewerSessionConfig(extensions=ExtensionFeature.NONE), conn_id=1).run()
    ours = Link(hs, ViewerSessionConfig(), conn_id=2).run()
    assert native.streaming and ours.streaming
    assert not ours.vs.authenticated and not ours.vs.encrypted
    assert all(len(d) == 16 for d in native.to_host_udp + ours.to_host_udp)  # plain COOKIE datagrams


def test_a_native_viewer_is_refused_with_a_clear_log_line() -> None:
    hs = host()
    link = Link(hs, ViewerSessionConfig(extensions=ExtensionFeature.NONE)).run()
    assert not link.conn.kicked and hs.video_targets(idr=True) == []
    assert any("native PyroFling viewer" in line for line in link.host_logs)
    out = hs.control(1, Kick(KickFlags.VIDEO), 0.1)
    assert [parse_control(o.data) for o in out if isinstance(o, SendControl)] == [Nak()]
    assert sum("native" in line for line in link.host_logs) == 1


# -- impostors -----------------------------------------------------------------------------------


def offline_dictionary_attack(link: Link, impostor_state: bytes, dictionary: list[str]) -> list[str]:
    """What an impostor host can do with what it saw: for each candidate, redo its side of the PAKE as if its
    message had been made with that candidate, and check the viewer's proof.  (Against the old scrypt-HMAC proof
    this finds the password; against SPAKE2 it finds only the impostor's own online guess.)"""
    response = next(m for d in link.tcp_to_host for m in ControlFramer().feed(d) if isinstance(m, AuthResponse))
    t = Transcript()
    offer = next(m for d in link.tcp_to_host for m in ControlFramer().feed(d) if isinstance(m, Extensions))
    grant = next(m for d in link.tcp_to_viewer for m in ControlFramer().feed(d) if isinstance(m, Extensions))
    challenge = next(m for d in link.tcp_to_viewer for m in ControlFramer().feed(d) if isinstance(m, AuthChallenge))
    for part in (offer, Cookie(0xC0FFEE01), grant, challenge):
        t.add(bytes(part))
    t.add(response.unproved())
    digest = t.digest()
    found = []
    for candidate in dictionary:
        spake = SPAKE2_B.from_serialized(impostor_state)
        spake.pw = candidate.encode()
        spake.pw_scalar = spake.params.group.password_to_scalar(candidate.encode())
        try:
            material = spake.finish(response.viewer_message)
        except Exception:
            continue
        if prove(handshake_keys(material, digest, AuthMethod.CODE).viewer_proof, digest) == response.proof:
            found.append(candidate)
    return found


@pytest.mark.parametrize("guess", ["letmein", SECRET])
def test_an_impostor_host_gets_one_online_guess_and_nothing_to_test_offline(guess: str) -> None:
    impostor = host(guess)  # it copies the real host's id, and guesses the code
    saved: list[bytes] = []
    original = impostor.auth.negotiate

    def negotiate(conn: Any, msg: Any, now: float) -> Any:
        out = original(conn, msg, now)
        saved.append(conn.handshake.code._spake.serialize())  # the impostor keeps all its own secrets
        return out

    impostor.auth.negotiate = negotiate  # type: ignore[method-assign]
    link = Link(impostor, ViewerSessionConfig(flags=PAD, secret=SECRET)).run()
    dictionary = ["123456", "password", "letmein", "hunter2", SECRET, "qwerty"]
    found = offline_dictionary_attack(link, saved[0], dictionary)
    if guess == SECRET:  # the attack is real: a right online guess is confirmed
        assert found == [SECRET] and link.streaming
    else:  # a wrong guess confirms nothing, not even itself, and the password is not found
        assert found == []
        assert link.failure is not None and not link.streaming
        assert link.pad_inputs == [] and not link.vs.encrypted


def test_an_impostor_viewer_costs_a_guess_and_learns_nothing() -> None:
    hs = host()
    link = Link(hs, ViewerSessionConfig(flags=PAD, secret="guess-one")).run()
    assert link.failure is not None and "refused the code" in link.failure
    assert hs.auth_failures == 1 and link.closed == ["authentication failed"]
    # All it got back: the host's blinded PAKE message, and a refusal with a zero proof.
    result = next(m for d in link.tcp_to_viewer for m in ControlFramer().feed(d) if isinstance(m, AuthResult))
    assert result.status == 0 and result.proof == bytes(32)
    assert link.conn is None and hs.video_targets(idr=True) == []


def test_an_impostor_host_cannot_fake_a_pairing() -> None:
    real = Link(host(book=Book()), ViewerSessionConfig(flags=PAD, secret=SECRET, pair_as="deck")).run()
    sealed_ok(real)
    (credential,) = real.viewer_paired
    impostor = Link(host("anything", private=False), ViewerSessionConfig(flags=PAD, credentials=(credential,))).run()
    assert impostor.failure is not None and not impostor.vs.encrypted  # no code, no credential for its id
    # Same host id copied, still no credential: its proof fails.
    copy = Link(host("anything", book=Book()), ViewerSessionConfig(flags=PAD, credentials=(credential,))).run()
    assert copy.failure is not None and copy.pad_inputs == []


class CopiedIdentity(HostIdentity):
    """A rogue host's identity: it sends a friend's id and public key (both go in the clear), and signs with the
    only key it has, its own."""

    def __init__(self, victim: HostIdentity) -> None:
        super().__init__()
        self.public, self.host_id = victim.public, victim.host_id


def test_a_paired_host_is_not_accepted_at_another_paired_hosts_address() -> None:
    # The viewer paired with A (here) and with B (elsewhere); B answers at A's address. It is a genuine host with
    # a genuine pairing, yet not the one the person asked for: refused, and told why.
    a_book, b_book, b_identity = Book(), Book(), HostIdentity()
    with_a = Link(host(book=a_book), ViewerSessionConfig(flags=PAD, secret=SECRET, pair_as="deck")).run()
    with_b = Link(
        host(book=b_book, identity=b_identity), ViewerSessionConfig(flags=PAD, secret=SECRET, pair_as="deck")
    ).run()
    for link, book in ((with_a, a_book), (with_b, b_book)):
        (stored,) = link.host_paired
        book.viewers[stored.viewer_id] = PairedViewer(stored.name, stored.credential)
    both = (*with_a.viewer_paired, *with_b.viewer_paired)
    at_a = ViewerSessionConfig(flags=PAD, credentials=both, paired_host_id=HOST_ID)
    b_at_a = Link(host(None, private=True, book=b_book, identity=b_identity), at_a).run()
    assert b_at_a.failure is not None and "not the one this viewer paired with here" in b_at_a.failure
    assert not b_at_a.vs.authenticated and not b_at_a.conn.authenticated and b_at_a.pad_inputs == []
    sealed_ok(Link(host(None, private=True, book=a_book), at_a).run())  # A itself, of course


def test_a_rogue_host_reusing_a_friends_id_neither_pairs_nor_passes_for_the_friend() -> None:
    book = Book()
    friend = Link(host(book=book), ViewerSessionConfig(flags=PAD, secret=SECRET, pair_as="deck")).run()
    (stored,) = friend.host_paired
    book.viewers[stored.viewer_id] = PairedViewer(stored.name, stored.credential)
    (credential,) = friend.viewer_paired
    rogue = CopiedIdentity(HOST_IDENTITY)
    # The victim pairs with the rogue (its own code, typed in good faith): the rogue cannot sign as the friend,
    # so nothing is stored that could replace the friend's pairing.
    duped = Link(
        host("rogue-code", book=Book(), identity=rogue),
        ViewerSessionConfig(flags=PAD, secret="rogue-code", pair_as="deck"),
    ).run()
    assert duped.failure is not None and "identity key" in duped.failure
    assert duped.viewer_paired == [] and not duped.vs.authenticated
    # At the friend's address the rogue gets nowhere either, open or with a code.
    at_friend = ViewerSessionConfig(flags=PAD, credentials=(credential,), paired_host_id=HOST_ID)
    for rogue_host in (
        host(None, identity=rogue),
        host("x" * 8, identity=rogue),
        host(None, private=True, identity=rogue),
    ):
        link = Link(rogue_host, at_friend).run()
        assert link.failure is not None and link.pad_inputs == [] and not link.vs.authenticated
    # The friend still admits the viewer.
    sealed_ok(Link(host(None, private=True, book=book), at_friend).run())


def test_a_code_holder_cannot_take_over_another_viewers_pairing() -> None:
    book = Book()
    first = Link(host(book=book), ViewerSessionConfig(flags=PAD, secret=SECRET, pair_as="deck")).run()
    (stored,) = first.host_paired
    book.viewers[stored.viewer_id] = PairedViewer(stored.name, stored.credential)
    # Someone else with the code pairs under the deck's id (it went in the clear): refused, nothing replaced.
    hs = host(book=book)
    reuse = Link(
        hs,
        ViewerSessionConfig(flags=PAD, secret=SECRET, pair_as="thief"),
        random_bytes=lambda n: stored.viewer_id if n == 16 else secrets.token_bytes(n),
    ).run()
    assert reuse.failure is not None and reuse.host_paired == [] and reuse.viewer_paired == []
    assert hs.discarded["pairing_id_taken"] == 1
    assert book.viewers[stored.viewer_id].credential == stored.credential


def test_the_pake_runs_off_the_loop_and_nothing_follows_for_a_connection_gone_meanwhile() -> None:
    """With ``crypto_off_loop`` (the real host), the PAKE's two slow steps come out as Compute work for the
    shell's worker; the handshake is the same, and what finishes for a connection closed meanwhile does nothing."""
    hs = host(crypto_off_loop=True)
    link = Link(hs, ViewerSessionConfig(flags=PAD, secret=SECRET)).run()
    sealed_ok(link)
    assert link.computed == 2  # the host's PAKE message, then its key
    hs.open(9, PEER, 0.0, cookie=99)
    out = hs.tcp_received(
        9, bytes(Hello()) + bytes(Extensions(1, int(ExtensionFeature.AUTH | ExtensionFeature.ENCRYPTION))), 0.0
    )
    [job] = [o for o in out if isinstance(o, Compute)]
    assert not any(
        isinstance(m, AuthChallenge) for o in out if isinstance(o, SendControl) for m in ControlFramer().feed(o.data)
    )
    hs.close(9)
    assert job.then(job.work(), 0.1) == []  # gone: no challenge, nothing


def test_a_pairing_code_works_once_and_runs_out() -> None:
    hs = host(one_time_code=True, book=Book())
    first = Link(hs, ViewerSessionConfig(flags=PAD, secret=SECRET, pair_as="deck"), conn_id=1).run(now=10.0)
    sealed_ok(first)
    assert len(first.codes_spent) == 1 and "used it" in first.codes_spent[0]
    again = Link(hs, ViewerSessionConfig(flags=PAD, secret=SECRET, pair_as="thief"), conn_id=2).run(now=11.0)
    assert again.failure is not None and again.host_paired == []
    assert any("used or ran out" in line for line in again.host_logs)
    # The host shows the next code; it works, once, for ten minutes from when it was issued.
    hs.auth.issue_code("next-code-1", now=12.0)
    assert Link(hs, ViewerSessionConfig(flags=PAD, secret="next-code-1"), conn_id=3).run(now=13.0).streaming
    hs.auth.issue_code("next-code-2", now=20.0)
    late = Link(hs, ViewerSessionConfig(flags=PAD, secret="next-code-2"), conn_id=4).run(now=20.0 + 601)
    assert late.failure is not None and not late.vs.authenticated
    assert late.codes_spent and "not used within 10 minutes" in late.codes_spent[0]
    # A password (not a pairing code) is for every viewer, every time.
    reusable = host(book=Book())
    for conn_id in (1, 2, 3):
        sealed_ok(Link(reusable, ViewerSessionConfig(flags=PAD, secret=SECRET), conn_id=conn_id).run(now=700.0))


# -- pair once, then pinned keys -------------------------------------------------------------------


def test_pair_once_then_join_without_the_code_and_revoke() -> None:
    book = Book()
    first = Link(host(book=book), ViewerSessionConfig(flags=PAD, secret=SECRET, pair_as="living-room")).run()
    sealed_ok(first)
    (stored,) = first.host_paired
    (credential,) = first.viewer_paired
    assert stored.name == "living-room" and stored.viewer_id == credential.viewer_id
    assert stored.credential == credential.credential and credential.host_id == HOST_ID
    book.viewers[stored.viewer_id] = PairedViewer(stored.name, stored.credential)
    # A private host that takes no code at all admits it, sealed.
    later = Link(host(None, private=True, book=book), ViewerSessionConfig(flags=PAD, credentials=(credential,))).run()
    sealed_ok(later)
    assert later.vs.auth_method == "paired" and later.conn.paired_name == "living-room"
    assert any("paired viewer 'living-room'" in line for line in later.host_logs)
    # Without a pairing or a code, a private host admits nobody.
    stranger = Link(host(None, private=True, book=book), ViewerSessionConfig(flags=PAD)).run()
    assert stranger.failure is not None and "paired viewers only" in stranger.failure
    # Revoked: refused, told so.
    del book.viewers[stored.viewer_id]
    revoked = Link(host(None, private=True, book=book), ViewerSessionConfig(flags=PAD, credentials=(credential,))).run()
    assert revoked.failure is not None and "revoked" in revoked.failure and not revoked.conn


def test_a_wrong_credential_is_refused_but_never_blocks_the_address() -> None:
    book = Book()
    book.viewers[b"v" * 16] = PairedViewer("friend", b"c" * 32)
    hs = host(None, private=True, book=book)
    hs.auth.limiter = FailureLimiter(max_failures=2)
    for i in range(5):
        bad = HostCredential(HOST_ID, b"v" * 16, b"x" * 32)
        link = Link(hs, ViewerSessionConfig(flags=PAD, credentials=(bad,)), conn_id=10 + i).run(now=float(i))
        assert link.failure is not None
    good = HostCredential(HOST_ID, b"v" * 16, b"c" * 32)
    assert Link(hs, ViewerSessionConfig(flags=PAD, credentials=(good,)), conn_id=20).run(now=6.0).streaming


def test_blocked_viewers_are_told_for_how_long_and_paired_friends_still_get_in() -> None:
    book = Book()
    book.viewers[b"v" * 16] = PairedViewer("friend", b"c" * 32)
    hs = host(book=book)
    hs.auth.limiter = FailureLimiter(max_failures=3, window_s=60, block_s=60)
    for i in range(3):
        Link(hs, ViewerSessionConfig(flags=PAD, secret="wrong-guess"), conn_id=10 + i).run(now=float(i))
    right = Link(hs, ViewerSessionConfig(flags=PAD, secret=SECRET), conn_id=20).run(now=5.0)
    assert right.failure is not None and "blocks this address for 57 s" in right.failure
    assert hs.discarded["auth_blocked"] == 1 and hs.auth_failures == 3
    friend = HostCredential(HOST_ID, b"v" * 16, b"c" * 32)
    assert Link(hs, ViewerSessionConfig(flags=PAD, credentials=(friend,)), conn_id=21).run(now=6.0).streaming
    later = Link(hs, ViewerSessionConfig(flags=PAD, secret=SECRET), conn_id=22).run(now=70.0)
    assert later.streaming  # the block expired


# -- after the handshake: injected, replayed and reflected control and datagrams -------------------


def test_injected_control_messages_never_act_and_end_only_that_connection() -> None:
    for injected in (Kick(PAD), RequestKeyframe(), Progress(0, 0, 99, 0, 0)):
        hs = host()
        link = Link(hs, ViewerSessionConfig(flags=PAD, secret=SECRET)).run()
        sealed_ok(link)
        requests = hs.keyframes
        before = requests.__dict__.copy() if hasattr(requests, "__dict__") else None
        out = hs.tcp_received(1, bytes(injected), 1.0)  # plaintext spliced into the sealed stream
        assert any(isinstance(o, CloseConnection) and "did not open" in o.reason for o in out)
        assert hs.connection(1) is None and hs.discarded["control_record_length"] + hs.discarded["control_forged"] == 1
        if before is not None:
            assert requests.__dict__ == before  # no key frame forced for anyone


def test_injected_or_replayed_messages_towards_the_viewer_end_the_connection_and_it_comes_back() -> None:
    for injected in (bytes(AuthResult(0, 0, bytes(32))), bytes(PARAMS)):
        link = Link(host(), ViewerSessionConfig(flags=PAD, secret=SECRET)).run()
        out = link.vs.control_bytes(injected, 1.0)
        assert isinstance(out[-1], SessionFailed) and "did not open" in out[-1].reason
        assert not link.vs.auth_failed  # a broken record, not a refusal
        reconnect = Reconnect()
        assert reconnect.after(streamed=True, auth_failed=False) == pytest.approx(0.25)
    # A record replayed towards the viewer does not open either (the implicit counter moved on).
    link = Link(host(), ViewerSessionConfig(flags=PAD, secret=SECRET)).run()
    hs_out = link.hs.control(1, Kick(PAD), 1.0)  # a sealed redundant-KICK log only; use a sealed NAK instead
    del hs_out
    sealed_record = link.conn.send(Nak()).data
    assert link.vs.control_bytes(sealed_record, 1.0) == []
    out = link.vs.control_bytes(sealed_record, 1.1)
    assert isinstance(out[-1], SessionFailed)


def test_a_forged_refusal_does_not_stop_a_viewer_that_has_streamed_for_good() -> None:
    r = Reconnect()
    assert r.after(streamed=False, auth_failed=True) is None  # a person typing a wrong code is told at once
    r = Reconnect()
    assert r.after(streamed=True, auth_failed=False) == pytest.approx(0.25)
    assert r.after(streamed=False, auth_failed=True) == pytest.approx(5.0)  # a refusal nobody can authenticate
    assert r.after(streamed=False, auth_failed=True, retry_after_s=1e9) == pytest.approx(300.0)  # capped
    assert r.after(streamed=False, auth_failed=False) is not None


def test_an_impostor_at_the_hosts_address_gets_fewer_and_fewer_guesses() -> None:
    """A viewer that once streamed meets refusals in a row (an impostor answering at its host's address gets
    one guess at its code per try): it waits 5 s, then twice as long each time, up to 5 minutes."""
    r = Reconnect()
    r.after(streamed=True, auth_failed=False)
    waits = [r.after(streamed=False, auth_failed=True) for _ in range(9)]
    assert waits == [5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0, 300.0]
    tries_in_an_hour, t = 0, 0.0
    r = Reconnect()
    r.after(streamed=True, auth_failed=False)
    while t < 3600:
        wait = r.after(streamed=False, auth_failed=True)
        assert wait is not None
        t += wait
        tries_in_an_hour += 1
    assert tries_in_an_hour <= 18  # was 720 at one every 5 s
    assert r.after(streamed=True, auth_failed=False) == 0.25 and r.refusals == 0  # streamed again: starts over


def test_an_impostor_who_ends_the_connection_after_the_proof_is_counted_as_a_refusal() -> None:
    """An impostor at the host's address learns from each proof whether its guess at the code was right. Ending the
    connection after the proof instead of refusing it got the viewer back in 2 s (30 guesses a minute, ~43 000 a
    day); it now counts as a refusal, so the viewer waits 5 s, then twice as long each time, up to 5 minutes."""

    def hang_up(direction: str, data: bytes) -> bytes | None:  # the host's answer to the proof never comes
        if direction == "tcp<" and any(isinstance(m, AuthResult) for m in ControlFramer().feed(data)):
            return None
        return data

    link = Link(host("its-guess"), ViewerSessionConfig(flags=PAD, secret=SECRET), tamper=hang_up)
    link.pump(link.vs.start(0.0))
    assert link.failure is None and link.vs.phase is Phase.AUTH  # its proof went; the connection ends here
    (failed,) = link.vs.control_closed()
    assert isinstance(failed, SessionFailed) and link.vs.auth_failed
    sits = Link(host("its-guess"), ViewerSessionConfig(flags=PAD, secret=SECRET), tamper=hang_up).run()  # or it
    assert sits.vs.auth_failed and sits.failure is not None and "the proof unanswered" in sits.failure  # just waits
    assert Link(host(), ViewerSessionConfig(flags=PAD, secret=SECRET)).run().vs.control_closed() == []  # (streaming)
    r = Reconnect()
    r.after(streamed=True, auth_failed=False)  # a viewer that once streamed from its host tries again...
    guesses, t = 0, 0.0
    while t < 86400:
        wait = r.after(streamed=False, auth_failed=link.vs.auth_failed)
        assert wait is not None
        t, guesses = t + wait, guesses + 1
    assert guesses <= 300  # ...but gives the impostor a guess every 5 minutes at most


def test_plaintext_and_replayed_datagrams_never_act_for_a_sealed_viewer() -> None:
    link = Link(host(), ViewerSessionConfig(flags=PAD, secret=SECRET)).run()
    state = GamepadState(1, 0, 0, 0, 0, 0, 0, 0x10)
    assert link.hs.datagram(UDP, bytes(state), 0.2) == [] and link.hs.discarded["plaintext_refused"] == 1
    link.udp(bytes(state))
    assert len(link.pad_inputs) == 1
    replay = link.to_host_udp[-1]
    assert link.hs.datagram(("6.6.6.6", 1), replay, 0.3) == [] and link.hs.discarded["replayed"] == 1
    assert link.conn.udp_address == UDP


def test_keys_and_the_mouse_are_sealed_like_the_pad() -> None:
    flags = PAD | KickFlags.KEYBOARD_MOUSE
    link = Link(host(), ViewerSessionConfig(flags=flags, secret=SECRET)).run()
    sealed_ok(link)
    keys = InputState(1, keys=key_bitmap({17}))
    assert link.hs.datagram(UDP, bytes(keys), 0.2) == [] and link.hs.discarded["plaintext_refused"] == 1
    link.udp(bytes(keys))
    assert [type(o) for o in link.pad_inputs] == [KeyboardMouseInput]


def test_a_held_back_datagram_from_a_forged_source_does_not_redirect_the_stream() -> None:
    link = Link(host(), ViewerSessionConfig(flags=PAD, secret=SECRET)).run()
    held = DatagramToHost(link.vs.udp(bytes(Ping(9))))  # the attacker holds it back: never seen by the host
    victim = ("192.0.2.66", 9999)
    link.hs.datagram(victim, held.data, 1.0)
    assert link.conn.udp_address == UDP  # media still goes to the viewer
    # One small challenge went to the forged address (no more than one per 50 ms, however many replays)...
    challenges = [o for o in link.hs.datagrams_to_send(1.0) if o.address == victim]
    assert len(challenges) == 1 and len(challenges[0].data) == 16 + SEAL_OVERHEAD
    for i in range(20):
        again = DatagramToHost(link.vs.udp(bytes(Ping(10 + i))))
        link.hs.datagram(victim, again.data, 1.001)
        assert not [o for o in link.hs.datagrams_to_send(1.001) if o.address == victim]
    # ... and nobody there can answer it: media never moves.
    assert link.conn.udp_address == UDP


def test_a_viewer_whose_address_changes_keeps_its_stream_after_answering() -> None:
    link = Link(host(), ViewerSessionConfig(flags=PAD, secret=SECRET)).run()
    link.address = ("10.0.0.2", 50000)  # a NAT rebinding
    link.udp(bytes(Ping(1)), now=2.0)
    assert link.conn.udp_address == ("10.0.0.2", 50000) and link.conn.path_validations == 2
    assert any("new address" in line for line in link.host_logs)
    conn = link.hs.connection(1)
    assert conn is not None and conn.udp_address == link.address


def test_a_stale_path_response_from_elsewhere_moves_nothing() -> None:
    link = Link(host(), ViewerSessionConfig(flags=PAD, secret=SECRET)).run()
    held = link.vs.udp(bytes(Ping(2)))
    link.hs.datagram(("192.0.2.1", 1), held, 1.0)
    (challenge,) = [o for o in link.hs.datagrams_to_send(1.0) if o.address == ("192.0.2.1", 1)]
    token = PathChallenge.parse(link.vs.open_datagram(challenge.data) or b"").token
    # The real viewer's answer, carried by the attacker to yet another address: refused.
    from pyrofling.wire import PathResponse

    answer = link.vs.udp(bytes(PathResponse(token)))
    assert link.hs.datagram(("192.0.2.2", 2), answer, 1.01) == []
    assert link.hs.discarded["path_response_unexpected"] == 1 and link.conn.udp_address == UDP


def test_random_datagrams_never_authenticate() -> None:
    link = Link(host(), ViewerSessionConfig(flags=PAD, secret=SECRET)).run()
    rng = random.Random(5)
    head = link.to_host_udp[0][:12]
    before = sum(link.hs.discarded.values())
    for n in itertools.islice(itertools.cycle(range(12, 80)), 5_000):
        assert link.hs.datagram(UDP, head + rng.randbytes(n - 12), 1.0) == []
    assert link.pad_inputs == [] and sum(link.hs.discarded.values()) - before == 5_000


@settings(max_examples=60, deadline=None)
@given(st.binary(min_size=0, max_size=400))
def test_random_bytes_on_a_sealed_control_channel_close_it_and_never_act(garbage: bytes) -> None:
    hs = host()
    link = Link(hs, ViewerSessionConfig(flags=PAD, secret=SECRET)).run()
    sealed_ok(link)
    out = hs.tcp_received(1, garbage, 1.0)
    assert not any(isinstance(o, GamepadInput) for o in out) and hs.datagrams_to_send(1.0) == []
    whole_record = len(garbage) >= 2 and (
        not 16 < int.from_bytes(garbage[:2], "little") <= 279
        or len(garbage) >= 2 + int.from_bytes(garbage[:2], "little")
    )
    if whole_record:  # a record (or a length no record has) that did not open: the connection is gone
        assert hs.connection(1) is None and any(isinstance(o, CloseConnection) for o in out)
    else:  # the start of a record: it waits for the rest
        assert hs.connection(1) is not None


def test_a_connection_that_never_authenticates_is_closed() -> None:
    hs = host()
    hs.open(1, PEER, 0.0, cookie=99)
    hs.control(1, Hello(), 0.0)
    assert hs.next_timer() == pytest.approx(10.0)
    out = hs.handle_timer(10.0)
    assert any(isinstance(o, CloseConnection) and "not authenticated" in o.reason for o in out)
    assert hs.connection(1) is None


def test_config_reprs_never_show_secrets() -> None:
    cfg = ViewerSessionConfig(secret=SECRET, credentials=(HostCredential(HOST_ID, b"v" * 16, b"c" * 32),))
    assert SECRET not in repr(cfg) and "6363" not in repr(cfg) and "ccc" not in repr(cfg)
    assert SECRET not in repr(HostSessionConfig(auth_secret=SECRET))
    assert "ccc" not in repr(replace(ViewerPaired(b"v" * 16, "n", b"c" * 32)))
