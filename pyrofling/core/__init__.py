"""The pure core: no sockets, no clock, no threads.

Objects here take ``now`` as an argument and return what to send or what happened; the shells in
:mod:`pyrofling.server` and :mod:`pyrofling.client` do the I/O.  Layers: :mod:`.host` (the host's
decisions), :mod:`.viewer` (the viewer's), :mod:`.input` (pads, keyboard and mouse, both sides); the modules
at this level are shared by both (the handshake's cryptography, the control channel's framing, the key gate,
the test scene and its frame marker, audio signals, sample windows, a game's just-in-time start).
"""
