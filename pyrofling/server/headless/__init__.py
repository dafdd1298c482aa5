"""A headless desktop per host (``pyrofling host --source headless --run COMMAND``): what it streams, nobody sees.

The host starts a desktop of its own, with no screen and no seat, and streams it:

* :mod:`.desktop` starts the session: a private D-Bus session bus, PipeWire and
  WirePlumber, and mutter (GNOME's compositor) headless, Wayland with Xwayland for
  X11 programs, all in a runtime directory of the host's own, so that two hosts run
  two desktops side by side; it runs the person's program in it, and stops
  everything it started when the host stops.
* :mod:`.screencast` asks mutter, over that bus, for a virtual monitor recorded into
  PipeWire (``org.gnome.Mutter.RemoteDesktop`` and ``ScreenCast``, ``RecordVirtual``):
  the monitor exists while it is recorded, at the size the recording asks (the
  viewer's display, protocol.md §7.14, when it says one).
* :mod:`.frames` takes the monitor's frames out of PipeWire through GStreamer
  (``pipewiresrc`` into an ``appsink``), on GStreamer's thread; the host's heartbeat
  takes the latest one.
* :mod:`.remote_input` carries the viewers' keys and pointer into the desktop through
  mutter's RemoteDesktop session (no uinput), and :mod:`.sound` records what its
  programs play into the desktop's own PipeWire sink.
* :mod:`.source` ties them together as a :class:`~pyrofling.server.sources.VideoSource`.

Decisions that do not need the desktop (what to ask PipeWire for) are in
:mod:`pyrofling.core.host.headless`. What was measured, and why mutter:
``docs/headless.md``.
"""
