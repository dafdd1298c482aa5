#!/usr/bin/env python3
"""Check the host's Vulkan import on this machine's GPU driver, without an encoder or a display.

The host's capture server (pyrofling.server.capture, in process) serves a layer socket;
the stand-in layer presents coloured quadrants FIFO with the release semaphores the driver
offers (exported OPAQUE_FD semaphores on real GPUs); this script plays the heartbeat at
60 Hz, takes each frame as the encoder would and checks its pixels.  Then the readback
table of 'bench capture'.  Needs only numpy and the vulkan binding (for a lent GPU machine).

    PYTHONPATH=. python3 scripts/vulkan_gpu_check.py [--frames 600] [--size 1920x1080] [--semaphores auto]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
import threading
import time

from pyrofling.bench.vulkan_readback import format_table
from pyrofling.bench.vulkan_readback import run as readback
from pyrofling.capture.vulkan_standin import QUADRANTS, StandInLayer, quadrant_painter
from pyrofling.server.capture import CaptureServer


async def stream(frames: int, width: int, height: int, semaphores: str) -> dict[str, object]:
    folder = tempfile.mkdtemp(prefix="pyrofling-gpu-")
    server = CaptureServer(
        os.path.join(folder, "own.sock"), period_ns=16_666_667, layer_path=os.path.join(folder, "layer.sock")
    )
    loop = asyncio.get_running_loop()
    server.start(loop)
    layer = StandInLayer(server.layer_path or "", width, height, semaphores=semaphores)
    paint = quadrant_painter(layer.vk_format)
    done = threading.Event()

    def game() -> None:
        layer.connect()
        for _ in range(frames):
            layer.present(paint)
        done.set()

    thread = threading.Thread(target=game, daemon=True)
    thread.start()
    taken = wrong = 0
    spots = ((height // 4, width // 4), (height // 4, 3 * width // 4), (3 * height // 4, 3 * width // 4))
    spots += ((3 * height // 4, width // 4),)
    next_beat = loop.time()
    deadline = loop.time() + frames / 60 * 3 + 10
    while not done.is_set() and loop.time() < deadline:
        next_beat += 1 / 60
        await asyncio.sleep(max(0.0, next_beat - loop.time()))
        server.beat(loop.time(), next_beat + 1 / 60)
        frame = server.take()
        if frame is None:
            continue
        taken += 1
        for (y, x), (r, g, b) in zip(spots, QUADRANTS, strict=True):
            px = frame.array[y, x]
            got = (px[2], px[1], px[0]) if frame.pixel_format == "bgra" else (px[0], px[1], px[2])
            if any(abs(int(a) - c) > 2 for a, c in zip(got, (r, g, b), strict=True)):
                wrong += 1
                break
        server.release(frame)
    summary = server.summary()
    await loop.run_in_executor(None, thread.join, 5)
    median, sigma = layer.stats.interval_ms()
    result = {
        "gpu": layer.gpu_name,
        "semaphores": layer.semaphores,
        "size": f"{width}x{height}",
        "presents": layer.stats.presents,
        "errors": layer.stats.errors[-3:],
        "frames_taken": taken,
        "frames_wrong": wrong,
        "frame_complete_ms_median": round(median, 3),
        "frame_complete_ms_sigma": round(sigma, 3),
        "host": summary,
    }
    layer.close()
    server.close()
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=600)
    p.add_argument("--size", default="1920x1080")
    p.add_argument("--semaphores", default="auto", choices=("auto", "export", "eventfd", "none"))
    p.add_argument("--readback-frames", type=int, default=300)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    width, height = (int(v) for v in args.size.split("x"))
    started = time.monotonic()
    result = asyncio.run(stream(args.frames, width, height, args.semaphores))
    print(json.dumps(result, indent=1, default=str), flush=True)
    print(f"stream check took {time.monotonic() - started:.1f} s", flush=True)
    if args.readback_frames:
        print(format_table(readback(args.readback_frames)), flush=True)
    ok = result["presents"] == args.frames and result["frames_wrong"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
