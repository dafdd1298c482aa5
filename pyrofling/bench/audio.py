"""``pyrofling bench audio``: buffer control, underruns, rate wobble and end-to-end audio latency.

Each row is a real ``pyrofling host`` (test scene and the click tone, its audio clock
skewed by ``--audio-skew-ppm``), optionally ``pyrofling netsim`` (jitter, loss), and a
real headless ``pyrofling view`` playing into a JACK dummy server that the bench starts
(a real audio clock; the machine needs no sound card).  The viewer reports:

* buffered audio — how long audio arriving at the viewer waits to be heard, device
  latency included, measured on the device's playback clock at every arrival;
* the playback speed the controller chose at each arrival (mean and max |speed − 1|,
  wobble = its standard deviation, also in cents);
* underruns (after start-up), and concealed audio per lost packet;
* end-to-end latency: each click of the test tone, captured on a whole second of the
  host's clock, timed where it leaves for the device (the DAC time);
* A/V offset: that latency minus the video's capture → on-screen latency.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from pyrofling.bench.jack import dummy_jack
from pyrofling.bench.stream import StreamScenario, run_scenario


@dataclass(frozen=True, slots=True)
class AudioRow:
    """One run: a controller, a clock skew and a network."""

    controller: str = "drift"
    skew_ppm: float = 500.0
    jitter_ms: float = 0.0
    loss: float = 0.0

    def label(self) -> str:
        net = "loopback"
        if self.jitter_ms or self.loss:
            parts = [f"jitter {self.jitter_ms:g} ms"] if self.jitter_ms else []
            parts += [f"loss {self.loss:.0%}"] if self.loss else []
            net = ", ".join(parts)
        return f"{self.controller} {self.skew_ppm:+g} ppm {net}"


@dataclass(frozen=True, slots=True)
class AudioBenchConfig:
    duration_s: float = 60.0
    target_ms: float = 30.0
    codec: str = "raw"
    rows: tuple[AudioRow, ...] = ()
    #: Start a JACK dummy server for the viewers (False: use this machine's own default output).
    start_jack: bool = True
    #: Statistics marked "settled" leave out this much of the start.
    settle_s: float = 10.0
    seed: int = 1


#: The standard cases: ±500 ppm with jitter, 2 % loss, plain loopback (for latency); ``loss5``: 5 % loss.
CASES = ("fast", "slow", "loss", "loopback", "loss5")
STANDARD_CASES = ("fast", "slow", "loss", "loopback")


def standard_rows(
    controllers: tuple[str, ...] = ("drift",), *, jitter_ms: float = 5.0, cases: tuple[str, ...] = STANDARD_CASES
) -> tuple[AudioRow, ...]:
    """One row per controller and case: ``fast``/``slow`` are the host's clock ±500 ppm with jitter."""
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise ValueError(f"unknown case {unknown[0]!r}; choose from {', '.join(CASES)}")
    make = {
        "fast": lambda c: AudioRow(c, +500.0, jitter_ms),
        "slow": lambda c: AudioRow(c, -500.0, jitter_ms),
        "loss": lambda c: AudioRow(c, 0.0, 0.0, 0.02),
        "loss5": lambda c: AudioRow(c, 0.0, 0.0, 0.05),
        "loopback": lambda c: AudioRow(c, 0.0, 0.0),
    }
    return tuple(make[case](c) for c in controllers for case in cases)


def scenario_for(cfg: AudioBenchConfig, row: AudioRow) -> StreamScenario:
    return StreamScenario(
        width=320,
        height=240,
        fps=60,
        bitrate_kbits=1000,
        duration_s=cfg.duration_s,
        loss=row.loss,
        jitter_ms=row.jitter_ms,
        fec="auto",  # the host's default: audio chunks get their repair block while the viewer reports loss
        seed=cfg.seed,
        host_args=("--audio", "tone", "--audio-codec", cfg.codec, "--audio-skew-ppm", f"{row.skew_ppm:g}"),
        view_args=("--audio-controller", row.controller, "--audio-target-ms", f"{cfg.target_ms:g}"),
    )


@contextlib.contextmanager
def _audio_server(start: bool) -> Iterator[None]:
    if not start:
        yield
        return
    with dummy_jack():
        yield


def run(cfg: AudioBenchConfig, *, progress: Callable[[str], None] = lambda _s: None) -> dict[str, Any]:
    rows = []
    with _audio_server(cfg.start_jack):
        for row in cfg.rows:
            progress(f"running {row.label()} for {cfg.duration_s:g} s ...")
            raw = run_scenario(scenario_for(cfg, row))
            rows.append(summarize(row, raw, cfg))
            progress(format_row(rows[-1]))
    return {"config": asdict(cfg), "rows": rows}


def summarize(row: AudioRow, raw: dict[str, Any], cfg: AudioBenchConfig) -> dict[str, Any]:
    viewer = raw["viewers"][0] if raw["viewers"] else {}
    a: dict[str, Any] = viewer.get("audio") or {}
    net = raw.get("netsim") or {}
    out: dict[str, Any] = {"row": asdict(row), "label": row.label()}
    for key in (
        "error",
        "device",
        "packets",
        "packets_lost",
        "concealed_ms_per_loss",
        "underruns",
        "underruns_after_start",
        "primes",
        "skipped_frames",
        "device_latency_ms",
        "buffered_ms_p1",
        "buffered_ms_median",
        "buffered_ms_p99",
        "buffered_ms_dev_p99",
        "buffered_ms_min",
        "buffered_settled_ms_dev_p99",
        "rate_mean_abs_ppm",
        "rate_max_abs_ppm",
        "rate_mean_ppm",
        "rate_wobble_ppm",
        "rate_mean_abs_cents",
        "rate_max_abs_cents",
        "rate_settled_mean_abs_ppm",
        "rate_settled_wobble_ppm",
        "callback_us_median",
        "callback_us_p99",
        "callback_us_max",
        "latency_ms_median",
        "latency_ms_p95",
        "clicks",
    ):
        out[key] = a.get(key)
    out["latency_ms_samples"] = a.get("latency_ms_samples", [])
    out["series"] = a.get("series", [])
    out["av_offset_ms"] = viewer.get("av_offset_ms")
    out["video_glass_ms_median"] = viewer.get("glass_ms_median")
    out["netsim_dropped"] = net["down"]["dropped"] if net and "down" in net else None
    played, lost = out["packets"] or 0, out["packets_lost"] or 0
    out["concealed_pct"] = 100 * lost / (played + lost) if played + lost else None
    return out


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


HEADER = (
    f"{'run':34} {'underruns':>9} {'buffered p1/med/p99 ms':>23} {'|dev| p99':>9} "
    f"{'mean|r-1|':>10} {'max':>9} {'wobble':>8} {'latency':>8} {'A/V':>7} {'lost':>5} {'lost %':>7} {'per loss':>8}"
)


def format_row(r: dict[str, Any]) -> str:
    if not r.get("packets"):
        return f"{r['label']:34} no audio: {r.get('error') or 'the viewer reported nothing'}"
    band = f"{_f(r['buffered_ms_p1'], '.1f')}/{_f(r['buffered_ms_median'], '.1f')}/{_f(r['buffered_ms_p99'], '.1f')}"
    return (
        f"{r['label']:34} {_f(r['underruns_after_start'], 'd'):>9} {band:>23} "
        f"{_f(r['buffered_ms_dev_p99'], '.1f'):>9} {_f(r['rate_mean_abs_ppm'], '.0f') + ' ppm':>10} "
        f"{_f(r['rate_max_abs_ppm'], '.0f') + ' ppm':>9} {_f(r['rate_wobble_ppm'], '.0f') + ' ppm':>8} "
        f"{_f(r['latency_ms_median'], '.1f') + ' ms':>8} {_f(r['av_offset_ms'], '+.0f') + ' ms':>7} "
        f"{_f(r['packets_lost'], 'd'):>5} {_f(r.get('concealed_pct'), '.2f'):>7} "
        f"{_f(r['concealed_ms_per_loss'], '.1f') + ' ms':>8}"
    )


def format_table(result: dict[str, Any]) -> str:
    c = result["config"]
    lines = [
        f"audio {c['codec']} 48 kHz stereo in 5 ms chunks, target {c['target_ms']:g} ms, {c['duration_s']:g} s per run",
        HEADER,
        "-" * len(HEADER),
    ]
    lines += [format_row(r) for r in result["rows"]]
    lines.append(
        "underruns: after start-up; buffered: audio waiting ahead of the speaker at each arrival (device latency "
        "included); |dev|: from target; mean|r-1|/max/wobble: playback speed vs 1 (the skew itself is the floor); "
        "latency: click captured on the host -> at the DAC; A/V: audio latency minus video capture -> on screen; "
        "per loss: audio concealed per lost packet"
    )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: str) -> None:
    """Buffered audio and playback speed over time, and the latency CDF, per run (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(17, 4.5))
    target = result["config"]["target_ms"]
    for r in result["rows"]:
        series = r["series"]
        if series:
            ax1.plot([s[0] for s in series], [s[1] for s in series], lw=0.6, label=r["label"])
            ax2.plot([s[0] for s in series], [s[2] for s in series], lw=0.6, label=r["label"])
        lat = sorted(r["latency_ms_samples"])
        if lat:
            ax3.plot(lat, [i / len(lat) for i in range(len(lat))], label=r["label"])
    ax1.axhline(target, color="grey", lw=0.5)
    ax1.set_xlabel("time (s)")
    ax1.set_ylabel("buffered audio (ms)")
    ax1.set_title("audio waiting ahead of the speaker")
    ax1.legend(fontsize=7)
    ax2.set_xlabel("time (s)")
    ax2.set_ylabel("playback speed − 1 (ppm)")
    ax2.set_title("resampling (±5000 ppm = ±0.5 %)")
    ax3.set_xlabel("click captured -> at the DAC (ms)")
    ax3.set_ylabel("share of clicks")
    ax3.set_title("end-to-end audio latency (CDF)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
