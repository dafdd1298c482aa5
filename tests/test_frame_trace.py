"""Joining the host's and the viewer's frame traces, and blaming late pictures on a stage (pure)."""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pyrofling.bench.frame_trace import attribute, collector_runs, format_attribution, join, read_lines

PERIOD = 1 / 60


def host_line(i: int, *, encode_s: float = 0.006) -> dict[str, float]:
    due = 100.0 + i * PERIOD
    return {"capture_us": int(due * 1e6), "due": due, "woke": due + 0.0001, "loop": due + 0.0003,
            "encoded": due + 0.0003 + encode_s, "queued": due + 0.0005 + encode_s}  # fmt: skip


def view_line(i: int, h: dict[str, float], *, decode_s: float = 0.001, offset: float = 0.01) -> dict[str, float]:
    # The viewer's clock is 5 s ahead of the host's; the capture maps onto it.
    capture = h["due"] + 5.0
    sent = capture + (h["queued"] - h["woke"])
    first = sent + 0.0002
    done = first + 0.0003 + 0.0005 + 0.0001 + decode_s + 0.0005
    vblank = capture - 0.002  # the refresh this picture is for
    return {"vblank": vblank, "offset": offset, "deadline": 0.015, "late": done - (vblank + offset),
            "capture_us": h["capture_us"], "capture": capture, "first_s": first, "complete_s": first + 0.0003,
            "queued_s": first + 0.0006, "decode_start_s": first + 0.0007, "decoded_s": first + 0.0007 + decode_s,
            "done": done, "picked": done, "on_screen": vblank + PERIOD, "dropped": 0}  # fmt: skip


def test_late_pictures_are_blamed_on_the_stage_that_took_longer_than_usual() -> None:
    host = [host_line(i, encode_s=0.014 if i in (10, 20) else 0.006) for i in range(60)]
    view = []
    for i, h in enumerate(host):
        v = view_line(i, h, decode_s=0.012 if i == 30 else 0.001)
        if i in (10, 20, 30):  # these came after the deadline: a missed refresh, then shown at the next one
            view.append({"vblank": v["vblank"], "offset": v["offset"], "deadline": 0.015, "miss": True})
            v = dict(v, vblank=v["vblank"] + PERIOD)
        if i == 40:  # a picture decoded but dropped (a newer one was ready by the same refresh) is not a row
            view.append(dict(v, dropped_picture=True, seen=v["done"] + 0.003))
        view.append(v)
    rows = join(host, view)
    assert len(rows) == 60 and sum(1 for r in rows if r.get("missed")) == 3
    a = attribute(rows, startup_s=0)  # a second of pictures: no start-up to leave out
    assert a["late"] == 3 and a["missed"] == 3
    assert a["blame"] == {"encode": 2, "decode": 1}
    assert abs(a["blame_excess_ms"]["encode"] - 8.0) < 0.01 and abs(a["blame_excess_ms"]["decode"] - 11.0) < 0.01
    assert abs(a["stage_median_ms"]["pacer + network"] - 0.2) < 0.01  # mapped across the two clocks
    text = format_attribution("auto", a)
    assert "3 late pictures of 60" in text and "encode" in text


def test_a_trace_cut_short_by_a_stopping_process_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"a": 1}) + "\n" + '{"b": 2, "c"')
    assert read_lines(path) == [{"a": 1}]
    assert read_lines(tmp_path / "missing.jsonl") == []


def test_the_machines_busy_and_stolen_shares_come_from_proc_stat_ticks() -> None:
    from pyrofling.bench.latency import cpu_shares, machine_cpu

    # user nice system idle iowait irq softirq steal
    before = [100, 0, 20, 500, 0, 0, 0, 10]
    after = [160, 0, 30, 560, 10, 0, 0, 30]  # 70 busy, 70 idle, 20 stolen of 160 ticks
    shares = cpu_shares(before, after)
    assert shares == {"machine_busy_pct": 70 / 160 * 100, "machine_steal_pct": 20 / 160 * 100}
    assert cpu_shares(None, after) == {"machine_busy_pct": None, "machine_steal_pct": None}
    assert cpu_shares(after, after)["machine_steal_pct"] is None  # no time passed
    now = machine_cpu()
    assert now is None or (len(now) == 8 and all(v >= 0 for v in now))


def test_each_stage_reports_the_time_only_the_allowed_share_of_pictures_exceed() -> None:
    from pyrofling.bench.frame_trace import share_tail

    # 3600 encodes of 6 ms but two: at one in 3600 the tail is the second slowest, at one in 1800 the third.
    host = [host_line(i, encode_s=0.006 + (0.010 if i == 7 else 0.004 if i == 8 else 0.0)) for i in range(3600)]
    rows = join(host, [view_line(i, h) for i, h in enumerate(host)])
    a = attribute(rows, tail_share=1 / 3600, startup_s=0)
    assert abs(a["stage_tail_ms"]["encode"] - 10.0) < 0.01
    assert abs(attribute(rows, tail_share=1 / 1800, startup_s=0)["stage_tail_ms"]["encode"] - 6.0) < 0.01
    text = format_attribution("auto", a)
    assert "1 picture in 3600 ran over its median by more than (ms): encode +4.0" in text
    assert share_tail([3.0, 1.0, 2.0], 0.0) == 3.0 and share_tail([3.0, 1.0, 2.0], 0.34) == 2.0


def test_pictures_a_collector_run_overlapped_are_counted_per_process_and_its_runs_are_not_pictures() -> None:
    host = [host_line(i, encode_s=0.014 if i in (200, 300) else 0.006) for i in range(400)]
    view: list[dict[str, Any]] = []
    for i, h in enumerate(host):
        v = view_line(i, h, decode_s=0.012 if i == 250 else 0.001)
        if i in (200, 250, 300):
            view.append({"vblank": v["vblank"], "offset": v["offset"], "deadline": 0.015, "miss": True})
            v = dict(v, vblank=v["vblank"] + PERIOD)
        view.append(v)
    # The host's collector ran during picture 200's encode; the viewer's during picture 250's decode (its clock
    # is 5 s ahead); another host run touched no late picture.
    host_runs = [{"gc": 0, "start": host[200]["loop"] + 0.001, "end": host[200]["loop"] + 0.003, "collected": 0},
                 {"gc": 2, "start": host[100]["loop"], "end": host[100]["loop"] + 0.004, "collected": 9}]  # fmt: skip
    v250 = next(v for v in view if v.get("capture_us") == host[250]["capture_us"])
    view_runs = [{"gc": 1, "start": v250["decode_start_s"], "end": v250["decode_start_s"] + 0.002, "collected": 3}]
    host_lines, view_lines = host + host_runs, view[:100] + view_runs + view[100:]
    rows = join(host_lines, view_lines)
    assert len(rows) == 400  # a collector run is not a picture
    a = attribute(
        rows,
        host_gc=collector_runs(host_lines),
        viewer_gc=collector_runs(view_lines),
    )
    assert a["late"] == 3 and a["late_in_collection"] == {"host": 1, "viewer": 1}
    assert a["collector"]["host"]["2"]["runs"] == 1 and abs(a["collector"]["host"]["2"]["max_ms"] - 4.0) < 0.01
    text = format_attribution("auto", a)
    assert "late while the collector ran: host 1, viewer 1" in text and "viewer gen 1 1 (2.0/2.0 ms)" in text


def test_late_pictures_met_by_a_spell_of_the_whole_machine_running_slow_are_counted_apart() -> None:
    host = [host_line(i, encode_s=0.020 if i in (200, 300) else 0.006) for i in range(400)]
    view: list[dict[str, Any]] = []
    for i, h in enumerate(host):
        v = view_line(i, h)
        if i in (200, 300):
            view.append({"vblank": v["vblank"], "offset": v["offset"], "deadline": 0.015, "miss": True})
            v = dict(v, vblank=v["vblank"] + PERIOD)
        view.append(v)
    rows = join(host, view)
    capture = next(r["capture"] for r in rows if r["capture_us"] == host[200]["capture_us"])
    a = attribute(rows, machine_slow=[(capture + 0.002, capture + 0.030, 12.0)])  # on the viewer's clock
    assert a["late"] == 2 and a["late_in_machine_slow"] == 1
    assert "late while the whole machine ran slow (the pace meter's spells): 1 of 2" in format_attribution("a", a)
    assert attribute(rows)["late_in_machine_slow"] is None  # not measured: not claimed


def test_the_start_up_is_reported_apart_from_the_tails() -> None:
    # The first 2 s: a picture queues 40 ms for the decoder and is late; after them, one slow encode.
    host = [host_line(i, encode_s=0.014 if i == 500 else 0.006) for i in range(600)]
    view = []
    for i, h in enumerate(host):
        v = view_line(i, h)
        if i == 5:
            v = dict(v, decode_start_s=v["complete_s"] + 0.040, late=0.030)
        view.append(v)
    a = attribute(join(host, view))
    assert a["startup"]["pictures"] == 120 and a["startup"]["late"] == 1
    assert abs(a["startup"]["worst_queue_ms"] - 40.0) < 0.01
    assert a["pictures"] == 480 and a["stage_p999_ms"]["decode queue"] < 1.0  # the start-up's queue is not a tail
    assert "start-up (first 2 s, left out above): 1 late of 120, longest wait for the decoder 40.0 ms" in (
        format_attribution("auto", a)
    )


def one_slow_encode(thread: Callable[[bool], dict[str, Any]]) -> dict[str, Any]:
    """600 pictures, the encode of picture 400 slow (14 ms against 6) and missing its refresh; ``thread(slow)``
    each picture's encode-thread figures. Their attribution."""
    host = []
    for i in range(600):
        line: dict[str, Any] = dict(host_line(i, encode_s=0.014 if i == 400 else 0.006))
        line["thread"] = thread(i == 400)
        host.append(line)
    view = []
    for i, h in enumerate(host):
        v = view_line(i, h)
        if i == 400:
            view.append({"vblank": v["vblank"], "offset": v["offset"], "deadline": 0.015, "miss": True})
            v = dict(v, vblank=v["vblank"] + PERIOD)
        view.append(v)
    return attribute(join(host, view))


def test_the_encode_threads_time_of_late_pictures_is_split_into_cpu_waiting_and_blocked() -> None:
    a = one_slow_encode(
        lambda slow: (
            {"wall": 0.014, "cpu": 0.012, "runq": 0.001, "blocked": 0.001, "switches": 6}
            if slow
            else {"wall": 0.006, "cpu": 0.004, "runq": 0.0005, "blocked": 0.0015, "switches": 1}
        )
    )
    assert a["blame"] == {"encode": 1}
    assert a["encode_thread_ms"]["late"] == pytest.approx({"cpu": 12.0, "runq": 1.0, "blocked": 1.0, "switches": 6})
    assert a["encode_thread_ms"]["median"] == pytest.approx({"cpu": 4.0, "runq": 0.5, "blocked": 1.5, "switches": 1})
    said = format_attribution("auto", a)
    assert "on a CPU 4.0 -> 12.0" in said and "taken off its CPU 1.0 -> 6.0 times" in said


def test_the_late_pictures_codec_threads_waiting_for_a_cpu_is_told_apart_from_their_work() -> None:
    # A late encode whose slice threads did no more work but waited 3 ms for CPUs (one of them 2 ms).
    def thread(slow: bool) -> dict[str, Any]:
        codec = {"cpu": 0.020, "runq": 0.003, "runq_max": 0.002, "threads": 8} if slow else {
            "cpu": 0.020, "runq": 0.0001, "runq_max": 0.0001, "threads": 8}  # fmt: skip
        return {"wall": 0.014 if slow else 0.006, "cpu": 0.001, "runq": 0.0, "blocked": 0.005, "switches": 1,
                "codec": codec}  # fmt: skip

    a = one_slow_encode(thread)
    late, median = a["encode_thread_ms"]["late"], a["encode_thread_ms"]["median"]
    assert late["codec_runq"] == pytest.approx(3.0) and late["codec_runq_max"] == pytest.approx(2.0)
    assert median["codec_runq"] == pytest.approx(0.1) and late["codec_cpu"] == median["codec_cpu"]
    said = format_attribution("auto", a)
    assert "its codec threads, median -> late: on a CPU 20.0 -> 20.0" in said
    assert "waiting for a CPU 0.10 -> 3.00 (the longest one's wait 0.10 -> 2.00)" in said


def test_traces_without_the_codec_threads_figures_say_nothing_of_them() -> None:
    a = one_slow_encode(lambda slow: {"wall": 0.006, "cpu": 0.004, "runq": 0.0, "blocked": 0.002, "switches": 1})
    assert "codec_runq" not in a["encode_thread_ms"]["late"]
    assert "codec threads" not in format_attribution("auto", a)
