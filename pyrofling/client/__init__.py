"""The viewer (``pyrofling view``, ``pyrofling gamepad``): the shells around :mod:`pyrofling.core`.

:mod:`.viewer` moves bytes through a pure ``ViewerConnection``; :mod:`.video` decodes on its own
thread, :mod:`.presenter` shows a picture per display refresh (in :mod:`.window`, or headless),
:mod:`.audio` plays, :mod:`.gamepad` reads and sends the player's pad.
"""
