"""pyrofling: low-latency game streaming, wire-compatible with PyroFling.

Layout: :mod:`pyrofling.wire` (the wire format), :mod:`pyrofling.seqnum`,
:mod:`pyrofling.fec` (mirrored-XOR FEC), :mod:`pyrofling.core` (the pure
transport core: packetizer, reassembler, pacer), :mod:`pyrofling.netsim`
(impairment models and the relay), :mod:`pyrofling.bench`, and the host and
viewer in :mod:`pyrofling.server` and :mod:`pyrofling.client`.
"""

__version__ = "0.1.0"
