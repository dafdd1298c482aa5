"""``pyrofling bench spectators``: a host publishing into a real Janus, watched by N headless WebRTC spectators.

Debian's Janus runs in a network namespace of the bench's own (ICE gathers nothing on loopback), the host as
``bench stream`` runs it (``pyrofling host`` with the test scene, a headless pyrofling viewer judging every
refresh) with ``--spectators`` pointing at it, and beside them processes of aiortc spectators
(:mod:`~pyrofling.bench.webrtc_spectator`), one per CPU, all joining at once. Twice: with one spectator and with
N, so that the host's CPU and the player's figures with N are set against the same with one (paired runs; the
spectators' own CPU is the machine's, not the host's: Janus does the fan-out).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pyrofling.bench.browser_spectators import serve_pages, watch_in_browsers
from pyrofling.bench.janus import JanusServer
from pyrofling.bench.netns import Namespace
from pyrofling.bench.stream import StreamScenario, cell, run_scenario, summarize
from pyrofling.bench.webrtc_spectator import SpectatorLog, judge_spectator, read_logs

#: The mountpoint the bench's host publishes under (``--spectators-id``), so the spectators know it.
MOUNTPOINT = 4242
#: Seconds of each run before the spectators join (the host up and publishing) and after they leave.
JOIN_AFTER_S = 2.0
LEAVE_BEFORE_S = 1.5


@dataclass(frozen=True)
class Restart:
    """Janus killed ``at_s`` after the spectators joined, and started again ``down_s`` later."""

    at_s: float = 4.0
    down_s: float = 2.0


def _watchers(
    janus: list[JanusServer],
    count: int,
    processes: int,
    seconds: float,
    folder: Path,
    sound: bool,
    restart: Restart | None,
    browser_links: list[str],
) -> Callable[[int, int], Any]:
    """What runs beside the stream: ``count`` spectators over ``processes`` processes (each watching one of
    ``janus``, in turn), joining after :data:`JOIN_AFTER_S`; with ``restart``, the first Janus killed and started
    again meanwhile."""

    def watch(_port: int, _pid: int) -> dict[str, Any]:
        time.sleep(JOIN_AFTER_S)
        shares = [count // processes + (1 if i < count % processes else 0) for i in range(processes)]
        outs = [folder / f"spectators{i}.json" for i in range(len(shares))]
        watched = [janus[i % len(janus)] for i in range(len(shares))]
        procs: list[subprocess.Popen[bytes]] = []
        for share, out, j in zip(shares, outs, watched, strict=True):
            if share:
                argv = [j.url, str(MOUNTPOINT), str(share), str(seconds), str(out), *(["sound"] if sound else [])]
                procs.append(subprocess.Popen([sys.executable, "-m", "pyrofling.bench.webrtc_spectator", *argv]))
        in_browsers: list[SpectatorLog] = []
        browsers = threading.Thread(target=lambda: in_browsers.extend(watch_in_browsers(browser_links, seconds)))
        if browser_links:
            browsers.start()
        outage: dict[str, float] = {}
        if restart is not None:
            time.sleep(restart.at_s)
            janus[0].kill()
            outage["killed_s"] = time.monotonic()
            time.sleep(restart.down_s)
            janus[0].start()
            outage["back_s"] = time.monotonic()  # it answers its API again
        for p in procs:
            try:
                p.wait(timeout=seconds + 30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if browser_links:
            browsers.join(timeout=seconds + 60)
        names = ["origin" if j is janus[0] else "edge" for j in watched]
        logs = [(name, log) for out, name in zip(outs, names, strict=True) for log in read_logs(out)]
        logs += [("browser", log) for log in in_browsers]
        return {"logs": logs, "exit_codes": [p.returncode for p in procs], "outage": outage}

    return watch


def _one_run(
    base: StreamScenario,
    janus: list[JanusServer],
    key: str,
    count: int,
    processes: int,
    folder: Path,
    sound: bool,
    restart: Restart | None = None,
    browser_links: list[str] | None = None,
) -> Any:
    seconds = (base.duration_s or 20.0) - JOIN_AFTER_S - LEAVE_BEFORE_S
    folder.mkdir()
    edges = [a for edge in janus[1:] for a in ("--spectators-edge", edge.url)]
    sc = replace(
        base,
        host_args=(*base.host_args, "--spectators", janus[0].url, "--spectators-id", str(MOUNTPOINT), *edges),
        host_env=(*base.host_env, ("PYROFLING_JANUS_ADMIN_KEY", key)),
    )
    watch = _watchers(janus, count, processes, seconds, folder, sound, restart, browser_links or [])
    result = run_scenario(sc, alongside=watch)
    beside = result.get("alongside") or {}
    outage = beside.get("outage") or {}
    judged = [{"janus": name, **judge_spectator(log, base.fps, since_s=outage.get("back_s"))}
              for name, log in beside.get("logs", []) if name != "browser"]  # fmt: skip
    in_browsers = [judge_spectator(log, base.fps, since_s=outage.get("back_s"))
                   for name, log in beside.get("logs", []) if name == "browser"]  # fmt: skip
    player = summarize(result)
    outputs: list[dict[str, Any]] = result["host"].get("outputs", [])
    published = next((o for o in outputs if o.get("kind") == "spectators"), {})
    viewer = result["viewers"][0] if result["viewers"] else {}
    return {
        "spectators_asked": count,
        "spectators": judged,
        "browsers": in_browsers,
        "spectator_processes_exit": beside.get("exit_codes"),
        "janus_down_s": outage["back_s"] - outage["killed_s"] if outage else None,
        "player": {
            "good_refreshes_pct": player["good_refreshes_pct"],
            "stale_refreshes": player["stale_refreshes"],
            "corrupt_refreshes": player["corrupt_refreshes"],
            "longest_freeze_ms": player["longest_freeze_ms"],
            "latency_ms_median": player["latency_ms_median"],
            "glass_ms_median": viewer.get("glass_ms_median"),
            "reconnects": viewer.get("reconnects"),
        },
        "host_cpu_pct": player["host_cpu_pct"],
        "frames_encoded": player["frames_sent"],
        "published": published,
    }


def _overall(judged: list[dict[str, Any]], count: int) -> dict[str, Any]:
    watched = [j for j in judged if j.get("pictures")]
    good = [j["good_refreshes_pct"] for j in watched]
    latency = [j["latency_ms_median"] for j in watched if j.get("latency_ms_median") is not None]
    first = [j["first_picture_s"] for j in watched]
    again = [j["picture_again_s"] for j in watched if j.get("picture_again_s") is not None]
    return {
        "watched": len(watched),
        "of": count,
        "good_refreshes_pct_min": min(good) if good else None,
        "good_refreshes_pct_median": statistics.median(good) if good else None,
        "latency_ms_median": statistics.median(latency) if latency else None,
        "latency_ms_max": max(latency) if latency else None,
        "first_picture_s_max": max(first) if first else None,
        "first_picture_s_median": statistics.median(first) if first else None,
        "picture_again_s_max": max(again) if len(again) == len(watched) and again else None,
        # Browsers' own receivers, summed: what the SFU path repaired (NACKed, retransmissions received) and not.
        "rtp": {
            k: sum(j["rtp"].get(k, 0) for j in watched) for k in sorted({k for j in watched for k in j.get("rtp", {})})
        },
    }


def run_spectators_bench(
    base: StreamScenario,
    *,
    spectators: int = 20,
    processes: int | None = None,
    sound: bool = False,
    restart: Restart | None = None,
    edge: bool = False,
    loss: float = 0.0,
    browsers: int = 0,
    rounds: int = 1,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """One spectator, then ``spectators``, through one Janus; ``processes`` spectators' processes (default: one
    per CPU, at most one per spectator); ``sound``: the spectators take the sound too (else pictures only);
    ``restart``: then a third run with ``spectators`` in which Janus is killed and started again; ``edge``: the
    host publishes into an origin Janus that feeds an edge Janus (another namespace, a link of their own), and
    the spectators' processes take turns watching the origin and the edge; ``loss``: then a run with
    ``spectators`` in which that share of what Janus sends them is lost on the way (not what it receives: the
    host's RTP arrives whole); ``browsers``: in the runs with ``spectators``, that many headless Chromium pages
    watch beside them (:mod:`~pyrofling.bench.browser_spectators`), judged apart; ``rounds``: the runs with one
    and with ``spectators`` taken turns this many times, the host's CPU compared by their medians (the first run
    after Janus starts tends to cost the host more, whichever it is)."""
    processes = max(1, min(spectators, processes or os.cpu_count() or 1))
    key = secrets.token_urlsafe(12)
    duration = base.duration_s or 20.0
    plan: list[tuple[int, Restart | None, float]] = [(1, None, 0.0), (spectators, None, 0.0)] * max(1, rounds)
    plan += [(spectators, restart, 0.0)] if restart else []
    plan += [(spectators, None, loss)] if loss > 0 else []
    runs = []
    with (
        tempfile.TemporaryDirectory(prefix="pyrofling-spectators-") as tmp,
        Namespace() as ns,
        Namespace() as edge_ns,
        contextlib.ExitStack() as servers,
    ):
        plugins = ("streaming", "videoroom") if edge else ("streaming",)
        janus = [servers.enter_context(JanusServer(Path(tmp) / "janus", admin_key=key, netns=ns, plugins=plugins))]
        if edge:
            ns.link(edge_ns)
            janus.append(servers.enter_context(JanusServer(Path(tmp) / "edge", admin_key=key, netns=edge_ns)))
        links: list[str] = []
        if browsers:
            pages, page_port = serve_pages(ns.outside)
            servers.callback(pages.shutdown)
            links = [f"http://{ns.outside}:{page_port}/spectate.html#janus={janus[i % len(janus)].url}"
                     f"&id={MOUNTPOINT}&judge=1" for i in range(browsers)]  # fmt: skip
        for i, (count, outage, lost) in enumerate(plan):
            what = f"{count} spectator{'s' if count > 1 else ''} through Janus beside a player ({duration:g} s)"
            if outage is not None:
                what += f", Janus killed {outage.at_s:g} s after they join and started {outage.down_s:g} s later"
            if lost:
                what += f", {lost:.1%} of what Janus sends them lost"
            progress(what)
            folder = Path(tmp) / f"run{i}"
            ns.lose_udp_sent(lost)
            in_browsers = links if count == spectators and i > 0 else []
            runs.append(_one_run(base, janus, key, count, min(processes, count), folder, sound, outage, in_browsers))
            if lost:
                runs[-1]["loss"] = {"share": lost, "datagrams_lost": ns.udp_lost()}
                ns.lose_udp_sent(0.0)
    for run in runs:
        run["overall"] = _overall(run["spectators"], run["spectators_asked"])
        run["overall_browsers"] = _overall(run["browsers"], len(run["browsers"])) if run["browsers"] else None
        if edge:
            for name in ("origin", "edge"):
                side = [j for j in run["spectators"] if j["janus"] == name]
                run[f"overall_{name}"] = _overall(side, len(side))
    pairs = runs[: 2 * max(1, rounds)]
    cpu_one = statistics.median(r["host_cpu_pct"] for r in pairs[0::2])
    cpu_many = statistics.median(r["host_cpu_pct"] for r in pairs[1::2])
    return {
        "scenario": base.label(),
        "fps": base.fps,
        "processes": processes,
        "sound": sound,
        "runs": runs[:2],
        "restart": runs[len(pairs)] if restart else None,
        "lossy": runs[-1] if loss > 0 else None,
        "edge": edge,
        "host_cpu_pct": {
            "one": [r["host_cpu_pct"] for r in pairs[0::2]],
            "many": [r["host_cpu_pct"] for r in pairs[1::2]],
        },
        "host_cpu_change_pct": _change(cpu_one, cpu_many),
    }


def _change(a: float | None, b: float | None) -> float | None:
    return None if not a or b is None else 100 * (b / a - 1)


def format_table(r: dict[str, Any]) -> str:
    one, many = r["runs"]
    lines = [
        f"{r['scenario']}; the host publishes into Debian's Janus (a network namespace), aiortc spectators watch "
        f"over WebRTC ({r['processes']} processes, {'pictures and sound' if r['sound'] else 'pictures only'}), a "
        "pyrofling viewer plays beside them",
        f"{'spectators':>10} {'watched':>8} {'good % min':>11} {'good % med':>11} {'capture->decoded ms':>20} "
        f"{'first picture s':>16} {'host CPU %':>11} {'player good %':>14} {'player decoded ms':>18} "
        f"{'player glass ms':>16}",
    ]
    for run in (one, many):
        o, p = run["overall"], run["player"]
        lines.append(
            f"{run['spectators_asked']:>10} {o['watched']:>8} {cell(o['good_refreshes_pct_min'], '.2f'):>11} "
            f"{cell(o['good_refreshes_pct_median'], '.2f'):>11} {cell(o['latency_ms_median'], '.1f'):>20} "
            f"{cell(o['first_picture_s_max'], '.2f'):>16} {cell(run['host_cpu_pct'], '.1f'):>11} "
            f"{cell(p['good_refreshes_pct'], '.2f'):>14} {cell(p.get('latency_ms_median'), '.1f'):>18} "
            f"{cell(p['glass_ms_median'], '.1f'):>16}"
        )
    cpu = r.get("host_cpu_pct") or {"one": [one["host_cpu_pct"]], "many": [many["host_cpu_pct"]]}
    lines.append(
        f"host CPU with {many['spectators_asked']} spectators against 1: {cell(r['host_cpu_change_pct'], '+.1f')} % "
        f"(medians of {len(cpu['one'])} runs each, taking turns: {', '.join(cell(c, '.1f') for c in cpu['one'])} % "
        f"with 1, {', '.join(cell(c, '.1f') for c in cpu['many'])} % with {many['spectators_asked']}; frames "
        f"encoded {one['frames_encoded']} and {many['frames_encoded']})"
    )
    lines.append(
        "capture->decoded: each spectator's median (the table: their median; the worst: "
        f"{cell(many['overall']['latency_ms_max'], '.1f')} ms); first picture: the slowest spectator's, from its "
        f"watch request; good %: the refreshes of a {r.get('fps', 60):g} Hz screen from the spectator's first "
        "picture on, showing the newest picture decoded by then"
    )
    if r.get("edge"):
        o, e = many["overall_origin"], many["overall_edge"]
        more = None if o["latency_ms_median"] is None or e["latency_ms_median"] is None else (
            e["latency_ms_median"] - o["latency_ms_median"])  # fmt: skip
        lines.append(
            f"through an origin and its edge ({many['spectators_asked']} spectators): on the origin "
            f"{o['watched']}, capture->decoded {cell(o['latency_ms_median'], '.1f')} ms, good % worst "
            f"{cell(o['good_refreshes_pct_min'], '.2f')}; on the edge {e['watched']}, "
            f"{cell(e['latency_ms_median'], '.1f')} ms, worst {cell(e['good_refreshes_pct_min'], '.2f')}: the edge "
            f"{cell(more, '+.1f')} ms"
        )
    for what, run in (("", many), ("Janus restarted, ", r.get("restart")), ("lossy, ", r.get("lossy"))):
        b = (run or {}).get("overall_browsers")
        if b:
            again = b["picture_again_s_max"]
            lines.append(
                f"{what}{b['of']} Chromium spectators beside them (the page, judge=1): {b['watched']} watched, "
                f"good % worst {cell(b['good_refreshes_pct_min'], '.2f')}, capture->shown "
                f"{cell(b['latency_ms_median'], '.1f')} ms, first picture {cell(b['first_picture_s_max'], '.2f')} s"
                + (f", again {cell(again, '.2f')} s after Janus answered" if again is not None else "")
            )
            rtp = b.get("rtp") or {}
            if rtp:
                lines.append(
                    f"  their receivers: {rtp.get('packetsReceived', 0):.0f} packets, {rtp.get('nackCount', 0):.0f} "
                    f"asked again (NACK), {rtp.get('retransmittedPacketsReceived', 0):.0f} retransmissions came, "
                    f"{rtp.get('packetsLost', 0):.0f} never came; {rtp.get('pliCount', 0):.0f} key frames asked "
                    f"(PLI), {rtp.get('keyFramesDecoded', 0):.0f} decoded; {rtp.get('framesDropped', 0):.0f} pictures "
                    f"dropped, {rtp.get('freezeCount', 0):.0f} freezes ({rtp.get('totalFreezesDuration', 0):.2f} s)"
                )
    restart = r.get("restart")
    if restart:
        o, p = restart["overall"], restart["player"]
        lines.append(
            f"Janus killed and started again ({cell(restart['janus_down_s'], '.1f')} s without it), "
            f"{restart['spectators_asked']} spectators: the player's longest freeze "
            f"{cell(p['longest_freeze_ms'], '.0f')} ms ({cell(p['good_refreshes_pct'], '.2f')} % good, "
            f"{p.get('reconnects')} reconnects); every spectator had a picture again within "
            f"{cell(o['picture_again_s_max'], '.2f')} s of Janus answering ({o['watched']} of {o['of']} watched)"
        )
    lossy = r.get("lossy")
    if lossy:
        o, p, lost = lossy["overall"], lossy["player"], lossy["loss"]
        lines.append(
            f"{lost['share']:.1%} of what Janus sent the {lossy['spectators_asked']} spectators lost on the way "
            f"({lost['datagrams_lost']} datagrams): good % worst {cell(o['good_refreshes_pct_min'], '.2f')}, median "
            f"{cell(o['good_refreshes_pct_median'], '.2f')}, capture->decoded "
            f"{cell(o['latency_ms_median'], '.1f')} ms; "
            f"key frames forced for them {lossy['published'].get('keyframes_forced')}; the player "
            f"{cell(p['good_refreshes_pct'], '.2f')} % good, longest freeze {cell(p['longest_freeze_ms'], '.0f')} ms"
        )
    failed = [j["error"] for run in (one, many) for j in run["spectators"] if j.get("error")]
    if failed:
        lines.append(f"spectators that failed: {len(failed)} ({failed[0]})")
    return "\n".join(lines)
