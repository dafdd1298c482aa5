"""Finding one X11 window to grab, by its title or id (``host --source x11 --window …``).

Listing windows talks to the X server with python-xlib; choosing among them is
:func:`pick_window`, pure, so the rules are tested without a server.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Window:
    id: int
    title: str
    width: int
    height: int

    def describe(self) -> str:
        return f"{self.id:#x} {self.title!r} {self.width}x{self.height}"


def parse_window_id(query: str) -> int | None:
    """``0x2a0000c`` or ``44040204``: a window id, as xwininfo / xdotool print them; None if it is a title."""
    try:
        return int(query, 16) if query.lower().startswith("0x") else int(query)
    except ValueError:
        return None


def pick_window(windows: list[Window], query: str) -> Window:
    """The window ``query`` names: its id; else the one whose title is ``query`` (any case); else the one whose
    title contains it.  ValueError, listing candidates, when none or several match."""
    wanted = parse_window_id(query)
    if wanted is not None:
        for window in windows:
            if window.id == wanted:
                return window
        raise ValueError(f"no viewable window has id {query} (list them with: xwininfo -root -tree)")
    needle = query.casefold()
    exact = [w for w in windows if w.title.casefold() == needle]
    if len(exact) == 1:
        return exact[0]
    partial = exact or [w for w in windows if needle in w.title.casefold()]
    if len(partial) == 1:
        return partial[0]
    if not partial:
        titles = ", ".join(repr(w.title) for w in windows[:8]) or "none"
        raise ValueError(f"no viewable window's title contains {query!r} (windows: {titles})")
    listing = "; ".join(w.describe() for w in partial[:6])
    raise ValueError(f"{len(partial)} windows match {query!r}: {listing}; give more of the title, or the id")


def list_windows(display: str) -> list[Window]:
    """Every viewable window with a title on ``display``, top-level first."""
    try:
        from Xlib import X, error
        from Xlib import display as xdisplay
    except ImportError as exc:  # a dependency; only a broken install lacks it
        raise ValueError(f"finding a window needs python-xlib ({exc})") from exc
    try:
        conn = xdisplay.Display(display)
    except (error.DisplayError, OSError) as exc:
        raise ValueError(f"cannot open X11 display {display!r}: {exc}") from exc
    try:
        utf8, net_name = conn.intern_atom("UTF8_STRING"), conn.intern_atom("_NET_WM_NAME")
        found: list[Window] = []
        pending = list(conn.screen().root.query_tree().children)
        while pending:
            window = pending.pop(0)
            try:
                if window.get_attributes().map_state != X.IsViewable:
                    continue
                prop = window.get_full_property(net_name, utf8)
                title = prop.value.decode(errors="replace") if prop is not None else window.get_wm_name()
                if isinstance(title, bytes):
                    title = title.decode(errors="replace")
                if title:
                    geometry = window.get_geometry()
                    found.append(Window(window.id, str(title), geometry.width, geometry.height))
                pending.extend(window.query_tree().children)
            except error.XError:
                continue  # it went away while we looked
        return found
    finally:
        conn.close()


def find_window(display: str, query: str) -> Window:
    return pick_window(list_windows(display), query)
