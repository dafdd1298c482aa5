"""``pyrofling bench security``: what authentication and sealed datagrams cost the host and the viewer.

Real processes, as in :mod:`pyrofling.bench.stream`: a host and a headless
viewer with no secret (``open``), with a password (``sealed``: authenticated,
every datagram AES-GCM), and with a password and ``--no-encrypt``
(``auth-only``). The modes take turns round by round, and the report gives
each mode's median host CPU, viewer CPU and latency next to the open host's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pyrofling.bench.stream import StreamScenario, median_of, run_scenario, summarize

BENCH_SECRET = "bench-secret-not-for-use"
#: Mode → (host arguments, viewer arguments).
MODES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "open": ((), ()),
    "sealed": (("--password", BENCH_SECRET), ("--password", BENCH_SECRET, "--require-auth")),
    "auth-only": (("--password", BENCH_SECRET, "--no-encrypt"), ("--password", BENCH_SECRET)),
}
DEFAULT_MODES = ("open", "sealed")


def check_modes(modes: list[str]) -> str | None:
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        return f"unknown mode(s) {', '.join(unknown)}: choose from {', '.join(MODES)}"
    if "open" not in modes:
        return "the modes must include open, the baseline the others are compared with"
    return None


def run_security_bench(
    base: StreamScenario, modes: list[str], rounds: int, progress: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    runs = []
    for r in range(rounds):
        for mode in modes:
            host_args, view_args = MODES[mode]
            progress(f"round {r + 1}/{rounds}: {mode} ({base.duration_s:g} s)")
            raw = run_scenario(replace(base, host_args=host_args, view_args=view_args))
            row = summarize(raw)
            row.update(mode=mode, round=r + 1, auth=raw["host"].get("auth", {}))
            runs.append(row)
    return {"scenario": base.label(), "modes": summarize_modes(runs, modes), "runs": runs}


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
    def f(x: Any, spec: str = ".1f") -> str:
        return "—" if x is None else format(x, spec)

    def pct(x: Any) -> str:
        return "—" if x is None else f"{x:+.1f} %"

    lines = [
        f"{result['scenario']}; medians over {result['modes'][0]['runs']} run(s) per mode",
        f"{'mode':<10} {'host CPU %':>10} {'vs open':>9} {'viewer CPU %':>12} {'vs open':>9} "
        f"{'latency med/p95 ms':>19} {'Δ latency':>10} {'shown %':>8} {'authenticated':>13} {'refused':>8}",
    ]
    for m in result["modes"]:
        dlat = m.get("extra_latency_ms")
        lines.append(
            f"{m['mode']:<10} {f(m['host_cpu_pct']):>10} {pct(m.get('extra_host_cpu_pct')):>9} "
            f"{f(m['viewer_cpu_pct']):>12} {pct(m.get('extra_viewer_cpu_pct')):>9} "
            f"{f(m['latency_ms_median'], '.2f') + ' / ' + f(m['latency_ms_p95'], '.2f'):>19} "
            f"{'—' if dlat is None else f'{dlat:+.2f} ms':>10} {f(m['shown_of_expected_pct']):>8} "
            f"{m['authenticated']:>13} {m['viewer_refused']:>8}"
        )
    lines.append("refused: datagrams the viewer could not open (forged, replayed, or plaintext on a sealed session)")
    return "\n".join(lines)
