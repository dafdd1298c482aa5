"""What reading a Vulkan layer's image costs the host: import, copy into host memory, per frame.

The stand-in layer (:mod:`pyrofling.capture.vulkan_standin`) renders quadrants into
its exportable images; the host's :class:`ImportedGroup` imports them, as it does a
game's, and each frame is read as a present is: the copy recorded and submitted,
waited for, the pixels handed over as a numpy array.  Timed per frame, for each
size and each way into host memory the driver offers (an imported host pointer,
no CPU copy; a mapped buffer copied once).  The pixels are checked every frame.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from pyrofling.wire import capture as m

SIZES = ((1280, 720), (1920, 1080))


def _median(values: list[float]) -> float:
    return float(np.median(values)) if values else float("nan")


def _p95(values: list[float]) -> float:
    return float(np.percentile(values, 95)) if values else float("nan")


def measure(width: int, height: int, frames: int, *, host_pointers: bool | None = None) -> dict[str, Any]:
    """One size: per-frame milliseconds to submit the copy, wait for it, and the two together."""
    from pyrofling.capture.vulkan_standin import LAYOUT_SHADER_READ_ONLY, LAYOUT_TRANSFER_DST, StandInLayer
    from pyrofling.capture.vulkan_standin import quadrant_painter as painter
    from pyrofling.server.vulkan_import import ImportedGroup, VulkanHost

    layer = StandInLayer("", width, height, images=3, semaphores="none")
    host = VulkanHost()
    device = host.device_for(layer.device_message)
    if device is None:
        raise RuntimeError("the host does not see the stand-in's GPU")
    if host_pointers is not None:
        device.host_pointers = host_pointers and device.host_pointers
    formats = layer.view_formats
    group = m.VulkanImageGroup(
        3, width, height, layer.vk_format, 0, layer.usage, m.IMAGE_MUTABLE_FORMAT, 1, len(formats), formats
    )
    fds = layer.memory_fds()
    try:
        imported = ImportedGroup(device, group, fds)
    finally:
        for fd in fds:
            os.close(fd)
    paint = painter(layer.vk_format, shift=lambda n: n)
    total: list[float] = []
    wrong = 0
    for n in range(frames):
        index = n % 3
        layer.render(index, paint, n)  # the game's side: not timed
        started = time.perf_counter()
        imported.read(m.VulkanPresentImage(1, 1, index, 0, LAYOUT_TRANSFER_DST, LAYOUT_SHADER_READ_ONLY, n + 1), None)
        pixels = imported.pixels(index)
        total.append((time.perf_counter() - started) * 1000)
        want = layer.pixels_of(index)
        if not np.array_equal(pixels[:: height // 8, :: width // 8], want[:: height // 8, :: width // 8]):
            wrong += 1
    row = {
        "size": f"{width}x{height}",
        "gpu": device.ids.name,
        "path": "host pointer (no CPU copy)" if device.host_pointers else "mapped buffer + one CPU copy",
        "frames": frames,
        "readback_ms_median": round(_median(total), 3),
        "readback_ms_p95": round(_p95(total), 3),
        "submit_ms_median": round(_median(list(imported.stats.submit_ms)), 3),
        "wait_ms_median": round(_median(list(imported.stats.wait_ms)), 3),
        "frames_wrong": wrong,
    }
    imported.close()
    host.close()
    layer.close()
    return row


def run(frames: int = 200, *, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for width, height in SIZES:
        for host_pointers in (True, False):
            if progress is not None:
                progress(f"readback {width}x{height} {'host pointer' if host_pointers else 'mapped'} …")
            row = measure(width, height, frames, host_pointers=host_pointers)
            if rows and row["path"] == rows[-1]["path"] and row["size"] == rows[-1]["size"]:
                continue  # the driver has one way only
            rows.append(row)
    return {"frames": frames, "rows": rows}


def format_table(result: dict[str, Any]) -> str:
    rows = result["rows"]
    gpu = rows[0]["gpu"] if rows else "?"
    lines = [
        f"Vulkan layer image → host memory, per frame ({result['frames']} frames each, {gpu})",
        f"{'size':>10} {'path':<30} {'median ms':>10} {'p95 ms':>8} {'submit':>7} {'wait':>7} {'wrong':>6}",
    ]
    for r in rows:
        lines.append(
            f"{r['size']:>10} {r['path']:<30} {r['readback_ms_median']:>10.2f} {r['readback_ms_p95']:>8.2f} "
            f"{r['submit_ms_median']:>7.2f} {r['wait_ms_median']:>7.2f} {r['frames_wrong']:>6}"
        )
    lines.append("median/p95: submit the copy + wait for it + the pixels as numpy (what the host's loop spends)")
    return "\n".join(lines)
