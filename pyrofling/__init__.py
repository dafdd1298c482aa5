"""pyrofling: low-latency game streaming, wire-compatible with PyroFling.

The pure core decides and does no I/O: :mod:`pyrofling.wire` (the wire format, byte for byte),
:mod:`pyrofling.fec` (mirrored-XOR FEC), :mod:`pyrofling.core` (sessions, reassembly, pacing, clocks,
gamepads, all taking ``now``), :mod:`pyrofling.netsim.models`.  The shells move bytes:
:mod:`pyrofling.server` (the host), :mod:`pyrofling.client` (the viewer), :mod:`pyrofling.capture`
(the SDK games present through), :mod:`pyrofling.netsim.relay`; :mod:`pyrofling.cli` is the command
line and :mod:`pyrofling.bench` the benchmarks.
"""

__version__ = "0.1.0"
