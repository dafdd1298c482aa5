"""The viewer's statistics, as ``--stats-json`` and the overlay read them."""

from __future__ import annotations

import statistics
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from pyrofling.core.viewer.loss_tracker import LOSS_COUNTERS
from pyrofling.core.viewer.rate_feedback import describe_rate
from pyrofling.wire import RateDecider, VideoCodec

if TYPE_CHECKING:
    from pyrofling.client.viewer import Viewer


def viewer_summary(viewer: Viewer, *, live: bool = False) -> dict[str, Any]:
    """Counters and distributions.  ``live`` (written every second while streaming): without the samples,
    the timeline and the audio statistics, which grow with the run and would hold up this loop."""
    conn = viewer.connection
    totals = viewer.ended_totals + conn.counters() if conn is not None else Counter(viewer.ended_totals)
    discarded = viewer.ended_discarded + conn.discarded() if conn is not None else Counter(viewer.ended_discarded)
    out: dict[str, Any] = {
        name: totals[name]
        for name in (
            "datagrams",
            "bytes_received",
            "packets_video",
            "packets_audio",
            "packets_lost_video",
            "packets_recovered",
            "keyframe_requests",
            "decode_queue_overflows",
            "rate_feedbacks_sent",
            *LOSS_COUNTERS,
        )
    }
    out.update(connects=viewer.connects, sessions_streaming=viewer.sessions_streaming, reconnects=viewer.reconnects)
    params = viewer.codec_parameters  # the stream's codec as the host said it (the last stream's)
    out["video_codec"] = codec_name(params.video_codec) if params is not None else None
    out["codec_changes"] = viewer.codec_changes
    out.update(viewer.video.summary(streaming=conn is not None and conn.streaming, samples=not live))
    handshakes = list(viewer.handshake_ms)
    out["handshake_ms_median"] = statistics.median(handshakes) if handshakes else None
    rtt = conn.clock.last_rtt_s if conn is not None else None
    out["rtt_ms"] = rtt * 1000 if rtt is not None else viewer.rtt_ms
    out["discarded"] = dict(discarded)
    out["security"] = {
        "sealed": viewer.sealed,
        "auth_method": viewer.auth_method,
        "paired_now": viewer.paired,
        "text": viewer.security if viewer.sessions_streaming else "",
    }
    if not live:
        out["timeline"] = list(viewer.timeline.rows)
    rate = conn.session.stream_rate if conn is not None and conn.session.stream_rate else viewer.stream_rate
    out["stream_bitrate_kbits"] = rate.bitrate_kbits if rate is not None else None
    out["link_kbits"] = rate.your_link_kbits if rate is not None and rate.your_link_kbits else None
    out["bitrate_decided_by"] = RateDecider(rate.decided_by).name.lower() if rate is not None else None
    out["stream_rate"] = describe_rate(rate) if rate is not None else None
    out["failure"] = viewer.failure
    out["presentation"] = viewer.presenter.summary(samples=not live)
    out["glass_ms_median"] = out["presentation"]["glass_ms_median"]
    out["glass_ms_p95"] = out["presentation"]["glass_ms_p95"]
    if viewer.audio is not None and not live:
        audio_stats = viewer.audio.summary()
        out["audio"] = audio_stats
        lat = audio_stats.get("latency_ms_median")
        out["av_offset_ms"] = lat - out["glass_ms_median"] if lat is not None and out["glass_ms_median"] else None
    if viewer.gamepad is not None:
        out["gamepad"] = viewer.gamepad.summary()
        assigned = viewer.connection.session.pad_assigned if viewer.connection is not None else None
        pad = assigned or viewer.pad_assigned
        out["gamepad"]["host_pad"] = None if pad is None else (f"pad {pad[0]} of {pad[1]}" if pad[0] else "none free")
    if viewer.keyboard_mouse is not None:
        out["keyboard_mouse"] = viewer.keyboard_mouse.summary()
    out["cpu_s"] = time.process_time() - viewer.cpu_start
    if not live:  # 0.3 ms of /proc reads: not on the event loop every second (read before the threads stop)
        out["cpu_by_thread_s"] = viewer.thread_cpu.read()  # MainThread: the event loop; native: the decoder's threads
    out["elapsed_s"] = time.monotonic() - viewer.started_s
    out["received_mbits"] = totals["bytes_received"] * 8 / max(out["elapsed_s"], 1e-6) / 1e6
    return out


def codec_name(code: int) -> str:
    """A wire codec id's name (H264, H265, AV1), or what the number is."""
    try:
        return VideoCodec(code).name
    except ValueError:
        return f"codec {code}"
