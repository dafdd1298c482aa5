"""The viewer's second-by-second timeline (pure)."""

from pyrofling.core.viewer.timeline import Snapshot, Timeline


def snap(t: float, frames: int) -> Snapshot:
    return Snapshot(t=t, bytes_received=int(t * 1e6), refreshes=0, good_refreshes=0, frames_shown=frames,
                    stream_kbits=None)  # fmt: skip


def test_each_row_says_how_long_its_interval_was_the_last_cut_short_by_the_end() -> None:
    timeline = Timeline()
    for t, frames in ((10.0, 0), (11.0, 30), (12.0, 60), (12.4, 72)):
        timeline.sample(snap(t, frames), [])
    rows = list(timeline.rows)
    assert [(r["seconds"], r["frames"]) for r in rows] == [(1.0, 30), (1.0, 30), (0.4, 12)]
    assert [r["frames"] / r["seconds"] for r in rows] == [30.0, 30.0, 30.0]  # the same rate throughout
    assert rows[-1]["received_mbits"] == 8.0
