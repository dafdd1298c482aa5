"""``host --source headless --run COMMAND``: the host's own desktop, with real parts (mutter, PipeWire, Xwayland,
GStreamer) started by the test, and a program in it whose picture is known (``programs/marker_window.py``)."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from support import run, start_host, stop_host

from pyrofling.client.viewer import Viewer, ViewerConfig
from pyrofling.core import frame_marker
from pyrofling.core.host.headless import missing_packages, recording_caps, recording_rate
from pyrofling.server.encoder import EncoderConfig
from pyrofling.server.muxing import OutputConfig
from pyrofling.wire import KickFlags

MARKER_WINDOW = Path(__file__).parent / "programs" / "marker_window.py"
#: A picture big enough for the frame marker, small enough for mutter, the program and x264 on two cores.
DESK = EncoderConfig(width=640, height=360, fps=30, bitrate_kbits=2000)


def _need_a_desktop() -> None:
    missing = missing_packages(lambda program: shutil.which(program) is not None)
    try:
        import dbus_fast  # noqa: F401
        import gi  # noqa: F401
    except ImportError as exc:
        missing.append(f"pyrofling[headless] ({exc.name})")
    if missing:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(f"needs {', '.join(missing)} (scripts/setup)")


def _desktop_processes() -> list[int]:
    """Processes running in a pyrofling headless desktop (their runtime directory is one of its folders)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if b"XDG_RUNTIME_DIR=" in environ and b"pyrofling-desktop-" in environ:
            found.append(int(pid))
    return found


def test_the_recording_asks_for_headroom_above_the_stream_rate_and_refuses_a_size_mutter_cannot_make() -> None:
    assert recording_rate(60) == 90 and recording_rate(30) == 45 and recording_rate(0.1) == 1
    assert recording_caps(1280, 720, 60) == "video/x-raw,format=BGRx,width=1280,height=720,max-framerate=90/1"
    with pytest.raises(ValueError, match="even size"):
        recording_caps(1281, 720, 60)
    installed = {"mutter", "dbus-daemon"}
    assert missing_packages(installed.__contains__) == ["pipewire", "wireplumber", "xwayland"]
    assert missing_packages(installed.__contains__, x11=False) == ["pipewire", "wireplumber"]


def test_a_viewer_sees_the_program_running_in_the_hosts_headless_desktop_and_it_all_ends_with_the_host(
    tmp_path: Path,
) -> None:
    """The host starts its desktop, a virtual monitor at its stream size, and the program; a viewer watches.
    The recording of what was streamed carries the program's own frame markers, counting up: the program's
    picture, frame after frame, not merely frames. When the host stops, nothing of the desktop is left."""
    _need_a_desktop()
    record = tmp_path / "desktop.mkv"

    async def scenario() -> tuple[Viewer, dict[str, Any], list[int], list[int]]:
        host, task = await start_host(
            encoder=DESK, virtual_pad="none", source="headless", outputs=OutputConfig(record=record),
            run_command=f"{sys.executable} {MARKER_WINDOW} --fps 30",
        )  # fmt: skip
        try:
            running = _desktop_processes()
            viewer = Viewer(ViewerConfig(host="127.0.0.1", port=host.port or 0, duration_s=5.0, flags=KickFlags.VIDEO))
            await asyncio.wait_for(viewer.run(), 30)
        finally:
            await stop_host(host, task)
        return viewer, host.summary(), running, _desktop_processes()

    viewer, summary, running, left = run(scenario, timeout_s=90)
    assert len(running) >= 4  # the bus, PipeWire, WirePlumber, mutter (and Xwayland, the program)
    assert left == []  # all gone with the host
    assert viewer.summary()["frames_shown"] >= 60
    layout = frame_marker.layout_for(DESK.width)
    assert layout is not None
    ids = []
    with av.open(str(record)) as container:
        for frame in container.decode(video=0):
            stamp = frame_marker.read(np.asarray(frame.to_ndarray(format="gray")), layout)
            if stamp is not None:
                ids.append(stamp.frame_id)
    # The program counts its frames from 1: the stream carries them in order, many of them, unchanged by the trip.
    assert len(set(ids)) >= 60, ids[:20]
    assert all(b >= a for a, b in itertools.pairwise(ids)), "the program's frames went backwards"
    assert summary["frames_encoded"] > 0
