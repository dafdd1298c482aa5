"""``pyrofling bench security``: what authentication and sealing cost the host and the viewer.

Real processes, as in :mod:`pyrofling.bench.stream`: a host and a headless
viewer with no secret (``open``), with a password (``sealed``: SPAKE2, then the
control channel and every datagram AES-GCM), and with a stored pairing
(``paired``: pinned keys, the host ``--private``).  The modes take turns round by
round, and the report gives each mode's median host CPU, viewer CPU and latency
next to the open host's.  Then handshakes alone: ``handshakes`` connections per
way in, each timed from the TCP connection to the stream's parameters (both
ends on this machine, one event loop).
"""

from __future__ import annotations

import asyncio
import secrets
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from pyrofling.bench.stream import StreamScenario, cell, median_of, run_scenario, summarize
from pyrofling.core.host.admission import ChallengeBudget, ConnectionBudget
from pyrofling.core.viewer.auth import HostCredential

BENCH_SECRET = "bench-secret-not-for-use"
#: Mode → (host arguments, viewer arguments); PAIRING_DIR is replaced by a pairing made for the bench.
MODES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "open": ((), ()),
    "sealed": (("--password", BENCH_SECRET, "--pairing-dir", "PAIRING_DIR"), ("--password", BENCH_SECRET)),
    "paired": (("--private", "--pairing-dir", "PAIRING_DIR"), ("--pairing-dir", "PAIRING_DIR")),
}
DEFAULT_MODES = ("open", "sealed", "paired")


def check_modes(modes: list[str]) -> str | None:
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        return f"unknown mode(s) {', '.join(unknown)}: choose from {', '.join(MODES)}"
    if "open" not in modes:
        return "the modes must include open, the baseline the others are compared with"
    return None


def make_pairing(directory: Path) -> None:
    """A host and a viewer that have paired, in one directory (host.json and viewer.json), as pyrofling pair
    leaves them."""
    from pyrofling.pairing import HostPairings, ViewerPairings

    host = HostPairings(directory)
    viewer_id, credential = secrets.token_bytes(16), secrets.token_bytes(32)
    host.add(viewer_id, "bench", credential)
    ViewerPairings(directory).add(HostCredential(host.identity().host_id, viewer_id, credential), "127.0.0.1:0")


def run_security_bench(
    base: StreamScenario,
    modes: list[str],
    rounds: int,
    progress: Callable[[str], None] = lambda _: None,
    handshakes: int = 20,
) -> dict[str, Any]:
    runs = []
    with tempfile.TemporaryDirectory(prefix="pyrofling-pairing-") as tmp:
        make_pairing(Path(tmp))
        for r in range(rounds):
            for mode in modes:
                host_args, view_args = (tuple(tmp if a == "PAIRING_DIR" else a for a in args) for args in MODES[mode])
                progress(f"round {r + 1}/{rounds}: {mode} ({base.duration_s:g} s)")
                raw = run_scenario(replace(base, host_args=host_args, view_args=view_args))
                row = summarize(raw)
                viewer = raw["viewers"][0] if raw["viewers"] else {}
                row.update(
                    mode=mode,
                    round=r + 1,
                    auth=raw["host"].get("auth", {}),
                    security=viewer.get("security", {}),
                    handshake_ms=viewer.get("handshake_ms_median"),
                )
                runs.append(row)
        progress(f"handshakes: {handshakes} per way in")
        timed = asyncio.run(time_handshakes(Path(tmp), handshakes)) if handshakes else {}
    return {
        "scenario": base.label(),
        "modes": summarize_modes(runs, modes),
        "handshakes": timed,
        "runs": runs,
    }


async def time_handshakes(pairing_dir: Path, count: int) -> dict[str, Any]:
    """Median and worst handshake per way in, on loopback (TCP connected to CODEC_PARAMETERS): an open host,
    then a host with a password and pairings, joined with the password and with pinned keys. One address asks, so
    the handshakes keep to the pace the host admits one address's connections and challenges at."""
    from pyrofling.wire import KickFlags

    out: dict[str, Any] = {}
    ways: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
        ("open host", {}, {}),
        ("password", {"password": BENCH_SECRET}, {"password": BENCH_SECRET}),
        ("pinned keys", {"password": BENCH_SECRET, "pairing_dir": pairing_dir}, {"pairing_dir": pairing_dir}),
    ]
    for way, host_extra, view_extra in ways:
        host, task = await _small_host(**host_extra)
        times = []
        # The host's budgets for one address: connections (8 at once, then 4 a second), and with a secret
        # challenges (4 at once, then 2 a second).
        connections, challenges = ConnectionBudget(), ChallengeBudget()
        burst, rate = connections.per_prefix_burst, connections.per_prefix_rate_s
        if host_extra:
            burst = min(burst, challenges.per_prefix_burst, challenges.total_burst)
            rate = min(rate, challenges.per_prefix_rate_s, challenges.total_rate_s)
        started = time.monotonic()
        try:
            for i in range(count):
                if i >= burst:
                    due = started + (i - burst + 1.2) / rate
                    await asyncio.sleep(max(0.0, due - time.monotonic()))
                times += await _one_handshake(host.port or 0, KickFlags.GAMEPAD, view_extra)
        finally:
            host.stop()
            await asyncio.wait_for(task, 15)
        out[way] = {
            "count": len(times),
            "median_ms": statistics.median(times) if times else None,
            "max_ms": max(times) if times else None,
        }
    return out


async def _small_host(**extra: Any) -> tuple[Any, asyncio.Task[Any]]:
    from pyrofling.server.encoder import EncoderConfig
    from pyrofling.server.host import Host, HostConfig

    encoder = EncoderConfig(width=160, height=120, fps=30, bitrate_kbits=300)
    host = Host(HostConfig(port=0, encoder=encoder, status_interval_s=0, virtual_pad="none", **extra))
    task = asyncio.create_task(host.run())
    await asyncio.wait_for(host.ready.wait(), 15)
    return host, task


async def _one_handshake(port: int, flags: Any, extra: dict[str, Any]) -> list[float]:
    from pyrofling.client.config import ViewerConfig
    from pyrofling.client.viewer import Viewer

    viewer = Viewer(ViewerConfig(host="127.0.0.1", port=port, flags=flags, reconnect=False, **extra))
    run = asyncio.create_task(viewer.run())
    started = time.monotonic()
    while not viewer.handshake_ms and not run.done() and time.monotonic() - started < 5:
        await asyncio.sleep(0.002)
    viewer.stop()
    await asyncio.wait_for(run, 10)
    return list(viewer.handshake_ms)[:1]


def summarize_modes(runs: list[dict[str, Any]], modes: list[str]) -> list[dict[str, Any]]:
    out = []
    for mode in modes:
        rows = [r for r in runs if r["mode"] == mode]
        out.append(
            {
                "mode": mode,
                "runs": len(rows),
                "host_cpu_pct": median_of([r["host_cpu_pct"] for r in rows]),
                "viewer_cpu_pct": median_of([r["viewer_cpu_pct"][0] for r in rows if r["viewer_cpu_pct"]]),
                "latency_ms_median": median_of([r["latency_ms_median"] for r in rows]),
                "latency_ms_p95": median_of([r["latency_ms_p95"] for r in rows]),
                "shown_of_expected_pct": median_of([r["shown_of_expected_pct"] for r in rows]),
                "bitrate_mbits": median_of([r["bitrate_mbits"] for r in rows]),
                "authenticated": sum(r["auth"].get("successes", 0) for r in rows),
                "sealed_runs": sum(bool(r["security"].get("sealed")) for r in rows),
                "handshake_ms": median_of([r["handshake_ms"] for r in rows if r["handshake_ms"] is not None]),
                "auth_failures": sum(r["auth"].get("failures", 0) for r in rows),
                "viewer_refused": sum(
                    sum(v for k, v in r["viewer_discarded"].items() if k.startswith("sealed_")) for r in rows
                ),
            }
        )
    base = next(m for m in out if m["mode"] == "open")
    for m in out:
        if m is base:
            continue
        for key in ("host_cpu_pct", "viewer_cpu_pct"):
            if base[key] and m[key] is not None:
                m[f"extra_{key}"] = 100 * (m[key] / base[key] - 1)
        if base["latency_ms_median"] is not None and m["latency_ms_median"] is not None:
            m["extra_latency_ms"] = m["latency_ms_median"] - base["latency_ms_median"]
    return out


def format_table(result: dict[str, Any]) -> str:
    def pct(x: Any) -> str:
        return "—" if x is None else f"{x:+.1f} %"

    lines = [
        f"{result['scenario']}; medians over {result['modes'][0]['runs']} run(s) per mode",
        f"{'mode':<10} {'host CPU %':>10} {'vs open':>9} {'viewer CPU %':>12} {'vs open':>9} "
        f"{'latency med/p95 ms':>19} {'Δ latency':>10} {'shown %':>8} {'sealed':>7} {'handshake':>10} {'refused':>8}",
    ]
    for m in result["modes"]:
        dlat = m.get("extra_latency_ms")
        lines.append(
            f"{m['mode']:<10} {cell(m['host_cpu_pct']):>10} {pct(m.get('extra_host_cpu_pct')):>9} "
            f"{cell(m['viewer_cpu_pct']):>12} {pct(m.get('extra_viewer_cpu_pct')):>9} "
            f"{cell(m['latency_ms_median'], '.2f') + ' / ' + cell(m['latency_ms_p95'], '.2f'):>19} "
            f"{'—' if dlat is None else f'{dlat:+.2f} ms':>10} {cell(m['shown_of_expected_pct']):>8} "
            f"{str(m['sealed_runs']) + '/' + str(m['runs']):>7} {cell(m['handshake_ms']) + ' ms':>10} "
            f"{m['viewer_refused']:>8}"
        )
    lines.append("refused: datagrams the viewer could not open (forged, replayed, or plaintext on a sealed session)")
    if result.get("handshakes"):
        lines.append("")
        lines.append(
            f"{'handshake':<14} {'count':>6} {'median ms':>10} {'max ms':>8}   (TCP connected → stream parameters)"
        )
        for way, h in result["handshakes"].items():
            lines.append(f"{way:<14} {h['count']:>6} {cell(h['median_ms'], '.1f'):>10} {cell(h['max_ms'], '.1f'):>8}")
    return "\n".join(lines)
