"""DISPLAY (protocol.md §7.14): which display the host's own desktop takes, in virtual time, and what the viewer
says and when."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pyrofling.core.host.display import MAX_PIXELS, MIN_INTERVAL_S, DisplayFollower, DisplayMode, FollowDisplay, fitted
from pyrofling.core.viewer.reassembler import ProgressCounters
from pyrofling.core.viewer.session import ControlToHost, Phase, ViewerSession, ViewerSessionConfig
from pyrofling.wire import ExtensionFeature, ViewerDisplay, parse_control


def test_a_display_becomes_a_size_the_encoder_and_the_desktop_take() -> None:
    assert fitted(ViewerDisplay(1920, 1080, 59_940)) == DisplayMode(1920, 1080, 59.94)
    assert fitted(ViewerDisplay(1367, 769, 0)) == DisplayMode(1366, 768, 0.0)  # even sides; rate unknown
    big = fitted(ViewerDisplay(7680, 4320, 60_000))  # 8K: its shape at 4K's pixels
    assert big.width * big.height <= MAX_PIXELS and abs(big.width / big.height - 16 / 9) < 0.01
    assert fitted(ViewerDisplay(0, 3, 1_000_000)) == DisplayMode(64, 64, 0.0)  # nonsense: the smallest, own rate


def _mode(out: Sequence[object]) -> list[tuple[int, int, int]]:
    return [(o.mode.width, o.mode.height, o.conn_id) for o in out if isinstance(o, FollowDisplay)]


def test_the_desktop_follows_the_longest_connected_viewer_and_changes_at_most_every_quarter_second() -> None:
    follow = DisplayFollower()
    assert _mode(follow.stated(2, ViewerDisplay(1280, 720, 60_000), now=10.0, connected_s=2.0)) == [(1280, 720, 2)]
    # A viewer that came earlier says its display later: it is the first, the desktop takes its size, but not
    # sooner than a quarter second after the last change.
    assert follow.stated(1, ViewerDisplay(1920, 1080, 60_000), now=10.1, connected_s=1.0) == []
    assert follow.next_timer() == pytest.approx(10.0 + MIN_INTERVAL_S)
    assert follow.handle_timer(10.2) == []
    assert _mode(follow.handle_timer(10.25)) == [(1920, 1080, 1)]
    assert follow.next_timer() is None
    # A window dragged through many sizes: only the last of a burst is made, once the interval allows.
    for i, width in enumerate(range(1000, 1400, 40)):
        assert follow.stated(1, ViewerDisplay(width, 700, 60_000), now=10.3 + i * 0.01, connected_s=1.0) == []
    assert _mode(follow.handle_timer(10.5)) == [(1360, 700, 1)]
    # The same display again changes nothing; a later viewer's says nothing while the first is there.
    assert follow.stated(1, ViewerDisplay(1360, 700, 60_000), now=11.0, connected_s=1.0) == []
    assert follow.stated(3, ViewerDisplay(800, 600, 60_000), now=11.0, connected_s=3.0) == []
    # The first leaves: the next-longest connected viewer's display.
    assert _mode(follow.left(1, now=12.0)) == [(1280, 720, 2)]
    assert follow.left(7, now=12.0) == []  # never said one
    assert _mode(follow.left(2, now=13.0)) == [(800, 600, 3)]
    # Nobody left who said one: the desktop keeps its size.
    assert follow.left(3, now=14.0) == []
    assert follow.applied == DisplayMode(800, 600, 60.0) and follow.changes == 5


def test_the_viewer_tells_its_display_before_its_kick_and_on_a_change_only_to_a_host_that_granted_it() -> None:
    def session(granted: ExtensionFeature) -> ViewerSession:
        s = ViewerSession(ProgressCounters(), ViewerSessionConfig(display=(1280, 720, 60_000)))
        s.cookie, s.extensions = 7, granted
        return s

    def said(out: Sequence[object]) -> list[ViewerDisplay]:
        msgs = [parse_control(o.data) for o in out if isinstance(o, ControlToHost)]
        return [m for m in msgs if isinstance(m, ViewerDisplay)]

    s = session(ExtensionFeature.DISPLAY)
    assert said(s._kick(0.0)) == [ViewerDisplay(1280, 720, 60_000)]
    assert said(s._kick(0.1)) == []  # said once, not at every KICK
    s.phase = Phase.STREAMING
    assert said(s.display_changed(1920, 1080, 60_000)) == [ViewerDisplay(1920, 1080, 60_000)]
    assert said(s.display_changed(1920, 1080, 60_000)) == []
    native = session(ExtensionFeature.NONE)  # a native host: never an extension message
    assert said(native._kick(0.0)) == []
    native.phase = Phase.STREAMING
    assert said(native.display_changed(1920, 1080, 60_000)) == []


def test_view_display_takes_a_size_and_a_rate_and_says_what_is_wrong_with_anything_else() -> None:
    import argparse

    from pyrofling.cli.view import display_option

    assert display_option("1920x1080@59.94") == (1920, 1080, 59.94)
    assert display_option("1280X720") == (1280, 720, 0.0)
    for bad, said in (("1920", "give WxH"), ("axb", "give WxH"), ("8x8", "16..16384"), ("640x480@5000", "0..1000")):
        with pytest.raises(argparse.ArgumentTypeError, match=said):
            display_option(bad)
