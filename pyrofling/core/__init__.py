"""The pure transport core: no sockets, no clock, no threads (design.md, conventions §1–2).

Objects here take ``now`` as an argument and return what to send or what
happened; the network shells in :mod:`pyrofling.server` and
:mod:`pyrofling.client` do the I/O.
"""
