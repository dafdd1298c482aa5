import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pyrofling.cli import main
from pyrofling.cli.options import host_port as _host_port
from pyrofling.server.vulkan_import import vulkan_problem


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert all(cmd in out for cmd in ("host", "view", "demo", "gamepad", "example-game", "bench", "netsim"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "fec", "--k", "0"], "positive whole numbers"),
        (["bench", "fec", "--trials", "x"], "not a whole number"),
        (["netsim", "--upstream", "localhost:http"], "the port must be a number"),
        (["netsim", "--upstream", "127.0.0.1:1", "--loss", "2"], "not between 0 and 1"),
        (["netsim", "--upstream", "::1:5"], "IPv6"),
        (["netsim"], "--upstream"),
        (["netsim", "--upstream", "127.0.0.1:1", "--schedule", "10 speed=4"], "unknown key 'speed'"),
        (["netsim", "--upstream", "127.0.0.1:1", "--schedule", "30 loss=1%; 10 loss=0"], "time order"),
        (["host", "--rate-policy", "loudest"], "invalid choice"),
        (["host", "--min-bitrate-kbits", "50"], "out of range 100.."),
        (["bench", "adapt", "--policy", "gcc"], "give a comma list of pyrofling, reference"),
        (["host", "--width", "13"], "out of range 64..8192, even"),
        (["host", "--fps", "0"], "out of range"),
        (["host", "--fec", "x"], "not a FEC ratio"),
        (["bench", "stream", "--loss", "150%"], "below 1"),
        (["host", "--audio-skew-ppm", "9000"], "out of range -5000..5000"),
        (["host", "--audio-codec", "mp3"], "invalid choice"),
        (["view", "127.0.0.1:1", "--audio-target-ms", "1"], "out of range 5..500"),
        (["view", "127.0.0.1:1", "--audio-controller", "pid"], "invalid choice"),
        (["view", "127.0.0.1:1", "--gamepad-interval-ms", "0"], "out of range 1..1000"),
        (["view", "127.0.0.1:1", "--gamepad-source", "sdl"], "invalid choice"),
        (["gamepad"], "uri"),
        (["host", "--virtual-pad", "xinput"], "invalid choice"),
        (["bench", "input", "--duration", "1"], "out of range 2..3600"),
        (["example-game", "--width", "17"], "out of range 16..8192, even"),
        (["example-game", "--sync", "vsync"], "invalid choice"),
        (["example-game", "--images", "1"], "out of range 2..16"),
        (["example-game", "--headless", "--window"], "not allowed with"),
        (["bench", "capture", "--duration", "1"], "out of range 5..3600"),
        (["bench", "stream", "--viewers", "a"], "give whole numbers separated by commas"),
        (["bench", "audio", "--controllers", "pid"], "'pid': give a comma list of drift, reference"),
        (["bench", "audio", "--cases", "fast,windy"], "'fast,windy': give a comma list of fast, slow, loss"),
        (["bench", "capture", "--cases", "loopback"], "give a comma list of game, game-immediate"),
        (["bench", "outputs", "--modes", "plain,tape"], "give a comma list of plain, record"),
        (["bench", "latency", "--modes", "fast"], "give a comma list of free, reference, pi"),
    ],
)
def test_bad_flags_say_what_is_wrong(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_host_port_forms() -> None:
    assert _host_port("9000") == ("127.0.0.1", 9000)
    assert _host_port("[::1]:9000") == ("::1", 9000)
    assert _host_port("example.org:1") == ("example.org", 1)


def test_missing_trace_file_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["netsim", "--upstream", "127.0.0.1:1", "--trace", "/nonexistent", "--duration", "1"])
    assert exc.value.code == 2 and "cannot read the loss trace (No such file" in capsys.readouterr().err


def test_schedule_file_is_read_before_starting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["netsim", "--upstream", "127.0.0.1:1", "--schedule-file", "/nonexistent"])
    assert exc.value.code == 2 and "cannot read the schedule (No such file" in capsys.readouterr().err
    bad = tmp_path / "steps.txt"
    bad.write_text("# a drop and back\n10 rate-mbits=4 queue-ms=50\n5 rate-mbits=10\n")
    with pytest.raises(SystemExit) as exc:
        main(["netsim", "--upstream", "127.0.0.1:1", "--schedule-file", str(bad)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"{bad}:3" in err and "time order" in err


@pytest.mark.io
@pytest.mark.timeout(60)
def test_netsim_runs_and_reports_as_a_program() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pyrofling", "netsim", "--upstream", "127.0.0.1:9", "--duration", "0.2", "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert '"down"' in out.stdout and "viewers connect to 127.0.0.1:" in out.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["view", "http://127.0.0.1:1", "--headless"], "unsupported scheme"),
        (["view", "pyro://127.0.0.1:1?fps=2", "--headless"], "unknown URI parameter"),
        (["host", "--audio-codec", "opus", "--audio-rate", "44100"], "Opus needs a rate of 8000"),
        (["host", "--audio-codec", "opus", "--audio-chunk-ms", "3"], "Opus frames are 2.5, 5, 10, 20 ms"),
        (["host", "--immediate-encode"], "applies to games (--source capture)"),
        (["host", "--encode-mode", "heartbeat"], "--encode-mode applies to games"),
        (["host", "--window", "Doom"], "--window picks a window to grab: it needs --source x11"),
        (["host", "--source", "x11", "--cursor", "hidden"], "--cursor goes with --source wayland"),
        (["host", "--virtual-input", "portal"], "--virtual-input portal goes with --source wayland"),
        (["host", "--layer-socket", "/tmp/x.sock"], "--layer-socket / --no-layer-socket apply to games"),
        (
            ["host", "--source", "capture", "--layer-socket", "/tmp/x", "--no-layer-socket"],
            "contradicts --no-layer-socket",
        ),
        (
            ["host", "--source", "capture", "--immediate-encode", "--encode-mode", "heartbeat"],
            "contradicts --encode-mode heartbeat",
        ),
        (["view", "127.0.0.1:1", "--phase-locked", "auto", "--deadline", "0.01"], "finds its own deadline"),
        (["host", "--audio", "game"], "needs --source capture"),
        (["host", "--source", "webcam"], "unknown source 'webcam'"),
        (["host", "--record", "game.mp4"], "name the file .mkv"),
        (["host", "--broadcast", "http://example.com/live/key"], "RTMP ingest URL"),
        (["host", "--broadcast", "rtmp://h/app/k", "--broadcast-keyint", "4"], "add --broadcast-bitrate-kbits"),
        (["host", "--broadcast-bitrate-kbits", "3000"], "applies to --broadcast"),
        (["bench", "outputs", "--modes", "both"], "must include plain"),
        (["bench", "security", "--modes", "sealed"], "must include open"),
        (["host", "--password", "abc"], "too short"),
        (["pair", "pyro://127.0.0.1:1"], "give the host's pairing code"),
        (["pair", "pyro://127.0.0.1:1", "--code", "abcd-efgh-jkmn", "--name", ""], "--name must be"),
        (["paired", "revoke"], "revoke which?"),
        (["host", "--pairing-code", "--password", "abcdefgh"], "drop --password"),
        (["view", "127.0.0.1:1", "--native", "--password", "abcdefgh"], "cannot authenticate"),
    ],
)
def test_bad_values_are_explained(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_a_phase_lock_that_is_neither_auto_off_nor_an_offset_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["view", "127.0.0.1:1", "--phase-locked", "soon", "--headless"])
    assert exit_.value.code == 2
    assert "'soon' is not a number of seconds; or 'auto' (the default) or 'off'" in capsys.readouterr().err


def test_view_without_a_display_says_to_use_headless(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert main(["view", "pyro://127.0.0.1:1"]) == 2
    assert "--headless" in capsys.readouterr().err


@pytest.mark.io
def test_host_with_an_unknown_encoder_fails_clearly() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pyrofling", "host", "--port", "0", "--encoder", "nope", "--duration", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "encoder 'nope' is not available" in proc.stderr and "libx264" in proc.stderr


@pytest.mark.io
def test_bench_stream_smoke_through_netsim() -> None:
    """The real processes (host, netsim, viewer) for two seconds at a tiny size; the table has its numbers."""
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "pyrofling", "bench", "stream", "--duration", "2", "--width", "320"),
            *("--height", "240", "--fps", "30", "--bitrate-kbits", "500", "--loss", "2%", "--json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    [row] = json.loads(proc.stdout)["rows"]
    assert row["frames_shown"] >= 15  # of 60 in the 2 s: the pictures flowed (how many is the bench's to say)
    assert row["datagrams_dropped_by_netsim"] is not None
    assert row["latency_ms_median"] is not None and row["latency_ms_median"] > 0
    assert row["host_cpu_pct"] > 0 and row["viewer_cpu_pct"][0] > 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["view", "pyro://127.0.0.1:1?phase_locked=2", "--headless"], "phase_locked=2 is out of range"),
        (["view", "pyro://127.0.0.1:1?deadline=-1", "--headless"], "deadline=-1 is out of range"),
    ],
)
def test_bad_presentation_values_are_explained(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [["view", "x:1", "--phase-locked", "5"], ["view", "x:1", "--refresh-hz", "0"], ["host", "--phase-controller", "x"]],
)
def test_bad_presentation_flags_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and "error" in capsys.readouterr().err


def test_bench_phase_is_deterministic_and_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "phase", "--duration", "3", "--phases", "2", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(["bench", "phase", "--duration", "3", "--phases", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == first
    assert {r["controller"] for r in first["rows"]} == {"pi", "reference", "none"}


def test_bench_receive_streams_every_picture_through_both_cores_and_times_a_datagram(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["bench", "receive", "--frames", "200", "--bitrate-kbits", "6000", "--fps", "60", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["picture_bytes"] == 6_000_000 // 8 // 60
    # Every picture reached the decoder (the warm-up block's too), each in its data blocks at least.
    assert r["pictures_decodable"] == 300
    assert r["datagrams_per_picture"] >= -(-r["picture_bytes"] // 1024)
    assert all(r[k] > 0 for k in ("host_us_per_datagram", "viewer_us_per_datagram", "viewer_next_timer_us"))
    assert main(["bench", "receive", "--frames", "200"]) == 0
    assert "viewer, a datagram" in capsys.readouterr().out


def test_bench_phase_replays_a_latency_runs_pictures_or_says_what_the_file_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recorded = tmp_path / "lat.json"
    recorded.write_text(json.dumps({"rows": [{"mode": "auto", "ready_ms": [8.0 + (i % 7) * 0.1 for i in range(900)]}]}))
    assert main(["bench", "phase", "--replay", str(recorded), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["replay"]
    assert {r["rule"] for r in rows} == {"free-running", "auto", "auto, window only"}
    assert all(r["run"] == "auto" and r["pictures"] == 900 for r in rows)
    assert all(r["repeats_per_minute"] == 0.0 for r in rows if r["rule"] != "free-running")
    (tmp_path / "other.json").write_text(json.dumps({"rows": [{"mode": "auto"}]}))
    (tmp_path / "text.json").write_text("presented 3000")
    for name, said in (("missing.json", "No such file"), ("other.json", "no recorded ready times"),
                       ("text.json", "not JSON")):  # fmt: skip
        assert main(["bench", "phase", "--replay", str(tmp_path / name)]) == 2
        assert said in capsys.readouterr().err
    # The viewer's rule with a longer wait beside it, named by how much longer; only with recorded pictures.
    assert main(["bench", "phase", "--replay", str(recorded), "--longer-waits", "0.5,1", "--json"]) == 0
    rules = [r["rule"] for r in json.loads(capsys.readouterr().out)["replay"]]
    assert rules[-2:] == ["auto, wait +0.5 ms", "auto, wait +1 ms"]
    assert main(["bench", "phase", "--longer-waits", "0.5"]) == 2
    assert "--longer-waits goes with --replay" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", "phase", "--replay", str(recorded), "--longer-waits", "7"])
    assert "7 ms is out of range 0..5" in capsys.readouterr().err


@pytest.mark.io
@pytest.mark.realtime
def test_bench_latency_smoke_locks_and_measures_glass_to_glass(tmp_path: Path) -> None:
    """Real host and viewer at a tiny size: the automatic offset and pyrofling's controller at 0/8 ms, taking
    turns in two rounds each, with both ends' frame traces."""
    proc = subprocess.run(
        [
            # 6 s a run: on a loaded 2-core machine (the hypervisor taking 8-14 % of its CPU) one of two runs of
            # 2.5 s never locked, the other too late to count; at 15-30 % (and the suite's two workers beside it)
            # neither of two runs of 4 s did.
            *(sys.executable, "-m", "pyrofling", "bench", "latency", "--duration", "12", "--width", "320"),
            *("--height", "240", "--fps", "30", "--bitrate-kbits", "500", "--refresh-hz", "29.97"),
            *("--modes", "pi,auto", "--rounds", "2", "--trace", str(tmp_path / "traces"), "--json"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    pi, auto = json.loads(proc.stdout)["rows"]
    for row in (pi, auto):
        assert row["rounds"] == 2 and row["presented"] >= 100  # two runs of 6 s at 30 Hz, pooled
        assert row["glass_ms_median"] is not None and row["glass_ms_median"] > row["decoded_ms_median"] > 0
        # The ready times after lock of both runs pooled (one per picture the host encoded at most: pictures still
        # waiting for their refresh when a viewer stops are neither presented nor dropped), and the lowest median a
        # lock could reach on them (how low, against the ready times, is the bench's to report).
        # How early it locked is the machine's (a loaded one locked 4 s into a 5 s run once): the test asks that
        # it locked and that pictures came after the lock.
        assert row["minutes_locked"] > 0 and 0 < len(row["ready_ms"]) <= row["frames_encoded"]
        assert 0 < row["ready_ms_median"] <= row["ready_ms_tail"] and row["lock_bound_ms"] > 0
        assert row["phase_trace"] and row["rate_trim_ppm"] is not None
        assert row["late_pictures"]["pictures"] >= 60  # both ends' traces joined
        assert 0 < row["machine_busy_pct"] <= 100 and 0 <= row["machine_steal_pct"] < 100  # the machine's state
        assert row["machine_slow_ms_per_min"] is not None and row["machine_slow_ms_per_min"] >= 0  # pace meter
    assert pi["offset_ms"] == 0 and pi["deadline_ms"] == 8
    assert 0 < auto["offset_ms"] < auto["deadline_ms"] < 1000 / 29.97  # found by the viewer, before its deadline
    assert len(list((tmp_path / "traces").glob("*.jsonl"))) == 8


@pytest.mark.io
@pytest.mark.realtime
def test_bench_audio_smoke_plays_into_jack_and_times_the_clicks() -> None:
    """Real host, netsim (jitter) and viewer playing into a JACK dummy server the bench starts, for 8 s."""
    proc = subprocess.run(
        [sys.executable, "-m", "pyrofling", "bench", "audio", "--duration", "8", "--cases", "fast", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode == 1 and "jackd" in proc.stderr:
        pytest.skip(proc.stderr.strip())
    assert proc.returncode == 0, proc.stderr
    [row] = json.loads(proc.stdout)["rows"]
    assert row["label"] == "drift +500 ppm jitter 5 ms"
    assert row["error"] is None and "JACK" in row["device"]
    # Underruns (JACK is not real-time here; a busy machine starves it) are the bench's to report, not judged.
    assert isinstance(row["underruns_after_start"], int)
    assert row["packets"] > 900
    # The buffer held sound (how near the 30 ms target is the bench's to measure, not this test's).
    assert row["buffered_ms_median"] > 0
    # The host's clock runs fast, so once the controller has learned the skew the viewer plays faster. The
    # whole-run mean includes start-up, which on a loaded machine can pull it either way; judge the second half
    # (its median: a refill after a dip on a busy machine slows it for a moment, once read over the last 2 s alone).
    # (Only where JACK was not starved: after an underrun the controller slows down to refill, rightly.)
    late_speeds_ppm = sorted(ppm for t, _, ppm in row["series"] if t >= row["series"][-1][0] / 2)
    assert row["underruns_after_start"] > 0 or late_speeds_ppm[len(late_speeds_ppm) // 2] > 0
    assert row["latency_ms_median"] is not None and row["av_offset_ms"] is not None
    assert row["series"] and row["latency_ms_samples"]


def test_gamepad_client_with_a_bad_address_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gamepad", "pyro://host:notaport"]) == 2
    assert "pyrofling gamepad:" in capsys.readouterr().err


@pytest.mark.io
def test_bench_input_smoke_times_sends_to_the_virtual_pad() -> None:
    """Real host (with its gamepad trace) and the gamepad-only client with a sweeping synthetic pad, 3 s."""
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "pyrofling", "bench", "input", "--duration", "3", "--cases", "loopback"),
            *("--client", "gamepad", "--width", "320", "--height", "240", "--json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    [row] = json.loads(proc.stdout)["rows"]
    assert row["label"] == "loopback"
    # Every state moves the pad on loopback, but the last one or two may race the client's goodbye.
    assert row["sent"] > 300 and row["sent"] - 2 <= row["applied"] <= row["sent"]
    assert len(row["latency_ms_samples"]) == row["applied"]
    assert 0 < row["latency_ms_median"] <= row["latency_ms_p99"] <= row["latency_ms_max"] < 1000


@pytest.mark.io
def test_bench_capture_smoke_streams_the_example_game_and_times_input_to_photon() -> None:
    """Host (--source capture --immediate-encode), the example game headless, a phase-locked viewer, 6 s at 320x240."""
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "pyrofling", "bench", "capture", "--duration", "6", "--cases", "game-immediate"),
            *("--width", "320", "--height", "240", "--readback-frames", "20", "--json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    [row] = result["rows"]
    capture, game = row["capture"], row["game"]
    # Nearly every present encoded (under outside load a late heartbeat supersedes a few: 8 of 251 in one suite).
    assert capture["presents"] > 100 and capture["encoded"] >= 0.9 * capture["presents"]
    assert game["connects"] == 1 and game["disconnects"] == 0 and game["gamepad_states"] > 100
    assert capture["presents"] <= row["heartbeats"]  # paced by the host's heartbeat: one present each at most
    assert game["interval_ms_median"] > 0  # the pace itself is the bench's to report
    assert row["photon_samples"] > 100 and row["photon_ms_median"] > 0  # how short is the bench's to report
    if vulkan_problem() is None:  # the Vulkan layer's readback: 720p and 1080p, every frame's pixels right
        readback = result["vulkan_readback"]["rows"]
        assert {r["size"] for r in readback} == {"1280x720", "1920x1080"}
        assert all(r["frames"] == 20 and r["frames_wrong"] == 0 and r["readback_ms_median"] > 0 for r in readback)


@pytest.mark.io
def test_bench_outputs_smoke_records_broadcasts_and_compares_with_plain() -> None:
    """Host + viewer with no outputs and with --record + --broadcast to a real nginx-rtmp, 3 s each at 320x240."""
    from pyrofling.bench import nginx

    if nginx.missing():
        pytest.skip(nginx.missing() or "")
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "pyrofling", "bench", "outputs", "--duration", "3", "--rounds", "1"),
            *("--width", "320", "--height", "240", "--fps", "30", "--bitrate-kbits", "500", "--json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    plain, both = json.loads(proc.stdout)["modes"]
    assert plain["mode"] == "plain" and plain["output_cpu_pct"] == 0 and plain["recorded_packets"] == 0
    assert both["mode"] == "both" and both["output_failures"] == 0 and both["output_dropped"] == 0
    assert both["recorded_frames"] == both["recorded_packets"] > 60  # the file decodes to every packet muxed
    assert both["broadcast_packets"] > 60 and both["output_cpu_pct"] > 0
    assert "extra_cpu_pct" in both and "extra_latency_ms" in both


@pytest.mark.io
def test_bench_security_smoke_authenticates_and_seals_every_run() -> None:
    """Open host vs. password and paired hosts, everything sealed, 4 s each at 320x240 (a loaded suite once held a
    sealed viewer's first picture past 3 s); then six handshakes each way in (twenty, the default, take 8 s a way
    at the pace the host admits one address's challenges)."""
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "pyrofling", "bench", "security", "--duration", "4", "--rounds", "1"),
            *("--handshakes", "6"),
            *("--width", "320", "--height", "240", "--fps", "30", "--bitrate-kbits", "500", "--json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    open_mode, sealed, paired = result["modes"]
    assert open_mode["authenticated"] == 0 and open_mode["sealed_runs"] == 0
    assert sealed["authenticated"] == sealed["sealed_runs"] == 1 and paired["sealed_runs"] == 1
    for m in (sealed, paired):
        # Sealed pictures flowed (4 s runs: on a loaded machine the handshakes take a second of them, or more).
        assert m["shown_of_expected_pct"] > 20 and m["viewer_refused"] == 0 and "extra_host_cpu_pct" in m
    shakes = result["handshakes"]
    assert [shakes[w]["count"] for w in ("open host", "password", "pinned keys")] == [6, 6, 6]
    assert all(shakes[w]["median_ms"] > 0 for w in shakes)  # which is faster is the bench's to report


@pytest.mark.io
def test_bench_security_attacks_reflect_finds_no_reflector_in_any_mode() -> None:
    """The attacker takes a cookie on its own connection and sends it, pings and sealed-looking datagrams from a
    victim's address (127.0.0.3): an open, a password and a private host send the victim nothing."""
    proc = subprocess.run(
        [sys.executable, "-m", "pyrofling", "bench", "security", "--attacks", "reflect", "--attacks-only", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert [m["mode"] for m in result["reflect"]] == ["open", "password", "private"]
    for m in result["reflect"]:
        assert m["bytes_from_victim"] > 3000 and m["bytes_to_victim"] == 0, m


@pytest.mark.io
@pytest.mark.realtime
def test_bench_soak_smoke_watches_memory_cpu_and_frames_of_a_host_and_three_viewers() -> None:
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "pyrofling", "bench", "soak", "--duration", "10", "--sample", "1.5"),
            # A smoke run of 10 s: on a loaded machine the viewers are still settling after 4 s, so the
            # memory bound here is wide; the real soak (30 min) keeps its 5 %.
            *("--warmup", "4", "--memory-bound", "15", "--width", "160", "--height", "120", "--json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    verdict = ""
    with contextlib.suppress(ValueError, KeyError):
        out = json.loads(proc.stdout)
        verdict = json.dumps({k: out[k] for k in ("errors", "problem_lines", "memory_flat", "memory")})
    r = json.loads(proc.stdout)
    # With the suite's other workers on the same two cores, the viewer behind netsim is starved for seconds and
    # the host reads its late datagrams as a narrow link, which that viewer's log says: the bench counts it, as
    # it should in a real soak (on a machine of its own); here it is the load, not the stream. So is the host's
    # encoder stepping down from real-time where the workers beside it left it less than half of its CPU.
    loaded = {"viewer1": "your link carries about", "host": "step down from real-time"}
    said = {name: [line for line in r["problem_lines"].get(name, []) if mark in line] for name, mark in loaded.items()}
    starved = [line for lines in said.values() for line in lines]
    errors = {
        k: n
        for k, n in r["errors"].items()
        if not any(k == f"{name} log warnings/errors" and n == len(lines) for name, lines in said.items())
    }
    assert proc.returncode == (1 if starved else 0), verdict + proc.stderr[-3000:]
    assert errors == {} and r["memory_flat"], verdict
    assert set(r["memory"]) == {"host", "viewer1", "viewer2", "viewer3"}
    assert all(m["baseline_mb"] > 10 for m in r["memory"].values())
    assert len(r["samples"]) >= 5 and all(s["host"]["alive"] for s in r["samples"])
    assert all(v["frames_shown"] > 200 for v in r["viewers"])  # 60 fps for 10 s, one through 5 % bursty loss
    assert r["viewers"][0]["network"].startswith("Gilbert") and r["host"]["auth"]["successes"] == 3


def test_the_soaks_memory_baseline_waits_for_each_viewers_first_picture() -> None:
    """A viewer that a loaded machine starts late (its decoder's buffers coming with its first picture, here at
    6 s) is measured from its own warm-up, not from the run's: its growth before that is not a leak."""
    from pyrofling.bench.soak import SoakConfig, summarize

    def sample(t: float, viewer_mb: float, shown: int) -> dict[str, Any]:
        viewer = {"alive": True, "rss_mb": viewer_mb, "frames_shown": shown}
        return {"t_s": t, "host": {"alive": True, "rss_mb": 80.0}, "viewer1": viewer}

    samples = [sample(0, 70, 0), sample(2, 70, 0), sample(4, 72, 0), sample(6, 185, 30), sample(8, 186, 150),
               sample(10, 186, 270), sample(12, 186, 390)]  # fmt: skip
    cfg = SoakConfig(duration_s=12, sample_s=2, warmup_s=4, memory_bound_pct=5)
    result = summarize(cfg, ["host", "viewer1"], samples, {}, {"host": 0, "viewer1": 0}, {}, 12.0)
    assert result["memory"]["viewer1"]["baseline_mb"] == 186 and result["memory"]["host"]["baseline_mb"] == 80
    assert result["memory_flat"]
    grows = [*samples[:-1], sample(12, 200, 390)]  # after its warm-up it grows: that is judged
    assert not summarize(cfg, ["host", "viewer1"], grows, {}, {"host": 0, "viewer1": 0}, {}, 12.0)["memory_flat"]


@pytest.mark.io
def test_bench_soak_explains_a_bad_duration() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pyrofling", "bench", "soak", "--duration", "3"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "from 10 s to a week (e.g. 600, 30m, 2h)" in proc.stderr


def test_the_bitrate_floor_has_one_default_whoever_makes_the_host() -> None:
    """The command line and HostConfig agree: a tenth of the ceiling, at least 500 kbit/s, never above it."""
    from pyrofling.cli import build_parser
    from pyrofling.cli.host import host_config
    from pyrofling.server.config import HostConfig
    from pyrofling.server.encoder import EncoderConfig

    for kbits in (300, 4000, 20_000):
        args = build_parser().parse_args(["host", "--bitrate-kbits", str(kbits)])
        by_flags = host_config(args).floor_kbits
        by_config = HostConfig(encoder=EncoderConfig(bitrate_kbits=kbits)).floor_kbits
        assert by_flags == by_config == min(kbits, max(500, kbits // 10))


def test_spectators_take_a_janus_http_address_and_its_admin_key_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pyrofling.cli import build_parser
    from pyrofling.cli.host import host_config

    with pytest.raises(ValueError, match=r"--spectators takes the HTTP API address of a Janus server"):
        host_config(build_parser("host").parse_args(["host", "--spectators", "rtmp://example.com/live"]))
    monkeypatch.setenv("PYROFLING_JANUS_ADMIN_KEY", "plugin-key")
    args = build_parser("host").parse_args(
        ["host", "--spectators", "http://10.0.0.2:8088/janus", "--spectators-id", "7"]
    )
    outputs = host_config(args).outputs
    assert (outputs.spectators, outputs.spectators_admin_key, outputs.spectators_id) == (
        "http://10.0.0.2:8088/janus", "plugin-key", 7)  # fmt: skip
    assert outputs.enabled  # spectators alone open the host's destinations


def test_the_environment_sets_whether_threads_ask_for_priority_and_a_wrong_value_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``PYROFLING_THREAD_PRIORITY=normal``: no command raises its threads (the test suite's own workers run so,
    leaving the CPU to the tests judged against a clock); the flag still wins; a wrong value stops at once."""
    from pyrofling.cli import build_parser

    monkeypatch.delenv("PYROFLING_THREAD_PRIORITY", raising=False)  # ./scripts/test's workers run with it set
    assert build_parser("host").parse_args(["host"]).thread_priority == "auto"
    monkeypatch.setenv("PYROFLING_THREAD_PRIORITY", "normal")
    for command in ("host", "view"):
        extra = ["x"] if command == "view" else []
        assert build_parser(command).parse_args([command, *extra]).thread_priority == "normal"
        argv = [command, *extra, "--thread-priority", "auto"]
        assert build_parser(command).parse_args(argv).thread_priority == "auto"
    monkeypatch.setenv("PYROFLING_THREAD_PRIORITY", "realtime")
    with pytest.raises(SystemExit):
        build_parser("host").parse_args(["host"])
    assert "'realtime' is not one of auto, normal (check $PYROFLING_THREAD_PRIORITY" in capsys.readouterr().err


def test_the_encoder_slices_each_frame_over_the_cpus_the_host_may_use() -> None:
    """One slice thread per CPU the host process may use (at most 8), whoever makes the host; the flag wins."""
    from pyrofling.cli import build_parser
    from pyrofling.cli.host import host_config
    from pyrofling.server.encoder import MAX_DEFAULT_THREADS, EncoderConfig

    cpus = len(os.sched_getaffinity(0))
    assert EncoderConfig().threads == min(MAX_DEFAULT_THREADS, cpus)
    assert host_config(build_parser().parse_args(["host"])).encoder.threads == min(MAX_DEFAULT_THREADS, cpus)
    assert host_config(build_parser().parse_args(["host", "--encoder-threads", "3"])).encoder.threads == 3


def test_the_decoder_slices_each_picture_over_the_cpus_the_viewer_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """One slice thread per CPU the viewer may use (at most 8: one for a viewer held to one CPU); the flag wins."""
    from pyrofling.cli import build_parser
    from pyrofling.cli.view import viewer_config
    from pyrofling.client import codecs
    from pyrofling.client.config import ViewerConfig

    for cpus, threads in ((set(range(16)), 8), (set(range(6)), 6), ({3}, 1), ({0, 1}, 2)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda _pid, cpus=cpus: cpus)
        assert codecs.default_decode_threads() == threads
        assert ViewerConfig("127.0.0.1", 1).decode_threads == threads
        assert viewer_config(build_parser().parse_args(["view", "127.0.0.1:1"])).decode_threads == threads
    args = build_parser().parse_args(["view", "127.0.0.1:1", "--decode-threads", "3"])
    assert viewer_config(args).decode_threads == 3


@pytest.mark.io
def test_pair_takes_the_code_from_a_file_and_never_needs_it_in_argv(tmp_path: Path) -> None:
    from pyrofling.cli.pair import _code_from_file_or_prompt

    code = tmp_path / "code"
    code.write_text("k7dm-x3qa-pn2f\n")
    assert _code_from_file_or_prompt(code) == "k7dm-x3qa-pn2f"
    code.write_text("")
    assert _code_from_file_or_prompt(code) is None
    assert _code_from_file_or_prompt(None) is None  # no terminal here: nothing to ask on
    proc = subprocess.run(
        [sys.executable, "-m", "pyrofling", "pair", "pyro://127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if k != "PYROFLING_PASSWORD"},
    )
    assert proc.returncode == 2 and "it asks" in proc.stderr and "--code-file" in proc.stderr


def test_the_example_game_on_a_machine_without_opengl_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyrofling.capture.example_game as example_game

    def no_gl(_cfg: object) -> None:
        raise ImportError('Library "GL" not found.')  # what pyglet raises where Mesa is not installed

    monkeypatch.setattr(example_game, "run_game", no_gl)
    assert main(["example-game", "--headless", "--renderer", "gl", "--duration", "1"]) == 1
    err = capsys.readouterr().err
    assert 'Library "GL" not found' in err and "apt install libgl1 libegl1" in err


def test_the_example_game_starts_its_frames_just_in_time_unless_told_not_to() -> None:
    from pyrofling.cli import build_parser

    assert build_parser().parse_args(["example-game"]).just_in_time
    assert not build_parser().parse_args(["example-game", "--no-just-in-time"]).just_in_time
