"""The arithmetic of ``bench capture --sources`` and of ``bench input``'s photon through the host's desktop, on
made-up logs whose answers are known (the benches themselves run real hosts, desktops and viewers)."""

from __future__ import annotations

import pytest

from pyrofling.bench.capture_sources import SourceCase, format_table, summarize
from pyrofling.bench.input import desktop_photon

FRAME_S = 1 / 60


def test_the_sources_table_counts_new_pictures_not_encodes_and_times_each_pictures_first_encode() -> None:
    """30 new pictures a second encoded twice each at 60 a second: 30 new, 60 encoded; capture → encoded from the
    first encode of each picture only; drawn → decoded from the first decode of each marker; torn pictures left
    out of the counts; the host's CPU shared among the encodes."""
    t0, t1 = 10.0, 12.0
    trace, markers = [], []
    for k in range(120):  # an encode every 1/60 s, a new picture every other one, captured 2 ms before
        encoded = t0 + k * FRAME_S + 0.004
        picture = k // 2
        captured = t0 + picture * 2 * FRAME_S + 0.002
        trace.append({"encoded": encoded, "captured": captured})
        markers.append({"t": encoded + 0.003, "id": picture, "capture": captured - 0.001, "whole": True})
    markers.append({"t": t0 + 1.0, "id": 999, "capture": t0, "whole": False})  # torn: not a picture shown
    trace.append({"encoded": t1 + 0.5, "captured": t1 + 0.4})  # after the window
    row = summarize(SourceCase("headless", 1280, 720, 60), t0, t1, (1.0, 5.0), (1.6, 6.0), trace, markers, {})
    assert row["new_pictures_per_s"] == pytest.approx(30.0)
    assert row["encoded_per_s"] == pytest.approx(60.0)
    assert row["capture_to_encoded_ms_median"] == pytest.approx(2.0)  # 4 ms after the tick, captured 2 ms before it
    assert row["drawn_to_decoded_ms_median"] == pytest.approx(2.0 + 3.0 + 1.0)
    assert row["host_cpu_ms_per_frame"] == pytest.approx(600 / 120)
    assert row["host_cpu_pct"] == pytest.approx(30.0) and row["drawing_cpu_pct"] == pytest.approx(50.0)
    assert row["markers_torn"] == 1
    table = format_table({"rows": [row], "skipped": {"x11": "no Xvfb"}, "warmup_s": 3.0, "cpus": 2})
    assert "headless" in table and "30.0" in table and "x11: skipped: no Xvfb" in table


def test_photon_through_the_desktop_finds_the_programs_lag_and_times_each_step_to_its_first_picture() -> None:
    """Step N of the sweep is the program's N-th key event, less those it missed before its window came (5 here):
    each step's photon is from its send to the first decoded picture whose count, lag added, reaches it."""
    sent, applied, events, markers = [], [], [], []
    lag, key_s, shown_s = 5, 0.002, 0.040  # host write → the program's key; its key → decoded
    for step in range(1, 301):
        t = step * 0.004
        sent.append({"seq": 1000 + step, "step": step, "t": t})
        applied.append({"seq": 1000 + step, "t": t + 0.0005})
        if step > lag:  # the first keys came before the program's window had the keyboard
            events.append({"key": "A", "down": step % 2 == 1, "t": t + 0.0005 + key_s})
            markers.append({"t": t + 0.0005 + key_s + shown_s, "id": step - lag, "whole": True})
    photon = desktop_photon(sent, applied, events, markers, after_s=0.2)
    assert len(photon) == sum(1 for r in sent if r["t"] >= 0.2)
    assert photon == pytest.approx([0.5 + 2 + 40] * len(photon))
    # A program that showed nothing gives no samples rather than made-up ones.
    assert desktop_photon(sent, applied, [], markers, after_s=0.2) == []
