"""``pyrofling.harness`` and its pytest plugin: typed links and streams, figures read from a run, the same drops for
one seed, nothing left behind, and the example in docs/harness.md run as a reader would run it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pyrofling.harness import DEFAULT_BURSTS, Latency, Link, Second, Stream, result_from, run_stream, sweep
from pyrofling.harness.resources import held_now, left_behind
from pyrofling.netsim.models import Impairment, ImpairmentConfig

DOCS = Path(__file__).resolve().parent.parent / "docs" / "harness.md"
#: The smallest stream the viewer can judge: what the tests that only need a stream run.
SMALL: dict[str, Any] = {"width": 160, "height": 120, "fps": 30, "bitrate_kbits": 300}


def test_a_link_says_what_is_wrong_with_it() -> None:
    with pytest.raises(ValueError, match=r"loss=2 is not a probability \(0 to 1; 2 % is 0.02\)"):
        Link(loss=2)
    with pytest.raises(ValueError, match="not both"):
        Link(loss=0.01, bursts=DEFAULT_BURSTS)
    with pytest.raises(ValueError, match="loss_bad"):
        Link.gilbert_elliott(loss_bad=1.5)
    with pytest.raises(ValueError, match="delay_ms"):
        Link(delay_ms=-1)
    with pytest.raises(ValueError, match="shortest <= longest"):
        Link(outages=(2.0, 0.5, 0.1))
    with pytest.raises(ValueError):
        Link(schedule="soon rate-mbits=4")
    bursts = Link.gilbert_elliott(seed=9)
    assert bursts.bursts == DEFAULT_BURSTS and bursts.seed == 9
    assert bursts.mean_loss == pytest.approx(0.8 * 0.01 / 0.16)
    assert bursts.label() == "bursts 5.0%, seed 9"
    assert Link.iid(0.02).label() == "iid 2.0%, seed 1" and Link.iid(0.02).mean_loss == 0.02
    assert not Link(seed=5).impaired and Link(delay_ms=1).impaired
    assert Link(delay_ms=10, jitter_ms=5).label() == "10 ms each way, 5 ms jitter, seed 1"


def test_a_stream_refuses_what_the_judged_scene_cannot_show_or_the_host_cannot_do() -> None:
    with pytest.raises(ValueError, match="at least 160x120"):
        Stream(width=128, height=72)
    with pytest.raises(ValueError, match="divisible by 4"):
        Stream(width=640, height=362)
    with pytest.raises(ValueError, match="fec='raptor': one of auto, reference, tuned, adaptive, none"):
        Stream(fec="raptor")
    with pytest.raises(ValueError, match="recovery"):
        Stream(recovery="pray")
    with pytest.raises(ValueError, match="not one string"):
        Stream(host_args="--refresh-s 0.5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seconds"):
        Stream(seconds=0)
    assert Stream().label() == "720p60 10 Mbit/s for 10 s, FEC auto"


def test_run_stream_names_an_option_it_does_not_have_before_starting_anything() -> None:
    with pytest.raises(TypeError, match="not Stream's: loss, sekonds"):
        run_stream(sekonds=3, loss=0.1)


def _raw() -> dict[str, Any]:
    """A run's statistics as the three processes write them (the keys the result reads, and some it does not)."""
    quality = {"refreshes": 600, "good_refreshes": 591, "stale_refreshes": 6, "corrupt_refreshes": 3,
               "freezes": 1, "longest_freeze_ms": 83.3}  # fmt: skip
    viewer = {
        "presentation": {"quality": quality},
        "frames_shown": 598,
        "packets_recovered": 40,
        "packets_lost_video": 2,
        "keyframe_requests": 2,
        "latency_ms_samples": [float(x) for x in range(1, 101)],
        "timeline": [
            {"t": 100.5, "received_mbits": 9.5, "stream_kbits": 10000, "good_pct": 100.0, "frames": 60},
            {"t": 101.5, "received_mbits": 8.0, "stream_kbits": 8000, "good_pct": 98.5, "frames": 59},
        ],
    }
    host = {"frames_encoded": 600, "resent_datagrams": 17, "keyframes_forced": 3, "encoded_mbits": 9.1}
    netsim = {"down": {"received": 18000, "dropped": 3, "dropped_at": [5, 6, 900]}}
    return {"host": host, "viewers": [viewer], "netsim": netsim}


def test_the_result_reads_every_figure_from_the_runs_statistics() -> None:
    link = Link.gilbert_elliott(seed=4)
    r = result_from(Stream(seconds=10), link, _raw())
    assert (r.refreshes, r.good_refreshes, r.stale_refreshes, r.corrupt_refreshes) == (600, 591, 6, 3)
    assert r.good_refreshes_pct == pytest.approx(98.5)
    assert (r.freezes, r.longest_freeze_ms, r.frames_sent, r.frames_shown) == (1, 83.3, 600, 598)
    assert (r.fec_recovered, r.packets_lost_after_fec, r.resends) == (40, 2, 17)
    assert (r.key_frames_asked, r.key_frames_forced, r.bitrate_mbits) == (2, 3, 9.1)
    assert tuple(r.latency_ms) == pytest.approx((50.5, 95.05, 99.01))
    assert r.seconds == (Second(1.0, 9.5, 10000, 100.0), Second(2.0, 8.0, 8000, 98.5))
    assert (r.datagrams_on_link, r.datagrams_lost, r.dropped_datagrams) == (18000, 3, (5, 6, 900))
    assert r.link is link
    said = str(r)
    assert said.startswith("720p60 10 Mbit/s for 10 s, FEC auto through bursts 5.0%, seed 4: 98.50 % of 600")
    assert "dropped_datagrams" not in repr(r) and "raw" not in repr(r)  # the long ones stay out of messages


@pytest.mark.parametrize("cut", ["host", "viewers", "netsim", "presentation", "everything"])
def test_a_run_whose_statistics_are_missing_or_cut_short_reads_as_nothing_seen(cut: str) -> None:
    raw = _raw()
    if cut == "everything":
        raw = {}
    elif cut == "presentation":
        del raw["viewers"][0]["presentation"]
    else:
        raw[cut] = None
    r = result_from(Stream(), Link(), raw)
    if cut in ("viewers", "presentation", "everything"):
        assert r.refreshes == 0 and r.good_refreshes_pct == 0.0
    if cut in ("netsim", "everything"):
        assert (r.datagrams_on_link, r.datagrams_lost, r.dropped_datagrams) == (None, 0, ())
    if cut in ("viewers", "everything"):
        assert r.latency_ms == Latency(None, None, None) and r.seconds == ()


def test_sweep_parametrizes_every_combination_with_ids_a_reader_can_tell_apart() -> None:
    mark = sweep(link=[Link.iid(0.01), Link.gilbert_elliott()], fec=["auto", "none"])
    parametrize = mark.mark  # type: ignore[attr-defined]
    assert parametrize.name == "parametrize" and parametrize.args[0] == ["link", "fec"]
    assert len(parametrize.args[1]) == 4
    assert parametrize.kwargs["ids"] == ["iid 1.0%, seed 1-auto", "iid 1.0%, seed 1-none",
                                         "bursts 5.0%, seed 1-auto", "bursts 5.0%, seed 1-none"]  # fmt: skip
    with pytest.raises(ValueError, match="'fec' has no values"):
        sweep(fec=[])


@sweep(pyrofling_link=[Link.iid(0.02), Link(delay_ms=10, jitter_ms=5)])
def test_a_sweep_over_links_takes_the_place_of_the_plugins_link_fixture(pyrofling_link: Link) -> None:
    assert pyrofling_link.impaired and pyrofling_link != Link()


def test_netsim_lists_the_datagrams_it_drops_the_same_for_one_seed() -> None:
    def drops(seed: int, *, record: bool = True) -> tuple[list[int] | None, int]:
        link = Impairment(ImpairmentConfig(gilbert_elliott=DEFAULT_BURSTS), seed=seed, record_drops=record)
        for i in range(5000):
            link.process(i * 0.001, 1200)
        return link.dropped_at, link.stats.dropped

    first, dropped = drops(3)
    assert first is not None and len(first) == dropped > 100
    assert drops(3)[0] == first
    assert drops(4)[0] != first
    assert drops(3, record=False)[0] is None


# --- real runs: host, netsim and viewer as processes -----------------------------------------------------------


@pytest.mark.io
def test_five_runs_leave_no_thread_socket_descriptor_or_process_behind_even_after_a_timeout() -> None:
    """Straight to the host and through netsim, twice each, and one that times out between them: anything a run
    left behind (a thread, a socket, a descriptor, a process) shows up in the count after them."""
    before = held_now()
    results = []
    for n in range(5):
        if n == 2:  # a run that cannot end in time: TimeoutError, and everything stopped all the same
            with pytest.raises(TimeoutError, match=r"had not ended 0\.5 s"):
                run_stream(link=Link.iid(0.02, seed=n), seconds=30, timeout_s=0.5, **SMALL)
            continue
        link = Link.iid(0.02, seed=n) if n % 2 else Link()  # through netsim, or straight to the host
        results.append(run_stream(link=link, seconds=0.1, **SMALL))
    assert left_behind(before, held_now()) == []
    assert all(r.frames_sent > 0 for r in results)  # they did stream


def _example() -> str:
    text = DOCS.read_text()
    section = text.split("## An example test file", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "docs/harness.md has no example test file"
    return found.group(1)


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest as a reader runs it in their own project: its own folder, the installed plugin found by itself."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYROFLING_TIER"))}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=240)  # fmt: skip


@pytest.mark.io
def test_the_example_in_the_docs_runs_green_as_written_and_an_impossible_figure_fails_by_name(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_recovery.py").write_text(_example())
    green = _pytest(tmp_path, "-q")
    assert green.returncode == 0, green.stdout[-3000:] + green.stderr[-2000:]
    assert "3 passed" in green.stdout
    (tmp_path / "test_impossible.py").write_text(
        textwrap.dedent("""
        def test_every_refresh_and_more_is_good(pyrofling_stream):
            result = pyrofling_stream(width=160, height=120, seconds=1)
            assert result.good_refreshes_pct > 100
        """)
    )
    red = _pytest(tmp_path, "-q", "test_impossible.py")
    assert red.returncode == 1
    assert re.search(r"where [\d.]+ = StreamResult\(.*\)\.good_refreshes_pct", red.stdout), red.stdout[-3000:]
    assert "pyrofling streams" in red.stdout and "120p60" in red.stdout


@pytest.mark.io
def test_the_plugin_loads_nothing_heavy_and_changes_nothing_for_a_suite_that_does_not_use_it(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text(
        textwrap.dedent("""
        import sys

        def test_the_plugin_is_there_and_light(pytestconfig):
            assert pytestconfig.pluginmanager.has_plugin("pyrofling")
            heavy = ("av", "numpy", "pyrofling.bench", "pyrofling.server", "pyrofling.client")
            assert [m for m in heavy if m in sys.modules] == []

        def test_plain(tmp_path):
            assert tmp_path.exists()
        """)
    )
    with_plugin = _pytest(tmp_path, "-q")
    assert with_plugin.returncode == 0, with_plugin.stdout[-3000:]
    without = _pytest(tmp_path, "-q", "-p", "no:pyrofling", "-k", "not plugin_is_there")
    assert without.returncode == 0 and "1 passed" in without.stdout
    listed = _pytest(tmp_path, "--fixtures")
    assert "pyrofling_stream" in listed.stdout and "pyrofling_link" in listed.stdout


@pytest.mark.io
def test_bench_harness_runs_bench_stream_and_the_harness_on_one_seed_and_reports_both() -> None:
    """Three real runs through one seed's bursts (bench stream's, then the harness twice): the same datagrams
    dropped by all three, nothing left behind by the harness; and a size the viewer cannot judge refused first."""

    def bench(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pyrofling", "bench", "harness", *args], capture_output=True,
                              text=True, timeout=240)  # fmt: skip

    refused = bench("--width", "128", "--height", "72")
    assert refused.returncode == 2 and "at least 160x120" in refused.stderr
    proc = bench("--duration", "1", "--width", "160", "--height", "120", "--fps", "30", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert [run["run"] for run in result["runs"]] == ["bench stream", "harness 1", "harness 2"]
    assert all(run["refreshes"] > 0 and run["datagrams_on_link"] > 0 for run in result["runs"])
    for run in result["runs"]:  # what the refreshes that were not good were, and whether a packet was lost for good
        bad = run["stale_refreshes"] + run["corrupt_refreshes"]
        assert 0 <= bad <= run["refreshes"] and run["packets_lost_after_fec"] >= 0 and run["key_frames_asked"] >= 0
    assert result["same_drops"] and result["drops_compared"] > 0 and result["left_behind"] == []
    assert len(result["harness_minus_bench_points"]) == 2
