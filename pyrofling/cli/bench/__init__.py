"""``pyrofling bench …``: each benchmark's flags; the benchmarks themselves live in :mod:`pyrofling.bench`.

Every bench prints a table (``--json`` for tools) and says what it runs on stderr while it runs;
a ``--plot`` path is checked before the runs start.
"""

from __future__ import annotations

from pyrofling.cli.bench import costs, media, stream
from pyrofling.cli.bench.common import Sub


def add_bench(sub: Sub) -> None:
    bench = sub.add_parser("bench", help="measure pyrofling: FEC, streaming, latency, audio, input, outputs, soak")
    benches = bench.add_subparsers(dest="bench", metavar="BENCH")
    benches.required = True
    for add in (
        stream.add_fec,
        stream.add_loss_step,
        stream.add_stream,
        stream.add_harness,
        stream.add_adapt,
        stream.add_latency,
        stream.add_phase,
        stream.add_receive,
        media.add_audio,
        media.add_input,
        media.add_capture,
        media.add_keyframes,
        media.add_codecs,
        media.add_codec_switch,
        costs.add_outputs,
        costs.add_security,
        costs.add_browser,
        costs.add_spectators,
        stream.add_soak,
    ):
        add(benches)
