"""The pace meter: spells when the whole machine ran slow, found from a fixed piece of work's CPU time."""

import json
import os
from pathlib import Path

import pytest
from support import run, until

from pyrofling.bench.pace_meter import PaceMeter, overlaps, slow_spells, summarize


def test_slow_chunks_close_together_make_one_spell_with_its_worst_factor() -> None:
    # 100 µs chunks every 2 ms; a spell of 12× chunks at 1.0–1.04 s, a lone 4× chunk at 3.0 s, a 2× chunk
    # (not slow enough) at 2.0 s.
    samples = [(i * 0.002, 0.0001) for i in range(2000)]
    slow = {500: 0.0012, 505: 0.0011, 510: 0.0012, 750: 0.0004, 1000: 0.0002}
    samples = [(t, slow.get(i, cpu)) for i, (t, cpu) in enumerate(samples)]
    spells = slow_spells(samples)
    assert len(spells) == 2
    (a, b, worst), (c, d, lone) = spells
    assert d == pytest.approx(1.5 + 0.0004)
    assert a == pytest.approx(1.0) and b == pytest.approx(1.02 + 0.0012) and worst == pytest.approx(12.0)
    assert c == pytest.approx(1.5) and lone == pytest.approx(4.0)
    s = summarize(samples, spells)
    assert s["samples"] == 2000 and s["chunk_cpu_us_median"] == pytest.approx(100.0)
    assert s["longest_spell_ms"] == pytest.approx(21.2) and s["worst_factor"] == pytest.approx(12.0)
    assert s["spells_per_minute"] == pytest.approx(60 * 2 / 3.998)


def test_nothing_slow_and_nothing_measured_are_said_plainly() -> None:
    steady = [(i * 0.002, 0.0001) for i in range(100)]
    assert slow_spells(steady) == []
    assert summarize(steady, [])["slow_ms_per_minute"] == 0.0
    assert slow_spells([]) == [] and summarize([], [])["spells_per_minute"] is None


def test_a_time_span_meets_a_spell_only_where_they_overlap() -> None:
    spells = [(1.0, 1.05, 12.0)]
    assert overlaps(0.98, 1.01, spells) and overlaps(1.04, 1.2, spells)
    assert not overlaps(0.9, 0.99, spells) and not overlaps(1.06, 1.1, spells)
    assert not overlaps(None, 1.0, spells)


@pytest.mark.io
def test_the_meter_runs_in_its_own_process_and_keeps_what_it_measured_when_stopped(tmp_path: Path) -> None:
    out = tmp_path / "pace.json"
    meter = PaceMeter(60, out)

    def measured_some() -> bool:  # a piece written with a few samples; SCHED_IDLE on a loaded box may wait for them
        try:
            return int(json.loads(out.read_text())["samples"]) > 10
        except (OSError, ValueError, KeyError):
            return False

    run(lambda: until(measured_some, 60))
    if hasattr(os, "SCHED_IDLE"):  # it takes no CPU from the bench it sits beside
        assert os.sched_getscheduler(meter.pid) == os.SCHED_IDLE
    meter.stop()
    result = meter.result(timeout_s=30)
    assert result is not None and result["samples"] > 10 and result["chunk_cpu_us_median"] > 0
    assert isinstance(result["spells"], list)
