"""The desktop portal's screen cast (``--source wayland``) as plain data: what the host asks, what the answers mean.

The portal (``org.freedesktop.portal.ScreenCast``, xdg-desktop-portal with its GNOME
or KDE backend) is how a program records the Wayland desktop a person sits at: it
asks the person which monitor to share, once; the restore token it gives back lets
the next start skip the question. Values are (D-Bus signature, value) pairs; the
shell makes them variants.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from pyrofling.core.host.headless import RemoteCall

PORTAL = "org.freedesktop.portal.Desktop"
PORTAL_PATH = "/org/freedesktop/portal/desktop"
SCREEN_CAST = "org.freedesktop.portal.ScreenCast"
REMOTE_DESKTOP = "org.freedesktop.portal.RemoteDesktop"
#: The devices asked of RemoteDesktop: keyboard and pointer.
KEYBOARD, POINTER = 1, 2
#: The pointer: drawn into the pictures, or left out (as metadata beside them is not streamed yet).
CURSOR_MODES = {"embedded": 2, "hidden": 1}
MONITOR = 1
#: Kept until the person revokes it: the next start with its token asks nothing.
PERSIST_UNTIL_REVOKED = 2
#: What to install when the portal is missing, by desktop.
INSTALL = "apt-get install xdg-desktop-portal xdg-desktop-portal-gnome (on KDE: xdg-desktop-portal-kde)"


class PortalStream(NamedTuple):
    node: int
    width: int | None
    height: int | None


def request_path(unique_name: str, token: str) -> str:
    """Where the portal answers a request made with ``handle_token`` = ``token`` by the connection ``unique_name``
    (the answer can come before the call returns, so it is listened for first)."""
    sender = unique_name.lstrip(":").replace(".", "_")
    return f"{PORTAL_PATH}/request/{sender}/{token}"


def select_sources(cursor: str, restore_token: str | None, *, remember: bool = True) -> dict[str, tuple[str, Any]]:
    """SelectSources' options: one monitor, the pointer as asked, remembered until revoked (``remember``; a remote
    desktop session is remembered through its devices instead)."""
    if cursor not in CURSOR_MODES:
        raise ValueError(f"unknown cursor mode {cursor!r}: use {' or '.join(CURSOR_MODES)}")
    options: dict[str, tuple[str, Any]] = {
        "types": ("u", MONITOR),
        "multiple": ("b", False),
        "cursor_mode": ("u", CURSOR_MODES[cursor]),
    }
    if remember:
        options.update(_remembered(restore_token))
    return options


def select_devices(restore_token: str | None, version: int) -> dict[str, tuple[str, Any]]:
    """RemoteDesktop's SelectDevices options: the keyboard and the pointer; remembered where the portal can
    (version 2 on; version 1 asks at every start)."""
    options: dict[str, tuple[str, Any]] = {"types": ("u", KEYBOARD | POINTER)}
    if version >= 2:
        options.update(_remembered(restore_token))
    return options


def _remembered(restore_token: str | None) -> dict[str, tuple[str, Any]]:
    options: dict[str, tuple[str, Any]] = {"persist_mode": ("u", PERSIST_UNTIL_REVOKED)}
    if restore_token:
        options["restore_token"] = ("s", restore_token)
    return options


#: mutter's RemoteDesktop calls (:class:`~pyrofling.core.host.headless.RemoteInput`) → the portal's, whose
#: arguments start with the session and an options dict, whose states are numbers and streams node ids.
_PORTAL_MEMBERS = {
    "NotifyKeyboardKeycode": ("iu", "NotifyKeyboardKeycode"),
    "NotifyPointerButton": ("iu", "NotifyPointerButton"),
    "NotifyPointerAxisDiscrete": ("ui", "NotifyPointerAxisDiscrete"),
    "NotifyPointerMotionRelative": ("dd", "NotifyPointerMotion"),
    "NotifyPointerMotionAbsolute": ("udd", "NotifyPointerMotionAbsolute"),
}


def portal_input_call(call: RemoteCall, session: str, node: int) -> RemoteCall:
    """One input call for the RemoteDesktop portal's ``session``, its absolute positions on stream ``node``."""
    signature, member = _PORTAL_MEMBERS[call.member]
    args = tuple(int(a) if isinstance(a, bool) else a for a in call.args)
    if call.member == "NotifyPointerMotionAbsolute":
        args = (node, *args[1:])
    return RemoteCall(member, "oa{sv}" + signature, (session, {}, *args))


def response_problem(code: int, step: str) -> str | None:
    """What a Response's code means for ``step`` (None: it went through)."""
    if code == 0:
        return None
    if code == 1:
        return f"the screen share was declined ({step}): start again and choose Share"
    return f"the desktop portal could not {step} (response {code}); its log says why (journalctl --user)"


def first_stream(results: Mapping[str, Any]) -> PortalStream:
    """The shared monitor's PipeWire node and size, out of Start's results (ValueError: none was shared)."""
    streams = results.get("streams") or []
    if not streams:
        raise ValueError("the desktop portal shared no stream")
    node, properties = streams[0]
    size = properties.get("size")
    width, height = (int(size[0]), int(size[1])) if size else (None, None)
    return PortalStream(int(node), width, height)
