"""The host (``pyrofling host``): the shells around :mod:`pyrofling.core` that capture, encode and send.

:mod:`.host` wires them: :mod:`.network` (TCP and UDP through ``HostSessions``), :mod:`.heartbeat` (the
frame clock and the encoder), :mod:`.sources` and :mod:`.capture` (what is streamed), :mod:`.audio`,
:mod:`.gamepad` (the virtual pad) and :mod:`.destinations` (recording and broadcasting).
"""
