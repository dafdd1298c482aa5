"""The command line as a new user meets it: each mistake a person makes gets one clear line, before any work.

Real processes where the behaviour is the process's (exit status, what it prints, signals), the parser
in-process where it is the parser's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import run, start_host, stop_host, until

from pyrofling.bench.stream import _wait_for_port, format_live, free_port
from pyrofling.capture import CaptureClient
from pyrofling.cli import build_parser, main
from pyrofling.cli.options import setup_logging
from pyrofling.client.viewer import Viewer, ViewerConfig
from pyrofling.core.viewer.connection import Reconnect


def pyrofling(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pyrofling", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, **(env or {})),
    )


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


# -- 1. the README's addresses reach the default host ------------------------------------------


@pytest.mark.io
def test_the_default_host_answers_on_both_loopbacks() -> None:
    assert build_parser().parse_args(["host"]).bind == "localhost"
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("IPv6 loopback is not configured here")

    async def scenario() -> list[int]:
        host, task = await start_host(bind="localhost", virtual_pad="none")
        shown = []
        for address in ("::1", "127.0.0.1"):
            viewer = Viewer(ViewerConfig(host=address, port=host.port or 0, duration_s=1.0))
            shown.append((await viewer.run())["frames_shown"])
        await stop_host(host, task)
        return shown

    assert all(n >= 15 for n in run(scenario))


@pytest.mark.io
def test_a_command_loads_only_what_it_runs_and_help_lists_them_all() -> None:
    """Every process the harness and the benches start pays for its imports: a relay loads no codec, a viewer no
    host, and the full list of commands is still there for ``--help`` and a mistyped name."""
    probe = (
        "import sys; from pyrofling.cli import build_parser; build_parser(sys.argv[1]); "
        "print(' '.join(m for m in ('av', 'numpy', 'pyrofling.server.host', 'pyrofling.client.viewer', "
        "'pyrofling.client.config', 'pyrofling.capture.client', 'pyrofling.bench.stream', 'pyrofling.core.host.state', "
        "'spake2') if m in sys.modules))"
    )
    loaded = {
        command: set(subprocess.run([sys.executable, "-c", probe, command], capture_output=True, text=True,
                                    check=True, timeout=60).stdout.split())
        for command in ("netsim", "view", "host")
    }  # fmt: skip
    assert loaded["netsim"] == set()
    assert (
        "pyrofling.client.viewer" in loaded["view"]
        and not {"pyrofling.server.host", "pyrofling.bench.stream"} & loaded["view"]
    )
    assert "pyrofling.server.host" in loaded["host"] and "pyrofling.bench.stream" not in loaded["host"]
    # Nor does a host load the viewer (through the gamepad flags both share) or a game's capture client.
    assert not {"pyrofling.client.viewer", "pyrofling.client.config", "pyrofling.capture.client"} & loaded["host"]
    # A viewer loads no host core (through the pairings it keeps), and neither side the PAKE before a pairing runs.
    assert "pyrofling.core.host.state" not in loaded["view"] and "spake2" not in loaded["view"] | loaded["host"]
    wrong = pyrofling("hots", timeout=60)
    assert wrong.returncode == 2 and "invalid choice: 'hots'" in wrong.stderr and "'netsim'" in wrong.stderr


# -- 2. a viewer that never had a stream says why and stops -------------------------------------


@pytest.mark.io
def test_a_viewer_with_nothing_to_connect_to_says_so_at_once() -> None:
    port = free_port()
    # It gives up on its own (it takes about a second; the wait's timeout is only a guard against trying forever).
    proc = pyrofling("view", f"pyro://127.0.0.1:{port}", "--headless", "--no-audio", timeout=20)
    assert proc.returncode == 1
    assert one_line(proc.stderr) == f"pyrofling view: cannot connect to 127.0.0.1 port {port}: connection refused"


def test_reconnecting_is_for_viewers_that_had_a_stream() -> None:
    r = Reconnect()
    assert r.after(streamed=False, auth_failed=False) is None  # never streamed: stop, say why
    r = Reconnect()
    assert r.after(streamed=True, auth_failed=False) == 0.25  # the host went away: follow it
    assert [r.after(streamed=False, auth_failed=False) for _ in range(4)] == [0.5, 1.0, 2.0, 2.0]  # backing off
    assert r.after(streamed=True, auth_failed=False) == 0.25  # back: the next outage starts small again
    # A refusal from a host it streamed from may be forged on the path: try again, slowly (never for good).
    assert r.after(streamed=True, auth_failed=True) == 5.0
    assert Reconnect().after(streamed=False, auth_failed=True) is None  # a wrong code typed just now: say so
    assert Reconnect(enabled=False).after(streamed=True, auth_failed=False) is None  # --no-reconnect


# -- 3. a display nobody answers on ------------------------------------------------------------


@pytest.mark.io
@pytest.mark.parametrize("command", [["view", "pyro://127.0.0.1:1"], ["demo", "--duration", "1"]])
def test_a_stale_display_is_one_line_that_suggests_headless(command: list[str]) -> None:
    proc = pyrofling(*command, env={"DISPLAY": ":4271"})  # no X server there
    assert proc.returncode == 2
    line = one_line(proc.stderr)
    assert "cannot open a window on display ':4271'" in line and "--headless" in line


# -- 4. output paths are checked before the work starts -----------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["view", "x:1", "--stats-json", "/nonexistent/dir/s.json"], "the directory /nonexistent/dir does not exist"),
        (["host", "--stats-json", "/proc/stats.json"], "cannot write in /proc"),
        (["bench", "fec", "--quick", "--plot", "/nonexistent/plot.png"], "does not exist"),
        (["bench", "fec", "--plot", "plot.svg"], "must end in .png"),
        (["view", "x:1", "--screenshot", "/"], "is a directory"),
        (["host", "--gamepad-trace", "/nonexistent/t.jsonl"], "does not exist"),
        (["example-game", "--stats-json", "/nonexistent/g.json"], "does not exist"),
    ],
)
def test_output_files_that_cannot_be_written_are_refused_at_once(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.io
@pytest.mark.parametrize("path", ["/proc/recording.mkv", "/nonexistent/recording.mkv"])
def test_a_recording_that_cannot_be_written_stops_the_host_before_it_streams(path: str) -> None:
    proc = pyrofling("host", "--port", "0", "--record", path, "--duration", "3", timeout=30)
    assert proc.returncode == 2 and "hosting" not in proc.stderr
    assert "--record" in one_line(proc.stderr)


# -- 5. the window viewer: "connecting", a summary at exit, SIGTERM keeps the statistics -------------


@pytest.mark.io
def test_the_window_viewer_stops_cleanly_on_sigterm_with_its_statistics_and_a_summary(
    xvfb: str, tmp_path: Path
) -> None:
    port = free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1", DISPLAY=xvfb)
    host = subprocess.Popen(
        [sys.executable, "-m", "pyrofling", "host", "-q", "--port", str(port), "--width", "320", "--height", "240",
         "--fps", "30", "--no-audio", "--virtual-pad", "none"],
        env=env,
    )  # fmt: skip
    stats = tmp_path / "viewer.json"
    try:
        _wait_for_port(port, host, timeout_s=30)  # a loaded machine may take a while to start the host
        view = subprocess.Popen(
            [sys.executable, "-m", "pyrofling", "view", f"pyro://127.0.0.1:{port}", "--no-audio", "--no-gamepad",
             "--stats-json", str(stats), "--stats-interval", "0.5"],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _shown(stats) < 30:
            time.sleep(0.2)
        view.send_signal(signal.SIGTERM)
        _, err = view.communicate(timeout=30)
    finally:
        host.send_signal(signal.SIGINT)
        host.wait(20)
    assert view.returncode == 0, err
    final = json.loads(stats.read_text())
    assert final["frames_shown"] >= 30 and final["rtt_ms"] is not None  # the HUD's ping has a value
    assert f"shown {final['frames_shown']} frames" in err


def _shown(path: Path) -> int:
    try:
        return int(json.loads(path.read_text()).get("frames_shown", 0))
    except (OSError, ValueError):
        return 0


@pytest.mark.io
def test_the_ping_is_known_while_streaming() -> None:
    async def scenario() -> float | None:
        host, task = await start_host(virtual_pad="none")
        viewer = Viewer(ViewerConfig(host="127.0.0.1", port=host.port or 0, duration_s=3.0))
        vtask = asyncio.create_task(viewer.run())
        await until(lambda: viewer.summary()["rtt_ms"] is not None, 5)
        rtt: float | None = viewer.summary()["rtt_ms"]
        assert viewer.connection is not None  # still the live connection's, not a banked one
        viewer.stop()
        await vtask
        await stop_host(host, task)
        return rtt

    rtt = run(scenario)
    assert rtt is not None and 0 < rtt < 1000  # milliseconds, a loopback round trip (even on a busy machine)


# -- 6. numbers out of range, and encoders that cannot start ----------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["host", "--port", "99999"], "99999 (port) is out of range 0..65535"),
        (["host", "--port", "-1"], "out of range 0..65535"),
        (["host", "--duration", "-1"], "out of range more than 0"),
        (["host", "--refresh-s", "0"], "out of range more than 0"),
        (["host", "--max-rate-mbits", "-1"], "out of range 0..100000"),
        (["netsim", "--upstream", "127.0.0.1:1", "--delay-ms", "-5"], "out of range 0..10000"),
        (["view", "x:1", "--duration", "0"], "out of range more than 0"),
        (["bench", "stream", "--duration", "-2"], "out of range 1..3600"),
    ],
)
def test_numbers_out_of_range_are_refused(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_an_unknown_preset_is_named_before_the_encoder_opens(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["host", "--preset", "bogus"]) == 2
    assert "unknown preset 'bogus' for libx264: use one of ultrafast" in capsys.readouterr().err


@pytest.mark.io
def test_nvenc_without_a_gpu_is_one_line_not_an_ffmpeg_dump() -> None:
    proc = pyrofling("host", "--port", "0", "--encoder", "h264_nvenc", "--duration", "2", timeout=60)
    assert proc.returncode == 1
    line = one_line(proc.stderr)
    assert "h264_nvenc did not start" in line and "NVIDIA GPU" in line and "avcodec_open2" not in line


# -- 7. raw files of the wrong size, and flags that contradict each other ----------------------------


@pytest.mark.io
@pytest.mark.parametrize("size", [640 * 360 * 3 // 2 * 3 + 100, 1000])
def test_a_raw_file_that_is_not_whole_frames_is_refused(tmp_path: Path, size: int) -> None:
    path = tmp_path / "frames.yuv"
    path.write_bytes(bytes(size))
    proc = pyrofling("host", "--port", "0", "--source", f"file:{path}", "--width", "640", "--height", "360",
                     "--duration", "2", "--no-audio", timeout=60)  # fmt: skip
    assert proc.returncode == 1
    line = one_line(proc.stderr)
    assert f"holds {size} bytes, not a whole number of 640x360 yuv420p frames of 345600 bytes" in line


def test_demo_refuses_a_loss_rate_it_would_ignore(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--loss", "3%", "--ge", "--headless"]) == 2
    assert "give --loss or --ge, not both" in capsys.readouterr().err


# -- 8. the small things -------------------------------------------------------------------------------


def _all_parsers() -> list[list[str]]:
    """Every command and bench, by name."""

    def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return dict(actions[0].choices) if actions else {}

    commands: list[list[str]] = [[]]
    for name, p in subcommands(build_parser()).items():
        commands.append([name])
        commands += [[name, b] for b in subcommands(p)]
    return commands


@pytest.mark.parametrize("command", _all_parsers(), ids=lambda c: " ".join(c) or "pyrofling")
def test_help_texts_show_percent_signs_once(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    out = capsys.readouterr().out
    assert "usage: pyrofling" in out and "%%" not in out


def test_the_demo_line_has_no_nan_before_the_first_picture() -> None:
    line = format_live([{}], 1.0)
    assert "nan" not in line and "latency     - ms" in line


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        (["netsim", "--upstream", "127.0.0.1:1"], logging.INFO),
        (["netsim", "--upstream", "127.0.0.1:1", "-v"], logging.DEBUG),
        (["-v", "netsim", "--upstream", "127.0.0.1:1"], logging.DEBUG),
        (["netsim", "--upstream", "127.0.0.1:1", "-q"], logging.WARNING),
        (["bench", "phase"], logging.WARNING),
        (["bench", "phase", "-v"], logging.INFO),
    ],
)
def test_verbosity_works_before_or_after_the_command(argv: list[str], level: int) -> None:
    args = build_parser().parse_args(argv)
    default = logging.WARNING if args.command == "bench" else logging.INFO
    setup_logging(args, default=default)
    assert logging.getLogger("pyrofling").level == level


def test_a_game_says_it_waits_for_a_host(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "pyrofling")
    client = CaptureClient(64, 64, path=str(tmp_path / "nobody-listens"), reconnect_s=0.01)
    try:
        for _ in range(3):
            frame = client.acquire()
            client.present(frame)
            time.sleep(0.02)
    finally:
        client.close()
    waits = [r.getMessage() for r in caplog.records if "waiting for a host" in r.getMessage()]
    assert waits == [f"capture: waiting for a host on {tmp_path / 'nobody-listens'} (pyrofling host --source capture)"]


@pytest.mark.io
def test_the_gamepad_client_does_not_claim_a_picture(caplog: pytest.LogCaptureFixture) -> None:
    from pyrofling.client.gamepad import GamepadConfig
    from pyrofling.wire import KickFlags

    caplog.set_level(logging.INFO, "pyrofling")

    async def scenario() -> None:
        host, task = await start_host(virtual_pad="none")
        pad = GamepadConfig(source="none")
        cfg = ViewerConfig(host="127.0.0.1", port=host.port or 0, flags=KickFlags.GAMEPAD, gamepad=pad, duration_s=0.5)
        await Viewer(cfg).run()
        await stop_host(host, task)

    run(scenario)
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("sending the gamepad to 127.0.0.1:") for m in said), said
    assert not any(m.startswith("streaming ") for m in said)  # no picture size it never receives
    joined = [m for m in said if "joined for" in m]
    assert joined and joined[0].endswith("joined for gamepad")


@pytest.mark.io
def test_example_game_prints_no_json_unless_asked(tmp_path: Path) -> None:
    args = ["example-game", "--headless", "--duration", "0.5", "--width", "64", "--height", "64",
            "--capture-socket", str(tmp_path / "none")]  # fmt: skip
    quiet = pyrofling(*args, env={"XDG_RUNTIME_DIR": str(tmp_path)})
    assert quiet.returncode == 0 and quiet.stdout == "" and "{" not in quiet.stderr
    assert "waiting for a host" in quiet.stderr and "example-game: " in quiet.stderr
    loud = pyrofling(*args, "--json", "-q")
    assert json.loads(loud.stdout)["frames"] > 0
