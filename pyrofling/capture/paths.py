"""Where the host's capture socket lives, agreed on by the host and its games without being told."""

from __future__ import annotations

import os

#: Overrides the default path, for the host and every game started with it.
SOCKET_ENV = "PYROFLING_CAPTURE_SOCKET"


def default_socket_path() -> str:
    """``$PYROFLING_CAPTURE_SOCKET``, else ``$XDG_RUNTIME_DIR/pyrofling-capture``, else one per user in /tmp."""
    explicit = os.environ.get(SOCKET_ENV)
    if explicit:
        return explicit
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return os.path.join(runtime, "pyrofling-capture")
    return f"/tmp/pyrofling-capture-{os.getuid()}"
