"""The host's pure core: every viewer's control protocol and handshake, what goes out to whom and when
(packetizing, FEC, pacing, resends, rate control), key frames, the frame clock, a game's swapchain.

Nothing here imports :mod:`pyrofling.core.viewer`; both may use :mod:`pyrofling.core.input` and the shared
modules at :mod:`pyrofling.core`'s top.
"""
