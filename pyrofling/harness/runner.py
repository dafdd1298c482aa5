"""Running a :class:`~pyrofling.harness.model.Stream` through a :class:`~pyrofling.harness.model.Link`.

The host, ``pyrofling netsim`` and the headless viewer run as child processes, exactly as ``pyrofling bench
stream`` runs them (:func:`pyrofling.bench.stream.run_scenario`): each has its own interpreter, so nothing the
test does in its own process slows the stream, and the figures are the bench's. Every process and temporary file
is gone when :func:`run_stream` returns, also after an exception, a timeout or Ctrl-C.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from pyrofling.harness.model import DEFAULT_BURSTS, Link, Stream, StreamResult, result_from

#: Start-up and tear-down beyond the stream's own seconds before a run counts as hung.
SPARE_S = 60.0


def scenario_for(stream: Stream, link: Link) -> Any:
    """The ``bench stream`` scenario that runs ``stream`` through ``link`` (and lists the datagrams dropped)."""
    from pyrofling.bench.stream import StreamScenario

    return StreamScenario(
        width=stream.width,
        height=stream.height,
        fps=stream.fps,
        bitrate_kbits=stream.bitrate_kbits,
        duration_s=stream.seconds,
        loss=link.loss,
        ge=link.bursts is not None,
        ge_model=link.bursts or DEFAULT_BURSTS,
        fec=stream.fec,
        encoder=stream.encoder,
        preset=stream.preset,
        seed=link.seed,
        jitter_ms=link.jitter_ms,
        delay_ms=link.delay_ms,
        delay_sigma_ms=link.delay_sigma_ms,
        outages=link.outages,
        recovery=stream.recovery,
        resends=stream.resends,
        refresh_s=stream.refresh_s,
        host_args=stream.host_args,
        view_args=stream.view_args,
        schedule=link.schedule,
        queue_ms=link.queue_ms,
        rate_mbits=link.rate_mbits,
        record_drops=True,
    )


def run_stream(
    stream: Stream | None = None,
    link: Link | None = None,
    *,
    timeout_s: float | None = None,
    **options: Any,
) -> StreamResult:
    """Stream through ``link`` (default: a perfect one) for ``stream.seconds`` and return what the player saw.

    ``options`` change single fields of ``stream`` (``run_stream(link=Link.iid(0.02), seconds=3, fec="none")``).
    TimeoutError if the viewer has not ended ``timeout_s`` (default: the stream's seconds + 60) after it started;
    RuntimeError if the host cannot start (its own message is on stderr).
    """
    from pyrofling.bench.stream import run_scenario

    stream = stream or Stream()
    unknown = sorted(set(options) - {f.name for f in fields(Stream)})
    if unknown:
        raise TypeError(f"run_stream() got options that are not Stream's: {', '.join(unknown)}")
    stream = replace(stream, **options)
    link = link or Link()
    limit = stream.seconds + SPARE_S if timeout_s is None else timeout_s
    raw = run_scenario(scenario_for(stream, link), timeout_s=limit, settle_s=0.2)
    return result_from(stream, link, raw)
