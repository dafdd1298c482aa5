"""What a stranger can make the host do before authenticating, played as the attacker would (pure, virtual
time): bursts of EXTENSIONS, floods of handshakes from one address, a prefix or many, and codes from a blocked
address. The host's work is counted in what it would run (PAKE starts, challenges), not in wall time."""

from __future__ import annotations

from typing import Any

import pytest

import pyrofling.core.host.auth as host_auth
from pyrofling.core.host.admission import ChallengeBudget, ConnectionBudget, TokenBucket
from pyrofling.core.host.keyframes import KeyframePolicy
from pyrofling.core.host.packetizer import Packetizer
from pyrofling.core.host.sessions import CloseConnection, HostSessionConfig, HostSessions, SendControl
from pyrofling.core.secure import FailureLimiter
from pyrofling.core.viewer.connection import Reconnect
from pyrofling.core.viewer.reassembler import ProgressCounters
from pyrofling.core.viewer.session import SessionFailed, ViewerSession, ViewerSessionConfig
from pyrofling.wire import (
    AuthChallenge,
    AuthMethod,
    AuthResult,
    AuthStatus,
    ControlFramer,
    Cookie,
    ExtensionFeature,
    Extensions,
    Hello,
    KickFlags,
)

SECRET = "hunter22"
OFFER = bytes(Extensions(1, int(ExtensionFeature.AUTH | ExtensionFeature.ENCRYPTION)))


def sealed_host(**budget: Any) -> HostSessions:
    hs = HostSessions(
        make_packetizer=Packetizer.for_cookie,
        keyframes=KeyframePolicy(),
        config=HostSessionConfig(auth_secret=SECRET),
    )
    if budget:
        hs.auth.budget = ChallengeBudget(**budget)
    return hs


def replies(outputs: list[Any]) -> list[Any]:
    return [m for o in outputs if isinstance(o, SendControl) for m in ControlFramer().feed(o.data)]


def handshake_start(hs: HostSessions, conn_id: int, address: str, now: float) -> list[Any]:
    """A new connection from ``address`` sends HELLO and EXTENSIONS(AUTH, ENCRYPTION): the host's answers."""
    hs.open(conn_id, (address, 40000 + conn_id), now)
    return replies(hs.tcp_received(conn_id, bytes(Hello()) + OFFER, now))


# -- the budget itself ------------------------------------------------------------------------


def test_a_token_bucket_saves_up_to_its_burst_and_refills_at_its_rate() -> None:
    bucket = TokenBucket.full(2.0, 3, now=0.0)
    for _ in range(3):
        assert bucket.available(0.0)
        bucket.take()
    assert not bucket.available(0.0) and bucket.wait_s(0.0) == pytest.approx(0.5)
    assert bucket.available(0.5) and not bucket.is_full(0.5)
    assert bucket.is_full(100.0) and bucket.tokens == 3  # never more than the burst


def test_the_budget_holds_each_prefix_and_the_host_whatever_the_number_of_addresses() -> None:
    budget = ChallengeBudget(
        per_prefix_rate_s=2.0, per_prefix_burst=6, total_rate_s=25.0, total_burst=25, reserve_burst=5
    )
    assert [budget.take("192.0.2.1", 0.0) for _ in range(6)] == [0.0] * 6
    assert budget.take("192.0.2.1", 0.0) == pytest.approx(0.5)  # its own bucket is empty: half a second
    assert budget.take("2001:db8:1:2::1", 0.0) == 0.0
    assert budget.take("2001:db8:1:2:ffff::9", 0.0) == 0.0  # the same /64: one bucket
    # Many addresses at once: the host's own bucket (25) and its reserve for fresh prefixes (5) are the bound,
    # not the number of prefixes.
    granted = sum(budget.take(f"198.51.100.{i}", 0.0) == 0.0 for i in range(200))
    assert granted == 25 - 8 + 5 and budget.granted == 30
    assert budget.take("192.0.2.200", 0.0) == pytest.approx(1 / 25)
    assert budget.take("192.0.2.1", 0.5) == 0.0  # refilled


def test_a_flood_from_a_few_addresses_leaves_room_for_a_friend() -> None:
    """Eight addresses take every ordinary challenge the host makes; a prefix that asked for nothing lately
    still gets one from the reserve, and the flooders never do."""
    budget = ChallengeBudget()
    now = 0.0
    flooders = [f"192.0.2.{i}" for i in range(8)]
    friend_waits = []
    for step in range(40):  # 10 s, each flooder asking 20 times a second
        now = step * 0.25
        for _ in range(5):
            for a in flooders:
                budget.take(a, now)
        if step % 8 == 7:  # a friend from a new address every 2 s
            friend_waits.append(budget.take(f"203.0.113.{step}", now))
    assert friend_waits == [0.0] * len(friend_waits)
    assert budget.granted <= budget.total_burst + 10 * budget.total_rate_s + len(friend_waits)


def test_the_budget_remembers_a_bounded_number_of_prefixes() -> None:
    budget = ChallengeBudget(total_rate_s=1e9, total_burst=10**9, max_prefixes=10)
    for i in range(10):
        assert budget.take(f"198.51.100.{i}", 0.0) == 0.0
    assert budget.take("203.0.113.1", 0.0) > 0  # the table is full of prefixes still spending
    assert budget.take("203.0.113.1", 10.0) == 0.0  # once theirs refilled, they are forgotten
    assert len(budget._prefixes) == 1


# -- against the host --------------------------------------------------------------------------


def test_a_burst_of_extensions_runs_one_pake_and_ends_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """HELLO and 2048 EXTENSIONS in one 32 KB write: one challenge, then the connection is closed."""
    starts: list[bool] = []
    real = host_auth.CodeExchange

    def counted(secret: str, *, host: bool) -> Any:
        starts.append(host)
        return real(secret, host=host)

    monkeypatch.setattr(host_auth, "CodeExchange", counted)
    hs = sealed_host()
    hs.open(1, ("192.0.2.9", 5000), 0.0)
    out = hs.tcp_received(1, bytes(Hello()) + OFFER * 2048, 0.0)
    assert starts == [True]  # one PAKE, for the first EXTENSIONS
    assert sum(isinstance(m, AuthChallenge) for m in replies(out)) == 1
    assert any(isinstance(o, CloseConnection) and "EXTENSIONS sent twice" in o.reason for o in out)
    assert hs.connection(1) is None and hs.discarded["extensions_repeated"] == 1


def test_connections_opened_too_fast_are_closed_before_anything_is_read() -> None:
    """One address connecting as fast as it can: a viewer's reconnects fit at once, the rest are closed at open
    (no cookie drawn, no slot held); a friend elsewhere is not affected, and the address gets a few a second."""
    hs = sealed_host()
    out = [hs.open(i, ("192.0.2.66", 1000 + i), 0.0) for i in range(1, 101)]
    burst = ConnectionBudget().per_prefix_burst
    too_fast = [c for o in out for c in o if isinstance(c, CloseConnection) and "too fast" in c.reason]
    assert len(too_fast) == 100 - burst == hs.discarded["connection_rate"]
    assert all(o for o in out[burst:])  # every one past the burst closed at once
    assert len(hs.connections) == hs.config.max_pending_per_address  # of the burst, as many as may wait
    assert hs.open(200, ("203.0.113.5", 9), 0.0) == []  # a friend elsewhere
    for conn in hs.connections:
        hs.close(conn.conn_id)
    later = [hs.open(300 + i, ("192.0.2.66", 3000 + i), 1.0) for i in range(10)]
    assert sum(not o for o in later) == ConnectionBudget().per_prefix_rate_s  # then four a second


def test_a_flood_of_handshakes_gets_busy_replies_and_a_friend_elsewhere_still_gets_a_challenge() -> None:
    hs = sealed_host(per_prefix_burst=6, total_burst=25)
    hs.connection_budget = ConnectionBudget(per_prefix_burst=100)  # the connections themselves are let in
    answers = [handshake_start(hs, i, "192.0.2.66", 0.0) for i in range(1, 41)]
    challenged = [a for a in answers if any(isinstance(m, AuthChallenge) for m in a)]
    busy = [m for a in answers for m in a if isinstance(m, AuthResult)]
    assert len(challenged) == 6 and len(busy) == 34
    assert all(r.status == AuthStatus.BLOCKED and r.retry_after_ms == 501 for r in busy)  # "in half a second"
    assert hs.discarded["challenge_budget"] == 34
    assert all(hs.connection(i) is None for i in range(7, 41))  # closed at once: no slot held
    assert any(isinstance(m, AuthChallenge) for m in handshake_start(hs, 100, "203.0.113.5", 0.0))
    # Later the flooding address gets challenges again, at the bucket's rate.
    assert any(isinstance(m, AuthChallenge) for m in handshake_start(hs, 101, "192.0.2.66", 0.5))


def test_a_viewer_told_busy_tries_again_even_before_it_ever_streamed() -> None:
    hs = sealed_host(per_prefix_burst=1)
    handshake_start(hs, 1, "10.0.0.2", 0.0)  # someone else from its address took the one challenge
    vs = ViewerSession(ProgressCounters(), ViewerSessionConfig(flags=KickFlags.VIDEO, secret=SECRET))
    hs.open(2, ("10.0.0.2", 40002), 0.0)
    failed: list[SessionFailed] = []
    pending = vs.start(0.0)
    while pending:
        out = pending.pop(0)
        if isinstance(out, SessionFailed):
            failed.append(out)
        elif hasattr(out, "data") and hs.connection(2) is not None:
            for o in hs.tcp_received(2, out.data, 0.0):
                if isinstance(o, SendControl):
                    pending += vs.control_bytes(o.data, 0.0)
    [busy] = failed
    assert busy.busy and "busy" in busy.reason and busy.retry_after_s == pytest.approx(0.5, abs=0.01)
    reconnect = Reconnect()
    assert reconnect.after(
        streamed=False, auth_failed=True, retry_after_s=busy.retry_after_s, busy=True
    ) == pytest.approx(0.5, abs=0.01)
    # A host (or a forger on the path) that says "busy" forever does not hold it forever.
    delays = [reconnect.after(streamed=False, auth_failed=True, retry_after_s=60, busy=True) for _ in range(20)]
    assert delays[: reconnect.max_busy_replies - 1] == [reconnect.max_busy_wait_s] * (reconnect.max_busy_replies - 1)
    assert delays[-1] is None


def test_a_viewer_turned_away_at_the_door_tries_again_like_a_busy_one() -> None:
    """The host closes a connection from an address that opens them too fast before a word: the viewer (a friend
    behind the same NAT as a flooder) takes it as "busy", not as a wrong code."""
    hs = sealed_host()
    hs.connection_budget = ConnectionBudget(per_prefix_burst=1)
    assert hs.open(1, ("10.0.0.2", 40001), 0.0) == []  # someone else from its address
    vs = ViewerSession(ProgressCounters(), ViewerSessionConfig(flags=KickFlags.VIDEO, secret=SECRET))
    vs.start(0.0)
    refused = hs.open(2, ("10.0.0.2", 40002), 0.0)
    assert [c.conn_id for c in refused if isinstance(c, CloseConnection)] == [2]
    assert vs.turned_away  # it heard nothing before the close
    assert Reconnect().after(streamed=False, auth_failed=False, busy=vs.turned_away) is not None
    heard = ViewerSession(ProgressCounters(), ViewerSessionConfig(flags=KickFlags.VIDEO, secret=SECRET))
    heard.start(0.0)
    heard.control_bytes(bytes(Cookie(5)), 0.0)
    assert not heard.turned_away  # a host that spoke and then closed: not a door turning it away


def test_no_pake_runs_for_an_address_blocked_after_wrong_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    hs = sealed_host(per_prefix_burst=100, total_burst=100)
    hs.auth.limiter = FailureLimiter(max_failures=1)
    hs.auth.limiter.failed("192.0.2.77", 0.0)  # blocked for 60 s
    starts: list[bool] = []
    real = host_auth.CodeExchange

    def counted(secret: str, *, host: bool) -> Any:
        starts.append(host)
        return real(secret, host=host)

    monkeypatch.setattr(host_auth, "CodeExchange", counted)
    challenges = [
        next(m for m in handshake_start(hs, i, "192.0.2.77", 1.0) if isinstance(m, AuthChallenge)) for i in range(8)
    ]
    assert len(starts) == 1  # the one decoy message, made once for every blocked address
    assert len({c.pake_message for c in challenges}) == 1
    assert all(
        c.methods & 1 << AuthMethod.CODE and c.methods & 1 << AuthMethod.PAIRED for c in challenges
    )  # CODE still offered (its answer: "blocked")
    handshake_start(hs, 50, "203.0.113.1", 1.0)  # another address: a real PAKE
    assert len(starts) == 2


# -- slots -------------------------------------------------------------------------------------


def test_idle_connections_from_eight_addresses_and_one_prefix_never_lock_a_friend_out() -> None:
    """8 idle connections from each of 8 addresses fill all 64 slots; a friend still gets in (the oldest idle
    connection makes room), and a /64 counts as one address."""
    hs = sealed_host()
    conn_id = 0
    for a in range(8):
        for _ in range(8):
            conn_id += 1
            assert hs.open(conn_id, (f"192.0.2.{a}", 1000 + conn_id), conn_id * 0.01) == []
    assert len(hs.connections) == 64
    out = hs.open(100, ("203.0.113.9", 5000), 1.0)
    assert [o.conn_id for o in out if isinstance(o, CloseConnection)] == [1]  # the oldest idle one
    assert hs.connection(100) is not None and hs.connection(1) is None and hs.discarded["evicted_idle"] == 1
    # The friend streams (KICKed): however many newcomers follow, it is never the one that makes room.
    hs.connection(100).kicked = True  # type: ignore[union-attr]
    for k in range(64):
        hs.open(300 + k, (f"198.51.100.{k // 8}", 7000 + k), 2.0 + k * 0.01)
    assert hs.connection(100) is not None and hs.discarded["evicted_idle"] == 65
    # One /64 is one address: its 9th pending connection is refused, whichever addresses in it are used.
    hs = sealed_host()
    for k in range(8):
        assert hs.open(k, (f"2001:db8:1:2::{k + 1}", 4000), 0.0) == []
    refused = hs.open(9, ("2001:db8:1:2:ffff::9", 4000), 0.0)
    assert isinstance(refused[0], CloseConnection) and "2001:db8:1:2::/64" in refused[0].reason
    assert hs.open(10, ("2001:db8:1:3::1", 4000), 0.0) == []  # the next /64 is someone else


def test_when_every_slot_streams_a_newcomer_is_refused() -> None:
    hs = HostSessions(make_packetizer=Packetizer.for_cookie, keyframes=KeyframePolicy(), config=HostSessionConfig())
    for k in range(64):
        hs.open(k, (f"10.0.{k // 8}.{k % 8}", 4000), 0.0)
        hs.connection(k).kicked = True  # type: ignore[union-attr]
    out = hs.open(99, ("10.9.9.9", 4000), 1.0)
    assert [o.conn_id for o in out if isinstance(o, CloseConnection)] == [99]
    assert hs.discarded["connection_limit"] == 1 and len(hs.connections) == 64
