"""``pyrofling bench stream`` (and ``pyrofling demo``): a real host and real viewers, optionally through netsim.

Every part runs as its own process — ``pyrofling host``, ``pyrofling netsim``,
``pyrofling view --headless`` — so the CPU each one uses is its own and the
bench measures exactly what a person would run.  Each process writes its
statistics as JSON; this module collects them into one row per run.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, AnyStr

#: Default Gilbert–Elliott burst model: P(good→bad), P(bad→good), loss in bad.  ~5 % average loss.
DEFAULT_GE = (0.01, 0.15, 0.8)


@dataclass(frozen=True, slots=True)
class StreamScenario:
    """One run: a host and ``viewers`` viewers; the first goes through netsim when there is loss."""

    width: int = 1280
    height: int = 720
    fps: int = 60
    bitrate_kbits: int = 10_000
    duration_s: float | None = 10.0  # None: until interrupted (the demo)
    loss: float = 0.0  # i.i.d. datagram loss host→viewer
    ge: bool = False  # Gilbert–Elliott bursts (``ge_model``) instead
    #: The bursts' P(good→bad), P(bad→good) and loss in the bad state.
    ge_model: tuple[float, float, float] = DEFAULT_GE
    viewers: int = 1
    fec: str = "auto"  # planner, or "none"
    encoder: str = "libx264"
    preset: str = "ultrafast"
    #: The host's ``--encoder-params`` (the encoder's own options; "": none).
    encoder_params: str = ""
    window: bool = False
    seed: int = 1
    #: Extra uniform delay 0..N ms per datagram host→viewer (through netsim).
    jitter_ms: float = 0.0
    #: One-way delay added in each direction (through netsim): the round trip grows by twice this.
    delay_ms: float = 0.0
    #: Gaussian variation of the host→viewer delay around ``delay_ms``, σ in ms (netsim ``--delay-sigma-ms``).
    delay_sigma_ms: float = 0.0
    #: Link outages host→viewer (netsim ``--outage``): mean seconds between them, shortest and longest, seconds.
    outages: tuple[float, float, float] | None = None
    #: ``pyrofling``: the host and viewer as they are; ``reference``: behave as PyroFling does (the reference's
    #: FEC plan, a viewer without extensions that asks for an IDR on every loss, no reports, no resends).
    policy: str = "pyrofling"
    #: The viewer's ``--recovery`` (key-frame or intra-refresh) and whether it asks for resends.
    recovery: str = "key-frame"
    resends: bool = True
    #: The host's intra-refresh period, seconds (None: its default).
    refresh_s: float | None = None
    #: Extra arguments for the host and for the first viewer (phase lock, refresh clock...).
    host_args: tuple[str, ...] = ()
    view_args: tuple[str, ...] = ()
    #: Environment variables for the host alone (a key it reads from its environment).
    host_env: tuple[tuple[str, str], ...] = ()
    #: Stream ``pyrofling example-game`` through the capture socket instead of the test scene.
    game: bool = False
    #: The viewers judge every picture against the test scene (``view --check-scene``: good and corrupt
    #: refreshes).  It renders the scene and compares it on the decode thread before the picture is ready, so a
    #: bench that times pictures and judges no refresh (``bench latency``) leaves it off: 0.5 ms of every 1080p
    #: picture on the 2-core machine, and its share of the ready times' tail.
    check_scene: bool = True
    #: How the link host→viewer changes over time (netsim ``--schedule``), its queue as time, and its rate from
    #: the start (0: unlimited), Mbit/s.
    schedule: str | None = None
    queue_ms: float | None = None
    rate_mbits: float = 0.0
    #: Give the host side (host, game) one CPU and the viewers another, as two machines would have: on a small
    #: machine their threads otherwise take turns on the same cores and each one's tail grows the other's.
    #: netsim's relay gets a CPU of its own where there are enough (:func:`split_cpus`).
    pin_cpus: bool = False
    #: Time a fixed piece of work beside the run (:mod:`~pyrofling.bench.pace_meter`): spells when the whole
    #: machine ran slow, which stretch every stage at once.
    pace_meter: bool = False
    #: The host's descriptor limit (``ulimit -n``; None: as it is), and its log kept (``result["host_log"]``: its
    #: size and lines) instead of shown.
    host_nofile: int | None = None
    host_log: bool = False
    #: netsim lists which datagrams host→viewer it dropped (``result["netsim"]["down"]["dropped_at"]``).
    record_drops: bool = False

    @property
    def lossy(self) -> bool:
        """Whether the first viewer goes through netsim."""
        return (
            self.loss > 0
            or self.ge
            or self.jitter_ms > 0
            or self.delay_ms > 0
            or self.delay_sigma_ms > 0
            or self.outages is not None
            or self.schedule is not None
            or self.rate_mbits > 0
        )

    def label(self) -> str:
        net = []
        if self.ge:
            net.append("GE bursts")
        elif self.loss:
            net.append(f"iid {self.loss:.1%}")
        if self.outages:
            mean_s, low_s, high_s = self.outages
            length = f"{low_s * 1000:g}" if low_s == high_s else f"{low_s * 1000:g}-{high_s * 1000:g}"
            net.append(f"{length} ms outages every {mean_s:g} s")
        if self.delay_ms:
            net.append(f"+{self.delay_ms:g} ms each way")
        if self.delay_sigma_ms:
            net.append(f"delay σ {self.delay_sigma_ms:g} ms")
        if self.jitter_ms:
            net.append(f"jitter {self.jitter_ms:g} ms")
        if self.rate_mbits:
            net.append(f"link {self.rate_mbits:g} Mbit/s")
        if self.schedule:
            net.append(f"link schedule '{self.schedule}'")
        return (
            f"{self.height}p{self.fps} {self.bitrate_kbits / 1000:g} Mbit/s, {self.viewers} viewer(s), "
            f"{', '.join(net) or 'loopback'}, {self.policy} policy"
            + ("" if self.recovery == "key-frame" else f", {self.recovery} recovery")
            + ("" if self.resends else ", no resends")
            + ("" if self.refresh_s is None else f", refresh {self.refresh_s:g} s")
        )


def free_port() -> int:
    """A port free for both TCP and UDP on loopback right now."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
            t.bind(("127.0.0.1", 0))
            port = t.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                try:
                    u.bind(("127.0.0.1", port))
                except OSError:
                    continue
            return port
    raise OSError("no free port")


#: The fewest CPUs the viewers' half must have for netsim's relay to take one of them for itself.
RELAY_OWN_CPU_FROM = 4


@dataclass(frozen=True, slots=True)
class CpuSplit:
    """Which CPUs each side of a pinned run may use."""

    host: set[int]  # the host and the game it streams
    viewers: set[int]
    #: netsim's relay: a CPU of its own where the viewers can spare one, else the host side's.  On the host's
    #: CPUs its wake-ups, one per datagram, take the encoder's CPU in the middle of a frame.
    relay: set[int]


def split_cpus(cpus: set[int] | None = None) -> CpuSplit:
    """``cpus`` (default: those this process may use) split in two halves, host side and viewers, and the relay's
    own CPU taken from the viewers' end where they have :data:`RELAY_OWN_CPU_FROM` or more.  ValueError with
    fewer than two."""
    every = sorted(os.sched_getaffinity(0) if cpus is None else cpus)
    if len(every) < 2:
        raise ValueError(f"pinning host and viewer to their own CPUs needs two; this process may use {len(every)}")
    half = len(every) // 2
    host, viewers = every[:half], every[half:]
    if len(viewers) >= RELAY_OWN_CPU_FROM:
        return CpuSplit(set(host), set(viewers[:-1]), {viewers[-1]})
    return CpuSplit(set(host), set(viewers), set(host))


def _pinned(proc: subprocess.Popen[AnyStr], cpus: set[int] | None) -> subprocess.Popen[AnyStr]:
    """Keep ``proc`` on ``cpus`` (None: anywhere).  Set at once after the start, before the interpreter has
    started a thread, so every thread it starts inherits it."""
    if cpus is not None:
        with contextlib.suppress(ProcessLookupError):  # it already exited: its error is reported as usual
            os.sched_setaffinity(proc.pid, cpus)
    return proc


def _cli() -> list[str]:
    return [sys.executable, "-m", "pyrofling"]


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def format_live(viewers: list[dict[str, Any]], elapsed_s: float) -> str:
    v = viewers[0]
    lat = v.get("latency_ms_median")
    latency = f"{lat:5.1f} ms" if lat is not None else "    - ms"  # no picture decoded yet
    return (
        f"{elapsed_s:6.1f} s  shown {v.get('frames_shown', 0):6d}  lost {v.get('packets_lost_video', 0):4d}  "
        f"FEC recovered {v.get('packets_recovered', 0):4d}  key requests {v.get('keyframe_requests', 0):3d}  "
        f"{v.get('received_mbits', 0):5.1f} Mbit/s  latency {latency}  "
        f"freeze max {v.get('max_freeze_ms', 0):5.0f} ms"
    )


def run_scenario(
    scenario: StreamScenario,
    *,
    live: Callable[[list[dict[str, Any]], float], str | None] | None = None,
    settle_s: float = 1.0,
    alongside: Callable[[int, int], dict[str, Any]] | None = None,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """Run host, netsim (when lossy) and viewers; return the collected statistics. ``live(viewers' statistics,
    seconds)`` is asked each second for a line to show (None: none). ``alongside(host_port, host_pid)``, if given,
    runs in a thread of this process from when the viewers start (an attacker, in ``bench security``); what it
    returns is ``result["alongside"]``. TimeoutError when the viewers have not ended ``timeout_s`` after they
    started; every process is gone when this returns or raises."""
    with tempfile.TemporaryDirectory(prefix="pyrofling-bench-") as tmp:
        return _run(scenario, Path(tmp), live, settle_s, alongside, timeout_s)


def _run(
    sc: StreamScenario,
    tmp: Path,
    live: Callable[[list[dict[str, Any]], float], str | None] | None,
    settle_s: float,
    alongside: Callable[[int, int], dict[str, Any]] | None = None,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    beside: dict[str, Any] = {}
    beside_thread: threading.Thread | None = None
    procs: list[subprocess.Popen[bytes]] = []
    host_port = free_port()
    host_json = tmp / "host.json"
    host_cmd = [
        *_cli(),
        "host",
        "-q",
        "--port",
        str(host_port),
        "--width",
        str(sc.width),
        "--height",
        str(sc.height),
        "--fps",
        str(sc.fps),
        "--bitrate-kbits",
        str(sc.bitrate_kbits),
        "--encoder",
        sc.encoder,
        "--preset",
        sc.preset,
        "--stats-json",
        str(host_json),
    ]
    if sc.policy == "reference":
        host_cmd += ["--fec-planner", "reference", "--rate-policy", "fixed"]
    else:
        host_cmd += ["--no-fec"] if sc.fec == "none" else ["--fec-planner", sc.fec]
    if sc.refresh_s is not None:
        host_cmd += ["--refresh-s", str(sc.refresh_s)]
    if sc.encoder_params:
        host_cmd += ["--encoder-params", sc.encoder_params]
    host_cmd += list(sc.host_args)
    capture_socket = str(tmp / "capture.sock")
    if sc.game:
        host_cmd += ["--source", "capture", "--capture-socket", capture_socket, "--immediate-encode"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    netsim_out = tmp / "netsim.json"
    services = procs  # what runs until the viewers are done: host, relay, game
    meter = None
    stack = contextlib.ExitStack()  # what the run opened (the host's log)
    if sc.pace_meter:
        from pyrofling.bench.pace_meter import PaceMeter

        meter = PaceMeter((sc.duration_s or 3600) + 60, tmp / "pace.json")
    try:
        cpus = split_cpus() if sc.pin_cpus else None
        host_cpus, viewer_cpus = (cpus.host, cpus.viewers) if cpus else (None, None)
        host_log = stack.enter_context((tmp / "host.log").open("wb")) if sc.host_log else None
        limit = sc.host_nofile
        procs.append(
            _pinned(
                subprocess.Popen(
                    host_cmd,
                    env={**env, **dict(sc.host_env)},
                    stderr=host_log,
                    preexec_fn=None
                    if limit is None
                    else lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)),
                ),
                host_cpus,
            )
        )
        view_port = host_port
        netsim: subprocess.Popen[bytes] | None = None
        if sc.lossy:
            view_port = free_port()
            while view_port == host_port:  # the host may not have bound its own yet
                view_port = free_port()
            net_cmd = [
                *_cli(),
                "netsim",
                "--upstream",
                f"127.0.0.1:{host_port}",
                "--listen",
                f"127.0.0.1:{view_port}",
                "--seed",
                str(sc.seed),
                "--json",
            ]
            net_cmd += ["--ge", ",".join(map(str, sc.ge_model))] if sc.ge else ["--loss", str(sc.loss)]
            if sc.record_drops:
                net_cmd.append("--record-drops")
            if sc.jitter_ms > 0:
                net_cmd += ["--jitter-ms", str(sc.jitter_ms)]
            if sc.delay_ms > 0:
                net_cmd += ["--delay-ms", str(sc.delay_ms), "--up-delay-ms", str(sc.delay_ms)]
            if sc.delay_sigma_ms > 0:
                net_cmd += ["--delay-sigma-ms", str(sc.delay_sigma_ms)]
            if sc.outages is not None:
                mean_s, low_s, high_s = sc.outages
                net_cmd += ["--outage", f"{mean_s},{low_s * 1000},{high_s * 1000}"]
            if sc.rate_mbits > 0:
                net_cmd += ["--rate-mbits", str(sc.rate_mbits)]
            if sc.schedule is not None:
                net_cmd += ["--schedule", sc.schedule]
            if sc.queue_ms is not None:
                net_cmd += ["--queue-ms", str(sc.queue_ms)]
            with netsim_out.open("wb") as out:
                netsim = _pinned(subprocess.Popen(net_cmd, env=env, stdout=out), cpus.relay if cpus else None)
            procs.append(netsim)
        # The relay starts beside the host (it reaches the host only once a viewer comes): a second less per run.
        _wait_for_port(host_port, procs[0], timeout_s=30)
        if sc.game:
            game_cmd = [*_cli(), "example-game", "-q", "--headless", "--capture-socket", capture_socket,
                        "--width", str(sc.width), "--height", str(sc.height),
                        "--stats-json", str(tmp / "game.json")]  # fmt: skip
            procs.append(_pinned(subprocess.Popen(game_cmd, env=env), host_cpus))
        if netsim is not None:
            _wait_for_port(view_port, netsim, timeout_s=15)
        viewer_files = [tmp / f"viewer{i}.json" for i in range(sc.viewers)]
        viewers = []
        for i, path in enumerate(viewer_files):
            port = view_port if i == 0 else host_port
            cmd = [*_cli(), *viewer_args(sc, i, port, path, live=live is not None)]
            viewers.append(_pinned(subprocess.Popen(cmd, env=env), viewer_cpus))
        services = list(procs)
        procs.extend(viewers)
        started = time.monotonic()
        if alongside is not None:
            run_beside = alongside
            host_pid = procs[0].pid
            beside_thread = threading.Thread(target=lambda: beside.update(run_beside(host_port, host_pid)), daemon=True)
            beside_thread.start()
        _watch(viewers, viewer_files, started, live, timeout_s)
        if beside_thread is not None:
            beside_thread.join(timeout=60)
        # Viewers are done: let the host see them leave, then stop it and the relay.
        time.sleep(min(settle_s, 0.5))
        stop_processes(services, procs)
    finally:
        kill_leftovers(procs)
        stack.close()
        if meter is not None:
            meter.stop()
    host = _read_json(host_json) or {}
    viewer_stats = [_read_json(f) or {} for f in viewer_files]
    net = _read_json(netsim_out) if sc.lossy else None
    game = _read_json(tmp / "game.json") if sc.game else None
    if game is not None:
        game.pop("present_times", None)
    result: dict[str, Any] = {"scenario": asdict(sc), "host": host, "viewers": viewer_stats, "netsim": net}
    result["game"] = game
    if alongside is not None:
        result["alongside"] = beside
    if sc.host_log:
        text = (tmp / "host.log").read_bytes()
        result["host_log"] = {
            "bytes": len(text),
            "lines": text.count(b"\n"),
            "last": text[-2000:].decode(errors="replace"),
        }
    if meter is not None:
        result["machine_pace"] = meter.result()
    return result


def viewer_args(sc: StreamScenario, index: int, port: int, stats: Path, *, live: bool) -> list[str]:
    """``pyrofling view``'s arguments for the scenario's viewer ``index`` (0: the one measured, through the relay
    where there is one). Its statistics are rewritten each second only for a ``live`` line: a player's viewer
    writes none while it plays, and the write held the viewer's loop 1.0-2.8 ms once a second (960x540 at 144 fps
    on the 2-core machine), the datagrams then arriving waiting behind it."""
    args = ["view", f"pyro://127.0.0.1:{port}", "-q", "--stats-json", str(stats)]
    if live:
        args += ["--stats-interval", "1"]
    if not sc.window or index > 0:
        args.append("--headless")
    if not sc.game and sc.check_scene:
        args.append("--check-scene")  # judge every refresh against the scene
    if sc.policy == "reference":
        args.append("--native")
    else:
        args += ["--recovery", sc.recovery] + ([] if sc.resends else ["--no-resend"])
    if index == 0:
        args += list(sc.view_args)
        if sc.game and not sc.window:
            args += ["--gamepad-source", "sweep"]  # no keyboard without a window: steer the ball anyway
    if sc.duration_s is not None:
        args += ["--duration", str(sc.duration_s)]
    return args


def stop_processes(interrupt: list[subprocess.Popen[bytes]], wait_for: list[subprocess.Popen[bytes]]) -> None:
    """Ctrl-C the long-running ones (host, relay) so they write their statistics, then wait for all."""
    for p in interrupt:
        p.send_signal(signal.SIGINT)
    for p in wait_for:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=15)


def kill_leftovers(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def _watch(
    viewers: list[subprocess.Popen[bytes]],
    files: list[Path],
    started: float,
    live: Callable[[list[dict[str, Any]], float], str | None] | None,
    timeout_s: float | None = None,
) -> None:
    tty = sys.stderr.isatty()
    shown = False
    try:
        while any(v.poll() is None for v in viewers):
            time.sleep(0.1 if live is None else 1.0)
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                raise TimeoutError(f"the viewers had not ended {timeout_s:g} s after they started")
            if live is not None:
                stats = [_read_json(f) or {} for f in files]
                line = live(stats, time.monotonic() - started)
                if line is not None:
                    print(("\r" + line) if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)
                    shown = True
    except KeyboardInterrupt:
        for v in viewers:
            if v.poll() is None:
                v.send_signal(signal.SIGINT)
        for v in viewers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                v.wait(timeout=10)
    if shown and tty:
        print(file=sys.stderr)


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], *, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{' '.join(map(str, proc.args))!r} exited with {proc.returncode}")  # type: ignore[arg-type]
        with socket.socket() as s:
            s.settimeout(0.2)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listened on port {port} within {timeout_s:g} s")


# --------------------------------------------------------------------------------------------
# Rows and the table
# --------------------------------------------------------------------------------------------


def cell(x: Any, spec: str = ".1f") -> str:
    """One table cell: the number in ``spec``, or a dash when there is none."""
    return "—" if x is None else format(x, spec)


def median_of(values: list[Any]) -> float | None:
    """The median of the values that were measured (None where a run had none); None if there are none."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    """One row of the bench table from a run's raw statistics."""
    sc = result["scenario"]
    host = result["host"]
    views = result["viewers"]
    v = views[0] if views else {}
    duration = sc["duration_s"] or v.get("elapsed_s") or 1.0
    expected = duration * sc["fps"]
    sent = host.get("frames_encoded", 0)
    shown = v.get("frames_shown", 0)
    received_packets = v.get("packets_video", 0)
    lost_after = v.get("packets_lost_video", 0)
    recovered = v.get("packets_recovered", 0)
    lost_before = None
    net = result.get("netsim")
    if net:
        lost_before = net["down"]["dropped"]
    encode = host.get("encode_ms_median") or 0.0
    convert = host.get("convert_ms_median") or 0.0
    render = host.get("render_ms_median") or 0.0
    decode = v.get("decode_ms_median") or 0.0
    host_cpu = 100 * host.get("cpu_s", 0) / max(host.get("elapsed_s", 1), 1e-6)
    quality = v.get("presentation", {}).get("quality", {})
    sent_bytes = max(1, host.get("bytes_sent", 0))
    return {
        "label": StreamScenario(**sc).label(),
        "duration_s": duration,
        "frames_sent": sent,
        "frames_shown": shown,
        "shown_pct": 100 * shown / max(1, received_packets + lost_after) if shown else 0.0,
        "shown_of_expected_pct": 100 * shown / max(1.0, expected),
        "viewers_shown": [x.get("frames_shown", 0) for x in views],
        "packets_complete_pct": 100 * received_packets / max(1, received_packets + lost_after),
        "datagrams_dropped_by_netsim": lost_before,
        "packets_lost_after_fec": lost_after,
        "packets_recovered_by_fec": recovered,
        "keyframes_forced": host.get("keyframes_forced", 0),
        "keyframes_forced_for_loss": host.get("keyframes_forced_for_loss", 0),
        "keyframe_requests": v.get("keyframe_requests", 0),
        "good_refreshes_pct": quality.get("good_refreshes_pct"),
        "refreshes": quality.get("refreshes"),
        "corrupt_refreshes": quality.get("corrupt_refreshes"),
        "stale_refreshes": quality.get("stale_refreshes"),
        "freezes": quality.get("freezes"),
        "longest_freeze_ms": quality.get("longest_freeze_ms"),
        "repair_share_pct": 100
        * (host.get("repair_bytes_sent", 0) - host.get("audio_repair_bytes_sent", 0))
        / sent_bytes,
        "audio_repair_share_pct": 100 * host.get("audio_repair_bytes_sent", 0) / sent_bytes,
        "resent_share_pct": 100 * host.get("resent_bytes", 0) / sent_bytes,
        "resent_datagrams": host.get("resent_datagrams", 0),
        "max_freeze_ms": v.get("max_freeze_ms", 0.0),
        "frames_concealed": v.get("frames_concealed", 0),
        "max_unshown_frames": v.get("max_unshown_frames", 0),
        "freezes_over_250ms": v.get("freezes_over_250ms", 0),
        "bitrate_mbits": host.get("encoded_mbits", 0.0),
        "host_cpu_pct": host_cpu,
        "viewer_cpu_pct": [100 * x.get("cpu_s", 0) / max(x.get("elapsed_s", 1), 1e-6) for x in views],
        "frames_skipped_by_host": host.get("frames_skipped", 0),
        "decode_queue_max": v.get("decode_queue_max", 0),
        "decode_queue_overflows": v.get("decode_queue_overflows", 0),
        "render_ms": render,
        "convert_ms": convert,
        "encode_ms": encode,
        "decode_ms": decode,
        "latency_ms_median": v.get("latency_ms_median"),
        "latency_ms_p95": v.get("latency_ms_p95"),
        "latency_bound_ms": render + convert + encode + decode + 3.0,
        "connect_to_first_frame_ms": (v.get("connect_to_first_frame_ms") or [None])[0],
        "reconnects": v.get("reconnects", 0),
        "viewer_discarded": v.get("discarded", {}),
    }


def add_extra_viewer_cost(rows: list[dict[str, Any]]) -> None:
    """Host CPU per extra viewer, against the first row with fewer viewers and the same video."""
    for row, sc in ((r, r["_scenario"]) for r in rows):
        base = next(
            (
                b
                for b in rows
                if b["_scenario"].viewers < sc.viewers and replace(b["_scenario"], viewers=sc.viewers) == sc
            ),
            None,
        )
        if base is not None:
            extra = sc.viewers - base["_scenario"].viewers
            row["host_cpu_pct_per_extra_viewer"] = (row["host_cpu_pct"] - base["host_cpu_pct"]) / extra


def format_table(rows: list[dict[str, Any]]) -> str:
    def f(x: Any, spec: str = ".1f") -> str:
        return "-" if x is None else format(x, spec)

    lines = []
    for r in rows:
        lines.append(f"== {r['label']}, {r['duration_s']:g} s")
        if r.get("good_refreshes_pct") is not None:
            lines.append(
                f"  refreshes: {f(r['good_refreshes_pct'], '.2f')} % good of {r['refreshes']}; corrupt "
                f"{r['corrupt_refreshes']}, stale {r['stale_refreshes']}; freezes (not good >= 50 ms) "
                f"{r['freezes']}, longest {f(r['longest_freeze_ms'], '.0f')} ms"
            )
        lines.append(
            f"  sent bytes: {f(r['repair_share_pct'])} % video FEC repair, {f(r['audio_repair_share_pct'])} % audio "
            f"FEC repair, {f(r['resent_share_pct'])} % resends ({r['resent_datagrams']} datagrams)"
        )
        lines.append(
            f"  frames: sent {r['frames_sent']}, shown {r['frames_shown']} ({f(r['shown_of_expected_pct'])} % of "
            f"{r['duration_s']:g} s x fps); per viewer {r['viewers_shown']}; host skipped {r['frames_skipped_by_host']}"
        )
        lines.append(
            f"  packets: {f(r['packets_complete_pct'], '.2f')} % complete; datagrams dropped by netsim "
            f"{f(r['datagrams_dropped_by_netsim'], 'd') if r['datagrams_dropped_by_netsim'] is not None else '-'}, "
            f"recovered by FEC {r['packets_recovered_by_fec']}, lost after FEC {r['packets_lost_after_fec']}"
        )
        lines.append(
            f"  key frames forced {r['keyframes_forced']} ({r['keyframes_forced_for_loss']} for loss), "
            f"viewer requests {r['keyframe_requests']}; longest still picture {f(r['max_freeze_ms'], '.0f')} ms, "
            f"freezes > 250 ms: {r['freezes_over_250ms']}, most frames in a row unshown {r['max_unshown_frames']}; "
            f"concealed frames shown {r['frames_concealed']}; "
            f"reconnects {r['reconnects']}"
        )
        extra = r.get("host_cpu_pct_per_extra_viewer")
        lines.append(
            f"  bitrate {f(r['bitrate_mbits'], '.2f')} Mbit/s; CPU host {f(r['host_cpu_pct'])} %"
            + (f" (+{f(extra)} % per extra viewer)" if extra is not None else "")
            + f", viewer(s) {', '.join(f(c) for c in r['viewer_cpu_pct'])} %; decode queue max "
            f"{r['decode_queue_max']}, overflows {r['decode_queue_overflows']}"
        )
        lines.append(
            f"  time per frame (median ms): render {f(r['render_ms'], '.2f')}, convert {f(r['convert_ms'], '.2f')}, "
            f"encode {f(r['encode_ms'], '.2f')}, decode {f(r['decode_ms'], '.2f')}"
        )
        lines.append(
            f"  capture -> decoded latency: median {f(r['latency_ms_median'], '.2f')} ms, p95 "
            f"{f(r['latency_ms_p95'], '.2f')} ms (bound: render+convert+encode+decode+3 = "
            f"{f(r['latency_bound_ms'], '.2f')} ms); connect -> first frame {f(r['connect_to_first_frame_ms'])} ms"
        )
    return "\n".join(lines)
