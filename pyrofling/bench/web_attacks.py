"""``pyrofling bench security --attacks web-…``: a stranger at the host's web port (``host --web``).

Each runs as :mod:`pyrofling.bench.attacks`'s do: beside a real stream that a headless viewer judges at every
refresh, from a thread of the bench process (on the viewer's CPU at nice 19 where the machine has two CPUs, on a
third of its own where it has more). Before the attack a friend's browser opens the host's link and gets its pass;
during it the friend comes back with that pass once a second, timed from its TCP connection to the host's ``hello``
(as the page does, with the page's own ``Origin``), waiting 5 s for it before it counts the visit as refused.
Sources 127.0.0.2 and up are other addresses than the friend's.

- ``web-origin``: a page on another site the friend visits opens WebSockets to the host's web port from the friend's
  own browser (so from the friend's address), 16 held silent and 3 new a second, and guesses the password.
- ``web-quic``: forged QUIC Initials carrying made-up 256-byte Retry tokens (1,280 bytes each), 2,000 a second
  from random sources.
- ``web-tls``: TLS handshakes to the web port (the host on HTTPS), as many as 675 a second from one address.
- ``web-idle``: silent TCP connections, 175 a second from 8 addresses, each held 10 s, the host at ``ulimit -n
  1024``: what it holds open, whether a friend still gets in, and how much its log grew.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import socket
import ssl
import statistics
import time
from pathlib import Path
from typing import Any

from pyrofling.server.crypto_worker import process_cpu_s

WEB_ATTACKS = ("web-origin", "web-quic", "web-tls", "web-idle")
#: The friend's browser, and the attackers' addresses.
FRIEND = "127.0.0.1"
ATTACKERS = tuple(f"127.0.0.{i}" for i in range(2, 10))
#: web-origin: silent connections held, new ones a second, and password guesses.
ORIGIN_HELD = 16
ORIGIN_NEW_S = 3.0
EVIL_ORIGIN = "http://evil.example"
#: web-quic: forged Initials a second.
QUIC_FORGED_S = 2000
#: web-tls: handshakes a second at most, and how many are in flight at once.
TLS_HANDSHAKES_S = 675
TLS_IN_FLIGHT = 32
#: web-idle: silent connections a second, each held this long; the host's descriptor limit.
IDLE_NEW_S = 175
IDLE_HOLD_S = 10.0
IDLE_NOFILE = 1024


def host_args(attack: str, web_port: int, link_file: Path) -> tuple[str, ...]:
    """What the host needs for the attack: its web port, the link written to a file the friend reads."""
    args = ("--web", str(web_port), "--web-link-file", str(link_file))
    return (*args, "--web-https") if attack == "web-tls" else args


class Friend:
    """A browser with the host's link: proves it once, then comes back with its pass, timed."""

    def __init__(self, port: int, link_file: Path, *, tls: bool, patience_s: float = 5.0) -> None:
        self.port, self.link_file, self.tls, self.patience_s = port, link_file, tls, patience_s
        self.resume: str | None = None
        self.joins_ms: list[float] = []
        self.refusals: list[str] = []

    @property
    def origin(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    async def _prove(self, proof: dict[str, str]) -> dict[str, Any] | None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed, InvalidHandshake
        from websockets.typing import Origin

        context = None
        if self.tls:
            context = ssl.create_default_context()
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        scheme = "wss" if self.tls else "ws"
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.patience_s):
                async with connect(
                    f"{scheme}://127.0.0.1:{self.port}/stream",
                    ssl=context,
                    origin=Origin(self.origin),
                    local_addr=(FRIEND, 0),
                    open_timeout=self.patience_s,
                ) as ws:
                    await ws.send(json.dumps({"type": "auth", **proof}))
                    hello = json.loads(await ws.recv())
                    self.joins_ms.append(1000 * (time.monotonic() - started))
                    return dict(hello)
        except ConnectionClosed as closed:
            self.refusals.append(f"{closed.rcvd.code} {closed.rcvd.reason}" if closed.rcvd else "closed")
        except (OSError, TimeoutError, InvalidHandshake, ValueError) as exc:
            self.refusals.append(type(exc).__name__)
        return None

    async def first_visit(self) -> None:
        for _ in range(100):
            with contextlib.suppress(OSError, IndexError):
                token = self.link_file.read_text().split("#t=")[1].split()[0]
                break
            await asyncio.sleep(0.1)
        else:
            self.refusals.append("no link written")
            return
        hello = await self._prove({"token": token})
        self.resume = hello.get("resume") if hello else None

    async def keep_coming_back(self, until: float) -> None:
        """Once a second, with its pass (as a reload does), until ``until`` (monotonic)."""
        while time.monotonic() < until:
            if self.resume is not None:
                await self._prove({"resume": self.resume})
            await asyncio.sleep(1.0)

    def summary(self) -> dict[str, Any]:
        joins = self.joins_ms[1:]  # the first is the link's, before the attack
        return {
            "friend_joins": len(joins),
            "friend_join_ms_median": statistics.median(joins) if joins else None,
            "friend_join_ms_max": max(joins) if joins else None,
            "friend_refusals": self.refusals,
        }


def _descriptors(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


async def run_web_attack(
    attack: str, port: int, pid: int, link_file: Path, attack_s: float, *, friend_patience_s: float = 5.0
) -> dict[str, Any]:
    """The friend's first visit, then ``attack_s`` of the attack with the friend coming back; what each saw.
    ``friend_patience_s``: how long the friend waits for each ``hello`` before it counts a refusal."""
    friend = Friend(port, link_file, tls=attack == "web-tls", patience_s=friend_patience_s)
    await friend.first_visit()
    plays = {"web-origin": _foreign_page, "web-quic": _forged_initials, "web-tls": _tls_handshakes, "web-idle": _idle}
    cpu_before, started = process_cpu_s(pid), time.monotonic()
    peak_fds: list[int] = []

    async def watch_fds() -> None:
        while time.monotonic() < started + attack_s:
            fds = _descriptors(pid)
            if fds is not None:
                peak_fds.append(fds)
            await asyncio.sleep(0.25)

    comeback = asyncio.create_task(friend.keep_coming_back(started + attack_s))
    fds_task = asyncio.create_task(watch_fds())
    out = await plays[attack](port, started + attack_s)
    await comeback
    await fds_task
    elapsed = time.monotonic() - started
    out["host_cpu_during_attack_pct"] = 100 * (process_cpu_s(pid) - cpu_before) / elapsed
    out["host_descriptors_max"] = max(peak_fds) if peak_fds else None
    return {**out, **friend.summary()}


async def _foreign_page(port: int, until: float) -> dict[str, Any]:
    """Another site's page in the friend's browser: WebSockets from the friend's address with its own Origin, never
    proving anything, ORIGIN_HELD kept open (one that the host closes is replaced, at most ORIGIN_NEW_S a second
    once they are all open), every third one guessing the password first."""
    from websockets.asyncio.client import ClientConnection, connect
    from websockets.exceptions import InvalidHandshake
    from websockets.protocol import State
    from websockets.typing import Origin

    counts = {"opened": 0, "refused_at_upgrade": 0, "guesses": 0}
    held: list[ClientConnection] = []

    async def one(guess: str | None) -> None:
        try:
            ws = await asyncio.wait_for(
                connect(f"ws://127.0.0.1:{port}/stream", origin=Origin(EVIL_ORIGIN), local_addr=(FRIEND, 0)), 5
            )
        except (OSError, TimeoutError, InvalidHandshake):
            counts["refused_at_upgrade"] += 1
            return
        counts["opened"] += 1
        if guess is not None:
            counts["guesses"] += 1
            with contextlib.suppress(Exception):
                await ws.send(json.dumps({"type": "auth", "code": guess}))
        held.append(ws)

    n = 0
    for _ in range(ORIGIN_HELD):
        await one(None)
    while time.monotonic() < until:
        held[:] = [ws for ws in held if ws.state is State.OPEN]
        if len(held) < ORIGIN_HELD:
            await one(f"guess-{n}" if n % 3 == 0 else None)
            n += 1
        await asyncio.sleep(1.0 / ORIGIN_NEW_S)
    for ws in held:
        with contextlib.suppress(Exception):
            await ws.close()
    return counts


async def _forged_initials(port: int, until: float) -> dict[str, Any]:
    """Initials with made-up 256-byte tokens, from random loopback sources (nothing proves a source address)."""
    from qh3.h3.connection import H3_ALPN
    from qh3.quic.configuration import QuicConfiguration
    from qh3.quic.connection import QuicConnection

    rng = random.Random(7)
    templates = []
    for _ in range(16):  # a few real Initials, their tokens made up: the server checks the token first
        client = QuicConnection(configuration=QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN))
        client._peer_token = rng.randbytes(256)
        client.connect(("127.0.0.1", port), now=0.0)
        templates.append(b"".join(d for d, _ in client.datagrams_to_send(now=0.0)))
    sockets = []
    for i in range(32):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((f"127.{rng.randrange(1, 255)}.{rng.randrange(0, 255)}.{2 + i}", 0))
        s.setblocking(False)
        sockets.append(s)
    sent, started = 0, time.monotonic()
    try:
        while (now := time.monotonic()) < until:
            due = int((now - started) * QUIC_FORGED_S) - sent
            for _ in range(max(0, due)):
                with contextlib.suppress(BlockingIOError):
                    rng.choice(sockets).sendto(rng.choice(templates), ("127.0.0.1", port))
                sent += 1
            await asyncio.sleep(0.002)
    finally:
        for s in sockets:
            s.close()
    return {"initials_sent": sent, "initials_per_s": sent / max(1e-6, time.monotonic() - started)}


async def _tls_handshakes(port: int, until: float) -> dict[str, Any]:
    """TLS handshakes from one address, up to TLS_HANDSHAKES_S a second, TLS_IN_FLIGHT at once."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    counts = {"asked": 0, "completed": 0, "refused": 0}
    started = time.monotonic()

    async def worker() -> None:
        while (now := time.monotonic()) < until:
            ahead = counts["asked"] - (now - started) * TLS_HANDSHAKES_S
            if ahead > 0:
                await asyncio.sleep(ahead / TLS_HANDSHAKES_S)
                continue
            counts["asked"] += 1
            try:
                _, writer = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", port, ssl=context, local_addr=(ATTACKERS[0], 0)), 5
                )
            except (OSError, TimeoutError, ssl.SSLError):
                counts["refused"] += 1
                continue
            counts["completed"] += 1
            writer.close()

    await asyncio.gather(*(worker() for _ in range(TLS_IN_FLIGHT)))
    elapsed = time.monotonic() - started
    return {**counts, "asked_per_s": counts["asked"] / elapsed, "completed_per_s": counts["completed"] / elapsed}


async def _idle(port: int, until: float) -> dict[str, Any]:
    """Silent connections from the attackers' addresses, IDLE_NEW_S a second, each held IDLE_HOLD_S."""
    loop = asyncio.get_running_loop()
    held: list[tuple[float, socket.socket]] = []
    counts = {"opened": 0, "failed": 0, "closed_by_host": 0}
    started = time.monotonic()
    try:
        while (now := time.monotonic()) < until:
            due = int((now - started) * IDLE_NEW_S) - counts["opened"] - counts["failed"]
            for _ in range(max(0, due)):
                s = socket.socket()
                s.setblocking(False)
                try:
                    s.bind((ATTACKERS[(counts["opened"] + counts["failed"]) % len(ATTACKERS)], 0))
                    with contextlib.suppress(BlockingIOError):
                        s.connect(("127.0.0.1", port))
                except OSError:
                    s.close()
                    counts["failed"] += 1
                    continue
                held.append((now, s))
                counts["opened"] += 1
            while held and now - held[0][0] >= IDLE_HOLD_S:
                held.pop(0)[1].close()
            await asyncio.sleep(0.02)
        for _, s in held:  # how many the host had closed meanwhile (its deadline, or refused at the accept)
            with contextlib.suppress(BlockingIOError, OSError, TimeoutError):
                if await asyncio.wait_for(loop.sock_recv(s, 1), 0.001) == b"":
                    counts["closed_by_host"] += 1
    finally:
        for _, s in held:
            s.close()
    return {**counts, "held_at_end": len(held)}


def row_text(attack: str, a: dict[str, Any]) -> str:
    """What the attacker did, and got, in words (the table's last column)."""
    if attack == "web-origin":
        what = (
            f"another site's page: {a.get('opened', 0)} WebSockets opened, {a.get('refused_at_upgrade', 0)} refused "
            f"at the upgrade, {a.get('guesses', 0)} password guesses"
        )
    elif attack == "web-quic":
        what = f"{a.get('initials_sent', 0)} forged QUIC Initials ({a.get('initials_per_s', 0):.0f} a second)"
    elif attack == "web-tls":
        what = (
            f"{a.get('asked', 0)} TLS handshakes asked ({a.get('asked_per_s', 0):.0f} a second), "
            f"{a.get('completed', 0)} completed"
        )
    else:
        what = (
            f"{a.get('opened', 0)} silent connections held {IDLE_HOLD_S:g} s, {a.get('closed_by_host', 0)} closed "
            "by the host"
        )
    cpu = a.get("host_cpu_during_attack_pct")
    return f"{what}; host CPU during it {cpu:.0f} %" if cpu is not None else what
