"""The viewer's pure core: one connection's handshake and keep-alive, reassembly and loss reports, the
presentation loop and its phase offset, the audio buffer's rate.

Nothing here imports :mod:`pyrofling.core.host`; both may use :mod:`pyrofling.core.input` and the shared
modules at :mod:`pyrofling.core`'s top.
"""
