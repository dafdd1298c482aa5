"""``pyrofling bench soak``: a host and three viewers left running, watched for leaks, errors and lost frames.

Real processes, as in :mod:`pyrofling.bench.stream`: ``pyrofling host`` (test
scene and tone, password and sealed datagrams unless ``open``), one viewer
through ``pyrofling netsim`` with bursty loss and the others direct, every
viewer playing its audio into a JACK dummy server (a real audio clock).  Every
``sample_s`` the bench reads each process's resident memory and CPU time from
``/proc`` and the counters each one rewrites to its ``--stats-json``.

Memory is judged against the first sample ``warmup_s`` after the process began
(a viewer: its first picture shown; allocators, codec buffers and the statistics
windows fill during the first minutes): every later sample must stay within
``memory_bound_pct`` of it.  Errors are what should never
happen in a healthy run — a process exiting early or failing, encode, decode or
send errors, a reconnect, a warning or error in a log — and are counted apart
from what loss is expected to cost (frames not shown, freezes).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pyrofling.bench.stream import (
    DEFAULT_GE,
    _cli,
    _read_json,
    _wait_for_port,
    free_port,
    kill_leftovers,
    stop_processes,
)

SOAK_SECRET = "soak-secret-not-for-use"
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
#: A log line that is a problem (the processes run with -q: only warnings and errors print).
_PROBLEM = re.compile(r"\b(WARNING|ERROR|CRITICAL|Traceback)\b|: error: |^Fatal Python error")
#: How much of a crashed process's log the report keeps (its stacks, from the command's fault handler).
_CRASH_LINES = 40


@dataclass(frozen=True, slots=True)
class SoakConfig:
    duration_s: float = 1800.0
    width: int = 1280
    height: int = 720
    fps: int = 60
    bitrate_kbits: int = 6000
    viewers: int = 3
    #: i.i.d. loss for the first viewer; 0: Gilbert–Elliott bursts (DEFAULT_GE, ~5 % average).
    loss: float = 0.0
    sample_s: float = 30.0
    warmup_s: float = 120.0
    memory_bound_pct: float = 5.0
    audio: bool = True
    #: Password and sealed datagrams (False: an open host, as the reference).
    secure: bool = True
    seed: int = 1

    def network(self) -> str:
        return f"i.i.d. {self.loss:.1%} loss" if self.loss > 0 else "Gilbert-Elliott bursts (~5 % loss)"


@dataclass(frozen=True, slots=True)
class ProcessUsage:
    rss_bytes: int
    cpu_s: float


def process_usage(pid: int) -> ProcessUsage | None:
    """Resident memory and user+system CPU of a running process, from /proc (None once it is gone)."""
    try:
        statm = Path(f"/proc/{pid}/statm").read_text().split()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": field 3 onwards
    if fields[0] in ("Z", "X"):  # exited, not yet reaped
        return None
    utime, stime = int(fields[11]), int(fields[12])
    return ProcessUsage(int(statm[1]) * _PAGE_BYTES, (utime + stime) / _CLOCK_TICKS)


@contextlib.contextmanager
def _audio_server(enabled: bool) -> Iterator[str | None]:
    if not enabled:
        yield None
        return
    from pyrofling.bench.jack import dummy_jack

    with dummy_jack() as name:
        yield name


def run_soak(cfg: SoakConfig, *, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pyrofling-soak-") as tmp, _audio_server(cfg.audio):
        return _run(cfg, Path(tmp), progress)


def _run(cfg: SoakConfig, tmp: Path, progress: Callable[[str], None]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")  # after the JACK server is up: children find it
    interval = max(1.0, min(cfg.sample_s, 5.0))
    host_port = free_port()
    names = ["host", *(f"viewer{i + 1}" for i in range(cfg.viewers))]
    stats_files = {name: tmp / f"{name}.json" for name in names}
    logs = {name: tmp / f"{name}.log" for name in [*names, "netsim"]}
    host_cmd = [*_cli(), "host", "-q", "--port", str(host_port), "--width", str(cfg.width),
                "--height", str(cfg.height), "--fps", str(cfg.fps), "--bitrate-kbits", str(cfg.bitrate_kbits),
                "--virtual-pad", "none", "--virtual-input", "none", "--stats-json", str(stats_files["host"]),
                "--stats-interval", str(interval)]  # fmt: skip
    host_cmd += ["--password", SOAK_SECRET] if cfg.secure else []
    host_cmd += [] if cfg.audio else ["--no-audio"]
    procs: dict[str, subprocess.Popen[bytes]] = {}
    open_logs = []

    def start(name: str, cmd: list[str], stdout: Any = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
        log_file = logs[name].open("wb")
        open_logs.append(log_file)
        procs[name] = subprocess.Popen(cmd, env=env, stdout=stdout, stderr=log_file)
        return procs[name]

    samples: list[dict[str, Any]] = []
    hung: list[str] = []
    started = time.monotonic()
    try:
        _wait_for_port(host_port, start("host", host_cmd), timeout_s=30)
        relay_port = free_port()
        net_cmd = [*_cli(), "netsim", "--upstream", f"127.0.0.1:{host_port}", "--listen",
                   f"127.0.0.1:{relay_port}", "--seed", str(cfg.seed)]  # fmt: skip
        net_cmd += ["--loss", str(cfg.loss)] if cfg.loss > 0 else ["--ge", ",".join(map(str, DEFAULT_GE))]
        _wait_for_port(relay_port, start("netsim", net_cmd), timeout_s=15)
        for i, name in enumerate(names[1:]):
            port = relay_port if i == 0 else host_port
            cmd = [*_cli(), "view", f"pyro://127.0.0.1:{port}", "-q", "--headless", "--duration", str(cfg.duration_s),
                   "--stats-json", str(stats_files[name]), "--stats-interval", str(interval)]  # fmt: skip
            cmd += ["--password", SOAK_SECRET] if cfg.secure else []
            cmd += [] if cfg.audio else ["--no-audio"]  # audio: JACK_DEFAULT_SERVER points at the dummy server
            start(name, cmd)
        started = time.monotonic()
        viewers = [procs[n] for n in names[1:]]
        previous: dict[str, tuple[float, ProcessUsage]] = {}
        for name in names:
            usage = process_usage(procs[name].pid)
            if usage is not None:
                previous[name] = (0.0, usage)
        next_sample = started + cfg.sample_s
        while all(v.poll() is None for v in viewers):  # until the first viewer's --duration is over
            time.sleep(max(0.0, min(1.0, next_sample - time.monotonic())))
            if time.monotonic() < next_sample:
                continue
            next_sample += cfg.sample_s
            if time.monotonic() - started >= cfg.duration_s:
                # Past the viewers' --duration (their clocks began after ours): one may be freeing its buffers
                # on the way out (180 -> 76 MB in the last sample of a loaded smoke run), which is no leak.
                break
            sample = _sample(names, procs, stats_files, previous, time.monotonic() - started)
            if not all(sample[name]["alive"] for name in names[1:]):
                break  # the viewers' --duration ended while sampling: the others are tearing down, not leaking
            samples.append(sample)
            progress(format_progress(sample, names))
        for name in names[1:]:
            try:
                procs[name].wait(timeout=30)
            except subprocess.TimeoutExpired:
                hung.append(name)  # killed below; the report says so
        time.sleep(0.5)  # let the host see the viewers leave
        stop_processes([procs["host"], procs["netsim"]], list(procs.values()))
    finally:
        kill_leftovers(list(procs.values()))
        for f in open_logs:
            f.close()
    final = {name: _read_json(path) or {} for name, path in stats_files.items()}
    exits = {name: p.returncode for name, p in procs.items()}
    problems = {name: _problem_lines(path) for name, path in logs.items()}
    for name in hung:
        problems[name].append(f"{name} did not exit within 30 s of its --duration (killed)")
    for name, code in exits.items():
        if code is not None and code < 0 and name not in hung:
            problems[name] += _crash_report(name, -code, logs[name], final.get(name, {}))
    return summarize(cfg, names, samples, final, exits, problems, time.monotonic() - started)


def _sample(
    names: list[str],
    procs: dict[str, subprocess.Popen[bytes]],
    stats_files: dict[str, Path],
    previous: dict[str, tuple[float, ProcessUsage]],
    t_s: float,
) -> dict[str, Any]:
    """One row: each process's memory, its CPU since the last row, and its counters."""
    row: dict[str, Any] = {"t_s": round(t_s, 1)}
    for name in names:
        usage = process_usage(procs[name].pid)
        stats = _read_json(stats_files[name]) or {}
        entry: dict[str, Any] = {"alive": usage is not None}
        if usage is not None:
            entry["rss_mb"] = usage.rss_bytes / 2**20
            if name in previous:
                before_s, before = previous[name]
                entry["cpu_pct"] = 100 * (usage.cpu_s - before.cpu_s) / max(t_s - before_s, 1e-6)
            previous[name] = (t_s, usage)
        if name == "host":
            entry["frames_encoded"] = stats.get("frames_encoded", 0)
        else:
            entry.update({k: stats.get(k, 0) for k in _VIEWER_COUNTERS})
            entry["audio_stalled_s"] = (stats.get("audio_live") or {}).get("device_stalled_s", 0.0)
        row[name] = entry
    return row


_VIEWER_COUNTERS = (
    "frames_shown",
    "frames_hidden",
    "frames_concealed",
    "packets_lost_video",
    "packets_recovered",
    "freezes_over_250ms",
    "reconnects",
    "decode_errors",
)


def _crash_report(name: str, signum: int, log_path: Path, final: dict[str, Any]) -> list[str]:
    """What a process killed by a signal left: whether it got as far as its last statistics (a crash on the
    way out, or in the middle), and the end of its log, where the fault handler printed each thread's stack."""
    try:
        tail = log_path.read_text(errors="replace").splitlines()[-_CRASH_LINES:]
    except OSError:
        tail = []
    when = ""
    if name.startswith("viewer"):  # a viewer's last statistics, and only those, carry its timeline
        when = " after writing its last statistics" if "timeline" in final else " before its last statistics"
    return [f"{name} died of {_signal_name(signum)}{when}; its log ends:", *(f"  {line}" for line in tail)]


def _signal_name(signum: int) -> str:
    with contextlib.suppress(ValueError):
        return signal.Signals(signum).name
    return f"signal {signum}"


def _problem_lines(path: Path) -> list[str]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if _PROBLEM.search(line)]


def summarize(
    cfg: SoakConfig,
    names: list[str],
    samples: list[dict[str, Any]],
    final: dict[str, dict[str, Any]],
    exits: dict[str, int | None],
    problems: dict[str, list[str]],
    elapsed_s: float,
) -> dict[str, Any]:
    memory = {}
    for name in names:
        series = [(s["t_s"], s[name]["rss_mb"]) for s in samples if "rss_mb" in s[name]]
        # A viewer's warm-up starts with its first picture (its decoder's buffers come with the stream, and a
        # loaded machine may take seconds to get there); the host's with the run.
        shown = [s["t_s"] for s in samples if s[name].get("frames_shown", 0) > 0]
        began_s = 0.0 if name == "host" else (shown[0] if shown else float("inf"))
        warm = [mb for t, mb in series if t >= began_s + cfg.warmup_s]
        if not warm:
            memory[name] = {"samples": len(series)}
            continue
        base = warm[0]
        deviations = [100 * (mb / base - 1) for mb in warm]
        memory[name] = {
            "samples": len(series),
            "start_mb": series[0][1],
            "baseline_mb": base,
            "end_mb": warm[-1],
            "peak_mb": max(mb for _, mb in series),
            "change_pct": deviations[-1],
            "max_deviation_pct": max(deviations, key=abs),
        }
    cpu = {name: _median([s[name].get("cpu_pct") for s in samples if s["t_s"] >= cfg.warmup_s]) for name in names}
    host = final.get("host", {})
    viewers = []
    for name in names[1:]:
        v = final.get(name, {})
        expected = cfg.fps * cfg.duration_s
        viewers.append(
            {
                "name": name,
                "network": cfg.network() if name == "viewer1" else "direct",
                "frames_shown": v.get("frames_shown", 0),
                "frames_not_shown": max(0, round(expected) - v.get("frames_shown", 0)),
                "frames_concealed": v.get("frames_concealed", 0),
                "shown_of_expected_pct": 100 * v.get("frames_shown", 0) / max(expected, 1),
                "packets_lost_after_fec": v.get("packets_lost_video", 0),
                "packets_recovered_by_fec": v.get("packets_recovered", 0),
                "freezes_over_250ms": v.get("freezes_over_250ms", 0),
                "max_freeze_ms": v.get("max_freeze_ms", 0.0),
                "reconnects": v.get("reconnects", 0),
                "latency_ms_median": v.get("latency_ms_median"),
                "audio_underruns": (v.get("audio") or {}).get("underruns_after_start"),
            }
        )
    errors: dict[str, int] = {}
    for name, code in exits.items():
        if code not in (0, None):
            errors[f"{name} exit {code}"] = 1
    for key in ("encode_errors", "send_errors", "audio_encode_errors"):
        if host.get(key):
            errors[f"host {key}"] = host[key]
    for name in names[1:]:
        v = final.get(name, {})
        for key in ("decode_errors", "reconnects"):
            if v.get(key):
                errors[f"{name} {key}"] = v[key]
        stalled = [s[name].get("audio_stalled_s", 0.0) for s in samples]
        if any(t > 1.0 for t in stalled):
            errors[f"{name} audio output stopped calling back (s)"] = round(max(stalled))
        if (v.get("audio") or {}).get("close_stuck"):
            errors[f"{name} audio output did not close"] = 1
    for name in names[1:]:
        ran_s = final.get(name, {}).get("elapsed_s", 0.0)
        if ran_s < cfg.duration_s - 5:
            errors[f"{name} ended after {ran_s:.0f} s of {cfg.duration_s:g}"] = 1
    if samples and not samples[-1]["host"]["alive"]:
        errors["host gone before the end"] = 1
    for name, lines in problems.items():
        if lines:
            errors[f"{name} log warnings/errors"] = len(lines)
    flat = all(abs(m.get("max_deviation_pct", 0.0)) <= cfg.memory_bound_pct for m in memory.values()) and all(
        "baseline_mb" in m for m in memory.values()
    )
    return {
        "config": asdict(cfg),
        "elapsed_s": elapsed_s,
        "memory": memory,
        "memory_flat": flat,
        "cpu_pct_median": cpu,
        "host": {
            "frames_encoded": host.get("frames_encoded", 0),
            "keyframes_forced_for_loss": host.get("keyframes_forced_for_loss", 0),
            "auth": host.get("auth"),
        },
        "viewers": viewers,
        "errors": errors,
        "problem_lines": {k: v[:5] for k, v in problems.items() if v},
        "ok": flat and not errors,
        "samples": samples,
    }


def _median(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _clock(t_s: float) -> str:
    return f"{int(t_s // 60):3d}:{int(t_s % 60):02d}"


def format_progress(sample: dict[str, Any], names: list[str]) -> str:
    parts = [_clock(sample["t_s"])]
    for name in names:
        e = sample[name]
        if not e["alive"]:
            parts.append(f"{name} gone")
            continue
        cpu = e.get("cpu_pct")
        text = f"{name} {e['rss_mb']:.0f} MB {'-' if cpu is None else format(cpu, '.0f')} %"
        if name != "host":
            text += f" shown {e['frames_shown']} freezes {e['freezes_over_250ms']}"
        parts.append(text)
    return "  ".join(parts)


def format_table(result: dict[str, Any]) -> str:
    cfg = result["config"]
    names = list(result["memory"])
    lines = [
        f"== soak: {cfg['width']}x{cfg['height']}p{cfg['fps']} {cfg['bitrate_kbits'] / 1000:g} Mbit/s, "
        f"{cfg['viewers']} viewers (viewer1 through {SoakConfig(loss=cfg['loss']).network()}), "
        f"{'sealed' if cfg['secure'] else 'open'}, {'with' if cfg['audio'] else 'no'} audio, "
        f"{result['elapsed_s'] / 60:.1f} min"
    ]
    header = "  time " + "".join(f"{n + ' MB':>12}{'CPU %':>7}" for n in names)
    lines.append(header)
    samples = result["samples"]
    step = max(1, len(samples) // 20)
    for s in samples[::step] + ([samples[-1]] if samples and (len(samples) - 1) % step else []):
        row = f"{_clock(s['t_s'])} "
        for n in names:
            e = s[n]
            cpu = e.get("cpu_pct")
            row += f"{e.get('rss_mb', float('nan')):12.1f}{'-' if cpu is None else format(cpu, '.1f'):>7}"
        lines.append(row)
    lines.append(f"memory after {cfg['warmup_s']:g} s of warm-up (bound ±{cfg['memory_bound_pct']:g} %):")
    for n, m in result["memory"].items():
        if "baseline_mb" not in m:
            lines.append(f"  {n}: no sample after warm-up")
            continue
        lines.append(
            f"  {n}: {m['baseline_mb']:.1f} -> {m['end_mb']:.1f} MB ({m['change_pct']:+.2f} %), largest deviation "
            f"{m['max_deviation_pct']:+.2f} %, peak {m['peak_mb']:.1f} MB, median CPU "
            f"{result['cpu_pct_median'][n] or float('nan'):.1f} %"
        )
    lines.append(f"host: {result['host']['frames_encoded']} frames encoded")
    for v in result["viewers"]:
        lines.append(
            f"  {v['name']} ({v['network']}): shown {v['frames_shown']} ({v['shown_of_expected_pct']:.2f} % of "
            f"duration x fps, {v.get('frames_concealed', 0)} of them concealed), packets lost after FEC "
            f"{v['packets_lost_after_fec']} (recovered "
            f"{v['packets_recovered_by_fec']}), freezes > 250 ms {v['freezes_over_250ms']} (longest "
            f"{v['max_freeze_ms']:.0f} ms), reconnects {v['reconnects']}, audio underruns {v['audio_underruns']}"
        )
    if result["errors"]:
        lines.append("errors: " + ", ".join(f"{k}: {v}" for k, v in result["errors"].items()))
        for name, problem_lines in result["problem_lines"].items():
            lines.extend(f"  {name}: {line}" for line in problem_lines)
    else:
        lines.append("errors: none")
    memory = "flat" if result["memory_flat"] else "NOT flat"
    lines.append(f"verdict: {'OK' if result['ok'] else 'FAILED'} (memory {memory})")
    return "\n".join(lines)
