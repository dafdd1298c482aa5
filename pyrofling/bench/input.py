"""``pyrofling bench input``: how long a pad state takes from the viewer's send to the host's virtual pad,
and (case ``game``) to the picture that shows the game reacting to it.

A real host (``pyrofling host``, streaming its test scene, with ``--gamepad-trace``)
and a real client (``pyrofling view --headless`` decoding the stream, or
``pyrofling gamepad``) whose synthetic pad (``--gamepad-source sweep``) changes
on every send, so every state that arrives moves the virtual pad.  The client logs
each state's sequence number and send time, the host each state it applied to the
pad with the time right after the write; both are ``CLOCK_MONOTONIC``, one clock
for every process on the machine.  Optionally through ``pyrofling netsim`` with
jitter and loss on the viewer → host direction.

The ``game`` cases stream ``pyrofling example-game --stamp`` through the capture
socket instead of the test scene.  The game writes the newest pad sequence it
has into a frame marker of every frame; the viewer logs each decoded frame's
marker.  A state's input-to-photon latency is from its send to the decode of the
first frame whose marker shows it (or a later state): for states sent at every
moment of a frame, that is what a key press at a random moment waits.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pyrofling.bench.stream import _cli, _read_json, _wait_for_port, free_port, kill_leftovers, stop_processes
from pyrofling.seqnum import seq16_delta

CASES = (
    "loopback",
    "netsim",
    "keys",
    "keys-netsim",
    "rumble",
    "keys-headless",
    "game",
    "game-immediate",
    "game-jit",
    "game-immediate-jit",
)
#: The game cases: (heartbeat or immediate encode) × (the game starts each frame at once or just in time).
GAME_CASES = ("game", "game-immediate", "game-jit", "game-immediate-jit")
NO_PAD_YET = 0xFFFFFFFF  # the example game's marker before its first pad state
#: Seconds at the start of a game run left out of pacing and latency (connecting, phase lock).
WARMUP_S = 2.0


@dataclass(frozen=True, slots=True)
class InputScenario:
    label: str
    #: Through netsim with this jitter (0..N ms) and loss on the viewer → host direction.
    netsim: bool = False
    jitter_ms: float = 0.0
    loss: float = 0.0
    #: Stream the example game through the capture socket (and time input to photon).
    game: bool = False
    immediate: bool = False
    #: The game starts each frame just in time for the heartbeat (CaptureClient just_in_time=True).
    just_in_time: bool = False
    sync: str = "fifo"
    #: What is timed: "pad" (GAMEPAD_STATE), "keys" (INPUT_STATE: keys and the mouse, §7.11) or "rumble" (a
    #: game's rumble request → the viewer's pad, §7.13).
    device: str = "pad"
    #: Keys into the host's own headless desktop, to a program there that shows how many it received (photon).
    desktop: bool = False


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
        elif case == "keys":
            out.append(InputScenario("keys+mouse loopback", device="keys"))
        elif case == "keys-netsim":
            label = f"keys+mouse netsim 0-{jitter_ms:g} ms, {loss:.0%}"
            out.append(InputScenario(label, netsim=True, jitter_ms=jitter_ms, loss=loss, device="keys"))
        elif case == "keys-headless":
            out.append(InputScenario("keys → headless desktop", device="keys", desktop=True))
        elif case == "rumble":
            out.append(InputScenario("rumble: game → viewer's pad", device="rumble"))
        elif case == "game":
            out.append(InputScenario("game, heartbeat encode", game=True))
        elif case == "game-immediate":
            out.append(InputScenario("game, immediate encode", game=True, immediate=True))
        elif case == "game-jit":
            out.append(InputScenario("game just in time, heartbeat", game=True, just_in_time=True))
        elif case == "game-immediate-jit":
            out.append(InputScenario("game just in time, immediate", game=True, immediate=True, just_in_time=True))
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


def photon(sent: list[dict[str, Any]], markers: list[dict[str, Any]], *, after_s: float) -> list[float]:
    """Input-to-photon latencies, ms: each state sent after ``after_s`` → the first decoded frame showing it."""
    marks = [r for r in markers if r.get("whole") and r.get("id") != NO_PAD_YET]
    if not sent or not marks:
        return []
    sends = unwrap(r["seq"] for r in sent)
    shown = np.maximum.accumulate(np.array(unwrap([sent[0]["seq"], *(r["id"] & 0xFFFF for r in marks)])[1:]))
    t_shown = np.array([r["t"] for r in marks])
    out = []
    for n, r in zip(sends, sent, strict=True):
        if r["t"] < after_s:
            continue
        i = int(np.searchsorted(shown, n, side="left"))
        if i < len(shown):
            out.append(float(t_shown[i] - r["t"]) * 1000)
    return out


def desktop_photon(
    sent: list[dict[str, Any]],
    applied: list[dict[str, Any]],
    events: list[dict[str, Any]],
    markers: list[dict[str, Any]],
    *,
    after_s: float,
) -> list[float]:
    """Input to photon through the host's desktop, ms: each sweep step sent after ``after_s`` → the first decoded
    picture whose key count shows it.

    The program (``marker_window --keys``) counts the key events it received; the sweep's step N is its N-th
    key event. The program's count lags the steps by the events the desktop delivered before its window had the
    keyboard; that lag is read off its first key events: the step the host wrote just before each came."""
    steps = {r["seq"]: r["step"] for r in sent if "step" in r}
    writes = sorted((r["t"], steps[r["seq"]]) for r in applied if r.get("seq") in steps)
    keys = [e["t"] for e in events if "key" in e]
    if not writes or not keys:
        return []
    times = np.array([t for t, _ in writes])
    lags = []
    for count, t in enumerate(keys[:100], start=1):
        i = int(np.searchsorted(times, t, side="right")) - 1
        if i >= 0:
            lags.append(writes[i][1] - count)
    if not lags:
        return []
    lag = int(statistics.median(lags))
    shown = [{**m, "id": m["id"] + lag} for m in markers]
    return photon([{"seq": r["step"], "t": r["t"]} for r in sent if "step" in r], shown, after_s=after_s)


def pacing(present_times: list[float], *, after_s: float) -> dict[str, Any]:
    """The game's frame interval after ``after_s``: median, σ, 99th percentile of |interval − median|, ms."""
    times = np.array([t for t in present_times if t >= after_s])
    if len(times) < 3:
        return {"intervals": 0}
    iv = np.diff(times) * 1000
    median = float(np.median(iv))
    return {
        "intervals": len(iv),
        "interval_ms_median": median,
        "interval_ms_sd": float(iv.std()),
        "interval_ms_p99_dev": float(np.percentile(np.abs(iv - median), 99)),
        "interval_ms_max": float(iv.max()),
    }


class RumblingGame:
    """The bench's own Python game on the capture socket: a frame and a rumble request every ``interval_s``,
    each request numbered in its strong magnitude (1, 2, …) and logged with its time."""

    def __init__(self, socket_path: str, log: Path, interval_s: float) -> None:
        self.socket_path, self.log, self.interval_s = socket_path, log, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rumbler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from pyrofling.capture import CaptureClient

        client = CaptureClient(64, 64, path=self.socket_path, name="bench rumbler", reconnect_s=0.05)
        n = 0
        with self.log.open("w") as out:
            try:
                while not self._stop.is_set():
                    client.present(client.acquire())
                    if client.connected:
                        n = n % 65535 + 1
                        t = time.monotonic()
                        client.rumble(n, 0, 50)
                        out.write(json.dumps({"seq": n, "t": t}) + "\n")
                    time.sleep(self.interval_s)
            finally:
                client.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def run_one(cfg: InputBenchConfig, sc: InputScenario, tmp: Path) -> dict[str, Any]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    host_port = free_port()
    trace, sends, markers = tmp / "trace.jsonl", tmp / "sends.jsonl", tmp / "markers.jsonl"
    host_json, client_json, netsim_out = tmp / "host.json", tmp / "client.json", tmp / "netsim.json"
    game_json, capture_socket = tmp / "game.json", str(tmp / "capture.sock")
    keys = sc.device == "keys"
    host_cmd = [*_cli(), "host", "-q", "--port", str(host_port), "--width", str(cfg.width), "--height",
                str(cfg.height), "--fps", str(cfg.fps), "--bitrate-kbits", str(cfg.bitrate_kbits), "--no-audio",
                "--input-trace" if keys else "--gamepad-trace", str(trace), "--stats-json", str(host_json)]  # fmt: skip
    if keys:
        host_cmd.append("--open-keyboard-mouse")  # an open host on loopback: the bench is its only viewer
    rumble = sc.device == "rumble"
    events = tmp / "events.jsonl"
    if sc.desktop:  # a program in the host's desktop shows how many keys it has received
        program = f"{sys.executable} -m pyrofling.bench.marker_window --keys --fps {cfg.fps} --events {events}"
        host_cmd += ["--source", "headless", "--run", program]
    if sc.game or rumble:
        host_cmd += ["--source", "capture", "--capture-socket", capture_socket]
        host_cmd += ["--encode-mode", "immediate" if sc.immediate else "heartbeat"]
    procs: list[subprocess.Popen[bytes]] = []
    netsim = None
    rumbler = None
    started = time.monotonic()
    try:
        procs.append(subprocess.Popen(host_cmd, env=env))
        _wait_for_port(host_port, procs[0], timeout_s=30)
        if sc.game:
            game_cmd = [*_cli(), "example-game", "-q", "--headless", "--stamp", "--capture-socket", capture_socket,
                        "--width", str(cfg.width), "--height", str(cfg.height), "--sync", sc.sync,
                        "--stats-json", str(game_json)]  # fmt: skip
            game_cmd += ["--just-in-time"] if sc.just_in_time else ["--no-just-in-time"]
            procs.append(subprocess.Popen(game_cmd, env=env))
        port = host_port
        if sc.netsim:
            port = free_port()
            net_cmd = [*_cli(), "netsim", "--upstream", f"127.0.0.1:{host_port}", "--listen", f"127.0.0.1:{port}",
                       "--json", "--up-jitter-ms", str(sc.jitter_ms), "--up-loss", str(sc.loss)]  # fmt: skip
            with netsim_out.open("wb") as out:
                netsim = subprocess.Popen(net_cmd, env=env, stdout=out)
            procs.append(netsim)
            _wait_for_port(port, netsim, timeout_s=15)
        client = [*_cli(), "view" if keys else cfg.client, f"127.0.0.1:{port}", "-q", "--duration",
                  str(cfg.duration_s), "--stats-json", str(client_json)]  # fmt: skip
        if rumble:  # the game asks, the host forwards, the viewer's pad logs what reaches it
            rumbler = RumblingGame(capture_socket, sends, cfg.interval_ms / 1000)
            client += ["--gamepad-source", "sweep", "--rumble-log", str(tmp / "rumble.jsonl")]
        elif keys:  # a synthetic player: a key and the mouse change at every send
            client += ["--input-source", "sweep", "--input-log", str(sends), "--input-interval-ms",
                       str(cfg.interval_ms), "--no-gamepad"]  # fmt: skip
        else:
            client += ["--gamepad-source", "sweep", "--gamepad-log", str(sends), "--gamepad-interval-ms",
                       str(cfg.interval_ms)]  # fmt: skip
        if keys or cfg.client == "view":
            client += ["--headless", "--no-audio"]
        if sc.game or sc.desktop:  # the whole chain phase-locked (the viewer's default), game to display
            client += ["--marker-log", str(markers)]
        viewer = subprocess.Popen(client, env=env)
        procs.append(viewer)
        viewer.wait(timeout=cfg.duration_s + 60)
        if rumbler is not None:
            rumbler.stop()
        if sc.game:  # the game first, so it leaves before the host does and never counts a disconnect
            stop_processes(procs[1:2], procs[1:2])
        stop_processes(procs[:-1], procs)
    finally:
        if rumbler is not None:
            rumbler.stop()
        kill_leftovers(procs)
    sent = read_jsonl(sends)
    result: dict[str, Any]
    if rumble:  # matched by the number each request carries in its strong magnitude
        heard = {r["strong"]: r["t"] for r in read_jsonl(tmp / "rumble.jsonl")}
        # Only while someone played: before the viewer held the pad (and after it left) the host has nobody to
        # tell, by design.
        first, last = (min(heard), max(heard)) if heard else (1, 0)
        asked = [r for r in sent if first <= r["seq"] <= last]
        result = {
            "sent": len(asked),
            "applied": len(heard),
            "matched": sum(r["seq"] in heard for r in asked),
            "latency_ms": [(heard[r["seq"]] - r["t"]) * 1000 for r in asked if r["seq"] in heard],
        }
    else:
        result = match(sent, read_jsonl(trace))
    result["host"] = _read_json(host_json) or {}
    result["client"] = _read_json(client_json) or {}
    result["netsim"] = _read_json(netsim_out) if sc.netsim else None
    if sc.game:
        game = _read_json(game_json) or {}
        result["game"] = {k: v for k, v in game.items() if k != "present_times"}
        result["game"].update(pacing(game.get("present_times", []), after_s=started + WARMUP_S + 2.0))
        result["photon_ms"] = photon(sent, read_jsonl(markers), after_s=started + WARMUP_S + 2.0)
    if sc.desktop:
        after_s = started + WARMUP_S + 2.0
        result["photon_ms"] = desktop_photon(sent, read_jsonl(trace), read_jsonl(events), read_jsonl(markers),
                                             after_s=after_s)  # fmt: skip
    return result


def summarize(sc: InputScenario, result: dict[str, Any]) -> dict[str, Any]:
    lat = result["latency_ms"]
    pad = result["host"].get("keyboard_mouse" if sc.device == "keys" else "gamepad", {})
    verdicts = pad.get("verdicts", {}) if sc.device != "rumble" else {}
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
        "pad": pad.get("pad") or pad.get("devices"),
        "host_cpu_s": result["host"].get("cpu_s"),
        "frames_encoded": result["host"].get("frames_encoded"),
        "latency_ms_samples": lat[-5000:],
        **(_game_summary(result) if sc.game else _photon_summary(result) if sc.desktop else {}),
    }


def _photon_summary(result: dict[str, Any]) -> dict[str, Any]:
    ph = result.get("photon_ms", [])
    return {
        "photon_ms_median": statistics.median(ph) if ph else None,
        "photon_ms_p90": float(np.percentile(ph, 90)) if ph else None,
        "photon_ms_p99": float(np.percentile(ph, 99)) if ph else None,
        "photon_samples": len(ph),
    }


def _game_summary(result: dict[str, Any]) -> dict[str, Any]:
    capture = result["host"].get("capture") or {}
    presents = capture.get("presents", 0)
    return {
        **_photon_summary(result),
        "game": result.get("game", {}),
        "capture": capture,
        "heartbeats": result["host"].get("heartbeats"),  # the host's whole run: a FIFO game presents fewer
        "encoded_pct": 100 * capture.get("encoded", 0) / presents if presents else None,
        "present_to_decoded_ms_median": result["client"].get("latency_ms_median"),
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
        f"input → virtual pad (keys+mouse → virtual keyboard and mouse), {cfg['client']} client, "
        f"{cfg['height']}p{cfg['fps']} stream, "
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
    tail = f"\nvirtual devices: {', '.join(sorted(pads))}" if pads else ""
    games = [r for r in result["rows"] if "photon_ms_median" in r]
    if games:
        frame_ms = 1000 / cfg["fps"]
        tail += (
            "\n\ninput to photon: the viewer's send → the game (or the desktop's program) draws it → encoded → decoded "
            "at the viewer (loopback)\n"
            + f"{'run':36} {'median':>8} {'frames':>6} {'p90':>8} {'p99':>8} {'samples':>8}"
        )
        for r in games:
            med = r["photon_ms_median"]
            tail += (
                f"\n{r['label']:36} {f(med):>5} ms {f(med / frame_ms if med else None, '.2f'):>6} "
                f"{f(r['photon_ms_p90']):>5} ms {f(r['photon_ms_p99']):>5} ms {r['photon_samples']:>8}"
            )
        paced = [r for r in games if "game" in r]
        if paced:
            tail += "\n\n" + format_pacing(paced)
    return head + "\n".join(lines) + tail


def format_pacing(rows: list[dict[str, Any]]) -> str:
    """The game's side: frames encoded, its frame interval when paced by the host, present → decoded."""

    def f(x: Any, spec: str = ".2f") -> str:
        return "-" if x is None else format(x, spec)

    out = [
        "game pacing (after the first 4 s): game frames encoded, its frame interval, present → decoded",
        f"{'run':36} {'presents':>8} {'encoded':>8} {'superseded':>10} {'repeats':>7} {'interval':>9} {'σ':>7} "
        f"{'p99 |dev|':>9} {'reconnects':>10} {'to decoded':>10}",
    ]
    for r in rows:
        g, c = r["game"], r["capture"]
        out.append(
            f"{r['label']:36} {c.get('presents', 0):>8} {f(r['encoded_pct'], '.2f'):>7}% {c.get('superseded', 0):>10} "
            f"{c.get('repeats', 0):>7} {f(g.get('interval_ms_median'), '.3f'):>6} ms "
            f"{f(g.get('interval_ms_sd'), '.3f'):>4} ms "
            f"{f(g.get('interval_ms_p99_dev'), '.3f'):>6} ms {g.get('disconnects', 0):>10} "
            f"{f(r['present_to_decoded_ms_median']):>7} ms"
        )
    return "\n".join(out)
