"""The example game's world and its numpy renderer (pure: no window, no host)."""

import numpy as np
import pytest

from pyrofling.capture.example_game import NumpyCanvas, World, stamp_marker
from pyrofling.core import frame_marker
from pyrofling.core.input.pad import NEUTRAL, STICK_MAX, PadState


def blob(image: np.ndarray, color: tuple[int, ...]) -> tuple[float, float, int]:
    """Centre (x, row) and pixel count of ``color`` in ``image``."""
    rows, xs = np.nonzero(np.all(image == np.array(color, np.uint8), axis=2))
    return float(xs.mean()), float(rows.mean()), len(xs)


def test_the_numpy_canvas_draws_each_ball_where_the_world_has_it_with_world_y_up() -> None:
    world = World(320, 240)
    world.x, world.y = 100.0, 60.0  # 60 px above the bottom
    world.bx, world.by = 250.0, 200.0
    image = np.zeros((240, 320, 4), np.uint8)
    NumpyCanvas(320, 240).draw(image, world)
    x, row, n = blob(image, NumpyCanvas.PLAYER)
    assert x == pytest.approx(100.0, abs=1) and row == pytest.approx(239 - 60, abs=1)
    assert n == pytest.approx(np.pi * 40**2, rel=0.05)
    x, row, n = blob(image, NumpyCanvas.BOUNCER)
    assert x == pytest.approx(250.0, abs=1) and row == pytest.approx(239 - 200, abs=1)
    assert n == pytest.approx(np.pi * 28**2, rel=0.08)
    assert blob(image, NumpyCanvas.GRID)[2] > 0 and (image[..., 3] == 255).all()  # a grid, and opaque


def test_a_ball_half_off_the_edge_is_clipped_not_wrapped() -> None:
    world = World(320, 240)
    world.x, world.y, world.bx, world.by = 0.0, 0.0, 160.0, 120.0
    image = np.zeros((240, 320, 4), np.uint8)
    NumpyCanvas(320, 240).draw(image, world)
    x, row, n = blob(image, NumpyCanvas.PLAYER)
    assert n == pytest.approx(np.pi * 40**2 / 4, rel=0.1) and x < 40 and row > 200  # the bottom-left quarter


def test_the_pad_steers_the_ball_and_a_stamp_survives_the_drawing() -> None:
    world = World(320, 240)
    world.step(PadState(lx=STICK_MAX), 0.1)  # full right for 0.1 s at 700 px/s
    assert world.x == pytest.approx(160 + 70) and world.y == pytest.approx(120)
    world.step(NEUTRAL, 0.1)
    image = np.zeros((240, 320, 4), np.uint8)
    NumpyCanvas(320, 240).draw(image, world)
    stamp_marker(image, 42, 1.5)
    layout = frame_marker.layout_for(320)
    assert layout is not None
    stamp = frame_marker.read(np.ascontiguousarray(image[:, :, 0]), layout)
    assert stamp is not None and stamp.frame_id == 42 and stamp.capture_us == 1_500_000
