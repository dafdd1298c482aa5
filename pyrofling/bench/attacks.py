"""``pyrofling bench security --attacks``: what a stranger who reaches the port can do to a host with a password.

Each attack runs beside a real stream (a host with a password and pairings, and a
headless viewer with the password that judges every refresh against the scene, as
in :mod:`pyrofling.bench.stream`), from a thread of the bench process that plays
the attacker on loopback. Loopback has a whole /8, so "8 addresses" are
127.0.0.2–127.0.0.9, really distinct sources to the host. In the middle of each
attack a friend joins: a new viewer with the password (and, with idle
connections, one with a stored pairing), timed from the TCP connection to the
stream's parameters.

- ``quiet``: no attack, a friend joins: what a join alone costs the stream (a key frame for the newcomer).
- ``burst``: HELLO and 2048 EXTENSIONS (32 KB) in one write, once a second.
- ``flood``: 8 s of handshakes asked for as fast as they are answered, 4 at a time from each of 8 addresses.
- ``spray``: 8 s of random 64-byte datagrams at the UDP port, 8000 a second from each of 8 addresses.
- ``idle``: 8 connections from each of 8 addresses and 72 more from one address, held open and silent.
- ``reflect``: the attacker takes a cookie on its own TCP connection and sends it, and whatever else, from
  a victim's address (127.0.0.3, which it does not own); the victim counts the bytes both ways. Run against
  an open host, a host with a password and a ``--private`` one, each in this process.
- ``web-origin``, ``web-quic``, ``web-tls``, ``web-idle``: a stranger at the host's web port (``host --web``), a
  friend's browser coming back with its pass meanwhile (:mod:`pyrofling.bench.web_attacks`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from pyrofling.bench.pace_meter import overlaps
from pyrofling.bench.security import BENCH_SECRET, _one_handshake, _small_host, make_pairing
from pyrofling.bench.stream import StreamScenario, cell, free_port, run_scenario, split_cpus, summarize
from pyrofling.bench.web_attacks import IDLE_NOFILE, WEB_ATTACKS, host_args, row_text, run_web_attack
from pyrofling.wire import (
    AuthChallenge,
    AuthResult,
    ControlFramer,
    Cookie,
    ExtensionFeature,
    Extensions,
    Hello,
    Kick,
    KickFlags,
    Ping,
    ProtocolError,
    parse_control,
)

ATTACKS = ("quiet", "burst", "flood", "spray", "idle", "reflect", *WEB_ATTACKS)
#: When the attack starts (the viewer streams by then) and how long it lasts, seconds.
ATTACK_START_S = 3.0
ATTACK_S = 8.0
#: Sources the attacker uses; 127.0.0.1 is the friends'.
ATTACKER_ADDRESSES = tuple(f"127.0.0.{i}" for i in range(2, 10))
ONE_ADDRESS = "127.0.0.10"
#: The flood: handshakes asked for at once from each address; the spray: random datagrams a second from each.
FLOOD_ASKERS = 4
SPRAY_DATAGRAMS_S = 8000
VICTIM = "127.0.0.3"
_OFFER = bytes(Hello()) + bytes(Extensions(1, int(ExtensionFeature.AUTH | ExtensionFeature.ENCRYPTION)))
_EXTENSIONS = _OFFER[len(bytes(Hello())) :]


def check_attacks(attacks: list[str]) -> str | None:
    unknown = [a for a in attacks if a not in ATTACKS]
    return f"unknown attack(s) {', '.join(unknown)}: choose from {', '.join(ATTACKS)}" if unknown else None


def run_attack_bench(
    base: StreamScenario, attacks: list[str], progress: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    reflect: list[dict[str, Any]] = []
    duration = max(base.duration_s or 0.0, ATTACK_START_S + ATTACK_S + 1.0)
    with tempfile.TemporaryDirectory(prefix="pyrofling-pairing-") as tmp:
        pairing_dir = Path(tmp)
        make_pairing(pairing_dir)
        for attack in attacks:
            if attack == "reflect":
                progress("reflect: a cookie sent from a victim's address, open / password / private host")
                reflect = asyncio.run(reflection(pairing_dir))
                continue
            progress(f"{attack}: {ATTACK_S:g} s beside a {duration:g} s stream with a password")
            web: tuple[int, Path] | None = None
            extra: tuple[str, ...] = ()
            if attack in WEB_ATTACKS:
                web = (free_port(), pairing_dir / f"{attack}-link")
                extra = host_args(attack, *web)
            sc = replace(
                base,
                duration_s=duration,
                host_args=("--password", BENCH_SECRET, "--pairing-dir", tmp, *extra),
                view_args=("--password", BENCH_SECRET),
                pace_meter=True,
                host_nofile=IDLE_NOFILE if attack == "web-idle" else None,
                host_log=web is not None,
            )
            raw = _pinned_run(sc, attack, pairing_dir, web)
            row = summarize(raw)
            rows.append(
                {
                    "attack": attack,
                    "good_refreshes_pct": row["good_refreshes_pct"],
                    "longest_freeze_ms": row["longest_freeze_ms"],
                    "max_unshown_frames": row["max_unshown_frames"],
                    "reconnects": row["reconnects"],
                    "frames_shown": row["frames_shown"],
                    "host_cpu_pct": row["host_cpu_pct"],
                    "stale_refreshes": row["stale_refreshes"],
                    "latency_ms_median": row["latency_ms_median"],
                    "latency_ms_p95": row["latency_ms_p95"],
                    "corrupt_refreshes": row["corrupt_refreshes"],
                    "freeze_log": _freeze_log(raw),
                    "lost_refreshes": _lost_refreshes(raw),
                    "lost_in_slow_spells": _lost_in_slow_spells(raw),
                    "machine_slow_ms_per_min": (raw.get("machine_pace") or {}).get("slow_ms_per_minute"),
                    "host_discarded": raw["host"].get("discarded", {}),
                    "attacker": raw.get("alongside", {}),
                    "host_web": raw["host"].get("web"),
                    "host_log": {k: v for k, v in raw.get("host_log", {}).items() if k != "last"} or None,
                }
            )
    return {"scenario": base.label(), "attacks": rows, "reflect": reflect}


def _lost_refreshes(raw: dict[str, Any]) -> list[tuple[float, str]]:
    """(seconds since the attacker's thread started, kind) of each refresh that was not good: before, during or
    after the attack (it runs from ATTACK_START_S for ATTACK_S), or at a friend's join."""
    viewer = raw["viewers"][0] if raw["viewers"] else {}
    started = raw.get("alongside", {}).get("started_monotonic")
    log = viewer.get("presentation", {}).get("quality", {}).get("not_good_log", [])
    return [(round(t - started, 3), kind) for t, kind in log] if started is not None else []


#: A refresh is stale when its picture is over two frames late; a spell this long before it can have made it so.
SLOW_REACH_S = 0.05


def _lost_in_slow_spells(raw: dict[str, Any]) -> int | None:
    """Refreshes that were not good while, or just after, the whole machine ran slow (the pace meter's spells)."""
    pace = raw.get("machine_pace")
    if not pace:
        return None
    viewer = raw["viewers"][0] if raw["viewers"] else {}
    log = viewer.get("presentation", {}).get("quality", {}).get("not_good_log", [])
    return sum(1 for t, _ in log if overlaps(t - SLOW_REACH_S, t, pace.get("spells", [])))


def _freeze_log(raw: dict[str, Any]) -> list[Any]:
    """(seconds since the viewer started, seconds frozen) of each freeze: when, against the attack's timing."""
    viewer = raw["viewers"][0] if raw["viewers"] else {}
    return list(viewer.get("presentation", {}).get("quality", {}).get("freeze_log", []))


#: Where the attacker shares the viewer's CPU (a 2-CPU machine), it runs this much nicer than the viewer.
ATTACKER_NICENESS = 19


def _pinned_run(sc: StreamScenario, attack: str, pairing_dir: Path, web: tuple[int, Path] | None) -> dict[str, Any]:
    """With ``pin_cpus``: the host, the viewer and the attacker each on a third of this process's CPUs (the host
    and viewer split the first two thirds, as :func:`~pyrofling.bench.stream.split_cpus` does), so that what the
    attack costs the host is not the attacker's own work taking the host's CPU. With two CPUs, the host has one
    and the viewer the other, which the attacker shares at nice 19."""
    if not sc.pin_cpus:
        return run_scenario(sc, alongside=_beside(attack, pairing_dir, None, web))
    every = sorted(os.sched_getaffinity(0))
    if len(every) == 2:
        return run_scenario(sc, alongside=_beside(attack, pairing_dir, split_cpus().viewers, web, nice=True))
    if len(every) < 3:
        raise ValueError(f"pinning host, viewer and attacker needs two CPUs; this process may use {len(every)}")
    third = len(every) // 3
    os.sched_setaffinity(0, set(every[: 2 * third]))
    try:
        return run_scenario(sc, alongside=_beside(attack, pairing_dir, set(every[2 * third :]), web))
    finally:
        os.sched_setaffinity(0, set(every))


def _beside(
    attack: str, pairing_dir: Path, cpus: set[int] | None, web: tuple[int, Path] | None, *, nice: bool = False
) -> Callable[[int, int], dict[str, Any]]:
    def run(port: int, pid: int) -> dict[str, Any]:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)  # this thread only: the attacker on CPUs of its own
        if nice:
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), ATTACKER_NICENESS)  # this thread only
        _joins.clear()
        started = time.monotonic()
        time.sleep(ATTACK_START_S)
        if web is not None:
            out = asyncio.run(run_web_attack(attack, web[0], pid, web[1], ATTACK_S))
            out["started_monotonic"] = started
            return out
        plays: dict[str, Callable[[int, Path], Coroutine[Any, Any, dict[str, Any]]]] = {
            "quiet": quiet,
            "burst": bursts,
            "flood": flood,
            "spray": lambda port, d: flood(port, d, askers=0, spray_s=SPRAY_DATAGRAMS_S),
            "idle": idle_connections,
        }
        out = asyncio.run(plays[attack](port, pairing_dir))
        out["friends_joined_at_s"] = [round(t - started, 3) for t in _joins]  # from when the viewer started
        out["started_monotonic"] = started
        return out

    return run


_joins: list[float] = []


async def friend_joins(port: int, pairing_dir: Path | None = None) -> float | None:
    """A new viewer with the password (or the pairing): ms from its TCP connection to the stream, None if never."""
    extra: dict[str, Any] = {"pairing_dir": pairing_dir} if pairing_dir else {"password": BENCH_SECRET}
    _joins.append(time.monotonic())
    times = await _one_handshake(port, KickFlags.VIDEO, extra)
    return times[0] if times else None


async def _connect(port: int, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)), 5)


async def _drain_until_closed(reader: asyncio.StreamReader, timeout_s: float) -> int:
    got = 0
    try:
        async with asyncio.timeout(timeout_s):
            while chunk := await reader.read(65536):
                got += len(chunk)
    except (TimeoutError, OSError):
        pass
    return got


async def quiet(port: int, pairing_dir: Path) -> dict[str, Any]:
    await asyncio.sleep(ATTACK_S / 2)
    return {"friend_join_ms": await friend_joins(port)}


async def bursts(port: int, pairing_dir: Path) -> dict[str, Any]:
    """A 32 KB burst of EXTENSIONS once a second; a friend joins after the first."""
    sent = received = 0
    closed_after_ms: list[float] = []

    async def one() -> None:
        nonlocal sent, received
        reader, writer = await _connect(port, ATTACKER_ADDRESSES[0])
        data = _OFFER + _EXTENSIONS * 2047
        started = time.monotonic()
        writer.write(data)
        sent += len(data)
        received += await _drain_until_closed(reader, 5)
        closed_after_ms.append(1000 * (time.monotonic() - started))
        writer.close()

    await one()
    join = asyncio.create_task(friend_joins(port))
    for _ in range(int(ATTACK_S) - 1):
        await asyncio.sleep(1.0)
        await one()
    return {
        "bursts": len(closed_after_ms),
        "bytes_sent": sent,
        "bytes_received": received,
        "closed_after_ms_median": statistics.median(closed_after_ms),
        "friend_join_ms": await join,
    }


async def _answer(reader: asyncio.StreamReader) -> str:
    """What the host made of a handshake asked for: "challenges", "busy" (AUTH_RESULT) or "no_answer"."""
    framer = ControlFramer()
    try:
        async with asyncio.timeout(2):
            while chunk := await reader.read(4096):
                for msg in framer.feed(chunk):
                    if isinstance(msg, AuthChallenge):
                        return "challenges"
                    if isinstance(msg, AuthResult):
                        return "busy"
    except (TimeoutError, OSError, ProtocolError):
        pass
    return "no_answer"


async def flood(port: int, pairing_dir: Path, *, askers: int = FLOOD_ASKERS, spray_s: int = 0) -> dict[str, Any]:
    """Handshakes asked for from 8 addresses, ``askers`` at a time each, and ``spray_s`` random datagrams a
    second from each, for ATTACK_S; a friend joins halfway."""
    counts = {"connections": 0, "challenges": 0, "busy": 0, "no_answer": 0, "datagrams": 0}
    deadline = time.monotonic() + ATTACK_S

    async def asker(source: str) -> None:
        while time.monotonic() < deadline:
            try:
                reader, writer = await _connect(port, source)
            except (OSError, TimeoutError):
                await asyncio.sleep(0.01)
                continue
            counts["connections"] += 1
            writer.write(_OFFER)
            counts[await _answer(reader)] += 1
            writer.close()

    async def sprayer(source: str) -> None:
        sent = 0
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((source, 0))
            s.setblocking(False)
            started = time.monotonic()
            while (now := time.monotonic()) < deadline:
                due = int((now - started) * spray_s) - sent
                for _ in range(max(0, due)):
                    with contextlib.suppress(BlockingIOError):
                        s.sendto(os.urandom(64), ("127.0.0.1", port))
                    sent += 1
                await asyncio.sleep(0.005)
            counts["datagrams"] += sent

    tasks = [asyncio.create_task(asker(a)) for a in ATTACKER_ADDRESSES for _ in range(askers)]
    if spray_s > 0:
        tasks += [asyncio.create_task(sprayer(a)) for a in ATTACKER_ADDRESSES]
    await asyncio.sleep(ATTACK_S / 2)
    join_ms = await friend_joins(port)
    await asyncio.gather(*tasks)
    return {**counts, "addresses": len(ATTACKER_ADDRESSES), "friend_join_ms": join_ms}


async def idle_connections(port: int, pairing_dir: Path) -> dict[str, Any]:
    """Idle connections from 8 addresses (8 each) and 72 from one; then a paired friend and a password friend."""
    held: list[asyncio.StreamWriter] = []
    readers: list[asyncio.StreamReader] = []
    for source in (*(a for a in ATTACKER_ADDRESSES for _ in range(8)), *([ONE_ADDRESS] * 72)):
        try:
            reader, writer = await _connect(port, source)
        except (OSError, TimeoutError):
            continue
        writer.write(bytes(Hello()))
        held.append(writer)
        readers.append(reader)
    await asyncio.sleep(0.5)
    still_open = await _still_open(readers)
    paired_ms = await friend_joins(port, pairing_dir)
    password_ms = await friend_joins(port)
    await asyncio.sleep(1.0)
    open_after = await _still_open(readers)
    for w in held:
        w.close()
    return {
        "opened": len(held),
        "open_before_friends": still_open,
        "open_after_friends": open_after,
        "paired_join_ms": paired_ms,
        "friend_join_ms": password_ms,
    }


async def _still_open(readers: list[asyncio.StreamReader]) -> int:
    """How many of these connections the host has not closed (what it sent them is read and dropped)."""

    async def closed(reader: asyncio.StreamReader) -> bool:
        try:
            async with asyncio.timeout(0.3):
                while await reader.read(65536):
                    pass
        except TimeoutError:
            return False
        except OSError:  # reset: the host closed it with our bytes unread
            return True
        return True

    return sum(not c for c in await asyncio.gather(*(closed(r) for r in readers)))


class _Victim(asyncio.DatagramProtocol):
    """An address the attacker does not own: counts what the host sends it, and what went out from it."""

    def __init__(self) -> None:
        self.received = 0
        self.sent = 0
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.received += len(data)

    def send(self, data: bytes, port: int) -> None:
        assert self.transport is not None
        self.transport.sendto(data, ("127.0.0.1", port))
        self.sent += len(data)


async def reflection(pairing_dir: Path) -> list[dict[str, Any]]:
    """Per host mode: bytes the host sent a victim's address against bytes that came from it."""
    modes: list[tuple[str, dict[str, Any]]] = [
        ("open", {}),
        ("password", {"password": BENCH_SECRET, "pairing_dir": pairing_dir}),
        ("private", {"private": True, "pairing_dir": pairing_dir}),
    ]
    out = []
    for mode, extra in modes:
        host, task = await _small_host(**extra)
        port = host.port or 0
        loop = asyncio.get_running_loop()
        transport, victim = await loop.create_datagram_endpoint(_Victim, local_addr=(VICTIM, 0))
        victim.transport = transport
        tcp_in = tcp_out = 0
        try:
            reader, writer = await _connect(port, ATTACKER_ADDRESSES[0])
            writer.write(_OFFER)
            tcp_out += len(_OFFER)
            head = await asyncio.wait_for(reader.read(4096), 5)
            tcp_in += len(head)
            cookie = parse_control(head[:16])
            assert isinstance(cookie, Cookie), cookie
            started = time.monotonic()
            while time.monotonic() - started < 3.0:  # the cookie and a ping from the victim; KICK on TCP
                victim.send(bytes(Cookie(cookie.cookie)), port)
                victim.send(bytes(Ping(1)), port)
                victim.send(b"PYRS" + cookie.cookie.to_bytes(8, "little") + os.urandom(64), port)
                kick = bytes(Kick(KickFlags.VIDEO | KickFlags.AUDIO))
                writer.write(kick)
                tcp_out += len(kick)
                await asyncio.sleep(0.05)
            with contextlib.suppress(TimeoutError):
                tcp_in += len(await asyncio.wait_for(reader.read(65536), 0.5))
            writer.close()
        finally:
            transport.close()
            host.stop()
            await asyncio.wait_for(task, 15)
        out.append(
            {
                "mode": mode,
                "bytes_from_victim": victim.sent,
                "bytes_to_victim": victim.received,
                "ratio": victim.received / max(1, victim.sent),
                "attacker_tcp_sent": tcp_out,
                "attacker_tcp_received": tcp_in,
            }
        )
    return out


def format_table(result: dict[str, Any]) -> str:
    lines = [
        f"{result['scenario']}; host with a password; the viewer already streaming when the attack starts",
        f"{'attack':<8} {'good %':>7} {'longest freeze ms':>18} {'unshown in a row':>17} {'reconnects':>10} "
        f"{'host CPU %':>10} {'friend joins ms':>16} {'paired joins ms':>16}   attacker",
    ]
    for r in result["attacks"]:
        a = r["attacker"]
        if r["attack"] == "quiet":
            what = "nothing: a friend joins"
        elif r["attack"] == "burst":
            what = f"{a.get('bursts')} bursts of 32 KB, each closed after {cell(a.get('closed_after_ms_median'))} ms"
        elif r["attack"] in ("flood", "spray"):
            what = (
                f"{a.get('connections')} handshakes asked from {a.get('addresses')} addresses "
                f"({a.get('challenges')} challenged, {a.get('busy')} told busy), {a.get('datagrams')} random "
                "datagrams"
            )
        elif r["attack"] in WEB_ATTACKS:
            what = row_text(r["attack"], a)
        else:
            what = (
                f"{a.get('opened')} idle connections, {a.get('open_before_friends')} still open, "
                f"{a.get('open_after_friends')} after the friends joined"
            )
        lines.append(
            f"{r['attack']:<8} {cell(r['good_refreshes_pct'], '.2f'):>7} {cell(r['longest_freeze_ms']):>18} "
            f"{r['max_unshown_frames']:>17} {r['reconnects']:>10} {cell(r['host_cpu_pct']):>10} "
            f"{cell(a.get('friend_join_ms')):>16} {cell(a.get('paired_join_ms')):>16}   {what}"
        )
        if r["attack"] in WEB_ATTACKS:
            log = r.get("host_log") or {}
            refusals = a.get("friend_refusals") or []
            lines.append(
                f"{'':<8} friend with its pass: {a.get('friend_joins')} joins, median "
                f"{cell(a.get('friend_join_ms_median'))} ms, longest {cell(a.get('friend_join_ms_max'))} ms, "
                f"{len(refusals)} refused ({', '.join(sorted(set(refusals))) or 'none'}); host log "
                f"{log.get('bytes', 0)} bytes in {log.get('lines', 0)} lines; at most "
                f"{a.get('host_descriptors_max')} descriptors open"
            )
        if r.get("lost_in_slow_spells") is not None:
            lines.append(
                f"{'':<8} the whole machine ran slow {cell(r['machine_slow_ms_per_min'])} ms a minute (pace meter); "
                f"{r['lost_in_slow_spells']} of {len(r.get('lost_refreshes', []))} refreshes not good came then"
            )
        if r.get("lost_refreshes"):
            lost = ", ".join(f"{t:.2f} {kind}" for t, kind in r["lost_refreshes"][:40])
            joins = ", ".join(f"{t:.2f}" for t in a.get("friends_joined_at_s", []))
            lines.append(
                f"{'':<8} refreshes not good at (s, attack {ATTACK_START_S:g}–{ATTACK_START_S + ATTACK_S:g}"
                f", friends {joins}): {lost}"
            )
    if result["reflect"]:
        lines.append("")
        lines.append(
            f"{'host':<9} {'bytes from victim':>18} {'bytes to victim':>16} {'ratio':>7}   "
            f"(a cookie, a ping and a sealed-looking datagram every 50 ms for 3 s from {VICTIM})"
        )
        for m in result["reflect"]:
            lines.append(f"{m['mode']:<9} {m['bytes_from_victim']:>18} {m['bytes_to_victim']:>16} {m['ratio']:>7.2f}")
    return "\n".join(lines)
