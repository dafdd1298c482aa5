"""How the window tells a flip that waits for the display's refresh from one that does not, in virtual time."""

from __future__ import annotations

import math
from dataclasses import dataclass

from pyrofling.client.display import flip_blocks


@dataclass
class FlippingWindow:
    """A window's flips on a virtual clock: paced ones end on the next refresh; unpaced ones take `unpaced_s`,
    or `busy_s` in the rounds a busy machine slows (counted by how often vsync was turned off)."""

    vsync_waits: bool
    unpaced_s: float
    busy_rounds: set[int]
    busy_s: float
    now: float = 0.0
    vsync: bool = True
    round: int = -1

    def set_vsync(self, on: bool) -> None:
        if not on:
            self.round += 1
        self.vsync = on

    def clear(self) -> None:
        pass

    def flip(self) -> None:
        busy = self.round in self.busy_rounds
        if self.vsync and self.vsync_waits:
            refresh = 1 / 60
            self.now = (math.floor(self.now / refresh + 1e-9) + 1) * refresh
        else:
            self.now += self.busy_s if busy and self.vsync else self.unpaced_s

    def clock(self) -> float:
        return self.now


def _blocks(window: FlippingWindow) -> bool:
    return flip_blocks(window, clock=window.clock)


def test_a_flip_that_waits_for_the_refresh_is_found_in_every_round() -> None:
    assert _blocks(FlippingWindow(vsync_waits=True, unpaced_s=0.0008, busy_rounds=set(), busy_s=0.0))
    # A slow software GL's unpaced flips (3.5 ms) are still far quicker than a refresh.
    assert _blocks(FlippingWindow(vsync_waits=True, unpaced_s=0.0035, busy_rounds={0, 1}, busy_s=0.0))


def test_a_busy_moment_that_slows_one_round_of_paced_flips_is_not_taken_for_vsync() -> None:
    # Xvfb: flips never wait, but the first rounds' paced flips came while another process took the CPU.
    window = FlippingWindow(vsync_waits=False, unpaced_s=0.001, busy_rounds={0, 1}, busy_s=0.012)
    assert not _blocks(window)
    assert window.round == 2  # it took the third round to see it
    assert not _blocks(FlippingWindow(vsync_waits=False, unpaced_s=0.001, busy_rounds=set(), busy_s=0.0))


def test_a_machine_busy_in_every_round_reads_as_vsync() -> None:
    # The limit of the measurement, stated: three rounds all slowed look like a refresh's wait.
    assert _blocks(FlippingWindow(vsync_waits=False, unpaced_s=0.001, busy_rounds={0, 1, 2}, busy_s=0.012))
