"""``pyrofling bench input``: how long a pad state takes from the viewer's send to the host's virtual pad.

A real host (``pyrofling host``, streaming its test scene, with ``--gamepad-trace``)
and a real client (``pyrofling view --headless`` decoding the stream, or
``pyrofling gamepad``) whose synthetic pad (``--gamepad-source sweep``) changes
on every send, so every state that arrives moves the virtual pad.  The client logs
each state's sequence number and send time, the host each state it applied to the
pad with the time right after the write; both are ``CLOCK_MONOTONIC``, one clock
for every process on the machine.  Optionally through ``pyrofling netsim`` with
jitter and loss on the viewer → host direction.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pyrofling.bench.stream import _cli, _read_json, _wait_for_port, free_port, kill_leftovers, stop_processes
from pyrofling.seqnum import seq16_delta

CASES = ("loopback", "netsim")


@dataclass(frozen=True, slots=True)
class InputScenario:
    label: str
    #: Through netsim with this jitter (0..N ms) and loss on the viewer → host direction.
    netsim: bool = False
    jitter_ms: float = 0.0
    loss: float = 0.0


@dataclass(frozen=True, slots=True)
class InputBenchConfig:
    duration_s: float = 10.0
    #: view: a headless viewer decoding the stream sends the pad; gamepad: the gamepad-only client.
    client: str = "view"
    width: int = 1280
    height: int = 720
    fps: int = 60
    bitrate_kbits: int = 10_000
    interval_ms: float = 4.0
    scenarios: tuple[InputScenario, ...] = ()


def standard_scenarios(cases: Iterable[str], *, jitter_ms: float, loss: float) -> tuple[InputScenario, ...]:
    out = []
    for case in cases:
        if case == "loopback":
            out.append(InputScenario("loopback"))
        elif case == "netsim":
            label = f"netsim jitter 0-{jitter_ms:g} ms, loss {loss:.0%}"
            out.append(InputScenario(label, netsim=True, jitter_ms=jitter_ms, loss=loss))
        else:
            raise ValueError(f"unknown case {case!r}; choose from {', '.join(CASES)}")
    return tuple(out)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def unwrap(seqs: Iterable[int]) -> list[int]:
    """16-bit sequence numbers in arrival order → a running count (a run longer than 4 min wraps)."""
    out: list[int] = []
    for s in seqs:
        out.append(s if not out else out[-1] + seq16_delta(s, out[-1] & 0xFFFF))
    return out


def match(sent: list[dict[str, Any]], applied: list[dict[str, Any]]) -> dict[str, Any]:
    """Latencies of the applied states (send → pad write), and how many sent states never reached the pad."""
    send_t = dict(zip(unwrap(r["seq"] for r in sent), (r["t"] for r in sent), strict=True))
    applied = [r for r in applied if r.get("seq") is not None]
    first = unwrap([sent[0]["seq"], *(r["seq"] for r in applied)])[1:] if sent and applied else []
    latencies = []
    for n, r in zip(first, applied, strict=True):
        t = send_t.get(n)
        if t is not None:
            latencies.append((r["t"] - t) * 1000)
    return {
        "sent": len(sent),
        "applied": len(applied),
        "matched": len(latencies),
        "latency_ms": latencies,
    }


def run_one(cfg: InputBenchConfig, sc: InputScenario, tmp: Path) -> dict[str, Any]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    host_port = free_port()
    trace, sends = tmp / "trace.jsonl", tmp / "sends.jsonl"
    host_json, client_json, netsim_out = tmp / "host.json", tmp / "client.json", tmp / "netsim.json"
    host_cmd = [*_cli(), "host", "-q", "--port", str(host_port), "--width", str(cfg.width), "--height",
                str(cfg.height), "--fps", str(cfg.fps), "--bitrate-kbits", str(cfg.bitrate_kbits), "--no-audio",
                "--gamepad-trace", str(trace), "--stats-json", str(host_json)]  # fmt: skip
    procs: list[subprocess.Popen[bytes]] = []
    netsim = None
    try:
        procs.append(subprocess.Popen(host_cmd, env=env))
        _wait_for_port(host_port, procs[0], timeout_s=30)
        port = host_port
        if sc.netsim:
            port = free_port()
            net_cmd = [*_cli(), "netsim", "--upstream", f"127.0.0.1:{host_port}", "--listen", f"127.0.0.1:{port}",
                       "--json", "--up-jitter-ms", str(sc.jitter_ms), "--up-loss", str(sc.loss)]  # fmt: skip
            with netsim_out.open("wb") as out:
                netsim = subprocess.Popen(net_cmd, env=env, stdout=out)
            procs.append(netsim)
            _wait_for_port(port, netsim, timeout_s=15)
        client = [*_cli(), cfg.client, f"127.0.0.1:{port}", "-q", "--duration", str(cfg.duration_s),
                  "--gamepad-source", "sweep", "--gamepad-log", str(sends), "--gamepad-interval-ms",
                  str(cfg.interval_ms), "--stats-json", str(client_json)]  # fmt: skip
        if cfg.client == "view":
            client += ["--headless", "--no-audio"]
        viewer = subprocess.Popen(client, env=env)
        procs.append(viewer)
        viewer.wait(timeout=cfg.duration_s + 60)
        stop_processes(procs[:-1], procs)
    finally:
        kill_leftovers(procs)
    result = match(read_jsonl(sends), read_jsonl(trace))
    result["host"] = _read_json(host_json) or {}
    result["client"] = _read_json(client_json) or {}
    result["netsim"] = _read_json(netsim_out) if sc.netsim else None
    return result


def summarize(sc: InputScenario, result: dict[str, Any]) -> dict[str, Any]:
    lat = result["latency_ms"]
    pad = result["host"].get("gamepad", {})
    verdicts = pad.get("verdicts", {})
    return {
        "label": sc.label,
        "scenario": asdict(sc),
        "sent": result["sent"],
        "applied": result["applied"],
        # Sent but never applied: lost on the way, or arrived after a newer state and dropped as stale.
        "stale_dropped": verdicts.get("stale_seq", 0),
        "lost_pct": (
            100 * (result["sent"] - result["applied"] - verdicts.get("stale_seq", 0)) / result["sent"]
            if result["sent"]
            else None
        ),
        "latency_ms_median": statistics.median(lat) if lat else None,
        "latency_ms_p90": float(np.percentile(lat, 90)) if lat else None,
        "latency_ms_p99": float(np.percentile(lat, 99)) if lat else None,
        "latency_ms_max": max(lat) if lat else None,
        "pad": pad.get("pad"),
        "host_cpu_s": result["host"].get("cpu_s"),
        "frames_encoded": result["host"].get("frames_encoded"),
        "latency_ms_samples": lat[-5000:],
    }


def run(cfg: InputBenchConfig, *, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    rows = []
    for sc in cfg.scenarios:
        if progress is not None:
            progress(f"running {sc.label} for {cfg.duration_s:g} s ...")
        with tempfile.TemporaryDirectory(prefix="pyrofling-input-") as tmp:
            started = time.monotonic()
            rows.append(summarize(sc, run_one(cfg, sc, Path(tmp))))
            rows[-1]["wall_s"] = time.monotonic() - started
    return {"config": {k: v for k, v in asdict(cfg).items() if k != "scenarios"}, "rows": rows}


def format_table(result: dict[str, Any]) -> str:
    def f(x: Any, spec: str = ".2f") -> str:
        return "-" if x is None else format(x, spec)

    cfg = result["config"]
    head = (
        f"input → virtual pad, {cfg['client']} client, {cfg['height']}p{cfg['fps']} stream, "
        f"a state every {cfg['interval_ms']:g} ms (and on every change)\n"
    )
    lines = [
        f"{'run':36} {'sent':>7} {'applied':>8} {'lost':>6} {'stale':>6} {'median':>8} {'p90':>8} {'p99':>8} {'max':>8}"
    ]
    for r in result["rows"]:
        lines.append(
            f"{r['label']:36} {r['sent']:>7} {r['applied']:>8} {f(r['lost_pct'], '.1f'):>5}% {r['stale_dropped']:>6} "
            f"{f(r['latency_ms_median']):>5} ms {f(r['latency_ms_p90']):>5} ms {f(r['latency_ms_p99']):>5} ms "
            f"{f(r['latency_ms_max']):>5} ms"
        )
    pads = {r["pad"] for r in result["rows"] if r.get("pad")}
    tail = f"\nvirtual pad: {', '.join(sorted(pads))}" if pads else ""
    return head + "\n".join(lines) + tail
